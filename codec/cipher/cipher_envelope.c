/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cipher_envelope: the envelope kind of MindSpore's encryption
 * (cipher_envelope.h): which files it is, the key and mode a model needs
 * and keeps, and the writer a save of it uses.
 */
#include "cipher_envelope.h"

#include <errno.h>
#include <string.h>

#include "cipher_source.h"
#include "cipher_writer.h"
#include "ms_cipher.h"

_Static_assert(CK_MS_HEADER_MAX <= CK_ENVELOPE_HEAD, "detect sees a whole block header");

static bool has_key(const ck_envelope_opts *o)
{
    return o->key != NULL && o->key->len > 0;
}

static ck_ms_layout layout_of(const ck_envelope *env)
{
    return (ck_ms_layout){.mode = env->mode, .legacy = env->legacy};
}

static int cipher_detect(const unsigned char *head, size_t n, const char *path,
                         ck_envelope *env, ck_error *err)
{
    ck_ms_layout l;
    int found = ck_ms_detect(head, n, path, &l, err);
    if (found > 0) {
        env->mode = l.mode;
        env->legacy = l.legacy;
    }
    return found;
}

/* The key and the mode asked for, before any block is read. */
static int check_opts(const char *path, const ck_envelope_opts *o, const ck_envelope *env,
                      ck_error *err)
{
    const char *mode = ck_cipher_mode_name(env->mode);
    if (!has_key(o))
        return ck_fail(err, EACCES, "%s: encrypted (%s%s); give -o key_file=PATH or %s", path,
                       mode, env->legacy ? ", MindSpore 1.3-1.6 layout" : "", CK_KEY_ENV);
    if (o->encrypt && o->enc_mode != env->mode)
        return ck_fail(err, EINVAL, "%s: encrypted with %s, but -o enc_mode=%s was given (a "
                       "save keeps the file's mode)", path, mode,
                       ck_cipher_mode_name(o->enc_mode));
    return 0;
}

static ck_source *cipher_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                              ck_error *err)
{
    if (check_opts(file->path, o, env, err) < 0) {
        ck_source_close(file);
        return NULL;
    }
    ck_source *plain = ck_cipher_source_open(file, layout_of(env), o->key, o->cache, err);
    if (plain != NULL)
        env->key = *o->key; /* the save encrypts with it again */
    return plain;
}

static void cipher_fresh(const ck_envelope_opts *o, ck_envelope *env)
{
    *env = (ck_envelope){.kind = &ck_envelope_cipher, .mode = o->enc_mode, .key = *o->key,
                         .fresh = true};
}

/* A plain file is encrypted on save when -o enc_mode says so, which needs
 * a key; a key alone is refused unless it was given only in case. */
static int cipher_plain(const char *path, const ck_envelope_opts *o, ck_envelope *env,
                        ck_error *err)
{
    if (o->encrypt && !has_key(o))
        return ck_fail(err, EINVAL, "%s: -o enc_mode=%s needs a key: -o key_file=PATH or %s",
                       path, ck_cipher_mode_name(o->enc_mode), CK_KEY_ENV);
    if (!o->encrypt && has_key(o) && !o->key_if_encrypted)
        return ck_fail(err, EINVAL, "%s: not encrypted, but a key was given; to encrypt it on "
                       "save add -o enc_mode=AES-GCM or AES-CBC", path);
    if (o->encrypt)
        cipher_fresh(o, env);
    return 0;
}

static ck_source *cipher_open_data_file(ck_source *file, const ck_envelope *env,
                                        const char *model, ck_page_cache *cache, ck_error *err)
{
    unsigned char head[CK_MS_HEADER_MAX];
    size_t n = file->size < sizeof head ? (size_t)file->size : sizeof head;
    ck_ms_layout l;
    int found = ck_source_read(file, head, n, 0, err) < 0
                    ? -1 : ck_ms_detect(head, n, file->path, &l, err);
    if (found == 0)
        found = ck_fail(err, EINVAL, "%s: not encrypted, but its model %s is (MindSpore "
                        "encrypts every file of a split model)", file->path, model);
    else if (found > 0 && (l.mode != env->mode || l.legacy != env->legacy))
        found = ck_fail(err, EINVAL, "%s: encrypted in another layout than its model %s",
                        file->path, model);
    if (found < 0) {
        ck_source_close(file);
        return NULL;
    }
    return ck_cipher_source_open(file, l, &env->key, cache, err);
}

static const char *cipher_read_only(const ck_envelope *env)
{
    return env->legacy ? "encrypted in MindSpore 1.3-1.6's layout (no GCM tag), which ckptfs "
                         "reads but does not write"
                       : NULL;
}

static struct ck_wrap_writer *cipher_new_writer(const ck_envelope *env, int fd,
                                                const char *path, ck_error *err)
{
    const char *why = cipher_read_only(env);
    if (why != NULL) {
        ck_fail(err, EROFS, "%s: %s", path, why);
        return NULL;
    }
    return ck_cipher_writer_new(fd, path, env->mode, &env->key, err);
}

/* -o enc_mode=MODE: the mode a plain model is encrypted with on save. */
static int cipher_option(const char *name, const char *value, ck_envelope_opts *o,
                         ck_error *err)
{
    if (strcmp(name, "enc_mode") != 0)
        return 0;
    int mode = ck_cipher_mode_parse(value);
    if (mode < 0)
        return ck_fail(err, EINVAL, "-o enc_mode=%s: the modes are AES-GCM and AES-CBC", value);
    o->encrypt = true;
    o->enc_mode = (ck_cipher_mode)mode;
    return 1;
}

static const char *cipher_describe(const ck_envelope *env)
{
    if (env->legacy)
        return "AES-GCM without tag (MindSpore 1.3-1.6)";
    return ck_cipher_mode_name(env->mode);
}

/* CBC and the tagless layout authenticate nothing: a wrong key decrypts
 * to garbage that only the reader refuses. */
static const char *cipher_misread_hint(const ck_envelope *env)
{
    return env->legacy || env->mode == CK_AES_CBC ? "a wrong key also gives this" : NULL;
}

const ck_envelope_kind ck_envelope_cipher = {
    .name = "cipher",
    .adjective = "encrypted",
    .plaintext = "decrypted",
    .secret = true,
    .keyed = true,
    .detect = cipher_detect,
    .open = cipher_open,
    .plain = cipher_plain,
    .fresh = cipher_fresh,
    .open_data_file = cipher_open_data_file,
    .read_only = cipher_read_only,
    .new_writer = cipher_new_writer,
    .option = cipher_option,
    .describe = cipher_describe,
    .misread_hint = cipher_misread_hint,
};
