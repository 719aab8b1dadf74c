/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envelope: the layer a model file may be wrapped in, around the bytes the
 * format readers parse: MindSpore's encryption (AES-GCM or AES-CBC blocks,
 * codec/cipher/ms_cipher.h) or zstd compression (codec/zstd/zstd_source.h).
 * Each is a kind (envelope_kind.h), one line of the registry's table
 * (registry.c); this core walks the table it is given (the open's
 * ck_envelope_opts.kinds) and names none of them.
 *
 * ck_envelope_open() recognises the wrapping by the file's leading bytes and
 * turns the file's source into a source of its plaintext; the readers never
 * know.  The envelope it describes is also what a save writes back
 * (codec/io/wrap_writer.h): the same mode and key, or the seekable zstd
 * format.  The rest of ckptfs asks about an envelope by the questions
 * below, never by its kind nor its state (the kind's own, opaque); the
 * user's envelope options travel as ck_envelope_args, made by the
 * registry's ck_envelope_option and freed here.
 */
#ifndef CK_ENVELOPE_H
#define CK_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/byte_source.h"
#include "core/ck_error.h"
#include "core/page_cache.h"
#include "envelope_kind.h"

/* Look at file's first bytes.  A plain file is returned as it is; a
 * wrapped one is replaced by the source of its plaintext (which owns file
 * from then on).  Fills env for the save.  On failure file is closed and
 * err says why in one line ("encrypted (AES-GCM); give -o key_file=...",
 * the block that fails to authenticate, ...). */
ck_source *ck_envelope_open(ck_source *file, const ck_envelope_opts *o, ck_envelope *env,
                            ck_error *err);

/* Whether env wraps the model, on disk or at its next save (fresh). */
static inline bool ck_envelope_is_wrapped(const ck_envelope *env)
{
    return env->kind != NULL;
}

/* Whether the plaintext must never reach the disk in clear: what the
 * model's readers and edits spill is kept in memory (memfd). */
static inline bool ck_envelope_is_secret(const ck_envelope *env)
{
    return env->kind != NULL && env->kind->secret;
}

/* Wipe (a key) and free env's state: the model's close. */
void ck_envelope_close(ck_envelope *env);

/* Why a model wrapped as env cannot be saved (the kind's read_only), or
 * NULL. */
static inline const char *ck_envelope_read_only(const ck_envelope *env)
{
    return env->kind != NULL && env->kind->read_only != NULL ? env->kind->read_only(env) : NULL;
}

/* What a file name ends in when it says env's kind (".zst"), or NULL. */
static inline const char *ck_envelope_extension(const ck_envelope *env)
{
    return env->kind != NULL ? env->kind->extension : NULL;
}

/* Whether the data files of a model wrapped as env are wrapped too, on disk
 * (an envelope a save is still to make wraps none yet). */
static inline bool ck_envelope_wraps_data_files(const ck_envelope *env)
{
    return env->kind != NULL && env->kind->open_data_file != NULL && !env->fresh;
}

/* The plaintext of file, a data file of model (wrapped as env, which
 * wraps its data files): file is owned by the result, closed on failure. */
ck_source *ck_envelope_open_data_file(ck_source *file, const ck_envelope *env,
                                      const char *model, ck_page_cache *cache, ck_error *err);

/* Appends to a reader's message about the plaintext what its offsets are
 * of ("(offsets in the decrypted content)"), when it gives offsets. */
void ck_envelope_note_plaintext(const ck_envelope *env, ck_error *err);

/* What ckptfs-dump shows: "" for a plain file, "AES-GCM", "seekable zstd". */
const char *ck_envelope_describe(const ck_envelope *env);

/* Kind k's slot in a, added (NULL) when it has none; NULL when a is full. */
void **ck_envelope_args_slot(ck_envelope_args *a, const ck_envelope_kind *k);
/* The options that open a model wrapped as env again (a save's read-back:
 * from's, with env's key in place of any given), into to (zeroed); env
 * NULL: a copy of from.  0, or -1 (err) with to freed. */
int ck_envelope_args_copy(const ck_envelope_args *from, const ck_envelope *env,
                          ck_envelope_args *to, ck_error *err);
/* Free (and wipe) every kind's options in a, and zero it. */
void ck_envelope_args_free(ck_envelope_args *a);


#endif
