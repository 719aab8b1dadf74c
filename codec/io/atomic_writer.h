/* SPDX-License-Identifier: Apache-2.0 */
/*
 * atomic_writer: replace a file so that readers and crashes only ever see
 * the complete old or the complete new version.
 *
 * The new content goes to a temporary file in the target's directory (same
 * filesystem, so rename is atomic), is fsync'd, renamed over the target, and
 * the directory is fsync'd so the rename itself is durable.  The target's
 * mode and owner are kept.  Temporary names start with ".<target>.ckptfs-",
 * so a later mount can find and remove leftovers of an interrupted save.
 *
 * Targets are named relative to the model's directory (codec/core/model_dir.h)
 * and reached through its descriptor: the target's own directory is opened
 * once, beneath it and through no symbolic link, and the temporary file,
 * the rename and the fsync all go through that descriptor.
 */
#ifndef CK_ATOMIC_WRITER_H
#define CK_ATOMIC_WRITER_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "../core/ck_error.h"
#include "../core/model_dir.h"

typedef struct ck_atomic_file {
    int fd;                         /* write the new content here */
    int dir_fd;                     /* the target's directory (O_PATH), or -1 */
    char target[PATH_MAX];          /* the full path, for messages */
    char rel[PATH_MAX];             /* the target, relative to the model's directory */
    char tmp[PATH_MAX];             /* the temporary file, relative too; "" when none */
} ck_atomic_file;

int ck_atomic_begin(ck_atomic_file *f, const ck_model_dir *d, const char *rel, ck_error *err);
/* fsync, rename over the target, fsync the directory.  On failure the
 * target is untouched and the temporary file removed. */
int ck_atomic_commit(ck_atomic_file *f, ck_error *err);
/* The first half of a commit: fsync and close the new version (a group
 * commit renames later).  On failure the temporary file is removed. */
int ck_atomic_sync(ck_atomic_file *f, ck_error *err);
/* The second half: rename the synced temporary file over the target and
 * fsync the directory. */
int ck_atomic_rename(ck_atomic_file *f, ck_error *err);
/* Close everything; remove the temporary file unless tmp was cleared. */
void ck_atomic_abort(ck_atomic_file *f);

/* The last component of a relative name. */
const char *ck_base_name(const char *rel);

/* Remove the temporary files an interrupted save of rel left behind:
 * regular files owned by owner only.  Returns how many were removed. */
int ck_atomic_cleanup(const ck_model_dir *d, const char *rel, uid_t owner);

/* The bytes free on d's filesystem, as an unprivileged writer sees it
 * (UINT64_MAX: unknown). */
uint64_t ck_atomic_free_space(const ck_model_dir *d);
/* A save that ran out of space (err->errnum ENOSPC) says how much it
 * needed and how much was free when it began (taken then: at the failure
 * it is none), so the user knows what to clear; need is about the new
 * version's size.  Other errors are left as they are. */
void ck_atomic_space_note(const ck_model_dir *d, uint64_t need, uint64_t free_before,
                          ck_error *err);

#endif
