/* SPDX-License-Identifier: Apache-2.0 */
/*
 * le_bytes: little-endian integers in byte buffers, as the wrapping formats
 * store them (MindSpore's encrypted block headers, zstd's seek table, the
 * safetensors header's length), and the elements ckptfs-stat sums.
 */
#ifndef CK_LE_BYTES_H
#define CK_LE_BYTES_H

#include <stdint.h>

static inline uint16_t ck_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t ck_le32(const unsigned char *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ck_le64(const unsigned char *p)
{
    return ck_le32(p) | (uint64_t)ck_le32(p + 4) << 32;
}

static inline void ck_put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline void ck_put_le64(unsigned char *p, uint64_t v)
{
    ck_put_le32(p, (uint32_t)v);
    ck_put_le32(p + 4, (uint32_t)(v >> 32));
}

#endif
