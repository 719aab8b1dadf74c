/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of a new sharded set's cut (safetensors_set_writer.h,
 * ck_st_shards_cut) against huggingface_hub's own expectations: the
 * state dicts and answers of its tests/test_serialization.py
 * (test_single_shard, test_multiple_shards, test_save_torch_state_dict_sharded)
 * and of split_state_dict_into_shards_factory's docstring; and of the
 * sizes -o max_shard_size takes (ck_parse_size), Hugging Face's "5GB"
 * decimal as its parse_size_to_int reads it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../codec/core/model.h"
#include "../../codec/safetensors/safetensors_set_writer.h"
#include "unit.h"

#define MAX_T 8

/* Cut tensors of these sizes at max; check each one's shard and the names. */
static void cut(const char *what, const uint64_t *sizes, size_t n, uint64_t max,
                const uint32_t *want, size_t want_shards)
{
    ck_model m = {.path = "unit"};
    ck_piece pieces[MAX_T] = {0};
    ck_write_tensor t[MAX_T] = {0};
    for (size_t i = 0; i < n; i++) {
        pieces[i] = (ck_piece){.mem = "", .len = sizes[i]};
        t[i] = (ck_write_tensor){.orig_id = CK_WRITE_NEW, .name = "t", .name_len = 1,
                                 .pieces = &pieces[i], .n_pieces = 1};
    }
    ck_st_shards s;
    ck_error err = {0};
    int rc = ck_st_shards_cut(&m, "file", t, n, max, &s, &err);
    check(rc == 0 && s.n == want_shards, "%s: %zu shards (want %zu) %s", what, s.n, want_shards,
          err.msg);
    bool same = rc == 0;
    for (size_t i = 0; same && i < n; i++)
        same = s.shard_of[i] == want[i];
    check(same, "%s: each tensor in huggingface_hub's shard", what);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += sizes[i];
    check(rc == 0 && s.total == total, "%s: total_size %llu", what,
          (unsigned long long)s.total);
    if (rc == 0 && s.n > 0) {
        char first[64], last[64];
        snprintf(first, sizeof first, "file-00001-of-%05zu.safetensors", s.n);
        snprintf(last, sizeof last, "file-%05zu-of-%05zu.safetensors", s.n, s.n);
        check(strcmp(s.names[0], first) == 0 && strcmp(s.names[s.n - 1], last) == 0,
              "%s: named %s ... %s", what, s.names[0], s.names[s.n - 1]);
    }
    ck_st_shards_free(&s);
}

static void test_cut(void)
{
    /* dummy_state_dict: layer_1..5 of 6, 10, 30, 2, 2 bytes */
    const uint64_t dummy[] = {6, 10, 30, 2, 2};
    /* test_multiple_shards, max 10: layer_1 | layer_3 | layer_2 | layer_4, layer_5; the
     * 30-byte layer_3 numbered before layer_2's shard, still open */
    cut("test_multiple_shards", dummy, 5, 10, (const uint32_t[]){0, 2, 1, 3, 3}, 4);
    /* test_single_shard, max 100: one */
    cut("test_single_shard", dummy, 5, 100, (const uint32_t[]){0, 0, 0, 0, 0}, 1);
    /* test_save_torch_state_dict_sharded: five int64 tensors, max 30 */
    const uint64_t i64[] = {8, 8, 8, 8, 8};
    cut("test_save_torch_state_dict_sharded", i64, 5, 30, (const uint32_t[]){0, 0, 0, 1, 1}, 2);
    /* the docstring: [6GB, 6GB, 2GB, 6GB, 2GB, 2GB] at 10GB -> [6], [6+2], [6+2+2] */
    const uint64_t doc[] = {6, 6, 2, 6, 2, 2};
    cut("the docstring's example", doc, 6, 10, (const uint32_t[]){0, 1, 1, 2, 2, 2}, 3);
    /* a tensor of exactly max fills a shard (only a larger one is alone); empty tensors
     * go with the open shard */
    const uint64_t edge[] = {10, 0, 1, 0, 10};
    cut("exact fits and empty tensors", edge, 5, 10, (const uint32_t[]){0, 0, 1, 1, 2}, 3);
    /* no overflow near 2^63, the most total_size (a JSON integer) holds */
    const uint64_t huge[] = {INT64_MAX / 2, INT64_MAX / 2};
    cut("sizes near 2^63", huge, 2, UINT64_MAX - 1, (const uint32_t[]){0, 0}, 1);
    cut("no tensors", NULL, 0, 10, NULL, 0);
    /* past it: refused, not wrapped */
    ck_model m = {.path = "unit"};
    ck_piece big[2] = {{.mem = "", .len = INT64_MAX}, {.mem = "", .len = 1}};
    ck_write_tensor t[2] = {{.orig_id = CK_WRITE_NEW, .pieces = &big[0], .n_pieces = 1},
                            {.orig_id = CK_WRITE_NEW, .pieces = &big[1], .n_pieces = 1}};
    ck_st_shards s;
    ck_error err = {0};
    check(ck_st_shards_cut(&m, "file", t, 2, 10, &s, &err) < 0 && err.errnum == EOVERFLOW,
          "a total past 2^63-1 refused: %s", err.msg);
    ck_st_shards_free(&s);
}

static void test_sizes(void)
{
    static const struct {
        const char *text;
        size_t want;            /* 0: refused */
    } cases[] = {
        {"5GB", 5000000000u}, {"1KB", 1000}, {"2MB", 2000000}, {"20mb", 20000000},
        {"50K", 51200}, {"16M", 16u << 20}, {"2G", 2ull << 30}, {"1T", 1ull << 40},
        {"1KiB", 1024}, {"3GiB", 3ull << 30}, {"1TB", 1000000000000ull}, {"123", 123},
        {"0", 0}, {"", 0}, {"-5", 0}, {"5XB", 0}, {"1.5GB", 0}, {"1ooKB", 0},
        {"99999999999999999999", 0}, {"20000000T", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = 0;
        int rc = ck_parse_size(cases[i].text, &got);
        check(cases[i].want == 0 ? rc < 0 : rc == 0 && got == cases[i].want,
              "size '%s': %s %zu", cases[i].text, rc < 0 ? "refused" : "read", got);
    }
}

void test_shards(void)
{
    test_cut();
    test_sizes();
}
