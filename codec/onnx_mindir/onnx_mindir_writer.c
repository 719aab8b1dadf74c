/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* qsort_r */
#include "onnx_mindir_writer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/name_map.h"
#include "onnx_mindir_reader.h"
#include "../pb/pb_wire.h"
#include "../io/commit_group.h"

/* Typed varint fields are re-encoded in memory; past this a changed
 * tensor is written as raw_data instead (exporters only use typed fields
 * for small tensors). */
#define TYPED_MEM_MAX (64u << 20)

typedef struct membuf {
    unsigned char *p;
    size_t len, cap;
} membuf;

/* One TensorProto field as written: pre, then data bytes from pieces, then
 * post. */
typedef struct enc {
    membuf pre, post;
    const ck_piece *pieces;
    size_t n_pieces;
    uint64_t data_len;          /* bytes of pieces inside the field */
    unsigned char *owned;       /* a typed field encoded in memory */
    bool external;              /* the pieces go to a data file instead: */
    bool ext_moved;             /* at a new place (else offset and length are kept) */
    bool ext_write;             /* false when those bytes are there already */
    uint32_t ext_file;          /* writer.files index */
    uint64_t ext_off, ext_len;
} enc;

enum { E_VARINT, E_TENSOR, E_DROP, E_INSERT, E_INPUTS };

typedef struct edit {
    uint64_t off, end;          /* the original bytes replaced */
    int kind;
    uint64_t value;             /* E_VARINT: the new length */
    size_t first, count;        /* E_TENSOR / E_INSERT: encs */
    size_t key_len;             /* E_TENSOR: the original key's; E_INSERT: the list's */
} edit;

/* A data file receiving tensor bytes: one of the model's sources, or
 * (index n_sources) the new "<model>.data" of the 2 GiB rule. */
typedef struct data_file {
    uint64_t end;               /* its size, with the bytes appended so far */
    bool written;
} data_file;

#define NO_FILE UINT32_MAX

typedef struct writer {
    const ck_model *m;
    const ck_pb_layout *pb;
    const ck_pb_fields *f;
    ck_progress *progress;      /* the group's: counts the new tensors' bytes */
    uint32_t pbfile;            /* the protobuf file being planned (a source id) ... */
    ck_source *file;            /* ... and its source */
    bool *pbfiles;              /* per source: it holds TensorProtos */
    pb_reader r;
    enc *encs;
    size_t n_encs;
    edit *edits;
    size_t n_edits;
    int64_t *delta;             /* per frame: growth of its body */
    membuf inputs;              /* graph.input declarations to add (ONNX IR < 4) */
    data_file *files;           /* per source, plus the new data file */
    uint32_t n_files;
    bool *shared;               /* per tensor: its external bytes overlap another's */
    bool *to_external;          /* per listed tensor: write it as external data */
    uint32_t new_ext;           /* where new tensors' bytes go, or NO_FILE: inline */
    char big_path[PATH_MAX];    /* "<model>.data" ... */
    uint32_t big;               /* ... and its files index */
    /* Saved under another name (ck_commit_group.own_data): every external
     * tensor goes to "<new model>.data", named by its TensorProtos as
     * big_rel, in the new model's directory. */
    bool own_data, data_replace;
    const ck_model_dir *out_dir;
    char big_rel[PATH_MAX];
    ck_error *err;
    char q[CK_QUOTE_BUF];
} writer;

static int nomem(writer *w)
{
    return ck_nomem(w->err, w->m->path);
}

/* ---- memory buffers ---- */

static int mb_put(writer *w, membuf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (q == NULL)
            return nomem(w);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static int mb_varint(writer *w, membuf *b, uint64_t v)
{
    unsigned char tmp[10];
    return mb_put(w, b, tmp, ck_put_varint(tmp, v));
}

static int mb_key(writer *w, membuf *b, uint32_t field, int wire)
{
    return mb_varint(w, b, (uint64_t)field << 3 | (unsigned)wire);
}

static int mb_len_field(writer *w, membuf *b, uint32_t field, const void *p, size_t n)
{
    if (mb_key(w, b, field, PB_WT_LEN) < 0 || mb_varint(w, b, n) < 0)
        return -1;
    return mb_put(w, b, p, n);
}

static uint64_t enc_body_len(const enc *e)
{
    return e->pre.len + e->data_len + e->post.len;
}

/* ---- encoding one tensor ---- */

static const char *label(writer *w, const ck_write_tensor *t)
{
    return ck_quote(w->q, t->name, t->name_len);
}

static int put_shape(writer *w, membuf *b, const ck_write_tensor *t)
{
    for (uint32_t i = 0; i < t->ndim; i++)
        if (mb_key(w, b, w->f->t_dims, PB_WT_VARINT) < 0 ||
            mb_varint(w, b, (uint64_t)t->dims[i]) < 0)
            return -1;
    return mb_key(w, b, w->f->t_type, PB_WT_VARINT) < 0 ||
                   mb_varint(w, b, (uint64_t)t->dtype->pb_code) < 0
               ? -1
               : 0;
}

static bool sign_extended(int code)
{
    return code == 3 || code == 5 || code == 6; /* INT8, INT16, INT32 */
}

/* The tensor's bytes as varints of its typed field. */
static int encode_varints(writer *w, enc *e, const ck_write_tensor *t, uint64_t nbytes,
                          membuf *b, uint32_t field)
{
    unsigned width = t->dtype->itemsize;
    unsigned char *raw = malloc(nbytes ? nbytes : 1);
    if (raw == NULL)
        return nomem(w);
    e->owned = raw;
    uint64_t at = 0;
    for (size_t i = 0; i < t->n_pieces; i++) {
        const ck_piece *p = &t->pieces[i];
        if (p->mem != NULL)
            memcpy(raw + at, p->mem, p->len);
        else if (ck_source_read(p->src, raw + at, p->len, p->off, w->err) < 0)
            return -1;
        at += p->len;
    }
    membuf vals = {0};
    for (uint64_t k = 0; k + width <= nbytes; k += width) {
        uint64_t v = 0;
        for (unsigned j = 0; j < width; j++)
            v |= (uint64_t)raw[k + j] << (8 * j);
        if (sign_extended(t->dtype->pb_code) && width < 8 && (v >> (8 * width - 1)) & 1)
            v |= ~0ull << (8 * width);
        if (mb_varint(w, &vals, v) < 0) {
            free(vals.p);
            return -1;
        }
    }
    int rc = mb_len_field(w, b, field, vals.p, vals.len);
    free(vals.p);
    return rc;
}

/* The data field in the given storage: key and length into b (the pre
 * part), then the bytes as pieces, or everything in memory. */
static int put_data(writer *w, enc *e, membuf *b, const ck_write_tensor *t, uint8_t storage)
{
    uint64_t n = ck_pieces_len(t);
    uint32_t field = w->f->t_raw;
    if (storage == CK_STORE_TYPED) {
        field = ck_pb_typed_field(w->pb, t->dtype->pb_code);
        bool fixed = field == w->f->t_float || field == w->f->t_double;
        if (!fixed && n <= TYPED_MEM_MAX)
            return encode_varints(w, e, t, n, b, field);
        if (!fixed)
            field = w->f->t_raw;
    }
    if (mb_key(w, b, field, PB_WT_LEN) < 0 || mb_varint(w, b, n) < 0)
        return -1;
    e->pieces = t->pieces;
    e->n_pieces = t->n_pieces;
    e->data_len = n;
    return 0;
}

static int put_name(writer *w, membuf *b, const ck_write_tensor *t, bool prefixed)
{
    if (!prefixed)
        return mb_len_field(w, b, w->f->t_name, t->name, t->name_len);
    /* MindIR parameters are named "<graph>:<name>" in the file. */
    size_t gl = w->pb->graph_name_len;
    if (mb_key(w, b, w->f->t_name, PB_WT_LEN) < 0 || mb_varint(w, b, gl + 1 + t->name_len) < 0 ||
        mb_put(w, b, w->pb->graph_name, gl) < 0 || mb_put(w, b, ":", 1) < 0)
        return -1;
    return mb_put(w, b, t->name, t->name_len);
}

/* ---- external data ---- */

/* Where a new tensor goes in a data file: MindSpore pads every tensor of
 * a split model to 64 bytes; onnx's save_external_data aligns tensors over
 * 1 MiB to 4096 bytes (mmap's granularity) and packs the others. */
static uint64_t ext_align(const writer *w, uint64_t len)
{
    if (w->pb->mindir)
        return 64;
    return len > (1u << 20) ? 4096 : 1;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

static const char *file_path(const writer *w, uint32_t f)
{
    return f < w->m->n_sources ? w->m->sources[f]->path : w->big_path;
}

/* The location a TensorProto names a data file by: the reader opened it
 * as "<model's directory>/<location>", the location made canonical. */
static const char *location_of(const writer *w, uint32_t f)
{
    if (w->own_data && f == w->m->n_sources)
        return w->big_rel;
    const char *rel = ck_dir_rel(w->m->dir, file_path(w, f));
    return rel ? rel : file_path(w, f);
}

/* The new bytes are the original's own extent. */
static bool same_place(const writer *w, const ck_write_tensor *t, const ck_tensor *orig)
{
    if (t->n_pieces != 1 || orig->n_ext != 1)
        return false;
    const ck_piece *p = &t->pieces[0];
    return p->mem == NULL && p->src == w->m->sources[orig->ext0.src] &&
           p->off == orig->ext0.off && p->len == orig->ext0.len;
}

/* Decide where the bytes of a tensor written as external data go: over
 * the old bytes when the size is unchanged and no other tensor shares
 * them, else appended to the file. */
static void place_external(writer *w, enc *e, const ck_write_tensor *t, uint32_t file,
                           const ck_tensor *orig)
{
    uint64_t len = ck_pieces_len(t);
    e->external = true;
    e->ext_file = file;
    e->ext_len = len;
    e->pieces = t->pieces;
    e->n_pieces = t->n_pieces;
    bool keep = orig != NULL && orig->n_ext == 1 && orig->nbytes == len &&
                orig->ext0.src == file && !w->shared[orig - w->m->index.tensors];
    if (keep) {
        e->ext_off = orig->ext0.off;
        e->ext_write = !same_place(w, t, orig);
    } else {
        e->ext_off = align_up(w->files[file].end, ext_align(w, len));
        w->files[file].end = e->ext_off + len;
        e->ext_moved = e->ext_write = true;
    }
    w->files[file].written |= e->ext_write;
}

static int mb_entry(writer *w, membuf *b, const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    size_t body = 2 + ck_varint_len(kl) + kl + ck_varint_len(vl) + vl;
    if (mb_key(w, b, w->f->t_external, PB_WT_LEN) < 0 || mb_varint(w, b, body) < 0 ||
        mb_len_field(w, b, 1, key, kl) < 0)
        return -1;
    return mb_len_field(w, b, 2, value, vl);
}

/* The data fields of a tensor placed anew: ONNX's external_data entries
 * and data_location EXTERNAL, or MindIR's ExternalDataProto. */
static int put_external(writer *w, membuf *b, const enc *e)
{
    const char *loc = location_of(w, e->ext_file);
    if (!w->pb->mindir) {
        char off[24], len[24];
        snprintf(off, sizeof off, "%llu", (unsigned long long)e->ext_off);
        snprintf(len, sizeof len, "%llu", (unsigned long long)e->ext_len);
        if (mb_entry(w, b, "location", loc) < 0 || mb_entry(w, b, "offset", off) < 0 ||
            mb_entry(w, b, "length", len) < 0 || mb_key(w, b, w->f->t_location, PB_WT_VARINT) < 0)
            return -1;
        return mb_varint(w, b, 1);
    }
    membuf x = {0};
    int rc = mb_len_field(w, &x, 1, loc, strlen(loc)) < 0 || mb_key(w, &x, 2, PB_WT_VARINT) < 0 ||
                     mb_varint(w, &x, e->ext_off) < 0 || mb_key(w, &x, 3, PB_WT_VARINT) < 0 ||
                     mb_varint(w, &x, e->ext_len) < 0 ||
                     mb_len_field(w, b, w->f->t_external, x.p, x.len) < 0
                 ? -1
                 : 0;
    free(x.p);
    return rc;
}

/* The bytes of one external tensor. */
typedef struct span {
    uint64_t off, end;
    uint32_t src, id;
} span;

static int by_place(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Mark the external tensors whose bytes overlap another's (an exporter
 * may point two tensors at the same bytes): those are never overwritten
 * in place.  Sorted by place, a span overlaps an earlier one exactly when
 * it starts before the furthest end seen so far in its file. */
static int find_shared(writer *w)
{
    const ck_index *ix = &w->m->index;
    span *x = malloc((ix->count ? ix->count : 1) * sizeof *x);
    if (x == NULL)
        return nomem(w);
    size_t n = 0;
    for (size_t id = 0; id < ix->count; id++) {
        const ck_tensor *t = &ix->tensors[id];
        if (w->pb->tensors[id].storage == CK_STORE_EXTERNAL && t->n_ext == 1)
            x[n++] = (span){t->ext0.off, t->ext0.off + t->ext0.len, t->ext0.src, (uint32_t)id};
    }
    qsort(x, n, sizeof *x, by_place);
    const span *far = NULL;
    for (size_t i = 0; i < n; i++) {
        if (far != NULL && far->src == x[i].src && x[i].off < far->end)
            w->shared[x[i].id] = w->shared[far->id] = true;
        if (far == NULL || far->src != x[i].src || x[i].end > far->end)
            far = &x[i];
    }
    free(x);
    return 0;
}

static bool is_data_field(const writer *w, uint32_t num)
{
    const ck_pb_fields *f = w->f;
    return num == f->t_raw || num == f->t_float || num == f->t_int32 || num == f->t_string ||
           num == f->t_int64 || num == f->t_double || num == f->t_uint64 ||
           num == f->t_external || (f->t_location && num == f->t_location);
}

/* The fields that say where the data is (ONNX external_data entries and
 * data_location; MindIR's ExternalDataProto). */
static bool is_location_field(const writer *w, uint32_t num)
{
    return num == w->f->t_external || (w->f->t_location && num == w->f->t_location);
}

/* Copy the original field [from, to) into b. */
static int copy_field(writer *w, membuf *b, uint64_t from, uint64_t to)
{
    size_t n = (size_t)(to - from);
    unsigned char *tmp = malloc(n ? n : 1);
    if (tmp == NULL)
        return nomem(w);
    int rc = ck_source_read(w->file, tmp, n, from, w->err);
    if (rc == 0)
        rc = mb_put(w, b, tmp, n);
    free(tmp);
    return rc;
}

/* ---- graph inputs (ONNX before IR version 4) ---- */

/* Before IR version 4 every initializer is also declared a graph input.
 * encode_new and encode_changed declare new and renamed ones; a deleted
 * or renamed one takes its old declaration along, or the model would ask
 * to be fed it. */
static bool declares_inputs(const writer *w)
{
    return !w->pb->mindir && w->pb->ir_version < 4 && w->pbfile == 0 &&
           w->pb->main_graph != CK_PB_NO_FRAME;
}

/* ONNX GraphProto.input, and the ValueInfoProto / TypeProto fields a
 * tensor's declaration needs. */
enum { GRAPH_INPUT = CK_ONNX_GRAPH_INPUT, VI_NAME = 1, VI_TYPE = 2, TYPE_TENSOR = 1, TT_ELEM = 1, TT_SHAPE = 2,
       SHAPE_DIM = 1, DIM_VALUE = 1 };

/* Before IR version 4 every initializer must also be a graph input:
 * declare a new one as ValueInfoProto{name, type{tensor_type{elem_type,
 * shape}}}. */
static int put_graph_input(writer *w, membuf *b, const ck_write_tensor *t)
{
    membuf shape = {0}, tt = {0}, type = {0}, vi = {0}, dim = {0};
    int rc = 0;
    for (uint32_t i = 0; i < t->ndim && rc == 0; i++) {
        dim.len = 0;
        rc = mb_key(w, &dim, DIM_VALUE, PB_WT_VARINT) < 0 ||
                     mb_varint(w, &dim, (uint64_t)t->dims[i]) < 0 ||
                     mb_len_field(w, &shape, SHAPE_DIM, dim.p, dim.len) < 0
                 ? -1
                 : 0;
    }
    if (rc == 0 && (mb_key(w, &tt, TT_ELEM, PB_WT_VARINT) < 0 ||
                    mb_varint(w, &tt, (uint64_t)t->dtype->pb_code) < 0 ||
                    mb_len_field(w, &tt, TT_SHAPE, shape.p, shape.len) < 0 ||
                    mb_len_field(w, &type, TYPE_TENSOR, tt.p, tt.len) < 0 ||
                    mb_len_field(w, &vi, VI_NAME, t->name, t->name_len) < 0 ||
                    mb_len_field(w, &vi, VI_TYPE, type.p, type.len) < 0 ||
                    mb_len_field(w, b, GRAPH_INPUT, vi.p, vi.len) < 0))
        rc = -1;
    free(shape.p);
    free(tt.p);
    free(type.p);
    free(vi.p);
    free(dim.p);
    return rc;
}

/* A changed original tensor: its fields in order, dims/type, name and
 * data replaced.  file: the data file its bytes go to, or NO_FILE. */
static int encode_changed(writer *w, enc *e, const ck_write_tensor *t, const ck_tensor *orig,
                          const ck_pb_tensor *pt, uint32_t file)
{
    bool renamed = t->name_len != orig->name_len || memcmp(t->name, orig->name, t->name_len);
    bool prefixed = renamed && w->pb->mindir && pt->role == CK_ROLE_TOP &&
                    w->pb->graph_name != NULL;
    if (renamed && pt->role != CK_ROLE_TOP)
        return ck_fail(w->err, EBUSY, "%s: tensor '%s' is held by a node and cannot be renamed",
                       w->m->path, label(w, t));
    if (renamed && declares_inputs(w) && put_graph_input(w, &w->inputs, t) < 0)
        return -1;
    if (file != NO_FILE)
        place_external(w, e, t, file, orig);
    /* External bytes left where they were keep their location fields. */
    bool keep_location = e->external && !e->ext_moved;
    bool shape_done = false, data_done = false, name_done = false;
    membuf *b = &e->pre;
    pb_reader_init(&w->r, w->file, orig->rec_off);
    pb_field fl;
    int rc;
    while ((rc = pb_next_field(&w->r, orig->rec_end, &fl, w->err)) > 0) {
        if (pb_skip(&w->r, orig->rec_end, fl.key_off, fl.wire_type, w->err) < 0)
            return -1;
        if (fl.num == w->f->t_dims || fl.num == w->f->t_type) {
            if (!shape_done && put_shape(w, b, t) < 0)
                return -1;
            shape_done = true;
        } else if (fl.num == w->f->t_name && renamed) {
            if (!name_done && put_name(w, b, t, prefixed) < 0)
                return -1;
            name_done = true;
        } else if (is_location_field(w, fl.num) && (keep_location || !e->external)) {
            /* Not the data itself: an inline tensor keeps them too (onnx's
             * load of external data leaves data_location: DEFAULT). */
            if (copy_field(w, b, fl.key_off, w->r.pos) < 0)
                return -1;
        } else if (is_data_field(w, fl.num) && keep_location) {
            continue;
        } else if (is_data_field(w, fl.num)) {
            if (!data_done && (e->external ? put_external(w, b, e) : put_data(w, e, b, t,
                                                                             pt->storage)) < 0)
                return -1;
            data_done = true;
            if (e->data_len > 0 || e->n_pieces > 0)
                b = &e->post;
        } else if (copy_field(w, b, fl.key_off, w->r.pos) < 0) {
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (!shape_done && put_shape(w, &e->pre, t) < 0)
        return -1;
    if (renamed && !name_done && put_name(w, b, t, prefixed) < 0)
        return -1;
    if (data_done || keep_location)
        return 0;
    if (e->external)
        return put_external(w, b, e);
    if (ck_pieces_len(t) > 0) {
        if (b == &e->pre && e->post.len == 0)
            return put_data(w, e, b, t, CK_STORE_RAW);
        return ck_fail(w->err, EIO, "%s: tensor '%s': no place for its data", w->m->path,
                       label(w, t));
    }
    return 0;
}

static int encode_new(writer *w, enc *e, const ck_write_tensor *t, uint32_t file)
{
    if (declares_inputs(w) && put_graph_input(w, &w->inputs, t) < 0)
        return -1;
    if (put_shape(w, &e->pre, t) < 0 ||
        put_name(w, &e->pre, t, w->pb->mindir && w->pb->graph_name != NULL) < 0)
        return -1;
    if (file == NO_FILE)
        return put_data(w, e, &e->pre, t, CK_STORE_RAW);
    place_external(w, e, t, file, NULL);
    return put_external(w, &e->pre, e);
}

/* ---- the plan ---- */

/* At most one edit per tensor, one per frame and one insert: the array is
 * sized for that upfront. */
static void add_edit(writer *w, edit e)
{
    w->edits[w->n_edits++] = e;
}

static enc *new_enc(writer *w)
{
    enc *e = &w->encs[w->n_encs++];
    memset(e, 0, sizeof *e);
    return e;
}

/* Field size of an encoded tensor: key (as the original's, or the graph
 * list's), length prefix, body. */
static uint64_t field_len(const enc *e, uint64_t key_len)
{
    uint64_t body = enc_body_len(e);
    return key_len + ck_varint_len(body) + body;
}

static int check_type(writer *w, const ck_write_tensor *t)
{
    if (t->dtype == NULL || t->dtype->pb_code == 0 || t->dtype->kind != CK_KIND_NUMERIC)
        return ck_fail(w->err, EINVAL, "%s: tensor '%s': type %s has no %s equivalent",
                       w->m->path, label(w, t), t->dtype ? t->dtype->of_name : "?",
                       w->pb->mindir ? "MindIR" : "ONNX");
    return 0;
}

/* Saved under another name, an external tensor moves to the new data
 * file: the caller gives it as new bytes (its own), since its TensorProto
 * cannot be copied as it was; a split MindIR keeps MindSpore's layout,
 * which is not one data file beside the model. */
static int check_own_data(writer *w, const ck_tensor *orig, int32_t state)
{
    if (w->pb->mindir)
        return ck_fail(w->err, ENOTSUP, "%s: parameter '%s' keeps its data in %s: a split "
                       "MindIR is not saved under another name", w->m->path,
                       ck_quote(w->q, orig->name, orig->name_len),
                       w->m->sources[orig->ext0.src]->path);
    if (state == -2)
        return ck_fail(w->err, EINVAL, "%s: tensor '%s' keeps its data in %s, which the new "
                       "model does not name: it must be given as new bytes", w->m->path,
                       ck_quote(w->q, orig->name, orig->name_len),
                       w->m->sources[orig->ext0.src]->path);
    return 0;
}

static int plan_tensors(writer *w, const ck_write_tensor *ts, size_t n, int32_t *state)
{
    const ck_index *ix = &w->m->index;
    for (size_t i = 0; i < ix->count; i++)
        state[i] = -1; /* deleted unless listed */
    for (size_t i = 0; i < n; i++)
        if (ts[i].orig_id != CK_WRITE_NEW)
            state[ts[i].orig_id] = ts[i].unchanged ? -2 : (int32_t)i;
    for (size_t id = 0; id < ix->count; id++) {
        const ck_tensor *orig = &ix->tensors[id];
        const ck_pb_tensor *pt = &w->pb->tensors[id];
        if (pt->pbfile != w->pbfile)
            continue;
        bool external = pt->storage == CK_STORE_EXTERNAL;
        if (w->own_data && external && check_own_data(w, orig, state[id]) < 0)
            return -1;
        if (state[id] == -2)
            continue;
        if (w->pbfile != 0 && pt->storage == CK_STORE_EXTERNAL)
            return ck_fail(w->err, ENOTSUP, "%s: tensor '%s': external data inside a "
                           "variables file is not written", w->m->path,
                           ck_quote(w->q, orig->name, orig->name_len));
        edit e = {.off = pt->key_off, .end = orig->rec_end};
        uint64_t old_len = orig->rec_end - pt->key_off;
        uint64_t new_len = 0;
        if (state[id] == -1) {
            if (pt->role != CK_ROLE_TOP)
                return ck_fail(w->err, EBUSY, "%s: tensor '%s' is held by node '%s' and cannot "
                               "be deleted", w->m->path, ck_quote(w->q, orig->name,
                               orig->name_len), pt->holder ? pt->holder : "?");
            e.kind = E_DROP;
        } else {
            const ck_write_tensor *t = &ts[state[id]];
            if (check_type(w, t) < 0)
                return -1;
            enc *en = new_enc(w);
            uint32_t file = external && !w->own_data ? pt->ext_src
                            : external || w->to_external[state[id]] ? w->big
                                                                    : NO_FILE;
            if (encode_changed(w, en, t, orig, pt, file) < 0)
                return -1;
            e.kind = E_TENSOR;
            e.first = w->n_encs - 1;
            e.count = 1;
            e.key_len = (size_t)(pt->len_off - pt->key_off);
            new_len = field_len(en, e.key_len);
        }
        if (pt->frame != CK_PB_NO_FRAME) /* a legacy variables file's top level */
            w->delta[pt->frame] += (int64_t)new_len - (int64_t)old_len;
        add_edit(w, e);
    }
    edit ins = {.off = w->pb->insert_off, .end = w->pb->insert_off, .kind = E_INSERT,
                .first = w->n_encs,
                .key_len = ck_varint_len((uint64_t)w->f->graph_tensor << 3 | PB_WT_LEN)};
    uint64_t grow = 0;
    for (size_t i = 0; i < n && w->pbfile == w->pb->new_pbfile; i++) {
        if (ts[i].orig_id != CK_WRITE_NEW)
            continue;
        if (check_type(w, &ts[i]) < 0)
            return -1;
        enc *en = new_enc(w);
        if (encode_new(w, en, &ts[i], w->to_external[i] ? w->big : w->new_ext) < 0)
            return -1;
        grow += field_len(en, ins.key_len);
        ins.count++;
    }
    if (ins.count == 0)
        return 0;
    /* A legacy variables file is a GraphProto: new parameters go at its
     * top level, inside no frame. */
    if (w->pbfile == 0) {
        if (w->pb->main_graph == CK_PB_NO_FRAME)
            return ck_fail(w->err, EINVAL, "%s: the model has no main graph to add tensors to",
                           w->m->path);
        w->delta[w->pb->main_graph] += (int64_t)grow;
    }
    add_edit(w, ins);
    return 0;
}

/* 1 if the ValueInfoProto [body, end) is named after a key of names. */
static int input_named(writer *w, uint64_t body, uint64_t end, const ck_name_map *names)
{
    pb_field fl;
    int rc;
    uint64_t len;
    pb_seek(&w->r, body);
    while ((rc = pb_next_field(&w->r, end, &fl, w->err)) > 0) {
        if (fl.num != VI_NAME || fl.wire_type != PB_WT_LEN) {
            if (pb_skip(&w->r, end, fl.key_off, fl.wire_type, w->err) < 0)
                return -1;
            continue;
        }
        if (pb_read_len(&w->r, end, fl.key_off, &len, w->err) < 0)
            return -1;
        if (len > CK_PB_MAX_NAME)
            return 0; /* longer than any name the reader keeps */
        char name[CK_PB_MAX_NAME];
        if (pb_read_bytes(&w->r, end, name, (size_t)len, w->err) < 0)
            return -1;
        return ck_name_map_get(names, name, (size_t)len) != CK_NAME_MAP_NONE;
    }
    return rc;
}

static int drop_inputs(writer *w, const ck_name_map *names)
{
    int32_t main = w->pb->main_graph;
    const ck_pb_frame *g = &w->pb->frames[main];
    pb_field fl;
    int rc;
    uint64_t len;
    pb_reader_init(&w->r, w->file, g->body_off);
    while ((rc = pb_next_field(&w->r, g->body_end, &fl, w->err)) > 0) {
        if (fl.num != GRAPH_INPUT || fl.wire_type != PB_WT_LEN) {
            if (pb_skip(&w->r, g->body_end, fl.key_off, fl.wire_type, w->err) < 0)
                return -1;
            continue;
        }
        if (pb_read_len(&w->r, g->body_end, fl.key_off, &len, w->err) < 0)
            return -1;
        uint64_t body = w->r.pos, end = body + len;
        int named = input_named(w, body, end, names);
        if (named < 0)
            return -1;
        if (named) {
            add_edit(w, (edit){.off = fl.key_off, .end = end, .kind = E_DROP});
            w->delta[main] -= (int64_t)(end - fl.key_off);
        }
        pb_seek(&w->r, end);
    }
    return rc;
}

static int plan_inputs(writer *w, const ck_write_tensor *ts, const int32_t *state)
{
    if (!declares_inputs(w))
        return 0;
    const ck_index *ix = &w->m->index;
    ck_name_map gone;
    ck_name_map_init(&gone);
    int rc = 0;
    for (size_t id = 0; id < ix->count && rc == 0; id++) {
        const ck_tensor *orig = &ix->tensors[id];
        if (w->pb->tensors[id].role != CK_ROLE_TOP || state[id] == -2)
            continue;
        const ck_write_tensor *t = state[id] >= 0 ? &ts[state[id]] : NULL;
        bool renamed = t && (t->name_len != orig->name_len ||
                             memcmp(t->name, orig->name, t->name_len) != 0);
        if ((t == NULL || renamed) && ck_name_map_put(&gone, orig->name, orig->name_len, 0) < 0)
            rc = nomem(w);
    }
    if (rc == 0 && gone.count > 0)
        rc = drop_inputs(w, &gone);
    ck_name_map_free(&gone);
    if (rc < 0 || w->inputs.len == 0)
        return rc;
    /* After the last declared input, so the inputs keep their positions. */
    uint64_t at = w->pb->inputs_end ? w->pb->inputs_end : w->pb->insert_off;
    add_edit(w, (edit){.off = at, .end = at, .kind = E_INPUTS});
    w->delta[w->pb->main_graph] += (int64_t)w->inputs.len;
    return 0;
}

/* Frames were recorded parents first: walk them backwards so a frame's
 * growth, including its own length prefix's, reaches its parent. */
static void plan_frames(writer *w)
{
    const ck_pb_layout *pb = w->pb;
    for (size_t i = pb->n_frames; i-- > 0;) {
        if (w->delta[i] == 0)
            continue;
        const ck_pb_frame *fr = &pb->frames[i];
        uint64_t len = (uint64_t)((int64_t)(fr->body_end - fr->body_off) + w->delta[i]);
        int64_t growth = (int64_t)ck_varint_len(len) - (int64_t)(fr->body_off - fr->len_off);
        add_edit(w, (edit){.off = fr->len_off, .end = fr->body_off, .kind = E_VARINT,
                           .value = len});
        if (fr->parent != CK_PB_NO_FRAME)
            w->delta[fr->parent] += w->delta[i] + growth;
    }
}

static int by_offset(const void *a, const void *b)
{
    const edit *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return (x->end > x->off) - (y->end > y->off); /* an insert before a range there */
}

/* ---- output ---- */

static int emit_enc(ck_sink *s, const enc *e, const void *key, size_t key_len)
{
    unsigned char len[10];
    if (ck_sink_write(s, key, key_len) < 0 ||
        ck_sink_write(s, len, ck_put_varint(len, enc_body_len(e))) < 0 ||
        ck_sink_write(s, e->pre.p, e->pre.len) < 0)
        return -1;
    /* The data bytes, which a reader skips by their length. */
    if (!e->external && e->n_pieces > 0 && ck_sink_payload(s, e->data_len) < 0)
        return -1;
    for (size_t i = 0; i < e->n_pieces && !e->external; i++)
        if (ck_sink_piece(s, &e->pieces[i], 0, e->pieces[i].len) < 0)
            return -1;
    return ck_sink_write(s, e->post.p, e->post.len);
}

static int emit_edit(writer *w, ck_sink *s, const edit *e)
{
    unsigned char key[10];
    if (e->kind == E_VARINT)
        return ck_sink_write(s, key, ck_put_varint(key, e->value));
    if (e->kind == E_DROP)
        return 0;
    if (e->kind == E_INPUTS)
        return ck_sink_write(s, w->inputs.p, w->inputs.len);
    if (e->key_len > sizeof key)
        return ck_fail(w->err, EINVAL, "%s: offset %llu: overlong field key", w->m->path,
                       (unsigned long long)e->off);
    if (e->kind == E_TENSOR) {
        if (ck_source_read(w->file, key, e->key_len, e->off, w->err) < 0)
            return -1;
    } else {
        ck_put_varint(key, (uint64_t)w->f->graph_tensor << 3 | PB_WT_LEN);
    }
    for (size_t i = 0; i < e->count; i++)
        if (emit_enc(s, &w->encs[e->first + i], key, e->key_len) < 0)
            return -1;
    return 0;
}

/* Bytes an edit writes. */
static uint64_t edit_len(const writer *w, const edit *e)
{
    if (e->kind == E_VARINT)
        return ck_varint_len(e->value);
    if (e->kind == E_INPUTS)
        return w->inputs.len;
    uint64_t n = 0;
    for (size_t i = 0; i < e->count; i++)
        n += field_len(&w->encs[e->first + i], e->key_len);
    return n;
}

static int emit(writer *w, int out_fd, const char *out, const ck_envelope *env)
{
    ck_sink s = {.fd = out_fd, .path = out, .err = w->err, .buf = malloc(CK_SINK_BUF),
                 .progress = w->progress};
    if (s.buf == NULL)
        return nomem(w);
    int rc = ck_sink_wrap(&s, env);
    uint64_t pos = 0;
    for (size_t i = 0; i < w->n_edits && rc == 0; i++) {
        const edit *e = &w->edits[i];
        rc = ck_sink_copy(&s, w->file, pos, e->off - pos);
        if (rc == 0)
            rc = emit_edit(w, &s, e);
        pos = e->end;
    }
    if (rc == 0)
        rc = ck_sink_copy(&s, w->file, pos, w->file->size - pos);
    if (rc == 0)
        rc = ck_sink_end(&s);
    ck_sink_drop(&s);
    free(s.buf);
    return rc;
}

/* ---- data files ---- */

static const unsigned char zeros[4096];

static int put_zeros(ck_sink *s, uint64_t n)
{
    for (uint64_t k; n > 0; n -= k) {
        k = n < sizeof zeros ? n : sizeof zeros;
        if (ck_sink_write(s, zeros, (size_t)k) < 0)
            return -1;
    }
    return 0;
}

static int put_pieces(ck_sink *s, const enc *e)
{
    for (size_t i = 0; i < e->n_pieces; i++)
        if (ck_sink_piece(s, &e->pieces[i], 0, e->pieces[i].len) < 0)
            return -1;
    return 0;
}

/* A split MindIR's data files are encrypted when its model is (and were
 * read decrypted); the model's own envelope may be new (fresh), which a
 * model with data files cannot have. */
static const ck_envelope *data_envelope(const writer *w)
{
    const ck_envelope *env = &w->m->env;
    return w->pb->mindir && ck_envelope_wraps_data_files(env) ? env : NULL;
}

static int by_ext_off(const void *a, const void *b)
{
    const enc *x = *(const enc *const *)a, *y = *(const enc *const *)b;
    return x->ext_off < y->ext_off ? -1 : x->ext_off > y->ext_off;
}

/* The tensors of file f written over their old bytes, in file order. */
static const enc **in_place(writer *w, uint32_t f, size_t *count)
{
    const enc **list = malloc((w->n_encs ? w->n_encs : 1) * sizeof *list);
    size_t k = 0;
    for (size_t i = 0; list != NULL && i < w->n_encs; i++) {
        const enc *e = &w->encs[i];
        if (e->external && e->ext_file == f && !e->ext_moved && e->ext_write)
            list[k++] = e;
    }
    if (list != NULL)
        qsort(list, k, sizeof *list, by_ext_off);
    *count = k;
    return list;
}

/* The old bytes of data file f with the tensors written over theirs,
 * in one pass so that it can go through a wrap writer. */
static int put_old_with_edits(writer *w, ck_sink *s, uint32_t f)
{
    ck_source *old = f < w->m->n_sources ? w->m->sources[f] : NULL;
    size_t k;
    const enc **list = in_place(w, f, &k);
    if (list == NULL)
        return nomem(w);
    uint64_t pos = 0;
    int rc = 0;
    for (size_t i = 0; i < k && rc == 0; i++) {
        if (list[i]->ext_off < pos) /* the planner moves overlapping tensors */
            rc = ck_fail(w->err, EIO, "%s: internal error: overlapping tensors written in "
                         "place", s->path);
        else if ((rc = ck_sink_copy(s, old, pos, list[i]->ext_off - pos)) == 0)
            rc = put_pieces(s, list[i]);
        pos = list[i]->ext_off + list[i]->ext_len;
    }
    free(list);
    if (rc == 0 && old != NULL)
        rc = ck_sink_copy(s, old, pos, old->size - pos);
    return rc;
}

/* The new version of data file f: its old bytes, with the tensors that
 * keep their place written over them, then the tensors appended to it in
 * the order they were placed (increasing offsets), and padding. */
static int write_data_file(writer *w, uint32_t f, int fd, unsigned char *buf)
{
    ck_source *old = f < w->m->n_sources ? w->m->sources[f] : NULL;
    uint64_t size = old ? old->size : 0, pos = size;
    ck_sink s = {.fd = fd, .path = file_path(w, f), .err = w->err, .buf = buf,
                 .progress = w->progress};
    int rc = ck_sink_wrap(&s, data_envelope(w));
    if (rc == 0)
        rc = put_old_with_edits(w, &s, f);
    for (size_t i = 0; i < w->n_encs && rc == 0; i++) {
        const enc *e = &w->encs[i];
        if (!e->external || e->ext_file != f || !e->ext_moved)
            continue;
        if ((rc = put_zeros(&s, e->ext_off - pos)) == 0)
            rc = put_pieces(&s, e);
        pos = e->ext_off + e->ext_len;
    }
    /* MindSpore pads the last tensor of a data file too. */
    if (rc == 0 && w->pb->mindir && pos > size)
        rc = put_zeros(&s, align_up(pos, 64) - pos);
    if (rc == 0)
        rc = ck_sink_end(&s);
    ck_sink_drop(&s);
    return rc;
}

static int write_data_files(writer *w, ck_commit_group *g)
{
    unsigned char *buf = malloc(CK_SINK_BUF);
    if (buf == NULL)
        return nomem(w);
    int rc = 0;
    for (uint32_t f = 0; f < w->n_files && rc == 0; f++) {
        if (!w->files[f].written)
            continue;
        int fd = ck_group_add(g, file_path(w, f), w->err);
        rc = fd < 0 ? -1 : write_data_file(w, f, fd, buf);
    }
    free(buf);
    return rc;
}

/* ---- the 2 GiB rule ---- */

static uint64_t new_size(const writer *w)
{
    uint64_t size = w->file->size;
    for (size_t i = 0; i < w->n_edits; i++)
        size = size - (w->edits[i].end - w->edits[i].off) + edit_len(w, &w->edits[i]);
    return size;
}

static void free_encs(writer *w)
{
    for (size_t i = 0; i < w->n_encs; i++) {
        free(w->encs[i].pre.p);
        free(w->encs[i].post.p);
        free(w->encs[i].owned);
    }
    w->n_encs = 0;
}

/* Forget a plan, to make another. */
static void reset_plan(writer *w)
{
    free_encs(w);
    w->n_edits = 0;
    w->inputs.len = 0;
    memset(w->delta, 0, (w->pb->n_frames ? w->pb->n_frames : 1) * sizeof *w->delta);
    for (uint32_t f = 0; f < w->n_files; f++)
        w->files[f] = (data_file){.end = f < w->m->n_sources ? w->m->sources[f]->size : 0};
}

static int plan(writer *w, const ck_write_tensor *ts, size_t n, int32_t *state)
{
    reset_plan(w);
    if (plan_tensors(w, ts, n, state) < 0 || plan_inputs(w, ts, state) < 0)
        return -1;
    plan_frames(w);
    qsort(w->edits, w->n_edits, sizeof *w->edits, by_offset);
    return 0;
}

static int by_size_desc(const void *a, const void *b, void *arg)
{
    const ck_write_tensor *ts = arg;
    uint64_t x = ck_pieces_len(&ts[*(const size_t *)a]), y = ck_pieces_len(&ts[*(const size_t *)b]);
    return x > y ? -1 : x < y;
}

/* Tensors that can move out of an ONNX file: new ones and changed
 * main-graph ones stored in the file. */
static bool may_move(const writer *w, const ck_write_tensor *t)
{
    if (t->unchanged)
        return false;
    if (t->orig_id == CK_WRITE_NEW)
        return true;
    const ck_pb_tensor *pt = &w->pb->tensors[t->orig_id];
    return pt->role == CK_ROLE_TOP && pt->storage != CK_STORE_EXTERNAL;
}

/* A protobuf message cannot pass 2 GiB: as onnx's own save does, an ONNX
 * model that would is written with its largest new and changed tensors in
 * "<model>.data" beside it, until it fits. */
static int fit(writer *w, const ck_write_tensor *ts, size_t n, int32_t *state)
{
    uint64_t size = new_size(w);
    if (size <= CK_PB_MAX_MESSAGE)
        return 0;
    if (w->pb->mindir)
        return ck_fail(w->err, EFBIG, "%s: the new model would be %llu bytes, over protobuf's "
                       "2 GiB limit (MindSpore saves such a model in the split layout)",
                       w->m->path, (unsigned long long)size);
    size_t *order = malloc((n ? n : 1) * sizeof *order), k = 0;
    if (order == NULL)
        return nomem(w);
    for (size_t i = 0; i < n; i++)
        if (may_move(w, &ts[i]))
            order[k++] = i;
    qsort_r(order, k, sizeof *order, by_size_desc, (void *)ts);
    /* Each tensor moved saves its bytes, less ~100 bytes of location. */
    uint64_t over = size - CK_PB_MAX_MESSAGE;
    for (size_t i = 0; i < k && over > 0; i++) {
        uint64_t saved = ck_pieces_len(&ts[order[i]]);
        w->to_external[order[i]] = true;
        over -= saved > over ? over : saved;
    }
    free(order);
    struct stat st;
    bool taken = w->big == w->m->n_sources && !w->own_data &&
                 (ck_dir_stat(w->m->dir, location_of(w, w->big), &st) == 0 || errno != ENOENT);
    if (taken)
        return ck_fail(w->err, EEXIST, "%s: the new model passes protobuf's 2 GiB limit and "
                       "its data would go to %s, which exists and is not this model's",
                       w->m->path, w->big_path);
    if (plan(w, ts, n, state) < 0)
        return -1;
    if ((size = new_size(w)) > CK_PB_MAX_MESSAGE)
        return ck_fail(w->err, EFBIG, "%s: the new model would be %llu bytes even with its "
                       "new tensors as external data, over protobuf's 2 GiB limit",
                       w->m->path, (unsigned long long)size);
    return 0;
}

/* Saved under another name, "<new model>.data" must not be a file the
 * model is read from (ckptfs-convert checks that by identity first; this
 * is by name), and an existing one is replaced only when the caller says
 * it may be (ckptfs-convert -f). */
static int check_own_file(writer *w)
{
    if (!w->own_data || !w->files[w->big].written)
        return 0;
    for (uint32_t f = 0; f < w->m->n_sources; f++)
        if (strcmp(w->m->sources[f]->path, w->big_path) == 0)
            return ck_fail(w->err, EINVAL, "%s: is a file of %s: the new model's data cannot "
                           "go there", w->big_path, w->m->path);
    struct stat st;
    if (!w->data_replace && (ck_dir_stat(w->out_dir, w->big_rel, &st) == 0 || errno != ENOENT))
        return ck_fail(w->err, EEXIST, "%s: exists (give -f to replace it)", w->big_path);
    return 0;
}

/* ---- setting up ---- */

/* The data file a save adds when the model would pass 2 GiB:
 * "<model>.data", relative to the model's directory. */
static bool big_data_name(const ck_model *m, char *rel, size_t size)
{
    return (size_t)snprintf(rel, size, "%s.data", m->dir->base) < size;
}

/* "<new model>.data" in the new model's directory. */
static int setup_own_data(writer *w)
{
    const ck_model_dir *d = w->out_dir;
    if ((size_t)snprintf(w->big_rel, sizeof w->big_rel, "%s.data", d->base) >= sizeof w->big_rel)
        return ck_fail(w->err, ENAMETOOLONG, "%s/%s.data: path too long", d->path, d->base);
    ck_dir_join(d, w->big_rel, w->big_path, sizeof w->big_path);
    return 0;
}

static int setup(writer *w, size_t n)
{
    const ck_model *m = w->m;
    const ck_pb_layout *pb = w->pb;
    size_t count = m->index.count;
    char big[PATH_MAX];
    w->n_files = m->n_sources + 1;
    w->big = m->n_sources;
    if (w->own_data && setup_own_data(w) < 0)
        return -1;
    if (!w->own_data) {
        big_data_name(m, big, sizeof big);
        ck_dir_join(m->dir, big, w->big_path, sizeof w->big_path);
    }
    for (uint32_t f = 1; f < m->n_sources && !w->own_data; f++)
        if (strcmp(m->sources[f]->path, w->big_path) == 0)
            w->big = f; /* "<model>.data" is a data file already */
    w->encs = calloc(count + n + 1, sizeof *w->encs);
    /* Per tensor an edit and an input declaration dropped, per frame one,
     * the new tensors and the new input declarations. */
    w->edits = calloc(2 * count + pb->n_frames + 2, sizeof *w->edits);
    w->delta = calloc(pb->n_frames ? pb->n_frames : 1, sizeof *w->delta);
    w->files = calloc(m->n_sources + 1, sizeof *w->files);
    w->shared = calloc(count + 1, sizeof *w->shared);
    w->to_external = calloc(n + 1, sizeof *w->to_external);
    w->pbfiles = calloc(m->n_sources, sizeof *w->pbfiles);
    if (!w->encs || !w->edits || !w->delta || !w->files || !w->shared || !w->to_external ||
        !w->pbfiles)
        return nomem(w);
    w->pbfiles[pb->new_pbfile] = true;
    for (size_t id = 0; id < count; id++)
        w->pbfiles[pb->tensors[id].pbfile] = true;
    /* A split MindIR stays split: new parameters join the last data file. */
    w->new_ext = NO_FILE;
    for (size_t id = 0; pb->mindir && id < count; id++)
        if (pb->tensors[id].role == CK_ROLE_TOP && pb->tensors[id].storage == CK_STORE_EXTERNAL)
            w->new_ext = pb->tensors[id].ext_src;
    return find_shared(w);
}

/* Plan and write one protobuf file: the model (which also writes the data
 * files), or a legacy variables file, when it changes. */
static int write_pbfile(writer *w, uint32_t p, const ck_write_tensor *ts, size_t n,
                        int32_t *state, ck_commit_group *g)
{
    w->pbfile = p;
    w->file = w->m->sources[p];
    if (plan(w, ts, n, state) < 0 || fit(w, ts, n, state) < 0)
        return -1;
    if (p == 0)
        return check_own_file(w) < 0 || write_data_files(w, g) < 0
                   ? -1
                   : emit(w, g->files[0].fd, g->files[0].target, &w->m->env);
    if (w->n_edits == 0)
        return 0;
    int fd = ck_group_add(g, w->file->path, w->err);
    return fd < 0 ? -1 : emit(w, fd, w->file->path, data_envelope(w));
}

int ck_pb_write(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                ck_commit_group *g, ck_error *err)
{
    const ck_pb_layout *pb = ck_pb_layout_of(m);
    writer w = {.m = m, .pb = pb, .f = &pb->fields, .progress = g->progress, .err = err,
                .own_data = g->own_data, .data_replace = g->data_replace, .out_dir = g->dir};
    int32_t *state = malloc((m->index.count ? m->index.count : 1) * sizeof *state);
    int rc = -1;
    if (state == NULL)
        nomem(&w);
    else if (setup(&w, n) == 0)
        rc = write_pbfile(&w, 0, tensors, n, state, g);
    for (uint32_t p = 1; rc == 0 && p < m->n_sources; p++)
        if (w.pbfiles[p])
            rc = write_pbfile(&w, p, tensors, n, state, g);
    if (w.encs != NULL)
        free_encs(&w);
    free(w.encs);
    free(w.edits);
    free(w.delta);
    free(w.files);
    free(w.shared);
    free(w.to_external);
    free(w.pbfiles);
    free(w.inputs.p);
    free(state);
    return rc;
}

/* ---- the writers ---- */

/* A type is its DataType code in a graph. */
static bool pb_same_type(const ck_dtype *a, const ck_dtype *b)
{
    return a->pb_code == b->pb_code;
}

const ck_writer ck_onnx_writer = {
    .encode = ck_pb_write,
    .new_data_file = big_data_name,
    .same_type = pb_same_type,
    .shape = &ck_shape_pb,
};

const ck_writer ck_mindir_writer = {
    .encode = ck_pb_write,
    .new_data_file = big_data_name,
    .prefixes_names = true,
    .same_type = pb_same_type,
    .shape = &ck_shape_pb,
};
