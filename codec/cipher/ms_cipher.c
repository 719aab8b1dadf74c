/* SPDX-License-Identifier: Apache-2.0 */
#include "ms_cipher.h"
#include "../core/le_bytes.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

const char *ck_cipher_mode_name(ck_cipher_mode mode)
{
    return mode == CK_AES_GCM ? "AES-GCM" : "AES-CBC";
}

int ck_cipher_mode_parse(const char *name)
{
    if (strcasecmp(name, "AES-GCM") == 0)
        return CK_AES_GCM;
    if (strcasecmp(name, "AES-CBC") == 0)
        return CK_AES_CBC;
    return -1;
}

/* Field offsets after the magic (and the tag). */
static size_t fields_at(ck_ms_layout l)
{
    return l.mode == CK_AES_GCM && !l.legacy ? 4 + CK_MS_TAG_LEN : 4;
}

size_t ck_ms_header_len(ck_ms_layout l)
{
    return fields_at(l) + 4 + 4 + CK_MS_IV_LEN + 4;
}

/* block_size == 4 + iv_len + 4 + cipher_len with iv_len 16, as MindSpore's
 * ParseEncryptData requires. */
static bool fields_agree(const unsigned char *f)
{
    uint32_t block_size = ck_le32(f), iv_len = ck_le32(f + 4);
    uint32_t cipher_len = ck_le32(f + 8 + CK_MS_IV_LEN);
    return iv_len == CK_MS_IV_LEN && cipher_len <= INT32_MAX - 24 &&
           block_size == 24 + cipher_len;
}

int ck_ms_detect(const unsigned char *head, size_t n, const char *path, ck_ms_layout *l,
                 ck_error *err)
{
    if (n < 4)
        return 0;
    switch (ck_le32(head)) {
    case CK_MS_MAGIC_GCM:
        /* Both layouts share this magic: the header that adds up tells
         * them apart (a tag that happens to add up: 2^-64). */
        if (n >= ck_ms_header_len((ck_ms_layout){CK_AES_GCM, false}) &&
            fields_agree(head + 4 + CK_MS_TAG_LEN)) {
            *l = (ck_ms_layout){CK_AES_GCM, false};
            return 1;
        }
        if (n >= ck_ms_header_len((ck_ms_layout){CK_AES_GCM, true}) && fields_agree(head + 4)) {
            *l = (ck_ms_layout){CK_AES_GCM, true};
            return 1;
        }
        return ck_fail(err, EINVAL, "%s: offset 0: encrypted MindSpore model (AES-GCM magic "
                       "0x7F3A5ED8) whose first block header is inconsistent (truncated or "
                       "damaged)", path);
    case CK_MS_MAGIC_CBC:
        *l = (ck_ms_layout){CK_AES_CBC, false};
        return 1;
    case CK_MS_MAGIC_SM4:
        return ck_fail(err, ENOTSUP, "%s: offset 0: encrypted MindSpore model in SM4-CBC "
                       "(magic 0x7F3A5EDA); only AES-GCM and AES-CBC are supported", path);
    }
    return 0;
}

int ck_ms_parse_header(const unsigned char *h, ck_ms_layout l, uint64_t off, uint64_t file_size,
                       uint32_t index, const char *path, ck_ms_block *b, ck_error *err)
{
    size_t hl = ck_ms_header_len(l);
    if (file_size - off < hl)
        return ck_fail(err, EINVAL, "%s: block %u at offset %llu: truncated header (%llu bytes "
                       "left, %zu needed)", path, index, (unsigned long long)off,
                       (unsigned long long)(file_size - off), hl);
    if (ck_le32(h) != ck_ms_magic(l.mode))
        return ck_fail(err, EINVAL, "%s: block %u at offset %llu: magic 0x%08X, not %s's "
                       "0x%08X", path, index, (unsigned long long)off, ck_le32(h),
                       ck_cipher_mode_name(l.mode), ck_ms_magic(l.mode));
    const unsigned char *f = h + fields_at(l);
    if (!fields_agree(f))
        return ck_fail(err, EINVAL, "%s: block %u at offset %llu: inconsistent header "
                       "(block_size %d, iv_len %d, cipher_len %d)", path, index,
                       (unsigned long long)off, (int32_t)ck_le32(f), (int32_t)ck_le32(f + 4),
                       (int32_t)ck_le32(f + 8 + CK_MS_IV_LEN));
    uint32_t len = ck_le32(f + 8 + CK_MS_IV_LEN);
    uint64_t max = l.legacy ? CK_MS_LEGACY_BLOCK_MAX : CK_MS_BLOCK_MAX;
    if (l.mode == CK_AES_CBC)
        max += CK_MS_AES_BLOCK; /* a full block of padding */
    if (len > max)
        return ck_fail(err, EINVAL, "%s: block %u at offset %llu: %u bytes of ciphertext, over "
                       "the %llu a block holds", path, index, (unsigned long long)off, len,
                       (unsigned long long)max);
    if (l.mode == CK_AES_CBC && (len == 0 || len % CK_MS_AES_BLOCK != 0))
        return ck_fail(err, EINVAL, "%s: block %u at offset %llu: AES-CBC ciphertext of %u "
                       "bytes, not a positive multiple of 16", path, index,
                       (unsigned long long)off, len);
    if (len > file_size - off - hl)
        return ck_fail(err, EINVAL, "%s: block %u at offset %llu: %u bytes of ciphertext, past "
                       "the end of the file (truncated?)", path, index, (unsigned long long)off,
                       len);
    *b = (ck_ms_block){.off = off, .cipher_off = off + hl, .cipher_len = len};
    memcpy(b->iv, f + 8, CK_MS_IV_LEN);
    if (fields_at(l) > 4)
        memcpy(b->tag, h + 4, CK_MS_TAG_LEN);
    return 0;
}

void ck_ms_put_header(unsigned char *h, ck_ms_layout l, const ck_ms_block *b)
{
    ck_put_le32(h, ck_ms_magic(l.mode));
    if (fields_at(l) > 4)
        memcpy(h + 4, b->tag, CK_MS_TAG_LEN);
    unsigned char *f = h + fields_at(l);
    ck_put_le32(f, 24 + b->cipher_len);
    ck_put_le32(f + 4, CK_MS_IV_LEN);
    memcpy(f + 8, b->iv, CK_MS_IV_LEN);
    ck_put_le32(f + 8 + CK_MS_IV_LEN, b->cipher_len);
}

const EVP_CIPHER *ck_ms_block_cipher(ck_cipher_mode mode, size_t key_len)
{
    if (mode == CK_AES_GCM)
        return key_len == 16 ? EVP_aes_128_gcm() : key_len == 24 ? EVP_aes_192_gcm()
                                                                 : EVP_aes_256_gcm();
    return key_len == 16 ? EVP_aes_128_cbc() : key_len == 24 ? EVP_aes_192_cbc()
                                                             : EVP_aes_256_cbc();
}

const EVP_CIPHER *ck_ms_piece_cipher(ck_cipher_mode mode, bool legacy, size_t key_len)
{
    if (mode == CK_AES_GCM || legacy)
        return key_len == 16 ? EVP_aes_128_ctr() : key_len == 24 ? EVP_aes_192_ctr()
                                                                 : EVP_aes_256_ctr();
    return ck_ms_block_cipher(CK_AES_CBC, key_len);
}

void ck_ms_gcm_counter(const unsigned char iv[CK_MS_IV_LEN], uint64_t at, unsigned char out[16])
{
    /* Blocks hold under 2^32 counter values, so GCM's 32-bit increment
     * and OpenSSL CTR's 128-bit one agree. */
    uint32_t ctr = (uint32_t)(2 + at / CK_MS_AES_BLOCK);
    memcpy(out, iv, CK_MS_GCM_NONCE_LEN);
    out[12] = (unsigned char)(ctr >> 24);
    out[13] = (unsigned char)(ctr >> 16);
    out[14] = (unsigned char)(ctr >> 8);
    out[15] = (unsigned char)ctr;
}
