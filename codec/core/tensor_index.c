/* SPDX-License-Identifier: Apache-2.0 */
#include "tensor_index.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dir_name.h"

void ck_index_init(ck_index *ix)
{
    memset(ix, 0, sizeof *ix);
    ck_arena_init(&ix->arena);
}

void ck_index_free(ck_index *ix)
{
    for (size_t i = 0; i < ix->count; i++)
        free(ix->tensors[i].ext_more);
    free(ix->tensors);
    free(ix->live);
    ck_arena_free(&ix->arena);
    memset(ix, 0, sizeof *ix);
}

long ck_index_add(ck_index *ix)
{
    if (ix->count == ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : 64;
        ck_tensor *t = realloc(ix->tensors, cap * sizeof *t);
        if (t == NULL)
            return -1;
        ix->tensors = t;
        ix->cap = cap;
    }
    memset(&ix->tensors[ix->count], 0, sizeof ix->tensors[0]);
    return (long)ix->count++;
}

/* size[], stride[] with the dimensions of size 1 dropped and the ones
 * contiguous with the next merged, in place: a row-major order becomes
 * one dimension of stride 1.  Their count. */
static uint32_t coalesce(uint64_t *size, uint64_t *stride, uint32_t ndim)
{
    uint32_t n = 0;
    for (uint32_t d = 0; d < ndim; d++) {
        uint64_t s = size[d], st = stride[d];
        if (s == 1)
            continue;
        if (n > 0 && stride[n - 1] == s * st) { /* no overflow: s * st <= the reach */
            size[n - 1] *= s;
            stride[n - 1] = st;
            continue;
        }
        size[n] = s;
        stride[n++] = st;
    }
    return n;
}

int ck_tensor_set_strided(ck_arena *a, ck_tensor *t, uint64_t *size, uint64_t *stride,
                          uint32_t ndim, unsigned es)
{
    uint32_t n = coalesce(size, stride, ndim);
    if (n == 0 || (n == 1 && stride[0] == 1))
        return 0; /* in order: the extent is the tensor */
    /* runs of the innermost contiguous dimension (or of one element),
     * placed by the others */
    bool inner = stride[n - 1] == 1;
    uint32_t outer = inner ? n - 1 : n;
    ck_gather *g = ck_arena_alloc(a, sizeof *g);
    uint64_t *full = ck_arena_alloc(a, outer * sizeof *full);
    uint64_t *step = ck_arena_alloc(a, outer * sizeof *step);
    if (g == NULL || full == NULL || step == NULL)
        return -1;
    for (uint32_t d = 0; d < outer; d++) {
        full[d] = size[d];
        step[d] = stride[d] * es; /* within the tensor's extent: no overflow */
    }
    *g = (ck_gather){.ndim = outer, .run = (inner ? size[n - 1] : 1) * es, .full = full,
                     .step = step};
    t->gather = g;
    return 0;
}

int ck_tensor_add_extent(ck_tensor *t, uint32_t src, uint64_t off, uint64_t len)
{
    ck_extent e = {.off = off, .len = len, .src = src};
    if (t->n_ext == 0) {
        t->ext0 = e;
        t->n_ext = 1;
        return 0;
    }
    if (t->n_ext - 1 == t->cap_more) {
        uint32_t cap = t->cap_more ? t->cap_more * 2 : 4;
        ck_extent *more = realloc(t->ext_more, cap * sizeof *more);
        if (more == NULL)
            return -1;
        t->ext_more = more;
        t->cap_more = cap;
    }
    t->ext_more[t->n_ext++ - 1] = e;
    return 0;
}

static const char *part_suffix(uint8_t part)
{
    switch (part) {
    case CK_PART_MAP_KEY: return "%map.key";
    case CK_PART_MAP_VALUE: return "%map.value";
    case CK_PART_MAP_STATUS: return "%map.status";
    default: return NULL;
    }
}

/* The directory name of t; the k-th of several equal generated names gets
 * "%dupK". */
static size_t tensor_dir_name(const ck_tensor *t, unsigned k, char buf[CK_DIR_NAME_MAX + 1])
{
    const char *suffix = t->dir_suffix ? t->dir_suffix : part_suffix(t->part);
    char with_dup[CK_DIR_NAME_MAX + 1];
    if (k > 1) {
        snprintf(with_dup, sizeof with_dup, "%s%%dup%u", suffix ? suffix : "", k);
        suffix = with_dup;
    }
    if (t->dir_src != NULL)
        return ck_dir_name(t->dir_src, t->dir_src_len, suffix, buf);
    return ck_dir_name(t->name, t->name_len, suffix, buf);
}

/* The visible list made of ids[0..n) (NULL: every tensor not superseded,
 * in file order), each given its directory name. */
static int make_live(ck_index *ix, const uint32_t *ids, size_t n, const char *path,
                     ck_error *err)
{
    uint32_t *live = malloc((n ? n : 1) * sizeof *live);
    if (live == NULL)
        return ck_nomem(err, path);
    free(ix->live);
    ix->live = live;
    ix->n_live = 0;
    ck_name_map seen; /* only to find two tensors with one directory name */
    ck_name_map_init(&seen);
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        size_t i = ids != NULL ? ids[k] : k;
        ck_tensor *t = &ix->tensors[i];
        if (ids == NULL && t->superseded)
            continue;
        char buf[CK_DIR_NAME_MAX + 1];
        size_t n = tensor_dir_name(t, 1, buf);
        /* Generated names that meet again are told apart by file order. */
        for (unsigned k = 2; t->dir_suffix != NULL && ck_name_map_get(&seen, buf, n) !=
                             CK_NAME_MAP_NONE && k < 1000000; k++)
            n = tensor_dir_name(t, k, buf);
        /* Names are stored NUL-terminated: most need no copy of their own. */
        if (n == t->name_len && memcmp(buf, t->name, n) == 0)
            t->dir_name = t->name;
        else
            t->dir_name = ck_arena_strndup(&ix->arena, buf, n);
        int64_t prev = t->dir_name ? ck_name_map_put(&seen, t->dir_name, n, (uint32_t)i) : -1;
        if (prev < 0) {
            rc = ck_nomem(err, path);
        } else if (prev != CK_NAME_MAP_NONE) {
            char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF];
            rc = ck_fail(err, EINVAL, "%s: offset %llu: tensors '%s' and '%s' map to the "
                         "same directory name", path, (unsigned long long)t->rec_off,
                         ck_quote(q1, ix->tensors[prev].name, ix->tensors[prev].name_len),
                         ck_quote(q2, t->name, t->name_len));
        } else {
            ix->live[ix->n_live++] = (uint32_t)i;
        }
    }
    ck_name_map_free(&seen);
    return rc;
}

int ck_index_finalize(ck_index *ix, const char *path, ck_error *err)
{
    /* The array only grows while reading; give back the slack. */
    if (ix->count > 0 && ix->count < ix->cap) {
        ck_tensor *t = realloc(ix->tensors, ix->count * sizeof *t);
        if (t != NULL) {
            ix->tensors = t;
            ix->cap = ix->count;
        }
    }
    return make_live(ix, NULL, ix->count, path, err);
}

int ck_index_rename(ck_index *ix, const uint32_t *ids, const char *const *names, size_t n,
                    const char *path, ck_error *err)
{
    for (size_t k = 0; k < n; k++) {
        ck_tensor *t = &ix->tensors[ids[k]];
        size_t len = strlen(names[k]);
        const char *name = len <= UINT32_MAX ? ck_arena_strndup(&ix->arena, names[k], len)
                                             : NULL;
        if (name == NULL)
            return ck_nomem(err, path);
        t->name = name;
        t->name_len = (uint32_t)len;
        t->dir_src = t->dir_suffix = NULL; /* the name is the map's, whole */
        t->dir_src_len = 0;
    }
    return make_live(ix, ids, n, path, err);
}

/* The slice of dimension d that coordinate x falls in, of g's uneven cuts:
 * the last boundary at or below x. */
static uint64_t cut_of(const ck_gather *g, uint32_t d, uint64_t x)
{
    const uint64_t *c = g->cuts[d];
    uint64_t lo = 0, hi = g->split[d]; /* c[lo] <= x < c[hi] */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (c[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Run q of a gathered tensor: which slice holds it, and where in the slice.
 * Run q is element (x_0 .. x_{L-1}, c_L) of the merged dimensions before
 * the last split one L, then L's slice: row-major, L's slice fastest.  The
 * row within the slice counts in the slice's own sizes, which uneven cuts
 * make differ from slice to slice. */
uint32_t ck_tensor_gather_run(const ck_tensor *t, uint64_t q, uint64_t *at)
{
    const ck_gather *g = t->gather;
    if (g->step != NULL) { /* a strided view of one extent */
        uint64_t pos = 0;
        for (uint32_t d = g->ndim; d-- > 0;) {
            pos += q % g->full[d] * g->step[d];
            q /= g->full[d];
        }
        *at = pos;
        return 0;
    }
    uint32_t last = g->ndim - 1;
    uint64_t slice = q % g->split[last], row = 0;
    uint64_t slice_mul = g->split[last], row_mul = 1;
    q /= g->split[last];
    for (uint32_t d = last; d-- > 0;) {
        uint64_t x = q % g->full[d], part = g->full[d] / g->split[d], j = x / part;
        uint64_t start = j * part;
        q /= g->full[d];
        if (g->cuts != NULL) {
            j = cut_of(g, d, x);
            start = g->cuts[d][j];
            part = g->cuts[d][j + 1] - start;
        }
        slice += j * slice_mul;
        row += (x - start) * row_mul;
        slice_mul *= g->split[d];
        row_mul *= part;
    }
    *at = row * g->run;
    return (uint32_t)slice;
}

static int gather_range(const ck_tensor *t, uint64_t off, size_t size, ck_piece_fn fn,
                        void *ctx)
{
    uint64_t run = t->gather->run, q = off / run, within = off % run;
    while (size > 0) {
        uint64_t at;
        const ck_extent *e = ck_tensor_ext(t, ck_tensor_gather_run(t, q++, &at));
        size_t n = run - within < size ? (size_t)(run - within) : size;
        int rc = fn(ctx, e->src, e->off + at + within, n);
        if (rc != 0)
            return rc;
        size -= n;
        within = 0;
    }
    return 0;
}

static int count_piece(void *ctx, uint32_t src, uint64_t src_off, size_t len)
{
    (void)src;
    (void)src_off;
    (void)len;
    (*(size_t *)ctx)++;
    return 0;
}

size_t ck_tensor_max_pieces(const ck_tensor *t, uint64_t off, size_t size)
{
    if (t->gather != NULL)
        return size / t->gather->run + 2;
    size_t n = 0; /* the extents the range overlaps: one walk, as the read's */
    ck_tensor_for_range(t, off, size, count_piece, &n);
    return n;
}

int ck_tensor_for_range(const ck_tensor *t, uint64_t off, size_t size, ck_piece_fn fn,
                        void *ctx)
{
    if (off >= t->nbytes)
        return 0;
    if (size > t->nbytes - off)
        size = (size_t)(t->nbytes - off);
    if (t->gather != NULL)
        return gather_range(t, off, size, fn, ctx);
    uint64_t base = 0; /* tensor offset of the current extent */
    for (uint32_t i = 0; i < t->n_ext && size > 0; i++) {
        const ck_extent *e = ck_tensor_ext(t, i);
        if (off < base + e->len) {
            uint64_t within = off - base;
            uint64_t avail = e->len - within;
            size_t n = size < avail ? size : (size_t)avail;
            int rc = fn(ctx, e->src, e->off + within, n);
            if (rc != 0)
                return rc;
            off += n;
            size -= n;
        }
        base += e->len;
    }
    return 0;
}

size_t ck_index_memory(const ck_index *ix)
{
    size_t n = ix->cap * sizeof(ck_tensor) + ix->count * sizeof(uint32_t) +
               ix->arena.used_bytes;
    for (size_t i = 0; i < ix->count; i++)
        n += ix->tensors[i].cap_more * sizeof(ck_extent);
    return n;
}

bool ck_tensor_has_own_name(const ck_tensor *t)
{
    return t->dir_suffix == NULL && t->dir_src == NULL;
}

char *ck_tensor_shown_name(const ck_tensor *t)
{
    const char *src = t->dir_src ? t->dir_src : t->name;
    size_t src_len = t->dir_src ? t->dir_src_len : t->name_len;
    char esc[CK_DIR_NAME_MAX + 1];
    size_t n = ck_dir_name(src, src_len, NULL, esc), dl = strlen(t->dir_name);
    bool prefixed = strncmp(t->dir_name, esc, n) == 0 && strstr(esc, "%~") == NULL;
    size_t len = prefixed ? src_len + dl - n : dl;
    char *name = malloc(len + 1);
    if (name == NULL)
        return NULL;
    if (prefixed) {
        memcpy(name, src, src_len);
        memcpy(name + src_len, t->dir_name + n, dl - n);
    } else {
        memcpy(name, t->dir_name, dl);
    }
    name[len] = '\0';
    return name;
}

size_t ck_dims_text(const int64_t *dims, uint32_t ndim, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (uint32_t i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64, i ? "," : "", dims[i]);
    if (n < cap)
        n += (size_t)snprintf(out + n, cap - n, "]");
    return n < cap ? n : cap - 1;
}

const char *ck_tensor_part_name(const ck_tensor *t)
{
    switch (t->part) {
    case CK_PART_WHOLE: return NULL;
    case CK_PART_MAP_KEY: return "key";
    case CK_PART_MAP_VALUE: return "value";
    case CK_PART_MAP_STATUS: return "status";
    }
    return NULL;
}
