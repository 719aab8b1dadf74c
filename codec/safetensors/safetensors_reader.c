/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_reader: Hugging Face's safetensors format, as its reference
 * implementation reads it (huggingface/safetensors, tensor.rs):
 *
 *   N (u64, little-endian) | header: N bytes of JSON, UTF-8 | data
 *
 * (codec/safetensors/safetensors_writer.c writes it back.)
 *
 * The header is one object: each tensor's name maps to {"dtype": "F32",
 * "shape": [2, 3], "data_offsets": [begin, end]}, offsets relative to the
 * start of the data; "__metadata__", when present, is a string-to-string
 * map (e.g. {"format": "pt"}).  The header is read 1 MiB at a time and
 * parsed in one pass by yajl's event parser straight into the index,
 * without a JSON document, so a header costs what its tensors cost in the
 * index, as a .ckpt's records do (docs/benchmarks.md, "safetensors headers
 * at scale": jansson's document took 4-5 times the .ckpt's memory and 4-6
 * times its mount time).  Refused, as jansson (JSON_REJECT_DUPLICATES)
 * refused them before: bytes that are not strict UTF-8 in any string, key
 * or value (yajl lets overlong forms and encoded surrogates through, so
 * ck_utf8_valid checks every string and yajl's own check is off); lone
 * surrogate escapes (yajl turns them into '?': a scan of the raw bytes
 * refuses them first); NUL characters; duplicate keys in any object (the
 * reference silently keeps the last one: the top level's through a name
 * map, a tensor's known members by flags, any other object's through a map
 * cleared after each top-level member); integers past 2^63; and nesting
 * deeper than serde_json allows (127).  Each value is checked as its
 * events arrive, so a header with several faults is refused at the first
 * in file order, and each refusal names the file offset it is about.
 * yajl does not check its own allocations: a failed one gives up the parse
 * through its allocator hooks (per handle, no global state) and is
 * reported as "out of memory while parsing the header".  A tensor's bytes
 * are located, never read: each is one extent of the file.
 *
 * Like the reference (Metadata::validate), the reader refuses a header
 * over 100 MB, an unknown dtype, a negative size, a tensor whose element
 * count times its dtype's bits is not the whole number of bytes its
 * data_offsets span, and data offsets that do not tile the data section
 * exactly: every byte after the header belongs to exactly one tensor (no
 * gap, no overlap, nothing after the last).  A sub-byte tensor is shown
 * flat; its file shape is kept for the writer's header (ck_st_shape_of).
 *
 * Tensors are listed in the header's order, which is the data's order for
 * every writer seen.
 */
#define _GNU_SOURCE
#include "safetensors_reader.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

#include "../core/dir_name.h"
#include "../core/le_bytes.h"
#include "../core/model.h"

#define OFF(x) ((unsigned long long)(x))
/* serde_json's recursion limit: 128 levels, the top-level object included,
 * are refused. */
#define CK_ST_MAX_DEPTH 127
/* The header is read and parsed this much at a time. */
#define ST_CHUNK (1u << 20)

/* Where one tensor's bytes are, for the tiling check. */
typedef struct span {
    uint64_t begin, end;        /* relative to the data section */
    uint32_t id;                /* its index id */
} span;

/* What a member of a tensor held, as its events went by. */
typedef enum seen { SEEN_NONE, SEEN_OK, SEEN_OTHER } seen;

/* The member of a tensor whose value is being read. */
typedef enum member { M_OTHER, M_DTYPE, M_SHAPE, M_OFFSETS } member;

/* The value of the top-level member being read. */
typedef enum top { TOP_TENSOR, TOP_META } top;

/* A JSON value, as the parser's events announce it. */
typedef enum vkind { V_NULL, V_BOOL, V_INT, V_DOUBLE, V_STRING, V_ARRAY, V_MAP } vkind;

/* A tensor's description while its members arrive; checked when its object
 * closes, in the order add_tensor lists its checks. */
typedef struct desc {
    const char *name;           /* in the index's arena */
    size_t name_len;
    /* Cleared for each tensor, up to dtype_name. */
    seen dtype, shape, offsets;
    size_t dtype_len;
    size_t n_dims;              /* elements of "shape", all of them */
    const char *shape_fault;    /* the first element that is not a size, or NULL */
    uint64_t elems;
    int64_t off[2];
    size_t n_off;               /* elements of "data_offsets", all of them */
    bool off_fault;
    char dtype_name[CK_QUOTE_MAX + 1]; /* its first bytes: longer names are no dtype */
    int64_t dims[CK_MAX_DIMS];
} desc;

/* Lone surrogate escapes, which the reference refuses and yajl turns into
 * '?': a scan of the raw bytes, its state kept from one chunk to the next.
 * Every backslash of a valid header opens an escape inside a string; one
 * elsewhere is a syntax error that yajl refuses anyway. */
typedef enum esc {
    E_TEXT, E_BACKSLASH, E_HEX, E_WANT_BACKSLASH, E_WANT_U
} esc;

typedef struct reader {
    ck_model *m;
    ck_source *src;
    const char *path;           /* the file, for messages */
    ck_st_info *info;
    ck_st_file *file;           /* the one being read */
    ck_error *err;
    uint64_t data_len;          /* bytes after the header */
    /* The parse. */
    yajl_handle h;
    uint64_t at;                /* file offset of the chunk being parsed */
    uint64_t first;             /* file offset of the header's first value */
    bool found_first;
    jmp_buf oom;                /* where yajl's failed allocation returns */
    uint32_t depth;             /* open arrays and objects */
    uint32_t object[CK_ST_MAX_DEPTH + 1]; /* at each depth, the open object's number */
    uint32_t n_objects;
    top top;
    member member;
    desc d;
    json_t *meta;               /* "__metadata__" as it arrives */
    char *meta_key;             /* its member being read */
    size_t meta_key_len;
    ck_name_map names;          /* the top-level keys, kept in the index's arena */
    ck_name_map keys;           /* other keys: object number + key, in scratch */
    ck_arena scratch;
    esc esc;
    unsigned hex_digits, hex;
    bool want_low;              /* the escape read is the second of a pair */
    /* The tiling check, once every tensor is in. */
    span *spans;
    size_t n_spans;
} reader;

static int nomem(reader *r)
{
    return ck_fail(r->err, ENOMEM, "%s: out of memory while parsing the header", r->path);
}

/* For yajl's callbacks, whose 0 stops the parse. */
static int stop_nomem(reader *r)
{
    nomem(r);
    return 0;
}

static const char *quoted(const char *name, char q[CK_QUOTE_BUF])
{
    return ck_quote(q, name, strlen(name));
}

static int bad_field(reader *r, const char *name, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(r->err, EINVAL, "%s: offset 8: tensor '%s' in the header: %s", r->path,
                   quoted(name, q), what);
}

/* The file offset the parser has reached: just after the token that made
 * the current event. */
static uint64_t here(const reader *r)
{
    return r->at + yajl_get_bytes_consumed(r->h);
}

static int not_json(reader *r, uint64_t at, const char *what)
{
    return ck_fail(r->err, EINVAL, "%s: offset %llu: the header is not valid JSON: %s",
                   r->path, OFF(at), what);
}

/* ---- checks once a tensor's object has closed ---- */

/* "shape": dims, ndim and the element count, from what its events left. */
static int check_shape(reader *r, const desc *d, uint32_t *ndim)
{
    if (d->shape != SEEN_OK)
        return bad_field(r, d->name, "\"shape\" is missing or not an array");
    if (d->n_dims > CK_MAX_DIMS)
        return bad_field(r, d->name, "\"shape\" has more dims than ckptfs shows (64)");
    if (d->shape_fault != NULL)
        return bad_field(r, d->name, d->shape_fault);
    *ndim = (uint32_t)d->n_dims;
    return 0;
}

/* "data_offsets": [begin, end) within the data section. */
static int check_offsets(reader *r, const desc *d, span *s)
{
    const char *name = d->name;
    if (d->offsets != SEEN_OK || d->n_off != 2)
        return bad_field(r, name, "\"data_offsets\" is missing or not [begin, end]");
    if (d->off_fault)
        return bad_field(r, name, "\"data_offsets\" holds something else than offsets");
    int64_t b = d->off[0], e = d->off[1];
    char q[CK_QUOTE_BUF];
    uint64_t at = 8 + r->file->header_len + (uint64_t)b;
    if (e < b)
        return ck_fail(r->err, EINVAL, "%s: offset %llu: tensor '%s' ends (data offset %lld) "
                       "before it begins (%lld)", r->path, OFF(at), quoted(name, q),
                       (long long)e, (long long)b);
    if ((uint64_t)e > r->data_len)
        return ck_fail(r->err, EINVAL, "%s: offset %llu: tensor '%s' runs past the end of the "
                       "file: data offsets [%lld, %lld), %llu bytes of data", r->path,
                       OFF(at), quoted(name, q), (long long)b, (long long)e, OFF(r->data_len));
    s->begin = (uint64_t)b;
    s->end = (uint64_t)e;
    return 0;
}

/* The tensor r->d described, checked, into the index. */
static int add_tensor(reader *r)
{
    const desc *d = &r->d;
    const char *name = d->name;
    char q[CK_QUOTE_BUF], qt[CK_QUOTE_BUF];
    if (d->dtype != SEEN_OK)
        return bad_field(r, name, "\"dtype\" is missing or not a string");
    const char *dtype_name = ck_quote(qt, d->dtype_name, d->dtype_len);
    unsigned bits;
    const ck_dtype *dt = d->dtype_len > CK_QUOTE_MAX ? NULL
                       : ck_dtype_from_safetensors(d->dtype_name, d->dtype_len, &bits);
    if (dt == NULL)
        return ck_fail(r->err, EINVAL, "%s: offset 8: tensor '%s' in the header: unknown dtype "
                       "'%s'", r->path, quoted(name, q), dtype_name);
    uint32_t ndim = 0;
    span s = {0};
    if (check_shape(r, d, &ndim) < 0 || check_offsets(r, d, &s) < 0)
        return -1;
    uint64_t at = 8 + r->file->header_len + s.begin, nbits;
    if (__builtin_mul_overflow(d->elems, (uint64_t)bits, &nbits) || nbits % 8 != 0)
        return ck_fail(r->err, EINVAL, "%s: offset %llu: tensor '%s': %llu elements of %s are "
                       "not a whole number of bytes", r->path, OFF(at), quoted(name, q),
                       OFF(d->elems), dtype_name);
    if (s.end - s.begin != nbits / 8)
        return ck_fail(r->err, EINVAL, "%s: offset %llu: tensor '%s': data offsets [%llu, %llu) "
                       "hold %llu bytes, but its shape and dtype %s need %llu", r->path,
                       OFF(at), quoted(name, q), OFF(s.begin), OFF(s.end),
                       OFF(s.end - s.begin), dtype_name, OFF(nbits / 8));

    ck_index *ix = &r->m->index;
    long id = ck_index_add(ix);
    if (id < 0)
        return nomem(r);
    ck_tensor *t = &ix->tensors[id];
    /* Packed sub-byte elements are shown as their bytes, kUInt8 [nbytes]. */
    int64_t flat = (int64_t)(nbits / 8);
    bool packed = dt->kind == CK_KIND_PACKED;
    uint32_t shown = packed ? 1 : ndim;
    int64_t *kept = ck_arena_alloc(&ix->arena, (ndim ? ndim : 1) * sizeof *kept);
    if (kept == NULL)
        return nomem(r);
    memcpy(kept, d->dims, ndim * sizeof *kept);
    t->name = name;
    t->dims = kept;
    if (packed) { /* shown flat; the file's shape kept for a save */
        int64_t *one = ck_arena_alloc(&ix->arena, sizeof *one);
        ck_st_shape *more = realloc(r->info->flat, (r->info->n_flat + 1) * sizeof *more);
        if (one == NULL || more == NULL)
            return nomem(r);
        *one = flat;
        t->dims = one;
        r->info->flat = more;
        more[r->info->n_flat++] = (ck_st_shape){.id = (uint32_t)id, .ndim = ndim, .dims = kept};
    }
    t->name_len = (uint32_t)d->name_len;
    t->ndim = shown;
    t->dtype = dt;
    t->type_name = ck_dtype_safetensors_name(dt);
    t->nbytes = nbits / 8;
    t->rec_off = at;
    t->rec_end = at + t->nbytes;
    t->read_only = dt->kind != CK_KIND_NUMERIC;
    if (t->nbytes > 0 && ck_tensor_add_extent(t, r->file->src, at, t->nbytes) < 0)
        return nomem(r);
    return 0;
}

/* "__metadata__", complete: kept as compact JSON. */
static int keep_metadata(reader *r)
{
    r->file->metadata = json_dumps(r->meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(r->meta);
    r->meta = NULL;
    return r->file->metadata == NULL ? nomem(r) : 0;
}

/* ---- the events of the parse (yajl's callbacks: 0 stops it, r->err says why) ---- */

/* An element of "shape" (a value inside its array). */
static void shape_element(desc *d, vkind k, long long v)
{
    if (++d->n_dims > CK_MAX_DIMS || d->shape_fault != NULL)
        return;
    if (k != V_INT || v < 0) {
        d->shape_fault = "\"shape\" holds something else than a size";
        return;
    }
    if (__builtin_mul_overflow(d->elems, (uint64_t)v, &d->elems) || d->elems > INT64_MAX) {
        d->shape_fault = "\"shape\" overflows the element count";
        return;
    }
    d->dims[d->n_dims - 1] = v;
}

static void offsets_element(desc *d, vkind k, long long v)
{
    if (++d->n_off > 2)
        return;
    if (k != V_INT || v < 0)
        d->off_fault = true;
    else
        d->off[d->n_off - 1] = v;
}

/* A tensor member's value (depth 2), or a value inside it (depth 3). */
static void tensor_value(reader *r, vkind k, long long v, const unsigned char *s, size_t len)
{
    desc *d = &r->d;
    if (r->depth == 3) {
        if (r->member == M_SHAPE && d->shape == SEEN_OK)
            shape_element(d, k, v);
        else if (r->member == M_OFFSETS && d->offsets == SEEN_OK)
            offsets_element(d, k, v);
        return;
    }
    switch (r->member) {
    case M_DTYPE:
        d->dtype = k == V_STRING ? SEEN_OK : SEEN_OTHER;
        d->dtype_len = len;
        if (k == V_STRING)
            memcpy(d->dtype_name, s, len < sizeof d->dtype_name ? len : sizeof d->dtype_name);
        break;
    case M_SHAPE:
        d->shape = k == V_ARRAY ? SEEN_OK : SEEN_OTHER;
        d->elems = 1; /* shape [] is one element */
        break;
    case M_OFFSETS:
        d->offsets = k == V_ARRAY ? SEEN_OK : SEEN_OTHER;
        break;
    case M_OTHER:
        break; /* ignored, as the reference does */
    }
}

/* A member of "__metadata__": a string, kept. */
static int meta_value(reader *r, vkind k, const unsigned char *s, size_t len)
{
    if (k != V_STRING) {
        char q[CK_QUOTE_BUF];
        return ck_fail(r->err, EINVAL, "%s: offset 8: \"__metadata__\" in the header: the "
                       "value of '%s' is not a string", r->path,
                       ck_quote(q, r->meta_key, r->meta_key_len));
    }
    json_t *str = json_stringn_nocheck((const char *)s, len); /* checked: UTF-8, no NUL */
    if (str == NULL || json_object_setn_new(r->meta, r->meta_key, r->meta_key_len, str) < 0)
        return nomem(r);
    return 0;
}

/* Every value, scalar or the opening of an array or object, at r->depth. */
static int on_value(reader *r, vkind k, long long v, const unsigned char *s, size_t len)
{
    if (r->depth == 0) {
        if (k == V_MAP)
            return 1;
        ck_fail(r->err, EINVAL, "%s: offset %llu: the header is not a JSON object", r->path,
                OFF(r->first));
        return 0;
    }
    if (r->depth == 1 && r->top == TOP_META) {
        if (k == V_NULL)
            return 1; /* the reference's Option: none */
        if (k != V_MAP) {
            ck_fail(r->err, EINVAL, "%s: offset 8: \"__metadata__\" in the header is not an "
                    "object", r->path);
            return 0;
        }
        r->meta = json_object();
        return r->meta != NULL ? 1 : stop_nomem(r);
    }
    if (r->depth == 1) {
        if (k != V_MAP) {
            bad_field(r, r->d.name, "not an object");
            return 0;
        }
        memset(&r->d.dtype, 0, offsetof(desc, dtype_name) - offsetof(desc, dtype));
        return 1;
    }
    if (r->depth == 2 && r->top == TOP_META)
        return meta_value(r, k, s, len) == 0;
    if (r->depth <= 3 && r->top == TOP_TENSOR)
        tensor_value(r, k, v, s, len);
    return 1;
}

/* A string, key or value: UTF-8, as the reference requires, and without
 * NUL, which a C string (a tensor's name) cannot hold. */
static int check_string(reader *r, const unsigned char *s, size_t len)
{
    if (memchr(s, 0, len) != NULL) {
        ck_fail(r->err, EINVAL, "%s: offset %llu: the header holds a NUL character (\\u0000) "
                "in a string, which ckptfs cannot hold", r->path, OFF(here(r)));
        return -1;
    }
    if (!ck_utf8_valid(s, len)) {
        not_json(r, here(r), "a string is not UTF-8");
        return -1;
    }
    return 0;
}

static int dup_key(reader *r, const unsigned char *key, size_t len)
{
    char q[CK_QUOTE_BUF], why[CK_QUOTE_BUF + 32];
    snprintf(why, sizeof why, "duplicate object key '%s'", ck_quote(q, key, len));
    not_json(r, here(r), why);
    return 0;
}

/* A key of a nested object: refused if that object already had it. */
static int nested_key(reader *r, const unsigned char *key, size_t len)
{
    char *k = ck_arena_alloc(&r->scratch, sizeof(uint32_t) + len);
    if (k == NULL)
        return stop_nomem(r);
    memcpy(k, &r->object[r->depth], sizeof(uint32_t));
    memcpy(k + sizeof(uint32_t), key, len);
    int64_t prev = ck_name_map_put(&r->keys, k, sizeof(uint32_t) + len, 0);
    if (prev < 0)
        return stop_nomem(r);
    return prev == CK_NAME_MAP_NONE ? 1 : dup_key(r, key, len);
}

/* A key of the top-level object: a tensor's name, or "__metadata__". */
static int top_key(reader *r, const unsigned char *key, size_t len)
{
    static const char meta[] = "__metadata__";
    bool is_meta = len == sizeof meta - 1 && memcmp(key, meta, len) == 0;
    char *name = is_meta ? (char *)meta
                         : ck_arena_strndup(&r->m->index.arena, (const char *)key, len);
    if (name == NULL)
        return stop_nomem(r);
    int64_t prev = ck_name_map_put(&r->names, name, len, 0);
    if (prev < 0)
        return stop_nomem(r);
    if (prev != CK_NAME_MAP_NONE)
        return dup_key(r, key, len);
    r->top = is_meta ? TOP_META : TOP_TENSOR;
    r->d.name = name;
    r->d.name_len = len;
    return 1;
}

static int on_key(void *ctx, const unsigned char *key, size_t len)
{
    reader *r = ctx;
    if (check_string(r, key, len) < 0)
        return 0;
    if (r->depth == 1)
        return top_key(r, key, len);
    if (r->depth == 2 && r->top == TOP_TENSOR) {
        static const char *const names[] = {[M_DTYPE] = "dtype", [M_SHAPE] = "shape",
                                            [M_OFFSETS] = "data_offsets"};
        seen *state[] = {[M_DTYPE] = &r->d.dtype, [M_SHAPE] = &r->d.shape,
                         [M_OFFSETS] = &r->d.offsets};
        for (member m = M_DTYPE; m <= M_OFFSETS; m++)
            if (strlen(names[m]) == len && memcmp(names[m], key, len) == 0) {
                r->member = m;
                return *state[m] == SEEN_NONE ? 1 : dup_key(r, key, len);
            }
        r->member = M_OTHER;
    }
    if (r->depth == 2 && r->top == TOP_META) {
        r->meta_key = ck_arena_strndup(&r->scratch, (const char *)key, len);
        r->meta_key_len = len;
        if (r->meta_key == NULL)
            return stop_nomem(r);
    }
    return nested_key(r, key, len);
}

static int on_null(void *ctx)
{
    return on_value(ctx, V_NULL, 0, NULL, 0);
}

static int on_boolean(void *ctx, int b)
{
    (void)b;
    return on_value(ctx, V_BOOL, 0, NULL, 0);
}

static int on_integer(void *ctx, long long v)
{
    return on_value(ctx, V_INT, v, NULL, 0);
}

static int on_double(void *ctx, double v)
{
    (void)v;
    return on_value(ctx, V_DOUBLE, 0, NULL, 0);
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    return check_string(ctx, s, len) == 0 && on_value(ctx, V_STRING, 0, s, len);
}

/* An array or object opens: as deep as the reference's JSON parser
 * (serde_json) allows, even inside members it ignores. */
static int open_container(reader *r, vkind k)
{
    if (!on_value(r, k, 0, NULL, 0))
        return 0;
    if (r->depth == CK_ST_MAX_DEPTH) {
        ck_fail(r->err, EINVAL, "%s: offset 8: the header nests arrays and objects deeper "
                "than %d levels (the reference implementation's limit)", r->path,
                CK_ST_MAX_DEPTH);
        return 0;
    }
    r->object[++r->depth] = k == V_MAP ? ++r->n_objects : 0;
    return 1;
}

/* An array or object closes: a tensor's or the metadata's is complete. */
static int close_container(reader *r)
{
    if (r->depth == 2 && r->top == TOP_TENSOR && add_tensor(r) < 0)
        return 0;
    if (r->depth == 2 && r->top == TOP_META && r->meta != NULL && keep_metadata(r) < 0)
        return 0;
    if (--r->depth == 1 && r->keys.count > 0) {
        /* The keys of a top-level member's objects matter no more. */
        ck_name_map_free(&r->keys);
        ck_arena_free(&r->scratch);
    }
    return 1;
}

static int on_start_map(void *ctx)
{
    return open_container(ctx, V_MAP);
}

static int on_end_map(void *ctx)
{
    return close_container(ctx);
}

static int on_start_array(void *ctx)
{
    return open_container(ctx, V_ARRAY);
}

static int on_end_array(void *ctx)
{
    return close_container(ctx);
}

static const yajl_callbacks events = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_integer = on_integer,
    .yajl_double = on_double,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_key,
    .yajl_end_map = on_end_map,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end_array,
};

/* ---- feeding the parser ---- */

/* yajl does not check its own allocations (its buffers write through a NULL
 * result): a failed one gives up the parse here instead, its handle left
 * whole for yajl_free. */
static void *yajl_malloc(void *ctx, size_t n)
{
    void *p = malloc(n);
    if (p == NULL)
        longjmp(((reader *)ctx)->oom, 1);
    return p;
}

static void *yajl_realloc(void *ctx, void *p, size_t n)
{
    void *q = realloc(p, n);
    if (q == NULL)
        longjmp(((reader *)ctx)->oom, 1);
    return q;
}

static void yajl_release(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static int hex_digit(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* One step of the surrogate scan; false at a lone surrogate. */
static bool escape_step(reader *r, unsigned char c)
{
    switch (r->esc) {
    case E_TEXT:
        if (c == '\\')
            r->esc = E_BACKSLASH;
        return true;
    case E_BACKSLASH:
        r->esc = c == 'u' ? E_HEX : E_TEXT;
        r->hex = r->hex_digits = 0;
        return true;
    case E_HEX: {
        int v = hex_digit(c);
        if (v < 0) { /* not an escape: yajl refuses it */
            r->esc = E_TEXT;
            r->want_low = false;
            return true;
        }
        r->hex = r->hex << 4 | (unsigned)v;
        if (++r->hex_digits < 4)
            return true;
        bool high = r->hex >= 0xd800 && r->hex < 0xdc00;
        bool low = r->hex >= 0xdc00 && r->hex < 0xe000;
        if (r->want_low != low || (high && r->want_low))
            return false;
        r->esc = high ? E_WANT_BACKSLASH : E_TEXT;
        r->want_low = high;
        return true;
    }
    case E_WANT_BACKSLASH:
        r->esc = E_WANT_U;
        return c == '\\';
    case E_WANT_U:
        r->esc = E_HEX;
        r->hex = r->hex_digits = 0;
        return c == 'u';
    }
    return true;
}

/* Scan and parse one chunk of the header, found at file offset at. */
static int parse_chunk(reader *r, const unsigned char *text, size_t len, uint64_t at)
{
    r->at = at;
    for (size_t i = 0; !r->found_first && i < len; i++)
        if (strchr(" \t\n\r", text[i]) == NULL) {
            r->first = at + i;
            r->found_first = true;
        }
    for (size_t i = 0; i < len; i++) {
        if (r->esc == E_TEXT) { /* the next escape; most headers have none */
            const unsigned char *bs = memchr(text + i, '\\', len - i);
            if (bs == NULL)
                break;
            i = (size_t)(bs - text);
        }
        if (!escape_step(r, text[i]))
            return not_json(r, at + i, "a lone surrogate escape in a string");
    }
    yajl_status st = yajl_parse(r->h, text, len);
    if (st == yajl_status_client_canceled)
        return -1;
    if (st == yajl_status_ok)
        return 0;
    unsigned char *why = yajl_get_error(r->h, 0, text, len);
    char q[CK_QUOTE_BUF];
    const char *reason = why == NULL ? "" : (const char *)why;
    not_json(r, here(r), ck_quote(q, reason, strcspn(reason, "\n")));
    yajl_free_error(r->h, why);
    return -1;
}

/* The end of the header: the top-level object must be complete. */
static int parse_end(reader *r)
{
    r->at = 8 + r->file->header_len;
    yajl_status st = yajl_complete_parse(r->h);
    if (st == yajl_status_client_canceled)
        return -1;
    if (st == yajl_status_ok)
        return 0;
    unsigned char *why = yajl_get_error(r->h, 0, NULL, 0);
    char q[CK_QUOTE_BUF];
    const char *reason = why == NULL ? "" : (const char *)why;
    not_json(r, r->at, ck_quote(q, reason, strcspn(reason, "\n")));
    yajl_free_error(r->h, why);
    return -1;
}

static int by_begin(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Every data byte belongs to exactly one tensor, as the reference checks. */
static int check_tiling(reader *r)
{
    /* Writers lay the data out in the header's order: sort only if not. */
    for (size_t i = 1; i < r->n_spans; i++)
        if (by_begin(&r->spans[i - 1], &r->spans[i]) > 0) {
            qsort(r->spans, r->n_spans, sizeof *r->spans, by_begin);
            break;
        }
    uint64_t next = 0, base = 8 + r->file->header_len;
    char q[CK_QUOTE_BUF], qp[CK_QUOTE_BUF];
    for (size_t i = 0; i < r->n_spans; i++) {
        const span *s = &r->spans[i];
        const char *name = r->m->index.tensors[s->id].name;
        if (s->begin > next)
            return ck_fail(r->err, EINVAL, "%s: offset %llu: %llu bytes that no tensor holds, "
                           "before tensor '%s'", r->path, OFF(base + next),
                           OFF(s->begin - next), quoted(name, q));
        if (s->begin < next) {
            const char *prev = r->m->index.tensors[r->spans[i - 1].id].name;
            return ck_fail(r->err, EINVAL, "%s: offset %llu: tensor '%s' overlaps tensor '%s'",
                           r->path, OFF(base + s->begin), quoted(name, q),
                           quoted(prev, qp));
        }
        next = s->end;
    }
    if (next != r->data_len)
        return ck_fail(r->err, EINVAL, "%s: offset %llu: %llu bytes after the last tensor's "
                       "data", r->path, OFF(base + next), OFF(r->data_len - next));
    return 0;
}

/* The header's length, checked against the file and the reference's limit. */
static int read_header_len(reader *r)
{
    unsigned char n8[8];
    uint64_t size = r->src->size;
    if (size < 8)
        return ck_fail(r->err, EINVAL, "%s: offset 0: %llu bytes, too short for a safetensors "
                       "file (the header's length alone takes 8)", r->path, OFF(size));
    if (ck_source_read(r->src, n8, 8, 0, r->err) < 0)
        return -1;
    uint64_t n = ck_le64(n8);
    if (n > CK_ST_MAX_HEADER)
        return ck_fail(r->err, EINVAL, "%s: offset 0: a header of %llu bytes, over the limit of "
                       "%u (the reference implementation's)", r->path, OFF(n),
                       CK_ST_MAX_HEADER);
    if (n > size - 8)
        return ck_fail(r->err, EINVAL, "%s: offset 0: a header of %llu bytes runs past the end "
                       "of the file (%llu bytes)", r->path, OFF(n), OFF(size));
    r->file->header_len = n;
    r->data_len = size - 8 - n;
    return 0;
}

json_t *ck_st_parse_json(const char *text, size_t len, uint64_t at, const char *path,
                         const char *what, ck_error *err)
{
    json_error_t je;
    memset(&je, 0, sizeof je);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL && (json_error_code(&je) == json_error_out_of_memory || je.text[0] == '\0')) {
        /* jansson names every fault of the text; where an allocation of
         * its own fails it may say nothing at all. */
        ck_fail(err, ENOMEM, "%s: out of memory while parsing %s (%zu bytes)", path, what, len);
    } else if (root == NULL) {
        /* jansson's text quotes the input near the error: quote it again. */
        char q[CK_QUOTE_BUF];
        ck_fail(err, EINVAL, "%s: offset %llu: %s is not valid JSON: %s", path,
                OFF(at + (uint64_t)je.position), what, ck_quote(q, je.text, strlen(je.text)));
    }
    return root;
}

/* The header, read in chunks of a bounded size and parsed in one pass
 * straight into the index: no document is built (docs/benchmarks.md,
 * "safetensors headers at scale"). */
static int parse_header(reader *r)
{
    uint64_t n = r->file->header_len;
    size_t cap = n < ST_CHUNK ? (size_t)n : ST_CHUNK;
    unsigned char *buf = malloc(cap ? cap : 1);
    if (buf == NULL)
        return nomem(r);
    yajl_alloc_funcs funcs = {yajl_malloc, yajl_realloc, yajl_release, r};
    int rc = -1;
    r->h = NULL;
    if (setjmp(r->oom) != 0) {
        rc = nomem(r);
        goto out;
    }
    r->h = yajl_alloc(&events, &funcs, r);
    /* check_string checks every string, strictly (yajl lets overlong forms
     * and encoded surrogates through): yajl's own check would be a second. */
    yajl_config(r->h, yajl_dont_validate_strings, 1);
    for (uint64_t off = 0; off < n; off += ST_CHUNK) {
        size_t len = n - off < ST_CHUNK ? (size_t)(n - off) : ST_CHUNK;
        if (ck_source_read(r->src, buf, len, 8 + off, r->err) < 0 ||
            parse_chunk(r, buf, len, 8 + off) < 0)
            goto out;
    }
    rc = parse_end(r);
out:
    if (r->h != NULL)
        yajl_free(r->h);
    free(buf);
    return rc;
}

/* The file's tensors, from the index, for the tiling check. */
static int collect_spans(reader *r)
{
    const ck_index *ix = &r->m->index;
    uint64_t base = 8 + r->file->header_len;
    r->n_spans = ix->count - r->file->first;
    r->spans = malloc((r->n_spans + 1) * sizeof *r->spans);
    if (r->spans == NULL)
        return nomem(r);
    for (size_t i = 0; i < r->n_spans; i++) {
        const ck_tensor *t = &ix->tensors[r->file->first + i];
        r->spans[i] = (span){.begin = t->rec_off - base, .end = t->rec_end - base,
                             .id = (uint32_t)(r->file->first + i)};
    }
    return 0;
}

/* Room for one more file in info. */
static ck_st_file *new_file(ck_st_info *info)
{
    if (info->n_files == info->cap_files) {
        uint32_t cap = info->cap_files ? info->cap_files * 2 : 1;
        ck_st_file *f = realloc(info->files, cap * sizeof *f);
        if (f == NULL)
            return NULL;
        info->files = f;
        info->cap_files = cap;
    }
    return memset(&info->files[info->n_files], 0, sizeof *info->files);
}

int ck_st_read_file(ck_model *m, ck_st_info *info, uint32_t src, const char *rel,
                    ck_error *err)
{
    reader r = {.m = m, .src = m->sources[src], .info = info, .err = err,
                .path = src == 0 ? m->path : m->sources[src]->path};
    r.file = new_file(info);
    if (r.file == NULL)
        return nomem(&r);
    info->n_files++;
    r.file->src = src;
    r.file->rel = rel;
    r.file->first = r.file->end = m->index.count;
    if (read_header_len(&r) < 0)
        return -1;
    ck_name_map_init(&r.names);
    ck_name_map_init(&r.keys);
    ck_arena_init(&r.scratch);
    int rc = parse_header(&r);
    /* Before the tiling check: the keys' maps are the largest thing held. */
    json_decref(r.meta);
    ck_name_map_free(&r.names);
    ck_name_map_free(&r.keys);
    ck_arena_free(&r.scratch);
    if (rc == 0)
        rc = collect_spans(&r) < 0 ? -1 : check_tiling(&r);
    free(r.spans);
    r.file->end = m->index.count;
    return rc;
}

/* ---- the format ---- */

const ck_st_info *ck_st_info_of(const ck_model *m)
{
    return m->state;
}

const ck_st_file *ck_st_file_of(const ck_model *m, uint32_t id)
{
    const ck_st_info *info = ck_st_info_of(m);
    if (info == NULL)
        return NULL;
    uint32_t lo = 0, hi = info->n_files; /* files[] hold ascending id ranges */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (info->files[mid].end <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < info->n_files && info->files[lo].first <= id ? &info->files[lo] : NULL;
}

int ck_st_shape_of(const ck_model *m, uint32_t id, const int64_t **dims, uint32_t *ndim)
{
    const ck_st_info *info = ck_st_info_of(m);
    if (info == NULL || id >= m->index.count)
        return -1;
    size_t lo = 0, hi = info->n_flat; /* flat[] is in id order */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (info->flat[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < info->n_flat && info->flat[lo].id == id) {
        *dims = info->flat[lo].dims;
        *ndim = info->flat[lo].ndim;
    } else {
        *dims = m->index.tensors[id].dims;
        *ndim = m->index.tensors[id].ndim;
    }
    return 0;
}

void ck_st_info_free(void *state)
{
    ck_st_info *info = state;
    if (info == NULL)
        return;
    for (uint32_t i = 0; i < info->n_files; i++)
        free(info->files[i].metadata);
    free(info->files);
    free(info->set_metadata);
    free(info->flat);
    free(info);
}

static int st_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    (void)o;
    ck_st_info *info = calloc(1, sizeof *info);
    if (info == NULL)
        return ck_nomem(err, m->path);
    m->state = info;
    return ck_st_read_file(m, info, 0, NULL, err);
}

const char *ck_st_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    (void)m;
    if (t != NULL)
        return t->type_name;
    const char *name = ck_dtype_safetensors_name(dt);
    return name != NULL ? name : "?";
}

static bool st_is_data_file(const ck_model *m, uint32_t i)
{
    (void)m;
    (void)i;
    return false; /* one file, nothing decoded */
}

static const char *st_metadata(const ck_model *m)
{
    const ck_st_info *info = ck_st_info_of(m);
    return info != NULL && info->n_files > 0 ? info->files[0].metadata : NULL;
}

const ck_format ck_format_safetensors = {
    .name = "safetensors",
    .title = "safetensors",
    .extension = ".safetensors",
    .creatable = true,
    .open = st_open,
    .free_state = ck_st_info_free,
    .type_name = ck_st_type_name,
    .is_data_file = st_is_data_file,
    .metadata = st_metadata,
};
