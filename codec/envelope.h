/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envelope: the layer a model file may be wrapped in, around the bytes the
 * format readers parse: MindSpore's encryption (AES-GCM or AES-CBC blocks,
 * codec/cipher/ms_cipher.h) or zstd compression (codec/zstd/zstd_source.h).
 *
 * ck_envelope_open() recognises the wrapping by the file's leading bytes and
 * turns the file's source into a source of its plaintext; the readers never
 * know.  The envelope it describes is also what a save writes back
 * (export/wrap_writer.h): the same mode and key, or the seekable zstd
 * format.
 */
#ifndef CK_ENVELOPE_H
#define CK_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/byte_source.h"
#include "core/ck_error.h"
#include "cipher/key.h"
#include "cipher/ms_cipher.h"
#include "core/page_cache.h"

typedef enum ck_wrap {
    CK_WRAP_NONE,
    CK_WRAP_CIPHER,
    CK_WRAP_ZSTD,
} ck_wrap;

typedef struct ck_envelope {
    ck_wrap wrap;
    ck_cipher_mode mode;        /* CK_WRAP_CIPHER */
    bool legacy;                /* v1.3-1.6 layout (GCM without tag): read-only */
    bool seekable;              /* CK_WRAP_ZSTD: the file has a seek table */
    int zstd_level;             /* CK_WRAP_ZSTD: the level a save uses */
    bool zstd_sums;             /* CK_WRAP_ZSTD: the seek table has checksums (a save keeps them) */
    ck_key key;                 /* CK_WRAP_CIPHER */
    bool fresh;                 /* not wrapped on disk yet: the next save wraps it */
} ck_envelope;

/* What the user asked for: a key, and the mode a plain model gets on save. */
typedef struct ck_envelope_opts {
    const ck_key *key;          /* NULL or len 0: none given */
    bool key_if_encrypted;      /* else a key given for a plain file is refused */
    bool encrypt;               /* -o enc_mode was given: */
    ck_cipher_mode enc_mode;    /* the mode a plain model is encrypted with on save */
    int zstd_level;             /* 0: the default */
    uint64_t tmp_max;           /* non-seekable zstd: bound in $TMPDIR (0: the default) */
    ck_page_cache *cache;       /* decoded pages of every wrapped source */
} ck_envelope_opts;

#define CK_ZSTD_LEVEL_DEFAULT 3

/* Look at file's first bytes.  A plain file is returned as it is; a
 * wrapped one is replaced by the source of its plaintext (which owns file
 * from then on).  Fills env for the save.  On failure file is closed and
 * err says why in one line ("encrypted (AES-GCM); give -o key_file=...",
 * the block that fails to authenticate, ...). */
ck_source *ck_envelope_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                            ck_error *err);

#endif
