/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envelope: detecting and opening a model file's envelope by walking the
 * table of kinds the open is given (ck_envelope_opts.kinds, the
 * registry's: envelope.h); what each kind does is in its folder
 * (codec/cipher/cipher_envelope.c, codec/zstd/zstd_envelope.c).  It names
 * no kind and calls nothing of the registry, which is above it.  A kind's
 * state and options are opaque here: this file only hands them to the
 * kind's hooks, which make, copy and free (and wipe) them.
 *
 * A plaintext that is itself wrapped (an encrypted file whose plaintext is
 * zstd, a zstd file whose content is encrypted, or either twice) is
 * refused (refuse_nested): MindSpore writes none of them.
 */
#include "envelope.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The kind whose magic number head (n bytes) starts with, or NULL.  A header a
 * kind finds damaged or cannot read counts as that kind's: it is wrapped
 * all the same. */
static const ck_envelope_kind *wrapped_as(const ck_envelope_opts *o, const unsigned char *head,
                                          size_t n, const char *path)
{
    for (const ck_envelope_kind *const *e = o->kinds; e != NULL && *e != NULL; e++) {
        const ck_envelope_kind *k = *e;
        ck_error ignored;
        if (k->detect(head, n, path, &ignored) != 0)
            return k;
    }
    return NULL;
}

/* A plaintext that is itself wrapped (the other way, or again).  Its first
 * four bytes are every kind's magic number. */
static int refuse_nested(ck_source *plain, const ck_envelope_kind *outer,
                         const ck_envelope_opts *o, ck_error *err)
{
    unsigned char head[4];
    if (plain->size < sizeof head || ck_source_read(plain, head, sizeof head, 0, err) < 0)
        return plain->size < sizeof head ? 0 : -1;
    const ck_envelope_kind *inner = wrapped_as(o, head, sizeof head, plain->path);
    if (inner != NULL)
        return ck_fail(err, ENOTSUP, "%s: %s file whose content is %s: not a MindSpore "
                       "format (MindSpore neither compresses encrypted models nor encrypts "
                       "compressed ones); undo the outer layer first", plain->path,
                       outer->adjective, inner->adjective);
    return 0;
}

/* file, wrapped as k says (env as its detect left it), to its plaintext. */
static ck_source *open_wrapped(ck_source *file, const ck_envelope_kind *k,
                               const ck_envelope_opts *o, ck_envelope *env, ck_error *err)
{
    env->kind = k;
    ck_source *plain = k->open(file, o, env, err);
    if (plain != NULL &&
        (refuse_nested(plain, k, o, err) < 0 || (k->opened && k->opened(plain, o, env, err) < 0))) {
        ck_source_close(plain);
        plain = NULL;
    }
    if (plain == NULL)
        ck_envelope_close(env); /* the file was not opened */
    return plain;
}

/* A plain file: each kind may take the options as asking to wrap it on
 * save, or refuse the ones only it takes. */
static int open_plain(const char *path, const ck_envelope_opts *o, ck_envelope *env,
                      ck_error *err)
{
    for (const ck_envelope_kind *const *e = o->kinds; e != NULL && *e != NULL; e++) {
        const ck_envelope_kind *k = *e;
        if (k->plain != NULL && k->plain(path, o, env, err) < 0) {
            ck_envelope_close(env);
            return -1;
        }
    }
    return 0;
}

ck_source *ck_envelope_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                            ck_error *err)
{
    unsigned char head[CK_ENVELOPE_HEAD];
    size_t n = file->size < sizeof head ? (size_t)file->size : sizeof head;
    *env = (ck_envelope){.kind = NULL};
    if (ck_source_read(file, head, n, 0, err) < 0)
        goto fail;
    /* In the table's order: the first kind whose header it is. */
    for (const ck_envelope_kind *const *e = o->kinds; e != NULL && *e != NULL; e++) {
        const ck_envelope_kind *k = *e;
        int found = k->detect(head, n, file->path, err);
        if (found < 0)
            goto fail;
        if (found > 0)
            return open_wrapped(file, k, o, env, err);
    }
    if (open_plain(file->path, o, env, err) < 0)
        goto fail;
    return file;
fail:
    ck_source_close(file);
    return NULL;
}

ck_source *ck_envelope_open_data_file(ck_source *file, const ck_envelope *env,
                                      const char *model, ck_page_cache *cache, ck_error *err)
{
    return env->kind->open_data_file(file, env, model, cache, err);
}

void ck_envelope_note_plaintext(const ck_envelope *env, ck_error *err)
{
    if (env->kind == NULL || env->fresh || strstr(err->msg, "offset") == NULL)
        return;
    const char *hint = env->kind->misread_hint ? env->kind->misread_hint(env) : NULL;
    size_t len = strlen(err->msg);
    snprintf(err->msg + len, sizeof err->msg - len, " (offsets in the %s content%s%s)",
             env->kind->plaintext, hint ? "; " : "", hint ? hint : "");
}

const char *ck_envelope_describe(const ck_envelope *env)
{
    return env->kind == NULL ? "" : env->kind->describe(env);
}

void ck_envelope_close(ck_envelope *env)
{
    if (env->kind != NULL && env->kind->close != NULL && env->state != NULL)
        env->kind->close(env->state);
    *env = (ck_envelope){.kind = NULL};
}

void **ck_envelope_args_slot(ck_envelope_args *a, const ck_envelope_kind *k)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->kind[i] == k)
            return &a->own[i];
    if (a->n == CK_ENVELOPE_MAX)
        return NULL;
    a->kind[a->n] = k;
    a->own[a->n] = NULL;
    return &a->own[a->n++];
}

/* Kind k's part of a copy: from's options, as env would open again. */
static int copy_one(const ck_envelope_kind *k, const ck_envelope_args *from,
                    const ck_envelope *env, ck_envelope_args *to, ck_error *err)
{
    if (k->copy_options == NULL || ck_envelope_args_of(to, k) != NULL)
        return 0;
    void *own = NULL;
    if (k->copy_options(ck_envelope_args_of(from, k), env, &own, err) < 0)
        return -1;
    if (own == NULL)
        return 0;
    void **slot = ck_envelope_args_slot(to, k);
    if (slot == NULL) {
        k->free_options(own);
        return ck_fail(err, ENOMEM, "more than %d envelopes' options", CK_ENVELOPE_MAX);
    }
    *slot = own;
    return 0;
}

int ck_envelope_args_copy(const ck_envelope_args *from, const ck_envelope *env,
                          ck_envelope_args *to, ck_error *err)
{
    *to = (ck_envelope_args){.n = 0};
    size_t n = from != NULL ? from->n : 0;
    for (size_t i = 0; i < n; i++)
        if (copy_one(from->kind[i], from, env, to, err) < 0)
            goto fail;
    /* env's kind too: it may keep a key that none of from gave. */
    if (env != NULL && env->kind != NULL && copy_one(env->kind, from, env, to, err) < 0)
        goto fail;
    return 0;
fail:
    ck_envelope_args_free(to);
    return -1;
}

void ck_envelope_args_free(ck_envelope_args *a)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->own[i] != NULL && a->kind[i]->free_options != NULL)
            a->kind[i]->free_options(a->own[i]);
    *a = (ck_envelope_args){.n = 0};
}
