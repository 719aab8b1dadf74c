/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_kernel: the vector loops behind ck_stats_add (tensor_stats.h), one
 * set per instruction set, chosen at run time: the baseline of the build
 * (SSE2 on x86-64) always, AVX2 with FMA and AVX-512 where the CPU has them
 * (stats_isa.h).  Internal to tensor_stats; built on stats_elem.h, as
 * tensor_stats is, so that neither includes the other.
 */
#ifndef CK_STATS_KERNEL_H
#define CK_STATS_KERNEL_H

#include <stdbool.h>
#include <stddef.h>

#include "stats_elem.h"
#include "stats_isa.h"

/* Elements a block holds: its two passes run over it while it is in L1. */
#define CK_BLOCK 2048

/* The statistics of n elements of type e at p into s (zeroed: its mean is
 * kept relative to one of the elements until the end), block after block,
 * with isa's loops: true; false when e has no vector loop here (the 64-bit
 * integers; every type on a big-endian host), s untouched. */
bool ck_stats_kernel(ck_stats *s, ck_elem e, const unsigned char *p, size_t n,
                     ck_stats_isa isa);

#endif
