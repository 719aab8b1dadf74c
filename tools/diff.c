/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs-diff: what differs between two models, without mounting either,
 * the comparison one would otherwise load both into numpy for.
 *
 *   ckptfs-diff [OPTIONS] A B [TENSOR...]
 *   (TENSOR: only the tensors those names or shell globs select, in their
 *   order, ck_cli_select) tensors are matched by name (ck_tensor_shown_name: the mount's and
 *   ckptfs-convert's, so a model and its conversion match) and map-tensor
 *   part; reported are the
 *   tensors only in A, only in B, those whose type or shape changed, and of
 *   the others those whose bytes differ, with the largest absolute and
 *   relative difference of their elements, their mean absolute and RMS
 *   difference and ||a-b|| / ||b||.  With --atol/--rtol the tensors whose
 *   bytes differ are the same when every element is within numpy.allclose's
 *   tolerance.  Exit status as diff(1)'s: 0 equal (or within tolerance),
 *   1 different, 2 trouble.
 *
 * A and B are opened as ckptfs-stat opens MODEL, with the same options
 * (cli_open.h) for both: one key (-o key_file or CKPTFS_KEY_HEX) serves an
 * encrypted A, an encrypted B or both.  Types compare by what the codec
 * makes of them (dtype.h), not by the format's spelling: a .ckpt Float32
 * equals a safetensors F32, and both are printed float32, their canonical
 * name (ck_dtype_canonical_name).  Each pair of tensors is read in chunks of the
 * same size over -j threads (chunk_pass.h), so memory stays at two chunks
 * per thread whatever the models' size; the maxima are merged so that NaN
 * wins, which makes them independent of the order of the chunks.  On a
 * terminal (stderr, without -q) a progress bar counts the bytes of both
 * models' tensors as their chunks are compared, cleared before the report
 * (progress.h); the second pass over B of a pair that differs (for
 * ||a-b|| / ||b||) is not in its total, which cannot know it beforehand.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_pass.h"
#include "cli_open.h"
#include "../codec/core/le_bytes.h"
#include "../codec/core/model.h"
#include "../codec/core/progress.h"
#include "tensor_stats.h"

#define PROG "ckptfs-diff"

typedef struct diff_opts {
    ck_cli_open open;
    bool json;              /* -q is open.quiet: nothing printed, no warning */
    bool strict;            /* --strict: names and shapes only, as load_state_dict */
    ck_chunk_opts read;     /* -j, --chunk */
    bool tol;               /* --atol or --rtol given: compare values, not bytes */
    double atol, rtol;
    ck_progress *progress;  /* the bar over the bytes compared (NULL: none) */
} diff_opts;

/* A sum in double with Neumaier's compensation: the rounding error of each
 * addition is kept apart, so that millions of small terms beside a large
 * running sum are not lost (numpy sums pairwise to the same end). */
typedef struct ksum {
    double s, c;
} ksum;

static void ksum_add(ksum *k, double x)
{
    double t = k->s + x;
    if (fabs(k->s) >= fabs(x))
        k->c += (k->s - t) + x;
    else
        k->c += (x - t) + k->s;
    k->s = t;
}

static double ksum_value(const ksum *k)
{
    return k->s + k->c;
}

static void ksum_merge(ksum *into, const ksum *k)
{
    ksum_add(into, k->s);
    ksum_add(into, k->c);
}

/* What a pass over a pair of tensors sums up, per thread then merged. */
typedef struct acc {
    bool differ;
    bool far;               /* an element outside atol + rtol * |b| */
    double max_abs, max_rel;
    ksum abs, sq, sq_b;     /* sum |a-b|, sum (a-b)^2, sum b^2 */
} acc;

typedef enum verdict {
    ONLY_A, ONLY_B, TYPE_DIFFERS, SHAPE_DIFFERS, BYTES_DIFFER, SAME,
} verdict;

/* One line of the report: a tensor of A, of B, or of both. */
typedef struct entry {
    const ck_tensor *a, *b;
    const char *name;       /* the pair's one name (ck_tensor_shown_name) */
    size_t name_len;
    verdict v;
    ck_elem elem;           /* the pair's element type (SAME, BYTES_DIFFER) */
    double max_abs, max_rel;
    double mean_abs, rms, rel_norm;     /* BYTES_DIFFER of a numeric type */
    bool close;             /* BYTES_DIFFER within --atol/--rtol */
} entry;

/* The largest of m and x, NaN once either is: a NaN difference is the
 * largest there is, whatever chunk it came from. */
static double max_nan(double m, double x)
{
    return isnan(m) || isnan(x) ? NAN : x > m ? x : m;
}

/* ---- comparing a pair of tensors ---- */

typedef struct pair {
    const ck_model *ma, *mb;
    entry *e;
    size_t chunk;
    const diff_opts *o;
    acc sum;                /* folded in as each thread ends (under the pass's lock) */
} pair;

typedef struct scratch {
    unsigned char *a, *b;
    acc sum;
} scratch;

static void *scratch_new(void *ctx)
{
    pair *p = ctx;
    scratch *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->a = malloc(p->chunk);
    s->b = malloc(p->chunk);
    if (s->a == NULL || s->b == NULL) {
        free(s->a);
        free(s->b);
        free(s);
        return NULL;
    }
    return s;
}

static void scratch_done(void *ctx, void *arg)
{
    pair *p = ctx;
    scratch *s = arg;
    p->sum.differ |= s->sum.differ;
    p->sum.far |= s->sum.far;
    p->sum.max_abs = max_nan(p->sum.max_abs, s->sum.max_abs);
    p->sum.max_rel = max_nan(p->sum.max_rel, s->sum.max_rel);
    ksum_merge(&p->sum.abs, &s->sum.abs);
    ksum_merge(&p->sum.sq, &s->sum.sq);
    ksum_merge(&p->sum.sq_b, &s->sum.sq_b);
    free(s->a);
    free(s->b);
    free(s);
}

/* The differences of two integers, exactly until the last rounding to a
 * double: an int64 difference can overflow, its magnitude never. */
static void int_diff(ck_elem e, const unsigned char *a, const unsigned char *b, size_t i,
                     double *abs_d, double *rel_d)
{
    uint64_t d, mag;
    if (ck_elem_is_signed(e)) {
        bool wide = e == CK_ELEM_I64; /* a double holds every narrower integer */
        int64_t x = wide ? (int64_t)ck_le64(a + 8 * i) : (int64_t)ck_elem_value(e, a, i);
        int64_t y = wide ? (int64_t)ck_le64(b + 8 * i) : (int64_t)ck_elem_value(e, b, i);
        d = x > y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
        uint64_t ax = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
        uint64_t ay = y < 0 ? 0 - (uint64_t)y : (uint64_t)y;
        mag = ax > ay ? ax : ay;
    } else {
        uint64_t x = e == CK_ELEM_U64 ? ck_le64(a + 8 * i) : (uint64_t)ck_elem_value(e, a, i);
        uint64_t y = e == CK_ELEM_U64 ? ck_le64(b + 8 * i) : (uint64_t)ck_elem_value(e, b, i);
        d = x > y ? x - y : y - x;
        mag = x > y ? x : y;
    }
    *abs_d = (double)d;
    *rel_d = mag == 0 ? 0.0 : (double)d / (double)mag;
}

/* The differences of two floats (widened to double exactly): none for the
 * same value, both infinities of a sign, or NaN beside NaN. */
static void float_diff(double x, double y, double *abs_d, double *rel_d)
{
    if (x == y || (isnan(x) && isnan(y))) {
        *abs_d = *rel_d = 0.0;
        return;
    }
    double ax = fabs(x), ay = fabs(y);
    *abs_d = fabs(x - y);
    *rel_d = *abs_d / (ax > ay ? ax : ay);
}

/* Whether b's element y is within the tolerance of a's x, |x - y| the
 * difference d (float_diff's or int_diff's): numpy.isclose's test
 * d <= atol + rtol * |y| for finite elements; an infinity is close to
 * itself only; NaN is close to NaN (the max abs counts it 0 too, so that
 * tensors of the same bytes are always within tolerance) and to nothing
 * else. */
static bool is_close(const diff_opts *o, double x, double y, double d)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    if (isinf(x) || isinf(y))
        return x == y;
    return d <= o->atol + o->rtol * fabs(y);
}

/* Fold the differences of element i of a chunk into s. */
static void add_elem(const pair *p, scratch *s, size_t i)
{
    ck_elem e = p->e->elem;
    double x = ck_elem_value(e, s->a, i), y = ck_elem_value(e, s->b, i);
    double d, r;
    /* bool: its truth (any non-zero byte is True, as for numpy), 0 or 1. */
    if (ck_elem_is_float(e) || e == CK_ELEM_BOOL)
        float_diff(x, y, &d, &r);
    else
        int_diff(e, s->a, s->b, i, &d, &r);
    s->sum.max_abs = max_nan(s->sum.max_abs, d);
    s->sum.max_rel = max_nan(s->sum.max_rel, r);
    ksum_add(&s->sum.abs, d);
    ksum_add(&s->sum.sq, d * d);
    if (p->o->tol && !is_close(p->o, x, y, d))
        s->sum.far = true;
}

static int pair_chunk(void *ctx, void *arg, uint64_t k, ck_error *err)
{
    pair *p = ctx;
    scratch *s = arg;
    long la = ck_chunk_read(p->ma, p->e->a, s->a, p->chunk, k, err);
    if (la < 0)
        return -1;
    long lb = ck_chunk_read(p->mb, p->e->b, s->b, p->chunk, k, err);
    if (lb < 0)
        return -1;
    ck_progress_add(p->o->progress, (uint64_t)la + (uint64_t)lb);
    if (memcmp(s->a, s->b, (size_t)la) == 0)
        return 0; /* no difference to add, every element close */
    s->sum.differ = true;
    ck_elem e = p->e->elem;
    if (e == CK_ELEM_NONE)
        return 0;
    size_t n = (size_t)la / ck_elem_size(e);
    for (size_t i = 0; i < n; i++)
        add_elem(p, s, i);
    return 0;
}

/* The sum of squares of b's elements, for ||a-b|| / ||b||: a second pass,
 * over B only, made only for a tensor whose bytes differ, so that models
 * that are the same are compared by memcmp alone. */
static int norm_chunk(void *ctx, void *arg, uint64_t k, ck_error *err)
{
    pair *p = ctx;
    scratch *s = arg;
    long lb = ck_chunk_read(p->mb, p->e->b, s->b, p->chunk, k, err);
    if (lb < 0)
        return -1;
    size_t n = (size_t)lb / ck_elem_size(p->e->elem);
    for (size_t i = 0; i < n; i++) {
        double y = ck_elem_value(p->e->elem, s->b, i);
        ksum_add(&s->sum.sq_b, y * y);
    }
    return 0;
}

/* ||a-b|| / ||b||; when ||b|| is 0 (b all zeros), 0 if a is too and
 * infinity otherwise, rather than numpy's NaN of 0/0, so that only a NaN
 * element makes it NaN. */
static double rel_norm(double sq, double sq_b)
{
    if (isnan(sq) || isnan(sq_b))
        return NAN;
    if (sq_b == 0)
        return sq == 0 ? 0.0 : INFINITY;
    return sqrt(sq) / sqrt(sq_b);
}

/* The mean abs, RMS and relative norm of a pair whose bytes differ, from
 * the sums of its pass; n_elems is not 0 (the bytes differ). */
static void summarize(entry *e, const acc *a, uint64_t n_elems)
{
    double n = (double)n_elems;
    e->mean_abs = ksum_value(&a->abs) / n;
    e->rms = sqrt(ksum_value(&a->sq) / n);
    e->rel_norm = rel_norm(ksum_value(&a->sq), ksum_value(&a->sq_b));
}

static int compare_pair(const ck_model *ma, const ck_model *mb, entry *e, const diff_opts *o,
                        ck_error *err)
{
    const ck_tensor *a = e->a;
    e->v = SAME;
    if (a->nbytes != e->b->nbytes) { /* text of another length, say */
        e->v = BYTES_DIFFER;
        e->max_abs = e->max_rel = NAN;
        return 0;
    }
    unsigned size = e->elem == CK_ELEM_NONE ? 1 : ck_elem_size(e->elem);
    if (a->nbytes % size != 0)
        return ck_fail(err, EINVAL, "%s: tensor %s: %" PRIu64 " bytes are not whole %s "
                       "elements", ma->path, a->dir_name, a->nbytes,
                       ck_dtype_canonical_name(a->dtype));
    if (e->b->nbytes % size != 0)
        return ck_fail(err, EINVAL, "%s: tensor %s: %" PRIu64 " bytes are not whole %s "
                       "elements", mb->path, e->b->dir_name, e->b->nbytes,
                       ck_dtype_canonical_name(e->b->dtype));
    pair p = {.ma = ma, .mb = mb, .e = e, .chunk = o->read.chunk, .o = o};
    ck_chunk_pass cp = {.path = ma->path, .n_chunks = (a->nbytes + p.chunk - 1) / p.chunk,
                        .threads = o->read.threads, .ctx = &p, .scratch_new = scratch_new,
                        .chunk = pair_chunk, .scratch_done = scratch_done};
    if (ck_chunk_run(&cp, err) < 0)
        return -1;
    e->max_abs = p.sum.max_abs;
    e->max_rel = p.sum.max_rel;
    if (!p.sum.differ)
        return 0;
    e->v = BYTES_DIFFER;
    if (e->elem == CK_ELEM_NONE)
        return 0; /* bytes are never within a tolerance */
    e->close = o->tol && !p.sum.far;
    cp.chunk = norm_chunk;
    if (ck_chunk_run(&cp, err) < 0)
        return -1;
    summarize(e, &p.sum, a->nbytes / size);
    return 0;
}

/* ---- matching ---- */

/* Whether two types are the same to the codec: the same numeric element
 * type whatever the format calls it; else the same kind and OneFlow type,
 * and for the types that borrow kUInt8 (packed, opaque) the same canonical
 * name (ONNX's FLOAT8E4M3FN is safetensors' F8_E4M3: the same bits). */
static bool same_type(const ck_dtype *a, const ck_dtype *b)
{
    if (a == b)
        return true;
    if (a == NULL || b == NULL)
        return false;
    ck_elem ea = ck_elem_of(a), eb = ck_elem_of(b);
    if (ea != CK_ELEM_NONE || eb != CK_ELEM_NONE)
        return ea == eb;
    if (a->kind != b->kind || a->of_value != b->of_value)
        return false;
    if (a->kind == CK_KIND_STR)
        return true; /* UTF-8 in both trees, whatever the file holds */
    if (a->itemsize != b->itemsize || a->per_byte != b->per_byte)
        return false;
    return a->kind == CK_KIND_NUMERIC ||
           strcmp(ck_dtype_canonical_name(a), ck_dtype_canonical_name(b)) == 0;
}

static bool same_shape(const ck_tensor *a, const ck_tensor *b)
{
    return a->ndim == b->ndim && memcmp(a->dims, b->dims, a->ndim * sizeof *a->dims) == 0;
}

/* A tensor with the name it is matched by: the one the mount shows and
 * ckptfs-convert writes, so a model and its conversion match. */
typedef struct named {
    const ck_tensor *t;
    const char *name;
    size_t len;
    char *own;              /* allocated name, or NULL */
} named;

static int by_name(const named *a, const named *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, n);
    if (c != 0)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return (int)a->t->part - (int)b->t->part;
}

static int cmp_named(const void *x, const void *y)
{
    return by_name(*(const named *const *)x, *(const named *const *)y);
}

/* Each live tensor of ix with its name; NULL when out of memory. */
static named *name_all(const ck_index *ix)
{
    named *v = calloc(ix->n_live + 1, sizeof *v);
    for (size_t i = 0; v != NULL && i < ix->n_live; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        v[i] = (named){.t = t, .name = t->name, .len = t->name_len};
        if (ck_tensor_has_own_name(t))
            continue;
        if ((v[i].own = ck_tensor_shown_name(t)) == NULL) {
            for (size_t j = 0; j < i; j++)
                free(v[j].own);
            free(v);
            return NULL;
        }
        v[i].name = v[i].own;
        v[i].len = strlen(v[i].own);
    }
    return v;
}

static void names_free(named *v, size_t n)
{
    for (size_t i = 0; v != NULL && i < n; i++)
        free(v[i].own);
    free(v);
}

/* ---- output ---- */

static const char *name_text(const entry *e, const ck_tensor *t, char *out, size_t cap)
{
    char q[CK_QUOTE_BUF];
    const char *part = ck_cli_part(t);
    snprintf(out, cap, "%s%s%s", ck_quote(q, e->name, e->name_len), part ? "%map." : "",
             part ? part : "");
    return out;
}

typedef struct counts {
    size_t only_a, only_b, changed, differ, same;
    size_t close;           /* of differ: within --atol/--rtol */
} counts;

/* Whether A and B are the same: bit for bit, or with --atol/--rtol each
 * pair of tensors whose bytes differ within the tolerance. */
static bool all_same(const counts *c)
{
    return c->only_a + c->only_b + c->changed + c->differ - c->close == 0;
}

static void print_values(const entry *e, const char *name)
{
    printf("values %s: %s: max abs %.9g, max rel %.9g, mean abs %.9g, rms %.9g, "
           "rel norm %.9g\n", e->close ? "close" : "differ", name, e->max_abs, e->max_rel,
           e->mean_abs, e->rms, e->rel_norm);
}

/* v in the fewest digits that read back as v, so that a tolerance is
 * printed as given (2.9999999999999996 is not 3). */
static const char *exact_text(double v, char *out, size_t cap)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(out, cap, "%.*g", digits, v);
        if (strtod(out, NULL) == v)
            break;
    }
    return out;
}

static void print_summary(const counts *c, const diff_opts *o)
{
    char at[32], rt[32];
    exact_text(o->atol, at, sizeof at);
    exact_text(o->rtol, rt, sizeof rt);
    if (c->only_a + c->only_b + c->changed + c->differ == 0)
        printf("identical\n");
    else if (all_same(c))
        printf("identical within tolerance (atol %s, rtol %s): %zu of %zu in both with "
               "other bytes\n", at, rt, c->differ, c->differ + c->same);
    else
        printf("differ: %zu only in A, %zu only in B, %zu changed type or shape, "
               "%zu of %zu in both with other bytes\n", c->only_a, c->only_b,
               c->changed, c->differ, c->differ + c->same);
    if (o->tol && !all_same(c))
        printf("within tolerance (atol %s, rtol %s): %zu of the %zu with other bytes\n",
               at, rt, c->close, c->differ);
}

/* A side's type in a "type differs" or "shape differs" line: its
 * canonical name, and in a "type differs" line the format's own in
 * parentheses when the two canonical names are the same (a MindSpore Int4,
 * one element a byte, against an ONNX INT4, two), the one place where the
 * format's spelling is what tells them apart. */
static void type_text(const entry *e, const ck_tensor *t, const ck_tensor *other, char *buf,
                      size_t len)
{
    const char *c = ck_dtype_canonical_name(t->dtype);
    if (e->v == TYPE_DIFFERS && strcmp(c, ck_dtype_canonical_name(other->dtype)) == 0 &&
        strcmp(t->type_name, other->type_name) != 0)
        snprintf(buf, len, "%s (%s)", c, t->type_name);
    else
        snprintf(buf, len, "%s", c);
}

static void print_text(const char *pa, const char *pb, const entry *es, size_t n,
                       const counts *c, const diff_opts *o)
{
    char name[CK_QUOTE_BUF + 16], sa[512], sb[512], ta[64], tb[64];
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        const ck_tensor *t = e->a ? e->a : e->b;
        name_text(e, t, name, sizeof name);
        switch (e->v) {
        case ONLY_A:
            printf("only in %s: %s\n", pa, name);
            break;
        case ONLY_B:
            printf("only in %s: %s\n", pb, name);
            break;
        case TYPE_DIFFERS:
        case SHAPE_DIFFERS:
            ck_dims_text(e->a->dims, e->a->ndim, sa, sizeof sa);
            ck_dims_text(e->b->dims, e->b->ndim, sb, sizeof sb);
            type_text(e, e->a, e->b, ta, sizeof ta);
            type_text(e, e->b, e->a, tb, sizeof tb);
            printf("%s differs: %s: %s %s, %s %s\n", e->v == TYPE_DIFFERS ? "type" : "shape",
                   name, ta, sa, tb, sb);
            break;
        case BYTES_DIFFER:
            if (e->elem == CK_ELEM_NONE)
                printf("bytes differ: %s (not numeric)\n", name);
            else
                print_values(e, name);
            break;
        case SAME:
            break;
        }
    }
    print_summary(c, o);
}

/* --strict: A against B as load_state_dict(strict=True) reports a state
 * dict against a module: B's tensors that A lacks are missing, A's that B
 * lacks unexpected, a pair of other shapes a size mismatch.  A type that
 * differs is only noted: load_state_dict copies with a cast.  No tensor
 * byte is read.  Whether they match. */
static bool print_strict(const char *pa, const char *pb, const entry *es, size_t n,
                         bool quiet)
{
    size_t missing = 0, unexpected = 0, shapes = 0, types = 0;
    char name[CK_QUOTE_BUF + 16], sa[512], sb[512], ta[64], tb[64];
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        name_text(e, e->a ? e->a : e->b, name, sizeof name);
        if (e->v == ONLY_A || e->v == ONLY_B) {
            e->v == ONLY_A ? unexpected++ : missing++;
            if (!quiet)
                printf("%s: %s\n", e->v == ONLY_A ? "unexpected" : "missing", name);
            continue;
        }
        ck_dims_text(e->a->dims, e->a->ndim, sa, sizeof sa);
        ck_dims_text(e->b->dims, e->b->ndim, sb, sizeof sb);
        type_text(e, e->a, e->b, ta, sizeof ta);
        type_text(e, e->b, e->a, tb, sizeof tb);
        if (!same_shape(e->a, e->b)) {
            shapes++;
            if (!quiet)
                printf("size mismatch: %s: %s in %s, %s in %s\n", name, sa, pa, sb, pb);
        } else if (e->v == TYPE_DIFFERS) {
            types++;
            if (!quiet)
                printf("type: %s: %s in %s, %s in %s (cast as it is loaded)\n", name, ta, pa,
                       tb, pb);
        }
    }
    bool match = missing + unexpected + shapes == 0;
    if (!quiet && match)
        printf("strict: the %zu tensors match by name and shape (%zu of another type)\n", n,
               types);
    else if (!quiet)
        printf("strict: %zu missing, %zu unexpected, %zu of another shape\n", missing,
               unexpected, shapes);
    return match;
}

/* A difference: a number, or "nan" / "inf" (JSON has neither). */
static json_t *jdiff(double v)
{
    if (isnan(v))
        return json_string("nan");
    if (isinf(v))
        return json_string("inf");
    return json_real(v);
}

static json_t *jname(const entry *e)
{
    json_t *name = json_stringn(e->name, e->name_len);
    if (name == NULL) { /* not UTF-8: the escaped form, as in the tree */
        char q[CK_QUOTE_BUF];
        name = json_string(ck_quote(q, e->name, e->name_len));
    }
    return name;
}

static json_t *jside(const ck_tensor *t)
{
    json_t *shape = json_array();
    for (uint32_t i = 0; i < t->ndim; i++)
        json_array_append_new(shape, json_integer(t->dims[i]));
    /* "type" canonical, as the lines print it; "format_type" the file's own,
     * as in ckptfs-dump --json */
    return json_pack("{s:s, s:s, s:s, s:o}", "dir", t->dir_name, "type",
                     ck_dtype_canonical_name(t->dtype), "format_type", t->type_name, "shape",
                     shape);
}

static const char *verdict_name(verdict v)
{
    static const char *names[] = {"only_a", "only_b", "type", "shape", "differ", "identical"};
    return names[v];
}

static int print_json(const ck_model *ma, const ck_model *mb, const entry *es, size_t n,
                      const counts *c, bool tol)
{
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        const ck_tensor *t = e->a ? e->a : e->b;
        json_t *o = json_object();
        json_object_set_new(o, "name", jname(e));
        if (ck_cli_part(t) != NULL)
            json_object_set_new(o, "part", json_string(ck_cli_part(t)));
        json_object_set_new(o, "status", json_string(verdict_name(e->v)));
        if (e->a)
            json_object_set_new(o, "a", jside(e->a));
        if (e->b)
            json_object_set_new(o, "b", jside(e->b));
        if (e->v == SAME || e->v == BYTES_DIFFER) {
            json_object_set_new(o, "numeric", json_boolean(e->elem != CK_ELEM_NONE));
            json_object_set_new(o, "bit_identical", json_boolean(e->v == SAME));
            if (e->elem != CK_ELEM_NONE) {
                json_object_set_new(o, "max_abs", jdiff(e->max_abs));
                json_object_set_new(o, "max_rel", jdiff(e->max_rel));
            }
            if (e->v == BYTES_DIFFER && e->elem != CK_ELEM_NONE) {
                json_object_set_new(o, "mean_abs", jdiff(e->mean_abs));
                json_object_set_new(o, "rms", jdiff(e->rms));
                json_object_set_new(o, "rel_norm", jdiff(e->rel_norm));
            }
            if (tol && e->v == BYTES_DIFFER)
                json_object_set_new(o, "close", json_boolean(e->close));
        }
        json_array_append_new(list, o);
    }
    bool same = c->only_a + c->only_b + c->changed + c->differ == 0;
    json_t *doc = json_pack("{s:{s:s, s:s}, s:{s:s, s:s}, s:b, s:{s:I, s:I, s:I, s:I, s:I}, s:o}",
                            "a", "file", ma->path, "format", ma->format->name,
                            "b", "file", mb->path, "format", mb->format->name,
                            "identical", same,
                            "counts", "only_a", (json_int_t)c->only_a,
                            "only_b", (json_int_t)c->only_b, "changed", (json_int_t)c->changed,
                            "differ", (json_int_t)c->differ, "same", (json_int_t)c->same,
                            "tensors", list);
    if (doc != NULL && tol)
        json_object_set_new(doc, "within_tolerance", json_boolean(all_same(c)));
    if (doc != NULL && tol)
        json_object_set_new(json_object_get(doc, "counts"), "close",
                            json_integer((json_int_t)c->close));
    int rc = doc == NULL || json_dumpf(doc, stdout, JSON_INDENT(1)) < 0 ? -1 : 0;
    printf("\n");
    json_decref(doc);
    return rc;
}

/* ---- the command line ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [OPTIONS] A B [TENSOR...]\n"
            "Compare two models tensor by tensor (matched by name): the tensors only in A,\n"
            "only in B, with another type or shape, and of the others those whose bytes\n"
            "differ, with the largest absolute and relative difference of their elements,\n"
            "the mean absolute and RMS difference and the relative norm ||a-b||/||b||.\n"
            "Types compare as the codec reads them: a .ckpt Float32 equals a safetensors F32;\n"
            "both are printed float32, a type's one name across formats (ckptfs(1)).\n"
            "  --atol X, --rtol Y    the same within tolerance: every element of a tensor\n"
            "                        |a - b| <= X + Y * |b| (numpy.allclose), NaN close to\n"
            "                        NaN only; either alone, the other is 0 (default: the\n"
            "                        same bytes)\n"
            "  --json                one JSON document instead of lines\n"
            "  -q, --quiet           print nothing, no warning either: the exit status says it\n"
            "  -j N                  threads reading a tensor (default: the online CPUs)\n"
            "  --chunk=SIZE          bytes read at a time per thread and model (default 4M)\n"
            "  --nocrc               do not verify a .ckpt CRC trailer\n"
            "  --no-index            neither read nor save a .ckpt's index (ckptfs(1));\n"
            "  -o index_dir=DIR      where it is kept (default ~/.cache/ckptfs)\n"
            "  --map NAME|FILE       A under the names a map gives it, B as it is\n"
            "  --strict              names and shapes only, as load_state_dict(strict=True):\n"
            "                        missing (B's, not A's), unexpected (A's, not B's) and\n"
            "                        size mismatches; exit 0 only when there are none\n"
            "                        (ckptfs --maps lists the shipped maps)\n"
            "  -o key_file=PATH      key of an encrypted A or B, one for both (or CKPTFS_KEY_HEX)\n"
            "  -o tmp_max=SIZE       most a zstd model without seek table may take in $TMPDIR\n"
            "  -o strategy=FILE      A and B are distributed checkpoints' directories\n"
            "  -o A,B                several -o options at once (a comma in a value: \\,)\n"
            "  -h, --help; -V, --version\n"
            "A, B: a file ckptfs reads, an iteration_<N> directory, a OneFlow snapshot\n"
            "directory, a Hugging Face model folder (config.json beside model.safetensors,\n"
            "its .index.json or pytorch_model.bin: that file), or with -o strategy a\n"
            "distributed checkpoint's directory; the options apply to both.  TENSOR: only\n"
            "those tensors, in the order named; a name or a shell glob ('fc*', quoted from\n"
            "the shell) of A's or B's names.\n"
            "Exit status (as diff's): 0 the same tensors, types, shapes and bytes (or values\n"
            "within --atol/--rtol); 1 they\n"
            "differ; 2 trouble (a usage error, a file that cannot be read).\n");
}

/* Every tensor of A in A's order (with its match in B), then those of B
 * no tensor of A matched, in B's order.  The entries' names live in
 * *na and *nb (each model's, in its order), freed by the caller. */
static entry *match(const ck_model *ma, const ck_model *mb, size_t *n_out, named **na,
                    named **nb)
{
    const ck_index *ia = &ma->index, *ib = &mb->index;
    entry *es = calloc(ia->n_live + ib->n_live + 1, sizeof *es);
    const named **sorted = calloc(ib->n_live + 1, sizeof *sorted);
    bool *used = calloc(ib->n_live + 1, sizeof *used);
    size_t n = 0;
    *na = name_all(ia);
    *nb = name_all(ib);
    if (es == NULL || sorted == NULL || used == NULL || *na == NULL || *nb == NULL) {
        free(es);
        es = NULL;
        goto out;
    }
    for (size_t i = 0; i < ib->n_live; i++)
        sorted[i] = &(*nb)[i];
    qsort(sorted, ib->n_live, sizeof *sorted, cmp_named);
    for (size_t i = 0; i < ia->n_live; i++) {
        const named *a = &(*na)[i];
        const named **hit = bsearch(&a, sorted, ib->n_live, sizeof *sorted, cmp_named);
        entry *e = &es[n++];
        *e = (entry){.a = a->t, .v = ONLY_A, .name = a->name, .name_len = a->len};
        if (hit != NULL) {
            e->b = (*hit)->t;
            used[hit - sorted] = true;
            e->v = !same_type(a->t->dtype, e->b->dtype) ? TYPE_DIFFERS
                   : !same_shape(a->t, e->b) ? SHAPE_DIFFERS : SAME;
            e->elem = ck_elem_of(a->t->dtype);
        }
    }
    for (size_t i = 0; i < ib->n_live; i++) {
        const named *b = &(*nb)[i];
        const named **hit = bsearch(&b, sorted, ib->n_live, sizeof *sorted, cmp_named);
        if (hit != NULL && !used[hit - sorted]) {
            used[hit - sorted] = true; /* a name twice in B is reported once */
            es[n++] = (entry){.b = b->t, .v = ONLY_B, .name = b->name, .name_len = b->len};
        }
    }
out:
    free(sorted);
    free(used);
    *n_out = n;
    return es;
}

/* A tolerance, a finite number >= 0, into *out; -1 if it is not (the
 * option and its value are then named by ck_cli_read_args). */
static int tol_value(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v) || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* --atol X, --atol=X, --rtol Y, --rtol=Y at argv[*i]: 1 taken, 0 not one,
 * -1 a bad or missing value.  Either one turns on the comparison by
 * values, the other staying 0 (numpy's allclose defaults to rtol 1e-5; a
 * tolerance named alone is the clearer one). */
static int tol_arg(diff_opts *o, int argc, char **argv, int *i)
{
    static const char *names[] = {"--atol", "--rtol"};
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(names[k]);
        if (strncmp(argv[*i], names[k], len) != 0)
            continue;
        const char *v = NULL;
        if (argv[*i][len] == '=')
            v = argv[*i] + len + 1;
        else if (argv[*i][len] != '\0')
            continue;
        else if (*i + 1 < argc)
            v = argv[++*i];
        o->tol = true;
        return v == NULL || tol_value(v, k == 0 ? &o->atol : &o->rtol) < 0 ? -1 : 1;
    }
    return 0;
}

/* Whether a TENSOR argument selects entry i of ctx (an entry array): its
 * name (the pair's one name) or either side's directory name, equal or
 * matched as a glob (ck_cli_name_matches). */
static bool entry_matches(void *ctx, size_t i, const char *pat)
{
    const entry *e = &((const entry *)ctx)[i];
    return ck_cli_name_matches(pat, e->name, e->name_len, NULL) ||
           (e->a != NULL && ck_cli_name_matches(pat, NULL, 0, e->a->dir_name)) ||
           (e->b != NULL && ck_cli_name_matches(pat, NULL, 0, e->b->dir_name));
}

/* Keep of es[0 .. *n) those the TENSOR patterns select, in the patterns'
 * order (ck_cli_select); all of them without patterns.  -1 (said) when a
 * pattern selects no tensor of A or B. */
static int select_entries(entry *es, size_t *n, const char **pats, size_t n_pats,
                          const char *pa, const char *pb)
{
    if (n_pats == 0)
        return 0;
    size_t *order = calloc(*n + 1, sizeof *order), missing = 0;
    entry *kept = calloc(*n + 1, sizeof *kept);
    long got = order == NULL || kept == NULL ? -2
               : ck_cli_select(*n, entry_matches, es, pats, n_pats, order, &missing);
    char q[CK_QUOTE_BUF];
    if (got == -1)
        fprintf(stderr, PROG ": %s, %s: no tensor %s\n", pa, pb,
                ck_quote(q, pats[missing], strlen(pats[missing])));
    else if (got < 0)
        fprintf(stderr, PROG ": out of memory\n");
    for (long k = 0; k < got; k++)
        kept[k] = es[order[k]];
    if (got >= 0) {
        memcpy(es, kept, (size_t)got * sizeof *es);
        *n = (size_t)got;
    }
    free(order);
    free(kept);
    return got < 0 ? -1 : 0;
}

/* An option of ckptfs-diff's own at argv[*i] (ck_cli_args): 1 taken, 0
 * not one, -1 a bad value. */
static int own_arg(void *ctx, int argc, char **argv, int *i)
{
    diff_opts *o = ctx;
    int took = ck_chunk_opt_arg(&o->read, argc, argv, i);
    if (took != 0)
        return took;
    if (strcmp(argv[*i], "--json") == 0) {
        o->json = true;
        return 1;
    }
    if (strcmp(argv[*i], "--strict") == 0) {
        o->strict = true;
        return 1;
    }
    return tol_arg(o, argc, argv, i);
}

/* What the bar counts to: both tensors of each pair of one size, compared
 * chunk by chunk (compare_pair reads no other pair). */
static uint64_t bytes_to_compare(const entry *es, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        if (es[i].v == SAME && es[i].a->nbytes == es[i].b->nbytes)
            sum += 2 * es[i].a->nbytes;
    return sum;
}

/* Compare A and B (path[0], path[1]), the tensors path[2 .. n_pos) select
 * or all: the exit status. */
static int run(diff_opts *o, const char **path, size_t n_pos);

int main(int argc, char **argv)
{
    diff_opts o = {.read = ck_chunk_opts_default()};
    /* A, B, then the TENSOR patterns */
    const char **path = calloc((size_t)argc + 2, sizeof *path);
    if (path == NULL)
        return 2;
    ck_cli_args args = {.prog = PROG, .usage = usage, .open = &o.open, .own = own_arg,
                        .ctx = &o, .pos = path, .max_pos = (size_t)argc};
    int got = ck_cli_read_args(&args, argc, argv);
    if (got != 0 || path[1] == NULL) {
        if (got == 0)
            fprintf(stderr, PROG ": %s; ", path[0] ? "no B given" : "no A and B given");
        if (got <= 0)
            fprintf(stderr, "usage: " PROG " [OPTIONS] A B [TENSOR...] (try --help)\n");
        free(path);
        return got > 0 ? 0 : 2; /* --help, --version: 0 */
    }
    int rc = run(&o, path, args.n_pos);
    free(path);
    return rc;
}
static int run(diff_opts *o, const char **path, size_t n_pos)
{
    o->open.key_optional = true; /* one key serves A, B or both */
    ck_error err = {0};
    ck_model *m[2] = {NULL, NULL};
    const char *map = o->open.map;
    for (int k = 0; k < 2; k++) {
        /* --map names A as B's framework does: B is the target, as it is. */
        o->open.map = k == 0 ? map : NULL;
        if ((k == 0 && ck_cli_load_key(&o->open, &err) < 0) ||
            (m[k] = ck_cli_open_model(&o->open, path[k], &err)) == NULL) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            if (k == 1)
                ck_model_close(m[0]);
            ck_cli_key_wipe(&o->open);
            return 2;
        }
    }
    ck_cli_key_wipe(&o->open);
    size_t n = 0;
    named *na = NULL, *nb = NULL;
    entry *es = match(m[0], m[1], &n, &na, &nb);
    counts c = {0};
    int rc = es == NULL ? 2 : 0;
    if (es == NULL)
        fprintf(stderr, PROG ": out of memory\n");
    else if (select_entries(es, &n, path + 2, n_pos - 2, path[0], path[1]) < 0)
        rc = 2;
    bool strict = rc == 0 && o->strict;
    if (strict)
        rc = print_strict(path[0], path[1], es, n, o->open.quiet) ? 0 : 1;
    ck_progress bar;
    if (rc == 0 && !strict && ck_progress_wanted(stderr, o->open.quiet)) {
        ck_progress_start(&bar, bytes_to_compare(es, n), true, stderr);
        o->progress = &bar;
    }
    for (size_t i = 0; rc == 0 && !strict && i < n; i++) {
        entry *e = &es[i];
        if (e->v == SAME && compare_pair(m[0], m[1], e, o, &err) < 0) {
            ck_progress_end(o->progress);
            char q[CK_QUOTE_BUF];
            fprintf(stderr, PROG ": %s (tensor %s)\n", err.msg,
                    ck_quote(q, e->name, e->name_len));
            rc = 2;
        }
        switch (e->v) {
        case ONLY_A: c.only_a++; break;
        case ONLY_B: c.only_b++; break;
        case TYPE_DIFFERS: case SHAPE_DIFFERS: c.changed++; break;
        case BYTES_DIFFER: c.differ++; c.close += e->close; break;
        case SAME: c.same++; break;
        }
    }
    ck_progress_end(o->progress); /* the line cleared before the report */
    if (rc == 0 && !strict && !o->open.quiet && o->json)
        rc = print_json(m[0], m[1], es, n, &c, o->tol) < 0 ? 2 : 0;
    else if (rc == 0 && !strict && !o->open.quiet)
        print_text(path[0], path[1], es, n, &c, o);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, PROG ": cannot write the output: %s\n", strerror(errno));
        rc = 2;
    }
    if (rc == 0 && !strict)
        rc = all_same(&c) ? 0 : 1;
    free(es);
    names_free(na, m[0]->index.n_live);
    names_free(nb, m[1]->index.n_live);
    ck_model_close(m[0]);
    ck_model_close(m[1]);
    return rc;
}
