/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_reader: a torch.save ZIP archive indexed (pt_reader.h).
 */
#define _GNU_SOURCE
#include "pt_reader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/dir_name.h"
#include "../core/model.h"
#include "pt_pickle.h"
#include "pt_leaf.h"
#include "pt_zip.h"


typedef struct reader {
    ck_model *m;
    ck_pt_info *info;           /* m's state: the zip, the records' data offsets */
    uint32_t *record;           /* each tensor's record, as they are added */
    size_t cap_record;
    ck_pt_numbers nums;         /* the numbers' values, until bound */
    ck_error *err;
} reader;

static const char *path_of(const reader *r)
{
    return r->m->path;
}

/* ---- what a file is ------------------------------------------------------ */

/* torch.save before 1.6: pickle protocol 2 of the magic number as LONG1
 * (torch/serialization.py, _legacy_save). */
static const unsigned char legacy_magic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                             0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

static int check_kind(reader *r)
{
    unsigned char head[sizeof legacy_magic] = {0};
    ck_source *src = r->m->sources[0];
    size_t n = src->size < sizeof head ? (size_t)src->size : sizeof head;
    if (ck_source_read(src, head, n, 0, r->err) < 0)
        return -1;
    if (n == sizeof head && memcmp(head, legacy_magic, n) == 0)
        return ck_fail(r->err, ENOTSUP, "%s: a PyTorch file from before 1.6 (a sequence of "
                       "pickles), which ckptfs does not read: load it and torch.save it "
                       "again with PyTorch 1.6 or later", path_of(r));
    if (!ck_zip_magic(head, n))
        return ck_fail(r->err, EINVAL, "%s: offset 0: not a PyTorch file (torch.save writes "
                       "a ZIP archive since 1.6)", path_of(r));
    return 0;
}

static const ck_zip_entry *record(const reader *r, const char *name, size_t len)
{
    return ck_zip_find(&r->info->z, name, len);
}

/* Record e's bytes start there (its local header read once). */
static int data_at(reader *r, const ck_zip_entry *e, uint64_t *off)
{
    ck_pt_info *info = r->info;
    size_t i = (size_t)(e - info->z.v);
    if (info->data_off[i] == UINT64_MAX &&
        ck_zip_data(r->m->sources[0], path_of(r), &info->z, e, &info->data_off[i], r->err) < 0)
        return -1;
    *off = info->data_off[i];
    return 0;
}

/* A small record read whole (byteorder, data.pkl); *buf malloc'd. */
static int read_record(reader *r, const ck_zip_entry *e, size_t max, unsigned char **buf)
{
    uint64_t off = 0;
    if (e->size > max)
        return ck_fail(r->err, EFBIG, "%s: %.*s: %" PRIu64 " bytes, more than ckptfs reads "
                       "(%zu)", path_of(r), (int)e->name_len, e->name, e->size, max);
    if (data_at(r, e, &off) < 0)
        return -1;
    if ((*buf = malloc(e->size ? (size_t)e->size : 1)) == NULL)
        return ck_nomem(r->err, path_of(r));
    return ck_source_read(r->m->sources[0], *buf, (size_t)e->size, off, r->err);
}

/* "byteorder" says "little", or is absent (files before PyTorch 1.10). */
static int check_byteorder(reader *r)
{
    const ck_zip_entry *e = record(r, "byteorder", 9);
    unsigned char *b = NULL;
    if (e == NULL)
        return 0;
    int rc = read_record(r, e, 16, &b);
    if (rc == 0)
        rc = ck_zip_check_byteorder(b, (size_t)e->size, path_of(r), r->err);
    free(b);
    return rc;
}

/* ---- tensors ------------------------------------------------------------- */

static int bad_tensor(reader *r, const ck_pt_leaf *l, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(r->err, EINVAL, "%s: data.pkl: offset %zu: tensor '%s': %s", path_of(r),
                   l->off, ck_quote(q, l->name, l->name_len), what);
}

/* A tensor added to the index, its storage's record (UINT32_MAX: none)
 * kept beside it. */
static ck_tensor *new_tensor(reader *r, const ck_pt_leaf *l, uint32_t rec)
{
    ck_index *ix = &r->m->index;
    if (ix->count == r->cap_record) {
        size_t cap = r->cap_record ? 2 * r->cap_record : 64;
        uint32_t *p = reallocarray(r->record, cap, sizeof *p);
        if (p == NULL) {
            ck_nomem(r->err, path_of(r));
            return NULL;
        }
        r->record = p;
        r->cap_record = cap;
    }
    long id = ix->count >= CK_MAX_TENSORS ? -1 : ck_index_add(ix);
    char *name = id < 0 ? NULL : ck_arena_strndup(&ix->arena, l->name, l->name_len);
    if (name == NULL) {
        ck_nomem(r->err, path_of(r));
        return NULL;
    }
    r->record[id] = rec;
    ck_tensor *t = &ix->tensors[id];
    t->name = name;
    t->name_len = (uint32_t)l->name_len;
    return t;
}

static int add_tensor(reader *r, const ck_pt_leaf *l)
{
    char rec[8 + 256];
    int rn = snprintf(rec, sizeof rec, "data/%.*s", (int)l->key_len, l->key);
    const ck_zip_entry *e = record(r, rec, (size_t)rn);
    uint64_t data = 0, nbytes = 0;
    if (e == NULL)
        return bad_tensor(r, l, "its storage's record is not in the archive");
    const char *why = ck_pt_view_check(l, e->size, &nbytes);
    if (why != NULL)
        return bad_tensor(r, l, why);
    if (data_at(r, e, &data) < 0)
        return -1;
    ck_tensor *t = new_tensor(r, l, (uint32_t)(e - r->info->z.v));
    int64_t *dims = t == NULL ? NULL
                              : ck_arena_alloc(&r->m->index.arena, (l->ndim ? l->ndim : 1) *
                                                                       sizeof *dims);
    if (dims == NULL)
        return ck_nomem(r->err, path_of(r));
    memcpy(dims, l->sizes, l->ndim * sizeof *dims);
    t->dims = dims;
    t->ndim = l->ndim;
    t->dtype = l->dtype;
    t->type_name = l->type_name;
    t->nbytes = nbytes;
    t->rec_off = data;
    t->rec_end = data + e->size;
    if (ck_pt_place_view(&r->m->index.arena, t, l, 0, data, &why) == 0)
        return 0;
    return why != NULL ? bad_tensor(r, l, why) : ck_nomem(r->err, path_of(r));
}

/* ---- numbers ------------------------------------------------------------- */

static int add_number(reader *r, const ck_pt_leaf *l)
{
    ck_tensor *t = new_tensor(r, l, UINT32_MAX);
    return t == NULL ? -1 : ck_pt_number_add(&r->nums, r->m, t, l, r->err);
}

static int on_leaf(void *ctx, const ck_pt_leaf *l, ck_error *err)
{
    (void)err;
    reader *r = ctx;
    return l->kind == CK_PT_TENSOR ? add_tensor(r, l) : add_number(r, l);
}

static void make_notes(ck_pt_info *info, const ck_pt_walk *w)
{
    if (w->skipped == 0)
        return;
    char q[CK_QUOTE_BUF];
    const char *first = w->first_skipped ? w->first_skipped : "";
    snprintf(info->notes, sizeof info->notes, ", %zu value%s neither tensors nor numbers "
             "not shown (the first: '%s')", w->skipped, w->skipped == 1 ? "" : "s",
             ck_quote(q, first, strlen(first)));
}

/* ---- the format ---------------------------------------------------------- */

static int pt_walk(reader *r)
{
    const ck_zip_entry *e = record(r, "data.pkl", 8);
    unsigned char *pkl = NULL;
    char *where = NULL;
    ck_pt_walk w = {0};
    if (e == NULL)
        return ck_fail(r->err, EINVAL, "%s: no data.pkl record: a ZIP archive, but not one "
                       "torch.save wrote", path_of(r));
    int rc = read_record(r, e, CK_PT_PICKLE_MAX_BYTES, &pkl);
    if (rc == 0 && asprintf(&where, "%s: data.pkl", path_of(r)) < 0) {
        where = NULL;
        rc = ck_nomem(r->err, path_of(r));
    }
    if (rc == 0)
        rc = ck_pt_pickle_walk(pkl, (size_t)e->size, where, false, on_leaf, r, &w, r->err);
    if (rc == 0)
        make_notes(r->info, &w);
    ck_pt_walk_free(&w);
    free(where);
    free(pkl);
    return rc;
}

/* The records beside data.pkl and the storages (version, byteorder,
 * .data/serialization_id...): a save lays the file out again with them
 * copied, so their local headers are checked now, not at the save. */
static int check_others(reader *r)
{
    const ck_zip *z = &r->info->z;
    for (size_t i = 0; i < z->n; i++) {
        uint64_t at = 0;
        const ck_zip_entry *e = &z->v[i];
        if ((e->name_len <= 5 || memcmp(e->name, "data/", 5) != 0) && data_at(r, e, &at) < 0)
            return -1;
    }
    return 0;
}

typedef struct span {
    uint64_t begin, end;        /* its local header to the end of its descriptor */
    size_t i;
} span;

static int by_begin(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Every record's bytes, from its local header (name, extra field) through
 * its data and its data descriptor if it really has one: where that
 * descriptor's CRC-32 is (a save patches it there, else in the local
 * header), and whether two records overlap (one's local header hidden in
 * another's extra field or bytes, say).
 *
 * Overlapping records are not refused: torch.load reads them (each
 * record by its central directory entry), and so does ckptfs.  But a
 * record's bytes are then not its own, and patching one in place would
 * change another: such a file is always laid out anew at a save
 * (pt_writer.c, patchable), every record copied into bytes of its own. */
static int check_extents(reader *r)
{
    ck_pt_info *info = r->info;
    const ck_zip *z = &info->z;
    span *v = malloc((z->n ? z->n : 1) * sizeof *v);
    info->desc_crc = malloc((z->n ? z->n : 1) * sizeof *info->desc_crc);
    if (v == NULL || info->desc_crc == NULL) {
        free(v);
        return ck_nomem(r->err, path_of(r));
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < z->n; i++) {
        uint64_t data = 0;
        v[i] = (span){.begin = z->v[i].header_off, .i = i};
        rc = data_at(r, &z->v[i], &data);
        if (rc == 0)
            rc = ck_zip_extent(r->m->sources[0], path_of(r), z, &z->v[i], data, &v[i].end,
                               &info->desc_crc[i], r->err);
    }
    if (rc == 0 && z->n > 1)
        qsort(v, z->n, sizeof *v, by_begin);
    for (size_t k = 1; rc == 0 && k < z->n; k++)
        if (v[k].begin < v[k - 1].end)
            info->overlap = true;
    free(v);
    return rc;
}

/* Which tensors are their storage alone: the whole record, row-major, no
 * other tensor on it.  A save may rewrite such a record in place. */
static int find_alone(reader *r)
{
    const ck_index *ix = &r->m->index;
    ck_pt_info *info = r->info;
    uint32_t *users = calloc(info->z.n ? info->z.n : 1, sizeof *users);
    info->alone = calloc(ix->count ? ix->count : 1, 1);
    if (users == NULL || info->alone == NULL) {
        free(users);
        return ck_nomem(r->err, path_of(r));
    }
    for (size_t i = 0; i < ix->count; i++)
        if (r->record[i] != UINT32_MAX)
            users[r->record[i]]++;
    for (size_t i = 0; i < ix->count; i++) {
        const ck_tensor *t = &ix->tensors[i];
        uint32_t k = r->record[i];
        info->alone[i] = k != UINT32_MAX && users[k] == 1 && t->gather == NULL &&
                         t->nbytes == info->z.v[k].size &&
                         (t->nbytes == 0 || t->ext0.off == info->data_off[k]);
    }
    free(users);
    return 0;
}

static int pt_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    (void)o;
    reader r = {.m = m, .nums = CK_PT_NUMBERS_INIT, .err = err};
    if ((r.info = calloc(1, sizeof *r.info)) == NULL)
        return ck_nomem(err, m->path);
    m->state = r.info;
    ck_pt_info *info = r.info;
    int rc = check_kind(&r);
    if (rc == 0)
        rc = ck_zip_read(m->sources[0], m->path, &info->z, err);
    if (rc == 0 && (info->data_off = malloc((info->z.n ? info->z.n : 1) *
                                            sizeof *info->data_off)) == NULL)
        rc = ck_nomem(err, m->path);
    for (size_t i = 0; rc == 0 && i < info->z.n; i++)
        info->data_off[i] = UINT64_MAX;
    if (rc == 0)
        rc = check_byteorder(&r);
    if (rc == 0)
        rc = pt_walk(&r);
    if (rc == 0)
        rc = ck_pt_numbers_bind(&r.nums, m, err);
    if (rc == 0)
        rc = check_others(&r);
    if (rc == 0)
        rc = check_extents(&r);
    if (rc == 0)
        rc = find_alone(&r);
    if (rc == 0) {
        info->record = r.record; /* the state's now */
        r.record = NULL;
    }
    ck_pt_numbers_close(&r.nums);
    free(r.record);
    return rc;
}

static void pt_free_state(void *state)
{
    ck_pt_info *info = state;
    if (info == NULL)
        return;
    ck_zip_free(&info->z);
    free(info->data_off);
    free(info->desc_crc);
    free(info->record);
    free(info->alone);
    free(info);
}

const char *ck_pt_model_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    (void)m;
    if (t != NULL && t->type_name != NULL)
        return t->type_name;
    const char *name = ck_pt_type_name(dt);
    return name != NULL ? name : dt->ms_name;
}

static bool pt_is_data_file(const ck_model *m, uint32_t i)
{
    (void)m;
    (void)i;
    return false; /* its one other source holds the numbers, decoded */
}

static const char *pt_notes(const ck_model *m)
{
    const ck_pt_info *info = m->state;
    return info != NULL ? info->notes : "";
}

/* In a run directory, a .bin is more often an ONNX model's external data
 * or another blob: only Hugging Face's pytorch_model*.bin is a checkpoint
 * there (a .bin mounted by name is read as PyTorch's). */
static bool pt_in_run(const char *file)
{
    size_t n = strlen(file);
    return n < 4 || strcmp(file + n - 4, ".bin") != 0 ||
           strncmp(file, "pytorch_model", 13) == 0;
}

const ck_format ck_format_pytorch = {
    .name = "pytorch",
    .title = "PyTorch",
    .extension = ".pt",
    .also = (const char *const[]){".pth", ".bin", NULL},
    .in_run = pt_in_run,
    .creatable = true,
    .open = pt_open,
    .free_state = pt_free_state,
    .type_name = ck_pt_model_type_name,
    .is_data_file = pt_is_data_file,
    .notes = pt_notes,
};
