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
 *
 * The element types, the partial result and its merge are declared in
 * stats_elem.h, the instruction sets in stats_isa.h: the vector loops
 * (stats_kernel.h) share them.  This header includes both, so that its
 * callers see one interface.
 */
#ifndef CK_TENSOR_STATS_H
#define CK_TENSOR_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stats_elem.h"
#include "stats_isa.h"

/* Fold n elements of type e at buf (little-endian, as in the files; need
 * not be aligned) into s. */
void ck_stats_add(ck_stats *s, ck_elem e, const void *buf, size_t n);

/* ck_stats_add with the loops of isa, or of the best below it the CPU
 * runs: for the tests, which check every one of them. */
void ck_stats_add_isa(ck_stats *s, ck_elem e, const void *buf, size_t n, ck_stats_isa isa);

/* The mean and the population standard deviation of the finite
 * elements; NaN when there are none. */
double ck_stats_mean(const ck_stats *s);
double ck_stats_std(const ck_stats *s);

/* The edges of bins bins over s's finite range: edges[0 .. bins]. */
void ck_hist_edges(const ck_stats *s, unsigned bins, double *edges);

/* Add to counts[0 .. bins - 1] the finite elements of n at buf, binned by
 * edges (from ck_hist_edges). */
void ck_hist_add(uint64_t *counts, const double *edges, unsigned bins, ck_elem e,
                 const void *buf, size_t n);

#endif
