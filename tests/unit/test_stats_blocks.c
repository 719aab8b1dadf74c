/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of tensor_stats' vector loops (stats_kernel): every
 * instruction set the CPU runs against a scalar reference written here,
 * element by element in long double, on the cases a vector loop can get
 * wrong: lengths around the vector widths and the block size, NaN and Inf
 * at every position of a block, subnormals, -0.0, tensors with no finite
 * value, buffers at odd addresses, a large mean beside a small spread.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/tensor_stats.h"
#include "unit.h"

/* A block of the vector loops (stats_kernel.h's CK_BLOCK), for the lengths
 * around it. */
#define BLOCK 2048

/* The reference: counts, and min, max, mean, M2 of the finite values. */
typedef struct ref {
    uint64_t finite, nan, posinf, neginf, zeros;
    long double min, max, mean, m2;
} ref;

/* Element i of p, decoded without tensor_stats' code: float16 by its
 * fields, bfloat16 as the upper half of a float32. */
static long double value(ck_elem e, const unsigned char *p, size_t i)
{
    size_t size = ck_elem_size(e);
    const unsigned char *q = p + i * size;
    uint32_t u32 = 0;
    uint16_t u16 = 0;
    float f;
    if (size == 2)
        memcpy(&u16, q, 2);
    if (size == 4)
        memcpy(&u32, q, 4);
    if (e == CK_ELEM_F64) {
        double d;
        memcpy(&d, q, 8);
        return d;
    }
    switch (e) {
    case CK_ELEM_F32:
        memcpy(&f, q, 4);
        return f;
    case CK_ELEM_BF16:
        u32 = (uint32_t)u16 << 16;
        memcpy(&f, &u32, 4);
        return f;
    case CK_ELEM_F16: {
        int exp = u16 >> 10 & 0x1f, frac = u16 & 0x3ff;
        long double v = exp == 0 ? ldexpl(frac, -24)
                      : exp == 31 ? (frac ? NAN : INFINITY) : ldexpl(1024 + frac, exp - 25);
        return u16 & 0x8000 ? -v : v;
    }
    case CK_ELEM_I8: return (int8_t)q[0];
    case CK_ELEM_U8: return q[0];
    case CK_ELEM_BOOL: return q[0] != 0;
    case CK_ELEM_I16: return (int16_t)u16;
    case CK_ELEM_U16: return u16;
    case CK_ELEM_I32: return (int32_t)u32;
    case CK_ELEM_U32: return u32;
    default: return NAN;
    }
}

static ref reference(ck_elem e, const unsigned char *p, size_t n)
{
    ref r = {.min = INFINITY, .max = -INFINITY};
    long double sum = 0;
    for (size_t i = 0; i < n; i++) {
        long double x = value(e, p, i);
        if (isnan(x)) {
            r.nan++;
        } else if (isinf(x)) {
            r.posinf += x > 0;
            r.neginf += x < 0;
        } else {
            r.finite++;
            r.zeros += x == 0;
            r.min = x < r.min ? x : r.min;
            r.max = x > r.max ? x : r.max;
            sum += x;
        }
    }
    r.mean = r.finite ? sum / r.finite : NAN;
    for (size_t i = 0; i < n && r.finite; i++) {
        long double x = value(e, p, i);
        if (isfinite(x))
            r.m2 += (x - r.mean) * (x - r.mean);
    }
    return r;
}

/* Whether s agrees with the reference: counts and extremes exactly; mean
 * within rel of the largest magnitude among them (as the numpy oracle
 * compares: a mean near 0 comes from cancellation), std within rel of
 * itself. */
static bool agrees(const ck_stats *s, const ref *r, size_t n, double rel)
{
    if (s->count != n || s->finite != r->finite || s->nan != r->nan ||
        s->posinf != r->posinf || s->neginf != r->neginf || s->zeros != r->zeros)
        return false;
    if (r->finite == 0)
        return isnan(ck_stats_mean(s)) && isnan(ck_stats_std(s));
    double std = (double)sqrtl(r->m2 / r->finite), got = ck_stats_std(s);
    double scale = fmax(fmax(fabs((double)r->min), fabs((double)r->max)), std);
    return s->min == (double)r->min && s->max == (double)r->max &&
           fabs(ck_stats_mean(s) - (double)r->mean) <= rel * scale &&
           (std > 0 ? fabs(got - std) <= rel * std : got <= 1e-15 * scale);
}

static const ck_elem TYPES[] = {CK_ELEM_F32, CK_ELEM_F16, CK_ELEM_BF16, CK_ELEM_F64, CK_ELEM_I8,
                                CK_ELEM_U8, CK_ELEM_BOOL, CK_ELEM_I16, CK_ELEM_U16,
                                CK_ELEM_I32, CK_ELEM_U32};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

/* Check n elements at p with every instruction set; on a disagreement,
 * say which on stderr (the TAP line says what was checked). */
static bool check_all(const char *what, ck_elem e, const unsigned char *p, size_t n,
                      double rel)
{
    ref r = reference(e, p, n);
    for (int isa = CK_STATS_GENERIC; isa <= (int)ck_stats_isa_best(); isa++) {
        ck_stats s;
        ck_stats_init(&s);
        ck_stats_add_isa(&s, e, p, n, (ck_stats_isa)isa);
        if (!agrees(&s, &r, n, rel)) {
            fprintf(stderr, "# %s: type %d, %zu elements, isa %d: finite %llu/%llu nan "
                    "%llu/%llu zeros %llu/%llu min %g/%g max %g/%g mean %.17g/%.17Lg "
                    "std %.17g/%.17g\n", what, (int)e, n, isa,
                    (unsigned long long)s.finite, (unsigned long long)r.finite,
                    (unsigned long long)s.nan, (unsigned long long)r.nan,
                    (unsigned long long)s.zeros, (unsigned long long)r.zeros, s.min,
                    (double)r.min, s.max, (double)r.max, ck_stats_mean(&s), r.mean,
                    ck_stats_std(&s), r.finite ? (double)sqrtl(r.m2 / r.finite) : NAN);
            return false;
        }
    }
    return true;
}

static uint32_t rnd(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* Element i of type e from a float32 value (integers from its bits). */
static void put(ck_elem e, unsigned char *p, size_t i, float v, uint32_t bits)
{
    size_t size = ck_elem_size(e);
    uint32_t u;
    memcpy(&u, &v, 4);
    if (e == CK_ELEM_F32) {
        memcpy(p + 4 * i, &v, 4);
    } else if (e == CK_ELEM_F64) {
        double d = (double)v + (double)bits * 0x1p-60; /* more than a float's digits */
        memcpy(p + 8 * i, &d, 8);
    } else if (e == CK_ELEM_BF16) {
        uint16_t h = (uint16_t)(u >> 16);
        memcpy(p + 2 * i, &h, 2);
    } else if (e == CK_ELEM_F16) {
        /* v in [-2, 2): a normal half, rounded toward zero */
        int exp = (int)(u >> 23 & 0xff) - 127 + 15;
        uint16_t h = (uint16_t)(u >> 16 & 0x8000);
        if (exp > 0)
            h |= (uint16_t)(exp << 10 | (u >> 13 & 0x3ff));
        memcpy(p + 2 * i, &h, 2);
    } else {
        memcpy(p + size * i, &bits, size);
    }
}

/* Random finite values of type e: a spread around an offset for floats,
 * every bit pattern for integers. */
static void fill(ck_elem e, unsigned char *p, size_t n, uint32_t seed, float offset)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b = rnd(&seed) * 2654435761u ^ rnd(&seed) << 20;
        put(e, p, i, offset + ((float)(b & 0xffff) / 65536.0f - 0.5f), b);
    }
}

static void test_lengths(void)
{
    static const size_t longer[] = {63, 64, 65, 127, 128, 129, BLOCK - 1, BLOCK, BLOCK + 1,
                                    2 * BLOCK + 17, 3 * BLOCK - 5};
    unsigned char *buf = malloc(8 * 3 * BLOCK + 64);
    bool ok = true;
    for (size_t t = 0; t < N_TYPES && ok; t++) {
        for (size_t n = 0; n <= 33 + 11 && ok; n++) {
            size_t len = n <= 33 ? n : longer[n - 34];
            for (size_t shift = 0; shift < 3 && ok; shift++) { /* at odd addresses too */
                fill(TYPES[t], buf + shift, len, (uint32_t)(len * 7 + t), 0.25f);
                ok = check_all("lengths", TYPES[t], buf + shift, len, 1e-12);
            }
        }
    }
    check(ok, "stats blocks: every type, lengths 0..33 and around 64, 128 and the block "
          "(2048), at odd addresses: every instruction set agrees with the scalar reference");
    free(buf);
}

/* Special value k (NaN, +Inf, -Inf, a negative quiet NaN, a signalling
 * NaN) of float type e at p. */
static void put_special(ck_elem e, unsigned char *p, int k)
{
    static const uint64_t f64[] = {0x7ff8000000000000, 0x7ff0000000000000,
                                   0xfff0000000000000, 0xfff8000000000001, 0x7ff0000000000001};
    static const uint32_t f32[] = {0x7fc00000, 0x7f800000, 0xff800000, 0xffc00001, 0x7f800001};
    static const uint16_t f16[] = {0x7e00, 0x7c00, 0xfc00, 0xfe01, 0x7c01};
    static const uint16_t bf16[] = {0x7fc0, 0x7f80, 0xff80, 0xffc1, 0x7f81};
    switch (e) {
    case CK_ELEM_F64: memcpy(p, &f64[k], 8); break;
    case CK_ELEM_F32: memcpy(p, &f32[k], 4); break;
    case CK_ELEM_F16: memcpy(p, &f16[k], 2); break;
    default: memcpy(p, &bf16[k], 2); break;
    }
}

/* NaN, +Inf and -Inf at each position of blocks of several lengths, alone
 * and beside each other. */
static void test_specials(void)
{
    static const ck_elem floats[] = {CK_ELEM_F32, CK_ELEM_F16, CK_ELEM_BF16, CK_ELEM_F64};
    static const size_t lens[] = {1, 7, 8, 16, 17, 33, 64, BLOCK + 3};
    unsigned char *buf = malloc(8 * (BLOCK + 3));
    bool ok = true;
    for (size_t t = 0; t < 4 && ok; t++) {
        ck_elem e = floats[t];
        size_t size = ck_elem_size(e);
        for (size_t l = 0; l < sizeof lens / sizeof lens[0] && ok; l++) {
            size_t n = lens[l];
            for (size_t i = 0; i < n && ok; i += n > 64 ? 97 : 1) {
                for (int k = 0; k < 5 && ok; k++) {
                    fill(e, buf, n, (uint32_t)(n + i), -0.5f);
                    put_special(e, buf + i * size, k);
                    ok = check_all("one special", e, buf, n, 1e-12);
                    if (ok && n > 1) { /* and another at the far end */
                        put_special(e, buf + (n - 1 - i % n) * size, (k + 1) % 5);
                        ok = check_all("two specials", e, buf, n, 1e-12);
                    }
                }
            }
        }
    }
    check(ok, "stats blocks: NaN (quiet, signalling, negative), +Inf and -Inf at every "
          "position of blocks of 1 to 64 elements and across a block of 2051, float32, "
          "float16, bfloat16, float64");
    free(buf);
}

static void test_no_finite(void)
{
    unsigned char *buf = malloc(4 * (BLOCK + 40));
    bool ok = true;
    for (size_t n = 1; n <= 40 && ok; n += n < 33 ? 1 : 7) {
        for (int kind = 0; kind < 3 && ok; kind++) { /* all NaN, all +Inf, mixed */
            for (size_t i = 0; i < n; i++) {
                float v = kind == 0 ? NAN : kind == 1 ? INFINITY : i % 3 ? -INFINITY : NAN;
                put(CK_ELEM_F32, buf, i, v, 0);
            }
            ok = check_all("no finite f32", CK_ELEM_F32, buf, n, 1e-12);
            for (size_t i = 0; i < n && ok; i++) {
                uint16_t h = kind == 0 ? 0x7e00 : kind == 1 ? 0x7c00 : i % 3 ? 0xfc00 : 0xfe00;
                memcpy(buf + 2 * i, &h, 2);
            }
            ok = ok && check_all("no finite f16", CK_ELEM_F16, buf, n, 1e-12);
            for (size_t i = 0; i < n && ok; i++) /* NaN, +Inf, -Inf, negative NaN */
                put_special(CK_ELEM_F64, buf + 8 * i, kind < 2 ? kind : i % 3 ? 2 : 3);
            ok = ok && check_all("no finite f64", CK_ELEM_F64, buf, n, 1e-12);
        }
    }
    for (size_t i = 0; i < BLOCK + 40; i++)
        put(CK_ELEM_F32, buf, i, NAN, 0);
    ok = ok && check_all("no finite, a block", CK_ELEM_F32, buf, BLOCK + 40, 1e-12);
    check(ok, "stats blocks: tensors of only NaN, only +Inf, only non-finite values (1 to "
          "40 elements, and a block and more): counted, no min, mean or std");
    free(buf);
}

static void test_zeros_and_subnormals(void)
{
    unsigned char buf[4 * 64];
    bool ok = true;
    /* -0.0 and +0.0 at every position, counted as zeros */
    for (size_t n = 1; n <= 40 && ok; n++) {
        for (size_t i = 0; i < n && ok; i++) {
            fill(CK_ELEM_F32, buf, n, (uint32_t)n, 1.0f);
            put(CK_ELEM_F32, buf, i, -0.0f, 0);
            put(CK_ELEM_F32, buf, (i * 5) % n, 0.0f, 0);
            ok = check_all("zeros f32", CK_ELEM_F32, buf, n, 1e-12);
            uint16_t neg0 = 0x8000, pos0 = 0;
            for (int t = 0; t < 2 && ok; t++) {
                ck_elem e = t ? CK_ELEM_F16 : CK_ELEM_BF16;
                fill(e, buf, n, (uint32_t)n, 1.0f);
                memcpy(buf + 2 * i, &neg0, 2);
                memcpy(buf + 2 * ((i * 5) % n), &pos0, 2);
                ok = check_all("zeros", e, buf, n, 1e-12);
            }
        }
    }
    check(ok, "stats blocks: -0.0 and +0.0 at every position counted as zeros (float32, "
          "bfloat16, float16)");
    /* float32 subnormals, alone and beside normal values */
    ok = true;
    for (size_t n = 1; n <= 64 && ok; n++) {
        uint32_t seed = (uint32_t)n;
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = (rnd(&seed) & 0x007fffff) | (i % 2 ? 0x80000000u : 0);
            if (i % 7 == 3)
                bits = 0x3f800000; /* 1.0 */
            memcpy(buf + 4 * i, &bits, 4);
        }
        ok = check_all("f32 subnormals", CK_ELEM_F32, buf, n, 1e-12);
    }
    /* every float16 subnormal pattern, both signs, in runs of 64 */
    uint16_t h[64];
    for (unsigned base = 0; base < 0x800 && ok; base += 64) {
        for (unsigned i = 0; i < 64; i++)
            h[i] = (uint16_t)(((base + i) & 0x3ff) | ((base + i) & 0x400 ? 0x8000 : 0));
        ok = check_all("f16 subnormals", CK_ELEM_F16, (unsigned char *)h, 64, 1e-12);
    }
    check(ok, "stats blocks: float32 and float16 subnormals widened and summed exactly");
}

/* The extremes of every integer type, and a mean far from 0 beside a
 * small spread (the one-pass shifted sums of the float blocks). */
static void test_ranges(void)
{
    bool ok = true;
    int8_t i8[40];
    uint8_t u8[40];
    int16_t i16[40];
    uint16_t u16[40];
    int32_t i32[40];
    uint32_t u32[40];
    for (size_t n = 1; n <= 40 && ok; n++) {
        for (size_t i = 0; i < n; i++) {
            i8[i] = i % 2 ? INT8_MIN : INT8_MAX;
            u8[i] = i % 3 ? UINT8_MAX : 0;
            i16[i] = i % 2 ? INT16_MIN : INT16_MAX;
            u16[i] = i % 3 ? UINT16_MAX : 0;
            i32[i] = i % 2 ? INT32_MIN : INT32_MAX;
            u32[i] = i % 3 ? UINT32_MAX : 0;
        }
        ok = check_all("i8", CK_ELEM_I8, (unsigned char *)i8, n, 1e-14) &&
             check_all("u8", CK_ELEM_U8, u8, n, 1e-14) &&
             check_all("bool", CK_ELEM_BOOL, u8, n, 1e-14) &&
             check_all("i16", CK_ELEM_I16, (unsigned char *)i16, n, 1e-14) &&
             check_all("u16", CK_ELEM_U16, (unsigned char *)u16, n, 1e-14) &&
             check_all("i32", CK_ELEM_I32, (unsigned char *)i32, n, 1e-14) &&
             check_all("u32", CK_ELEM_U32, (unsigned char *)u32, n, 1e-14);
    }
    check(ok, "stats blocks: every integer type at its extremes, lengths 1 to 40");
    enum { N = 3 * BLOCK + 11 };
    float *f = malloc(N * sizeof *f);
    uint32_t seed = 99;
    ok = true;
    for (int first = 0; first < 3 && ok; first++) {
        for (size_t i = 0; i < N; i++)
            f[i] = 1e6f + (float)(rnd(&seed) % 1000) / 1024.0f;
        /* a first element far from the rest: the worst shift */
        f[0] = first == 0 ? f[0] : first == 1 ? 2e6f : -3e7f;
        ok = check_all("large mean", CK_ELEM_F32, (unsigned char *)f, N, 1e-11);
    }
    double *d = malloc(N * sizeof *d);
    for (int first = 0; first < 3 && ok; first++) {
        for (size_t i = 0; i < N; i++)
            d[i] = 1e9 + (double)(rnd(&seed) % 1000) / 1024.0;
        d[0] = first == 0 ? d[0] : first == 1 ? 2e9 : -3e10;
        ok = check_all("large mean f64", CK_ELEM_F64, (unsigned char *)d, N, 1e-11);
    }
    int32_t *w = malloc(N * sizeof *w);
    for (int first = 0; first < 3 && ok; first++) {
        for (size_t i = 0; i < N; i++)
            w[i] = 2000000000 + (int32_t)(rnd(&seed) % 3);
        w[0] = first == 0 ? w[0] : first == 1 ? 1000000000 : -2000000000;
        ok = check_all("large mean i32", CK_ELEM_I32, (unsigned char *)w, N, 1e-11);
    }
    free(w);
    check(ok, "stats blocks: a mean of 1e6 (float32), 1e9 (float64) or 2e9 (int32) beside "
          "a spread of about 1, the first element of the block far from the rest: std to "
          "1e-11");
    free(f);
    free(d);
}

void test_stats_blocks(void)
{
    test_lengths();
    test_specials();
    test_no_finite();
    test_zeros_and_subnormals();
    test_ranges();
}
