/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_mount: a training run's directory mounted as one tree of snapshots.
 *
 *   /                  one directory per complete checkpoint of the run
 *   /latest            symbolic link to the newest complete one that opens
 *   /<name>/...        that checkpoint's tree, as a mount of its file
 *                      shows it (meta, out, snapshot_done, xattrs)
 *
 * Which files are checkpoints, their names, when one is complete and which
 * is the newest are codec/run_dir's rules; this file serves them.  Listing
 * the root opens no checkpoint but the one `latest` would name, once a
 * file, to tell that it opens (latest_opens).  A checkpoint is opened on the first
 * request inside it, as its own model mount (a ckfs, inode numbers
 * shifted above CKFS_INO_BITS by its slot): read-only, or with -o rw
 * writable under the rules of a one-model mount (its writer lock, its
 * saver, atomic verified saves).  It is closed again when the open ones
 * hold more than -o index_cache bytes, or more descriptors than the limit
 * leaves them, unless it has edits to save; its inodes stay valid and it
 * is opened again on the next request, provided its file is the same.  A
 * thread follows the directory (inotify, and listings every -o poll
 * seconds on shared storage): new checkpoints appear once
 * complete, deleted or replaced ones disappear (the mount's own saves
 * excepted), and requests still holding one of theirs get ESTALE, never
 * another file's bytes.
 *
 * Requests are answered on one thread (the checkpoints' mounts are opened
 * and closed by it alone); the watcher changes only the listing, the
 * checkpoints' savers their own trees.
 */
#ifndef CKPTFS_RUN_MOUNT_H
#define CKPTFS_RUN_MOUNT_H

#include "ckptfs.h"

typedef struct ckrun ckrun;

/* How the run's changes are found (-o watch).  inotify sees only what
 * this machine's kernel writes; on storage other machines write too
 * (codec/core/storage.h) the directory is also listed again every poll
 * seconds, and every file it shows is judged by its settle time alone. */
typedef enum ckrun_watch {
    CKRUN_WATCH_AUTO = 0,       /* poll on shared storage, by its statfs type */
    CKRUN_WATCH_INOTIFY,        /* events only: no other machine writes there */
    CKRUN_WATCH_POLL,           /* poll wherever it is */
} ckrun_watch;

typedef struct ckrun_opts {
    const char *path;           /* the run directory, absolute */
    const char *mountpoint;     /* for messages */
    double settle;              /* seconds a writable file must stay unchanged */
    ckrun_watch watch;          /* how changes are found (-o watch) */
    double poll;                /* seconds between listings where inotify is blind */
    size_t index_cache;         /* bytes of open checkpoint indexes */
    unsigned max_fds;           /* descriptors they may hold */
    ck_open_opts open_opts;     /* keys and caches of wrapped ones */
    const ckfs *proto;          /* what each checkpoint's mount starts as, and
                                 * how the run logs */
    bool writable;              /* -o rw: each checkpoint as a writable model mount */
    size_t spill_max;           /* their -o spill_max, 0 for the default */
    const char *where;          /* the mount point as writer locks record it */
} ckrun_opts;

/* List the directory (nothing is opened) and start watching it: NULL with
 * err when it cannot be read. */
ckrun *ckrun_new(const ckrun_opts *o, ck_error *err);
/* The session's userdata. */
ckfs_front *ckrun_front(ckrun *r);
/* After the session exists and the daemon has forked: the session to
 * notify, how to log, and the watching thread. */
int ckrun_start(ckrun *r, struct fuse_session *se, bool use_syslog);
/* What the request thread does for the run between requests: close the
 * checkpoints the watcher found deleted (their files' space held). */
void ckrun_idle_work(ckrun *r, ckfs_idle_work *work);
/* The loop has ended: stop watching, before the session goes. */
void ckrun_stop(ckrun *r);
/* After the session: save what each checkpoint has unsaved, and close
 * them all; -1 when a save failed (said). */
int ckrun_close_all(ckrun *r);
void ckrun_free(ckrun *r);

#endif
