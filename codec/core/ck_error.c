/* SPDX-License-Identifier: Apache-2.0 */
#include "ck_error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The message is one line whatever went into it: a path or a name taken
 * from a file unquoted (a DCP item's relative_path, found by the fuzzer)
 * may hold a newline or another control byte; each becomes '?'.  Names
 * meant to be read go through ck_quote, which spells them \xNN. */
static void one_line(char *msg)
{
    for (unsigned char *p = (unsigned char *)msg; *p != '\0'; p++)
        if (*p < 0x20 || *p == 0x7f)
            *p = '?';
}

static void vfill(ck_error *err, int errnum, const char *fmt, va_list ap)
{
    err->errnum = errnum;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    one_line(err->msg);
}

int ck_fail(ck_error *err, int errnum, const char *fmt, ...)
{
    if (err == NULL)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vfill(err, errnum, fmt, ap);
    va_end(ap);
    return -1;
}

int ck_nomem(ck_error *err, const char *what)
{
    return ck_fail(err, ENOMEM, "%s: out of memory", what);
}

int ck_fail_errno(ck_error *err, int errno_value, const char *fmt, ...)
{
    if (err == NULL)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vfill(err, errno_value, fmt, ap);
    va_end(ap);
    size_t used = strlen(err->msg);
    snprintf(err->msg + used, sizeof err->msg - used, ": %s", strerror(errno_value));
    one_line(err->msg + used);
    return -1;
}

void ck_error_clear(ck_error *err)
{
    if (err == NULL)
        return;
    err->errnum = 0;
    err->msg[0] = '\0';
}

const char *ck_quote(char out[CK_QUOTE_BUF], const void *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = s;
    size_t n = 0;
    for (size_t i = 0; i < len && i < CK_QUOTE_MAX; i++) {
        unsigned char c = p[i];
        /* UTF-8 names stay readable; control bytes could break the line. */
        if ((c >= 0x20 && c != 0x7f && c != '\\')) {
            out[n++] = (char)c;
        } else {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    if (len > CK_QUOTE_MAX) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}
