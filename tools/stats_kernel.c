/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_kernel: the vector loops of ckptfs-stat's statistics
 * (stats_kernel.h), made from stats_kernel.inc once per instruction set
 * with GCC's vector extensions, and the choice among them (the best the
 * CPU runs, from stats_isa.h, caps the one asked for).
 *
 * The data are little-endian, as the lanes of an x86 or little-endian ARM
 * register: on a big-endian host there are no vector loops and
 * tensor_stats' scalar ones do everything.
 */
#include "stats_kernel.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../codec/core/le_bytes.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* A block of n integers of type e (not 64-bit) summed exactly: sum s and
 * sum of squares q, zeros z, extremes mn and mx; its mean relative to
 * shift. */
static void ck_small_block_done(ck_stats *b, ck_elem e, size_t n, int64_t s, uint64_t q,
                                uint64_t z, int64_t mn, int64_t mx, int64_t shift)
{
    /* n * M2 = n * q - s^2, exactly, then rounded once. */
    __int128 nm2 = (__int128)n * (__int128)q - (__int128)s * s;
    b->finite = n;
    b->zeros = z;
    b->mean = (double)(s - shift * (int64_t)n) / (double)n;
    b->m2 = (double)nm2 / (double)n;
    b->min = (double)mn;
    b->max = (double)mx;
    if (ck_elem_is_signed(e)) {
        b->imin = mn;
        b->imax = mx;
    } else {
        b->umin = (uint64_t)mn;
        b->umax = (uint64_t)mx;
    }
}

/* A block of n 32-bit integers: the sum of its differences from the
 * shift, exact, and its m2 in double. */
static void ck_int_block_done(ck_stats *b, ck_elem e, size_t n, int64_t rel, double m2,
                              uint64_t z, int64_t mn, int64_t mx)
{
    ck_small_block_done(b, e, n, rel, 0, z, mn, mx, 0);
    b->m2 = m2;
}

/* What block means are taken relative to: the first finite element (an
 * integer's value is exact in a double: 32 bits at most here) of the first
 * block, else 0 (a piece of NaN is not scanned to its end). */
static double ck_stats_shift(ck_elem e, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n && i < CK_BLOCK; i++) {
        double x = ck_elem_value(e, p, i);
        if (isfinite(x))
            return x;
    }
    return 0;
}

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__

/* The baseline: 16-byte vectors, SSE2 on x86-64. */
#define KSUF base
#define KATTR
#define VW 16
#define LO_IDX 0, 1
#define HI_IDX 2, 3
#include "stats_kernel.inc"
#undef KSUF
#undef KATTR
#undef VW
#undef LO_IDX
#undef HI_IDX

#if defined(__x86_64__)
#define KSUF avx2
#define KATTR __attribute__((target("avx2,fma,f16c")))
#define VW 32
#define LO_IDX 0, 1, 2, 3
#define HI_IDX 4, 5, 6, 7
#include "stats_kernel.inc"
#undef KSUF
#undef KATTR
#undef VW
#undef LO_IDX
#undef HI_IDX

#define KSUF avx512
#define KATTR __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
#define VW 64
#define LO_IDX 0, 1, 2, 3, 4, 5, 6, 7
#define HI_IDX 8, 9, 10, 11, 12, 13, 14, 15
#include "stats_kernel.inc"
#undef KSUF
#undef KATTR
#undef VW
#undef LO_IDX
#undef HI_IDX
#endif

#endif /* little-endian */

bool ck_stats_kernel(ck_stats *s, ck_elem e, const unsigned char *p, size_t n,
                     ck_stats_isa isa)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    ck_stats_isa best = ck_stats_isa_best();
    switch (isa < best ? isa : best) {
#if defined(__x86_64__)
    case CK_STATS_AVX512: return piece_avx512(s, e, p, n);
    case CK_STATS_AVX2: return piece_avx2(s, e, p, n);
#else
    case CK_STATS_AVX512: case CK_STATS_AVX2:
#endif
    case CK_STATS_GENERIC: return piece_base(s, e, p, n);
    }
#endif
    (void)s, (void)e, (void)p, (void)n, (void)isa;
    return false;
}
