/* SPDX-License-Identifier: Apache-2.0 */
/*
 * writer: the tensors an encoder takes, made from a model's index
 * (writer.h).  The formats' writers call in here, so it asks nothing of
 * the registry above them (a model's writer: registry.h, ck_writer_of).
 */
#include "writer.h"

size_t ck_pieces_of(const ck_model *m, const ck_tensor *t, ck_piece *out)
{
    for (uint32_t k = 0; k < t->n_ext; k++) {
        const ck_extent *x = ck_tensor_ext(t, k);
        out[k] = (ck_piece){.src = m->sources[x->src], .off = x->off, .len = x->len};
    }
    return t->n_ext;
}

bool ck_pieces_are_extents(const ck_model *m, const ck_write_tensor *w, const ck_tensor *t)
{
    if (w->n_pieces != t->n_ext)
        return false;
    for (uint32_t k = 0; k < t->n_ext; k++) {
        const ck_extent *e = ck_tensor_ext(t, k);
        const ck_piece *p = &w->pieces[k];
        if (p->mem != NULL || p->src != m->sources[e->src] || p->off != e->off ||
            p->len != e->len)
            return false;
    }
    return true;
}

ck_write_tensor ck_write_unchanged(const ck_tensor *t, uint32_t id)
{
    return (ck_write_tensor){.orig_id = id, .unchanged = true, .name = t->name,
                             .name_len = t->name_len, .dtype = t->dtype, .dims = t->dims,
                             .ndim = t->ndim, .scalar_dims_zero = t->scalar_dims_zero};
}

ck_write_tensor ck_write_own(const ck_model *m, const ck_tensor *t, uint32_t id,
                             ck_piece **next)
{
    ck_write_tensor w = ck_write_unchanged(t, id);
    w.unchanged = false;
    w.pieces = *next;
    w.n_pieces = ck_pieces_of(m, t, *next);
    *next += w.n_pieces;
    return w;
}

uint64_t ck_pieces_len(const ck_write_tensor *t)
{
    uint64_t n = 0;
    for (size_t i = 0; i < t->n_pieces; i++)
        n += t->pieces[i].len;
    return n;
}
