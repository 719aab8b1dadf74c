/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_stats_kernel: the CPU time of ckptfs-stat's loops alone
 * (ck_stats_add_isa), for each element type and each instruction set the
 * CPU runs, without the reads: the ceiling the tool could reach if reading
 * were free.  Thread CPU time, so that the other loads of a shared machine
 * disturb it little; the best of REPS rounds.
 *
 *   make && gcc -std=gnu11 -O2 -Itools -o /tmp/bsk bench/bench_stats_kernel.c \
 *       build/tools/tensor_stats.o build/tools/stats_elem.o build/tools/stats_isa.o \
 *       build/tools/stats_kernel.o build/libckptfs.a -lm
 *   /tmp/bsk [MIB [CHUNK_KIB]]    (256 MiB in 4096 KiB pieces by default)
 *
 * Built with -DCK_STATS_OLD against an older tensor_stats (its header and
 * object, from before the vector loops), it times that one's ck_stats_add.
 *
 * A piece of CHUNK_KIB (a chunk of the tool, in the CPU's caches as after
 * its read) is summed again and again until MIB have been: N(0, 0.02)-like
 * floats (float16 and bfloat16 rounded from them), integers of every bit
 * pattern.  Each line ends with the mean and std, and whether every
 * instruction set gave them alike (to 1e-9).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor_stats.h"

#define REPS 9

#ifdef CK_STATS_OLD
#define ck_stats_isa_best() 0
#define ck_stats_add_isa(s, e, p, n, isa) ck_stats_add(s, e, p, n)
typedef int ck_stats_isa;
#endif

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* float32 to float16, rounded toward zero; |v| < 2 here. */
static uint16_t to_half(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    int e = (int)(b >> 23 & 0xff) - 127 + 15;
    uint16_t h = (uint16_t)(b >> 16 & 0x8000);
    return e <= 0 ? h : (uint16_t)(h | e << 10 | (b >> 13 & 0x3ff));
}

static void fill(ck_elem e, unsigned char *p, size_t bytes)
{
    size_t size = ck_elem_size(e);
    uint32_t s = 1;
    for (size_t i = 0; i < bytes / size; i++) {
        s = s * 1664525u + 1013904223u;
        float v = (float)((int32_t)(s >> 8) - (1 << 23)) * 1e-8f;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        double d = v;
        uint16_t h = e == CK_ELEM_F16 ? to_half(v) : (uint16_t)(bits >> 16);
        uint32_t w = s * 2654435761u;
        memcpy(p + size * i, e == CK_ELEM_F32 ? (void *)&v : e == CK_ELEM_F64 ? (void *)&d
               : e == CK_ELEM_F16 || e == CK_ELEM_BF16 ? (void *)&h : (void *)&w, size);
    }
}

int main(int argc, char **argv)
{
    size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
    size_t chunk = (size_t)(argc > 2 ? atoi(argv[2]) : 4096) << 10;
    static const struct { const char *name; ck_elem e; } types[] = {
        {"float32", CK_ELEM_F32}, {"float16", CK_ELEM_F16}, {"bfloat16", CK_ELEM_BF16},
        {"float64", CK_ELEM_F64}, {"int8", CK_ELEM_I8}, {"uint16", CK_ELEM_U16},
        {"int32", CK_ELEM_I32}};
    static const char *isa_name[] = {"generic", "avx2", "avx512"};
    unsigned char *buf = malloc(chunk);
    if (buf == NULL || total < chunk || chunk < 8)
        return 2;
    printf("# %zu MiB in pieces of %zu KiB; CPU ms (GB/s), best of %d\n", total >> 20,
           chunk >> 10, REPS);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        ck_elem e = types[t].e;
        size_t n = chunk / ck_elem_size(e);
        fill(e, buf, chunk);
        printf("%-9s", types[t].name);
        double mean0 = 0, std0 = 0;
        bool alike = true;
        for (int isa = 0; isa <= (int)ck_stats_isa_best(); isa++) {
            double best = 1e9;
            ck_stats s;
            for (int r = 0; r < REPS; r++) {
                double t0 = cpu_now();
                ck_stats_init(&s);
                for (size_t done = 0; done + chunk <= total; done += chunk)
                    ck_stats_add_isa(&s, e, buf, n, (ck_stats_isa)isa);
                double dt = cpu_now() - t0;
                best = dt < best ? dt : best;
            }
            printf("  %s %6.1f (%5.1f)", isa_name[isa], best * 1e3,
                   (double)total / best / 1e9);
            double mean = ck_stats_mean(&s), std = ck_stats_std(&s);
            if (isa == 0) {
                mean0 = mean;
                std0 = std;
            }
            alike &= fabs(mean - mean0) <= 1e-9 * fmax(fabs(mean0), std0) &&
                     fabs(std - std0) <= 1e-9 * std0;
        }
        printf("  mean %.9g std %.9g%s\n", mean0, std0, alike ? "" : " (they differ)");
    }
    free(buf);
    return 0;
}
