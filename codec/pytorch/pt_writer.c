/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_writer: a torch.save file saved back, patched in place or laid out
 * again, and new files (pt_writer.h).
 */
#define _GNU_SOURCE
#include "pt_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../core/dir_name.h"
#include "../core/le_bytes.h"
#include "pt_pickle.h"
#include "pt_reader.h"
#include "pt_repickle.h"
#include "pt_zip_writer.h"

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

static bool same_shape(const ck_write_tensor *t, const ck_tensor *o)
{
    return t->dtype == o->dtype && t->ndim == o->ndim &&
           (t->ndim == 0 || memcmp(t->dims, o->dims, t->ndim * sizeof *t->dims) == 0);
}

/* Whether the tree is the file's tensors, each where it was, under its
 * name, of its type and shape, the edited ones alone on their storage:
 * then the file is patched, else laid out anew.  Records that overlap
 * are never patched in place (a patch of one would change the other),
 * but a tree with no edit patches nothing: it is copied as it is, so an
 * unchanged tree still saves to the identical file. */
static bool patchable(const writer *w)
{
    const ck_index *ix = &w->m->index;
    if (w->info == NULL || w->n != ix->n_live)
        return false;
    for (size_t i = 0; i < w->n; i++) {
        const ck_write_tensor *t = &w->tensors[i];
        if (t->orig_id != ix->live[i])
            return false;
        if (t->unchanged)
            continue;
        const ck_tensor *o = &ix->tensors[t->orig_id];
        if (w->info->overlap || t->name_len != o->name_len ||
            memcmp(t->name, o->name, o->name_len) != 0 || !same_shape(t, o) ||
            !w->info->alone[t->orig_id])
            return false;
    }
    return true;
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

/* Tensor t's record: its bytes, and its CRC where the file keeps it: the
 * central directory, the data descriptor when the reader found one
 * (pt_reader.c, check_extents), and the local header when there is none,
 * or when it holds the CRC beside the descriptor. */
static int patch_record(writer *w, const ck_write_tensor *t)
{
    uint32_t k = w->info->record[t->orig_id], crc = 0;
    const ck_zip_entry *e = &w->info->z.v[k];
    uint64_t data = w->info->data_off[k], desc = w->info->desc_crc[k];
    if (crc_of(w, t, &crc) < 0 ||
        add_patch(w, (patch){.at = data, .len = e->size, .w = t}) < 0 ||
        add_patch(w, (patch){.at = e->central_off + CK_ZIP_CENTRAL_CRC, .len = 4, .crc = crc}) < 0)
        return -1;
    unsigned char local[4];
    if (ck_source_read(w->m->sources[0], local, 4, e->header_off + CK_ZIP_LOCAL_CRC, w->err) < 0)
        return -1;
    if ((desc == UINT64_MAX || (e->crc != 0 && ck_le32(local) == e->crc)) &&
        add_patch(w, (patch){.at = e->header_off + CK_ZIP_LOCAL_CRC, .len = 4, .crc = crc}) < 0)
        return -1;
    return desc == UINT64_MAX ? 0 : add_patch(w, (patch){.at = desc, .len = 4, .crc = crc});
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

/* ---- a new layout --------------------------------------------------------- */

/* Whether t's bytes are its original tensor's extents, as they are. */
static bool raw_view(const writer *w, const ck_write_tensor *t)
{
    return t->unchanged ||
           ck_pieces_are_extents(w->m, t, &w->m->index.tensors[t->orig_id]);
}

/* Whether tree tensor t is its original, values, type and shape (maybe
 * renamed, or given as its own bytes by a re-encode): it keeps its
 * storage and view, shared as they were.  A number is written as it was. */
static bool kept_view(const writer *w, const ck_write_tensor *t)
{
    const ck_tensor *o = &w->m->index.tensors[t->orig_id];
    return w->info->record[t->orig_id] != CK_PT_NONE && raw_view(w, t) &&
           (t->unchanged || same_shape(t, o));
}

/* The name of the archive's top directory for a new file: the file's name
 * without its extension, as torch.save names it. */
static char *new_top(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    return strndup(n ? base : "archive", n ? n : 7);
}

/* The original's records that are neither data.pkl nor storages, before
 * (front) or after its first storage, copied as they were. */
static int copy_extras(writer *w, ck_zip_out *z, bool front)
{
    const ck_zip *zip = &w->info->z;
    uint64_t first = UINT64_MAX;
    for (size_t i = 0; i < zip->n; i++)
        if (zip->v[i].name_len > 5 && memcmp(zip->v[i].name, "data/", 5) == 0 &&
            zip->v[i].header_off < first)
            first = zip->v[i].header_off;
    /* In the file's order: by local header. */
    uint64_t last = 0;
    for (;;) {
        const ck_zip_entry *next = NULL;
        for (size_t i = 0; i < zip->n; i++) {
            const ck_zip_entry *e = &zip->v[i];
            bool storage = e->name_len > 5 && memcmp(e->name, "data/", 5) == 0;
            bool pkl = e->name_len == 8 && memcmp(e->name, "data.pkl", 8) == 0;
            if (storage || pkl || (e->header_off < first) != front ||
                (last && e->header_off <= last) || (next && next->header_off < e->header_off))
                continue;
            next = e;
        }
        if (next == NULL)
            return 0;
        uint64_t at = 0;
        if (ck_zip_data(w->m->sources[0], w->m->path, zip, next, &at, w->err) < 0 ||
            ck_zip_out_begin(z, next->name, next->name_len, next->size) < 0 ||
            ck_zip_out_copy(z, w->m->sources[0], at, next->size) < 0 ||
            ck_zip_out_end(z, next->crc, next->size) < 0)
            return -1;
        last = next->header_off + 1;
    }
}

static int by_key_text(const void *a, const void *b)
{
    char x[16], y[16];
    snprintf(x, sizeof x, "%u", *(const uint32_t *)a);
    snprintf(y, sizeof y, "%u", *(const uint32_t *)b);
    return strcmp(x, y);
}

/* Storage k: an original record copied, or a tensor's new bytes. */
static int write_storage(writer *w, ck_zip_out *z, const ck_pt_repickle *rp, uint32_t k)
{
    const ck_pt_storage *st = &rp->storages[k];
    char name[24];
    int nl = snprintf(name, sizeof name, "data/%u", k);
    if (st->record != CK_PT_NONE) {
        const ck_zip_entry *e = &w->info->z.v[st->record];
        if (ck_zip_out_begin(z, name, (size_t)nl, e->size) < 0 ||
            ck_zip_out_copy(z, w->m->sources[0], w->info->data_off[st->record], e->size) < 0)
            return -1;
        return ck_zip_out_end(z, e->crc, e->size);
    }
    const ck_write_tensor *t = &w->tensors[st->out];
    uint64_t size = ck_pieces_len(t);
    if (ck_zip_out_begin(z, name, (size_t)nl, size) < 0)
        return -1;
    w->s->crc_on = true; /* the CRC goes in the descriptor, after the bytes */
    w->s->crc = crc32(0, Z_NULL, 0);
    for (size_t p = 0; p < t->n_pieces; p++)
        if (ck_zip_out_piece(z, &t->pieces[p]) < 0)
            return -1;
    w->s->crc_on = false;
    return ck_zip_out_end(z, (uint32_t)w->s->crc, size);
}

static int write_archive(writer *w, const ck_pt_repickle *rp, const char *top)
{
    ck_zip_out z = {.s = w->s, .top = top};
    uint32_t *order = malloc((rp->n_storages ? rp->n_storages : 1) * sizeof *order);
    int rc = order == NULL ? ck_nomem(w->err, w->m->path) : 0;
    for (uint32_t k = 0; rc == 0 && k < rp->n_storages; k++)
        order[k] = k;
    if (rc == 0 && rp->n_storages > 0) /* torch.save writes them in sorted(keys) order */
        qsort(order, rp->n_storages, sizeof *order, by_key_text);
    if (rc == 0)
        rc = ck_zip_out_record(&z, "data.pkl", rp->pkl.p, rp->pkl.len);
    if (rc == 0)
        rc = w->info != NULL ? copy_extras(w, &z, true)
                             : ck_zip_out_record(&z, "byteorder", "little", 6);
    for (size_t i = 0; rc == 0 && i < rp->n_storages; i++)
        rc = write_storage(w, &z, rp, order[i]);
    if (rc == 0)
        rc = w->info != NULL ? copy_extras(w, &z, false) : ck_zip_out_record(&z, "version", "3\n", 2);
    if (rc == 0)
        rc = ck_zip_out_finish(&z);
    ck_zip_out_free(&z);
    free(order);
    return rc;
}

/* The original data.pkl, run again: the same nodes the reader walked. */
static int original_pickle(writer *w, ck_pickle *pk, unsigned char **buf)
{
    const ck_zip *zip = &w->info->z;
    const ck_zip_entry *e = ck_zip_find(zip, "data.pkl", 8);
    uint64_t at = 0;
    if (e == NULL || e->size > CK_PT_PICKLE_MAX_BYTES)
        return ck_fail(w->err, EIO, "%s: data.pkl is not what it was", w->m->path);
    if (ck_zip_data(w->m->sources[0], w->m->path, zip, e, &at, w->err) < 0)
        return -1;
    if ((*buf = malloc(e->size ? (size_t)e->size : 1)) == NULL)
        return ck_nomem(w->err, w->m->path);
    if (ck_source_read(w->m->sources[0], *buf, (size_t)e->size, at, w->err) < 0)
        return -1;
    return ck_pt_pickle_run(*buf, (size_t)e->size, w->m->path, pk, w->err);
}

static int write_new(writer *w)
{
    const ck_pt_info *info = w->info;
    ck_pickle pk = {0};
    unsigned char *buf = NULL;
    ck_pt_out *out = calloc(w->n + 1, sizeof *out);
    ck_pt_repickle rp = {.orig = info ? &pk : NULL, .n_leaves = info ? w->m->index.count : 0,
                         .n_records = info ? info->z.n : 0, .zip = info ? &info->z : NULL,
                         .out = out, .n_out = w->n,
                         .path = w->m->path};
    char *top = info ? strndup(info->z.top, info->z.top_len) : new_top(w->m->path);
    int rc = out == NULL || top == NULL ? ck_nomem(w->err, w->m->path) : 0;
    for (size_t i = 0; rc == 0 && i < w->n; i++) {
        ck_write_tensor t = w->tensors[i];
        uint32_t orig = info && t.orig_id != CK_WRITE_NEW ? t.orig_id : CK_PT_NONE;
        char q[CK_QUOTE_BUF];
        if (t.unchanged) /* named, typed and shaped as indexed */
            t = ck_write_unchanged(&w->m->index.tensors[t.orig_id], t.orig_id);
        out[i] = (ck_pt_out){.name = t.name, .name_len = t.name_len, .orig = orig,
                             .record = CK_PT_NONE, .dtype = t.dtype, .dims = t.dims,
                             .ndim = t.ndim};
        if (orig != CK_PT_NONE && kept_view(w, &w->tensors[i]))
            out[i].record = info->record[orig];
        else if (orig != CK_PT_NONE && w->m->index.tensors[orig].gather != NULL &&
                 raw_view(w, &w->tensors[i])) /* its extents are not its bytes */
            rc = ck_fail(w->err, ENOTSUP, "%s: tensor '%s': a strided view given a new type "
                         "or shape without new values: write its out too", w->m->path,
                         ck_quote(q, t.name, t.name_len));
        if (!ck_utf8_valid(t.name, t.name_len))
            rc = ck_fail(w->err, EINVAL, "%s: tensor '%s': a PyTorch key is a Python str: "
                         "UTF-8 without NUL", w->m->path, ck_quote(q, t.name, t.name_len));
    }
    if (rc == 0 && info != NULL)
        rc = original_pickle(w, &pk, &buf);
    if (rc == 0)
        rc = ck_pt_repickle_run(&rp, w->err);
    if (rc == 0)
        rc = write_archive(w, &rp, top);
    ck_pt_repickle_free(&rp);
    ck_pickle_free(&pk);
    free(buf);
    free(out);
    free(top);
    return rc;
}

static int pt_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                     ck_commit_group *g, ck_error *err)
{
    ck_sink s = {.fd = g->files[0].fd, .path = g->files[0].target, .err = err,
                 .progress = g->progress};
    writer w = {.m = m, .info = m->state, .tensors = tensors, .n = n, .s = &s, .err = err};
    bool patch = patchable(&w);
    int rc = 0;
    for (size_t i = 0; patch && rc == 0 && i < n; i++)
        if (!tensors[i].unchanged)
            rc = patch_record(&w, &tensors[i]);
    if (rc == 0 && (s.buf = malloc(CK_SINK_BUF)) == NULL)
        rc = ck_nomem(err, m->path);
    if (rc == 0 && (rc = ck_sink_wrap(&s, &m->env)) == 0) {
        rc = patch ? write_patched(&w) : write_new(&w);
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
    .own_order = true, /* a tensor moved goes into its dict: verified by name */
    .same_type = pt_same_type,
    .shape = &ck_shape_pb,
};

static const char *pt_type_refusal(const ck_dtype *dt, char *buf, size_t cap)
{
    if (ck_pt_storage_class(dt) != NULL)
        return NULL;
    snprintf(buf, cap, "PyTorch has no storage type for %s", ck_dtype_canonical_name(dt));
    return buf;
}

/* A key of the state dict: a Python str, decoded from UTF-8. */
static const char *pt_name_refusal(const char *name, size_t len)
{
    return ck_utf8_valid(name, len) ? NULL : "a PyTorch key is a Python str: UTF-8 without NUL";
}

const ck_target ck_pytorch_target = {
    .holder = "a PyTorch file",
    .type_refusal = pt_type_refusal,
    .name_refusal = pt_name_refusal,
    .shape = &ck_shape_pb,
};
