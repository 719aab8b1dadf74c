/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs: a mount's shared state and entry points, with no libfuse in it
 * (issue 40: the FUSE adapter is fuse/, which includes this).
 *
 * A mount answers requests from the tree (mount/tree.h: the model's index
 * plus unsaved edits), its operations returning plain results
 * (mount/ops.h); it holds no format knowledge.  Tree:
 *   /                       root
 *   /snapshot_done          empty file: the tree equals the model file
 *   /<dir_name>/            one directory per visible tensor
 *   /<dir_name>/meta        its type and shape (codec/view.h)
 *   /<dir_name>/out         the tensor's bytes
 * or, with -o as=NAME, only the files of format NAME's view (mount/file_view.h).
 *
 * Requests are answered on one thread by default (fuse/session_loop.c),
 * or on libfuse's pool with -o threads (-s forces one); saves run on a
 * thread of their own (mount/saver.c).  One request thread and splice
 * without SPLICE_MOVE both measured fastest on the 2-core reference
 * machine (docs/benchmarks.md).  Every request holds the mount's
 * reader-writer lock: shared when it only looks at the tree (lookup,
 * getattr, readdir, read, getxattr, statfs, an open for reading),
 * exclusive when it may change it; the front at the end of
 * mount/model_ops.c says which.
 */
#ifndef CKPTFS_H
#define CKPTFS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "../codec/core/model.h"
#include "../codec/open_path.h"
#include "../codec/core/version.h"
#include "ops.h"
#include "tree.h"

/* The FUSE session and a request: only the adapter (fuse/ll_ops.c) looks
 * inside; here they are handles it hands down and gets back. */
struct fuse_session;
struct fuse_req;

/* "TIME PATH: reason" of the last refused operation. */
#define CKFS_LAST_ERROR_MAX 4096

/* A request whose reply waits for a save. */
typedef struct ckfs_waiter ckfs_waiter;
struct ckfs_waiter {
    ckfs_waiter *next;
    struct fuse_req *req;
    ckfs_ino ino;               /* the node the save was asked through */
    int reply;                  /* how to answer it: see fuse/save_reply.h */
    bool make_file;             /* asked by name (snapshot_done, fsync): a model not
                                 * on disk yet is written even with no edit */
    pid_t pid;                  /* the asking process (0: none): tree_save_ask.copier */
    ckfs_open_out fi;           /* an open's answer */
    /* fsync: other tensors that block the save do not fail it, unless
     * the tensor asked through (entry, its position; -1: none) is one. */
    bool hold;
    int64_t entry;
    /* The one way a waiter is completed: the saver tells it the save's
     * outcome (errnum, the refusal's text) under the mount's lock, then
     * frees it.  Set by whoever asks (fuse/save_reply.c answers a request;
     * a run directory's seal joins several saves), so that the saver
     * calls nothing above it. */
    void (*done)(ckfs_waiter *w, int errnum, const char *why);
    void *arg;
    struct ckfs *fs;            /* the mount it waits on (set by ckfs_saver_ask) */
};

/* The thread that saves, beside the request loop: asked by a request
 * (touch snapshot_done, fsync, ckptfs-umount's seal), or on its own when
 * the automatic save is due.  Its mutex is taken after the mount's lock,
 * never before. */
typedef struct ckfs_saver {
    pthread_t thread;
    bool running;
    pthread_mutex_t mu;     /* guards what follows */
    pthread_cond_t wake;
    bool stop;              /* unmounting: answer who asked, then end */
    bool armed;             /* sleeping until the automatic save is due */
    bool poked;             /* the tree changed since the saver last looked */
    ckfs_waiter *asked;     /* waiting for the next save */
    bool final;             /* the save at unmount: nobody left to tell */
    unsigned forgetting;    /* threads telling the kernel of renames (forget_later) */
    pthread_cond_t forgotten;
} ckfs_saver;

typedef struct ckfs ckfs;

/* Each model mount owns the inode numbers below 2^CKFS_INO_BITS
 * (mount/inode_map.h); a run directory tells its checkpoints apart by the
 * bits above, and hands each checkpoint's front (mount/ops.h) its own
 * numbers. */
#define CKFS_INO_BITS 42
#define CKFS_INO_MASK ((1ull << CKFS_INO_BITS) - 1)

struct ckfs {
    ckfs_front front;       /* its operations (mount/model_ops.c): the session's for a
                             * one-model mount, a run's for its checkpoints */
    ckfs_ino ino_base;      /* added to every inode number the kernel sees */
    /* The generation of every node but the kernel's root (which must have
     * 0): one per mount, drawn at random, so that an NFS file handle kept
     * from an earlier mount (same fsid=) is stale, never a tensor this
     * mount numbers alike.  Within the mount no number is reused
     * (mount/inode_map.h), so one generation for all of them keeps every
     * (ino, generation) pair unique. */
    uint32_t generation;
    /* Every request holds it, shared when it only looks at the tree and
     * exclusive when it changes it; the saver holds it exclusively only to
     * begin and to end a save, so a save's encoding runs beside requests. */
    pthread_rwlock_t lock;
    ckfs_saver saver;
    tree tr;                /* the model and the edits not yet saved */
    struct fuse_session *se; /* to invalidate what the kernel caches */
    bool use_syslog;        /* daemonized: log to syslog instead of stderr */
    int log_fd;             /* -o log=PATH, appended to; -1 without */
    const char *mountpoint; /* absolute: refusals name the path they concern */
    /* The last refused operation (user.ckptfs.last_error); a successful
     * save clears it. */
    char last_error[CKFS_LAST_ERROR_MAX];
    double timeout;         /* entry/attr cache timeout */
    bool splice;            /* serve `out` by splicing from the file */
    unsigned max_read;      /* the mount's max_read, which op_init must repeat */
    bool final_commit_failed; /* the save at unmount failed: exit non-zero */
    /* Where the edits a failed save at unmount would lose are kept
     * (-o recovery_dir; NULL: beside the model): mount/recovery.h. */
    const char *recovery_dir;
    /* The running save's count of bytes written (user.ckptfs.progress);
     * the saver's thread counts, requests read it (ck_progress_read). */
    ck_progress save_progress;
    /* ckptfs-umount saved and is unmounting: no edit is taken, so the save
     * at unmount has nothing left to do, hence nothing left to fail. */
    bool sealed;
    bool sealing;           /* a seal's save is running: edits wait for its outcome */
    bool changed_logged;    /* the model changed under the mount: said once (atomic) */
    /* Saving on its own: commit_delay seconds after the last edit, with no
     * file open for writing (never when commit_delay < 0: -o commit=manual). */
    double commit_delay;
    unsigned open_writers;
    struct timespec last_edit;
    bool auto_commit_failed;  /* wait for a new edit before trying again */
    /* Told on the saver's thread, holding no lock, when a save begins to
     * write and when it has ended (committed: the tree is the new file):
     * a run directory tells its checkpoints' own saves from other
     * programs' writes so.  NULL: nobody. */
    void (*on_save)(ckfs *fs, bool begins, bool committed);
    void *owner;
    /* Tell the kernel of the names a save renamed, from threads that the
     * saver's stop waits for (mount/saver.c, forget_later): a one-model
     * mount, whose stop comes after the session's end.  A run
     * directory's checkpoints are closed while requests that wait for the
     * run may hold the directory lock those threads wait for. */
    bool tell_renames;
    /* The session was mounted -o rw: no mount of it answers OPEN or FLUSH
     * with ENOSYS, which the kernel takes for the whole connection (a
     * read-only checkpoint of a writable run would end every writable
     * one's opens and closes reaching the daemon). */
    bool session_rw;
    /* -o allow_other: other users reach the mount.  The kernel's page
     * cache serves every user alike, so a tensor one user has read would
     * reach another without a read request to check (may_read): their
     * opens are checked instead, and so this mount answers OPEN. */
    bool others_read;
    /* -o as=NAME: the root shows the files of format NAME's view, the
     * model as that format's files (mount/file_view.h), instead of the tree;
     * NULL otherwise. */
    struct ckfs_view *view;
};

#define ckfs_of_front(f) ((ckfs *)((char *)(f) - offsetof(ckfs, front)))

/* Extended attributes every mount answers the same way. */
#define XATTR_PID "user.ckptfs.pid"         /* the daemon's, for ckptfs-umount */
#define XATTR_UNMOUNT "user.ckptfs.unmount" /* set by ckptfs-umount */
#define XATTR_LAST_ERROR "user.ckptfs.last_error" /* the last refusal */
#define XATTR_PROGRESS "user.ckptfs.progress"   /* a running save's bytes written */
#define XATTR_ERROR "user.ckptfs.error" /* a run's checkpoint: why it does not open */
/* security.* and system.*: never served, and answered EOPNOTSUPP so that
 * the kernel and ls stop asking (docs/benchmarks.md). */
bool ckfs_unserved_xattr(const char *name);
/* An xattr's answer: text (cut at CKFS_XATTR_TEXT), or this process's id. */
int ckfs_xattr_text(ckfs_xattr_out *out, const char *text);
int ckfs_xattr_pid(ckfs_xattr_out *out);
/* Whether an open with these flags writes (or truncates). */
bool ckfs_opens_writer(int flags);

/* A model mount's front (mount/model_ops.c), its inode numbers as they are. */
void ckfs_front_init(ckfs *fs);
/* The mount's lock, writers first: a save waiting to switch the tree is
 * not starved by a stream of reads. */
void ckfs_lock_init(ckfs *fs);

/* mount/mount_setup.c.  Make the open model the tree of fs, whose settings
 * are made (timeouts, splice, commit delay...): writable or not (a
 * writable one's leftovers of a save cut short removed first: its writer
 * lock must be held), edits held within spill_max (0: the default), and
 * the mount's lock.  -1 with err: fs holds nothing, the model is still
 * the caller's. */
int ckfs_attach(ckfs *fs, ck_model *model, const ck_open_opts *oo, bool writable,
                uint64_t spill_max, ck_error *err);
/* Let go of what ckfs_attach made, the model (the save's last) with it. */
void ckfs_detach(ckfs *fs);

/* mount/model_ops.c.  The seal (ckptfs-umount's user.ckptfs.unmount=1):
 * save, and take no edit if that worked; w (with its done) is told the
 * outcome.  Unseal (=0, or a run's failed seal): take edits again.  Each
 * takes the lock; the _locked forms are called holding it exclusively
 * (a model mount's own setxattr). */
void ckfs_seal(ckfs *fs, ckfs_waiter *w);
void ckfs_seal_locked(ckfs *fs, ckfs_waiter *w);
void ckfs_unseal(ckfs *fs);
void ckfs_unseal_locked(ckfs *fs);
/* Whether fs has something to save or is saving: a run directory keeps
 * it open.  Takes the lock. */
bool ckfs_busy(ckfs *fs);

/* mount/saver.c.  Start the saver (after the daemon has forked), or only
 * prepare it, its thread starting with the first edit or save asked for
 * (a run directory's checkpoints: most are only read); ask it for a
 * save with a waiter (the mount's lock held exclusively; w->done set),
 * which it records (last_error, the log) and tells w; tell it the
 * tree changed (the lock held); stop it at unmount, after the last
 * request, and make the final save: 0, or -1 when that save failed. */
int ckfs_saver_start(ckfs *fs);
void ckfs_saver_init(ckfs *fs);
void ckfs_saver_ask(ckfs *fs, ckfs_waiter *w);
void ckfs_saver_poke(ckfs *fs);
int ckfs_saver_stop(ckfs *fs);
/* The session is ending (before fs->se goes): tell the kernel nothing
 * more about renames. */
void ckfs_saver_unmounting(ckfs *fs);

/* Work another thread asks the request thread to do between requests:
 * it writes to fd (an eventfd, non-blocking), the loop reads it and calls
 * run(arg).  A run directory's watcher closes deleted checkpoints so. */
typedef struct ckfs_idle_work {
    int fd;
    void (*run)(void *arg);
    void *arg;
} ckfs_idle_work;


/* mount/log.c.  One line to stderr or syslog, and to the -o log file. */
void ckfs_log(const ckfs *fs, int priority, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An operation on path (in the tree) was refused: log the reason and keep
 * it, with the time, as user.ckptfs.last_error. */
void ckfs_refused(ckfs *fs, const char *path, const ck_error *err);
/* Now, in ISO 8601 (UTC), as user.ckptfs.last_error begins. */
void ckfs_iso_time(char *buf, size_t cap);

#endif
