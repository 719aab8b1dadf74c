/*
 * atomic_writer: replace a file so that readers and crashes only ever see
 * the complete old or the complete new version.
 *
 * The new content goes to a temporary file in the target's directory (same
 * filesystem, so rename is atomic), is fsync'd, renamed over the target, and
 * the directory is fsync'd so the rename itself is durable.  The target's
 * mode and owner are kept.  Temporary names start with ".<target>.ckptfs-",
 * so a later mount can find and remove leftovers of an interrupted save.
 */
#ifndef CK_ATOMIC_WRITER_H
#define CK_ATOMIC_WRITER_H

#include <limits.h>

#include "../codec/ck_error.h"

typedef struct ck_atomic_file {
    int fd;                         /* write the new content here */
    char target[PATH_MAX];
    char tmp[PATH_MAX];
} ck_atomic_file;

int ck_atomic_begin(ck_atomic_file *f, const char *target, ck_error *err);
/* fsync, rename over the target, fsync the directory.  On failure the
 * target is untouched and the temporary file removed. */
int ck_atomic_commit(ck_atomic_file *f, ck_error *err);
/* The first half of a commit: fsync and close the new version (a group
 * commit renames later).  On failure the temporary file is removed. */
int ck_atomic_sync(ck_atomic_file *f, ck_error *err);
/* fsync the directory holding target, so a rename in it is durable. */
int ck_fsync_parent(const char *target, ck_error *err);
void ck_atomic_abort(ck_atomic_file *f);

/* Remove the temporary files an interrupted save of target left behind;
 * returns how many were removed. */
int ck_atomic_cleanup(const char *target);

#endif
