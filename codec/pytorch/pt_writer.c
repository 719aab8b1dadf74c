/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_writer: a torch.save file rewritten with new values in place
 * (pt_writer.h).
 */
#include "pt_writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../core/dir_name.h"
#include "../core/le_bytes.h"
#include "pt_reader.h"

/* One change to the file: a record's new bytes (w), or a CRC-32 field. */
typedef struct patch {
    uint64_t at, len;
    const ck_write_tensor *w;   /* NULL: the 4 bytes of crc */
    uint32_t crc;
} patch;

typedef struct writer {
    const ck_model *m;
    const ck_pt_info *info;
    const ck_write_tensor *tensors;
    size_t n;
    patch *patches;
    size_t n_patches;
    ck_sink *s;
    ck_error *err;
} writer;

static int refuse(writer *w, const ck_write_tensor *t, const char *why)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(w->err, ENOTSUP, "%s: tensor '%s': %s", w->m->path,
                   ck_quote(q, t->name, t->name_len), why);
}

static bool same_shape(const ck_write_tensor *t, const ck_tensor *o)
{
    return t->dtype == o->dtype && t->ndim == o->ndim &&
           (t->ndim == 0 || memcmp(t->dims, o->dims, t->ndim * sizeof *t->dims) == 0);
}

/* The tree is the file's tensors, each where it was, under its name, of
 * its type and shape; the edited ones alone on their storage. */
static int check_in_place(writer *w)
{
    const ck_index *ix = &w->m->index;
    static const char structure[] = "ckptfs saves a PyTorch file's values in place only: "
                                    "renaming, adding, removing, retyping or reshaping "
                                    "tensors is not supported yet";
    for (size_t i = 0; i < w->n; i++) {
        const ck_write_tensor *t = &w->tensors[i];
        if (i >= ix->n_live || t->orig_id != ix->live[i])
            return refuse(w, t, structure);
        if (t->unchanged)
            continue;
        const ck_tensor *o = &ix->tensors[t->orig_id];
        if (t->name_len != o->name_len || memcmp(t->name, o->name, o->name_len) != 0 ||
            !same_shape(t, o))
            return refuse(w, t, structure);
        if (!w->info->alone[t->orig_id])
            return refuse(w, t, "it shares its storage with another tensor or views part of "
                          "it (tied weights, a slice, a transpose): writing such an edit "
                          "back is not supported yet");
    }
    if (w->n != ix->n_live) {
        char q[CK_QUOTE_BUF];
        const ck_tensor *gone = &ix->tensors[ix->live[w->n < ix->n_live ? w->n : 0]];
        return ck_fail(w->err, ENOTSUP, "%s: tensor '%s': %s", w->m->path,
                       ck_quote(q, gone->name, gone->name_len), structure);
    }
    return 0;
}

/* The CRC-32 of a tensor's new bytes, read once before they are written
 * (a local header holds it before them). */
static int crc_of(writer *w, const ck_write_tensor *t, uint32_t *crc)
{
    unsigned char *buf = malloc(CK_SINK_BUF);
    if (buf == NULL)
        return ck_nomem(w->err, w->m->path);
    uLong c = crc32(0, Z_NULL, 0);
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < t->n_pieces; k++) {
        const ck_piece *p = &t->pieces[k];
        for (uint64_t at = 0; rc == 0 && at < p->len; at += CK_SINK_BUF) {
            size_t len = p->len - at < CK_SINK_BUF ? (size_t)(p->len - at) : CK_SINK_BUF;
            const unsigned char *b = buf;
            if (p->mem != NULL)
                b = (const unsigned char *)p->mem + at;
            else
                rc = ck_source_read(p->src, buf, len, p->off + at, w->err);
            if (rc == 0)
                c = crc32(c, b, (uInt)len);
        }
    }
    free(buf);
    *crc = (uint32_t)c;
    return rc;
}

static int add_patch(writer *w, patch p)
{
    patch *v = reallocarray(w->patches, w->n_patches + 1, sizeof *v);
    if (v == NULL)
        return ck_nomem(w->err, w->m->path);
    w->patches = v;
    w->patches[w->n_patches++] = p;
    return 0;
}

/* Tensor t's record: its bytes, and its CRC where the file keeps it. */
static int patch_record(writer *w, const ck_write_tensor *t)
{
    uint32_t k = w->info->record[t->orig_id], crc = 0;
    const ck_zip_entry *e = &w->info->z.v[k];
    uint64_t data = w->info->data_off[k], end = data + e->size;
    if (crc_of(w, t, &crc) < 0 ||
        add_patch(w, (patch){.at = data, .len = e->size, .w = t}) < 0 ||
        add_patch(w, (patch){.at = e->central_off + CK_ZIP_CENTRAL_CRC, .len = 4, .crc = crc}) < 0)
        return -1;
    if (!(e->flags & CK_ZIP_DESCRIPTOR))
        return add_patch(w, (patch){.at = e->header_off + CK_ZIP_LOCAL_CRC, .len = 4,
                                    .crc = crc});
    /* The descriptor: its signature is optional (APPNOTE 4.3.9.3). */
    unsigned char sig[4];
    if (ck_source_read(w->m->sources[0], sig, 4, end, w->err) < 0)
        return -1;
    uint64_t at = end + (ck_le32(sig) == CK_ZIP_DESCRIPTOR_SIG ? 4 : 0);
    return add_patch(w, (patch){.at = at, .len = 4, .crc = crc});
}

static int by_place(const void *a, const void *b)
{
    const patch *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* The file copied, the patches written over their places. */
static int write_patched(writer *w)
{
    ck_source *src = w->m->sources[0];
    uint64_t pos = 0;
    if (w->n_patches > 0)
        qsort(w->patches, w->n_patches, sizeof *w->patches, by_place);
    for (size_t i = 0; i < w->n_patches; i++) {
        const patch *p = &w->patches[i];
        unsigned char crc[4];
        if (p->at < pos || p->len > src->size - p->at)
            return ck_fail(w->err, EIO, "%s: offset %llu: the records overlap", w->m->path,
                           (unsigned long long)p->at); /* the reader's checks exclude it */
        if (ck_sink_copy(w->s, src, pos, p->at - pos) < 0)
            return -1;
        if (p->w == NULL) {
            ck_put_le32(crc, p->crc);
            if (ck_sink_write(w->s, crc, 4) < 0)
                return -1;
        }
        for (size_t k = 0; p->w != NULL && k < p->w->n_pieces; k++)
            if (ck_sink_piece(w->s, &p->w->pieces[k], 0, p->w->pieces[k].len) < 0)
                return -1;
        pos = p->at + p->len;
    }
    return ck_sink_copy(w->s, src, pos, src->size - pos);
}

static int pt_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                     ck_commit_group *g, ck_error *err)
{
    ck_sink s = {.fd = g->files[0].fd, .path = g->files[0].target, .err = err,
                 .progress = g->progress};
    writer w = {.m = m, .info = ck_pt_info_of(m), .tensors = tensors, .n = n, .s = &s,
                .err = err};
    int rc = check_in_place(&w);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!tensors[i].unchanged)
            rc = patch_record(&w, &tensors[i]);
    if (rc == 0 && (s.buf = malloc(CK_SINK_BUF)) == NULL)
        rc = ck_nomem(err, m->path);
    if (rc == 0 && (rc = ck_sink_wrap(&s, &m->env)) == 0) {
        rc = write_patched(&w);
        if (rc == 0)
            rc = ck_sink_end(&s);
    }
    ck_sink_drop(&s);
    free(s.buf);
    free(w.patches);
    return rc;
}

/* A type is its storage class: one ckptfs type each. */
static bool pt_same_type(const ck_dtype *a, const ck_dtype *b)
{
    return a == b;
}

const ck_writer ck_pytorch_writer = {
    .encode = pt_encode,
    .in_tree_order = true,
    .same_type = pt_same_type,
    .shape = &ck_shape_pb,
};
