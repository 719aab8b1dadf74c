/* SPDX-License-Identifier: Apache-2.0 */
#include "dir_name.h"

#include <stdio.h>
#include <string.h>

#include "name_map.h"

#define HASH_SUFFIX_LEN 18 /* "%~" + 16 hex digits */
#define ESCAPE_BUF (3 * 4096 + 16)

static const char snapshot_done[] = "snapshot_done";

static int needs_escape(const char *name, size_t len, size_t i)
{
    unsigned char c = (unsigned char)name[i];
    if (c == '/' || c == '%' || c == '\0')
        return 1;
    if (i == 0 && c == '.')
        return 1;
    if (i == 0 && len == sizeof snapshot_done - 1 && memcmp(name, snapshot_done, len) == 0)
        return 1;
    return 0;
}

/* Escape into buf (cap bytes); returns the full escaped length even when it
 * did not fit, so callers know to shorten. */
static size_t escape(const char *name, size_t len, char *buf, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    if (len == 0) {
        if (cap > 0)
            buf[0] = '%';
        return 1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (needs_escape(name, len, i)) {
            if (n + 3 <= cap) {
                buf[n] = '%';
                buf[n + 1] = hex[c >> 4];
                buf[n + 2] = hex[c & 15];
            }
            n += 3;
        } else {
            if (n < cap)
                buf[n] = (char)c;
            n++;
        }
    }
    return n;
}

/* Largest cut <= want that splits neither a %XX escape nor a UTF-8 char. */
static size_t safe_cut(const char *s, size_t want)
{
    size_t p = want;
    while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80)
        p--;
    if (p >= 1 && s[p - 1] == '%')
        p -= 1;
    else if (p >= 2 && s[p - 2] == '%')
        p -= 2;
    return p;
}

size_t ck_dir_name(const char *name, size_t len, const char *suffix,
                   char out[CK_DIR_NAME_MAX + 1])
{
    char buf[ESCAPE_BUF];
    size_t suffix_len = suffix ? strlen(suffix) : 0;
    size_t full = escape(name, len, buf, sizeof buf);
    if (full + suffix_len <= CK_DIR_NAME_MAX) {
        memcpy(out, buf, full);
        memcpy(out + full, suffix ? suffix : "", suffix_len);
        out[full + suffix_len] = '\0';
        return full + suffix_len;
    }
    /* Too long: keep a readable prefix and make it unique with a hash.  The
     * prefix lies within buf even when the escape was cut short. */
    size_t keep = safe_cut(buf, CK_DIR_NAME_MAX - HASH_SUFFIX_LEN - suffix_len);
    memcpy(out, buf, keep);
    snprintf(out + keep, HASH_SUFFIX_LEN + 1, "%%~%016llx",
             (unsigned long long)ck_fnv1a64(name, len));
    memcpy(out + keep + HASH_SUFFIX_LEN, suffix ? suffix : "", suffix_len);
    out[keep + HASH_SUFFIX_LEN + suffix_len] = '\0';
    return keep + HASH_SUFFIX_LEN + suffix_len;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

long ck_dir_name_decode(const char *dir, size_t len, char *out, size_t cap)
{
    if (len == 1 && dir[0] == '%')
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = dir[i];
        if (c == '%') {
            if (i + 2 >= len)
                return -1;
            int hi = hexval(dir[i + 1]), lo = hexval(dir[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '/' || c == '\0' || (i == 0 && c == '.')) {
            return -1;
        }
        if (n >= cap)
            return -1;
        out[n++] = c;
    }
    /* Only the canonical escape of the reserved root name is accepted. */
    if (n == sizeof snapshot_done - 1 && memcmp(out, snapshot_done, n) == 0 &&
        memcmp(dir, snapshot_done, n) == 0)
        return -1;
    return (long)n;
}

bool ck_utf8_valid(const void *bytes, size_t n)
{
    const unsigned char *s = bytes;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t k = c < 0x80 ? 0 : c >= 0xc2 && c < 0xe0 ? 1 : c >= 0xe0 && c < 0xf0 ? 2
                 : c >= 0xf0 && c < 0xf5 ? 3 : 9;
        if (c == 0 || k == 9 || k > n - i - 1)
            return false;
        for (size_t j = 1; j <= k; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
        if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0) ||
            (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] >= 0x90))
            return false; /* overlong, surrogate, beyond U+10FFFF */
        i += k + 1;
    }
    return true;
}
