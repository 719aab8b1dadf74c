/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_str: a `.ckpt` str value's UTF-32LE to UTF-8 and back
 * (ckpt_str.h), for the reader and the writer alike.
 */
#include "ckpt_str.h"

#include <string.h>

#include "../core/le_bytes.h"

/* Whether code point c is a character: not past U+10FFFF, not a
 * surrogate. */
static bool is_char(uint32_t c)
{
    return c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
}

/* c (a character) as UTF-8 at p; returns its length. */
static size_t put_utf8(unsigned char *p, uint32_t c)
{
    if (c < 0x80) {
        p[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        p[0] = (unsigned char)(0xC0 | c >> 6);
        p[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        p[0] = (unsigned char)(0xE0 | c >> 12);
        p[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        p[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    p[0] = (unsigned char)(0xF0 | c >> 18);
    p[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    p[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    p[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* The UTF-8 sequence at p, left bytes there: its character in *c and its
 * length; 0 when it is not one. */
static size_t get_utf8(const unsigned char *p, uint64_t left, uint32_t *c)
{
    unsigned char b = p[0];
    int extra = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2
              : (b & 0xF8) == 0xF0 ? 3 : -1;
    if (extra < 0 || (uint64_t)extra >= left)
        return 0;
    uint32_t cp = extra == 0 ? b : extra == 1 ? b & 0x1F : extra == 2 ? b & 0x0F : b & 0x07;
    for (int k = 1; k <= extra; k++) {
        if ((p[k] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[k] & 0x3F);
    }
    /* The shortest form only: an overlong one could hide any byte. */
    static const uint32_t min_of[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_of[extra] || !is_char(cp))
        return 0;
    *c = cp;
    return 1 + (size_t)extra;
}

bool ck_ckpt_str_decode(const unsigned char *u32, uint64_t nchars, unsigned char *u8,
                        size_t *len, uint32_t *bad, uint64_t *bad_at)
{
    while (nchars > 0 && memcmp(u32 + 4 * (nchars - 1), "\0\0\0\0", 4) == 0)
        nchars--;
    size_t n = 0;
    for (uint64_t i = 0; i < nchars; i++) {
        uint32_t c = ck_le32(u32 + 4 * i);
        if (!is_char(c)) {
            *bad = c;
            *bad_at = i;
            return false;
        }
        n += put_utf8(u8 + n, c);
    }
    *len = n;
    return true;
}

bool ck_ckpt_str_encode(const unsigned char *u8, uint64_t len, unsigned char *u32,
                        uint64_t *out_len)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < len;) {
        uint32_t c;
        size_t k = get_utf8(u8 + i, len - i, &c);
        if (k == 0)
            return false;
        ck_put_le32(u32 + n, c);
        n += 4;
        i += k;
    }
    if (n == 0) {
        memset(u32, 0, 4);
        n = 4;
    }
    *out_len = n;
    return true;
}
