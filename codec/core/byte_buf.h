/* SPDX-License-Identifier: Apache-2.0 */
/*
 * byte_buf: bytes written into a growing buffer and read back with every
 * length checked, little-endian: the files ckptfs makes for itself (a
 * saved index, and the reader states inside it).
 *
 * A writer that fails (out of memory, or past its bound) only sets
 * `failed`: the caller checks once at the end.  A reader that runs past
 * its bytes sets `bad` and returns zeros from then on: the caller checks
 * once per record.
 */
#ifndef CK_BYTE_BUF_H
#define CK_BYTE_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ck_wbuf {
    unsigned char *p;           /* malloc'd: the caller's to free */
    size_t len, cap;
    size_t max;                 /* most bytes it may hold (0: no bound) */
    bool failed;
} ck_wbuf;

void ck_wbuf_put(ck_wbuf *b, const void *data, size_t n);
void ck_wbuf_u64(ck_wbuf *b, uint64_t v);
void ck_wbuf_u32(ck_wbuf *b, uint32_t v);
void ck_wbuf_u8(ck_wbuf *b, uint8_t v);

typedef struct ck_rbuf {
    const unsigned char *p;
    size_t len, pos;
    bool bad;
} ck_rbuf;

/* The next n bytes, or NULL (and bad) when fewer are left. */
const unsigned char *ck_rbuf_take(ck_rbuf *r, size_t n);
uint64_t ck_rbuf_u64(ck_rbuf *r);
uint32_t ck_rbuf_u32(ck_rbuf *r);
uint8_t ck_rbuf_u8(ck_rbuf *r);

/* Write len bytes to fd whole, through short writes and EINTR: the files
 * ckptfs writes out of a buffer (a saved index, a snapshot's meta, a
 * recovery directory's files).  0, or -1 with errno; a write that takes
 * nothing is ENOSPC rather than a loop. */
int ck_write_all(int fd, const void *buf, size_t len);

#endif
