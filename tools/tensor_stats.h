/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_stats: the statistics of a tensor's elements (ckptfs-stat), built
 * from pieces so that a tensor is never whole in memory and its pieces may
 * be summed up by several threads.
 *
 * No I/O here: a caller reads a piece of a tensor's bytes, folds it into a
 * partial result with ck_stats_add, combines partials with ck_stats_merge
 * and reads mean and standard deviation off the result with ck_stats_mean
 * and ck_stats_std.  Min, max, mean and standard deviation are those of the
 * finite elements; NaN and +/-Inf are counted apart (zeros are counted among
 * the finite elements, -0.0 too).  The mean and the spread are merged with
 * Chan et al.'s parallel update of (count, mean, M2): a piece is cut into
 * blocks of 2048 elements, each summed while it is in the CPU's first-level
 * cache, in double, as deviations from one of its own elements (not from
 * zero), which stays accurate when the mean is large beside the spread
 * (stats_kernel.inc); the blocks, then the pieces, are merged in order,
 * which gives the same result whatever thread computed each piece.
 * Integers of up to 16 bits are summed exactly (sums and sums of squares in
 * integers), so theirs is exact to the last rounding.  The 64-bit types
 * keep scalar loops, each piece in two passes (mean, then squared
 * deviations from it).
 *
 * A histogram counts the finite elements in bins of [min, max] (min and max
 * from a first pass), with numpy.histogram's edges and rules: edges
 * min + i * (max - min) / bins, the last one max itself; bin i holds
 * edge[i] <= x < edge[i + 1], the last bin its right edge too; min == max
 * widens the range to [min - 0.5, max + 0.5].
 */
#ifndef CK_TENSOR_STATS_H
#define CK_TENSOR_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Fold n elements of type e at buf (little-endian, as in the files; need
 * not be aligned) into s. */
void ck_stats_add(ck_stats *s, ck_elem e, const void *buf, size_t n);

/* The instruction sets ck_stats_add has vector loops for (stats_kernel.h);
 * it takes the best the CPU runs.  The results of two of them may differ
 * in the last bits of mean and std (fused multiply-adds, lanes summed in
 * another order), never with the number of threads. */
typedef enum ck_stats_isa {
    CK_STATS_GENERIC = 0,   /* the build's baseline (SSE2 on x86-64) */
    CK_STATS_AVX2,          /* x86-64 with AVX2 and FMA */
    CK_STATS_AVX512,        /* x86-64 with AVX-512 F, VL, BW and DQ */
} ck_stats_isa;

/* The best of them the CPU runs. */
ck_stats_isa ck_stats_isa_best(void);

/* ck_stats_add with the loops of isa, or of the best below it the CPU
 * runs: for the tests, which check every one of them. */
void ck_stats_add_isa(ck_stats *s, ck_elem e, const void *buf, size_t n, ck_stats_isa isa);

/* Fold b into a: a then holds the statistics of both.  Integer extremes
 * are merged as e's. */
void ck_stats_merge(ck_stats *a, const ck_stats *b, ck_elem e);

/* The mean and the population standard deviation of the finite
 * elements; NaN when there are none. */
double ck_stats_mean(const ck_stats *s);
double ck_stats_std(const ck_stats *s);

/* Element i of buf as a double (a float16 or bfloat16 widened exactly; a
 * 64-bit integer rounded to the nearest double). */
double ck_elem_value(ck_elem e, const void *buf, size_t i);

/* The edges of bins bins over s's finite range: edges[0 .. bins]. */
void ck_hist_edges(const ck_stats *s, unsigned bins, double *edges);

/* Add to counts[0 .. bins - 1] the finite elements of n at buf, binned by
 * edges (from ck_hist_edges). */
void ck_hist_add(uint64_t *counts, const double *edges, unsigned bins, ck_elem e,
                 const void *buf, size_t n);

#endif
