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
 * The tools' save is the save sequence (save_seq.h: a commit group begun
 * in the claim's directory, the encoder with its read-back check, the
 * commit) run in one go.  A mount runs the same phases split across its
 * threads (mount/tree_save.c), since it answers requests while it
 * encodes.  Whoever writes a model's files, a format's directory writer
 * included (codec/io/target.h, write_dir), does so holding a claim: the
 * formats themselves take no lock.  A run directory's checkpoints are
 * claimed the same way beneath the run's descriptor (ck_write_claim_take_at,
 * mount/run_slots.c), on the run's request thread as each is opened.
 */
#ifndef CK_WRITE_CLAIM_H
#define CK_WRITE_CLAIM_H

#include <stdbool.h>
#include <stddef.h>

#include "../codec/core/progress.h"
#include "encoder.h"
#include "save_seq.h"
#include "writer_lock.h"

typedef struct ck_write_claim {
    ck_model_dir *dir;          /* the model's directory; its base names the model */
    ck_writer_lock lock;
    bool finished;              /* the take finished a save a crash cut short past
                                 * its commit point: the model is its new files */
    bool unrecovered;           /* after a failed take: the lock was had, but a save
                                 * cut short could not be finished (the model must
                                 * not be read as it is), not a lock refused */
} ck_write_claim;
/* A claim that holds nothing, for a release on a path that took none. */
#define CK_WRITE_CLAIM_NONE {.dir = NULL, .lock = {.fd = -1}}

/* Claim the model path (a file, or a directory format's OUT, named
 * without a trailing slash; absent: one to create) for who (a mount
 * point, or a program's name, for the lock's refusal message).  -1 with
 * the reason: the directory cannot be opened, another writer holds the
 * lock (EBUSY), the lock cannot be made there (EROFS, EACCES, ENOTSUP:
 * storage without rename), or recovery failed. */
int ck_write_claim_take(ck_write_claim *c, const char *path, const char *who, ck_error *err);
/* Release what c holds (nothing after CK_WRITE_CLAIM_NONE or a failed take). */
void ck_write_claim_release(ck_write_claim *c);
/* The same for the model file below (a name, or "rank_<id>/<file>") of
 * the directory open as dfd (path naming it in messages), reached with no
 * link followed: a run directory's checkpoint. */
int ck_write_claim_take_at(ck_write_claim *c, int dfd, const char *path, const char *below,
                           const char *who, ck_error *err);

/* Save the tree w[0..n) in m's format (m: a model of c's directory) as
 * one commit: written, read back and checked, committed, or the files
 * left as they were (the save sequence's phases in one go, save_seq.h;
 * o NULL: the defaults). */
int ck_write_claim_save(const ck_write_claim *c, const ck_model *m, const ck_write_tensor *w,
                        size_t n, const ck_save_opts *o, ck_error *err);

#endif
