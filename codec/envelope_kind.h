/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envelope_kind: what an envelope is, for the rest of ckptfs: the state a
 * model keeps about its wrapping (ck_envelope), the options an open is
 * given (ck_envelope_opts, with the user's envelope options in
 * ck_envelope_args), and the interface each envelope's folder implements
 * (ck_envelope_kind: codec/cipher/cipher_envelope.c,
 * codec/zstd/zstd_envelope.c).
 *
 * What each kind keeps (a cipher's mode and key, a zstd level) is a struct
 * private to its folder, behind a void pointer that the kind makes and
 * frees (and wipes, for a key): nothing here names a cipher or zstd, so
 * the core and the formats include no envelope's header.
 *
 * Types only, with no .c of its own: the registry (registry.h), which
 * lists the kinds, and the core that walks them (envelope.h) both include
 * it without including each other; the walk is given the kinds
 * (ck_envelope_opts.kinds).
 */
#ifndef CK_ENVELOPE_KIND_H
#define CK_ENVELOPE_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/byte_source.h"
#include "core/ck_error.h"
#include "core/page_cache.h"

struct ck_envelope_kind;
struct ck_wrap_writer;

/* How a model file is wrapped, and will be saved. */
typedef struct ck_envelope {
    const struct ck_envelope_kind *kind;    /* NULL: plain */
    void *state;                /* the kind's own (its mode, key, level...), made by its
                                 * open, plain or fresh, freed by ck_envelope_close */
    bool fresh;                 /* not wrapped on disk yet: the next save wraps it */
} ck_envelope;

/* The most kinds the table may list (registry.c). */
#define CK_ENVELOPE_MAX 4

/* What the user gave the envelopes (-o key_file=, enc_mode=, zstd_level=):
 * each kind's own options, made by its option hook (through the
 * registry's ck_envelope_option) and opaque to the rest; a kind given none
 * has no slot.  Zeroed: nothing given.  ck_envelope_args_free (envelope.h)
 * frees (and wipes) them. */
typedef struct ck_envelope_args {
    const struct ck_envelope_kind *kind[CK_ENVELOPE_MAX];
    void *own[CK_ENVELOPE_MAX];
    size_t n;
} ck_envelope_args;

/* Kind k's options in a (NULL a: none), or NULL: what a kind reads its
 * own by. */
static inline const void *ck_envelope_args_of(const ck_envelope_args *a,
                                              const struct ck_envelope_kind *k)
{
    for (size_t i = 0; a != NULL && i < a->n; i++)
        if (a->kind[i] == k)
            return a->own[i];
    return NULL;
}

/* What an open is given. */
typedef struct ck_envelope_opts {
    const ck_envelope_args *args; /* the user's (NULL: none) */
    bool key_if_encrypted;      /* else a key given for a plain file is refused */
    uint64_t tmp_max;           /* non-seekable zstd: bound in $TMPDIR (0: the default) */
    FILE *progress;             /* non-seekable zstd: its decompression's bar (NULL: none) */
    ck_page_cache *cache;       /* decoded pages of every wrapped source */
    /* The kinds an open tries, in order, NULL-terminated: the registry's
     * table, handed down by the open that chose the format (registry.c), so
     * that the walk (envelope.c) never calls up into the registry. */
    const struct ck_envelope_kind *const *kinds;
} ck_envelope_opts;

/* The leading bytes of a file that detect is given (fewer in a shorter
 * file): enough for every kind's header. */
#define CK_ENVELOPE_HEAD 64

/* One envelope: a line of the registry's table (registry.c). */
typedef struct ck_envelope_kind {
    const char *name;           /* "cipher", "zstd" */
    const char *adjective;      /* a file so wrapped, in messages: "encrypted" */
    const char *plaintext;      /* its content, in messages: "decrypted" */
    const char *extension;      /* what a file name ends in when it says the envelope
                                 * (".zst"); NULL: names do not */
    bool secret;                /* its plaintext never reaches the disk in clear:
                                 * spills and scratch files are kept in memory */

    /* Whether head (the file's first n bytes) is this wrapping: 1, 0, or
     * -1 (err) for one ckptfs cannot read.  n may be short of what a
     * header needs.  It keeps nothing: open reads the header again. */
    int (*detect)(const unsigned char *head, size_t n, const char *path, ck_error *err);
    /* The source of file's plaintext (file is owned by it from then on,
     * closed on failure too), its state in env->state; refuses the
     * options that do not fit before it reads anything. */
    ck_source *(*open)(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                       ck_error *err);
    /* Optional: once the plaintext is known not to be wrapped again, what
     * it tells (env) and the options refused only then. */
    int (*opened)(ck_source *plain, const ck_envelope_opts *o, ck_envelope *env,
                  ck_error *err);
    /* Optional: a plain file, which the options may ask to wrap on save
     * (env filled, fresh) or give what only this envelope takes (refused). */
    int (*plain)(const char *path, const ck_envelope_opts *o, ck_envelope *env, ck_error *err);
    /* env as a save of a new model wraps it (fresh): 0, or -1 (err). */
    int (*fresh)(const ck_envelope_opts *o, ck_envelope *env, const char *path, ck_error *err);
    /* Optional: whether the options a (this kind's, NULL: none) ask that a
     * new model at path (named as kind named says, or NULL) be wrapped in
     * this kind: 1, 0, or -1 (EINVAL) refused as what cannot be made. */
    int (*new_model)(const void *own, const struct ck_envelope_kind *named, const char *path,
                     ck_error *err);
    /* Optional: a data file of a model wrapped as env, which must be wrapped
     * the same way (MindSpore encrypts every file of a split model); its
     * plaintext as open gives it.  NULL: data files are plain. */
    ck_source *(*open_data_file)(ck_source *file, const ck_envelope *env, const char *model,
                                 ck_page_cache *cache, ck_error *err);
    /* Optional: why a file wrapped as env is read but never written (a
     * layout ckptfs only reads), or NULL when it may be. */
    const char *(*read_only)(const ck_envelope *env);
    /* The writer of a save (codec/io/wrap_writer.h), over fd; refuses what it
     * does not write (err). */
    struct ck_wrap_writer *(*new_writer)(const ck_envelope *env, int fd, const char *path,
                                         ck_error *err);
    /* Optional: env's state wiped (a key) and freed. */
    void (*close)(void *state);
    /* Optional: an option NAME=VALUE of this envelope (-o key_file=,
     * enc_mode=, zstd_level=), into *own (this kind's options, made on the
     * first, NULL until then): 1 taken, 0 not its own, -1 a bad value
     * (err: why, naming the option). */
    int (*option)(const char *name, const char *value, void **own, ck_error *err);
    /* Optional: once the options are given, what they name is read
     * (the key of -o key_file, else of CKPTFS_KEY_HEX): 0, or -1 (err). */
    int (*ready)(void **own, ck_error *err);
    /* Optional: a copy of from (NULL: none) into *to (left NULL when
     * nothing is to be kept): the options that open a model wrapped as
     * env again (a save's read-back: env's key when env is this kind's,
     * else none of from's); env NULL: from as it is.  0, or -1 (err). */
    int (*copy_options)(const void *from, const ck_envelope *env, void **to, ck_error *err);
    /* Optional: what of own (this kind's options; NULL: none) a file
     * wrapped in another kind refuses, in words ("-o enc_mode", "a key"),
     * or NULL. */
    const char *(*foreign)(const void *own, const ck_envelope_opts *o);
    /* Optional with option: the options freed (and wiped). */
    void (*free_options)(void *own);
    /* What ckptfs-dump shows: "AES-GCM", "seekable zstd". */
    const char *(*describe)(const ck_envelope *env);
    /* Optional: what a reader's refusal of the plaintext may also mean
     * ("a wrong key also gives this"); NULL: nothing more. */
    const char *(*misread_hint)(const ck_envelope *env);
} ck_envelope_kind;

#endif
