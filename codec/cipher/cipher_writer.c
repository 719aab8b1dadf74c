/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The encrypting wrap writer: MindSpore's block layout (codec/cipher/ms_cipher.h),
 * as MindSpore's own Encrypt() writes it: the plaintext cut from offset 0
 * into 64 MiB blocks, each with a fresh IV from RAND_bytes.
 *
 * A block's header holds its tag and its ciphertext length, which are known
 * only at its end; the ciphertext is streamed after a gap for the header,
 * which is filled in when the block is finished.  So memory is one buffer,
 * whatever the block size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/rand.h>

#include "cipher_writer.h"

#define OUT_BUF (1u << 20)

typedef struct cipher_writer {
    ck_wrap_writer base;        /* first */
    ck_ms_layout layout;
    ck_key key;
    EVP_CIPHER_CTX *ctx;
    bool in_block;
    ck_ms_block block;          /* the block being written */
    uint64_t block_plain;       /* its plaintext so far */
    unsigned char *out;         /* OUT_BUF + one AES block (CBC padding) */
} cipher_writer;

static int openssl_fail(cipher_writer *c, const char *what, ck_error *err)
{
    return ck_fail(err, EIO, "%s: OpenSSL failed to %s", c->base.path, what);
}

static int start_block(cipher_writer *c, ck_error *err)
{
    c->block = (ck_ms_block){.off = c->base.out_off};
    if (RAND_bytes(c->block.iv, CK_MS_IV_LEN) != 1)
        return openssl_fail(c, "make a random IV", err);
    /* GCM's default 12-byte nonce takes the first 12 IV bytes, as
     * MindSpore's does. */
    if (EVP_EncryptInit_ex(c->ctx, ck_ms_block_cipher(c->layout.mode, c->key.len), NULL,
                           c->key.bytes, c->block.iv) != 1)
        return openssl_fail(c, "start encrypting", err);
    c->block.cipher_off = c->base.out_off + ck_ms_header_len(c->layout);
    c->base.out_off = c->block.cipher_off;
    c->block_plain = 0;
    c->in_block = true;
    return 0;
}

static int put_cipher(cipher_writer *c, int n, ck_error *err)
{
    if (ck_wrap_pwrite(&c->base, c->out, (size_t)n, c->base.out_off, err) < 0)
        return -1;
    c->base.out_off += (uint64_t)n;
    c->block.cipher_len += (uint32_t)n;
    return 0;
}

static int end_block(cipher_writer *c, ck_error *err)
{
    int n;
    unsigned char h[CK_MS_HEADER_MAX];
    if (EVP_EncryptFinal_ex(c->ctx, c->out, &n) != 1)
        return openssl_fail(c, "finish a block", err);
    if (put_cipher(c, n, err) < 0)
        return -1;
    if (c->layout.mode == CK_AES_GCM &&
        EVP_CIPHER_CTX_ctrl(c->ctx, EVP_CTRL_GCM_GET_TAG, CK_MS_TAG_LEN, c->block.tag) != 1)
        return openssl_fail(c, "get the GCM tag", err);
    ck_ms_put_header(h, c->layout, &c->block);
    c->in_block = false;
    return ck_wrap_pwrite(&c->base, h, ck_ms_header_len(c->layout), c->block.off, err);
}

static int cipher_write(ck_wrap_writer *w, const void *data, size_t len, ck_error *err)
{
    cipher_writer *c = (cipher_writer *)w;
    const unsigned char *p = data;
    while (len > 0) {
        if (!c->in_block && start_block(c, err) < 0)
            return -1;
        size_t n = CK_MS_BLOCK_MAX - c->block_plain;
        if (n > len)
            n = len;
        if (n > OUT_BUF)
            n = OUT_BUF;
        int out;
        if (EVP_EncryptUpdate(c->ctx, c->out, &out, p, (int)n) != 1)
            return openssl_fail(c, "encrypt", err);
        if (put_cipher(c, out, err) < 0)
            return -1;
        c->block_plain += n;
        p += n;
        len -= n;
        if (c->block_plain == CK_MS_BLOCK_MAX && end_block(c, err) < 0)
            return -1;
    }
    return 0;
}

static int cipher_finish(ck_wrap_writer *w, ck_error *err)
{
    cipher_writer *c = (cipher_writer *)w;
    return c->in_block ? end_block(c, err) : 0;
}

static void cipher_destroy(ck_wrap_writer *w)
{
    cipher_writer *c = (cipher_writer *)w;
    EVP_CIPHER_CTX_free(c->ctx);
    free(c->out); /* ciphertext only: nothing to wipe */
    ck_key_wipe(&c->key);
    free(c);
}

static const struct ck_wrap_writer_ops cipher_ops = {
    .write = cipher_write,
    .finish = cipher_finish,
    .destroy = cipher_destroy,
};

ck_wrap_writer *ck_cipher_writer_new(int fd, const char *path, ck_cipher_mode mode,
                                     const ck_key *key, ck_error *err)
{
    cipher_writer *c = calloc(1, sizeof *c);
    if (c == NULL) {
        ck_nomem(err, path);
        return NULL;
    }
    c->base = (ck_wrap_writer){.ops = &cipher_ops, .fd = fd, .path = path};
    c->layout = (ck_ms_layout){.mode = mode};
    c->key = *key;
    c->ctx = EVP_CIPHER_CTX_new();
    c->out = malloc(OUT_BUF + CK_MS_AES_BLOCK);
    if (c->ctx == NULL || c->out == NULL) {
        ck_nomem(err, path);
        cipher_destroy(&c->base);
        return NULL;
    }
    return &c->base;
}
