/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_tensor: one TensorProto of an ONNX or MindIR model into the
 * index (onnx_mindir_internal.h lists the reader's files).
 *
 * A tensor's fields are read in one pass (read_tensor_fields), checked
 * (dims, data_type, the byte count against its storage) and its bytes
 * located: raw_data and packed float_data / double_data as extents in the
 * file, external data as extents in its data file, and the other typed
 * fields decoded once into an unlinked temporary file, "the decoded typed
 * fields", whose byte count is only known by decoding them.
 *
 * A bad tensor is refused with one line naming the offset of the key of
 * the field at fault: the data_type, the dim that takes the byte count
 * past INT64_MAX, the raw_data or typed field of the wrong size, the
 * external offset or length outside the data file.  Dims are checked once
 * the whole TensorProto is read, so that these messages name the tensor.
 * (A length past its message or the file, and a 33rd nested graph, are
 * the walk's: pb_graph_walk.h.)  tests/bats/onnx_mindir_bad_input.bats
 * checks each case against the offsets graph_oracle.py locates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx_mindir_internal.h"
#include "onnx_mindir_reader.h"

static const char *const pb_type_names[] = {
    "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING",
    "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
    "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2",
};

const char *ck_pb_type_name(long code, bool mindir)
{
    if (mindir && code == 17)
        return "FLOAT64";
    if (mindir && code == 18)
        return "QINT4X2";
    if (mindir && code > 18)
        return "?";
    if (code < 0 || code >= (long)(sizeof pb_type_names / sizeof pb_type_names[0]))
        return "?";
    return pb_type_names[code];
}

/* ---- the decoded-typed-fields file ---- */

static int dec_open(rd *d)
{
    if (d->dec_fd < 0)
        d->dec_fd = ck_scratch_fd(ck_envelope_is_secret(&d->m->env), PATH(d),
                                  "decoded typed fields", d->err);
    return d->dec_fd < 0 ? -1 : 0;
}

static int dec_write(rd *d, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(d->dec_fd, p, len, (off_t)d->dec_size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ck_fail_errno(d->err, n < 0 ? errno : EIO, "%s: cannot write decoded "
                                 "typed fields to a temporary file", PATH(d));
        p += n;
        len -= (size_t)n;
        d->dec_size += (uint64_t)n;
    }
    return 0;
}

/* Decoded typed fields were given source UINT32_MAX while reading: now
 * that the temporary file is complete, make it a source and point them
 * at it. */
int omr_bind_decoded(rd *d)
{
    if (d->dec_fd < 0)
        return 0;
    ck_source *src = ck_source_adopt_fd(d->dec_fd, "decoded typed fields", d->err);
    d->dec_fd = -1;
    if (src == NULL)
        return -1;
    long id = ck_model_add_source(d->m, src, d->err);
    if (id < 0)
        return -1;
    d->pb->decoded_src = (uint32_t)id;
    for (size_t i = 0; i < d->m->index.count; i++) {
        ck_tensor *t = &d->m->index.tensors[i];
        if (t->n_ext == 1 && t->ext0.src == UINT32_MAX)
            t->ext0.src = (uint32_t)id;
    }
    return 0;
}

/* ---- tensors ---- */

static bool is_fixed_field(const rd *d, uint32_t field)
{
    return field == d->s->t_float || field == d->s->t_double;
}

uint32_t ck_pb_typed_field(const ck_pb_layout *pb, long type)
{
    const ck_pb_fields *f = &pb->fields;
    switch (type) {
    case 1: case 14: return f->t_float;
    case 11: case 15: return f->t_double;
    case 7: return f->t_int64;
    case 12: case 13: return f->t_uint64;
    case 8: return f->t_string;
    case 17: return pb->mindir ? f->t_double : f->t_int32; /* MindIR's FLOAT64 */
    default: return f->t_int32;
    }
}

static int is_typed(const rd *d, uint32_t f)
{
    const ck_pb_schema *s = d->s;
    return f == s->t_float || f == s->t_int32 || f == s->t_string || f == s->t_int64 ||
           f == s->t_double || f == s->t_uint64;
}

/* A typed field's name, for messages. */
static const char *typed_name(const rd *d, uint32_t field)
{
    const ck_pb_schema *s = d->s;
    if (field == s->t_float)
        return "float_data";
    if (field == s->t_double)
        return "double_data";
    if (field == s->t_int64)
        return "int64_data";
    if (field == s->t_uint64)
        return "uint64_data";
    return field == s->t_string ? "string_data" : "int32_data";
}

/* The wire type of one value of a typed field; LEN is a packed run. */
static int typed_value_wire(const rd *d, uint32_t field)
{
    if (field == d->s->t_float)
        return PB_WT_I32;
    if (field == d->s->t_double)
        return PB_WT_I64;
    return field == d->s->t_string ? PB_WT_LEN : PB_WT_VARINT;
}

/* Dims are checked once the tensor's name is known (check_dims), so that
 * the message can name it. */
static void add_dim(tinfo *ti, uint64_t v, uint64_t at)
{
    if (ti->ndim == CK_MAX_DIMS) {
        if (!ti->too_many_dims)
            ti->dim_at[CK_MAX_DIMS] = at;
        ti->too_many_dims = true;
        return;
    }
    ti->dim_at[ti->ndim] = at;
    ti->dims[ti->ndim++] = (int64_t)v;
}

static int read_dims(rd *d, const pb_field *f, uint64_t end, tinfo *ti)
{
    uint64_t v;
    if (f->wire_type == PB_WT_VARINT) {
        if (pb_read_varint(&d->w.r, end, &v, d->err) < 0)
            return -1;
        add_dim(ti, v, f->key_off);
        return 0;
    }
    if (f->wire_type != PB_WT_LEN)
        return ck_pb_bad_wire(&d->w, f, "TensorProto.dims", PB_WT_VARINT);
    uint64_t len;
    if (pb_read_len(&d->w.r, end, f->key_off, &len, d->err) < 0)
        return -1;
    uint64_t stop = d->w.r.pos + len;
    while (d->w.r.pos < stop) {
        if (pb_read_varint(&d->w.r, stop, &v, d->err) < 0)
            return -1;
        add_dim(ti, v, f->key_off);
    }
    return 0;
}

static int note_typed(rd *d, const pb_field *f, uint64_t end, tinfo *ti)
{
    if (ti->typed_field != 0 && ti->typed_field != f->num)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor has values in two typed "
                       "fields (%u and %u)", PATH(d), OFF(f->key_off), ti->typed_field, f->num);
    /* Decoded as values, another wire type would show garbage (protobuf
     * itself would keep it aside as an unknown field). */
    int one = typed_value_wire(d, f->num);
    if (f->wire_type != one && f->wire_type != PB_WT_LEN)
        return ck_pb_bad_wire(&d->w, f, typed_name(d, f->num), one);
    if (ti->typed_runs == 0)
        ti->typed_key_off = f->key_off;
    ti->typed_field = f->num;
    ti->typed_runs++;
    ti->typed_wire = f->wire_type;
    if (f->wire_type == PB_WT_LEN) {
        uint64_t len;
        if (pb_read_len(&d->w.r, end, f->key_off, &len, d->err) < 0)
            return -1;
        ti->typed_off = d->w.r.pos;
        ti->typed_len = len;
        d->w.r.pos += len;
        return 0;
    }
    return pb_skip(&d->w.r, end, f->key_off, f->wire_type, d->err);
}

static int read_tensor_fields(rd *d, uint64_t body, uint64_t end, tinfo *ti)
{
    const ck_pb_schema *s = d->s;
    memset(ti, 0, offsetof(tinfo, name));
    ti->name.set = false;
    ti->name.len = 0;
    ti->name.buf[0] = '\0';
    memset(&ti->raw_off, 0, sizeof *ti - offsetof(tinfo, raw_off));
    pb_seek(&d->w.r, body);
    pb_field f;
    int rc;
    uint64_t v;
    while ((rc = pb_next_field(&d->w.r, end, &f, d->err)) > 0) {
        if (f.num == s->t_dims) {
            rc = read_dims(d, &f, end, ti);
        } else if (f.num == s->t_type) {
            rc = ck_pb_read_varint_field(&d->w, &f, end, "TensorProto.data_type", &v);
            ti->type = (long)(int32_t)v;
            ti->type_at = f.key_off;
            ti->has_type = true;
        } else if (f.num == s->t_name) {
            rc = ck_pb_read_str(&d->w, &f, end, "tensor name", &ti->name);
        } else if (f.num == s->t_raw) {
            if (f.wire_type != PB_WT_LEN)
                return ck_pb_bad_wire(&d->w, &f, "TensorProto.raw_data", PB_WT_LEN);
            rc = pb_read_len(&d->w.r, end, f.key_off, &ti->raw_len, d->err);
            ti->raw_at = f.key_off;
            ti->raw_off = d->w.r.pos;
            ti->has_raw = true;
            d->w.r.pos += ti->raw_len;
        } else if (is_typed(d, f.num)) {
            rc = note_typed(d, &f, end, ti);
        } else if (s->t_segment != 0 && f.num == s->t_segment) {
            return ck_fail(d->err, ENOTSUP, "%s: offset %llu: segmented tensors "
                           "(TensorProto.segment) are not supported", PATH(d), OFF(f.key_off));
        } else if (f.num == s->t_external) {
            rc = omr_read_external(d, &f, end, ti);
        } else if (s->t_location != 0 && f.num == s->t_location) {
            rc = ck_pb_read_varint_field(&d->w, &f, end, "TensorProto.data_location", &v);
            ti->external = v == 1;
        } else {
            rc = pb_skip(&d->w.r, end, f.key_off, f.wire_type, d->err);
        }
        if (rc < 0)
            return -1;
    }
    return rc;
}

/* Decode a typed field into the temporary file (little-endian, width
 * bytes per value: int32_data holding INT8 keeps the low byte, and so on). */
static int decode_typed(rd *d, ck_tensor *t, uint64_t body, uint64_t end, uint32_t field,
                        unsigned width, uint64_t *out_len)
{
    if (dec_open(d) < 0)
        return -1;
    unsigned char buf[8192];
    size_t used = 0;
    uint64_t start = d->dec_size;
    bool is_fixed = is_fixed_field(d, field);
    unsigned fixed_w = field == d->s->t_double ? 8 : 4;
    pb_seek(&d->w.r, body);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&d->w.r, end, &f, d->err)) > 0) {
        if (f.num != field) {
            if (pb_skip(&d->w.r, end, f.key_off, f.wire_type, d->err) < 0)
                return -1;
            continue;
        }
        uint64_t stop = end;
        bool packed = f.wire_type == PB_WT_LEN;
        if (packed) {
            uint64_t len;
            if (pb_read_len(&d->w.r, end, f.key_off, &len, d->err) < 0)
                return -1;
            stop = d->w.r.pos + len;
        }
        /* One value, or a packed run of any number of them (none too). */
        while (!packed || d->w.r.pos < stop) {
            uint64_t v = 0;
            if (is_fixed) {
                if (pb_read_bytes(&d->w.r, stop, &v, fixed_w, d->err) < 0)
                    return -1;
            } else if (pb_read_varint(&d->w.r, stop, &v, d->err) < 0) {
                return -1;
            }
            if (used + 8 > sizeof buf) {
                if (dec_write(d, buf, used) < 0)
                    return -1;
                used = 0;
            }
            for (unsigned k = 0; k < width; k++)
                buf[used++] = (unsigned char)(v >> (8 * k));
            if (!packed)
                break;
        }
    }
    if (rc < 0 || dec_write(d, buf, used) < 0)
        return -1;
    (void)t;
    *out_len = d->dec_size - start;
    return 0;
}

/* STRING: each element as its bytes and a NUL. */
static int decode_strings(rd *d, uint64_t body, uint64_t end, uint64_t *out_len)
{
    if (dec_open(d) < 0)
        return -1;
    uint64_t start = d->dec_size;
    pb_seek(&d->w.r, body);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&d->w.r, end, &f, d->err)) > 0) {
        if (f.num != d->s->t_string || f.wire_type != PB_WT_LEN) {
            if (pb_skip(&d->w.r, end, f.key_off, f.wire_type, d->err) < 0)
                return -1;
            continue;
        }
        uint64_t len;
        if (pb_read_len(&d->w.r, end, f.key_off, &len, d->err) < 0)
            return -1;
        unsigned char buf[8192];
        while (len > 0) {
            size_t n = len < sizeof buf ? (size_t)len : sizeof buf;
            if (pb_read_bytes(&d->w.r, end, buf, n, d->err) < 0 || dec_write(d, buf, n) < 0)
                return -1;
            len -= n;
        }
        if (dec_write(d, "", 1) < 0)
            return -1;
    }
    if (rc < 0)
        return -1;
    *out_len = d->dec_size - start;
    return 0;
}

static int set_dims(rd *d, ck_tensor *t, const int64_t *dims, uint32_t ndim)
{
    int64_t *copy = ck_arena_alloc(&d->m->index.arena, (ndim ? ndim : 1) * sizeof *copy);
    if (copy == NULL)
        return nomem(d);
    memcpy(copy, dims, ndim * sizeof *copy);
    t->dims = copy;
    t->ndim = ndim;
    return 0;
}

static int check_dims(rd *d, const ck_tensor *t, const tinfo *ti)
{
    for (uint32_t i = 0; i < ti->ndim; i++)
        if (ti->dims[i] < 0)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': negative dim %" PRId64,
                           PATH(d), OFF(ti->dim_at[i]), tensor_label(d, t), ti->dims[i]);
    if (ti->too_many_dims)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': more than %d dims",
                       PATH(d), OFF(ti->dim_at[CK_MAX_DIMS]), tensor_label(d, t), CK_MAX_DIMS);
    return 0;
}

/* The bytes dims x type need, in *out; -1, or the index of the dim that
 * takes the count past INT64_MAX (sizes are off_t, and no file is that
 * large), for the message to name it. */
static long want_bytes(const tinfo *ti, const ck_dtype *dt, uint64_t *out)
{
    uint64_t n;
    long bad = ck_shape_product(&ck_shape_pb, dt, ti->dims, ti->ndim, &n);
    if (bad < 0)
        *out = dt->kind == CK_KIND_PACKED ? n / dt->per_byte + (n % dt->per_byte != 0) : n;
    return bad;
}

static int mismatch(rd *d, ck_tensor *t, uint64_t at, const char *where_, uint64_t have,
                    uint64_t want)
{
    return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': %s holds %llu bytes but "
                   "its dims and type %s need %llu", PATH(d), OFF(at), tensor_label(d, t),
                   where_, OFF(have), t->type_name, OFF(want));
}

/* Work out where t's bytes are, by its storage. */
static int locate_data(rd *d, ck_tensor *t, ck_pb_tensor *pt, const tinfo *ti, uint64_t body,
                       uint64_t end, uint64_t want)
{
    const ck_dtype *dt = t->dtype;
    if (ti->external) {
        long sid = omr_external_source(d, t, &ti->location);
        if (sid < 0)
            return -1;
        ck_source *src = d->m->sources[sid];
        /* Without a length the data runs to the end of the file, so only a
         * given offset or length can be out of range.  The file is named as
         * the model names it, quoted: it may hold any byte. */
        char q[CK_QUOTE_BUF];
        const char *file = ck_quote(q, ti->location.buf, ti->location.len);
        if (ti->ext_off > src->size)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': external data "
                           "offset %llu is past the end of '%s' (%llu bytes)", PATH(d),
                           OFF(ti->ext_off_at), tensor_label(d, t), OFF(ti->ext_off), file,
                           OFF(src->size));
        uint64_t len = ti->has_ext_len ? ti->ext_len : src->size - ti->ext_off;
        if (len > src->size - ti->ext_off)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': external data range "
                           "%llu+%llu runs past the end of '%s' (%llu bytes)", PATH(d),
                           OFF(ti->ext_len_at), tensor_label(d, t), OFF(ti->ext_off), OFF(len),
                           file, OFF(src->size));
        if (len != want)
            return mismatch(d, t, ti->has_ext_len ? ti->ext_len_at : pt->key_off,
                            "its external data", len, want);
        if (d->pb->mindir && ti->ext_off < CK_MINDIR_DATA_HEADER && len > 0)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': external data offset "
                           "%llu is inside the %u-byte header of '%s'", PATH(d),
                           OFF(ti->ext_off_at), tensor_label(d, t), OFF(ti->ext_off),
                           CK_MINDIR_DATA_HEADER, file);
        pt->storage = CK_STORE_EXTERNAL;
        pt->ext_src = (uint32_t)sid;
        if (len > 0 && ck_tensor_add_extent(t, (uint32_t)sid, ti->ext_off, len) < 0)
            return nomem(d);
        t->nbytes = len;
        return 0;
    }
    if (ti->has_raw) {
        if (dt->kind == CK_KIND_STR)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': STRING data in "
                           "raw_data", PATH(d), OFF(ti->raw_at), tensor_label(d, t));
        if (ti->raw_len != want)
            return mismatch(d, t, ti->raw_at, "raw_data", ti->raw_len, want);
        pt->storage = CK_STORE_RAW;
        if (want > 0 && ck_tensor_add_extent(t, d->src_id, ti->raw_off, want) < 0)
            return nomem(d);
        t->nbytes = want;
        return 0;
    }
    if (ti->typed_field == 0) {
        if (want != 0)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s' has no data (no "
                           "raw_data, typed values or external data) for %llu bytes", PATH(d),
                           OFF(pt->key_off), tensor_label(d, t), OFF(want));
        pt->storage = CK_STORE_NONE;
        return 0;
    }
    uint32_t expect = ck_pb_typed_field(d->pb, ti->type);
    if (ti->typed_field != expect)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': %s values in typed "
                       "field %u (expected field %u)", PATH(d), OFF(ti->typed_key_off),
                       tensor_label(d, t), t->type_name, ti->typed_field, expect);
    pt->storage = CK_STORE_TYPED;
    pt->typed_field = (uint8_t)ti->typed_field;
    uint64_t have;
    if (dt->kind == CK_KIND_STR) {
        if (decode_strings(d, body, end, &have) < 0)
            return -1;
        want = have;
    } else if (is_fixed_field(d, ti->typed_field) && ti->typed_runs == 1 &&
               ti->typed_wire == PB_WT_LEN) {
        /* Packed floats and doubles are little-endian already: zero copy. */
        if (ti->typed_len != want)
            return mismatch(d, t, ti->typed_key_off, typed_name(d, ti->typed_field),
                            ti->typed_len, want);
        if (want > 0 && ck_tensor_add_extent(t, d->src_id, ti->typed_off, want) < 0)
            return nomem(d);
        t->nbytes = want;
        return 0;
    } else {
        unsigned width = is_fixed_field(d, ti->typed_field)
                             ? (ti->typed_field == d->s->t_double ? 8 : 4)
                             : dt->itemsize;
        if (decode_typed(d, t, body, end, ti->typed_field, width, &have) < 0)
            return -1;
    }
    uint64_t start = d->dec_size - have;
    if (have != want)
        return mismatch(d, t, ti->typed_key_off, typed_name(d, ti->typed_field), have, want);
    if (want > 0 && ck_tensor_add_extent(t, UINT32_MAX, start, want) < 0)
        return nomem(d);
    t->nbytes = want;
    return 0;
}

/* A MindIR attribute's tensor without data is a data type, not a tensor:
 * MindSpore's loader (load_model.cc, BuildValueFromAttributeProto; the same
 * rule in anf_model_parser.cc) reads a TENSORS value without raw_data as the
 * type its data_type names.  Its bprop graphs (ops/bprop_mindir/) hold such
 * values, e.g. INT16 with dims [], so they are not listed.  An attribute
 * tensor is one with a holder (the node it belongs to). */
static bool is_type_value(const rd *d, const char *holder, const tinfo *ti)
{
    return d->pb->mindir && holder != NULL && !ti->has_raw && ti->typed_field == 0 &&
           !ti->external;
}

int omr_add_tensor(rd *d, const pb_field *f, uint64_t end, const where *w, ck_pb_role role,
                   const ck_pb_str *value_name, const char *holder, uint8_t part)
{
    uint64_t len_off, body, body_end;
    if (ck_pb_enter(&d->w, f, end, "TensorProto", &len_off, &body, &body_end) < 0)
        return -1;
    ck_index *ix = &d->m->index;
    if (ix->count >= CK_MAX_TENSORS)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: more than %u tensors", PATH(d),
                       OFF(f->key_off), CK_MAX_TENSORS);
    tinfo *ti = &d->ti;
    if (read_tensor_fields(d, body, body_end, ti) < 0)
        return -1;
    if (is_type_value(d, holder, ti))
        return 0;
    long id = ck_index_add(ix);
    if (id < 0)
        return nomem(d);
    if ((size_t)id >= d->cap_pbt) {
        size_t cap = d->cap_pbt ? d->cap_pbt * 2 : 64;
        ck_pb_tensor *pbt = realloc(d->pb->tensors, cap * sizeof *pbt);
        if (pbt == NULL)
            return nomem(d);
        d->pb->tensors = pbt;
        d->cap_pbt = cap;
    }
    ck_pb_tensor *pt = &d->pb->tensors[id];
    *pt = (ck_pb_tensor){.key_off = f->key_off, .len_off = len_off, .frame = w->frame,
                         .role = (uint8_t)role, .holder = holder, .pbfile = d->src_id};
    ck_tensor *t = &ix->tensors[id];
    t->rec_off = body;
    t->rec_end = body_end;
    t->part = part;
    const ck_pb_str *nm = value_name && value_name->len ? value_name : &ti->name;
    char *name = ck_arena_strndup(&ix->arena, nm->buf, nm->len);
    if (name == NULL)
        return nomem(d);
    t->name = name;
    t->name_len = (uint32_t)nm->len;
    if (role == CK_ROLE_TOP && d->pb->mindir) {
        const char *colon = memchr(name, ':', nm->len);
        if (colon != NULL) {
            t->dir_src = colon + 1;
            t->dir_src_len = (uint32_t)(nm->len - (size_t)(colon + 1 - name));
        }
    }
    if (role == CK_ROLE_CONST)
        t->dir_suffix = "%const";
    else if (role == CK_ROLE_SUB)
        t->dir_suffix = w->suffix;
    if (check_dims(d, t, ti) < 0)
        return -1;
    if (!ti->has_type)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s' has no data_type",
                       PATH(d), OFF(f->key_off), tensor_label(d, t));
    t->dtype = ck_dtype_from_pb(ti->type, d->pb->mindir);
    t->type_name = ck_pb_type_name(ti->type, d->pb->mindir);
    if (t->dtype == NULL)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': unknown data_type %ld",
                       PATH(d), OFF(ti->type_at), tensor_label(d, t), ti->type);
    uint64_t want = 0;
    long bad_dim = t->dtype->kind == CK_KIND_STR ? -1 : want_bytes(ti, t->dtype, &want);
    if (bad_dim >= 0)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: tensor '%s': dims overflow the byte "
                       "count", PATH(d), OFF(ti->dim_at[bad_dim]), tensor_label(d, t));
    if (locate_data(d, t, pt, ti, body, body_end, want) < 0)
        return -1;
    t->read_only = t->dtype->kind != CK_KIND_NUMERIC || role == CK_ROLE_MAP;
    if (t->dtype->kind == CK_KIND_NUMERIC)
        return set_dims(d, t, ti->dims, ti->ndim);
    int64_t flat = (int64_t)t->nbytes;
    if (t->dtype->kind == CK_KIND_OPAQUE)
        return set_dims(d, t, ti->dims, ti->ndim);
    return set_dims(d, t, &flat, 1);
}
