/* SPDX-License-Identifier: Apache-2.0 */
#include "cipher_source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Blocks a file may have: MindSpore writes one per 64 MiB, and one per
 * parameter in a split MindIR's data files; the cap bounds the table a
 * hostile file of tiny blocks could make us build. */
#define CK_CIPHER_MAX_BLOCKS (1u << 24)

typedef struct cipher_source {
    ck_source base;             /* first: a ck_source * is a cipher_source * */
    ck_source *file;
    ck_ms_layout layout;
    ck_key key;
    ck_page_cache *cache;
    EVP_CIPHER_CTX *ctx;
    ck_ms_block *blocks;
    uint64_t *plain_off;        /* n_blocks + 1 entries: where each block's plaintext starts */
    uint32_t n_blocks;
    unsigned char *scratch;     /* ciphertext of one page, and the 16 bytes before it */
    size_t scratch_len;
} cipher_source;

static uint32_t block_plain_len(const cipher_source *c, uint32_t i)
{
    return (uint32_t)(c->plain_off[i + 1] - c->plain_off[i]);
}

static int openssl_fail(const cipher_source *c, const char *what, ck_error *err)
{
    return ck_fail(err, EIO, "%s: OpenSSL failed to %s", c->base.path, what);
}

/* ---- opening: the block table and the tags ---- */

static int add_block(cipher_source *c, const ck_ms_block *b, uint32_t *cap, ck_error *err)
{
    if (c->n_blocks == CK_CIPHER_MAX_BLOCKS)
        return ck_fail(err, EINVAL, "%s: block %u at offset %llu: more than %u encrypted "
                       "blocks", c->base.path, c->n_blocks, (unsigned long long)b->off,
                       CK_CIPHER_MAX_BLOCKS);
    if (c->n_blocks == *cap) {
        uint32_t n = *cap ? *cap * 2 : 16;
        ck_ms_block *more = realloc(c->blocks, n * sizeof *more);
        if (more == NULL)
            return ck_nomem(err, c->base.path);
        c->blocks = more;
        *cap = n;
    }
    c->blocks[c->n_blocks++] = *b;
    return 0;
}

static int read_blocks(cipher_source *c, ck_error *err)
{
    uint64_t off = 0, size = c->file->size;
    uint32_t cap = 0;
    size_t hl = ck_ms_header_len(c->layout);
    unsigned char h[CK_MS_HEADER_MAX];
    while (off < size) {
        ck_ms_block b;
        size_t n = size - off < hl ? (size_t)(size - off) : hl;
        if (ck_source_read(c->file, h, n, off, err) < 0 ||
            ck_ms_parse_header(h, c->layout, off, size, c->n_blocks, c->base.path, &b, err) < 0 ||
            add_block(c, &b, &cap, err) < 0)
            return -1;
        off = b.cipher_off + b.cipher_len;
    }
    c->plain_off = malloc(((size_t)c->n_blocks + 1) * sizeof *c->plain_off);
    if (c->plain_off == NULL)
        return ck_nomem(err, c->base.path);
    return 0;
}

static int gcm_verify(cipher_source *c, uint32_t i, ck_error *err)
{
    const ck_ms_block *b = &c->blocks[i];
    EVP_CIPHER_CTX *ctx = c->ctx;
    if (EVP_DecryptInit_ex(ctx, ck_ms_block_cipher(CK_AES_GCM, c->key.len), NULL, c->key.bytes,
                           b->iv) != 1) /* nonce: the default 12 bytes, as MindSpore */
        return openssl_fail(c, "start AES-GCM", err);
    for (uint64_t at = 0; at < b->cipher_len;) {
        size_t n = b->cipher_len - at < CK_CIPHER_PAGE ? (size_t)(b->cipher_len - at)
                                                        : CK_CIPHER_PAGE;
        int out;
        if (ck_source_read(c->file, c->scratch, n, b->cipher_off + at, err) < 0)
            return -1;
        if (EVP_DecryptUpdate(ctx, c->scratch, &out, c->scratch, (int)n) != 1)
            return openssl_fail(c, "decrypt", err);
        at += n;
    }
    int out;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, CK_MS_TAG_LEN, (void *)b->tag) != 1)
        return openssl_fail(c, "set the GCM tag", err);
    if (EVP_DecryptFinal_ex(ctx, c->scratch, &out) != 1)
        return ck_fail(err, EACCES, "%s: block %u at offset %llu: AES-GCM tag mismatch: %s",
                       c->base.path, i, (unsigned long long)b->off,
                       i == 0 ? "wrong key, or the file was altered"
                              : "the block was altered (the key fits the earlier blocks)");
    return 0;
}

/* Decrypt len bytes (a multiple of 16) of block i's ciphertext from `at`
 * (a multiple of 16) into out. */
static int decrypt_piece(cipher_source *c, uint32_t i, uint64_t at, size_t len,
                         unsigned char *out, ck_error *err)
{
    const ck_ms_block *b = &c->blocks[i];
    unsigned char iv[CK_MS_IV_LEN];
    unsigned char *in = c->scratch + CK_MS_AES_BLOCK;
    bool cbc = c->layout.mode == CK_AES_CBC;
    if (cbc && at > 0) { /* CBC: the previous cipher block is this piece's IV */
        if (ck_source_read(c->file, c->scratch, len + CK_MS_AES_BLOCK,
                           b->cipher_off + at - CK_MS_AES_BLOCK, err) < 0)
            return -1;
        memcpy(iv, c->scratch, CK_MS_AES_BLOCK);
    } else {
        if (ck_source_read(c->file, in, len, b->cipher_off + at, err) < 0)
            return -1;
        if (cbc)
            memcpy(iv, b->iv, CK_MS_IV_LEN);
        else
            ck_ms_gcm_counter(b->iv, at, iv);
    }
    int n;
    EVP_CIPHER_CTX *ctx = c->ctx;
    if (EVP_DecryptInit_ex(ctx, ck_ms_piece_cipher(c->layout.mode, c->layout.legacy, c->key.len),
                           NULL, c->key.bytes, iv) != 1 ||
        EVP_CIPHER_CTX_set_padding(ctx, 0) != 1 ||
        EVP_DecryptUpdate(ctx, out, &n, in, (int)len) != 1 || (size_t)n != len)
        return openssl_fail(c, "decrypt", err);
    return 0;
}

/* The PKCS#7 padding of a CBC block, from its last cipher block. */
static int cbc_padding(cipher_source *c, uint32_t i, uint32_t *pad, ck_error *err)
{
    const ck_ms_block *b = &c->blocks[i];
    unsigned char last[CK_MS_AES_BLOCK];
    if (decrypt_piece(c, i, b->cipher_len - CK_MS_AES_BLOCK, CK_MS_AES_BLOCK, last, err) < 0)
        return -1;
    unsigned p = last[CK_MS_AES_BLOCK - 1];
    bool ok = p >= 1 && p <= CK_MS_AES_BLOCK;
    for (unsigned k = 1; ok && k <= p; k++)
        ok = last[CK_MS_AES_BLOCK - k] == p;
    explicit_bzero(last, sizeof last);
    if (!ok)
        return ck_fail(err, EACCES, "%s: block %u at offset %llu: AES-CBC padding is invalid: "
                       "%s", c->base.path, i, (unsigned long long)b->off,
                       i == 0 ? "wrong key, or the file was altered"
                              : "the block was altered (the key fits the earlier blocks)");
    *pad = p;
    return 0;
}

/* The scratch buffer, as large as the largest piece any block needs: a
 * page, or less for a file of small blocks.  Sized to the file, not to a
 * page, because it is wiped on close, and wiping a megabyte the file never
 * used costs every open of a small file (the page faults dominated the
 * fuzzer's time). */
static int alloc_scratch(cipher_source *c, ck_error *err)
{
    uint64_t most = 0;
    for (uint32_t i = 0; i < c->n_blocks; i++)
        if (c->blocks[i].cipher_len > most)
            most = c->blocks[i].cipher_len;
    c->scratch_len = (most < CK_CIPHER_PAGE ? (size_t)most : CK_CIPHER_PAGE) + CK_MS_AES_BLOCK;
    c->scratch = malloc(c->scratch_len);
    return c->scratch == NULL ? ck_nomem(err, c->base.path) : 0;
}

/* Check every block and lay out the plaintext. */
static int authenticate(cipher_source *c, ck_error *err)
{
    uint64_t plain = 0;
    for (uint32_t i = 0; i < c->n_blocks; i++) {
        uint32_t pad = 0;
        bool gcm = c->layout.mode == CK_AES_GCM && !c->layout.legacy;
        if ((gcm && gcm_verify(c, i, err) < 0) ||
            (c->layout.mode == CK_AES_CBC && cbc_padding(c, i, &pad, err) < 0))
            return -1;
        c->plain_off[i] = plain;
        plain += c->blocks[i].cipher_len - pad;
    }
    c->plain_off[c->n_blocks] = plain;
    c->base.size = plain;
    return 0;
}

/* ---- reads ---- */

/* The tags cover the file as it was at mount: a resized or rewritten file
 * (its size or mtime differ; chmod and chown touch only the ctime) is no
 * longer what they authenticated. */
static int check_unchanged(cipher_source *c, ck_error *err)
{
    if (ck_source_check_fd(c->file, 0, err) == 0)
        return 0;
    if (err == NULL || err->errnum != EIO)
        return -1;
    return ck_fail(err, EIO, "%s: the encrypted file changed after it was mounted; its "
                   "blocks were authenticated only then (remount)", c->base.path);
}

/* Page p of block i, from the cache or decrypted into it; *len is its
 * plaintext length. */
static const unsigned char *page(cipher_source *c, uint32_t i, uint32_t p, size_t *len,
                                 ck_error *err)
{
    uint64_t unit = (uint64_t)i << 32 | p, at = (uint64_t)p * CK_CIPHER_PAGE;
    uint32_t plain = block_plain_len(c, i);
    size_t have, n = plain - at < CK_CIPHER_PAGE ? (size_t)(plain - at) : CK_CIPHER_PAGE;
    *len = n;
    const unsigned char *buf = ck_page_cache_get(c->cache, c, unit, &have);
    if (buf != NULL)
        return buf;
    /* CBC decrypts whole cipher blocks, the padding's last one included. */
    if (c->layout.mode == CK_AES_CBC)
        n = (n + CK_MS_AES_BLOCK - 1) / CK_MS_AES_BLOCK * CK_MS_AES_BLOCK;
    if (check_unchanged(c, err) < 0)
        return NULL;
    unsigned char *out = ck_page_cache_reserve(c->cache, c, unit, n, err);
    if (out == NULL)
        return NULL;
    if (decrypt_piece(c, i, at, n, out, err) < 0) {
        ck_page_cache_abandon(c->cache);
        return NULL;
    }
    ck_page_cache_commit(c->cache);
    return out;
}

/* The block holding plaintext offset off. */
static uint32_t block_at(const cipher_source *c, uint64_t off)
{
    uint32_t lo = 0, hi = c->n_blocks;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (c->plain_off[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static int cipher_read_at(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err)
{
    cipher_source *c = (cipher_source *)src;
    if (off > src->size || len > src->size - off)
        return ck_fail(err, EIO, "%s: offset %llu: read past the end of the plaintext",
                       src->path, (unsigned long long)off);
    unsigned char *dst = buf;
    uint32_t i = len ? block_at(c, off) : 0;
    while (len > 0) {
        while (c->plain_off[i + 1] <= off) /* empty blocks, and the block's end */
            i++;
        uint64_t in = off - c->plain_off[i];
        size_t have;
        const unsigned char *p = page(c, i, (uint32_t)(in / CK_CIPHER_PAGE), &have, err);
        if (p == NULL)
            return -1;
        size_t from = (size_t)(in % CK_CIPHER_PAGE);
        size_t n = have - from < len ? have - from : len;
        memcpy(dst, p + from, n);
        dst += n;
        off += n;
        len -= n;
    }
    return 0;
}

static void cipher_destroy(ck_source *src)
{
    cipher_source *c = (cipher_source *)src;
    ck_page_cache_drop(c->cache, c);
    ck_source_close(c->file);
    EVP_CIPHER_CTX_free(c->ctx);
    if (c->scratch != NULL)
        explicit_bzero(c->scratch, c->scratch_len);
    free(c->scratch);
    free(c->blocks);
    free(c->plain_off);
    ck_key_wipe(&c->key);
}

static const struct ck_source_ops cipher_ops = {
    .read_at = cipher_read_at,
    .destroy = cipher_destroy,
};

ck_source *ck_cipher_source_open(ck_source *file, ck_ms_layout layout, const ck_key *key,
                                 ck_page_cache *cache, ck_error *err)
{
    cipher_source *c = calloc(1, sizeof *c);
    char *path = strdup(file->path);
    if (c == NULL || path == NULL) {
        free(c);
        free(path);
        ck_source_close(file);
        ck_fail(err, ENOMEM, "out of memory");
        return NULL;
    }
    c->base = (ck_source){.ops = &cipher_ops, .path = path, .fd = -1, .dev = file->dev,
                          .ino = file->ino, .file_size = file->file_size,
                          .mtime = file->mtime};
    c->file = file;
    c->layout = layout;
    c->key = *key;
    c->cache = cache;
    c->ctx = EVP_CIPHER_CTX_new();
    if (c->ctx == NULL)
        ck_nomem(err, path);
    else if (read_blocks(c, err) == 0 && alloc_scratch(c, err) == 0 &&
             authenticate(c, err) == 0)
        return &c->base;
    ck_source_close(&c->base);
    return NULL;
}
