/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cipher_envelope: the envelope kind of MindSpore's encryption
 * (cipher_envelope.h): which files it is, the key and mode a model needs
 * and keeps, and the writer a save of it uses.
 *
 * Both what a model keeps (cipher_state: its layout and key) and what the
 * user gave (cipher_opts: -o key_file, the key it names, -o enc_mode) are
 * private to this file: the rest holds them as void pointers
 * (envelope_kind.h) and asks the kind's hooks.  Both hold a key, so both
 * are wiped when freed.
 *
 * Decrypted bytes never reach the disk in clear: the kind is secret, so an
 * encrypted model's edits are held in memfds (capped by -o spill_max, a
 * quarter of the RAM by default; past it a write fails with ENOSPC), and
 * so are the decoded typed fields of an encrypted ONNX-style MindIR.  A
 * split MindIR's graph file and every data file are encrypted separately
 * (MindSpore's _split_save): a data file of an encrypted model must be
 * encrypted too, in the model's layout (cipher_open_data_file), is read
 * through its own cipher source, and a save writes it anew in one pass
 * (old plaintext with the in-place edits, then the appended tensors)
 * through a cipher writer.
 */
#include "cipher_envelope.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cipher_source.h"
#include "cipher_writer.h"
#include "key.h"
#include "ms_cipher.h"

_Static_assert(CK_MS_HEADER_MAX <= CK_ENVELOPE_HEAD, "detect sees a whole block header");

/* What a model wrapped in this kind keeps (ck_envelope.state). */
typedef struct cipher_state {
    ck_ms_layout layout;        /* mode; legacy: v1.3-1.6 (GCM without tag), read-only */
    ck_key key;                 /* the save encrypts with it again */
} cipher_state;

/* What the user gave (ck_envelope_args). */
typedef struct cipher_opts {
    char *key_file;             /* -o key_file, until ready loads it (NULL: CKPTFS_KEY_HEX) */
    ck_key key;                 /* len 0: none */
    bool encrypt;               /* -o enc_mode was given: */
    ck_cipher_mode enc_mode;    /* the mode a plain model is encrypted with on save */
} cipher_opts;

static const cipher_opts *opts_of(const ck_envelope_opts *o)
{
    return ck_envelope_args_of(o->args, &ck_envelope_cipher);
}

static bool has_key(const cipher_opts *co)
{
    return co != NULL && co->key.len > 0;
}

static bool encrypts(const cipher_opts *co)
{
    return co != NULL && co->encrypt;
}

static const cipher_state *state_of(const ck_envelope *env)
{
    return env->state;
}

static void cipher_close(void *state)
{
    cipher_state *s = state;
    ck_key_wipe(&s->key);
    free(s);
}

/* A new state in env, of this kind; -1 (ENOMEM) on failure. */
static int new_state(ck_envelope *env, ck_ms_layout l, const ck_key *key, const char *path,
                     ck_error *err)
{
    cipher_state *s = calloc(1, sizeof *s);
    if (s == NULL)
        return ck_nomem(err, path);
    s->layout = l;
    s->key = *key;
    env->kind = &ck_envelope_cipher;
    env->state = s;
    return 0;
}

static int cipher_detect(const unsigned char *head, size_t n, const char *path, ck_error *err)
{
    ck_ms_layout l;
    return ck_ms_detect(head, n, path, &l, err);
}

/* The layout file's first block header says (detect found one). */
static int layout_of_file(ck_source *file, ck_ms_layout *l, ck_error *err)
{
    unsigned char head[CK_MS_HEADER_MAX];
    size_t n = file->size < sizeof head ? (size_t)file->size : sizeof head;
    if (ck_source_read(file, head, n, 0, err) < 0)
        return -1;
    return ck_ms_detect(head, n, file->path, l, err) > 0 ? 0 : -1;
}

/* The key and the mode asked for, before any block is read. */
static int check_opts(const char *path, const cipher_opts *co, ck_ms_layout l, ck_error *err)
{
    const char *mode = ck_cipher_mode_name(l.mode);
    if (!has_key(co))
        return ck_fail(err, EACCES, "%s: encrypted (%s%s); give -o key_file=PATH or %s", path,
                       mode, l.legacy ? ", MindSpore 1.3-1.6 layout" : "", CK_KEY_ENV);
    if (co->encrypt && co->enc_mode != l.mode)
        return ck_fail(err, EINVAL, "%s: encrypted with %s, but -o enc_mode=%s was given (a "
                       "save keeps the file's mode)", path, mode,
                       ck_cipher_mode_name(co->enc_mode));
    return 0;
}

static ck_source *cipher_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                              ck_error *err)
{
    const cipher_opts *co = opts_of(o);
    ck_ms_layout l;
    if (layout_of_file(file, &l, err) < 0 || check_opts(file->path, co, l, err) < 0 ||
        new_state(env, l, &co->key, file->path, err) < 0) {
        ck_source_close(file);
        return NULL;
    }
    return ck_cipher_source_open(file, l, &state_of(env)->key, o->cache, err);
}

static int cipher_fresh(const ck_envelope_opts *o, ck_envelope *env, const char *path,
                        ck_error *err)
{
    const cipher_opts *co = opts_of(o);
    const ck_key none = {.len = 0};
    ck_ms_layout l = {.mode = co != NULL ? co->enc_mode : CK_AES_GCM};
    if (new_state(env, l, co != NULL ? &co->key : &none, path, err) < 0)
        return -1;
    env->fresh = true;
    return 0;
}

/* A plain file is encrypted on save when -o enc_mode says so, which needs
 * a key; a key alone is refused unless it was given only in case. */
static int cipher_plain(const char *path, const ck_envelope_opts *o, ck_envelope *env,
                        ck_error *err)
{
    const cipher_opts *co = opts_of(o);
    if (encrypts(co) && !has_key(co))
        return ck_fail(err, EINVAL, "%s: -o enc_mode=%s needs a key: -o key_file=PATH or %s",
                       path, ck_cipher_mode_name(co->enc_mode), CK_KEY_ENV);
    if (!encrypts(co) && has_key(co) && !o->key_if_encrypted)
        return ck_fail(err, EINVAL, "%s: not encrypted, but a key was given; to encrypt it on "
                       "save add -o enc_mode=AES-GCM or AES-CBC", path);
    return encrypts(co) ? cipher_fresh(o, env, path, err) : 0;
}

/* A new model is encrypted when a key and -o enc_mode are both given;
 * one without the other, or a key with a name that says compressed, is
 * refused. */
static int cipher_new_model(const void *own, const ck_envelope_kind *named, const char *path,
                            ck_error *err)
{
    const cipher_opts *co = own;
    bool key = has_key(co);
    bool both = key && named != NULL; /* a key, and a name that says compressed */
    if (encrypts(co) != key || both)
        return ck_fail(err, EINVAL, "%s: %s", path, both ? "a new model is encrypted or "
                       "compressed, not both" : key ? "a key was given without -o enc_mode"
                       : "-o enc_mode needs a key: -o key_file=PATH or " CK_KEY_ENV);
    return key;
}

static ck_source *cipher_open_data_file(ck_source *file, const ck_envelope *env,
                                        const char *model, ck_page_cache *cache, ck_error *err)
{
    const cipher_state *s = state_of(env);
    unsigned char head[CK_MS_HEADER_MAX];
    size_t n = file->size < sizeof head ? (size_t)file->size : sizeof head;
    ck_ms_layout l;
    int found = ck_source_read(file, head, n, 0, err) < 0
                    ? -1 : ck_ms_detect(head, n, file->path, &l, err);
    if (found == 0)
        found = ck_fail(err, EINVAL, "%s: not encrypted, but its model %s is (MindSpore "
                        "encrypts every file of a split model)", file->path, model);
    else if (found > 0 && (l.mode != s->layout.mode || l.legacy != s->layout.legacy))
        found = ck_fail(err, EINVAL, "%s: encrypted in another layout than its model %s",
                        file->path, model);
    if (found < 0) {
        ck_source_close(file);
        return NULL;
    }
    return ck_cipher_source_open(file, l, &s->key, cache, err);
}

static const char *cipher_read_only(const ck_envelope *env)
{
    return state_of(env)->layout.legacy
               ? "encrypted in MindSpore 1.3-1.6's layout (no GCM tag), which ckptfs "
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
    const cipher_state *s = state_of(env);
    return ck_cipher_writer_new(fd, path, s->layout.mode, &s->key, err);
}

static void cipher_free_options(void *own)
{
    cipher_opts *co = own;
    ck_key_wipe(&co->key);
    free(co->key_file);
    free(co);
}

/* *own, made on the first option given. */
static cipher_opts *opts_made(void **own)
{
    if (*own == NULL)
        *own = calloc(1, sizeof(cipher_opts));
    return *own;
}

/* -o key_file=PATH: the key, read by ready; -o enc_mode=MODE: the mode a
 * plain model is encrypted with on save. */
static int cipher_option(const char *name, const char *value, void **own, ck_error *err)
{
    bool key_file = strcmp(name, "key_file") == 0;
    if (!key_file && strcmp(name, "enc_mode") != 0)
        return 0;
    int mode = key_file ? 0 : ck_cipher_mode_parse(value);
    if (mode < 0)
        return ck_fail(err, EINVAL, "-o enc_mode=%s: the modes are AES-GCM and AES-CBC", value);
    cipher_opts *co = opts_made(own);
    char *path = key_file ? strdup(value) : NULL;
    if (co == NULL || (key_file && path == NULL)) {
        free(path);
        return ck_nomem(err, name);
    }
    if (key_file) {
        free(co->key_file);
        co->key_file = path;
    } else {
        co->encrypt = true;
        co->enc_mode = (ck_cipher_mode)mode;
    }
    return 1;
}

/* The key of -o key_file, else of CKPTFS_KEY_HEX (which loading takes out
 * of the environment). */
static int cipher_ready(void **own, ck_error *err)
{
    cipher_opts *co = *own;
    ck_key key;
    int got = ck_key_load(co != NULL ? co->key_file : NULL, &key, err);
    if (got < 0)
        return -1;
    if (got > 0 && (co = opts_made(own)) == NULL) {
        ck_key_wipe(&key);
        return ck_nomem(err, CK_KEY_ENV);
    }
    if (co != NULL) {
        co->key = key;
        free(co->key_file);
        co->key_file = NULL;
    }
    ck_key_wipe(&key);
    return 0;
}

static int cipher_copy_options(const void *from, const ck_envelope *env, void **to,
                               ck_error *err)
{
    const cipher_opts *f = from;
    bool mine = env != NULL && env->kind == &ck_envelope_cipher;
    if (f == NULL && !mine)
        return 0;
    cipher_opts *co = opts_made(to);
    if (co == NULL)
        return ck_nomem(err, "the envelope's options");
    if (f != NULL) {
        co->encrypt = f->encrypt;
        co->enc_mode = f->enc_mode;
        co->key = f->key;
    }
    if (env != NULL) /* what opens env again: its key, or none */
        co->key = mine ? state_of(env)->key : (ck_key){0};
    return 0;
}

/* A mode, or a key not given only in case, is for an encrypted file. */
static const char *cipher_foreign(const void *own, const ck_envelope_opts *o)
{
    const cipher_opts *co = own;
    return encrypts(co) ? "-o enc_mode" : has_key(co) && !o->key_if_encrypted ? "a key" : NULL;
}

static const char *cipher_describe(const ck_envelope *env)
{
    const cipher_state *s = state_of(env);
    if (s->layout.legacy)
        return "AES-GCM without tag (MindSpore 1.3-1.6)";
    return ck_cipher_mode_name(s->layout.mode);
}

/* CBC and the tagless layout authenticate nothing: a wrong key decrypts
 * to garbage that only the reader refuses. */
static const char *cipher_misread_hint(const ck_envelope *env)
{
    const cipher_state *s = state_of(env);
    return s->layout.legacy || s->layout.mode == CK_AES_CBC ? "a wrong key also gives this"
                                                            : NULL;
}

const ck_envelope_kind ck_envelope_cipher = {
    .name = "cipher",
    .adjective = "encrypted",
    .plaintext = "decrypted",
    .secret = true,
    .detect = cipher_detect,
    .open = cipher_open,
    .plain = cipher_plain,
    .fresh = cipher_fresh,
    .new_model = cipher_new_model,
    .open_data_file = cipher_open_data_file,
    .read_only = cipher_read_only,
    .new_writer = cipher_new_writer,
    .close = cipher_close,
    .option = cipher_option,
    .ready = cipher_ready,
    .copy_options = cipher_copy_options,
    .foreign = cipher_foreign,
    .free_options = cipher_free_options,
    .describe = cipher_describe,
    .misread_hint = cipher_misread_hint,
};
