/* SPDX-License-Identifier: Apache-2.0 */
/*
 * key: the AES key of an encrypted model.
 *
 * A key never comes from the command line (it would show in ps and in the
 * shell's history): it is the raw bytes of a key file, or the hex in the
 * environment variable CKPTFS_KEY_HEX, which is erased from the
 * environment once read.  A key file must be the user's own regular file,
 * not a symbolic link, and neither readable nor writable by group or
 * others.  Its length picks the cipher: 16, 24 or 32 bytes for AES-128,
 * -192 or -256, as in MindSpore.  The bytes are wiped when done.
 */
#ifndef CK_KEY_H
#define CK_KEY_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/ck_error.h"

#define CK_KEY_ENV "CKPTFS_KEY_HEX"

typedef struct ck_key {
    unsigned char bytes[32];
    size_t len;                 /* 0: no key */
} ck_key;

/* From key_file when it is not NULL, else from CKPTFS_KEY_HEX.  Returns 1
 * with a key, 0 when neither was given, -1 (and err) when the one given is
 * unusable. */
int ck_key_load(const char *key_file, ck_key *key, ck_error *err);
void ck_key_wipe(ck_key *key);

#endif
