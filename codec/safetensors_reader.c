/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_reader: Hugging Face's safetensors format, as its reference
 * implementation reads it (huggingface/safetensors, tensor.rs):
 *
 *   N (u64, little-endian) | header: N bytes of JSON, UTF-8 | data
 *
 * (export/safetensors_writer.c writes it back.)
 *
 * The header is one object: each tensor's name maps to {"dtype": "F32",
 * "shape": [2, 3], "data_offsets": [begin, end]}, offsets relative to the
 * start of the data; "__metadata__", when present, is a string-to-string
 * map (e.g. {"format": "pt"}).  The header is parsed with jansson, which
 * refuses bad UTF-8, NUL characters, duplicate names (the reference
 * silently keeps the last one), integers past 2^63 and nesting deeper
 * than it allows; the rest is checked here, each refusal naming the file
 * offset it is about.  A tensor's bytes are located, never read: each is
 * one extent of the file.
 *
 * Like the reference, the reader refuses a header over 100 MB, a tensor
 * whose byte count is not its element count times its dtype's size, and
 * data offsets that do not tile the data section exactly: every byte
 * after the header belongs to exactly one tensor (no gap, no overlap,
 * nothing after the last).
 *
 * Tensors are listed in the header's order, which is the data's order for
 * every writer seen (docs/design.md, "safetensors").
 */
#define _GNU_SOURCE
#include "safetensors_reader.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "le_bytes.h"
#include "model.h"

#define OFF(x) ((unsigned long long)(x))
/* serde_json's recursion limit: 128 levels, the top-level object included,
 * are refused. */
#define CK_ST_MAX_DEPTH 127

/* Where one tensor's bytes are, for the tiling check. */
typedef struct span {
    uint64_t begin, end;        /* relative to the data section */
    uint32_t id;                /* its index id */
} span;

typedef struct reader {
    ck_model *m;
    ck_source *src;
    const char *path;           /* the file, for messages */
    ck_st_info *info;
    ck_st_file *file;           /* the one being read */
    ck_error *err;
    uint64_t data_len;          /* bytes after the header */
    span *spans;
    size_t n_spans;
} reader;

static int nomem(reader *r)
{
    return ck_fail(r->err, ENOMEM, "%s: out of memory", r->path);
}

static const char *quoted(const char *name, char q[CK_QUOTE_BUF])
{
    return ck_quote(q, name, strlen(name));
}

/* A non-negative JSON integer, or -1. */
static int64_t natural(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    return (int64_t)json_integer_value(v);
}

static int bad_field(reader *r, const char *name, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(r->err, EINVAL, "%s: offset 8: tensor '%s' in the header: %s", r->path,
                   quoted(name, q), what);
}

/* "shape": dims into t, and the element count into *elems. */
static int read_shape(reader *r, const char *name, const json_t *shape, int64_t *dims,
                      uint32_t *ndim, uint64_t *elems)
{
    if (!json_is_array(shape))
        return bad_field(r, name, "\"shape\" is missing or not an array");
    size_t n = json_array_size(shape);
    if (n > CK_MAX_DIMS)
        return bad_field(r, name, "\"shape\" has more dims than ckptfs shows (64)");
    uint64_t count = 1;
    for (size_t i = 0; i < n; i++) {
        int64_t d = natural(json_array_get(shape, i));
        if (d < 0)
            return bad_field(r, name, "\"shape\" holds something else than a size");
        if (__builtin_mul_overflow(count, (uint64_t)d, &count) || count > INT64_MAX)
            return bad_field(r, name, "\"shape\" overflows the element count");
        dims[i] = d;
    }
    *ndim = (uint32_t)n;
    *elems = count;
    return 0;
}

/* "data_offsets": [begin, end) within the data section. */
static int read_offsets(reader *r, const char *name, const json_t *offsets, span *s)
{
    if (!json_is_array(offsets) || json_array_size(offsets) != 2)
        return bad_field(r, name, "\"data_offsets\" is missing or not [begin, end]");
    int64_t b = natural(json_array_get(offsets, 0)), e = natural(json_array_get(offsets, 1));
    if (b < 0 || e < 0)
        return bad_field(r, name, "\"data_offsets\" holds something else than offsets");
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

/* One tensor of the header: into the index, its span into r->spans. */
static int add_tensor(reader *r, const char *name, const json_t *desc)
{
    char q[CK_QUOTE_BUF];
    if (!json_is_object(desc))
        return bad_field(r, name, "not an object");
    const char *dtype_name = json_string_value(json_object_get(desc, "dtype"));
    if (dtype_name == NULL)
        return bad_field(r, name, "\"dtype\" is missing or not a string");
    unsigned bits;
    const ck_dtype *dt = ck_dtype_from_safetensors(dtype_name, strlen(dtype_name), &bits);
    if (dt == NULL) {
        char qt[CK_QUOTE_BUF];
        return ck_fail(r->err, EINVAL, "%s: offset 8: tensor '%s' in the header: unknown dtype "
                       "'%s'", r->path, quoted(name, q), quoted(dtype_name, qt));
    }
    int64_t dims[CK_MAX_DIMS];
    uint32_t ndim = 0;
    uint64_t elems = 0;
    span *s = &r->spans[r->n_spans];
    if (read_shape(r, name, json_object_get(desc, "shape"), dims, &ndim, &elems) < 0 ||
        read_offsets(r, name, json_object_get(desc, "data_offsets"), s) < 0)
        return -1;
    uint64_t at = 8 + r->file->header_len + s->begin, nbits;
    if (__builtin_mul_overflow(elems, (uint64_t)bits, &nbits) || nbits % 8 != 0)
        return ck_fail(r->err, EINVAL, "%s: offset %llu: tensor '%s': %llu elements of %s are "
                       "not a whole number of bytes", r->path, OFF(at), quoted(name, q),
                       OFF(elems), dtype_name);
    if (s->end - s->begin != nbits / 8)
        return ck_fail(r->err, EINVAL, "%s: offset %llu: tensor '%s': data offsets [%llu, %llu) "
                       "hold %llu bytes, but its shape and dtype %s need %llu", r->path,
                       OFF(at), quoted(name, q), OFF(s->begin), OFF(s->end),
                       OFF(s->end - s->begin), dtype_name, OFF(nbits / 8));

    ck_index *ix = &r->m->index;
    long id = ck_index_add(ix);
    if (id < 0)
        return nomem(r);
    ck_tensor *t = &ix->tensors[id];
    size_t len = strlen(name);
    /* Packed sub-byte elements are shown as their bytes, kUInt8 [nbytes]. */
    int64_t flat = (int64_t)(nbits / 8);
    bool packed = dt->kind == CK_KIND_PACKED;
    uint32_t shown = packed ? 1 : ndim;
    int64_t *kept = ck_arena_alloc(&ix->arena, (ndim ? ndim : 1) * sizeof *kept);
    t->name = ck_arena_strndup(&ix->arena, name, len);
    if (t->name == NULL || kept == NULL)
        return nomem(r);
    memcpy(kept, dims, ndim * sizeof *kept);
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
    t->name_len = (uint32_t)len;
    t->ndim = shown;
    t->dtype = dt;
    t->type_name = ck_dtype_safetensors_name(dt);
    t->nbytes = nbits / 8;
    t->rec_off = at;
    t->rec_end = at + t->nbytes;
    t->read_only = dt->kind != CK_KIND_NUMERIC;
    if (t->nbytes > 0 && ck_tensor_add_extent(t, r->file->src, at, t->nbytes) < 0)
        return nomem(r);
    s->id = (uint32_t)id;
    r->n_spans++;
    return 0;
}

/* "__metadata__": a string-to-string map, kept as compact JSON. */
static int keep_metadata(reader *r, const json_t *meta)
{
    const char *key;
    const json_t *value;
    if (json_is_null(meta))
        return 0; /* the reference's Option: none */
    if (!json_is_object(meta))
        return ck_fail(r->err, EINVAL, "%s: offset 8: \"__metadata__\" in the header is not an "
                       "object", r->path);
    json_object_foreach((json_t *)meta, key, value)
        if (!json_is_string(value)) {
            char q[CK_QUOTE_BUF];
            return ck_fail(r->err, EINVAL, "%s: offset 8: \"__metadata__\" in the header: the "
                           "value of '%s' is not a string", r->path, quoted(key, q));
        }
    r->file->metadata = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
    return r->file->metadata == NULL ? nomem(r) : 0;
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
    qsort(r->spans, r->n_spans, sizeof *r->spans, by_begin);
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

/* Whether v nests arrays and objects more than limit levels deep, itself
 * included.  jansson's own limit (2048) bounds the recursion. */
static bool deeper_than(json_t *v, int limit)
{
    if (!json_is_array(v) && !json_is_object(v))
        return false;
    if (limit == 0)
        return true;
    size_t i;
    const char *key;
    json_t *child;
    if (json_is_array(v)) {
        json_array_foreach(v, i, child)
            if (deeper_than(child, limit - 1))
                return true;
        return false;
    }
    json_object_foreach(v, key, child)
        if (deeper_than(child, limit - 1))
            return true;
    return false;
}

static int read_tensors(reader *r, json_t *root)
{
    /* What the reference's JSON parser (serde_json) refuses, even inside
     * members it ignores. */
    if (deeper_than(root, CK_ST_MAX_DEPTH))
        return ck_fail(r->err, EINVAL, "%s: offset 8: the header nests arrays and objects "
                       "deeper than %d levels (the reference implementation's limit)",
                       r->path, CK_ST_MAX_DEPTH);
    r->spans = malloc((json_object_size(root) + 1) * sizeof *r->spans);
    if (r->spans == NULL)
        return nomem(r);
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        int rc = strcmp(key, "__metadata__") == 0 ? keep_metadata(r, value)
                                                 : add_tensor(r, key, value);
        if (rc < 0)
            return -1;
    }
    return check_tiling(r);
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

static json_t *parse_header(reader *r)
{
    uint64_t n = r->file->header_len;
    char *text = malloc(n + 1);
    if (text == NULL) {
        nomem(r);
        return NULL;
    }
    json_t *root = NULL;
    if (ck_source_read(r->src, text, (size_t)n, 8, r->err) < 0)
        goto out;
    root = ck_st_parse_json(text, (size_t)n, 8, r->path, "the header", r->err);
    if (root != NULL && !json_is_object(root)) {
        ck_fail(r->err, EINVAL, "%s: offset 8: the header is not a JSON object", r->path);
        json_decref(root);
        root = NULL;
    }
out:
    free(text);
    return root;
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
    json_t *root = parse_header(&r);
    if (root == NULL)
        return -1;
    int rc = read_tensors(&r, root);
    json_decref(root);
    free(r.spans);
    r.file->end = m->index.count;
    /* A parsed header takes about 9 times its size (docs/benchmarks.md):
     * give it back to the system, not only to malloc. */
    if (r.file->header_len > (1u << 20))
        malloc_trim(0);
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
        return ck_fail(err, ENOMEM, "%s: out of memory", m->path);
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
