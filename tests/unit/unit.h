/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the unit-test files share: the TAP check and the private temporary
 * directory (removed at the end by main).
 */
#ifndef CK_UNIT_H
#define CK_UNIT_H

#include <stdint.h>

extern char tmpdir[256];

/* xorshift64: the tests' reproducible random numbers, a stream per state. */
static inline uint64_t unit_xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void check(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One packed MindSpore Checkpoint message holding one tensor (a .ckpt is
 * such messages back to back), malloc'ed, *out_len bytes. */
unsigned char *unit_ckpt_value(const char *tag, const char *type, const int64_t *dims,
                               size_t ndim, const void *content, size_t len, size_t *out_len);

void test_zstd(void);
void test_stats(void);
void test_pickle(void);
void test_stats_blocks(void);
void test_direct_out(void);
void test_tree(void);
void test_saved_index(void);
void test_gather(void);
void test_shards(void);
void test_progress(void);
void test_view(void);
void test_run_dir(void);
void test_envelope_args(void);
void test_mount_ops(void);
void test_map(void);

#endif
