/* SPDX-License-Identifier: Apache-2.0 */
/*
 * convert_plan: a model's tensors as a conversion writes them (see
 * convert_plan.h).
 */
#include "convert_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/name_map.h"
#include "../core/dtype.h"

/* A tensor whose bytes only the codec can assemble (a merged distributed
 * tensor's interleaved slices, a strided view): a byte source that reads
 * it through ck_model_read, so the writers take it as one piece like any
 * other. */
typedef struct tensor_source {
    ck_source base;             /* first: ck_source_close frees the whole */
    const ck_model *m;
    const ck_tensor *t;
} tensor_source;

static int tensor_read_at(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err)
{
    tensor_source *ts = (tensor_source *)src;
    long got = ck_model_read(ts->m, ts->t, buf, len, off, err);
    if (got < 0)
        return -1;
    if ((size_t)got != len)
        return ck_fail(err, EIO, "%s: short read of a merged tensor", ts->m->path);
    return 0;
}

static void tensor_destroy(ck_source *src)
{
    (void)src;
}

static const struct ck_source_ops tensor_ops = {.read_at = tensor_read_at,
                                                .destroy = tensor_destroy};

static ck_source *tensor_source_new(const ck_model *m, const ck_tensor *t, ck_error *err)
{
    tensor_source *ts = calloc(1, sizeof *ts);
    char *path = strdup(m->path);
    if (ts == NULL || path == NULL) {
        free(ts);
        free(path);
        ck_nomem(err, m->path);
        return NULL;
    }
    ts->base = (ck_source){.ops = &tensor_ops, .path = path, .size = t->nbytes, .fd = -1,
                           .wd = -1};
    ts->m = m;
    ts->t = t;
    return &ts->base;
}

void ck_convert_plan_free(ck_convert_plan *p)
{
    for (size_t i = 0; i < p->n_own; i++)
        ck_source_close(p->own[i]);
    for (size_t i = 0; p->names != NULL && i < p->n; i++)
        free(p->names[i]);
    free(p->names);
    free(p->own);
    free(p->w);
    free(p->pieces);
    *p = (ck_convert_plan){0};
}

int ck_convert_plan_build(const ck_model *m, ck_convert_plan *p, ck_error *err)
{
    const ck_index *ix = &m->index;
    size_t n_pieces = 0;
    for (size_t i = 0; i < ix->n_live; i++)
        n_pieces += ix->tensors[ix->live[i]].n_ext;
    *p = (ck_convert_plan){.n = ix->n_live};
    p->w = calloc(ix->n_live + 1, sizeof *p->w);
    p->pieces = calloc(n_pieces + 1, sizeof *p->pieces);
    p->own = calloc(ix->n_live + 1, sizeof *p->own);
    p->names = calloc(ix->n_live + 1, sizeof *p->names);
    if (p->w == NULL || p->pieces == NULL || p->own == NULL || p->names == NULL)
        return ck_nomem(err, m->path);
    ck_piece *next = p->pieces;
    for (size_t i = 0; i < ix->n_live; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        ck_write_tensor *w = &p->w[i];
        *w = ck_write_unchanged(t, CK_WRITE_NEW);
        w->unchanged = false; /* new bytes in OUT's format: IN's extents */
        w->pieces = next;
        if (t->dir_suffix != NULL || t->dir_src != NULL) {
            if ((p->names[i] = ck_tensor_shown_name(t)) == NULL)
                return ck_nomem(err, m->path);
            w->name = p->names[i];
            w->name_len = strlen(p->names[i]);
        }
        if (t->gather != NULL) {
            ck_source *src = tensor_source_new(m, t, err);
            if (src == NULL)
                return -1;
            p->own[p->n_own++] = src;
            *next = (ck_piece){.src = src, .len = t->nbytes};
            w->n_pieces = 1;
        } else {
            w->n_pieces = ck_pieces_of(m, t, next);
        }
        next += w->n_pieces;
        p->bytes += ck_pieces_len(w);
    }
    return 0;
}

int ck_convert_plan_check(const ck_convert_plan *p, const ck_model *m, const ck_target *tg,
                          const char *in, ck_error *err)
{
    const ck_index *ix = &m->index;
    ck_name_map seen;
    ck_name_map_init(&seen);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ix->n_live; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        char q[CK_QUOTE_BUF], why[160];
        ck_quote(q, t->name, t->name_len);
        /* The names OUT keeps: directories' as the mount shows them, or
         * the tensors' own. */
        const char *key = tg->by_dir_name ? t->dir_name : p->w[i].name;
        size_t len = tg->by_dir_name ? strlen(t->dir_name) : p->w[i].name_len;
        const char *refusal = tg->type_refusal(t->dtype, why, sizeof why);
        if (refusal == NULL)
            refusal = ck_shape_refusal(tg->shape, p->w[i].dtype, p->w[i].dims, p->w[i].ndim,
                                       why, sizeof why);
        const char *bad_name = tg->name_refusal ? tg->name_refusal(key, len) : NULL;
        if (t->part != CK_PART_WHOLE)
            rc = ck_fail(err, ENOTSUP, "%s: tensor '%s': a MindSpore map parameter's %s "
                         "cannot be converted", in, q, ck_tensor_part_name(t));
        else if (refusal != NULL)
            rc = ck_fail(err, ENOTSUP, "%s: tensor '%s': %s cannot hold it: %s", in, q,
                         tg->holder, refusal);
        else if (bad_name != NULL)
            rc = ck_fail(err, ENOTSUP, "%s: tensor '%s': %s", in, q, bad_name);
        else if (ck_name_map_get(&seen, key, len) != CK_NAME_MAP_NONE)
            rc = ck_fail(err, ENOTSUP, "%s: tensor '%s': another tensor has the same %s in "
                         "%s", in, q, tg->by_dir_name ? "directory name" : "name",
                         tg->holder);
        else if (ck_name_map_put(&seen, key, len, (uint32_t)i) < 0)
            rc = ck_nomem(err, in);
    }
    if (rc == 0 && tg->empty_refusal != NULL && ix->n_live == 0)
        rc = ck_fail(err, ENOTSUP, "%s: has no tensors, and %s", in, tg->empty_refusal);
    ck_name_map_free(&seen);
    return rc;
}
