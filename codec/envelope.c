/* SPDX-License-Identifier: Apache-2.0 */
#include "envelope.h"

#include <errno.h>
#include <string.h>

#include "cipher/cipher_source.h"
#include "core/le_bytes.h"
#include "cipher/ms_cipher.h"
#include "zstd/zstd_source.h"

static bool is_zstd(const unsigned char *head, size_t n)
{
    if (n < 4)
        return false;
    uint32_t magic = ck_le32(head);
    /* pzstd and others may start with a skippable frame */
    return magic == CK_ZSTD_MAGIC ||
           (magic & CK_ZSTD_SKIPPABLE_MASK) == CK_ZSTD_SKIPPABLE_MAGIC;
}

static int has_key(const ck_envelope_opts *o)
{
    return o->key != NULL && o->key->len > 0;
}

/* A plaintext that is itself wrapped the other way. */
static int refuse_nested(ck_source *plain, const char *outer, ck_error *err)
{
    unsigned char head[4];
    ck_ms_layout l;
    ck_error ignored;
    if (plain->size < sizeof head || ck_source_read(plain, head, sizeof head, 0, err) < 0)
        return plain->size < sizeof head ? 0 : -1;
    if (is_zstd(head, sizeof head) || ck_ms_detect(head, sizeof head, plain->path, &l,
                                                   &ignored) != 0)
        return ck_fail(err, ENOTSUP, "%s: %s file whose content is %s: not a MindSpore "
                       "format (MindSpore neither compresses encrypted models nor encrypts "
                       "compressed ones); undo the outer layer first", plain->path, outer,
                       is_zstd(head, sizeof head) ? "zstd-compressed" : "encrypted");
    return 0;
}

static ck_source *open_cipher(ck_source *file, ck_ms_layout l, const ck_envelope_opts *o,
                              ck_envelope *env, ck_error *err)
{
    const char *mode = ck_cipher_mode_name(l.mode);
    if (!has_key(o)) {
        ck_fail(err, EACCES, "%s: encrypted (%s%s); give -o key_file=PATH or %s", file->path,
                mode, l.legacy ? ", MindSpore 1.3-1.6 layout" : "", CK_KEY_ENV);
        goto fail;
    }
    if (o->encrypt && o->enc_mode != l.mode) {
        ck_fail(err, EINVAL, "%s: encrypted with %s, but -o enc_mode=%s was given (a save keeps "
                "the file's mode)", file->path, mode, ck_cipher_mode_name(o->enc_mode));
        goto fail;
    }
    ck_source *plain = ck_cipher_source_open(file, l, o->key, o->cache, err);
    if (plain == NULL)
        return NULL;
    if (refuse_nested(plain, "encrypted", err) < 0) {
        ck_source_close(plain);
        return NULL;
    }
    *env = (ck_envelope){.wrap = CK_WRAP_CIPHER, .mode = l.mode, .legacy = l.legacy,
                         .key = *o->key};
    return plain;
fail:
    ck_source_close(file);
    return NULL;
}

static ck_source *open_zstd(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                            ck_error *err)
{
    bool seekable;
    ck_source *plain = ck_zstd_source_open(file, o->cache, o->tmp_max, &seekable, err);
    if (plain == NULL)
        return NULL;
    if (refuse_nested(plain, "zstd-compressed", err) < 0) {
        ck_source_close(plain);
        return NULL;
    }
    if (o->encrypt || (has_key(o) && !o->key_if_encrypted)) {
        ck_fail(err, EINVAL, "%s: zstd-compressed, not encrypted, but %s was given (MindSpore "
                "does not read compressed encrypted models)", plain->path,
                o->encrypt ? "-o enc_mode" : "a key");
        ck_source_close(plain);
        return NULL;
    }
    ck_zstd_frames frames;
    *env = (ck_envelope){.wrap = CK_WRAP_ZSTD, .seekable = seekable,
                         .zstd_sums = ck_zstd_frames_of(plain, &frames) && frames.sums != NULL,
                         .zstd_level = o->zstd_level ? o->zstd_level : CK_ZSTD_LEVEL_DEFAULT};
    return plain;
}

ck_source *ck_envelope_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                            ck_error *err)
{
    unsigned char head[CK_MS_HEADER_MAX];
    size_t n = file->size < sizeof head ? (size_t)file->size : sizeof head;
    ck_ms_layout l;
    *env = (ck_envelope){.wrap = CK_WRAP_NONE};
    if (ck_source_read(file, head, n, 0, err) < 0) {
        ck_source_close(file);
        return NULL;
    }
    int cipher = ck_ms_detect(head, n, file->path, &l, err);
    if (cipher < 0) {
        ck_source_close(file);
        return NULL;
    }
    if (cipher)
        return open_cipher(file, l, o, env, err);
    if (is_zstd(head, n))
        return open_zstd(file, o, env, err);
    if (o->encrypt && !has_key(o)) {
        ck_fail(err, EINVAL, "%s: -o enc_mode=%s needs a key: -o key_file=PATH or %s",
                file->path, ck_cipher_mode_name(o->enc_mode), CK_KEY_ENV);
        ck_source_close(file);
        return NULL;
    }
    if (!o->encrypt && has_key(o) && !o->key_if_encrypted) {
        ck_fail(err, EINVAL, "%s: not encrypted, but a key was given; to encrypt it on save "
                "add -o enc_mode=AES-GCM or AES-CBC", file->path);
        ck_source_close(file);
        return NULL;
    }
    if (o->encrypt)
        *env = (ck_envelope){.wrap = CK_WRAP_CIPHER, .mode = o->enc_mode, .key = *o->key,
                             .fresh = true};
    return file;
}
