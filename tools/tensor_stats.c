/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_stats: per-piece statistics of a tensor's elements and their
 * merge (tensor_stats.h).  The vector loops of stats_kernel do the types
 * up to 32 bits; the scalar loops here do the 64-bit ones (and every type
 * on a big-endian host).  Each element type has its own scalar loop, so
 * that each is a tight loop the compiler can keep in registers.
 */
#include "tensor_stats.h"

#include <math.h>
#include <string.h>

#include "../codec/core/le_bytes.h"
#include "stats_kernel.h"

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

/* IEEE binary16 to double, exactly (subnormals, infinities, NaN), by
 * moving its fields into a float32: no libm call in the loop. */
static inline double half_to_double(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    if (exp == 0) { /* zero or subnormal: frac * 2^-24, exact in a float */
        float v = (float)frac * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    uint32_t bits = sign | (frac << 13) | (exp == 31 ? 0x7f800000u : (exp + 112) << 23);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bfloat16 is the upper half of a float32. */
static inline double bf16_to_double(uint16_t b)
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

/* Element i of p, by type: as a double for the floats, exactly for the
 * integers. */
static inline double ld_f16(const unsigned char *p, size_t i)
{
    return half_to_double(le16(p + 2 * i));
}
static inline double ld_bf16(const unsigned char *p, size_t i)
{
    return bf16_to_double(le16(p + 2 * i));
}
static inline double ld_f32(const unsigned char *p, size_t i)
{
    uint32_t u = ck_le32(p + 4 * i);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline double ld_f64(const unsigned char *p, size_t i)
{
    uint64_t u = ck_le64(p + 8 * i);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
static inline int64_t ld_i8(const unsigned char *p, size_t i) { return (int8_t)p[i]; }
static inline int64_t ld_i16(const unsigned char *p, size_t i) { return (int16_t)le16(p + 2 * i); }
static inline int64_t ld_i32(const unsigned char *p, size_t i)
{
    return (int32_t)ck_le32(p + 4 * i);
}
static inline int64_t ld_i64(const unsigned char *p, size_t i)
{
    return (int64_t)ck_le64(p + 8 * i);
}
static inline int64_t ld_bool(const unsigned char *p, size_t i) { return p[i] != 0; }
static inline uint64_t ld_u8(const unsigned char *p, size_t i) { return p[i]; }
static inline uint64_t ld_u16(const unsigned char *p, size_t i) { return le16(p + 2 * i); }
static inline uint64_t ld_u32(const unsigned char *p, size_t i) { return ck_le32(p + 4 * i); }
static inline uint64_t ld_u64(const unsigned char *p, size_t i) { return ck_le64(p + 8 * i); }

/* One piece's statistics, in two passes over it (see tensor_stats.h).  The
 * loops are written once and made for each type, so that each is a tight
 * loop with the element's decoding inlined: a switch per element would
 * cost more than the arithmetic. */
#define FLOAT_PIECE(NAME, LOAD)                                                  \
    static void NAME(ck_stats *s, const unsigned char *p, size_t n)              \
    {                                                                            \
        double sum = 0, lo = INFINITY, hi = -INFINITY, m2 = 0;                   \
        for (size_t i = 0; i < n; i++) {                                         \
            double x = LOAD(p, i);                                               \
            if (!isfinite(x)) { /* NaN is neither > 0 nor < 0 */                 \
                s->nan += isnan(x) != 0;                                         \
                s->posinf += x > 0;                                              \
                s->neginf += x < 0;                                              \
                continue;                                                        \
            }                                                                    \
            s->finite++;                                                         \
            s->zeros += x == 0;                                                  \
            sum += x;                                                            \
            lo = x < lo ? x : lo;                                                \
            hi = x > hi ? x : hi;                                                \
        }                                                                        \
        if (s->finite == 0)                                                      \
            return;                                                              \
        s->min = lo;                                                             \
        s->max = hi;                                                             \
        s->mean = sum / (double)s->finite;                                       \
        for (size_t i = 0; i < n; i++) {                                         \
            double x = LOAD(p, i);                                               \
            if (isfinite(x))                                                     \
                m2 += (x - s->mean) * (x - s->mean);                             \
        }                                                                        \
        s->m2 = m2;                                                              \
    }

#define INT_PIECE(NAME, T, LOAD, T_MIN, T_MAX, LO, HI)                           \
    static void NAME(ck_stats *s, const unsigned char *p, size_t n)              \
    {                                                                            \
        double sum = 0, m2 = 0;                                                  \
        T lo = T_MAX, hi = T_MIN;                                                \
        for (size_t i = 0; i < n; i++) {                                         \
            T v = LOAD(p, i);                                                    \
            s->zeros += v == 0;                                                  \
            sum += (double)v;                                                    \
            lo = v < lo ? v : lo;                                                \
            hi = v > hi ? v : hi;                                                \
        }                                                                        \
        s->finite = n;                                                           \
        if (n == 0)                                                              \
            return;                                                              \
        s->LO = lo;                                                              \
        s->HI = hi;                                                              \
        s->min = (double)lo;                                                     \
        s->max = (double)hi;                                                     \
        s->mean = sum / (double)n;                                               \
        for (size_t i = 0; i < n; i++) {                                         \
            double x = (double)LOAD(p, i);                                       \
            m2 += (x - s->mean) * (x - s->mean);                                 \
        }                                                                        \
        s->m2 = m2;                                                              \
    }

FLOAT_PIECE(piece_f16, ld_f16)
FLOAT_PIECE(piece_bf16, ld_bf16)
FLOAT_PIECE(piece_f32, ld_f32)
FLOAT_PIECE(piece_f64, ld_f64)
INT_PIECE(piece_i8, int64_t, ld_i8, INT64_MIN, INT64_MAX, imin, imax)
INT_PIECE(piece_i16, int64_t, ld_i16, INT64_MIN, INT64_MAX, imin, imax)
INT_PIECE(piece_i32, int64_t, ld_i32, INT64_MIN, INT64_MAX, imin, imax)
INT_PIECE(piece_i64, int64_t, ld_i64, INT64_MIN, INT64_MAX, imin, imax)
INT_PIECE(piece_bool, int64_t, ld_bool, INT64_MIN, INT64_MAX, imin, imax)
INT_PIECE(piece_u8, uint64_t, ld_u8, 0, UINT64_MAX, umin, umax)
INT_PIECE(piece_u16, uint64_t, ld_u16, 0, UINT64_MAX, umin, umax)
INT_PIECE(piece_u32, uint64_t, ld_u32, 0, UINT64_MAX, umin, umax)
INT_PIECE(piece_u64, uint64_t, ld_u64, 0, UINT64_MAX, umin, umax)

static void piece_stats(ck_stats *s, ck_elem e, const unsigned char *buf, size_t n)
{
    ck_stats_init(s);
    s->count = n;
    switch (e) {
    case CK_ELEM_NONE: break;
    case CK_ELEM_F16: piece_f16(s, buf, n); break;
    case CK_ELEM_BF16: piece_bf16(s, buf, n); break;
    case CK_ELEM_F32: piece_f32(s, buf, n); break;
    case CK_ELEM_F64: piece_f64(s, buf, n); break;
    case CK_ELEM_I8: piece_i8(s, buf, n); break;
    case CK_ELEM_I16: piece_i16(s, buf, n); break;
    case CK_ELEM_I32: piece_i32(s, buf, n); break;
    case CK_ELEM_I64: piece_i64(s, buf, n); break;
    case CK_ELEM_BOOL: piece_bool(s, buf, n); break;
    case CK_ELEM_U8: piece_u8(s, buf, n); break;
    case CK_ELEM_U16: piece_u16(s, buf, n); break;
    case CK_ELEM_U32: piece_u32(s, buf, n); break;
    case CK_ELEM_U64: piece_u64(s, buf, n); break;
    }
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

void ck_stats_add_isa(ck_stats *s, ck_elem e, const void *buf, size_t n, ck_stats_isa isa)
{
    ck_stats p;
    if (e == CK_ELEM_NONE || n == 0)
        return;
    ck_stats_init(&p);
    if (!ck_stats_kernel(&p, e, buf, n, isa))
        piece_stats(&p, e, buf, n);
    ck_stats_merge(s, &p, e);
}

void ck_stats_add(ck_stats *s, ck_elem e, const void *buf, size_t n)
{
    ck_stats_add_isa(s, e, buf, n, ck_stats_isa_best());
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
