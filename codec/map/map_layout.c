/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_layout: the shapes of a map's layout rules, read from their words
 * and applied to a tensor's shape (map_rules.h).  A shape change that
 * keeps the element count keeps the bytes, so these rules cost nothing
 * when applied: the tensor keeps its extents under its new shape.  Sizes
 * are bounded so that products cannot overflow (MAP_VALUE_MAX per dim,
 * and a product checked at every step).
 */
#include "map_rules.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A dim a map writes: at most 2^40 (a tensor's dims beyond that are
 * refused by every format anyway), so that no product of two overflows. */
#define MAP_VALUE_MAX (1ull << 40)

const char *map_parse_shape(const char *word, bool infer, bool sibling, int64_t **dims,
                            uint32_t *n)
{
    *dims = NULL;
    *n = 0;
    size_t len = strlen(word);
    if (len < 2 || word[0] != '[' || word[len - 1] != ']')
        return "a shape is written [D,D,...] ([] for a 0-d tensor)";
    int64_t *d = malloc(MAP_DIMS_MAX * sizeof *d);
    if (d == NULL)
        return "out of memory";
    uint32_t k = 0;
    bool inferred = false;
    const char *p = word + 1, *end = word + len - 1;
    while (p < end) {
        if (k == MAP_DIMS_MAX) {
            free(d);
            return "more than 64 dims";
        }
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        bool ref = sibling && *p == '=';
        const char *q = ref ? p + 1 : p;
        uint64_t v = 0;
        if (infer && e - q == 2 && q[0] == '-' && q[1] == '1' && !inferred) {
            inferred = true;
            d[k++] = -1;
        } else {
            if (q == e) {
                free(d);
                return "an empty dim";
            }
            for (; q < e; q++) {
                if (*q < '0' || *q > '9' || (v = v * 10 + (uint64_t)(*q - '0')) > MAP_VALUE_MAX) {
                    free(d);
                    return infer ? "a dim is a number up to 2^40, or -1 once"
                           : sibling ? "a dim is a number up to 2^40, or =K: the sibling's dim K"
                                     : "a dim is a number up to 2^40";
                }
            }
            if (ref && v >= MAP_DIMS_MAX) {
                free(d);
                return "=K names a dim below 64";
            }
            d[k++] = ref ? -(int64_t)v - 1 : (int64_t)v;
        }
        p = comma ? comma + 1 : end;
        if (comma != NULL && p == end) {
            free(d);
            return "a shape ends in a dim, not ','";
        }
    }
    *dims = d;
    *n = k;
    return NULL;
}

/* Elements of dims, or UINT64_MAX past 2^63 (never a real tensor). */
static uint64_t elements(const int64_t *dims, uint32_t n)
{
    uint64_t e = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t d = (uint64_t)dims[i];
        if (d != 0 && e > (UINT64_C(1) << 63) / d)
            return UINT64_MAX;
        e *= d;
    }
    return e;
}

static int reshape(const map_rule *r, const int64_t *dims, uint32_t ndim, int64_t *out,
                   uint32_t *out_n, const char **why)
{
    if (r->from != NULL) {
        if (r->n_from != ndim)
            return 0;
        for (uint32_t i = 0; i < ndim; i++)
            if (r->from[i] >= 0 && r->from[i] != dims[i])
                return 0;
    }
    uint64_t have = elements(dims, ndim), known = 1;
    long hole = -1;
    for (uint32_t i = 0; i < r->n_to; i++) {
        out[i] = r->to[i];
        uint64_t d = (uint64_t)r->to[i];
        if (r->to[i] < 0) {
            hole = (long)i;
        } else if (d != 0 && known > (UINT64_C(1) << 63) / d) {
            *why = "the new shape holds more elements than the tensor";
            return -1;
        } else {
            known *= d;
        }
    }
    if (hole >= 0) {
        if (known == 0 || have % known != 0) {
            *why = "no -1 makes the element count the tensor's";
            return -1;
        }
        out[hole] = (int64_t)(have / known);
        known = have;
    }
    if (known != have) {
        *why = "the new shape holds another number of elements";
        return -1;
    }
    *out_n = r->n_to;
    return 1;
}

int map_layout_shape(const map_rule *r, const int64_t *dims, uint32_t ndim, int64_t *out,
                     uint32_t *out_n, const char **why)
{
    switch (r->kind) {
    case MAP_RESHAPE:
        return reshape(r, dims, ndim, out, out_n, why);
    case MAP_UNSQUEEZE:
        if (r->axis > ndim || ndim == MAP_DIMS_MAX) {
            *why = "the axis is past the tensor's last";
            return -1;
        }
        memcpy(out, dims, r->axis * sizeof *dims);
        out[r->axis] = 1;
        memcpy(out + r->axis + 1, dims + r->axis, (ndim - r->axis) * sizeof *dims);
        *out_n = ndim + 1;
        return 1;
    case MAP_SQUEEZE:
        if (r->axis >= ndim || dims[r->axis] != 1) {
            *why = "the tensor has no unit axis there";
            return -1;
        }
        memcpy(out, dims, r->axis * sizeof *dims);
        memcpy(out + r->axis, dims + r->axis + 1, (ndim - r->axis - 1) * sizeof *dims);
        *out_n = ndim - 1;
        return 1;
    default:
        return 0;
    }
}

/* ---- order rules --------------------------------------------------------- */

void map_view_free(map_view *v)
{
    free(v->dims);
    free(v->step);
    *v = (map_view){0};
}

static void row_major(const int64_t *dims, uint32_t n, int64_t *step)
{
    int64_t s = 1;
    for (uint32_t d = n; d-- > 0;) {
        step[d] = s;
        s *= dims[d] > 0 ? dims[d] : 1; /* <= the element count: no overflow */
    }
}

/* The steps of shape to[0..nt) read through view v, into step[]: what
 * torch's view() of a strided tensor computes (a dimension of v splits
 * or merges only where its elements are evenly spaced).  -1: v cannot be
 * seen in that shape without a copy. */
static int restride(const map_view *v, const int64_t *to, uint32_t nt, int64_t *step)
{
    if (elements(to, nt) == 0) {
        row_major(to, nt, step);
        return 0;
    }
    long vd = (long)nt - 1;
    int64_t base = v->step[v->n - 1], have = 1, got = 1;
    for (uint32_t d = v->n; d-- > 0;) {
        have *= v->dims[d];
        if (d == 0 || (v->dims[d - 1] != 1 && v->step[d - 1] != have * base)) {
            while (vd >= 0 && (got < have || to[vd] == 1)) {
                step[vd] = got * base;
                got *= to[vd];
                vd--;
            }
            if (got != have)
                return -1;
            if (d > 0) {
                base = v->step[d - 1];
                have = got = 1;
            }
        }
    }
    return vd == -1 ? 0 : -1;
}

/* Whether view dims/step is the row-major order of its dims. */
static bool in_order(const int64_t *dims, const int64_t *step, uint32_t n)
{
    int64_t want = 1;
    for (uint32_t d = n; d-- > 0;) {
        if (dims[d] == 1)
            continue;
        if (step[d] != want)
            return false;
        want *= dims[d];
    }
    return true;
}

/* The shape r reads the tensor in (before its axes move) into pre[], and
 * the permutation of its axes into perm[]. */
static int order_of(const map_rule *r, const int64_t *dims, uint32_t ndim, int64_t *pre,
                    uint32_t *n_pre, uint32_t *perm, const char **why)
{
    switch (r->kind) {
    case MAP_PERMUTE:
        if (r->n_to != ndim) {
            *why = "the permutation names another number of axes than the tensor has";
            return -1;
        }
        memcpy(pre, dims, ndim * sizeof *dims);
        for (uint32_t i = 0; i < ndim; i++)
            perm[i] = (uint32_t)r->to[i];
        *n_pre = ndim;
        return 0;
    case MAP_TRANSPOSE:
        if (r->axis >= ndim || r->axis2 >= ndim) {
            *why = "the axis is past the tensor's last";
            return -1;
        }
        memcpy(pre, dims, ndim * sizeof *dims);
        for (uint32_t i = 0; i < ndim; i++)
            perm[i] = i == r->axis ? r->axis2 : i == r->axis2 ? r->axis : i;
        *n_pre = ndim;
        return 0;
    default: /* MAP_QK_PERMUTE, MAP_QK_UNPERMUTE */
        if (ndim == 0 || ndim > MAP_DIMS_MAX - 2 || dims[0] % (int64_t)(2 * r->heads) != 0) {
            *why = "its first dim is not a whole number of heads of two halves";
            return -1;
        }
        int64_t half = dims[0] / (int64_t)(2 * r->heads);
        pre[0] = (int64_t)r->heads;
        pre[1] = r->kind == MAP_QK_PERMUTE ? half : 2;
        pre[2] = r->kind == MAP_QK_PERMUTE ? 2 : half;
        memcpy(pre + 3, dims + 1, (ndim - 1) * sizeof *dims);
        *n_pre = ndim + 2;
        for (uint32_t i = 0; i < *n_pre; i++)
            perm[i] = i == 1 ? 2 : i == 2 ? 1 : i;
        return 0;
    }
}

int map_order_shape(const map_rule *r, const int64_t *dims, uint32_t ndim, map_view *v,
                    int64_t *out, uint32_t *out_n, const char **why)
{
    int64_t pre[MAP_DIMS_MAX + 2], step[MAP_DIMS_MAX + 2];
    uint32_t perm[MAP_DIMS_MAX + 2], n = 0;
    *why = NULL;
    if (order_of(r, dims, ndim, pre, &n, perm, why) < 0)
        return -1;
    if (v->n == 0) {
        row_major(pre, n, step);
    } else if (restride(v, pre, n, step) < 0) {
        *why = "the elements, in the order an earlier rule gave them, cannot be seen in "
               "that shape";
        return -1;
    }
    int64_t *vd = malloc((n + 1) * sizeof *vd), *vs = malloc((n + 1) * sizeof *vs);
    if (vd == NULL || vs == NULL) {
        free(vd);
        free(vs);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        vd[i] = pre[perm[i]];
        vs[i] = step[perm[i]];
    }
    map_view_free(v);
    if (in_order(vd, vs, n)) {
        free(vd);
        free(vs);
    } else {
        *v = (map_view){.dims = vd, .step = vs, .n = n};
    }
    if (r->kind == MAP_PERMUTE || r->kind == MAP_TRANSPOSE) {
        for (uint32_t i = 0; i < ndim; i++)
            out[i] = pre[perm[i]];
    } else {
        memcpy(out, dims, ndim * sizeof *dims); /* the rows move, the shape stays */
    }
    *out_n = ndim;
    return 0;
}
