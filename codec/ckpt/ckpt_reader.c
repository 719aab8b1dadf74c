/* SPDX-License-Identifier: Apache-2.0 */
#include "ckpt_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "ckpt_str.h"
#include "../core/le_bytes.h"
#include "../core/model.h"
#include "../pb/pb_wire.h"

#define CRC_TRAILER_LEN 17 /* "crc_num" + 10-byte big-endian CRC */
#define MAP_PARTS 3

/* One TensorProto as read from one record (before slices are joined). */
typedef struct raw_tensor {
    int64_t dims[CK_MAX_DIMS];
    uint64_t dim_off[CK_MAX_DIMS];  /* where each dim is, for messages */
    uint32_t ndim;
    const ck_dtype *dtype;
    char type[CK_CKPT_MAX_TYPE + 1];
    uint64_t content_off, content_len;
    uint64_t content_key_off;
    bool has_type, has_content;
} raw_tensor;

/* One Checkpoint.Value record. */
typedef struct raw_value {
    char tag[CK_CKPT_MAX_TAG];
    size_t tag_len;
    bool has_tag;
    int nparts;                 /* 1: tensor, 3: maptensor key/value/status */
    raw_tensor part[MAP_PARTS];
} raw_value;

/* The tensor being accumulated from adjacent records with the same tag. */
typedef struct group {
    bool open;
    long first_id;              /* tensor id of part 0; parts are consecutive */
    int nparts;
    uint64_t first_off;         /* offset of the group's first record */
    raw_tensor last[MAP_PARTS]; /* the latest slice: dims and type come from it */
    uint64_t dim0_sum[MAP_PARTS]; /* map tensors: rows add up across records */
} group;

typedef struct parser {
    ck_source *src;
    uint32_t src_id;
    ck_index *ix;
    pb_reader rd;
    ck_name_map by_tag;         /* tag -> first tensor id of its latest group */
    group g;
    raw_value v;
    ck_error *err;
    bool str_in_memory;         /* the decoded str values go to a memfd */
    int str_fd;                 /* ... or a temporary file; -1 until the first */
    uint64_t str_size;
    char q[CK_QUOTE_BUF];       /* for names in messages */
} parser;

#define PATH(p) ((p)->src->path)
#define NAME(p, t) ck_quote((p)->q, (t)->name, (t)->name_len)
#define OFF(x) ((unsigned long long)(x))

static int expect_wire(parser *p, uint64_t key_off, const char *msg, uint32_t field,
                       const char *name, int got, int want)
{
    if (got == want)
        return 0;
    return ck_fail(p->err, EINVAL, "%s: offset %llu: %s field %u (%s) has wire type %s, "
                   "expected %s", PATH(p), OFF(key_off), msg, field, name,
                   pb_wire_type_name(got), pb_wire_type_name(want));
}

static int add_dim(parser *p, raw_tensor *t, uint64_t value, uint64_t at)
{
    if (t->ndim == CK_MAX_DIMS)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: more than %d dims", PATH(p), OFF(at),
                       CK_MAX_DIMS);
    int64_t d = (int64_t)value;
    if (d < 0)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: negative dim %" PRId64, PATH(p),
                       OFF(at), d);
    t->dim_off[t->ndim] = at;
    t->dims[t->ndim++] = d;
    return 0;
}

/* dims is `repeated int64`: accept unpacked (one varint per key) and packed. */
static int read_dims(parser *p, raw_tensor *t, int wt, uint64_t key_off, uint64_t limit)
{
    uint64_t v, at;
    if (wt == PB_WT_VARINT) {
        if (pb_read_varint(&p->rd, limit, &v, p->err) < 0)
            return -1;
        return add_dim(p, t, v, key_off);
    }
    if (wt != PB_WT_LEN)
        return expect_wire(p, key_off, "TensorProto", 1, "dims", wt, PB_WT_VARINT);
    uint64_t len;
    if (pb_read_len(&p->rd, limit, key_off, &len, p->err) < 0)
        return -1;
    uint64_t end = p->rd.pos + len;
    while (p->rd.pos < end) {
        at = p->rd.pos;
        if (pb_read_varint(&p->rd, end, &v, p->err) < 0 || add_dim(p, t, v, at) < 0)
            return -1;
    }
    return 0;
}

static int read_string(parser *p, uint64_t limit, uint64_t at, char *buf, size_t cap,
                       size_t *len, const char *what)
{
    uint64_t n;
    if (pb_read_len(&p->rd, limit, at, &n, p->err) < 0)
        return -1;
    if (n > cap)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: %s is %llu bytes long (limit %zu)",
                       PATH(p), OFF(at), what, (unsigned long long)n, cap);
    *len = (size_t)n;
    return pb_read_bytes(&p->rd, limit, buf, (size_t)n, p->err);
}

static int parse_tensor(parser *p, raw_tensor *t, uint64_t start, uint64_t end, bool numpy)
{
    memset(t, 0, sizeof *t);
    pb_seek(&p->rd, start);
    pb_field f;
    int more;
    while ((more = pb_next_field(&p->rd, end, &f, p->err)) > 0) {
        uint64_t key_off = f.key_off, len;
        uint32_t field = f.num;
        int wt = f.wire_type;
        switch (field) {
        case 1:
            if (read_dims(p, t, wt, key_off, end) < 0)
                return -1;
            break;
        case 2: {
            if (expect_wire(p, key_off, "TensorProto", 2, "tensor_type", wt, PB_WT_LEN) < 0)
                return -1;
            size_t n;
            if (read_string(p, end, key_off, t->type, CK_CKPT_MAX_TYPE, &n, "tensor_type") < 0)
                return -1;
            t->type[n] = '\0';
            t->dtype = ck_dtype_from_mindspore(t->type, n, numpy);
            if (t->dtype == NULL)
                return ck_fail(p->err, EINVAL, "%s: offset %llu: unknown tensor_type '%s'",
                               PATH(p), OFF(key_off), ck_quote(p->q, t->type, n));
            t->has_type = true;
            break;
        }
        case 3:
            if (expect_wire(p, key_off, "TensorProto", 3, "tensor_content", wt, PB_WT_LEN) < 0 ||
                pb_read_len(&p->rd, end, key_off, &len, p->err) < 0)
                return -1;
            t->content_key_off = key_off;
            t->content_off = p->rd.pos;
            t->content_len = len;
            t->has_content = true;
            pb_seek(&p->rd, p->rd.pos + len); /* the payload is never read here */
            break;
        default:
            if (pb_skip(&p->rd, end, key_off, wt, p->err) < 0)
                return -1;
        }
    }
    if (more < 0)
        return -1;
    if (!t->has_type)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: TensorProto without tensor_type",
                       PATH(p), OFF(start));
    if (!t->has_content)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: TensorProto without tensor_content",
                       PATH(p), OFF(start));
    return 0;
}

static int parse_map(parser *p, uint64_t start, uint64_t end)
{
    pb_seek(&p->rd, start);
    int n = 0;
    pb_field f;
    int more;
    while ((more = pb_next_field(&p->rd, end, &f, p->err)) > 0) {
        uint64_t key_off = f.key_off, len;
        uint32_t field = f.num;
        int wt = f.wire_type;
        if (field != 1) {
            if (pb_skip(&p->rd, end, key_off, wt, p->err) < 0)
                return -1;
            continue;
        }
        if (expect_wire(p, key_off, "MapTensorProto", 1, "tensor", wt, PB_WT_LEN) < 0 ||
            pb_read_len(&p->rd, end, key_off, &len, p->err) < 0)
            return -1;
        if (n == MAP_PARTS)
            return ck_fail(p->err, EINVAL, "%s: offset %llu: map tensor with more than %d "
                           "tensors", PATH(p), OFF(key_off), MAP_PARTS);
        uint64_t sub = p->rd.pos;
        if (parse_tensor(p, &p->v.part[n], sub, sub + len, true) < 0)
            return -1;
        if (p->v.part[n].ndim == 0)
            return ck_fail(p->err, EINVAL, "%s: offset %llu: map tensor part without dims",
                           PATH(p), OFF(sub));
        n++;
        pb_seek(&p->rd, sub + len);
    }
    if (more < 0)
        return -1;
    if (n != MAP_PARTS)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: map tensor has %d tensors, expected "
                       "key, value and status", PATH(p), OFF(start), n);
    p->v.nparts = MAP_PARTS;
    return 0;
}

static int parse_value(parser *p, uint64_t start, uint64_t end)
{
    raw_value *v = &p->v;
    v->has_tag = false;
    v->nparts = 0;
    pb_seek(&p->rd, start);
    pb_field f;
    int more;
    while ((more = pb_next_field(&p->rd, end, &f, p->err)) > 0) {
        uint64_t key_off = f.key_off, len;
        uint32_t field = f.num;
        int wt = f.wire_type;
        if (field == 1) {
            if (expect_wire(p, key_off, "Checkpoint.Value", 1, "tag", wt, PB_WT_LEN) < 0 ||
                read_string(p, end, key_off, v->tag, sizeof v->tag, &v->tag_len, "tag") < 0)
                return -1;
            v->has_tag = true;
            continue;
        }
        if (field != 2 && field != 3) {
            if (pb_skip(&p->rd, end, key_off, wt, p->err) < 0)
                return -1;
            continue;
        }
        const char *name = field == 2 ? "tensor" : "maptensor";
        if (expect_wire(p, key_off, "Checkpoint.Value", field, name, wt, PB_WT_LEN) < 0 ||
            pb_read_len(&p->rd, end, key_off, &len, p->err) < 0)
            return -1;
        if (v->nparts != 0)
            return ck_fail(p->err, EINVAL, "%s: offset %llu: value holds more than one tensor",
                           PATH(p), OFF(key_off));
        uint64_t sub = p->rd.pos;
        if (field == 2) {
            if (parse_tensor(p, &v->part[0], sub, sub + len, false) < 0)
                return -1;
            v->nparts = 1;
        } else if (parse_map(p, sub, sub + len) < 0) {
            return -1;
        }
        pb_seek(&p->rd, sub + len);
    }
    if (more < 0)
        return -1;
    if (!v->has_tag)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: value without a tag", PATH(p),
                       OFF(start));
    if (v->nparts == 0)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: value '%s' holds no tensor",
                       PATH(p), OFF(start), ck_quote(p->q, v->tag, v->tag_len));
    return 0;
}

/* ---- joining records into tensors ---- */

static int nomem(parser *p)
{
    return ck_nomem(p->err, PATH(p));
}

/* prod(dims) * itemsize; -1 - i if dims[i] makes it overflow. */
static long checked_nbytes(const int64_t *dims, uint32_t ndim, unsigned itemsize,
                           uint64_t *out)
{
    ck_dtype item = {.itemsize = itemsize};
    long bad = ck_shape_product(&ck_shape_ckpt, &item, dims, ndim, out);
    return bad < 0 ? 0 : -1 - bad;
}

/* ---- the decoded str values' file ---- */

static int str_file(parser *p)
{
    if (p->str_fd < 0)
        p->str_fd = ck_scratch_fd(p->str_in_memory, PATH(p), "decoded str values", p->err);
    return p->str_fd < 0 ? -1 : 0;
}

/* Append a decoded value to the file; t's one extent becomes its range. */
static int str_store(parser *p, ck_tensor *t, const unsigned char *u8, size_t len)
{
    if (str_file(p) < 0)
        return -1;
    t->n_ext = 1;
    t->ext0 = (ck_extent){.src = CK_CKPT_STR_SRC, .off = p->str_size, .len = len};
    while (len > 0) {
        ssize_t n = pwrite(p->str_fd, u8, len, (off_t)p->str_size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ck_fail_errno(p->err, n < 0 ? errno : EIO, "%s: tensor '%s': cannot write "
                                 "the decoded str value to a temporary file", PATH(p),
                                 NAME(p, t));
        u8 += n;
        len -= (size_t)n;
        p->str_size += (uint64_t)n;
    }
    return 0;
}

/* UTF-32LE -> UTF-8, trailing U+0000 dropped (as numpy does; ckpt_str.h),
 * into the decoded values' file: however many str values there are, none
 * is kept in memory. */
static int decode_str(parser *p, ck_tensor *t, uint64_t total)
{
    if (total % 4 != 0)
        return ck_fail(p->err, EINVAL, "%s: tensor '%s': str content of %llu bytes is not "
                       "UTF-32", PATH(p), NAME(p, t), OFF(total));
    if (total > CK_CKPT_MAX_STR)
        return ck_fail(p->err, EINVAL, "%s: tensor '%s': str value of %llu bytes is over "
                       "the %u-byte limit", PATH(p), NAME(p, t), OFF(total),
                       CK_CKPT_MAX_STR);
    unsigned char *u32 = malloc(total ? total : 1);
    unsigned char *u8 = malloc(total ? total : 1);
    if (u32 == NULL || u8 == NULL) {
        free(u32);
        free(u8);
        return nomem(p);
    }
    uint64_t at = 0;
    for (uint32_t i = 0; i < t->n_ext; i++) {
        const ck_extent *e = ck_tensor_ext(t, i);
        if (ck_source_read(p->src, u32 + at, e->len, e->off, p->err) < 0) {
            free(u32);
            free(u8);
            return -1;
        }
        at += e->len;
    }
    size_t n;
    uint32_t bad;
    uint64_t bad_at;
    bool ok = ck_ckpt_str_decode(u32, total / 4, u8, &n, &bad, &bad_at);
    free(u32);
    if (!ok) {
        free(u8);
        return ck_fail(p->err, EINVAL, "%s: tensor '%s': str holds invalid code point "
                       "U+%X at character %llu", PATH(p), NAME(p, t), bad, OFF(bad_at));
    }
    t->nbytes = n;
    int rc = str_store(p, t, u8, n);
    free(u8);
    return rc;
}

static int set_dims(parser *p, ck_tensor *t, const int64_t *dims, uint32_t ndim)
{
    int64_t *d = ck_arena_alloc(&p->ix->arena, (ndim ? ndim : 1) * sizeof *d);
    if (d == NULL)
        return nomem(p);
    memcpy(d, dims, ndim * sizeof *d);
    t->dims = d;
    t->ndim = ndim;
    return 0;
}

/* Check one finished tensor against its dims and decide the shown shape. */
static int close_part(parser *p, long id, int part)
{
    ck_tensor *t = &p->ix->tensors[id];
    group *g = &p->g;
    uint64_t total = 0;
    for (uint32_t i = 0; i < t->n_ext; i++)
        total += ck_tensor_ext(t, i)->len;
    const raw_tensor *last = &g->last[part];
    int64_t dims[CK_MAX_DIMS];
    uint32_t ndim = last->ndim;
    memcpy(dims, last->dims, ndim * sizeof dims[0]);
    if (g->nparts == MAP_PARTS) {
        if (g->dim0_sum[part] > INT64_MAX)
            return ck_fail(p->err, EINVAL, "%s: offset %llu: map tensor '%s': rows overflow",
                           PATH(p), OFF(g->first_off), NAME(p, t));
        dims[0] = (int64_t)g->dim0_sum[part];
    }

    switch (t->dtype->kind) {
    case CK_KIND_STR: {
        int64_t len;
        if (decode_str(p, t, total) < 0)
            return -1;
        len = (int64_t)t->nbytes;
        return set_dims(p, t, &len, 1);
    }
    case CK_KIND_OPAQUE: {
        int64_t len = (int64_t)total;
        t->nbytes = total;
        return set_dims(p, t, &len, 1);
    }
    default:
        break;
    }

    unsigned item = t->dtype->itemsize;
    if (ndim == 1 && dims[0] == 0 && total == item) {
        /* Pre-2.3 writers store a 0-d value as dims [0] and one element. */
        ndim = 0;
        t->scalar_dims_zero = true;
    }
    uint64_t want;
    char shown[64 * 22];
    long bad = checked_nbytes(dims, ndim, item, &want);
    if (bad < 0) {
        ck_dims_text(dims, ndim, shown, sizeof shown);
        return ck_fail(p->err, EINVAL, "%s: offset %llu: tensor '%s': dims %s overflow the "
                       "byte count", PATH(p), OFF(last->dim_off[-1 - bad]),
                       NAME(p, t), shown);
    }
    if (want != total) {
        ck_dims_text(dims, ndim, shown, sizeof shown);
        return ck_fail(p->err, EINVAL, "%s: offset %llu: tensor '%s': content is %llu bytes "
                       "but dims %s of %s need %llu", PATH(p), OFF(last->content_key_off),
                       NAME(p, t), OFF(total), shown, t->type_name, OFF(want));
    }
    t->nbytes = total;
    return set_dims(p, t, dims, ndim);
}

static int close_group(parser *p)
{
    if (!p->g.open)
        return 0;
    p->g.open = false;
    for (int i = 0; i < p->g.nparts; i++)
        if (close_part(p, p->g.first_id + i, i) < 0)
            return -1;
    return 0;
}

static void mark_superseded(parser *p, uint32_t first_id)
{
    ck_tensor *ts = p->ix->tensors;
    int n = ts[first_id].part == CK_PART_WHOLE ? 1 : MAP_PARTS;
    for (int i = 0; i < n; i++)
        ts[first_id + i].superseded = true;
}

static int open_group(parser *p, uint64_t rec_off)
{
    raw_value *v = &p->v;
    char *tag = ck_arena_strndup(&p->ix->arena, v->tag, v->tag_len);
    if (tag == NULL)
        return nomem(p);
    if (p->ix->count + (size_t)v->nparts > CK_MAX_TENSORS)
        return ck_fail(p->err, EINVAL, "%s: offset %llu: more than %u tensors", PATH(p),
                       OFF(rec_off), CK_MAX_TENSORS);
    group *g = &p->g;
    g->open = true;
    g->nparts = v->nparts;
    g->first_off = rec_off;
    g->first_id = -1;
    for (int i = 0; i < v->nparts; i++) {
        long id = ck_index_add(p->ix);
        if (id < 0)
            return nomem(p);
        if (g->first_id < 0)
            g->first_id = id;
        ck_tensor *t = &p->ix->tensors[id];
        t->name = tag;
        t->name_len = (uint32_t)v->tag_len;
        t->dtype = v->part[i].dtype;
        t->type_name = t->dtype->ms_name;
        t->part = v->nparts == 1 ? CK_PART_WHOLE : (uint8_t)(CK_PART_MAP_KEY + i);
        t->rec_off = rec_off;
        g->dim0_sum[i] = 0;
    }
    int64_t prev = ck_name_map_put(&p->by_tag, tag, v->tag_len, (uint32_t)g->first_id);
    if (prev < 0)
        return nomem(p);
    if (prev != CK_NAME_MAP_NONE)
        mark_superseded(p, (uint32_t)prev);
    return 0;
}

static bool continues_group(const parser *p)
{
    if (!p->g.open || p->g.nparts != p->v.nparts)
        return false;
    const ck_tensor *t = &p->ix->tensors[p->g.first_id];
    return t->name_len == p->v.tag_len && memcmp(t->name, p->v.tag, p->v.tag_len) == 0;
}

static int add_record(parser *p, uint64_t rec_off, uint64_t rec_end)
{
    raw_value *v = &p->v;
    if (!continues_group(p) && (close_group(p) < 0 || open_group(p, rec_off) < 0))
        return -1;
    group *g = &p->g;
    for (int i = 0; i < v->nparts; i++) {
        raw_tensor *r = &v->part[i];
        ck_tensor *t = &p->ix->tensors[g->first_id + i];
        if (r->dtype != t->dtype)
            return ck_fail(p->err, EINVAL, "%s: offset %llu: slice of tensor '%s' has type "
                           "%s, earlier slices %s", PATH(p), OFF(rec_off), ck_quote(p->q, v->tag, v->tag_len), r->type, t->type_name);
        if (ck_tensor_add_extent(t, p->src_id, r->content_off, r->content_len) < 0)
            return nomem(p);
        t->rec_end = rec_end;
        g->last[i] = *r;
        if (g->nparts == MAP_PARTS)
            g->dim0_sum[i] += (uint64_t)r->dims[0];
    }
    return 0;
}

/* ---- CRC trailer ---- */

static int check_crc(ck_source *src, bool verify, ck_ckpt_info *info, ck_error *err)
{
    unsigned char tr[CRC_TRAILER_LEN];
    info->records_end = src->size;
    if (src->size < CRC_TRAILER_LEN)
        return 0;
    uint64_t at = src->size - CRC_TRAILER_LEN;
    if (ck_source_read(src, tr, sizeof tr, at, err) < 0)
        return -1;
    if (memcmp(tr, "crc_num", 7) != 0)
        return 0;
    info->has_crc = true;
    info->records_end = at;
    if (!verify)
        return 0;
    /* Ten big-endian bytes; a CRC-32 only ever fills the last four. */
    uint64_t stored = 0;
    bool high = false;
    for (int i = 7; i < CRC_TRAILER_LEN; i++) {
        if (i < 13 && tr[i] != 0)
            high = true;
        stored = stored << 8 | tr[i];
    }
    size_t bufsize = 1 << 20;
    unsigned char *buf = malloc(bufsize);
    if (buf == NULL)
        return ck_nomem(err, src->path);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t off = 0; off < at;) {
        size_t n = at - off < bufsize ? (size_t)(at - off) : bufsize;
        if (ck_source_read(src, buf, n, off, err) < 0) {
            free(buf);
            return -1;
        }
        crc = crc32(crc, buf, (uInt)n);
        off += n;
    }
    free(buf);
    if (high || stored != crc)
        return ck_fail(err, EINVAL, "%s: offset %llu: CRC mismatch: the trailer says %08llx, "
                       "the content has %08lx (file corrupted)", src->path, OFF(at),
                       (unsigned long long)stored, (unsigned long)crc);
    info->crc_verified = true;
    return 0;
}

/* ---- top level ---- */

static int parse_records(parser *p, ck_ckpt_info *info)
{
    uint64_t end = info->records_end;
    pb_reader_init(&p->rd, p->src, 0);
    while (p->rd.pos < end) {
        uint64_t rec_off = p->rd.pos, len;
        uint32_t field;
        int wt;
        if (pb_read_key(&p->rd, end, &field, &wt, p->err) < 0)
            return -1;
        /* Like protobuf itself, a field-1 record of another wire type is an
         * unknown field, not an error (strategy files look like that). */
        if (field != 1 || wt != PB_WT_LEN) {
            info->n_unknown++;
            if (pb_skip(&p->rd, end, rec_off, wt, p->err) < 0)
                return -1;
            continue;
        }
        if (pb_read_len(&p->rd, end, rec_off, &len, p->err) < 0)
            return -1;
        if (info->n_records == CK_MAX_TENSORS) /* each record costs an extent */
            return ck_fail(p->err, EINVAL, "%s: offset %llu: more than %u records", PATH(p),
                           OFF(rec_off), CK_MAX_TENSORS);
        uint64_t start = p->rd.pos;
        if (parse_value(p, start, start + len) < 0 || add_record(p, rec_off, start + len) < 0)
            return -1;
        info->n_records++;
        pb_seek(&p->rd, start + len);
    }
    if (close_group(p) < 0)
        return -1;
    if (info->n_records == 0)
        return ck_fail(p->err, EINVAL, "%s: not a MindSpore checkpoint: no tensor records "
                       "(%llu other protobuf fields)", PATH(p), OFF(info->n_unknown));
    return 0;
}

int ck_ckpt_read(ck_source *src, uint32_t src_id, bool verify_crc, bool str_in_memory,
                 ck_index *ix, ck_ckpt_info *info, ck_error *err)
{
    memset(info, 0, sizeof *info);
    info->str_fd = -1;
    if (check_crc(src, verify_crc, info, err) < 0)
        return -1;
    /* The parser holds a 4 KiB tag buffer and a read window: keep it off
     * the stack of FUSE threads and small callers. */
    parser *p = calloc(1, sizeof *p);
    if (p == NULL)
        return ck_nomem(err, src->path);
    p->src = src;
    p->src_id = src_id;
    p->ix = ix;
    p->err = err;
    p->str_in_memory = str_in_memory;
    p->str_fd = -1;
    ck_name_map_init(&p->by_tag);
    int rc = parse_records(p, info);
    ck_name_map_free(&p->by_tag);
    if (rc == 0)
        info->str_fd = p->str_fd;
    else if (p->str_fd >= 0)
        close(p->str_fd);
    free(p);
    return rc;
}

/* ---- the format ---- */

const ck_ckpt_info *ck_ckpt_info_of(const ck_model *m)
{
    static const ck_ckpt_info none = {.str_fd = -1};
    return m->state != NULL ? m->state : &none;
}

/* The decoded str values become a source, and their extents name it. */
static int bind_str_values(ck_model *m, ck_ckpt_info *info, ck_error *err)
{
    if (info->str_fd < 0)
        return 0;
    ck_source *src = ck_source_adopt_fd(info->str_fd, "decoded str values", err);
    info->str_fd = -1; /* the source's now, or closed */
    long id = src == NULL ? -1 : ck_model_add_source(m, src, err);
    if (id < 0)
        return -1;
    for (size_t i = 0; i < m->index.count; i++) {
        ck_tensor *t = &m->index.tensors[i];
        if (t->n_ext == 1 && t->ext0.src == CK_CKPT_STR_SRC)
            t->ext0.src = (uint32_t)id;
    }
    return 0;
}

static int ckpt_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    ck_ckpt_info *info = calloc(1, sizeof *info);
    if (info == NULL)
        return ck_nomem(err, m->path);
    info->str_fd = -1;
    m->state = info;
    if (ck_ckpt_read(m->sources[0], 0, !(o && o->skip_crc), ck_envelope_is_secret(&m->env),
                     &m->index, info, err) < 0)
        return -1;
    return bind_str_values(m, info, err);
}

static const char *ckpt_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    (void)m;
    (void)t; /* MindSpore spells each type one way */
    return dt->ms_name;
}

/* Its only source besides the file is the decoded str values. */
static bool ckpt_is_data_file(const ck_model *m, uint32_t i)
{
    (void)m;
    (void)i;
    return false;
}

static const char *ckpt_notes(const ck_model *m)
{
    return ck_ckpt_info_of(m)->has_crc ? ", CRC trailer" : "";
}

/* ---- a saved index (core/saved_index.h) ---- */

#define STATE_LEN 26 /* records_end, n_records, n_unknown, has_crc, crc_verified */

/* What the writer and the tools ask of the reader's pass: all of
 * ck_ckpt_info but the str values' file, which a kept model has none of. */
static int ckpt_save_state(const ck_model *m, unsigned char **state, size_t *len)
{
    const ck_ckpt_info *info = m->state;
    unsigned char *out;
    if (info == NULL || info->str_fd >= 0 || (out = malloc(STATE_LEN)) == NULL)
        return 1;
    ck_put_le64(out, info->records_end);
    ck_put_le64(out + 8, info->n_records);
    ck_put_le64(out + 16, info->n_unknown);
    out[24] = info->has_crc;
    out[25] = info->crc_verified;
    *state = out;
    *len = STATE_LEN;
    return 0;
}

/* The state as a full read with options o would leave it: a CRC trailer
 * verified then counts only if o asks for the check (a read that skipped
 * it cannot stand for one that verifies). */
static int ckpt_load_state(ck_model *m, const ck_open_opts *o, const unsigned char *in,
                           size_t len, ck_error *err)
{
    ck_ckpt_info *info = calloc(1, sizeof *info);
    if (info == NULL)
        return ck_nomem(err, m->path);
    info->str_fd = -1;
    m->state = info;
    bool verify = !(o && o->skip_crc);
    uint64_t size = m->sources[0]->size;
    if (len != STATE_LEN || in[24] > 1 || in[25] > 1 || (in[25] && !in[24]))
        return ck_fail(err, EINVAL, "%s: a bad reader state", m->path);
    info->records_end = ck_le64(in);
    info->n_records = ck_le64(in + 8);
    info->n_unknown = ck_le64(in + 16);
    info->has_crc = in[24];
    if (info->records_end != (info->has_crc ? size - CRC_TRAILER_LEN : size) ||
        (info->has_crc && size < CRC_TRAILER_LEN) || info->n_records == 0 ||
        info->n_records > CK_MAX_TENSORS || info->n_unknown > size)
        return ck_fail(err, EINVAL, "%s: a bad reader state", m->path);
    if (verify && info->has_crc && !in[25])
        return ck_fail(err, EINVAL, "%s: its CRC trailer was not verified", m->path);
    info->crc_verified = verify && in[25];
    return 0;
}

const ck_format ck_format_ckpt = {
    .name = "ckpt",
    .title = "checkpoint",
    .extension = ".ckpt",
    .creatable = true,
    .encryptable = true,
    .open = ckpt_open,
    .free_state = free,
    .type_name = ckpt_type_name,
    .is_data_file = ckpt_is_data_file,
    .notes = ckpt_notes,
    .save_state = ckpt_save_state,
    .load_state = ckpt_load_state,
};
