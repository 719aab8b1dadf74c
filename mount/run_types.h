/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_types: what a run mount is made of (its slots, what the events told
 * of files being written, the subdirectories watched) and the run itself.
 * Types and a few one-line rules only: every piece of the run
 * (mount/run_*.c) works on them, bottom up: run_events (inotify),
 * run_listing (the listing and the watcher's thread), run_slots (the
 * checkpoints' mounts), run_seal, run_ops (the requests), run_mount (life).
 *
 * Slots.  Every checkpoint the mount has listed has a slot, numbered from
 * 1 in the order they were found, for the life of the mount: slot s owns
 * the inode numbers s << CKFS_INO_BITS and up, its checkpoint's directory
 * being (s << CKFS_INO_BITS) | INO_ROOT.  A checkpoint deleted or replaced
 * keeps its slot, marked gone, so that no inode the kernel still holds
 * ever names another file's tensors; a file replaced under the same name
 * gets a new slot.
 *
 * Locking.  r->mu guards the slots and the listing; the watcher holds it
 * only to swap in a new listing.  A slot's open mount (slot->fs) is
 * opened, used and closed by the request thread alone, so a request uses
 * it without r->mu; the watcher marks a slot gone and the request thread
 * closes it, at once when the watcher asks (wake_fd, between two
 * requests), else at the next request into a checkpoint.  Order: r->mu,
 * then a checkpoint's lock; its saver takes r->mu holding nothing
 * (run_slots.c, slot_saves), so that a checkpoint is closed under r->mu
 * only when it has nothing to save.
 */
#ifndef CKPTFS_RUN_TYPES_H
#define CKPTFS_RUN_TYPES_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "../codec/core/storage.h"
#include "../codec/run_dir.h"
#include "../save/write_claim.h"
#include "ckptfs.h"

/* As run_mount.h names it, for the run's pieces, which that header's
 * users never see. */
typedef struct ckrun ckrun;

#define RUN_INO_ROOT 1u
#define RUN_INO_LATEST 2u

/* Files being written, as the events tell (take_event): the watcher's
 * own; bounded, past which a file is judged by its mode and settle time
 * alone. */
#define WRITING_MAX 4096

/* What the events told of one file being written.  It is, whatever its
 * mode says (cp of a read-only file creates it read-only, then writes
 * it), while modified (until IN_CLOSE_WRITE) or open since it was created
 * (an open that has not written yet), or created a moment ago.  A file
 * that only appeared, by link(2) (ln, cp -l, linkat of an O_TMPFILE), has
 * an IN_CREATE and no open: it is judged as any other file. */
typedef struct run_writing {
    char *name;                 /* beneath the run directory: "x.EXT", "rank_0/x.EXT" */
    double created;             /* when its IN_CREATE was read (CLOCK_REALTIME), 0: not seen */
    unsigned opens;             /* IN_OPEN since then, less IN_CLOSE_NOWRITE */
    bool modified;              /* IN_MODIFY seen, no IN_CLOSE_WRITE since */
} run_writing;

/* A subdirectory of the run (a rank_<id>/, a collection's directory
 * such as iteration_<N>/, or one that may become one) watched as the run
 * directory is.  Its files written before its watch was in place are
 * judged by their settle time alone (judged_complete). */
typedef struct run_subdir {
    int wd;
    char *name;
    double doubt_until;         /* files changed before this are doubtful */
} run_subdir;

typedef struct run_slot {
    char *name;                 /* shown in the root */
    char *file;                 /* in the run directory */
    /* The file as listed; it must still be so when opened. */
    struct timespec mtime;
    uint64_t size;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    ino_t file_ino;             /* once opened, 0 before: a copy is not the file */
    const ck_collection *collection; /* a directory of files, not a file: its
                                      * collection (run_dir.h), read-only */
    bool listed;                /* in the root now */
    bool gone;                  /* deleted or replaced: ESTALE from now on */
    bool failed;                /* did not open: EIO, not tried again (the file is as it was) */
    bool opens;                 /* opened once (or its check did): may be `latest` */
    bool check_failed;          /* latest_opens could not open it: not `latest`, yet
                                 * an access opens it as any other (in a writable run
                                 * that open finishes a save cut short first) */
    char *error;                /* failed or check_failed: why, the reader's message
                                 * (user.ckptfs.error) */
    bool said_transient;        /* a transient failure to open was said (open_failed) */
    bool read_only;             /* -o rw, but this one could not be written when last opened */
    bool said;                  /* why it is read-only, or kept though gone: said once */
    bool saving;                /* a save of ours is writing its file (slot_saves) */
    bool ours;                  /* the file is one our save wrote: complete as it is */
    ck_write_claim *claim;      /* held while open writable */
    ckfs *fs;                   /* the open checkpoint, or NULL */
    size_t cost;                /* its memory when opened (open_slot) */
    unsigned fds;               /* and its descriptors */
    uint64_t used;              /* when last used: the least recently used is closed first */
} run_slot;

struct ckrun {
    ckfs_front front;
    ckfs proto;
    char *path;                 /* for messages */
    int dir_fd;                 /* the run directory (O_PATH): every access goes
                                 * through it, no name is resolved again */
    char *mountpoint;
    double settle;
    /* Listed again every poll seconds, whatever the events say, and every
     * file not listed yet judged by its settle time alone: the directory
     * is on storage other machines write without an event here (or -o
     * watch=poll).  storage names it in messages. */
    bool polled;
    double poll;
    ck_storage storage;
    size_t budget;
    ck_open_opts open_opts;
    struct fuse_session *se;
    bool writable;              /* -o rw */
    size_t spill_max;           /* -o spill_max (0: the tree's default) */
    char *where;                /* the mount point, as writer locks name it */
    ck_file_watch *file_watch;  /* writable checkpoints' files, for other writers */
    /* The seal of ckptfs-umount (atomics): no edit taken from then on, in
     * checkpoints opened later too; failed: take edits again (on the next
     * request, which holds no checkpoint's lock). */
    bool sealed, seal_failed;
    pthread_mutex_t error_mu;   /* guards last_error, taken last (under r->mu at most) */
    char last_error[CKFS_LAST_ERROR_MAX]; /* the last failed seal's, or checkpoint that did
                                           * not open (root's xattr) */

    pthread_mutex_t mu;         /* guards what follows */
    run_slot *slots;            /* slot s is slots[s - 1] */
    size_t n_slots, cap_slots;
    uint32_t *listed;           /* listed slot indices, by name */
    size_t n_listed;
    long latest;                /* slot index of the newest, or -1 */
    struct stat dir_st;         /* the run directory's, at the last listing */
    size_t n_gone_open;         /* gone slots still open: closed by the next request */
    size_t open_cost;           /* of the open slots */
    unsigned open_fds, max_fds;
    uint64_t clock;
    uint64_t save_gen;          /* counts our saves' starts and ends: run_listing.c, relist */

    /* The watcher: inotify (or -1: listing again every second), an eventfd
     * that stops it, and when a writable file settles next (0: none). */
    int inotify_fd, stop_fd, relist_fd; /* relist_fd: list again now (a save ended,
                                         * `latest` did not open) */
    pthread_t watcher;
    bool watching;
    double next_settle;
    ck_error scan_err;          /* the last listing's failure, said once */
    /* What the events told: the watcher's own (and ckrun_new's before
     * it starts); apply_listing reads them on the watcher's thread. */
    run_writing writing[WRITING_MAX];
    size_t n_writing;
    int top_wd;                 /* the run directory's watch */
    double doubt_until;         /* its files changed before this are doubtful */
    run_subdir *subdirs;        /* its subdirectories watched (watched_name) */
    size_t n_subdirs;
    bool unwatched;             /* one of them is not: list again every second */
    bool said_unwatched;
    int wake_fd;                /* asks the request thread to close gone slots */
};

static inline uint64_t slot_of_ino(ckfs_ino ino)
{
    return (uint64_t)ino >> CKFS_INO_BITS;
}

static inline ckfs_ino slot_ino(size_t index, ckfs_ino inner)
{
    return ((ckfs_ino)(index + 1) << CKFS_INO_BITS) | inner;
}

static inline double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Whether entry e is a directory of files (a collection's), read-only. */
static inline bool entry_is_dir(const ck_run_entry *e)
{
    return e->collection != NULL;
}

/* Whether slot s is a directory of files (a collection's): a writer lock
 * is one file's, so it has none, and is read-only whatever -o rw says. */
static inline bool slot_is_dir(const run_slot *s)
{
    return s->collection != NULL;
}

/* Whether slot s must stay as it is whatever the directory shows: a save
 * of ours is writing its file, or it holds edits not saved yet.  Under
 * r->mu (which keeps s->fs open). */
static inline bool pinned(const run_slot *s)
{
    return s->saving || (s->fs != NULL && ckfs_busy(s->fs));
}

/* Whether a failure to open is the process's state rather than the
 * file's: out of descriptors or memory, which closing others may cure. */
static inline bool transient(int errnum)
{
    return errnum == EMFILE || errnum == ENFILE || errnum == ENOMEM;
}

#endif
