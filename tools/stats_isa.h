/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_isa: the instruction sets ckptfs-stat's statistics have vector
 * loops for (stats_kernel.h), and which of them the CPU runs: asked by
 * ck_stats_add (tensor_stats.h), by the kernel's dispatch, and by the
 * tests and benchmarks that run every one of them.
 */
#ifndef CK_STATS_ISA_H
#define CK_STATS_ISA_H

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

#endif
