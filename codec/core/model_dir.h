/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model_dir: the model's directory, opened once, and every file access of
 * a mount made relative to it.
 *
 * The directory is resolved by name once, before mounting (the mount point
 * may even be that very directory: a name would then lead into the mount
 * itself).  After that, the model, its data files, spill files, temporary
 * files, the journal and the renames of a save are all reached from this
 * descriptor with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) and the
 * *at() calls: no name is resolved again, no symbolic link is followed,
 * nothing outside the directory is reached (but for the stat of the
 * directories between the mount's root and it, to check who may read its
 * files: ck_dir_may_read).  Every open of a file ckptfs did not create is
 * O_NONBLOCK (ck_keep_regular), so a FIFO planted where a file is expected
 * is refused after fstat instead of blocking the daemon.
 *
 * A model given through a symbolic link is taken where it points, once,
 * when the directory is resolved.  A file in a subdirectory is opened
 * through a descriptor of that subdirectory opened the same way, renames
 * are renameat, and a directory is fsync'd through a descriptor opened
 * from it; so a sub/ swapped for a link after mounting makes the save fail
 * (the edits stay) instead of writing where the link points.  The model, a
 * data file, a variables file, the journal, the writer lock, a key,
 * strategy, map or metadata file that is a FIFO, a device or a directory
 * is refused in one line naming it, and none can block the open.  What is
 * not the model's goes elsewhere: decoded typed fields and a non-seekable
 * zstd file's plaintext are O_TMPFILE files in $TMPDIR (memfds when
 * secret), nameless and outside the model's directory.
 *
 * Paths in messages stay full: "<dir>/<name>", with dir as the model's
 * path spells it.
 */
#ifndef CK_MODEL_DIR_H
#define CK_MODEL_DIR_H

#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "ck_error.h"
#include "file_watch.h"

typedef struct ck_model_dir {
    int fd;             /* O_PATH | O_DIRECTORY */
    char *path;         /* the directory, for messages ("." for a bare name) */
    char *base;         /* the model's name in it */
    int refs;           /* a model and the ones a save reopens share it */
    ck_file_watch *watch; /* writes to its files by other programs, or NULL */
    /* The mount's root when it is above this directory (a run's or a
     * distributed checkpoint's directory, for a rank_<id>/ or an
     * iteration_<N>/ in it), a reference shared by the files of one
     * iteration; NULL when the directory is the mount's own.  below: this
     * directory's path beneath it ("rank_1"), or NULL. */
    struct ck_model_dir *root;
    char *below;
} ck_model_dir;

/* Who asks (another user of an allow_other mount): uid, gid and the
 * supplementary groups. */
typedef struct ck_cred {
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    size_t n_groups;
} ck_cred;

/* Open the directory of model_path (the one name resolution).  A model
 * that is a symbolic link is taken where it points, once, here. */
ck_model_dir *ck_dir_open(const char *model_path, ck_error *err);
/* The file name in the directory open as dir_fd (dir_path in messages):
 * a run directory's checkpoint, reached through the run's descriptor with
 * no name resolved again; a link in name's place is not followed.  name
 * may lie in a subdirectory ("rank_0/net.ckpt"): the model's directory is
 * then that subdirectory (its data files, journal and lock are beside it),
 * opened beneath dir_fd with no link followed, and dir_fd is the root the
 * way to it is checked from (ck_dir_may_read). */
ck_model_dir *ck_dir_in(int dir_fd, const char *dir_path, const char *name, ck_error *err);
/* path without its trailing slashes ("/" stays): how a directory given as
 * a model is named in messages (malloc'd; NULL: out of memory). */
char *ck_path_trimmed(const char *path);
/* The directory path as a model's directory of its own, its base "."
 * (a collection's: a OneFlow snapshot, a DCP checkpoint), and its stat
 * in *st. */
ck_model_dir *ck_dir_itself(const char *path, struct stat *st, ck_error *err);
/* d lies at below beneath root, the mount's root (a reference is taken):
 * who may read its files is checked from there. */
int ck_dir_set_root(ck_model_dir *d, ck_model_dir *root, const char *below, ck_error *err);
/* The directory below (one name, not a link) beneath the directory open as
 * root_fd, as a collection's model directory of its own (base "."), named
 * path in messages, its root root_fd's directory (ck_dir_set_root): how a
 * run's directory checkpoint (a DCP or OneFlow snapshot directory) is
 * reached with no link followed and its files' readers checked from the
 * run.  NULL with err. */
ck_model_dir *ck_dir_beneath(int root_fd, const char *below, const char *path, ck_error *err);
/* Whether who may read rel (a file beneath d) on disk: search permission
 * on every directory from the mount's root to it, read permission on the
 * file itself, by its owner, group and mode bits (no ACL).  0, or -1 with
 * errno (EACCES; a stat's error). */
int ck_dir_may_read(const ck_model_dir *d, const char *rel, const ck_cred *who);
ck_model_dir *ck_dir_ref(ck_model_dir *d);

/* Watch the files of models opened from here on for writes by other
 * programs (file_watch.h): what a mount does.  Not by default: closing an
 * inotify instance waits for an RCU grace period, which one-shot opens
 * (ckptfs-dump, the fuzz target) should not pay. */
void ck_dir_watch_files(ck_model_dir *d);
/* The same with the watch w, which other directories use too (NULL: none):
 * the per-user inotify instances are few. */
void ck_dir_share_watch(ck_model_dir *d, ck_file_watch *w);
void ck_dir_unref(ck_model_dir *d);

/* openat2 beneath the directory, never following a symbolic link;
 * O_CLOEXEC | O_NOFOLLOW are added.  -1 with errno set. */
int ck_dir_openat(const ck_model_dir *d, const char *rel, int flags, mode_t mode);

/* Open path (relative to dfd, as openat(2)) when it is a file ckptfs did
 * not create itself (a model, a data file, a lock, a journal, a key, a
 * strategy or map file): O_NONBLOCK | O_CLOEXEC are added, so a FIFO
 * another user planted there cannot block the open, and the file is kept
 * only if fstat says it is a regular file (into st); O_NONBLOCK is then
 * cleared for the reads, splice and copy_file_range that follow.  -1 with
 * errno set; a file that is there but not regular gives EINVAL with its
 * type in st->st_mode (ck_file_kind names it), any other failure leaves
 * st->st_mode 0. */
int ck_open_regular(int dfd, const char *path, int flags, mode_t mode, struct stat *st);
/* The same checks for fd, just opened O_NONBLOCK by other means (-1 is
 * passed through); fd is closed when refused. */
int ck_keep_regular(int fd, struct stat *st);

/* Open rel read-only and require a regular file: one line naming it
 * (shown, or the full path when NULL) and what it is instead (a FIFO, a
 * directory...).  Returns the fd. */
int ck_dir_open_regular(const ck_model_dir *d, const char *rel, const char *shown,
                        struct stat *st, ck_error *err);

/* fstatat without following a link; -1 with errno set (ENOENT...). */
int ck_dir_stat(const ck_model_dir *d, const char *rel, struct stat *st);

/* A descriptor of the directory holding rel (the model's own, or a
 * subdirectory beneath it) and rel's last component; -1 with errno. */
int ck_dir_parent(const ck_model_dir *d, const char *rel, int flags, const char **name);

/* fsync the directory holding rel; -1 with errno. */
int ck_dir_fsync(const ck_model_dir *d, const char *rel);

/* "<dir>/<rel>" into buf, for messages and source paths. */
const char *ck_dir_join(const ck_model_dir *d, const char *rel, char *buf, size_t size);

/* path relative to the directory, when path is "<dir>/<rel>"; else NULL. */
const char *ck_dir_rel(const ck_model_dir *d, const char *path);

/* A stream of the entries of the directory open as dfd (O_PATH will do),
 * from its start; dfd stays the caller's.  NULL with errno set. */
DIR *ck_list_dir(int dfd);

/* What a file of this mode is, for "... is a FIFO, not a regular file". */
const char *ck_file_kind(mode_t mode);

#endif
