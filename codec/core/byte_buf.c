/* SPDX-License-Identifier: Apache-2.0 */
/* byte_buf: bytes written and read back, little-endian (byte_buf.h). */
#include "byte_buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "le_bytes.h"

void ck_wbuf_put(ck_wbuf *b, const void *data, size_t n)
{
    if (b->failed)
        return;
    if (n > SIZE_MAX / 4 - b->len || (b->max != 0 && b->len + n > b->max)) {
        b->failed = true; /* too large */
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, data, n);
    b->len += n;
}

void ck_wbuf_u64(ck_wbuf *b, uint64_t v)
{
    unsigned char x[8];
    ck_put_le64(x, v);
    ck_wbuf_put(b, x, 8);
}

void ck_wbuf_u32(ck_wbuf *b, uint32_t v)
{
    unsigned char x[4];
    ck_put_le32(x, v);
    ck_wbuf_put(b, x, 4);
}

void ck_wbuf_u8(ck_wbuf *b, uint8_t v)
{
    ck_wbuf_put(b, &v, 1);
}

const unsigned char *ck_rbuf_take(ck_rbuf *r, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = true;
        return NULL;
    }
    const unsigned char *at = r->p + r->pos;
    r->pos += n;
    return at;
}

uint64_t ck_rbuf_u64(ck_rbuf *r)
{
    const unsigned char *x = ck_rbuf_take(r, 8);
    return x != NULL ? ck_le64(x) : 0;
}

uint32_t ck_rbuf_u32(ck_rbuf *r)
{
    const unsigned char *x = ck_rbuf_take(r, 4);
    return x != NULL ? ck_le32(x) : 0;
}

uint8_t ck_rbuf_u8(ck_rbuf *r)
{
    const unsigned char *x = ck_rbuf_take(r, 1);
    return x != NULL ? x[0] : 0;
}

int ck_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ENOSPC;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
