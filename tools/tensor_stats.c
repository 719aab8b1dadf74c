/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_stats: per-piece statistics of a tensor's elements
 * (tensor_stats.h); their merge is stats_elem's, which the vector loops
 * share.  The vector loops of stats_kernel do the types up to 32 bits; the scalar loops here do the 64-bit ones (and every type
 * on a big-endian host).  Each element type has its own scalar loop, so
 * that each is a tight loop the compiler can keep in registers.
 */
#include "tensor_stats.h"

#include <math.h>
#include <string.h>

#include "../codec/core/le_bytes.h"
#include "stats_kernel.h"

/* Element i of p, by type: as a double for the floats, exactly for the
 * integers. */
static inline double ld_f16(const unsigned char *p, size_t i)
{
    return ck_half_to_double(ck_le16(p + 2 * i));
}
static inline double ld_bf16(const unsigned char *p, size_t i)
{
    return ck_bf16_to_double(ck_le16(p + 2 * i));
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
static inline int64_t ld_i16(const unsigned char *p, size_t i)
{
    return (int16_t)ck_le16(p + 2 * i);
}
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
static inline uint64_t ld_u16(const unsigned char *p, size_t i) { return ck_le16(p + 2 * i); }
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
