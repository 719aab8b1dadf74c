/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_isa: which of the statistics' instruction sets the CPU runs
 * (stats_isa.h), asked of cpuid through GCC's builtins.
 */
#include "stats_isa.h"

#include <stdbool.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#if defined(__x86_64__)
/* F16C by cpuid: clang 14's __builtin_cpu_supports does not know it. */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

ck_stats_isa ck_stats_isa_best(void)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma"))
        return CK_STATS_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
        return CK_STATS_AVX2;
#endif
    return CK_STATS_GENERIC;
}
