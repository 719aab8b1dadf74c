/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_state: an ONNX or MindIR model's layout (pb_layout.h) kept
 * in a saved index (core/saved_index.h), so that a later mount skips the
 * graph walk, which reads the whole protobuf file (over object storage,
 * every byte of a model whose weights are inline).
 *
 * Only what a model of one file leaves: no external data, no decoded
 * typed fields, no legacy variables files (the saved index takes models
 * of one source only).  The bytes, little-endian:
 *   u32 STATE_VERSION, u8 mindir;
 *   u64 frame count, then per frame: u64 key_off, len_off, body_off,
 *     body_end, u32 parent + 1 (0: none);
 *   u32 main_graph + 1, u64 insert_off, u64 inputs_end, i64 ir_version;
 *   opt-str graph_name;
 *   u64 tensor count (the index's), then per tensor: u64 key_off,
 *     len_off, u32 frame + 1, u8 storage, u8 role, opt-str holder;
 *   u32 CRC-32 of the layout's own bytes in the file: every frame's and
 *     every tensor's key and length prefix.
 * An opt-str is a u32 length (NO_STR: absent) and its bytes.
 *
 * Everything is checked against the file's size and the saved index's
 * tensors before it is used: frames nest inside their parents, each
 * tensor's field is inside its frame and ends where its record (the
 * saved index's, checked against the file) ends.  The CRC is not read at
 * mount, which would scatter small reads over the whole file; it is
 * checked before every save (check_state), whose encoder rewrites those
 * length prefixes, as the saved index checks each tensor's own record.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "onnx_mindir_internal.h"
#include "onnx_mindir_reader.h"
#include "../core/byte_buf.h"
#include "../core/saved_index.h"

#define STATE_VERSION 1
#define NO_STR 0xFFFFFFFFu
#define FRAME_LEN 36        /* four u64 and a u32 */
#define TENSOR_LEN 26       /* two u64, a u32, two u8, an opt-str's length */
#define MAX_STR_LEN (1u << 16)
/* A key and a length prefix: a varint each, at most 10 bytes. */
#define PREFIX_MAX 20

/* ---- writing ---- */

/* NULL: absent.  One too long to read back fails the buffer: no index. */
static void put_opt_str(ck_wbuf *b, const char *s, size_t n)
{
    if (s == NULL) {
        ck_wbuf_u32(b, NO_STR);
        return;
    }
    if (n >= MAX_STR_LEN)
        b->failed = true;
    ck_wbuf_u32(b, (uint32_t)n);
    ck_wbuf_put(b, s, n);
}

/* The CRC-32 of the bytes [off, end) of the model file, chained on crc:
 * 0, or -1 when they cannot be read or are too many for a prefix. */
static int crc_prefix(const ck_model *m, uint64_t off, uint64_t end, uLong *crc, ck_error *err)
{
    unsigned char buf[PREFIX_MAX];
    if (end < off || end - off > PREFIX_MAX)
        return ck_fail(err, EINVAL, "%s: offset %llu: a bad layout", m->path,
                       (unsigned long long)off);
    if (ck_source_read(m->sources[0], buf, (size_t)(end - off), off, err) < 0)
        return -1;
    *crc = crc32(*crc, buf, (uInt)(end - off));
    return 0;
}

/* The CRC of every frame's and tensor's key and length prefix. */
static int layout_crc(const ck_model *m, const ck_pb_layout *pb, uint32_t *out, ck_error *err)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t i = 0; i < pb->n_frames; i++)
        if (crc_prefix(m, pb->frames[i].key_off, pb->frames[i].body_off, &crc, err) < 0)
            return -1;
    for (size_t i = 0; i < m->index.count; i++)
        if (crc_prefix(m, pb->tensors[i].key_off, m->index.tensors[i].rec_off, &crc, err) < 0)
            return -1;
    *out = (uint32_t)crc;
    return 0;
}

/* An empty layout of the format's field numbers: here, beside the saved
 * form of a layout (the reader makes one too), so that this file needs
 * nothing of the reader, which calls in here. */
ck_pb_layout *omr_layout_new(bool mindir)
{
    ck_pb_layout *pb = calloc(1, sizeof *pb);
    if (pb == NULL)
        return NULL;
    const ck_pb_schema *sc = mindir ? &ck_pb_mindir_schema : &ck_pb_onnx_schema;
    pb->mindir = mindir;
    pb->main_graph = CK_PB_NO_FRAME;
    pb->fields = (ck_pb_fields){
        .graph_tensor = sc->graph_tensor, .t_dims = sc->t_dims, .t_type = sc->t_type,
        .t_float = sc->t_float, .t_int32 = sc->t_int32, .t_string = sc->t_string,
        .t_int64 = sc->t_int64, .t_name = sc->t_name, .t_raw = sc->t_raw,
        .t_double = sc->t_double, .t_uint64 = sc->t_uint64, .t_external = sc->t_external,
        .t_location = sc->t_location};
    return pb;
}

/* Whether the layout is one a model of one file leaves. */
static bool keepable(const ck_model *m, const ck_pb_layout *pb)
{
    if (pb == NULL || m->n_sources != 1 || pb->decoded_src != 0 || pb->new_pbfile != 0)
        return false;
    for (size_t i = 0; i < m->index.count; i++) {
        const ck_pb_tensor *t = &pb->tensors[i];
        if ((t->storage != CK_STORE_NONE && t->storage != CK_STORE_RAW) || t->pbfile != 0)
            return false;
    }
    return true;
}

int omr_save_state(const ck_model *m, unsigned char **state, size_t *len)
{
    const ck_pb_layout *pb = ck_pb_layout_of(m);
    ck_error err = {0};
    uint32_t crc;
    if (!keepable(m, pb) || layout_crc(m, pb, &crc, &err) < 0)
        return 1;
    ck_wbuf b = {.max = CK_SAVED_INDEX_MAX};
    ck_wbuf_u32(&b, STATE_VERSION);
    ck_wbuf_u8(&b, pb->mindir);
    ck_wbuf_u64(&b, pb->n_frames);
    for (size_t i = 0; i < pb->n_frames; i++) {
        const ck_pb_frame *f = &pb->frames[i];
        ck_wbuf_u64(&b, f->key_off);
        ck_wbuf_u64(&b, f->len_off);
        ck_wbuf_u64(&b, f->body_off);
        ck_wbuf_u64(&b, f->body_end);
        ck_wbuf_u32(&b, (uint32_t)(f->parent + 1));
    }
    ck_wbuf_u32(&b, (uint32_t)(pb->main_graph + 1));
    ck_wbuf_u64(&b, pb->insert_off);
    ck_wbuf_u64(&b, pb->inputs_end);
    ck_wbuf_u64(&b, (uint64_t)pb->ir_version);
    put_opt_str(&b, pb->graph_name, pb->graph_name_len);
    ck_wbuf_u64(&b, m->index.count);
    for (size_t i = 0; i < m->index.count; i++) {
        const ck_pb_tensor *t = &pb->tensors[i];
        ck_wbuf_u64(&b, t->key_off);
        ck_wbuf_u64(&b, t->len_off);
        ck_wbuf_u32(&b, (uint32_t)(t->frame + 1));
        ck_wbuf_u8(&b, t->storage);
        ck_wbuf_u8(&b, t->role);
        put_opt_str(&b, t->holder, t->holder ? strlen(t->holder) : 0);
    }
    ck_wbuf_u32(&b, crc);
    if (b.failed) {
        free(b.p);
        return 1;
    }
    *state = b.p;
    *len = b.len;
    return 0;
}

/* ---- reading ---- */

/* An opt-str copied into the index's arena: *out NULL when absent.
 * Whether well formed. */
static bool get_opt_str(ck_rbuf *r, ck_model *m, const char **out, size_t *n)
{
    uint32_t len = ck_rbuf_u32(r);
    *out = NULL;
    *n = 0;
    if (r->bad || len == NO_STR)
        return !r->bad;
    const unsigned char *s = len < MAX_STR_LEN ? ck_rbuf_take(r, len) : NULL;
    if (s == NULL || memchr(s, '\0', len) != NULL)
        return false;
    *out = ck_arena_strndup(&m->index.arena, (const char *)s, len);
    *n = len;
    return *out != NULL;
}

/* A frame index stored as index + 1: below n, or CK_PB_NO_FRAME. */
static bool get_frame_ref(ck_rbuf *r, size_t n, int32_t *out)
{
    uint32_t v = ck_rbuf_u32(r);
    if (v > n)
        return false;
    *out = v == 0 ? CK_PB_NO_FRAME : (int32_t)(v - 1);
    return true;
}

/* Whether [off, end) lies in frame f's body (CK_PB_NO_FRAME: the file). */
static bool inside(const ck_pb_layout *pb, int32_t f, uint64_t off, uint64_t end,
                   uint64_t size)
{
    if (f == CK_PB_NO_FRAME)
        return off <= end && end <= size;
    const ck_pb_frame *p = &pb->frames[f];
    return p->body_off <= off && off <= end && end <= p->body_end;
}

static const char *get_frames(ck_rbuf *r, ck_pb_layout *pb, uint64_t size)
{
    uint64_t n = ck_rbuf_u64(r);
    if (r->bad || n > (r->len - r->pos) / FRAME_LEN || n > (uint64_t)INT32_MAX - 1)
        return "a bad frame count";
    pb->frames = malloc((n ? n : 1) * sizeof *pb->frames);
    if (pb->frames == NULL)
        return "out of memory";
    pb->cap_frames = n;
    for (size_t i = 0; i < n; i++) {
        ck_pb_frame *f = &pb->frames[i];
        f->key_off = ck_rbuf_u64(r);
        f->len_off = ck_rbuf_u64(r);
        f->body_off = ck_rbuf_u64(r);
        f->body_end = ck_rbuf_u64(r);
        /* Frames are made as the walk enters them: a parent comes first. */
        if (!get_frame_ref(r, i, &f->parent) || r->bad || f->key_off >= f->len_off ||
            f->len_off >= f->body_off || f->body_off - f->key_off > PREFIX_MAX ||
            !inside(pb, f->parent, f->key_off, f->body_end, size) || f->body_end > size ||
            f->body_off > f->body_end)
            return "a bad frame";
        pb->n_frames = i + 1;
    }
    return NULL;
}

static const char *get_tensors(ck_rbuf *r, ck_model *m, ck_pb_layout *pb, uint64_t size)
{
    const ck_index *ix = &m->index;
    uint64_t n = ck_rbuf_u64(r);
    if (r->bad || n != ix->count || n > (r->len - r->pos) / TENSOR_LEN)
        return "a tensor count unlike the index's";
    pb->tensors = calloc(n ? n : 1, sizeof *pb->tensors);
    if (pb->tensors == NULL)
        return "out of memory";
    for (size_t i = 0; i < n; i++) {
        ck_pb_tensor *t = &pb->tensors[i];
        const ck_tensor *it = &ix->tensors[i];
        size_t hl;
        t->key_off = ck_rbuf_u64(r);
        t->len_off = ck_rbuf_u64(r);
        bool ok = get_frame_ref(r, pb->n_frames, &t->frame);
        t->storage = ck_rbuf_u8(r);
        t->role = ck_rbuf_u8(r);
        ok = ok && get_opt_str(r, m, &t->holder, &hl);
        /* Its field ends where the index's record does, checked there
         * against the file. */
        if (!ok || r->bad || t->key_off >= t->len_off || t->len_off >= it->rec_off ||
            it->rec_off - t->key_off > PREFIX_MAX ||
            !inside(pb, t->frame, t->key_off, it->rec_end, size) ||
            (t->storage != CK_STORE_NONE && t->storage != CK_STORE_RAW) ||
            (t->storage == CK_STORE_NONE && it->n_ext != 0) || t->role > CK_ROLE_MAP)
            return "a bad tensor";
    }
    return NULL;
}

static const char *decode(ck_rbuf *r, ck_model *m, ck_pb_layout *pb)
{
    uint64_t size = m->sources[0]->size;
    if (ck_rbuf_u32(r) != STATE_VERSION || ck_rbuf_u8(r) != pb->mindir)
        return "another version or format";
    const char *why = get_frames(r, pb, size);
    if (why != NULL)
        return why;
    if (!get_frame_ref(r, pb->n_frames, &pb->main_graph))
        return "a bad main graph";
    pb->insert_off = ck_rbuf_u64(r);
    pb->inputs_end = ck_rbuf_u64(r);
    pb->ir_version = (int64_t)ck_rbuf_u64(r);
    if (pb->insert_off > size || pb->inputs_end > size)
        return "a bad insertion point";
    if (!get_opt_str(r, m, &pb->graph_name, &pb->graph_name_len))
        return "a bad graph name";
    if ((why = get_tensors(r, m, pb, size)) != NULL)
        return why;
    pb->layout_crc = ck_rbuf_u32(r);
    return r->bad || r->pos != r->len ? "truncated or too long" : NULL;
}

int omr_load_state(ck_model *m, const ck_open_opts *o, const unsigned char *in, size_t len,
                   ck_error *err)
{
    (void)o;
    ck_pb_layout *pb = omr_layout_new(strcmp(m->format->name, "mindir") == 0);
    if (pb == NULL)
        return ck_nomem(err, m->path);
    m->state = pb;
    ck_rbuf r = {.p = in, .len = len};
    const char *why = decode(&r, m, pb);
    if (why != NULL)
        return ck_fail(err, EINVAL, "%s: a bad reader state: %s", m->path, why);
    pb->layout_crc_set = true;
    return 0;
}

int omr_check_state(const ck_model *m, ck_error *err)
{
    const ck_pb_layout *pb = ck_pb_layout_of(m);
    uint32_t crc;
    if (pb == NULL || !pb->layout_crc_set)
        return 0;
    if (layout_crc(m, pb, &crc, err) < 0)
        return -1;
    if (crc != pb->layout_crc)
        return ck_fail(err, EIO, "%s: the file was replaced since its index was written "
                       "(its message layout differs); remount", m->path);
    return 0;
}
