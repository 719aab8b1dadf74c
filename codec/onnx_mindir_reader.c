#define _GNU_SOURCE
#include "onnx_mindir_reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dir_name.h"
#include "pb_users.h"
#include "pb_wire.h"

/* Field numbers of the messages the walker reads (onnx-format.md 1,
 * mindspore-formats.md 4.2).  0: the format has no such field. */
typedef struct schema {
    const char *format;
    uint32_t model_graph, model_functions;
    uint32_t graph_node, graph_name, graph_tensor, graph_map;
    uint32_t node_output, node_name, node_op, node_attr;
    uint32_t attr_name, attr_t, attr_g, attr_tensors, attr_graphs;
    uint32_t t_dims, t_type, t_segment, t_float, t_int32, t_string, t_int64, t_name, t_raw,
        t_double, t_uint64, t_external, t_location;
    uint32_t map_name, map_part[3];
    /* Every node attribute's tensors are shown, not only a Constant's
     * value: ONNX keeps values there (ConstantOfShape.value...), MindIR
     * describes each node's output type and shape there, without data. */
    bool all_attr_tensors;
} schema;

static const schema onnx_schema = {
    .format = "ONNX",
    .model_graph = 7,
    .graph_node = 1, .graph_name = 2, .graph_tensor = 5,
    .node_output = 2, .node_name = 3, .node_op = 4, .node_attr = 5,
    .attr_name = 1, .attr_t = 5, .attr_g = 6, .attr_tensors = 10, .attr_graphs = 11,
    .t_dims = 1, .t_type = 2, .t_segment = 3, .t_float = 4, .t_int32 = 5, .t_string = 6,
    .t_int64 = 7, .t_name = 8, .t_raw = 9, .t_double = 10, .t_uint64 = 11,
    .t_external = 13, .t_location = 14,
    .all_attr_tensors = true,
};

static const schema mindir_schema = {
    .format = "MindIR",
    .model_graph = 7, .model_functions = 8,
    .graph_node = 1, .graph_name = 2, .graph_tensor = 3, .graph_map = 10,
    .node_output = 2, .node_name = 3, .node_op = 4, .node_attr = 5,
    .attr_name = 1, .attr_t = 6, .attr_g = 7, .attr_tensors = 12, .attr_graphs = 13,
    .t_dims = 1, .t_type = 2, .t_float = 3, .t_int32 = 4, .t_string = 5, .t_int64 = 6,
    .t_name = 7, .t_raw = 9, .t_double = 10, .t_uint64 = 11, .t_external = 12,
    .map_name = 1, .map_part = {3, 4, 5},
};

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

/* A short string field, read whole (names, op types, locations). */
typedef struct str {
    char buf[CK_PB_MAX_NAME];
    size_t len;
    bool set;
} str;

/* Where the walk is: which frame encloses what it finds, and how to name
 * it. */
typedef struct where {
    int32_t frame;
    bool main;                  /* in the main graph */
    const char *suffix;         /* "%@NODE.ATTR" inside subgraphs */
} where;

/* One TensorProto's fields, as read.  An offset named "_at" is that of the
 * key of the field that gave a value: what a message about the value names. */
typedef struct tinfo {
    int64_t dims[CK_MAX_DIMS];
    uint64_t dim_at[CK_MAX_DIMS + 1]; /* [CK_MAX_DIMS]: the first dim too many */
    uint32_t ndim;
    bool too_many_dims;
    long type;
    uint64_t type_at;
    bool has_type;
    str name;
    uint64_t raw_off, raw_len, raw_at;
    bool has_raw;
    uint32_t typed_field;       /* the one typed field present, 0 if none */
    uint32_t typed_runs;        /* its occurrences */
    uint64_t typed_off, typed_len; /* the single packed run, when typed_runs is 1 */
    int typed_wire;
    uint64_t typed_key_off;
    bool external;              /* data_location EXTERNAL / external_data present */
    str location;
    uint64_t ext_off, ext_len;
    uint64_t ext_off_at, ext_len_at;
    bool has_ext_len;
} tinfo;

typedef struct rd {
    ck_model *m;
    const schema *s;
    ck_pb_layout *pb;
    ck_source *src;             /* the protobuf file being walked ... */
    uint32_t src_id;            /* ... and its source id */
    pb_reader r;
    ck_error *err;
    int depth;
    size_t cap_pbt;
    int dec_fd;                 /* decoded typed fields, -1 until needed */
    uint64_t dec_size;
    char q[CK_QUOTE_BUF];
    str scratch;
    tinfo ti;
    ck_name_map locations;      /* external location text -> source id */
} rd;

#define PATH(d) ((d)->src->path)
#define OFF(x) ((unsigned long long)(x))

static int nomem(rd *d)
{
    return ck_fail(d->err, ENOMEM, "%s: out of memory", PATH(d));
}

static int bad_wire(rd *d, const pb_field *f, const char *what, int want)
{
    return ck_fail(d->err, EINVAL, "%s: offset %llu: %s field %u has wire type %s, expected %s",
                   PATH(d), OFF(f->key_off), what, f->num, pb_wire_type_name(f->wire_type),
                   pb_wire_type_name(want));
}

/* Read the LEN field under the cursor into s (at most CK_PB_MAX_NAME). */
static int read_str(rd *d, const pb_field *f, uint64_t end, const char *what, str *s)
{
    if (f->wire_type != PB_WT_LEN)
        return bad_wire(d, f, what, PB_WT_LEN);
    uint64_t len;
    if (pb_read_len(&d->r, end, f->key_off, &len, d->err) < 0)
        return -1;
    if (len >= CK_PB_MAX_NAME)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: %s of %llu bytes (at most %d)",
                       PATH(d), OFF(f->key_off), what, OFF(len), CK_PB_MAX_NAME - 1);
    if (pb_read_bytes(&d->r, end, s->buf, (size_t)len, d->err) < 0)
        return -1;
    s->buf[len] = '\0';
    s->len = (size_t)len;
    s->set = true;
    return 0;
}

static int read_varint_field(rd *d, const pb_field *f, uint64_t end, const char *what,
                             uint64_t *v)
{
    if (f->wire_type != PB_WT_VARINT)
        return bad_wire(d, f, what, PB_WT_VARINT);
    return pb_read_varint(&d->r, end, v, d->err);
}

/* Enter the LEN field under the cursor: its body is [*body, *body_end). */
static int enter(rd *d, const pb_field *f, uint64_t end, const char *what, uint64_t *len_off,
                 uint64_t *body, uint64_t *body_end)
{
    *len_off = *body = *body_end = 0;
    if (f->wire_type != PB_WT_LEN)
        return bad_wire(d, f, what, PB_WT_LEN);
    *len_off = d->r.pos;
    uint64_t len;
    if (pb_read_len(&d->r, end, f->key_off, &len, d->err) < 0)
        return -1;
    *body = d->r.pos;
    *body_end = d->r.pos + len;
    return 0;
}

/* ---- frames ---- */

static long push_frame(rd *d, const pb_field *f, uint64_t len_off, uint64_t body,
                       uint64_t body_end, int32_t parent)
{
    ck_pb_layout *pb = d->pb;
    if (pb->n_frames == pb->cap_frames) {
        size_t cap = pb->cap_frames ? pb->cap_frames * 2 : 64;
        ck_pb_frame *fr = realloc(pb->frames, cap * sizeof *fr);
        if (fr == NULL)
            return nomem(d);
        pb->frames = fr;
        pb->cap_frames = cap;
    }
    pb->frames[pb->n_frames] = (ck_pb_frame){
        .key_off = f->key_off, .len_off = len_off, .body_off = body, .body_end = body_end,
        .parent = parent};
    return (long)pb->n_frames++;
}

/* Frames are only kept on the way to a tensor: a subtree that held none
 * gives its frames back, so their number is bounded by the tensors'. */
static void pop_if_empty(rd *d, size_t frames_before, size_t tensors_before)
{
    if (d->m->index.count == tensors_before)
        d->pb->n_frames = frames_before;
}

/* ---- the decoded-typed-fields file ---- */

static int dec_open(rd *d)
{
    if (d->dec_fd < 0)
        d->dec_fd = ck_scratch_fd(d->m->env.wrap == CK_WRAP_CIPHER, PATH(d),
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

/* ---- naming ---- */

static const char *tensor_label(rd *d, const ck_tensor *t)
{
    return ck_quote(d->q, t->name, t->name_len);
}

/* "%@" + the escaped holder label + "." + attribute: kept short, so the
 * value name stays readable in the directory name. */
#define SUFFIX_MAX 120

static const char *make_suffix(rd *d, const str *node, long node_index, const str *attr)
{
    char label[CK_DIR_NAME_MAX + 1], idx[32];
    const char *base = node->buf;
    size_t base_len = node->len;
    if (base_len == 0) {
        base_len = (size_t)snprintf(idx, sizeof idx, "#%ld", node_index);
        base = idx;
    }
    size_t n = ck_dir_name(base, base_len, NULL, label);
    char out[CK_DIR_NAME_MAX + 1];
    int k = snprintf(out, sizeof out, "%%@%.*s.", (int)n, label);
    char attr_esc[CK_DIR_NAME_MAX + 1];
    size_t an = ck_dir_name(attr->buf, attr->len, NULL, attr_esc);
    snprintf(out + k, sizeof out - (size_t)k, "%.*s", (int)an, attr_esc);
    size_t len = strlen(out);
    if (len > SUFFIX_MAX) {
        /* Cut the holder label, keep it unique with the hash of the whole. */
        char hashed[SUFFIX_MAX + 1];
        snprintf(hashed, sizeof hashed, "%.*s%%~%016llx", SUFFIX_MAX - 18, out,
                 (unsigned long long)ck_fnv1a64(out, len));
        return ck_arena_strndup(&d->m->index.arena, hashed, strlen(hashed));
    }
    return ck_arena_strndup(&d->m->index.arena, out, len);
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
    const schema *s = d->s;
    return f == s->t_float || f == s->t_int32 || f == s->t_string || f == s->t_int64 ||
           f == s->t_double || f == s->t_uint64;
}

/* A typed field's name, for messages. */
static const char *typed_name(const rd *d, uint32_t field)
{
    const schema *s = d->s;
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

static int parse_decimal(const str *s, uint64_t *out)
{
    if (s->len == 0 || s->len > 19)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] < '0' || s->buf[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s->buf[i] - '0');
    }
    *out = v;
    return 0;
}

/* ONNX external_data: repeated StringStringEntryProto {key = 1, value = 2}. */
static int read_onnx_external_entry(rd *d, const pb_field *f, uint64_t end, tinfo *ti)
{
    uint64_t len_off, body, body_end;
    if (enter(d, f, end, "TensorProto.external_data", &len_off, &body, &body_end) < 0)
        return -1;
    str key = {.len = 0, .buf = ""}, *value = &d->scratch;
    value->set = false;
    pb_field g;
    int rc;
    while ((rc = pb_next_field(&d->r, body_end, &g, d->err)) > 0) {
        if (g.num == 1) {
            if (read_str(d, &g, body_end, "external_data key", &key) < 0)
                return -1;
        } else if (g.num == 2) {
            if (read_str(d, &g, body_end, "external_data value", value) < 0)
                return -1;
        } else if (pb_skip(&d->r, body_end, g.key_off, g.wire_type, d->err) < 0) {
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (!value->set)
        return 0;
    if (strcmp(key.buf, "location") == 0) {
        ti->location = *value;
    } else if (strcmp(key.buf, "offset") == 0 || strcmp(key.buf, "length") == 0) {
        bool is_off = key.buf[0] == 'o';
        uint64_t v;
        if (parse_decimal(value, &v) < 0)
            return ck_fail(d->err, EINVAL, "%s: offset %llu: external_data %s '%s' is not a "
                           "non-negative decimal number", PATH(d), OFF(f->key_off), key.buf,
                           ck_quote(d->q, value->buf, value->len));
        if (is_off) {
            ti->ext_off = v;
            ti->ext_off_at = f->key_off;
        } else {
            ti->ext_len = v;
            ti->ext_len_at = f->key_off;
            ti->has_ext_len = true;
        }
    }
    return 0;
}

/* MindIR external_data: ExternalDataProto {location = 1, offset = 2, length = 3}. */
static int read_mindir_external(rd *d, const pb_field *f, uint64_t end, tinfo *ti)
{
    uint64_t len_off, body, body_end;
    if (enter(d, f, end, "TensorProto.external_data", &len_off, &body, &body_end) < 0)
        return -1;
    ti->external = true;
    pb_field g;
    int rc;
    while ((rc = pb_next_field(&d->r, body_end, &g, d->err)) > 0) {
        uint64_t v;
        if (g.num == 1) {
            if (read_str(d, &g, body_end, "external_data location", &ti->location) < 0)
                return -1;
        } else if (g.num == 2 || g.num == 3) {
            if (read_varint_field(d, &g, body_end, "external_data offset/length", &v) < 0)
                return -1;
            if ((int64_t)v < 0)
                return ck_fail(d->err, EINVAL, "%s: offset %llu: negative external_data %s",
                               PATH(d), OFF(g.key_off), g.num == 2 ? "offset" : "length");
            if (g.num == 2) {
                ti->ext_off = v;
                ti->ext_off_at = g.key_off;
            } else {
                ti->ext_len = v;
                ti->ext_len_at = g.key_off;
                ti->has_ext_len = true;
            }
        } else if (pb_skip(&d->r, body_end, g.key_off, g.wire_type, d->err) < 0) {
            return -1;
        }
    }
    return rc;
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
        if (pb_read_varint(&d->r, end, &v, d->err) < 0)
            return -1;
        add_dim(ti, v, f->key_off);
        return 0;
    }
    if (f->wire_type != PB_WT_LEN)
        return bad_wire(d, f, "TensorProto.dims", PB_WT_VARINT);
    uint64_t len;
    if (pb_read_len(&d->r, end, f->key_off, &len, d->err) < 0)
        return -1;
    uint64_t stop = d->r.pos + len;
    while (d->r.pos < stop) {
        if (pb_read_varint(&d->r, stop, &v, d->err) < 0)
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
        return bad_wire(d, f, typed_name(d, f->num), one);
    if (ti->typed_runs == 0)
        ti->typed_key_off = f->key_off;
    ti->typed_field = f->num;
    ti->typed_runs++;
    ti->typed_wire = f->wire_type;
    if (f->wire_type == PB_WT_LEN) {
        uint64_t len;
        if (pb_read_len(&d->r, end, f->key_off, &len, d->err) < 0)
            return -1;
        ti->typed_off = d->r.pos;
        ti->typed_len = len;
        d->r.pos += len;
        return 0;
    }
    return pb_skip(&d->r, end, f->key_off, f->wire_type, d->err);
}

static int read_tensor_fields(rd *d, uint64_t body, uint64_t end, tinfo *ti)
{
    const schema *s = d->s;
    memset(ti, 0, offsetof(tinfo, name));
    ti->name.set = false;
    ti->name.len = 0;
    ti->name.buf[0] = '\0';
    memset(&ti->raw_off, 0, sizeof *ti - offsetof(tinfo, raw_off));
    pb_seek(&d->r, body);
    pb_field f;
    int rc;
    uint64_t v;
    while ((rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        if (f.num == s->t_dims) {
            rc = read_dims(d, &f, end, ti);
        } else if (f.num == s->t_type) {
            rc = read_varint_field(d, &f, end, "TensorProto.data_type", &v);
            ti->type = (long)(int32_t)v;
            ti->type_at = f.key_off;
            ti->has_type = true;
        } else if (f.num == s->t_name) {
            rc = read_str(d, &f, end, "tensor name", &ti->name);
        } else if (f.num == s->t_raw) {
            if (f.wire_type != PB_WT_LEN)
                return bad_wire(d, &f, "TensorProto.raw_data", PB_WT_LEN);
            rc = pb_read_len(&d->r, end, f.key_off, &ti->raw_len, d->err);
            ti->raw_at = f.key_off;
            ti->raw_off = d->r.pos;
            ti->has_raw = true;
            d->r.pos += ti->raw_len;
        } else if (is_typed(d, f.num)) {
            rc = note_typed(d, &f, end, ti);
        } else if (s->t_segment != 0 && f.num == s->t_segment) {
            return ck_fail(d->err, ENOTSUP, "%s: offset %llu: segmented tensors "
                           "(TensorProto.segment) are not supported", PATH(d), OFF(f.key_off));
        } else if (f.num == s->t_external) {
            rc = d->pb->mindir ? read_mindir_external(d, &f, end, ti)
                               : read_onnx_external_entry(d, &f, end, ti);
        } else if (s->t_location != 0 && f.num == s->t_location) {
            rc = read_varint_field(d, &f, end, "TensorProto.data_location", &v);
            ti->external = v == 1;
        } else {
            rc = pb_skip(&d->r, end, f.key_off, f.wire_type, d->err);
        }
        if (rc < 0)
            return -1;
    }
    return rc;
}

/* A MindIR data file (<prefix>_variables/data_N) opens with 64 bytes of
 * "front info" whose first byte is 1 when the exporter was little-endian;
 * MindSpore's loader refuses a file whose byte order is not the host's. */
static int check_data_header(rd *d, ck_source *src)
{
    unsigned char b = 0;
    if (src->size < CK_MINDIR_DATA_HEADER)
        return ck_fail(d->err, EINVAL, "%s: data file %s is %llu bytes, shorter than its "
                       "%u-byte header", PATH(d), src->path, OFF(src->size),
                       CK_MINDIR_DATA_HEADER);
    if (ck_source_read(src, &b, 1, 0, d->err) < 0)
        return -1;
    if (b != 1)
        return ck_fail(d->err, EINVAL, "%s: data file %s: offset 0: header byte %u says %s; "
                       "only little-endian data is read", PATH(d), src->path, b,
                       b == 0 ? "big-endian" : "neither byte order");
    return 0;
}

static void normalize_location(const str *loc, char *out, size_t size);
static long open_external(rd *d, ck_tensor *t, const str *loc, const char *rel);

/* The source of an external location, opened on first use.  Locations
 * are looked up by their canonical text, so "w.bin" and "./w.bin" share a
 * source (a save writes each file once) and "w.bin" and "sub/w.bin" never
 * do; a new text naming a file already open under another name is
 * refused (open_external). */
static long external_source(rd *d, ck_tensor *t, const str *loc)
{
    if (loc->len == 0 || memchr(loc->buf, '\0', loc->len) != NULL)
        return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data without a location",
                       PATH(d), tensor_label(d, t));
    char q[CK_QUOTE_BUF];
    if (loc->buf[0] == '/')
        return ck_fail(d->err, EPERM, "%s: tensor '%s': external data location '%s' is "
                       "absolute; only paths inside the model's directory are allowed",
                       PATH(d), tensor_label(d, t), ck_quote(q, loc->buf, loc->len));
    char rel[PATH_MAX];
    normalize_location(loc, rel, sizeof rel);
    if (rel[0] == '\0')
        return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data location '%s' names "
                       "no file", PATH(d), tensor_label(d, t), ck_quote(q, loc->buf, loc->len));
    size_t rl = strlen(rel);
    uint32_t known = ck_name_map_get(&d->locations, rel, rl);
    if (known != CK_NAME_MAP_NONE)
        return known;
    long sid = open_external(d, t, loc, rel);
    const char *key = sid < 0 ? NULL : ck_arena_strndup(&d->m->index.arena, rel, rl);
    if (sid >= 0 && (key == NULL || ck_name_map_put(&d->locations, key, rl, (uint32_t)sid) < 0))
        return nomem(d);
    return sid;
}

/* loc with "." components and repeated slashes dropped and "dir/.."
 * folded: the name a save writes the file by, and the key two spellings
 * of one location share.  Folding ".." textually is right because no
 * component may be a symbolic link; a ".." that climbs out is left for
 * the open to refuse. */
static void normalize_location(const str *loc, char *out, size_t size)
{
    size_t n = 0;
    const char *p = loc->buf, *end = loc->buf + loc->len;
    while (p < end) {
        const char *q = memchr(p, '/', (size_t)(end - p));
        size_t k = (size_t)((q ? q : end) - p);
        const char *slash = n ? memrchr(out, '/', n) : NULL;
        const char *last = slash ? slash + 1 : out;
        bool last_up = n > 0 && out + n - last == 2 && memcmp(last, "..", 2) == 0;
        if (k == 2 && memcmp(p, "..", 2) == 0 && n > 0 && !last_up) {
            n = slash ? (size_t)(slash - out) : 0; /* "dir/.." */
        } else if (k > 0 && !(k == 1 && *p == '.') && n + k + 2 < size) {
            if (n > 0)
                out[n++] = '/';
            memcpy(out + n, p, k);
            n += k;
        }
        p += k + 1;
    }
    out[n] = '\0';
}

static long open_external(rd *d, ck_tensor *t, const str *loc, const char *rel)
{
    char q[CK_QUOTE_BUF], full[PATH_MAX], shown[CK_QUOTE_BUF];
    const ck_model_dir *dir = d->m->dir;
    ck_dir_join(dir, rel, full, sizeof full);
    ck_quote(shown, full, strlen(full)); /* the location is text from the file */
    /* Beneath the model's directory, no symbolic link followed: a link
     * swapped in for a directory after mounting cannot redirect a save,
     * and two names of one file cannot hide behind a link. */
    int fd = ck_dir_openat(dir, rel, O_RDONLY | O_NONBLOCK, 0);
    fd = ck_override_fd(d->m->overrides, d->m->n_overrides, full, fd);
    if (fd < 0) {
        int e = errno;
        if (e == EXDEV)
            return ck_fail(d->err, EPERM, "%s: tensor '%s': external data location '%s' "
                           "leads out of the model's directory", PATH(d), tensor_label(d, t),
                           ck_quote(q, loc->buf, loc->len));
        if (e == ELOOP)
            return ck_fail(d->err, ELOOP, "%s: tensor '%s': external data location '%s' is "
                           "or passes through a symbolic link, which ckptfs does not follow",
                           PATH(d), tensor_label(d, t), ck_quote(q, loc->buf, loc->len));
        if (e == EMFILE || e == ENFILE)
            return ck_fail_errno(d->err, e, "%s: tensor '%s': external data file %s (the "
                                 "model has more data files than this process may open; "
                                 "raise ulimit -n)", PATH(d), tensor_label(d, t), shown);
        return ck_fail_errno(d->err, e, "%s: tensor '%s': external data file %s", PATH(d),
                             tensor_label(d, t), shown);
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return ck_fail_errno(d->err, errno, "%s: cannot stat %s", PATH(d), shown);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data file %s is %s, not a "
                       "regular file", PATH(d), tensor_label(d, t), shown,
                       ck_file_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    /* Another name of a file already open (a hard link, or the model
     * itself): a save would write one name and lose the edits made
     * through the other, so such a model is not mounted. */
    for (uint32_t i = 0; i < d->m->n_sources; i++) {
        const ck_source *s = d->m->sources[i];
        if (s->dev != st.st_dev || s->ino != st.st_ino)
            continue;
        close(fd);
        char q2[CK_QUOTE_BUF];
        const char *other = i == 0 ? NULL : ck_dir_rel(dir, s->path);
        if (other == NULL)
            return ck_fail(d->err, EINVAL, "%s: tensor '%s': external data location '%s' "
                           "is the model file itself", PATH(d), tensor_label(d, t),
                           ck_quote(q, loc->buf, loc->len));
        return ck_fail(d->err, EINVAL, "%s: external data locations '%s' and '%s' are the "
                       "same file (a hard link); a save would lose the edits made through "
                       "one of them", PATH(d), ck_quote(q2, other, strlen(other)),
                       ck_quote(q, loc->buf, loc->len));
    }
    ck_source *src = ck_source_adopt_fd(fd, full, d->err);
    long id = src == NULL ? -1 : ck_model_add_data_file(d->m, src, d->err);
    if (id >= 0 && d->pb->mindir && check_data_header(d, d->m->sources[id]) < 0)
        return -1;
    return id;
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
    pb_seek(&d->r, body);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        if (f.num != field) {
            if (pb_skip(&d->r, end, f.key_off, f.wire_type, d->err) < 0)
                return -1;
            continue;
        }
        uint64_t stop = end;
        bool packed = f.wire_type == PB_WT_LEN;
        if (packed) {
            uint64_t len;
            if (pb_read_len(&d->r, end, f.key_off, &len, d->err) < 0)
                return -1;
            stop = d->r.pos + len;
        }
        /* One value, or a packed run of any number of them (none too). */
        while (!packed || d->r.pos < stop) {
            uint64_t v = 0;
            if (is_fixed) {
                if (pb_read_bytes(&d->r, stop, &v, fixed_w, d->err) < 0)
                    return -1;
            } else if (pb_read_varint(&d->r, stop, &v, d->err) < 0) {
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
    pb_seek(&d->r, body);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        if (f.num != d->s->t_string || f.wire_type != PB_WT_LEN) {
            if (pb_skip(&d->r, end, f.key_off, f.wire_type, d->err) < 0)
                return -1;
            continue;
        }
        uint64_t len;
        if (pb_read_len(&d->r, end, f.key_off, &len, d->err) < 0)
            return -1;
        unsigned char buf[8192];
        while (len > 0) {
            size_t n = len < sizeof buf ? (size_t)len : sizeof buf;
            if (pb_read_bytes(&d->r, end, buf, n, d->err) < 0 || dec_write(d, buf, n) < 0)
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
    bool packed = dt->kind == CK_KIND_PACKED;
    uint64_t n = packed ? 1 : dt->itemsize;
    for (uint32_t i = 0; i < ti->ndim; i++)
        if (__builtin_mul_overflow(n, (uint64_t)ti->dims[i], &n) || n > INT64_MAX)
            return (long)i;
    *out = packed ? n / dt->per_byte + (n % dt->per_byte != 0) : n;
    return -1;
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
        long sid = external_source(d, t, &ti->location);
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

/* Index the TensorProto field under f (its key read).  value_name names
 * Constants (the node's output); NULL: the tensor's own name. */
static int add_tensor(rd *d, const pb_field *f, uint64_t end, const where *w, ck_pb_role role,
                      const str *value_name, const char *holder, uint8_t part)
{
    uint64_t len_off, body, body_end;
    if (enter(d, f, end, "TensorProto", &len_off, &body, &body_end) < 0)
        return -1;
    ck_index *ix = &d->m->index;
    if (ix->count >= CK_MAX_TENSORS)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: more than %u tensors", PATH(d),
                       OFF(f->key_off), CK_MAX_TENSORS);
    tinfo *ti = &d->ti;
    if (read_tensor_fields(d, body, body_end, ti) < 0)
        return -1;
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
    const str *nm = value_name && value_name->len ? value_name : &ti->name;
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

/* ---- graphs, nodes, attributes ---- */

typedef struct node_info {
    str name, op, output;
    long index;
} node_info;

/* Walks the body [body, end) of a message; w names its frame, ctx is the
 * caller's. */
typedef int (*walk_fn)(rd *d, uint64_t body, uint64_t end, const where *w, void *ctx);

static int walk_graph(rd *d, uint64_t body, uint64_t end, const where *w, void *unused);

/* Walk the message in the LEN field under the cursor with fn, as a new
 * frame inside in.frame (fn sees `in` with the new frame), and leave the
 * cursor after it.  The frame is given back if the walk found no tensor,
 * unless keep: the main graph's is needed even empty, new tensors go there. */
static int descend(rd *d, const pb_field *f, uint64_t end, const char *what, where in,
                   bool keep, walk_fn fn, void *ctx)
{
    uint64_t len_off, body, body_end;
    if (enter(d, f, end, what, &len_off, &body, &body_end) < 0)
        return -1;
    size_t frames_before = d->pb->n_frames, tensors_before = d->m->index.count;
    long fr = push_frame(d, f, len_off, body, body_end, in.frame);
    if (fr < 0)
        return -1;
    in.frame = (int32_t)fr;
    if (fn(d, body, body_end, &in, ctx) < 0)
        return -1;
    if (!keep)
        pop_if_empty(d, frames_before, tensors_before);
    pb_seek(&d->r, body_end);
    return 0;
}

/* A small string field of a message, wherever it is (first occurrence). */
static int find_str(rd *d, uint64_t body, uint64_t end, uint32_t field, const char *what,
                    str *out)
{
    out->set = false;
    out->len = 0;
    out->buf[0] = '\0';
    pb_seek(&d->r, body);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        if (f.num == field && !out->set) {
            if (read_str(d, &f, end, what, out) < 0)
                return -1;
        } else if (pb_skip(&d->r, end, f.key_off, f.wire_type, d->err) < 0) {
            return -1;
        }
    }
    return rc;
}

/* Whether the attribute's tensors are shown: a Constant's value always,
 * any other in ONNX. */
static bool shows_tensors(const rd *d, const node_info *n, const str *attr)
{
    if (strcmp(n->op.buf, "Constant") == 0 && strcmp(attr->buf, "value") == 0)
        return true;
    return d->s->all_attr_tensors;
}

/* The node holding an attribute's tensors, for messages only: its name,
 * quoted; a node without one is "#INDEX (OP)" as for readers
 * (pb_users.c), but an unnamed Constant is "", which messages name as
 * "a Constant node". */
static const char *holder_label(rd *d, const node_info *n)
{
    char label[CK_QUOTE_BUF + 48];
    if (n->name.len > 0 || strcmp(n->op.buf, "Constant") == 0)
        snprintf(label, sizeof label, "%s", ck_quote(d->q, n->name.buf, n->name.len));
    else if (n->op.len > 0)
        snprintf(label, sizeof label, "#%ld (%s)", n->index,
                 ck_quote(d->q, n->op.buf, n->op.len));
    else
        snprintf(label, sizeof label, "#%ld", n->index);
    return ck_arena_strndup(&d->m->index.arena, label, strlen(label));
}

/* An attribute: its tensors (TENSOR t, TENSORS tensors) are named after
 * the node's first output, as a Constant's value, and its graphs walked. */
static int walk_attr(rd *d, uint64_t body, uint64_t end, const where *w, void *ctx)
{
    const node_info *n = ctx;
    str *attr = malloc(sizeof *attr);
    if (attr == NULL)
        return nomem(d);
    int rc = find_str(d, body, end, d->s->attr_name, "AttributeProto.name", attr);
    bool shown = rc == 0 && shows_tensors(d, n, attr);
    const char *holder = NULL; /* made once the attribute has a tensor */
    const char *sub_suffix = NULL;
    pb_seek(&d->r, body);
    pb_field f;
    while (rc == 0 && (rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        rc = 0;
        uint32_t num = f.num;
        if (shown && (num == d->s->attr_t || num == d->s->attr_tensors)) {
            if (holder == NULL && (holder = holder_label(d, n)) == NULL) {
                rc = nomem(d);
                break;
            }
            ck_pb_role role = w->main ? CK_ROLE_CONST : CK_ROLE_SUB;
            rc = add_tensor(d, &f, end, w, role, &n->output, holder, CK_PART_WHOLE);
        } else if (num == d->s->attr_g || num == d->s->attr_graphs) {
            if (sub_suffix == NULL &&
                (sub_suffix = make_suffix(d, &n->name, n->index, attr)) == NULL) {
                rc = nomem(d);
                break;
            }
            where sub = {.frame = w->frame, .main = false, .suffix = sub_suffix};
            rc = descend(d, &f, end, "AttributeProto.g", sub, false, walk_graph, NULL);
        } else {
            rc = pb_skip(&d->r, end, f.key_off, f.wire_type, d->err);
        }
    }
    free(attr);
    return rc;
}

static int walk_node(rd *d, uint64_t body, uint64_t end, const where *w, void *ctx)
{
    node_info *n = ctx;
    if (find_str(d, body, end, d->s->node_name, "NodeProto.name", &n->name) < 0 ||
        find_str(d, body, end, d->s->node_op, "NodeProto.op_type", &n->op) < 0 ||
        find_str(d, body, end, d->s->node_output, "NodeProto.output", &n->output) < 0)
        return -1;
    pb_seek(&d->r, body);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        if (f.num == d->s->node_attr)
            rc = descend(d, &f, end, "NodeProto.attribute", *w, false, walk_attr, n);
        else
            rc = pb_skip(&d->r, end, f.key_off, f.wire_type, d->err);
        if (rc < 0)
            return -1;
    }
    return rc;
}

/* MindIR map_parameter: three tensors under one name, read-only. */
static int walk_map(rd *d, uint64_t body, uint64_t end, const where *w, void *unused)
{
    (void)unused;
    str *name = malloc(sizeof *name);
    if (name == NULL)
        return nomem(d);
    int rc = find_str(d, body, end, d->s->map_name, "MapTensorProto.name", name);
    pb_seek(&d->r, body);
    pb_field f;
    while (rc == 0 && (rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        rc = 0;
        int part = -1;
        for (int k = 0; k < 3; k++)
            if (f.num == d->s->map_part[k])
                part = k;
        if (part < 0)
            rc = pb_skip(&d->r, end, f.key_off, f.wire_type, d->err);
        else
            rc = add_tensor(d, &f, end, w, CK_ROLE_MAP, name, NULL,
                            (uint8_t)(CK_PART_MAP_KEY + part));
    }
    free(name);
    return rc;
}

static int walk_graph(rd *d, uint64_t body, uint64_t end, const where *w, void *unused)
{
    (void)unused;
    /* The walk recurses once per graph level: the limit bounds the stack. */
    if (++d->depth > CK_PB_MAX_DEPTH)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: graphs nested deeper than the limit "
                       "of %d", PATH(d), OFF(d->pb->frames[w->frame].key_off), CK_PB_MAX_DEPTH);
    const schema *s = d->s;
    node_info *n = malloc(sizeof *n);
    if (n == NULL)
        return nomem(d);
    n->index = 0;
    pb_seek(&d->r, body);
    pb_field f;
    int rc;
    uint64_t insert = body;
    while ((rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        rc = 0;
        if (f.num == s->graph_node) {
            rc = descend(d, &f, end, "GraphProto.node", *w, false, walk_node, n);
            n->index++;
        } else if (s->graph_map && f.num == s->graph_map && w->main) {
            rc = descend(d, &f, end, "GraphProto.node", *w, false, walk_map, NULL);
        } else if (f.num == s->graph_tensor) {
            rc = add_tensor(d, &f, end, w, w->main ? CK_ROLE_TOP : CK_ROLE_SUB, NULL, NULL,
                            CK_PART_WHOLE);
        } else if (w->main && f.num == s->graph_name && d->pb->mindir) {
            str *gname = &d->scratch;
            rc = read_str(d, &f, end, "GraphProto.name", gname);
            if (rc == 0) {
                d->pb->graph_name = ck_arena_strndup(&d->m->index.arena, gname->buf,
                                                     gname->len);
                d->pb->graph_name_len = gname->len;
                if (d->pb->graph_name == NULL)
                    rc = nomem(d);
            }
        } else {
            rc = pb_skip(&d->r, end, f.key_off, f.wire_type, d->err);
        }
        if (rc < 0)
            break;
        /* New main-graph tensors go after the last field numbered up to
         * the tensor list's, which is where writers put that list. */
        if (f.num <= s->graph_tensor)
            insert = d->r.pos;
        if (w->main && !d->pb->mindir && f.num == CK_ONNX_GRAPH_INPUT)
            d->pb->inputs_end = d->r.pos;
    }
    free(n);
    if (w->main)
        d->pb->insert_off = insert;
    d->depth--;
    return rc;
}

/* ---- the model ---- */

static int walk_main_graph(rd *d, uint64_t body, uint64_t end, const where *w, void *unused)
{
    d->pb->main_graph = w->frame;
    return walk_graph(d, body, end, w, unused);
}

/* A MindIR function: its tensors are named NAME%@FUNCTION.function, an
 * unnamed one by its frame number. */
static int walk_function(rd *d, uint64_t body, uint64_t end, const where *w, void *unused)
{
    str *gname = &d->scratch;
    str fn = {.buf = "function", .len = 8};
    if (find_str(d, body, end, d->s->graph_name, "GraphProto.name", gname) < 0)
        return -1;
    where in = *w;
    if ((in.suffix = make_suffix(d, gname, (long)w->frame, &fn)) == NULL)
        return nomem(d);
    return walk_graph(d, body, end, &in, unused);
}

static int check_mindir_header(rd *d, bool has_producer, bool has_version, bool has_le,
                               uint64_t le, bool has_irv, uint64_t irv, uint64_t irv_off)
{
    if (!has_producer)
        return ck_fail(d->err, EINVAL, "%s: not a MindIR model: no producer_name (MindSpore's "
                       "loader requires it)", PATH(d));
    if (!has_version)
        return ck_fail(d->err, EINVAL, "%s: not a MindIR model: no model_version (MindSpore's "
                       "loader requires it)", PATH(d));
    if (has_le && le != 1)
        return ck_fail(d->err, EINVAL, "%s: MindIR model is big-endian (little_endian false); "
                       "this host is little-endian", PATH(d));
    if (has_irv && irv > 3)
        return ck_fail(d->err, EINVAL, "%s: offset %llu: mind_ir_version %llu is not a valid "
                       "version (0..3)", PATH(d), OFF(irv_off), OFF(irv));
    return 0;
}

static int walk_model(rd *d)
{
    const schema *s = d->s;
    uint64_t end = d->src->size;
    bool has_graph = false, has_producer = false, has_version = false, has_le = false;
    bool has_irv = false;
    uint64_t le = 0, irv = 0, irv_off = 0, v;
    pb_reader_init(&d->r, d->src, 0);
    pb_field f;
    int rc;
    while ((rc = pb_next_field(&d->r, end, &f, d->err)) > 0) {
        rc = 0;
        bool mindir = d->pb->mindir;
        if (f.num == s->model_graph) {
            if (has_graph)
                return ck_fail(d->err, EINVAL, "%s: offset %llu: a second main graph",
                               PATH(d), OFF(f.key_off));
            where top = {.frame = CK_PB_NO_FRAME, .main = true};
            rc = descend(d, &f, end, "ModelProto.graph", top, true, walk_main_graph, NULL);
            has_graph = true;
        } else if (s->model_functions && f.num == s->model_functions) {
            where top = {.frame = CK_PB_NO_FRAME, .main = false};
            rc = descend(d, &f, end, "ModelProto.graph", top, false, walk_function, NULL);
        } else if (!mindir && f.num == 1) {
            rc = read_varint_field(d, &f, end, "ModelProto.ir_version", &v);
            d->pb->ir_version = (int64_t)v;
        } else if (mindir && (f.num == 2 || f.num == 5)) {
            rc = pb_skip(&d->r, end, f.key_off, f.wire_type, d->err);
            if (f.wire_type != PB_WT_LEN)
                return bad_wire(d, &f, f.num == 2 ? "producer_name" : "model_version",
                                PB_WT_LEN);
            *(f.num == 2 ? &has_producer : &has_version) = true;
        } else if (mindir && f.num == 10) {
            rc = read_varint_field(d, &f, end, "ModelProto.little_endian", &le);
            has_le = true;
        } else if (mindir && f.num == 13) {
            irv_off = f.key_off;
            rc = read_varint_field(d, &f, end, "ModelProto.mind_ir_version", &irv);
            has_irv = true;
        } else {
            rc = pb_skip(&d->r, end, f.key_off, f.wire_type, d->err);
        }
        if (rc < 0)
            return -1;
    }
    if (rc < 0)
        return -1;
    if (!has_graph)
        return ck_fail(d->err, EINVAL, "%s: not an %s model: no graph", PATH(d), s->format);
    if (d->pb->mindir)
        return check_mindir_header(d, has_producer, has_version, has_le, le, has_irv, irv,
                                   irv_off);
    return 0;
}

/* ---- the legacy split layout ---- */

static bool has_parameters(const rd *d)
{
    for (size_t i = 0; i < d->m->index.count; i++)
        if (d->pb->tensors[i].role == CK_ROLE_TOP)
            return true;
    return false;
}

/* One variables file: a GraphProto whose parameters are the model's. */
static int walk_variables_file(rd *d, int dfd, const char *dir, const char *name)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return ck_fail(d->err, ENAMETOOLONG, "%s/%s: path too long", dir, name);
    /* O_NONBLOCK: a FIFO here must be refused, not waited on. */
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    fd = ck_override_fd(d->m->overrides, d->m->n_overrides, path, fd);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return 0; /* MindSpore's loader reads regular files only */
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ck_fail(d->err, EINVAL, "%s: variables file %s is %s, not a regular file",
                       PATH(d), path, ck_file_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    ck_source *src = ck_source_adopt_fd(fd, path, d->err);
    long sid = src == NULL ? -1 : ck_model_add_data_file(d->m, src, d->err);
    if (sid < 0)
        return -1;
    d->src = src;
    d->src_id = (uint32_t)sid;
    pb_reader_init(&d->r, src, 0);
    where w = {.frame = CK_PB_NO_FRAME, .main = true};
    if (walk_graph(d, 0, src->size, &w, NULL) < 0)
        return -1;
    d->pb->new_pbfile = (uint32_t)sid; /* new parameters go to the last file */
    return 0;
}

static int by_version(const void *a, const void *b)
{
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* The visible names in the directory dfd, sorted by version (data_2
 * before data_10); *n of them, or NULL. */
static char **list_variables(rd *d, int dfd, const char *dir, size_t *n)
{
    int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *ds = lfd < 0 ? NULL : fdopendir(lfd);
    if (ds == NULL) {
        if (lfd >= 0)
            close(lfd);
        ck_fail_errno(d->err, errno, "%s: cannot list %s", PATH(d), dir);
        return NULL;
    }
    char **names = NULL;
    size_t cap = 0;
    *n = 0;
    struct dirent *e;
    while ((e = readdir(ds)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (*n == CK_MAX_SOURCES) {
            ck_fail(d->err, EMFILE, "%s: more than %d files in %s", PATH(d), CK_MAX_SOURCES,
                    dir);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **more = realloc(names, cap * sizeof *names);
            if (more == NULL) {
                nomem(d);
                break;
            }
            names = more;
        }
        if ((names[*n] = strdup(e->d_name)) == NULL) {
            nomem(d);
            break;
        }
        (*n)++;
    }
    bool failed = e != NULL;
    closedir(ds);
    if (failed) {
        while (*n > 0)
            free(names[--*n]);
        free(names);
        return NULL;
    }
    if (*n > 0)
        qsort(names, *n, sizeof *names, by_version);
    return names != NULL ? names : calloc(1, sizeof *names);
}

/* The v1.2-1.5 split layout: a "<prefix>_graph.mindir" whose graph has no
 * parameters keeps them in the regular files of "<prefix>_variables/",
 * each a serialized GraphProto.  MindSpore's loader takes them in readdir
 * order; they are taken in version order (data_2 before data_10) so every
 * mount shows the same tree. */
static int walk_legacy_variables(rd *d)
{
    static const char suffix[] = "_graph.mindir";
    const ck_model_dir *md = d->m->dir;
    size_t pl = strlen(md->base), sl = sizeof suffix - 1;
    if (!d->pb->mindir || pl < sl || strcmp(md->base + pl - sl, suffix) != 0 ||
        has_parameters(d))
        return 0;
    char rel[PATH_MAX], dir[PATH_MAX];
    snprintf(rel, sizeof rel, "%.*s_variables", (int)(pl - sl), md->base);
    ck_dir_join(md, rel, dir, sizeof dir);
    int dfd = ck_dir_openat(md, rel, O_PATH | O_DIRECTORY, 0);
    if (dfd < 0)
        return errno == ENOENT ? 0 : ck_fail_errno(d->err, errno, "%s: cannot open %s",
                                                   PATH(d), dir);
    size_t n = 0;
    char **names = list_variables(d, dfd, dir, &n);
    int rc = names == NULL ? -1 : 0;
    /* Parameter names keep the main graph's prefix; a data file's graph
     * has no name of its own to take. */
    const char *gname = d->pb->graph_name;
    size_t glen = d->pb->graph_name_len;
    uint64_t insert = d->pb->insert_off;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0)
            rc = walk_variables_file(d, dfd, dir, names[i]);
        free(names[i]);
    }
    free(names);
    close(dfd);
    d->pb->graph_name = gname;
    d->pb->graph_name_len = glen;
    if (d->pb->new_pbfile == 0)
        d->pb->insert_off = insert;
    d->src = d->m->sources[0];
    d->src_id = 0;
    return rc;
}

static void layout_free(void *state)
{
    ck_pb_layout *pb = state;
    if (pb == NULL)
        return;
    ck_pb_users_free(pb->users);
    free(pb->frames);
    free(pb->tensors);
    free(pb);
}

/* Decoded typed fields were given source UINT32_MAX while reading: now
 * that the temporary file is complete, make it a source and point them
 * at it. */
static int bind_decoded(rd *d)
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

static int read_model(ck_model *m, bool mindir, ck_error *err)
{
    rd *d = calloc(1, sizeof *d);
    ck_pb_layout *pb = calloc(1, sizeof *pb);
    if (d == NULL || pb == NULL) {
        free(d);
        free(pb);
        return ck_fail(err, ENOMEM, "%s: out of memory", m->path);
    }
    const schema *sc = mindir ? &mindir_schema : &onnx_schema;
    pb->mindir = mindir;
    pb->main_graph = CK_PB_NO_FRAME;
    pb->fields = (ck_pb_fields){
        .graph_tensor = sc->graph_tensor, .model_graph = sc->model_graph,
        .model_functions = sc->model_functions, .graph_node = sc->graph_node,
        .node_input = 1, .node_name = sc->node_name, .node_attr = sc->node_attr,
        .node_op = sc->node_op,
        .attr_g = sc->attr_g, .attr_graphs = sc->attr_graphs, .t_dims = sc->t_dims, .t_type = sc->t_type,
        .t_float = sc->t_float, .t_int32 = sc->t_int32, .t_string = sc->t_string,
        .t_int64 = sc->t_int64, .t_name = sc->t_name, .t_raw = sc->t_raw,
        .t_double = sc->t_double, .t_uint64 = sc->t_uint64, .t_external = sc->t_external,
        .t_location = sc->t_location};
    m->state = pb;
    *d = (rd){.m = m, .s = sc, .pb = pb,
              .src = m->sources[0], .err = err, .dec_fd = -1};
    ck_name_map_init(&d->locations);
    int rc = walk_model(d);
    if (rc == 0)
        rc = walk_legacy_variables(d);
    if (rc == 0)
        rc = bind_decoded(d);
    if (d->dec_fd >= 0)
        close(d->dec_fd);
    ck_name_map_free(&d->locations);
    free(d);
    return rc;
}

/* ---- the formats ---- */

static int onnx_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    (void)o;
    return read_model(m, false, err);
}

static int mindir_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    (void)o;
    return read_model(m, true, err);
}

static const char *pb_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    return t != NULL ? t->type_name : ck_pb_type_name(dt->pb_code, ck_pb_layout_of(m)->mindir);
}

/* Every source but the decoded typed fields: external data files, a split
 * MindIR's data and variables files. */
static bool pb_is_data_file(const ck_model *m, uint32_t i)
{
    return i != ck_pb_layout_of(m)->decoded_src;
}

static uint32_t pb_record_source(const ck_model *m, uint32_t id)
{
    return ck_pb_layout_of(m)->tensors[id].pbfile;
}

const ck_format ck_format_onnx = {
    .name = "onnx",
    .title = "ONNX",
    .extension = ".onnx",
    .open = onnx_open,
    .free_state = layout_free,
    .type_name = pb_type_name,
    .may_remove = ck_pb_may_remove,
    .is_data_file = pb_is_data_file,
    .record_source = pb_record_source,
};

const ck_format ck_format_mindir = {
    .name = "mindir",
    .title = "MindIR",
    .extension = ".mindir",
    .encryptable = true,
    .data_files_encrypted = true,
    .open = mindir_open,
    .free_state = layout_free,
    .type_name = pb_type_name,
    .may_remove = ck_pb_may_remove,
    .is_data_file = pb_is_data_file,
    .record_source = pb_record_source,
};
