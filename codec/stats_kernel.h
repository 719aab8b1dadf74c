/*
 * stats_kernel: the vector loops behind ck_stats_add (tensor_stats.h), one
 * set per instruction set, chosen at run time: the baseline of the build
 * (SSE2 on x86-64) always, AVX2 with FMA and AVX-512 where the CPU has them.
 * Internal to tensor_stats.
 */
#ifndef CK_STATS_KERNEL_H
#define CK_STATS_KERNEL_H

#include <stdbool.h>
#include <stddef.h>

#include "tensor_stats.h"

/* Elements a block holds: its two passes run over it while it is in L1. */
#define CK_BLOCK 2048

/* Fold the statistics of n elements of type e at p into s (zeroed, or a
 * piece's so far), block after block, with isa's loops: true; false when e
 * has no vector loop here (64-bit types), s untouched. */
bool ck_stats_kernel(ck_stats *s, ck_elem e, const unsigned char *p, size_t n,
                     ck_stats_isa isa);

#endif
