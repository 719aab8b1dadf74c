/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of tensor_stats: the statistics of ckptfs-stat, on buffers
 * whose answers are known by hand (or by a naive second computation in long
 * double), and the property the tool relies on: pieces merged in order give
 * the whole buffer's numbers, however the buffer was cut.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../codec/core/dtype.h"
#include "../../tools/tensor_stats.h"
#include "unit.h"

static bool close_to(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) || a == b;
}

static void test_floats(void)
{
    float v[] = {1.0f, -2.0f, 0.0f, -0.0f, NAN, INFINITY, -INFINITY, 4.0f};
    ck_stats s;
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_F32, v, 8);
    check(s.count == 8 && s.finite == 5 && s.nan == 1 && s.posinf == 1 && s.neginf == 1,
          "stats: float32 NaN and infinities counted apart from the finite values");
    check(s.zeros == 2, "stats: +0.0 and -0.0 both count as zeros");
    check(s.min == -2.0 && s.max == 4.0, "stats: min and max are of the finite values");
    check(ck_stats_mean(&s) == 0.6, "stats: mean of the finite values (3 / 5)");
    /* deviations 0.4 -2.6 -0.6 -0.6 3.4: squares sum to 19.2 */
    check(close_to(ck_stats_std(&s), sqrt(19.2 / 5), 1e-15), "stats: population std");
}

static void test_half_types(void)
{
    /* float16: 1.0, -2.5, smallest subnormal 2^-24, 65504, +Inf, NaN */
    uint16_t h[] = {0x3c00, 0xc100, 0x0001, 0x7bff, 0x7c00, 0x7e00};
    ck_stats s;
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_F16, h, 6);
    check(s.finite == 4 && s.posinf == 1 && s.nan == 1 && s.min == -2.5 && s.max == 65504.0,
          "stats: float16 decoded exactly, infinity and NaN recognised");
    check(ck_elem_value(CK_ELEM_F16, h, 2) == ldexp(1.0, -24),
          "stats: a float16 subnormal is widened exactly");
    /* bfloat16: 1.0, -3.0 (0xc040), -Inf (0xff80) */
    uint16_t b[] = {0x3f80, 0xc040, 0xff80};
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_BF16, b, 3);
    check(s.finite == 2 && s.neginf == 1 && s.min == -3.0 && s.max == 1.0 &&
          ck_stats_mean(&s) == -1.0, "stats: bfloat16 is the upper half of a float32");
}

static void test_integers(void)
{
    int64_t i64[] = {INT64_MIN, INT64_MAX, 0, -1};
    ck_stats s;
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_I64, i64, 4);
    check(s.imin == INT64_MIN && s.imax == INT64_MAX && s.zeros == 1 && s.nan == 0,
          "stats: int64 extremes kept exactly");
    uint64_t u64[] = {UINT64_MAX, 1, UINT64_MAX - 1};
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_U64, u64, 3);
    check(s.umin == 1 && s.umax == UINT64_MAX, "stats: uint64 extremes kept exactly");
    int8_t i8[] = {-128, 127, 5};
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_I8, i8, 3);
    check(s.imin == -128 && s.imax == 127 && s.min == -128 && ck_stats_mean(&s) == 4.0 / 3,
          "stats: int8 read as signed");
    unsigned char bools[] = {1, 0, 1, 1};
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_BOOL, bools, 4);
    check(s.imin == 0 && s.imax == 1 && s.zeros == 1 && ck_stats_mean(&s) == 0.75,
          "stats: bool as 0 and 1");
    uint16_t u16[] = {65535, 0};
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_U16, u16, 2);
    check(s.umax == 65535 && s.umin == 0 && ck_stats_mean(&s) == 32767.5,
          "stats: uint16 read as unsigned");
}

static void test_empty_and_nonfinite(void)
{
    ck_stats s;
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_F32, NULL, 0);
    check(s.count == 0 && isnan(ck_stats_mean(&s)) && isnan(ck_stats_std(&s)),
          "stats: no elements, no mean and no std");
    double d[] = {NAN, NAN};
    ck_stats_add(&s, CK_ELEM_F64, d, 2);
    check(s.count == 2 && s.finite == 0 && s.nan == 2 && isnan(ck_stats_mean(&s)),
          "stats: only NaN: counted, no mean");
    ck_stats t;
    ck_stats_init(&t);
    double one = 7.0;
    ck_stats_add(&t, CK_ELEM_F64, &one, 1);
    ck_stats_merge(&t, &s, CK_ELEM_F64);
    check(t.min == 7.0 && t.max == 7.0 && t.nan == 2 && ck_stats_std(&t) == 0,
          "stats: merging a piece with no finite values keeps the other's");
}

/* Merged pieces give the whole buffer's statistics, for every cut. */
static void test_merge(void)
{
    enum { N = 10007 };
    float *v = malloc(N * sizeof *v);
    uint32_t x = 12345;
    long double sum = 0, sq = 0;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = 1000.0f + (float)(x >> 8) / (float)(1 << 24); /* large mean, small spread */
        sum += v[i];
    }
    long double mean = sum / N;
    for (int i = 0; i < N; i++)
        sq += (v[i] - mean) * (v[i] - mean);
    double std = (double)sqrtl(sq / N);
    ck_stats whole;
    ck_stats_init(&whole);
    ck_stats_add(&whole, CK_ELEM_F32, v, N);
    check(close_to(ck_stats_mean(&whole), (double)mean, 1e-14) &&
          close_to(ck_stats_std(&whole), std, 1e-9),
          "stats: mean and std agree with a long double computation");
    size_t cuts[] = {1, 7, 1000, 4096, N};
    bool ok = true;
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        ck_stats s;
        ck_stats_init(&s);
        for (size_t at = 0; at < N; at += cuts[c]) {
            ck_stats p;
            ck_stats_init(&p);
            ck_stats_add(&p, CK_ELEM_F32, v + at, at + cuts[c] > N ? N - at : cuts[c]);
            ck_stats_merge(&s, &p, CK_ELEM_F32);
        }
        ok &= s.count == N && s.min == whole.min && s.max == whole.max &&
              close_to(ck_stats_mean(&s), ck_stats_mean(&whole), 1e-13) &&
              close_to(ck_stats_std(&s), ck_stats_std(&whole), 1e-9);
    }
    check(ok, "stats: pieces of 1, 7, 1000, 4096 elements merge to the whole's numbers");
    free(v);
}

static void test_hist(void)
{
    double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, NAN, INFINITY};
    ck_stats s;
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_F64, v, 13);
    double edges[6];
    uint64_t counts[5] = {0};
    ck_hist_edges(&s, 5, edges);
    check(edges[0] == 0 && edges[1] == 2 && edges[5] == 10, "hist: edges as numpy.linspace");
    ck_hist_add(counts, edges, 5, CK_ELEM_F64, v, 13);
    check(counts[0] == 2 && counts[1] == 2 && counts[2] == 2 && counts[3] == 2 &&
          counts[4] == 3, "hist: half-open bins, the last one closed, non-finite left out");
    double same[] = {3, 3, 3};
    ck_stats_init(&s);
    ck_stats_add(&s, CK_ELEM_F64, same, 3);
    ck_hist_edges(&s, 2, edges);
    uint64_t c2[2] = {0};
    ck_hist_add(c2, edges, 2, CK_ELEM_F64, same, 3);
    check(edges[0] == 2.5 && edges[2] == 3.5 && c2[0] == 0 && c2[1] == 3,
          "hist: a constant tensor's range is widened by 0.5 each side, as numpy does");
}

static void test_types(void)
{
    const ck_dtype *f32 = ck_dtype_from_mindspore("Float32", 7, 0);
    const ck_dtype *int4 = ck_dtype_from_mindspore("Int4", 4, 0);
    const ck_dtype *str = ck_dtype_from_mindspore("str", 3, 0);
    const ck_dtype *c64 = ck_dtype_from_mindspore("Complex64", 9, 0);
    unsigned bits;
    const ck_dtype *f8 = ck_dtype_from_safetensors("F8_E4M3", 7, &bits);
    const ck_dtype *u8 = ck_dtype_from_safetensors("U8", 2, &bits);
    check(ck_elem_of(f32) == CK_ELEM_F32 && ck_elem_of(u8) == CK_ELEM_U8,
          "stats: Float32 and U8 are numeric");
    check(ck_elem_of(int4) == CK_ELEM_NONE && ck_elem_of(str) == CK_ELEM_NONE &&
          ck_elem_of(c64) == CK_ELEM_NONE && ck_elem_of(f8) == CK_ELEM_NONE,
          "stats: Int4, str, Complex64 and F8_E4M3 are not numeric");
}

void test_stats(void)
{
    test_floats();
    test_half_types();
    test_integers();
    test_empty_and_nonfinite();
    test_merge();
    test_hist();
    test_types();
}
