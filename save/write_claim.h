/* SPDX-License-Identifier: Apache-2.0 */
/*
 * write_claim: the one way a program takes a model's files to write them
 * (a writable mount, ckptfs-convert, ckptfs-reencode, --into), and the one
 * save sequence the tools run on what they claimed.
 *
 * Taking a claim opens the model's directory once (every later access
 * goes through it: codec/core/model_dir.h), takes the writer lock
 * (writer_lock.h: one writer per model), then finishes a save that a
 * crash cut short past its commit point and removes the temporary files
 * of one cut short before it (commit_group.h), so that what the files
 * are is known before anything reads or writes them.  The order matters:
 * recovery renames and deletes, which only the lock's holder may do.
 *
 * The save sequence: a commit group begun in the claim's directory, the
 * encoder (refusals, the format's writer, the read-back check before the
 * commit point: encoder.h), the commit.  A mount runs the same steps
 * split across its threads (mount/tree.c, tree_save_*), since it answers
 * requests while it encodes.
 */
#ifndef CK_WRITE_CLAIM_H
#define CK_WRITE_CLAIM_H

#include <stdbool.h>
#include <stddef.h>

#include "../codec/core/progress.h"
#include "encoder.h"
#include "writer_lock.h"

typedef struct ck_write_claim {
    ck_model_dir *dir;          /* the model's directory; its base names the model */
    ck_writer_lock lock;
} ck_write_claim;
/* A claim that holds nothing, for a release on a path that took none. */
#define CK_WRITE_CLAIM_NONE {.dir = NULL, .lock = {.fd = -1}}

/* Claim the model file path (absent: a file to create) for who (a mount
 * point, or a program's name, for the lock's refusal message).  -1 with
 * the reason: the directory cannot be opened, another writer holds the
 * lock (EBUSY), the lock cannot be made there (EROFS, EACCES, ENOTSUP:
 * storage without rename), or recovery failed. */
int ck_write_claim_take(ck_write_claim *c, const char *path, const char *who, ck_error *err);
/* Release what c holds (nothing after CK_WRITE_CLAIM_NONE or a failed take). */
void ck_write_claim_release(ck_write_claim *c);

/* How ck_write_claim_save runs its commit group. */
typedef struct ck_save_opts {
    ck_progress *progress;      /* counts the bytes written (NULL: none) */
    bool own_data;              /* commit_group.h: --into's data file of its own */
    bool data_replace;          /* replace such a file, or a new set's shards */
} ck_save_opts;

/* Save the tree w[0..n) in m's format (m: a model of c's directory) as
 * one commit: written, read back and checked, committed, or the files
 * left as they were. */
int ck_write_claim_save(const ck_write_claim *c, const ck_model *m, const ck_write_tensor *w,
                        size_t n, const ck_save_opts *o, ck_error *err);

#endif
