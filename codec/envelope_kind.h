/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envelope_kind: what an envelope is, for the rest of ckptfs: the state a
 * model keeps about its wrapping (ck_envelope), the options an open is
 * given (ck_envelope_opts), and the interface each envelope's folder
 * implements (ck_envelope_kind: codec/cipher/cipher_envelope.c,
 * codec/zstd/zstd_envelope.c).
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
#include "cipher/key.h"
#include "cipher/ms_cipher.h"

struct ck_envelope_kind;
struct ck_wrap_writer;

/* How a model file is wrapped, and will be saved.  The fields past kind
 * are the kinds' own, each filled only by the kind it names. */
typedef struct ck_envelope {
    const struct ck_envelope_kind *kind;    /* NULL: plain */
    ck_cipher_mode mode;        /* cipher */
    bool legacy;                /* cipher: v1.3-1.6 layout (GCM without tag): read-only */
    bool seekable;              /* zstd: the file has a seek table */
    int zstd_level;             /* zstd: the level a save uses */
    bool zstd_sums;             /* zstd: the seek table has checksums (a save keeps them) */
    ck_key key;                 /* cipher: wiped by the model's close */
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
    bool keyed;                 /* a key opens it, and a key with -o enc_mode wraps a
                                 * plain model in it on save */

    /* Whether head (the file's first n bytes) is this wrapping: 1 (with
     * what the header says in env), 0, or -1 (err) for one ckptfs cannot
     * read.  n may be short of what a header needs. */
    int (*detect)(const unsigned char *head, size_t n, const char *path, ck_envelope *env,
                  ck_error *err);
    /* The source of file's plaintext (file is owned by it from then on,
     * closed on failure too), env as detect left it; refuses the options
     * that do not fit before it reads anything. */
    ck_source *(*open)(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                       ck_error *err);
    /* Optional: once the plaintext is known not to be wrapped again, what
     * it tells (env) and the options refused only then. */
    int (*opened)(ck_source *plain, const ck_envelope_opts *o, ck_envelope *env,
                  ck_error *err);
    /* Optional: a plain file, which the options may ask to wrap on save
     * (env filled, fresh) or give what only this envelope takes (refused). */
    int (*plain)(const char *path, const ck_envelope_opts *o, ck_envelope *env, ck_error *err);
    /* env as a save of a new model wraps it (fresh). */
    void (*fresh)(const ck_envelope_opts *o, ck_envelope *env);
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
    /* Optional: a save option NAME=VALUE of this envelope (-o enc_mode=,
     * -o zstd_level=), into o: 1 taken, 0 not its own, -1 a bad value
     * (err: why, naming the option). */
    int (*option)(const char *name, const char *value, ck_envelope_opts *o, ck_error *err);
    /* What ckptfs-dump shows: "AES-GCM", "seekable zstd". */
    const char *(*describe)(const ck_envelope *env);
    /* Optional: what a reader's refusal of the plaintext may also mean
     * ("a wrong key also gives this"); NULL: nothing more. */
    const char *(*misread_hint)(const ck_envelope *env);
} ck_envelope_kind;

#endif
