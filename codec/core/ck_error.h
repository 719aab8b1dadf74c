/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ck_error: the one error type of ckptfs.
 *
 * Every layer below the FUSE edge reports failure by filling a ck_error
 * with an errno class (what the FUSE front-end will eventually reply) and a
 * one-line, human-readable message that names the file and the byte offset
 * or the tensor.  Only mount/ turns it into an errno; the command line prints
 * the message as is.
 */
#ifndef CK_ERROR_H
#define CK_ERROR_H

#include <stddef.h>

#define CK_ERROR_MSG_MAX 512

typedef struct ck_error {
    int errnum;                     /* errno class: EINVAL, EIO, ENOMEM... */
    char msg[CK_ERROR_MSG_MAX];     /* one line, no trailing newline */
} ck_error;

/* Fill err (if not NULL) and return -1, so callers can write
 * `return ck_fail(err, EINVAL, "...")`. */
int ck_fail(ck_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like ck_fail, with ": strerror(errno_value)" appended. */
int ck_fail_errno(ck_error *err, int errno_value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "WHAT: out of memory" (ENOMEM), WHAT naming the file being read or
 * written; returns -1 as ck_fail does. */
int ck_nomem(ck_error *err, const char *what);

void ck_error_clear(ck_error *err);

/* Names and strings read from a file go into messages through ck_quote:
 * control bytes and backslashes become \xNN and long ones are cut with
 * "...", so a message stays one readable line whatever the file holds. */
#define CK_QUOTE_MAX 96
#define CK_QUOTE_BUF (4 * CK_QUOTE_MAX + 8)
const char *ck_quote(char out[CK_QUOTE_BUF], const void *s, size_t len);

#endif
