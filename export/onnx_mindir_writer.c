#include "onnx_mindir_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/pb_wire.h"

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
    uint64_t data_len;
    unsigned char *owned;       /* a typed field encoded in memory */
} enc;

enum { E_VARINT, E_TENSOR, E_DROP, E_INSERT };

typedef struct edit {
    uint64_t off, end;          /* the original bytes replaced */
    int kind;
    uint64_t value;             /* E_VARINT: the new length */
    size_t first, count;        /* E_TENSOR / E_INSERT: encs */
    size_t key_len;             /* E_TENSOR: the original key's; E_INSERT: the list's */
} edit;

typedef struct writer {
    const ck_model *m;
    const ck_pb_layout *pb;
    const ck_pb_fields *f;
    ck_source *file;
    pb_reader r;
    enc *encs;
    size_t n_encs;
    edit *edits;
    size_t n_edits;
    int64_t *delta;             /* per frame: growth of its body */
    ck_error *err;
    char q[CK_QUOTE_BUF];
} writer;

static int nomem(writer *w)
{
    return ck_fail(w->err, ENOMEM, "%s: out of memory", w->m->path);
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

/* Which typed field a type keeps its values in, as the reader expects. */
static uint32_t typed_field_for(const writer *w, int code)
{
    switch (code) {
    case 1: case 14: return w->f->t_float;
    case 11: case 15: return w->f->t_double;
    case 7: return w->f->t_int64;
    case 12: case 13: return w->f->t_uint64;
    default: return w->f->t_int32;
    }
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

static uint64_t pieces_len(const ck_write_tensor *t)
{
    uint64_t n = 0;
    for (size_t i = 0; i < t->n_pieces; i++)
        n += t->pieces[i].len;
    return n;
}

/* The data field in the given storage: key and length into b (the pre
 * part), then the bytes as pieces, or everything in memory. */
static int put_data(writer *w, enc *e, membuf *b, const ck_write_tensor *t, uint8_t storage)
{
    uint64_t n = pieces_len(t);
    uint32_t field = w->f->t_raw;
    if (storage == CK_STORE_EXTERNAL)
        return ck_fail(w->err, ENOTSUP, "%s: tensor '%s': writing external data is not "
                       "supported yet", w->m->path, label(w, t));
    if (storage == CK_STORE_TYPED) {
        field = typed_field_for(w, t->dtype->pb_code);
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

static bool is_data_field(const writer *w, uint32_t num)
{
    const ck_pb_fields *f = w->f;
    return num == f->t_raw || num == f->t_float || num == f->t_int32 || num == f->t_string ||
           num == f->t_int64 || num == f->t_double || num == f->t_uint64 ||
           num == f->t_external || (f->t_location && num == f->t_location);
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

/* A changed original tensor: its fields in order, dims/type, name and
 * data replaced. */
static int encode_changed(writer *w, enc *e, const ck_write_tensor *t, const ck_tensor *orig,
                          const ck_pb_tensor *pt)
{
    bool renamed = t->name_len != orig->name_len || memcmp(t->name, orig->name, t->name_len);
    bool prefixed = renamed && w->pb->mindir && pt->role == CK_ROLE_TOP &&
                    w->pb->graph_name != NULL;
    if (renamed && pt->role != CK_ROLE_TOP)
        return ck_fail(w->err, EBUSY, "%s: tensor '%s' is held by a node and cannot be renamed",
                       w->m->path, label(w, t));
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
        } else if (is_data_field(w, fl.num)) {
            if (!data_done && put_data(w, e, b, t, pt->storage) < 0)
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
    if (!data_done && pieces_len(t) > 0) {
        if (b == &e->pre && e->post.len == 0)
            return put_data(w, e, b, t, CK_STORE_RAW);
        return ck_fail(w->err, EIO, "%s: tensor '%s': no place for its data", w->m->path,
                       label(w, t));
    }
    return 0;
}

static int encode_new(writer *w, enc *e, const ck_write_tensor *t)
{
    if (put_shape(w, &e->pre, t) < 0 ||
        put_name(w, &e->pre, t, w->pb->mindir && w->pb->graph_name != NULL) < 0)
        return -1;
    return put_data(w, e, &e->pre, t, CK_STORE_RAW);
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
        if (state[id] == -2)
            continue;
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
            if (encode_changed(w, en, t, orig, pt) < 0)
                return -1;
            e.kind = E_TENSOR;
            e.first = w->n_encs - 1;
            e.count = 1;
            e.key_len = (size_t)(pt->len_off - pt->key_off);
            new_len = field_len(en, e.key_len);
        }
        w->delta[pt->frame] += (int64_t)new_len - (int64_t)old_len;
        add_edit(w, e);
    }
    edit ins = {.off = w->pb->insert_off, .end = w->pb->insert_off, .kind = E_INSERT,
                .first = w->n_encs,
                .key_len = ck_varint_len((uint64_t)w->f->graph_tensor << 3 | PB_WT_LEN)};
    uint64_t grow = 0;
    for (size_t i = 0; i < n; i++) {
        if (ts[i].orig_id != CK_WRITE_NEW)
            continue;
        if (check_type(w, &ts[i]) < 0)
            return -1;
        enc *en = new_enc(w);
        if (encode_new(w, en, &ts[i]) < 0)
            return -1;
        grow += field_len(en, ins.key_len);
        ins.count++;
    }
    if (ins.count > 0) {
        if (w->pb->main_graph == CK_PB_NO_FRAME)
            return ck_fail(w->err, EINVAL, "%s: the model has no main graph to add tensors to",
                           w->m->path);
        w->delta[w->pb->main_graph] += (int64_t)grow;
        add_edit(w, ins);
    }
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
    for (size_t i = 0; i < e->n_pieces; i++)
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
    uint64_t n = 0;
    for (size_t i = 0; i < e->count; i++)
        n += field_len(&w->encs[e->first + i], e->key_len);
    return n;
}

static int emit(writer *w, int out_fd)
{
    ck_sink s = {.fd = out_fd, .path = w->m->path, .err = w->err, .buf = malloc(CK_SINK_BUF)};
    if (s.buf == NULL)
        return nomem(w);
    int rc = 0;
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
    free(s.buf);
    return rc;
}

static int check_size(writer *w)
{
    uint64_t size = w->file->size;
    for (size_t i = 0; i < w->n_edits; i++)
        size = size - (w->edits[i].end - w->edits[i].off) + edit_len(w, &w->edits[i]);
    if (size > CK_PB_MAX_MESSAGE)
        return ck_fail(w->err, EFBIG, "%s: the new model would be %llu bytes, over protobuf's "
                       "2 GiB limit; writing external data is not supported yet", w->m->path,
                       (unsigned long long)size);
    return 0;
}

int ck_pb_write(const ck_model *m, const ck_write_tensor *tensors, size_t n, int out_fd,
                ck_error *err)
{
    const ck_pb_layout *pb = m->pb;
    size_t count = m->index.count;
    writer w = {.m = m, .pb = pb, .f = &pb->fields, .file = m->sources[0], .err = err};
    int32_t *state = malloc((count ? count : 1) * sizeof *state);
    w.encs = calloc(count + n + 1, sizeof *w.encs);
    w.edits = calloc(count + pb->n_frames + 1, sizeof *w.edits);
    w.delta = calloc(pb->n_frames ? pb->n_frames : 1, sizeof *w.delta);
    int rc = -1;
    if (state == NULL || w.encs == NULL || w.edits == NULL || w.delta == NULL) {
        nomem(&w);
        goto out;
    }
    if (plan_tensors(&w, tensors, n, state) < 0)
        goto out;
    plan_frames(&w);
    qsort(w.edits, w.n_edits, sizeof *w.edits, by_offset);
    if (check_size(&w) < 0)
        goto out;
    rc = emit(&w, out_fd);
out:
    for (size_t i = 0; i < w.n_encs; i++) {
        free(w.encs[i].pre.p);
        free(w.encs[i].post.p);
        free(w.encs[i].owned);
    }
    free(w.encs);
    free(w.edits);
    free(w.delta);
    free(state);
    return rc;
}
