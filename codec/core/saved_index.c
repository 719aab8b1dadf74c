/* SPDX-License-Identifier: Apache-2.0 */
/*
 * saved_index: a model's index kept in a file (saved_index.h): its bytes,
 * the checks that tie it to the model file, and the store directory.
 *
 * The file, little-endian throughout:
 *   "CKPTFSIX", u32 version, u32 0, u64 length of the whole file;
 *   str ckptfs version, str format name, str the model's real path;
 *   u64 size, i64 mtime s, u32 mtime ns, 32 bytes SHA-256 of its first
 *   CK_SAVED_SAMPLE bytes;
 *   str the format's state (save_state);
 *   u64 tensor count, then per tensor:
 *     str name, str dtype (its ms_name), str type_name, u8 flags (part,
 *     superseded, scalar_dims_zero, read_only, dir_src, dir_suffix),
 *     [str dir_src], [str dir_suffix], u32 ndim, ndim x i64 dims,
 *     u64 nbytes, u64 rec_off, u64 rec_end, u32 n_ext, n_ext x (u64 off,
 *     u64 len) of source 0, u32 CRC-32 of the record's non-data bytes;
 *   32 bytes: SHA-256 of everything before them.
 * A str is a u32 length and its bytes.
 */
#define _GNU_SOURCE
#include "saved_index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "../envelope.h"
#include "byte_buf.h"
#include "le_bytes.h"
#include "version.h"

#define MAGIC "CKPTFSIX"
#define VERSION 1
#define HEAD_LEN 24         /* magic, version, 0, length */
#define SUM_LEN 32          /* the SHA-256 trailer */
#define SUFFIX ".ckidx"
#define MAX_STR (1u << 20)  /* longest name, type or path accepted */
/* Tensors sharing one record (a map parameter's key, value and status):
 * more is no format's layout, and would make the header walk quadratic. */
#define MAX_GROUP 4

#define F_SUPERSEDED 0x04
#define F_SCALAR_DIMS_ZERO 0x08
#define F_READ_ONLY 0x10
#define F_DIR_SRC 0x20
#define F_DIR_SUFFIX 0x40
#define F_PART 0x03

struct ck_saved_index {
    char *file;             /* the index file, removed once it proves wrong */
    size_t count;           /* = the index's tensor count */
    uint32_t *crc;          /* per tensor: its record's non-data bytes */
    uint8_t *checked;       /* 1 once tensor i's header matched (atomic) */
    bool removed;           /* file deleted (atomic) */
};

void ck_saved_index_free(struct ck_saved_index *s)
{
    if (s == NULL)
        return;
    free(s->file);
    free(s->crc);
    free(s->checked);
    free(s);
}

/* ---- the records' non-data bytes ---- */

typedef struct span {
    uint64_t off, len;
} span;

static bool same_record(const ck_tensor *a, const ck_tensor *b)
{
    return a->rec_off == b->rec_off && a->rec_end == b->rec_end;
}

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

typedef int (*span_fn)(void *ctx, uint64_t off, uint64_t len);

/* The tensors lo..hi that share tensor id's record (a map parameter's
 * key, value and status; else id alone): 0, or -2 when more than
 * MAX_GROUP do. */
static int record_group(const ck_index *ix, size_t id, size_t *lo, size_t *hi)
{
    const ck_tensor *t = &ix->tensors[id];
    *lo = *hi = id;
    while (*lo > 0 && same_record(&ix->tensors[*lo - 1], t) && *hi - *lo < MAX_GROUP)
        (*lo)--;
    while (*hi + 1 < ix->count && same_record(&ix->tensors[*hi + 1], t) && *hi - *lo < MAX_GROUP)
        (*hi)++;
    return *hi - *lo + 1 > MAX_GROUP ? -2 : 0;
}

/* Call fn for each run of bytes of tensor id's record span that no
 * tensor of that record has as data: the record's header and framing.
 * -2: more than MAX_GROUP tensors share the span; -3: out of memory. */
static int header_spans(const ck_index *ix, size_t id, span_fn fn, void *ctx)
{
    const ck_tensor *t = &ix->tensors[id];
    size_t lo, hi;
    if (record_group(ix, id, &lo, &hi) < 0)
        return -2;
    size_t n = 0;
    for (size_t i = lo; i <= hi; i++)
        n += ix->tensors[i].n_ext;
    span one, *v = n <= 1 ? &one : malloc(n * sizeof *v);
    if (v == NULL)
        return -3;
    n = 0;
    for (size_t i = lo; i <= hi; i++)
        for (uint32_t k = 0; k < ix->tensors[i].n_ext; k++) {
            const ck_extent *e = ck_tensor_ext(&ix->tensors[i], k);
            v[n++] = (span){e->off, e->len};
        }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_span);
    uint64_t pos = t->rec_off;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        if (v[k].off > pos)
            rc = fn(ctx, pos, v[k].off - pos);
        if (v[k].off + v[k].len > pos)
            pos = v[k].off + v[k].len;
    }
    if (rc == 0 && pos < t->rec_end)
        rc = fn(ctx, pos, t->rec_end - pos);
    if (v != &one)
        free(v);
    return rc;
}

typedef struct crc_ctx {
    ck_source *src;
    uLong crc;
    ck_error *err;
} crc_ctx;

static int crc_span(void *ctx, uint64_t off, uint64_t len)
{
    crc_ctx *c = ctx;
    unsigned char buf[16384];
    while (len > 0) {
        size_t n = len < sizeof buf ? (size_t)len : sizeof buf;
        if (ck_source_read(c->src, buf, n, off, c->err) < 0)
            return -1;
        c->crc = crc32(c->crc, buf, (uInt)n);
        off += n;
        len -= n;
    }
    return 0;
}

/* The CRC-32 of tensor id's record header, read from src now. */
static int header_crc(ck_source *src, const ck_index *ix, size_t id, uint32_t *out,
                      ck_error *err)
{
    crc_ctx c = {.src = src, .crc = crc32(0L, Z_NULL, 0), .err = err};
    int rc = header_spans(ix, id, crc_span, &c);
    if (rc == -2)
        return ck_fail(err, EINVAL, "%s: more than %d tensors in one record", src->path,
                       MAX_GROUP);
    if (rc == -3)
        return ck_nomem(err, src->path);
    *out = (uint32_t)c.crc;
    return rc;
}

/* ---- writing the bytes ---- */

static void put_str(ck_wbuf *b, const char *s, size_t n)
{
    ck_wbuf_u32(b, (uint32_t)n);
    ck_wbuf_put(b, s, n);
}

static void sha256(const void *data, size_t n, unsigned char out[32])
{
    unsigned int len = 32;
    EVP_Digest(data, n, out, &len, EVP_sha256(), NULL);
}

static uint64_t ext_total(const ck_tensor *t)
{
    uint64_t sum = 0;
    for (uint32_t k = 0; k < t->n_ext; k++)
        sum += ck_tensor_ext(t, k)->len;
    return sum;
}

/* Whether t is what an index can hold and its load accepts again. */
static const char *tensor_refusal(const ck_tensor *t, uint64_t size)
{
    if (t->gather != NULL)
        return "a gathered tensor";
    if (t->rec_off > t->rec_end || t->rec_end > size)
        return "a record outside the file";
    for (uint32_t k = 0; k < t->n_ext; k++) {
        const ck_extent *e = ck_tensor_ext(t, k);
        if (e->src != 0)
            return "bytes outside the model file";
        /* off past rec_end first: rec_end - off would wrap and let through
         * an extent anywhere after its record, even past the file. */
        if (e->off < t->rec_off || e->off > t->rec_end || e->len > t->rec_end - e->off)
            return "data outside its record";
    }
    if (ext_total(t) != t->nbytes)
        return "bytes that are not its extents";
    uint64_t want;
    if (t->dtype->kind == CK_KIND_NUMERIC &&
        (ck_shape_product(&ck_shape_ckpt, t->dtype, t->dims, t->ndim, &want) >= 0 ||
         want != t->nbytes))
        return "a shape that is not its size";
    if (ck_dtype_by_name(t->dtype->ms_name, strlen(t->dtype->ms_name)) != t->dtype)
        return "a type of no known name";
    return NULL;
}

static const char *model_refusal(const ck_model *m)
{
    if (m->format->save_state == NULL || m->format->load_state == NULL)
        return "its format keeps no index";
    if (ck_envelope_is_wrapped(&m->env))
        return "it is encrypted or compressed";
    if (m->n_sources != 1)
        return "it has data files or decoded values";
    if (m->index.count == 0)
        return "it has no tensors";
    return NULL;
}

static void put_tensor(ck_wbuf *b, const ck_tensor *t, uint32_t crc)
{
    put_str(b, t->name, t->name_len);
    put_str(b, t->dtype->ms_name, strlen(t->dtype->ms_name));
    put_str(b, t->type_name, strlen(t->type_name));
    uint8_t flags = (uint8_t)(t->part & F_PART);
    flags |= t->superseded ? F_SUPERSEDED : 0;
    flags |= t->scalar_dims_zero ? F_SCALAR_DIMS_ZERO : 0;
    flags |= t->read_only ? F_READ_ONLY : 0;
    flags |= t->dir_src ? F_DIR_SRC : 0;
    flags |= t->dir_suffix ? F_DIR_SUFFIX : 0;
    ck_wbuf_u8(b, flags);
    if (t->dir_src)
        put_str(b, t->dir_src, t->dir_src_len);
    if (t->dir_suffix)
        put_str(b, t->dir_suffix, strlen(t->dir_suffix));
    ck_wbuf_u32(b, t->ndim);
    for (uint32_t d = 0; d < t->ndim; d++)
        ck_wbuf_u64(b, (uint64_t)t->dims[d]);
    ck_wbuf_u64(b, t->nbytes);
    ck_wbuf_u64(b, t->rec_off);
    ck_wbuf_u64(b, t->rec_end);
    ck_wbuf_u32(b, t->n_ext);
    for (uint32_t k = 0; k < t->n_ext; k++) {
        ck_wbuf_u64(b, ck_tensor_ext(t, k)->off);
        ck_wbuf_u64(b, ck_tensor_ext(t, k)->len);
    }
    ck_wbuf_u32(b, crc);
}

static void put_identity(ck_wbuf *b, const ck_model *m, const ck_saved_identity *id)
{
    put_str(b, CKPTFS_VERSION, strlen(CKPTFS_VERSION));
    put_str(b, m->format->name, strlen(m->format->name));
    put_str(b, id->real_path, strlen(id->real_path));
    ck_wbuf_u64(b, id->size);
    ck_wbuf_u64(b, (uint64_t)id->mtime_sec);
    ck_wbuf_u32(b, id->mtime_nsec);
    ck_wbuf_put(b, id->sample, sizeof id->sample);
}

/* The header, its length still 0: seal() fills it in. */
static void put_head(ck_wbuf *b)
{
    ck_wbuf_put(b, MAGIC, 8);
    ck_wbuf_u32(b, VERSION);
    ck_wbuf_u32(b, 0);
    ck_wbuf_u64(b, 0);
}

/* After the last byte of the body: the length of the whole file into the
 * header, and the SHA-256 of all of it appended. */
static void seal(ck_wbuf *b)
{
    if (b->failed)
        return;
    ck_put_le64(b->p + 16, b->len + SUM_LEN);
    unsigned char sum[SUM_LEN];
    sha256(b->p, b->len, sum);
    ck_wbuf_put(b, sum, SUM_LEN);
}

int ck_saved_index_frame(const unsigned char *body, size_t n, unsigned char **out, size_t *len)
{
    ck_wbuf b = {.max = CK_SAVED_INDEX_MAX + SUM_LEN};
    put_head(&b);
    ck_wbuf_put(&b, body, n);
    seal(&b);
    *out = b.failed ? NULL : b.p;
    *len = b.failed ? 0 : b.len;
    if (b.failed)
        free(b.p);
    return b.failed ? -1 : 0;
}

int ck_saved_index_encode(const ck_model *m, const ck_saved_identity *id, unsigned char **out,
                          size_t *len, ck_error *err)
{
    *out = NULL;
    const char *why = model_refusal(m);
    for (size_t i = 0; why == NULL && i < m->index.count; i++)
        why = tensor_refusal(&m->index.tensors[i], id->size);
    unsigned char *state = NULL;
    size_t state_len = 0;
    if (why == NULL && m->format->save_state(m, &state, &state_len) != 0)
        why = "its reader's state is not kept";
    if (why == NULL && state_len > CK_SAVED_INDEX_MAX)
        why = "its reader's state is too large";
    if (why != NULL) {
        free(state);
        ck_fail(err, 0, "%s: no saved index: %s", m->path, why);
        return 1;
    }
    ck_wbuf b = {.max = CK_SAVED_INDEX_MAX + SUM_LEN};
    put_head(&b);
    put_identity(&b, m, id);
    put_str(&b, (const char *)state, state_len);
    free(state);
    ck_wbuf_u64(&b, m->index.count);
    for (size_t i = 0; i < m->index.count && !b.failed; i++) {
        uint32_t crc;
        int rc = header_crc(m->sources[0], &m->index, i, &crc, err);
        if (rc != 0) {
            free(b.p);
            if (rc == -2) /* not an error: the model is read in full each time */
                return 1;
            return -1;
        }
        put_tensor(&b, &m->index.tensors[i], crc);
    }
    seal(&b);
    if (b.failed) {
        free(b.p);
        ck_fail(err, 0, "%s: no saved index: it would be over %u bytes", m->path,
                CK_SAVED_INDEX_MAX);
        return 1;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

/* ---- reading the bytes back ---- */

/* A str of at most max bytes; *n its length.  NULL: bad. */
static const char *get_str(ck_rbuf *r, size_t max, size_t *n)
{
    uint32_t len = ck_rbuf_u32(r);
    if (len > max)
        r->bad = true;
    const unsigned char *s = ck_rbuf_take(r, r->bad ? 0 : len);
    *n = len;
    return r->bad ? NULL : (const char *)s;
}

static bool str_is(ck_rbuf *r, const char *want)
{
    size_t n;
    const char *s = get_str(r, MAX_STR, &n);
    return s != NULL && n == strlen(want) && memcmp(s, want, n) == 0;
}

/* The header: magic, version, length, checksum. */
static const char *check_frame(const unsigned char *buf, size_t len)
{
    if (len < HEAD_LEN + SUM_LEN || memcmp(buf, MAGIC, 8) != 0)
        return "not a saved index";
    ck_rbuf r = {.p = buf, .len = len, .pos = 8};
    if (ck_rbuf_u32(&r) != VERSION || ck_rbuf_u32(&r) != 0)
        return "another version";
    if (ck_rbuf_u64(&r) != len)
        return "truncated or extended";
    unsigned char sum[SUM_LEN];
    sha256(buf, len - SUM_LEN, sum);
    if (memcmp(sum, buf + len - SUM_LEN, SUM_LEN) != 0)
        return "its checksum does not match";
    return NULL;
}

static const char *check_identity(ck_rbuf *r, const ck_model *m, const ck_saved_identity *id)
{
    if (!str_is(r, CKPTFS_VERSION))
        return "written by another ckptfs version";
    if (!str_is(r, m->format->name))
        return "of another format";
    if (!str_is(r, id->real_path))
        return "of another file";
    uint64_t size = ck_rbuf_u64(r), sec = ck_rbuf_u64(r);
    uint32_t nsec = ck_rbuf_u32(r);
    const unsigned char *sample = ck_rbuf_take(r, sizeof id->sample);
    if (r->bad)
        return "truncated";
    if (size != id->size || (int64_t)sec != id->mtime_sec || nsec != id->mtime_nsec)
        return "the file's size or mtime changed";
    if (memcmp(sample, id->sample, sizeof id->sample) != 0)
        return "the file's first bytes changed";
    return NULL;
}

int ck_saved_index_claimed(const unsigned char *buf, size_t len, ck_saved_identity *id,
                           char *path, size_t cap)
{
    ck_rbuf r = {.p = buf, .len = len, .pos = HEAD_LEN};
    size_t n;
    if (len < HEAD_LEN || get_str(&r, MAX_STR, &n) == NULL || get_str(&r, MAX_STR, &n) == NULL)
        return -1; /* the ckptfs version, the format: the decoder compares them itself */
    const char *real = get_str(&r, MAX_STR, &n);
    if (real == NULL || n >= cap)
        return -1;
    memcpy(path, real, n);
    path[n] = '\0';
    id->real_path = path;
    id->size = ck_rbuf_u64(&r);
    id->mtime_sec = (int64_t)ck_rbuf_u64(&r);
    id->mtime_nsec = ck_rbuf_u32(&r);
    const unsigned char *sample = ck_rbuf_take(&r, sizeof id->sample);
    if (r.bad)
        return -1;
    memcpy(id->sample, sample, sizeof id->sample);
    return 0;
}

/* The shown strings of one tensor, into the index's arena. */
static const char *get_names(ck_rbuf *r, ck_index *ix, ck_tensor *t)
{
    size_t n, tn;
    const char *s = get_str(r, MAX_STR, &n);
    if (s == NULL || memchr(s, '\0', n) != NULL)
        return "a bad name";
    if ((t->name = ck_arena_strndup(&ix->arena, s, n)) == NULL)
        return "out of memory";
    t->name_len = (uint32_t)n;
    s = get_str(r, 64, &n);
    if (s == NULL || (t->dtype = ck_dtype_by_name(s, n)) == NULL)
        return "an unknown type";
    s = get_str(r, 64, &tn);
    if (s == NULL || memchr(s, '\0', tn) != NULL)
        return "a bad type name";
    t->type_name = tn == strlen(t->dtype->ms_name) && memcmp(s, t->dtype->ms_name, tn) == 0
                       ? t->dtype->ms_name
                       : ck_arena_strndup(&ix->arena, s, tn);
    return t->type_name == NULL ? "out of memory" : NULL;
}

static const char *get_flags(ck_rbuf *r, ck_index *ix, ck_tensor *t)
{
    uint8_t f = ck_rbuf_u8(r);
    size_t n;
    if (f & 0x80 || (f & F_PART) > CK_PART_MAP_STATUS)
        return "bad flags";
    t->part = f & F_PART;
    t->superseded = f & F_SUPERSEDED;
    t->scalar_dims_zero = f & F_SCALAR_DIMS_ZERO;
    t->read_only = f & F_READ_ONLY;
    if (f & F_DIR_SRC) {
        const char *s = get_str(r, MAX_STR, &n);
        if (s == NULL || memchr(s, '\0', n) != NULL ||
            (t->dir_src = ck_arena_strndup(&ix->arena, s, n)) == NULL)
            return "a bad directory name";
        t->dir_src_len = (uint32_t)n;
    }
    if (f & F_DIR_SUFFIX) {
        const char *s = get_str(r, MAX_STR, &n);
        if (s == NULL || memchr(s, '\0', n) != NULL ||
            (t->dir_suffix = ck_arena_strndup(&ix->arena, s, n)) == NULL)
            return "a bad directory suffix";
    }
    return NULL;
}

static const char *get_layout(ck_rbuf *r, ck_index *ix, ck_tensor *t, uint64_t size)
{
    uint32_t ndim = ck_rbuf_u32(r);
    if (r->bad || ndim > CK_MAX_DIMS)
        return "too many dims";
    int64_t *dims = ck_arena_alloc(&ix->arena, (ndim ? ndim : 1) * sizeof *dims);
    if (dims == NULL)
        return "out of memory";
    for (uint32_t d = 0; d < ndim; d++)
        if ((dims[d] = (int64_t)ck_rbuf_u64(r)) < 0)
            return "a negative dim";
    t->dims = dims;
    t->ndim = ndim;
    t->nbytes = ck_rbuf_u64(r);
    t->rec_off = ck_rbuf_u64(r);
    t->rec_end = ck_rbuf_u64(r);
    uint32_t n_ext = ck_rbuf_u32(r);
    /* 16 bytes each: what is left of the file bounds the count. */
    if (r->bad || n_ext > (r->len - r->pos) / 16)
        return "truncated";
    for (uint32_t k = 0; k < n_ext; k++) {
        uint64_t off = ck_rbuf_u64(r), len = ck_rbuf_u64(r);
        if (ck_tensor_add_extent(t, 0, off, len) < 0)
            return "out of memory";
    }
    return r->bad ? "truncated" : tensor_refusal(t, size);
}

static const char *get_tensors(ck_rbuf *r, ck_model *m, uint64_t size, uint32_t *crc)
{
    ck_index *ix = &m->index;
    for (size_t i = 0; i < ix->count; i++) {
        ck_tensor *t = &ix->tensors[i];
        const char *why = get_names(r, ix, t);
        if (why == NULL)
            why = get_flags(r, ix, t);
        if (why == NULL)
            why = get_layout(r, ix, t, size);
        crc[i] = ck_rbuf_u32(r);
        if (why != NULL || r->bad)
            return why ? why : "truncated";
    }
    for (size_t i = 0; i < ix->count; i++) { /* as the encoder made them */
        size_t lo, hi;
        if (record_group(ix, i, &lo, &hi) < 0)
            return "too many tensors in one record";
    }
    return r->pos + SUM_LEN == r->len ? NULL : "bytes after the tensors";
}

/* Room for count tensors, each zeroed, added at once: the count is known
 * and bounded by the bytes left. */
static const char *add_tensors(ck_rbuf *r, ck_index *ix, uint64_t count)
{
    /* A tensor takes at least 49 bytes of the file. */
    if (r->bad || count == 0 || count > CK_MAX_TENSORS || count > (r->len - r->pos) / 49)
        return "a bad tensor count";
    for (uint64_t i = 0; i < count; i++)
        if (ck_index_add(ix) < 0)
            return "out of memory";
    return NULL;
}

static const char *decode(ck_model *m, const ck_open_opts *o, const ck_saved_identity *id,
                          ck_rbuf *r, struct ck_saved_index **out, ck_error *err)
{
    const char *why = check_frame(r->p, r->len);
    if (why != NULL)
        return why;
    r->pos = HEAD_LEN;
    if ((why = check_identity(r, m, id)) != NULL)
        return why;
    size_t state_len;
    const char *state = get_str(r, CK_SAVED_INDEX_MAX, &state_len);
    if (state == NULL)
        return "truncated";
    if ((why = add_tensors(r, &m->index, ck_rbuf_u64(r))) != NULL)
        return why;
    struct ck_saved_index *s = calloc(1, sizeof *s);
    if (s == NULL)
        return "out of memory";
    *out = s;
    s->count = m->index.count;
    s->crc = calloc(s->count, sizeof *s->crc);
    s->checked = calloc(s->count, 1);
    if (s->crc == NULL || s->checked == NULL)
        return "out of memory";
    if ((why = get_tensors(r, m, id->size, s->crc)) != NULL)
        return why;
    /* The state last: it may describe each of the tensors. */
    if (m->format->load_state(m, o, (const unsigned char *)state, state_len, err) < 0)
        return err->msg;
    return NULL;
}

/* m as before an index was loaded into it (s: that index, or NULL). */
static void forget(ck_model *m, struct ck_saved_index *s)
{
    ck_saved_index_free(s);
    m->saved = NULL;
    if (m->state != NULL)
        m->format->free_state(m->state);
    m->state = NULL;
    ck_index_free(&m->index);
    ck_index_init(&m->index);
}

int ck_saved_index_decode(ck_model *m, const ck_open_opts *o, const ck_saved_identity *id,
                          const unsigned char *buf, size_t len, ck_error *err)
{
    ck_rbuf r = {.p = buf, .len = len};
    struct ck_saved_index *s = NULL;
    ck_error state_err = {0};
    const char *why = m->format->load_state == NULL ? "its format keeps no index"
                                                    : decode(m, o, id, &r, &s, &state_err);
    if (why == NULL) {
        m->saved = s;
        m->ix = &ck_saved_index_hooks; /* the model checks and frees it through these */
        return 0;
    }
    ck_fail(err, EINVAL, "%s: saved index not used: %s", m->path, why);
    forget(m, s);
    return -1;
}

/* ---- the model file's identity ---- */

/* The model file's real path: its directory's, as the kernel has it (the
 * name it was mounted by may be a link, or relative), and its name. */
static int real_path(const ck_model *m, char *buf, size_t cap)
{
    char link[64], dir[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", m->dir->fd);
    ssize_t n = readlink(link, dir, sizeof dir - 1);
    if (n <= 0 || dir[0] != '/')
        return -1;
    dir[n] = '\0';
    int w = snprintf(buf, cap, "%s/%s", n == 1 ? "" : dir, m->dir->base);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

static int identify(const ck_model *m, ck_saved_identity *id, char *path, size_t cap)
{
    ck_source *src = m->sources[0];
    if (real_path(m, path, cap) < 0)
        return -1;
    id->real_path = path;
    id->size = (uint64_t)m->st.st_size;
    id->mtime_sec = m->st.st_mtim.tv_sec;
    id->mtime_nsec = (uint32_t)m->st.st_mtim.tv_nsec;
    unsigned char head[CK_SAVED_SAMPLE];
    size_t n = src->size < sizeof head ? (size_t)src->size : sizeof head;
    ck_error err;
    if (ck_source_read(src, head, n, 0, &err) < 0)
        return -1;
    sha256(head, n, id->sample);
    return 0;
}

/* The index file's name: the SHA-256 of the real path, in hex. */
static void file_name(const char *real, char out[65 + sizeof SUFFIX])
{
    unsigned char h[32];
    sha256(real, strlen(real), h);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", h[i]);
    strcpy(out + 64, SUFFIX);
}

/* ---- the store directory ---- */

static void warn_once(const ck_open_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void warn_once(const ck_open_opts *o, const char *fmt, ...)
{
    if (o->index->warn == NULL || __atomic_exchange_n(&o->index->warned, true, __ATOMIC_RELAXED))
        return;
    char msg[CK_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->index->warn(msg);
}

/* Nobody but the effective user may have written it. */
static bool own_only(const struct stat *st)
{
    return st->st_uid == geteuid() && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

static int mkdirs(const char *dir)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return mkdir(p, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* The directory, trusted: -1 with errno (EPERM: someone else's). */
static int open_dir(const char *dir, bool create)
{
    if (create && mkdirs(dir) < 0)
        return -1;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (dfd < 0)
        return -1;
    if (fstat(dfd, &st) < 0 || !own_only(&st)) {
        close(dfd);
        errno = EPERM;
        return -1;
    }
    return dfd;
}

static bool usable(const ck_model *m, const ck_open_opts *o)
{
    return o != NULL && o->index != NULL && o->index->dir != NULL && o->n_overrides == 0 &&
           m->format->load_state != NULL && !ck_envelope_is_wrapped(&m->env) &&
           m->n_sources == 1 && m->sources[0]->fd >= 0;
}

/* The index file, whole, when it may be read: a regular file of the user's
 * that nobody else may write, not a link, not over the bound. */
static unsigned char *read_file(int dfd, const char *name, size_t *len)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    unsigned char *buf = NULL;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && own_only(&st) &&
        st.st_size <= (off_t)(CK_SAVED_INDEX_MAX + SUM_LEN) && st.st_size > 0 &&
        (buf = malloc((size_t)st.st_size)) != NULL) {
        size_t at = 0;
        while (at < (size_t)st.st_size) {
            ssize_t n = pread(fd, buf + at, (size_t)st.st_size - at, (off_t)at);
            if (n <= 0 && !(n < 0 && errno == EINTR))
                break;
            at += n > 0 ? (size_t)n : 0;
        }
        *len = at;
        if (at == (size_t)st.st_size)
            futimens(fd, NULL); /* used now: the last to go when the directory is full */
        else {
            free(buf);
            buf = NULL;
        }
    }
    close(fd);
    return buf;
}

int ck_saved_index_load(ck_model *m, const ck_open_opts *o)
{
    if (!usable(m, o))
        return 0;
    char path[PATH_MAX], name[65 + sizeof SUFFIX];
    ck_saved_identity id;
    if (identify(m, &id, path, sizeof path) < 0)
        return 0;
    file_name(path, name);
    int dfd = open_dir(o->index->dir, false);
    size_t len = 0;
    unsigned char *buf = dfd < 0 ? NULL : read_file(dfd, name, &len);
    if (dfd >= 0)
        close(dfd);
    if (buf == NULL)
        return 0;
    ck_error err = {0};
    int rc = ck_saved_index_decode(m, o, &id, buf, len, &err);
    free(buf);
    if (rc < 0)
        return 0; /* rebuilt after the full read */
    /* What the reader's own index would pass (two names for one tensor
     * directory, say, refuse the model): an index that fails is not the
     * reader's, and the file is read instead. */
    if (ck_index_finalize(&m->index, m->path, &err) < 0) {
        forget(m, m->saved);
        return 0;
    }
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/%s", o->index->dir, name);
    m->saved->file = strdup(file); /* NULL: not removed when it proves wrong */
    return 1;
}

/* ---- writing the file ---- */

/* Our index files, the oldest used first, removed until the bounds hold. */
typedef struct aged {
    char name[65 + sizeof SUFFIX];
    struct timespec used;
    off_t size;
} aged;

static int cmp_aged(const void *a, const void *b)
{
    const aged *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    return x->used.tv_nsec < y->used.tv_nsec ? -1 : x->used.tv_nsec > y->used.tv_nsec;
}

static bool is_index_name(const char *n)
{
    size_t len = strlen(n);
    if (len != 64 + strlen(SUFFIX) || strcmp(n + 64, SUFFIX) != 0)
        return false;
    return strspn(n, "0123456789abcdef") == 64;
}

static void prune(int dfd)
{
    DIR *d = ck_list_dir(dfd);
    if (d == NULL)
        return;
    aged *v = NULL;
    size_t n = 0, cap = 0;
    unsigned long long total = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (!is_index_name(de->d_name) ||
            fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (n == cap) {
            aged *w = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
            if (w == NULL)
                break;
            v = w;
        }
        strcpy(v[n].name, de->d_name);
        v[n].used = st.st_mtim;
        v[n].size = st.st_size;
        total += (unsigned long long)st.st_size;
        n++;
    }
    closedir(d);
    qsort(v, n, sizeof *v, cmp_aged);
    for (size_t i = 0; i < n && (n - i > CK_SAVED_MAX_FILES || total > CK_SAVED_MAX_TOTAL);
         i++) {
        unlinkat(dfd, v[i].name, 0);
        total -= (unsigned long long)v[i].size;
    }
    free(v);
}

/* Write buf as name in dfd: a temporary file beside it, fsync, rename. */
static int put_file(int dfd, const char *name, const unsigned char *buf, size_t len)
{
    char tmp[128];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(tmp, sizeof tmp, ".tmp-%ld-%ld", (long)getpid(), (long)now.tv_nsec);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    int rc = ck_write_all(fd, buf, len) < 0 || fsync(fd) < 0 ? -1 : 0;
    int saved = errno;
    if (close(fd) < 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0) {
        rc = -1;
        saved = errno;
    }
    if (rc < 0)
        unlinkat(dfd, tmp, 0);
    errno = saved;
    return rc;
}

/* The model file is still what was opened and read: an index of a file
 * changed under the read would describe neither. */
static bool still_same(const ck_model *m)
{
    struct stat st;
    return fstat(m->sources[0]->fd, &st) == 0 && st.st_size == m->st.st_size &&
           st.st_mtim.tv_sec == m->st.st_mtim.tv_sec &&
           st.st_mtim.tv_nsec == m->st.st_mtim.tv_nsec;
}

void ck_saved_index_store(const ck_model *m, const ck_open_opts *o)
{
    if (!usable(m, o) || m->saved != NULL || model_refusal(m) != NULL)
        return;
    char path[PATH_MAX], name[65 + sizeof SUFFIX];
    ck_saved_identity id;
    unsigned char *buf = NULL;
    size_t len = 0;
    ck_error err = {0};
    if (identify(m, &id, path, sizeof path) < 0 ||
        ck_saved_index_encode(m, &id, &buf, &len, &err) != 0 || !still_same(m)) {
        free(buf);
        return; /* not saved: read in full next time, as without an index */
    }
    file_name(path, name);
    int dfd = open_dir(o->index->dir, true);
    if (dfd < 0 || put_file(dfd, name, buf, len) < 0) {
        int e = errno;
        warn_once(o, "%s: cannot save its index in %s (%s); it is read in full at each "
                  "open", m->path, o->index->dir,
                  e == EPERM ? "the directory is not the user's own, or others may write it"
                             : strerror(e));
    } else {
        prune(dfd);
    }
    if (dfd >= 0)
        close(dfd);
    free(buf);
}

/* ---- the checks on first read ---- */

static int mismatch(const ck_model *m, size_t id, ck_error *err)
{
    struct ck_saved_index *s = m->saved;
    const ck_tensor *t = &m->index.tensors[id];
    char q[CK_QUOTE_BUF];
    if (s->file != NULL && !__atomic_exchange_n(&s->removed, true, __ATOMIC_RELAXED))
        unlink(s->file);
    return ck_fail(err, EIO, "%s: tensor '%s': the file was replaced since its index %s was "
                   "written; remount", m->path, ck_quote(q, t->name, t->name_len),
                   s->file ? s->file : "(saved index)");
}

static int check_one(const ck_model *m, size_t id, ck_error *err)
{
    struct ck_saved_index *s = m->saved;
    if (__atomic_load_n(&s->checked[id], __ATOMIC_ACQUIRE))
        return 0;
    uint32_t crc;
    if (header_crc(m->sources[0], &m->index, id, &crc, err) < 0)
        return -1;
    if (crc != s->crc[id])
        return mismatch(m, id, err);
    __atomic_store_n(&s->checked[id], 1, __ATOMIC_RELEASE);
    return 0;
}

int ck_saved_index_check(const ck_model *m, const ck_tensor *t, ck_error *err)
{
    const struct ck_saved_index *s = m->saved;
    if (s == NULL || t < m->index.tensors || t >= m->index.tensors + s->count)
        return 0;
    return check_one(m, (size_t)(t - m->index.tensors), err);
}

int ck_saved_index_check_all(const ck_model *m, ck_error *err)
{
    if (m->saved == NULL)
        return 0;
    for (size_t i = 0; i < m->saved->count; i++)
        if (check_one(m, i, err) < 0)
            return -1;
    if (m->format->check_state == NULL || m->format->check_state(m, err) == 0)
        return 0;
    struct ck_saved_index *s = m->saved;
    if (s->file != NULL && !__atomic_exchange_n(&s->removed, true, __ATOMIC_RELAXED))
        unlink(s->file);
    return -1;
}

int ck_saved_index_default_dir(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(buf, cap, "%s/ckptfs", xdg);
    else if (home != NULL && home[0] == '/')
        n = snprintf(buf, cap, "%s/.cache/ckptfs", home);
    else
        return -1;
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

const ck_index_hooks ck_saved_index_hooks = {
    .load = ck_saved_index_load,
    .store = ck_saved_index_store,
    .check = ck_saved_index_check,
    .check_all = ck_saved_index_check_all,
    .free = ck_saved_index_free,
};
