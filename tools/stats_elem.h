/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_elem: the element types ckptfs-stat's statistics understand, an
 * element's value, and the partial result the loops fill and merge.
 *
 * Both the scalar loops and the merge (tensor_stats.h) and the vector
 * loops (stats_kernel.h) are built on these, so they sit apart from both:
 * neither of those includes the other's header.
 */
#ifndef CK_STATS_ELEM_H
#define CK_STATS_ELEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../codec/core/dtype.h"

/* The element types the statistics understand. */
typedef enum ck_elem {
    CK_ELEM_NONE = 0,   /* not numeric here: str, packed, 8-bit floats, complex... */
    CK_ELEM_F16, CK_ELEM_BF16, CK_ELEM_F32, CK_ELEM_F64,
    CK_ELEM_I8, CK_ELEM_I16, CK_ELEM_I32, CK_ELEM_I64,
    CK_ELEM_U8, CK_ELEM_U16, CK_ELEM_U32, CK_ELEM_U64,
    CK_ELEM_BOOL,
} ck_elem;

/* The element type of dt, or CK_ELEM_NONE. */
ck_elem ck_elem_of(const ck_dtype *dt);
/* Bytes of one element (0 for CK_ELEM_NONE). */
unsigned ck_elem_size(ck_elem e);
bool ck_elem_is_float(ck_elem e);
bool ck_elem_is_signed(ck_elem e);   /* the signed integer types */

/* Element i of buf as a double (a float16 or bfloat16 widened exactly; a
 * 64-bit integer rounded to the nearest double). */
double ck_elem_value(ck_elem e, const void *buf, size_t i);

/* IEEE binary16 to double, exactly (subnormals, infinities, NaN), by
 * moving its fields into a float32: no libm call in the loop.  Inline, as
 * the scalar loops (tensor_stats.c) decode each element with it. */
static inline double ck_half_to_double(uint16_t h)
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
static inline double ck_bf16_to_double(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* A partial result: of no elements when zeroed (ck_stats_init). */
typedef struct ck_stats {
    uint64_t count;                 /* elements, finite or not */
    uint64_t finite, nan, posinf, neginf, zeros;
    /* Of the finite elements, when finite > 0.  Integers keep exact
     * extremes too: a double cannot hold every int64. */
    double min, max;
    int64_t imin, imax;             /* signed integer types and bool */
    uint64_t umin, umax;            /* unsigned integer types */
    double mean, m2;                /* m2: sum of squared deviations from mean */
} ck_stats;

void ck_stats_init(ck_stats *s);

/* Fold b into a: a then holds the statistics of both.  Integer extremes
 * are merged as e's. */
void ck_stats_merge(ck_stats *a, const ck_stats *b, ck_elem e);

#endif
