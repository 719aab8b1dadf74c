/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decimal: the one parser of the decimal numbers in names ckptfs reads
 * (a checkpoint's epoch and step, rank_<id>, iteration_<N>, a shard
 * file's index, a pipeline stage).
 */
#ifndef CK_DECIMAL_H
#define CK_DECIMAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* len > 0 digits and nothing else, whose value fits, into *v. */
static inline bool ck_decimal(const char *s, size_t len, uint64_t *v)
{
    uint64_t x = 0;
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - 9) / 10)
            return false;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return true;
}

#endif
