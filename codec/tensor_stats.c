/*
 * tensor_stats: per-piece statistics of a tensor's elements and their
 * merge (tensor_stats.h).  Each element type has its own loop, so that the
 * common float32 case is a tight loop the compiler can keep in registers.
 */
#include "tensor_stats.h"

#include <math.h>
#include <string.h>

#include "le_bytes.h"

ck_elem ck_elem_of(const ck_dtype *dt)
{
    static const struct { const char *of_name; ck_elem e; } map[] = {
        {"kFloat16", CK_ELEM_F16}, {"kBFloat16", CK_ELEM_BF16}, {"kFloat", CK_ELEM_F32},
        {"kDouble", CK_ELEM_F64}, {"kInt8", CK_ELEM_I8}, {"kInt16", CK_ELEM_I16},
        {"kInt32", CK_ELEM_I32}, {"kInt64", CK_ELEM_I64}, {"kUInt8", CK_ELEM_U8},
        {"kUInt16", CK_ELEM_U16}, {"kUInt32", CK_ELEM_U32}, {"kUInt64", CK_ELEM_U64},
        {"kBool", CK_ELEM_BOOL},
    };
    /* Packed and opaque types (Int4, 8-bit floats...) borrow kUInt8 for the
     * tree: only the kind tells them from real bytes. */
    if (dt == NULL || dt->kind != CK_KIND_NUMERIC)
        return CK_ELEM_NONE;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(dt->of_name, map[i].of_name) == 0)
            return ck_elem_size(map[i].e) == dt->itemsize ? map[i].e : CK_ELEM_NONE;
    return CK_ELEM_NONE;
}

unsigned ck_elem_size(ck_elem e)
{
    switch (e) {
    case CK_ELEM_NONE: return 0;
    case CK_ELEM_I8: case CK_ELEM_U8: case CK_ELEM_BOOL: return 1;
    case CK_ELEM_F16: case CK_ELEM_BF16: case CK_ELEM_I16: case CK_ELEM_U16: return 2;
    case CK_ELEM_F32: case CK_ELEM_I32: case CK_ELEM_U32: return 4;
    case CK_ELEM_F64: case CK_ELEM_I64: case CK_ELEM_U64: return 8;
    }
    return 0;
}

bool ck_elem_is_float(ck_elem e)
{
    return e == CK_ELEM_F16 || e == CK_ELEM_BF16 || e == CK_ELEM_F32 || e == CK_ELEM_F64;
}

bool ck_elem_is_signed(ck_elem e)
{
    return e == CK_ELEM_I8 || e == CK_ELEM_I16 || e == CK_ELEM_I32 || e == CK_ELEM_I64 ||
           e == CK_ELEM_BOOL;
}

void ck_stats_init(ck_stats *s)
{
    memset(s, 0, sizeof *s);
}

/* IEEE binary16 to double, exactly (subnormals, infinities, NaN). */
static double half_to_double(uint16_t h)
{
    unsigned exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    double v;
    if (exp == 0)
        v = ldexp((double)frac, -24);
    else if (exp == 31)
        v = frac ? NAN : INFINITY;
    else
        v = ldexp((double)(frac | 0x400), (int)exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* bfloat16 is the upper half of a float32. */
static double bf16_to_double(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

double ck_elem_value(ck_elem e, const void *buf, size_t i)
{
    const unsigned char *p = (const unsigned char *)buf + i * ck_elem_size(e);
    switch (e) {
    case CK_ELEM_NONE: return NAN;
    case CK_ELEM_F16: return half_to_double(le16(p));
    case CK_ELEM_BF16: return bf16_to_double(le16(p));
    case CK_ELEM_F32: {
        uint32_t u = ck_le32(p);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case CK_ELEM_F64: {
        uint64_t u = ck_le64(p);
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    case CK_ELEM_I8: return (int8_t)p[0];
    case CK_ELEM_I16: return (int16_t)le16(p);
    case CK_ELEM_I32: return (int32_t)ck_le32(p);
    case CK_ELEM_I64: return (double)(int64_t)ck_le64(p);
    case CK_ELEM_U8: return p[0];
    case CK_ELEM_U16: return le16(p);
    case CK_ELEM_U32: return ck_le32(p);
    case CK_ELEM_U64: return (double)ck_le64(p);
    case CK_ELEM_BOOL: return p[0] != 0; /* numpy reads any non-zero byte as True */
    }
    return NAN;
}

/* The exact value of integer element i: signed types in *iv, unsigned in
 * *uv. */
static void int_value(ck_elem e, const unsigned char *p, int64_t *iv, uint64_t *uv)
{
    switch (e) {
    case CK_ELEM_I8: *iv = (int8_t)p[0]; break;
    case CK_ELEM_I16: *iv = (int16_t)le16(p); break;
    case CK_ELEM_I32: *iv = (int32_t)ck_le32(p); break;
    case CK_ELEM_I64: *iv = (int64_t)ck_le64(p); break;
    case CK_ELEM_BOOL: *iv = p[0] != 0; break;
    case CK_ELEM_U8: *uv = p[0]; break;
    case CK_ELEM_U16: *uv = le16(p); break;
    case CK_ELEM_U32: *uv = ck_le32(p); break;
    case CK_ELEM_U64: *uv = ck_le64(p); break;
    default: break;
    }
}

/* Statistics of one piece, in two passes over it (see tensor_stats.h). */
static void piece_stats(ck_stats *s, ck_elem e, const unsigned char *buf, size_t n)
{
    unsigned size = ck_elem_size(e);
    bool is_float = ck_elem_is_float(e), is_signed = ck_elem_is_signed(e);
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    int64_t ilo = INT64_MAX, ihi = INT64_MIN;
    uint64_t ulo = UINT64_MAX, uhi = 0;
    ck_stats_init(s);
    s->count = n;
    for (size_t i = 0; i < n; i++) {
        double x = ck_elem_value(e, buf, i);
        if (is_float && !isfinite(x)) {
            if (isnan(x))
                s->nan++;
            else if (x > 0)
                s->posinf++;
            else
                s->neginf++;
            continue;
        }
        s->finite++;
        s->zeros += x == 0;
        sum += x;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        if (!is_float) {
            int64_t iv = 0;
            uint64_t uv = 0;
            int_value(e, buf + i * size, &iv, &uv);
            if (is_signed) {
                ilo = iv < ilo ? iv : ilo;
                ihi = iv > ihi ? iv : ihi;
            } else {
                ulo = uv < ulo ? uv : ulo;
                uhi = uv > uhi ? uv : uhi;
            }
        }
    }
    if (s->finite == 0)
        return;
    s->min = lo;
    s->max = hi;
    s->imin = ilo;
    s->imax = ihi;
    s->umin = ulo;
    s->umax = uhi;
    s->mean = sum / (double)s->finite;
    double m2 = 0;
    for (size_t i = 0; i < n; i++) {
        double x = ck_elem_value(e, buf, i);
        if (isfinite(x))
            m2 += (x - s->mean) * (x - s->mean);
    }
    s->m2 = m2;
}

void ck_stats_merge(ck_stats *a, const ck_stats *b, ck_elem e)
{
    if (b->finite > 0 && a->finite == 0) {
        a->min = b->min;
        a->max = b->max;
        a->imin = b->imin;
        a->imax = b->imax;
        a->umin = b->umin;
        a->umax = b->umax;
        a->mean = b->mean;
        a->m2 = b->m2;
    } else if (b->finite > 0) {
        double na = (double)a->finite, nb = (double)b->finite, n = na + nb;
        double delta = b->mean - a->mean;
        a->mean += delta * (nb / n);
        a->m2 += b->m2 + delta * delta * (na * nb / n);
        a->min = b->min < a->min ? b->min : a->min;
        a->max = b->max > a->max ? b->max : a->max;
        if (ck_elem_is_signed(e)) {
            a->imin = b->imin < a->imin ? b->imin : a->imin;
            a->imax = b->imax > a->imax ? b->imax : a->imax;
        } else {
            a->umin = b->umin < a->umin ? b->umin : a->umin;
            a->umax = b->umax > a->umax ? b->umax : a->umax;
        }
    }
    a->count += b->count;
    a->finite += b->finite;
    a->nan += b->nan;
    a->posinf += b->posinf;
    a->neginf += b->neginf;
    a->zeros += b->zeros;
}

void ck_stats_add(ck_stats *s, ck_elem e, const void *buf, size_t n)
{
    ck_stats p;
    if (e == CK_ELEM_NONE || n == 0)
        return;
    piece_stats(&p, e, buf, n);
    ck_stats_merge(s, &p, e);
}

double ck_stats_mean(const ck_stats *s)
{
    return s->finite > 0 ? s->mean : NAN;
}

double ck_stats_std(const ck_stats *s)
{
    /* Rounding may leave a tiny negative m2 for a constant tensor. */
    return s->finite > 0 ? sqrt(s->m2 > 0 ? s->m2 / (double)s->finite : 0) : NAN;
}

/* numpy.linspace(lo, hi, bins + 1): i * step + lo, the last one hi. */
void ck_hist_edges(const ck_stats *s, unsigned bins, double *edges)
{
    double lo = s->finite > 0 ? s->min : 0, hi = s->finite > 0 ? s->max : 1;
    if (lo == hi) {
        lo -= 0.5;
        hi += 0.5;
    }
    double step = (hi - lo) / bins;
    for (unsigned i = 0; i < bins; i++)
        edges[i] = (double)i * step + lo;
    edges[bins] = hi;
}

/* The bin of x: a first guess from its position in the range, then
 * corrected against the edges themselves, which decide (as numpy's search
 * of the edges does) whatever the rounding of the guess. */
static unsigned bin_of(double x, const double *edges, unsigned bins, double norm)
{
    double f = (x - edges[0]) * norm;
    unsigned k = !(f >= 0) ? 0 : f >= bins ? bins - 1 : (unsigned)f;
    while (k > 0 && x < edges[k])
        k--;
    while (k + 1 < bins && x >= edges[k + 1])
        k++;
    return k;
}

void ck_hist_add(uint64_t *counts, const double *edges, unsigned bins, ck_elem e,
                 const void *buf, size_t n)
{
    double norm = bins / (edges[bins] - edges[0]);
    for (size_t i = 0; i < n; i++) {
        double x = ck_elem_value(e, buf, i);
        if (isfinite(x) && x >= edges[0] && x <= edges[bins])
            counts[bin_of(x, edges, bins, norm)]++;
    }
}
