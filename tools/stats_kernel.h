/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_kernel: the vector loops behind ck_stats_add (tensor_stats.h), one
 * set per instruction set, chosen at run time: the baseline of the build
 * (SSE2 on x86-64) always, AVX2 with FMA and AVX-512 where the CPU has them
 * (stats_isa.h, __builtin_cpu_supports), so the build keeps -O2 without
 * -march.  The loops are written once (stats_kernel.inc) in GCC's vector
 * extensions, plus the x86 intrinsics GCC 12 does not derive (float to
 * double widening, F16C, psadbw / pmaddwd); the 64-bit types keep the
 * scalar loops, and so does every type on a big-endian host.  Internal to
 * tensor_stats; built on stats_elem.h, as tensor_stats is, so that neither
 * includes the other.  tests/unit/test_stats_blocks.c checks every
 * instruction set the CPU runs against a scalar reference in long double;
 * tests/bats/stat.bats checks the tool against numpy.
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
