/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_name: the reversible mapping between tensor names and directory names.
 *
 * A tensor name may hold any bytes; a directory name may not hold '/' or NUL,
 * may not be "." or "..", and should not shadow the root's `snapshot_done`.
 * Escaping (percent-encoding of exactly the bytes that need it):
 *   '/' -> %2F    '%' -> %25    NUL -> %00    leading '.' -> %2E
 *   the name "snapshot_done" -> %73napshot_done
 *   the empty name -> %
 * Every other byte is kept, so ordinary names read as themselves.  Because a
 * '%' in an escaped name is always followed by two hex digits, sequences such
 * as "%m" or "%~" never come out of escaping; ckptfs uses them for generated
 * names (map-tensor parts "%map.key", hash suffixes "%~...") that therefore
 * cannot collide with an escaped tensor name.
 *
 * An escaped name longer than 255 bytes (NAME_MAX) is cut to 237 bytes, not
 * splitting an escape or a UTF-8 character, and "%~" plus the 16 hex digits
 * of the 64-bit FNV-1a hash of the original name is appended; the full name
 * stays readable in the xattr user.ckptfs.name.
 */
#ifndef CK_DIR_NAME_H
#define CK_DIR_NAME_H

#include <stdbool.h>
#include <stddef.h>

#define CK_DIR_NAME_MAX 255

/* Write the directory name for (name, len) followed by `suffix` (may be
 * NULL) into out[CK_DIR_NAME_MAX + 1], NUL-terminated; returns its length. */
size_t ck_dir_name(const char *name, size_t len, const char *suffix,
                   char out[CK_DIR_NAME_MAX + 1]);

/* Reverse ck_dir_name for names it did not shorten: decode into out (at
 * most cap bytes).  Returns the decoded length, or -1 if dir is not a valid
 * escaped name (bad or generated escape, or a byte that escaping would have
 * encoded). */
long ck_dir_name_decode(const char *dir, size_t len, char *out, size_t cap);

/* Whether s[0..n) is UTF-8 as the Unicode standard defines it (no overlong
 * form, no surrogate, nothing past U+10FFFF) and holds no NUL. */
bool ck_utf8_valid(const void *s, size_t n);

#endif
