/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ms_cipher: MindSpore's encrypted-file layout (mindspore/core/utils/
 * crypto.cc; facts in ../shared/reference/mindspore-formats.md section 3).
 *
 * The plaintext is cut into blocks of at most 64 MiB, each encrypted on its
 * own with a fresh 16-byte IV and stored as (little-endian int32 fields)
 *
 *   magic | tag[16] (AES-GCM only) | block_size | iv_len = 16 | iv[16] |
 *   cipher_len | cipher[cipher_len],   block_size = 24 + cipher_len
 *
 * AES-GCM uses only the first 12 IV bytes as its nonce (MindSpore's
 * EVP_EncryptInit_ex sequence resets the IV length to 12), no AAD, a
 * 16-byte tag.  AES-CBC uses the whole IV and PKCS#7 padding.  The v1.3-1.6
 * layout has no tag field and no tag: it is GCM's keystream without
 * authentication, with blocks of up to 512 MiB.
 *
 * Both modes decrypt from any 16-byte boundary of a block: GCM is a counter
 * mode (counter block = nonce || 2 + offset/16), and CBC plaintext block i
 * needs only cipher blocks i-1 and i.  That is what lets a read decrypt only
 * what it touches; only the GCM tag needs the whole block.
 */
#ifndef CK_MS_CIPHER_H
#define CK_MS_CIPHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>

#include "../core/ck_error.h"

#define CK_MS_MAGIC_GCM 0x7F3A5ED8u
#define CK_MS_MAGIC_CBC 0x7F3A5ED9u
#define CK_MS_MAGIC_SM4 0x7F3A5EDAu
#define CK_MS_IV_LEN 16
#define CK_MS_TAG_LEN 16
#define CK_MS_GCM_NONCE_LEN 12
#define CK_MS_AES_BLOCK 16
/* Plaintext per block: what MindSpore >= 1.7 writes and its loader's
 * buffer holds (64 MiB + 50), and what v1.3-1.6 wrote. */
#define CK_MS_BLOCK_MAX (64u << 20)
#define CK_MS_LEGACY_BLOCK_MAX (512u << 20)
/* The longest header: the GCM one. */
#define CK_MS_HEADER_MAX (4 + CK_MS_TAG_LEN + 4 + 4 + CK_MS_IV_LEN + 4)

typedef enum ck_cipher_mode {
    CK_AES_GCM,
    CK_AES_CBC,
} ck_cipher_mode;

const char *ck_cipher_mode_name(ck_cipher_mode mode);
/* "AES-GCM" or "AES-CBC" (any case) to a mode; -1 otherwise. */
int ck_cipher_mode_parse(const char *name);

typedef struct ck_ms_layout {
    ck_cipher_mode mode;
    bool legacy;                /* v1.3-1.6: GCM without a tag */
} ck_ms_layout;

typedef struct ck_ms_block {
    uint64_t off;               /* file offset of the block's magic */
    uint64_t cipher_off;        /* file offset of its ciphertext */
    uint32_t cipher_len;
    unsigned char iv[CK_MS_IV_LEN];
    unsigned char tag[CK_MS_TAG_LEN];   /* AES-GCM */
} ck_ms_block;

static inline uint32_t ck_ms_magic(ck_cipher_mode mode)
{
    return mode == CK_AES_GCM ? CK_MS_MAGIC_GCM : CK_MS_MAGIC_CBC;
}

size_t ck_ms_header_len(ck_ms_layout l);

/* Tell the layout from the first block's header (n bytes of it, n up to
 * CK_MS_HEADER_MAX).  Returns 1 for a MindSpore encrypted file, 0 for
 * anything else, -1 (err) for one ckptfs cannot read (SM4-CBC, or a header
 * neither layout explains). */
int ck_ms_detect(const unsigned char *head, size_t n, const char *path, ck_ms_layout *l,
                 ck_error *err);

/* Parse the header of block number index, read at file offset off, and
 * check it against the layout and the file's size. */
int ck_ms_parse_header(const unsigned char *h, ck_ms_layout l, uint64_t off, uint64_t file_size,
                       uint32_t index, const char *path, ck_ms_block *b, ck_error *err);
/* The header of b into h (ck_ms_header_len bytes). */
void ck_ms_put_header(unsigned char *h, ck_ms_layout l, const ck_ms_block *b);

/* The OpenSSL cipher for a whole block (GCM or CBC), and for decrypting a
 * piece of one (CTR for GCM, CBC without padding), by key length. */
const EVP_CIPHER *ck_ms_block_cipher(ck_cipher_mode mode, size_t key_len);
const EVP_CIPHER *ck_ms_piece_cipher(ck_cipher_mode mode, bool legacy, size_t key_len);

/* The counter block of GCM's keystream at byte `at` (a multiple of 16) of
 * a block: nonce || 2 + at/16, big-endian. */
void ck_ms_gcm_counter(const unsigned char iv[CK_MS_IV_LEN], uint64_t at, unsigned char out[16]);

#endif
