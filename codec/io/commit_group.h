/* SPDX-License-Identifier: Apache-2.0 */
/*
 * commit_group: replace a model and its data files as one, so that after
 * a crash at any moment the model is seen with either all its old files or
 * all its new ones.
 *
 * Each new file is written beside its target, as atomic_writer does, and
 * fsync'd.  A group of one file is then renamed like any atomic write,
 * but on shared storage (codec/core/storage.h), where a rename over an
 * open file may be two steps, and every larger group first writes a
 * journal beside the model,
 * ".<model>.ckptfs-journal", listing every (temporary, target) pair with
 * the model last; the journal is fsync'd and renamed into place (the
 * commit point), then the targets are replaced in its order, the model
 * last, and the journal removed.  The next open of the model calls
 * ck_group_recover first: a journal means the commit happened, so the
 * renames it lists are finished (roll forward; each is skipped when its
 * temporary file is gone, so recovery can itself be interrupted and run
 * again); without a journal the temporary files of an unfinished commit
 * are only deleted.
 *
 * Why even one file commits through a journal on shared storage: there a
 * rename over an open file may be two steps (s3fs copies and deletes,
 * libfuse first moves an open target aside to .fuse_hiddenN, an NFS
 * client silly-renames it), and a crash of the storage's client between
 * them would leave no model.  A mount does not hold the old model open
 * during the renames (save/save_seq.h: it switches to the files it read
 * back at the commit point and closes the old model first), so s3fs
 * replaces the object with one server-side copy and no client finds the
 * model missing.  Storage with no rename at all (mountpoint-s3) is refused
 * before anything is written (ck_storage_may_replace, in the writer lock
 * and again in ck_group_begin).
 *
 * A read-only mount that finds a journal refuses, telling the user to
 * mount writable once; a model whose journal cannot be completed (no write
 * access to its directory) is not mounted.  The temporary files of an
 * unfinished save are removed beside the model and beside each of its
 * data files, the model owner's regular files only (ck_encode_cleanup,
 * ck_atomic_cleanup).  tests/bats/external_write.bats kills the daemon
 * (strace fault injection) at each rename and at the journal's removal,
 * and checks that the old or the new files are seen.
 *
 * Journal format: "ckptfs-journal 1\n", then for each pair the temporary
 * and the target path, relative to the model's directory, each ended by a
 * NUL byte, then "end\n".
 *
 * Every file is reached through the model's directory descriptor
 * (codec/core/model_dir.h), and recovery only renames what a save of this
 * model by its owner could have left: the journal, each temporary file
 * and each existing target must be regular files owned by the model's
 * owner, beneath the model's directory and through no symbolic link, and
 * the last target must be the model itself.  A model that is absent (the
 * first save of a model with its data file, ckptfs-convert --into,
 * interrupted before the model's rename) is finished from a journal of
 * the caller's own only.
 */
#ifndef CK_COMMIT_GROUP_H
#define CK_COMMIT_GROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/progress.h"
#include "atomic_writer.h"

/* A model and its external data files (codec/core/model.h, CK_MAX_SOURCES). */
#define CK_GROUP_MAX 4097

typedef struct ck_commit_group {
    const ck_model_dir *dir;    /* the model's directory; its base is the model */
    ck_atomic_file *files;      /* files[0] is the model, renamed last */
    size_t n, cap;
    bool committed;             /* the journal is in place: keep the files */
    ck_progress *progress;      /* the encoders' sinks count into it (NULL: none) */
    /* The model is saved under another name than the one it was read from
     * (ckptfs-convert --into): the ONNX writer puts its external data in
     * one new file beside it, "<model>.data", and none in the original's
     * data files; an existing file of that name is replaced only when
     * data_replace is set. */
    bool own_data, data_replace;
} ck_commit_group;

/* Start a group whose first file replaces the model, dir->base; write it
 * to g->files[0].fd.  dir must outlive the group. */
int ck_group_begin(ck_commit_group *g, const ck_model_dir *dir, ck_error *err);
/* Add a file that replaces target, a full path "<dir>/<name>" inside the
 * model's directory; returns the descriptor to write it to, or -1. */
int ck_group_add(ck_commit_group *g, const char *target, ck_error *err);
/* Make every new file durable and replace the targets (see above): the
 * commit point, then the rest.  On failure before the commit point
 * nothing is replaced; after it, the rest is left to ck_group_recover and
 * the error says so. */
int ck_group_commit(ck_commit_group *g, ck_error *err);
/* The same in two steps, so that a mount can switch to the new files
 * between them (mount/tree_save.c): up to the commit point (the rename of a
 * one-file group on local storage, else the journal in place), then the
 * journal's renames, if any are left. */
int ck_group_commit_point(ck_commit_group *g, ck_error *err);
int ck_group_finish(ck_commit_group *g, ck_error *err);
/* Whether the commit point has passed with renames still to do. */
static inline bool ck_group_pending(const ck_commit_group *g)
{
    return g->committed;
}
/* Free the group, removing its temporary files unless a journal lists
 * them (call it after ck_group_commit too, and on a zeroed group, which
 * it leaves as it is). */
void ck_group_abort(ck_commit_group *g);

/* Before opening the model dir->base: finish a commit that its journal
 * records.  Returns 1 if it rolled one forward, 0 if there was none, -1 if
 * a journal exists but cannot be completed (unreadable, not this model's
 * owner's, or no write access).  read_only: change nothing; a journal
 * found is an error that says how to finish the save. */
int ck_group_recover(const ck_model_dir *dir, bool read_only, ck_error *err);

#endif
