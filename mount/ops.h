/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops: what a mount answers, as plain results (issue 40).
 *
 * Every operation of a mount is a function that takes plain arguments (the
 * inode, offsets, who asks) and returns 0 or a negative errno, filling a
 * plain result: an entry, attributes, a read plan, a listing through a
 * callback, an xattr value.  None replies: the FUSE adapter decodes the
 * request, calls the operation through the session's front (one vtable,
 * ckfs_front_ops, which a model mount and a run directory both implement)
 * and replies once.  So the operations are tested without the kernel
 * (tests/unit/test_mount_ops.c).
 *
 * An operation may leave its mount's lock held for the reply (ckfs_hold):
 * a read plan names descriptors a save would close, and an xattr's value
 * may be the mount's own text.  The adapter replies, then ends the hold.
 *
 * A request that waits for a save is not answered by the operation at
 * all: it returns CKFS_DEFER with what the wait is (ckfs_defer), the lock
 * still held, and the adapter hands its request to the saver through
 * fuse/save_reply.c, which answers it when the save has ended.
 */
#ifndef CKPTFS_OPS_H
#define CKPTFS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

/* An inode number as the session shows it. */
typedef uint64_t ckfs_ino;

/* Who asks.  Their supplementary groups only when a check needs them
 * (another user's read of a tensor): groups(c, cap, list) writes up to
 * cap of them and returns how many there are (more than cap: ask again
 * with as many), or a negative count when unknown; NULL: none. */
typedef struct ckfs_caller ckfs_caller;
struct ckfs_caller {
    uid_t uid;
    gid_t gid;
    pid_t pid;
    mode_t umask;
    int (*groups)(const ckfs_caller *c, int cap, gid_t *list);
    void *req;      /* the adapter's own: its request */
    /* Answer the request later with an errno (0: done), from any thread:
     * a run directory's seal, which waits for every checkpoint's save. */
    void (*answer_later)(void *req, int errnum);
};

/* A lookup's answer: the node, its attributes, how long the kernel may
 * keep both. */
typedef struct ckfs_entry_out {
    ckfs_ino ino;
    uint64_t generation;
    struct stat attr;
    double attr_timeout;
    double entry_timeout;
} ckfs_entry_out;

typedef struct ckfs_attr_out {
    struct stat st;
    double timeout;
} ckfs_attr_out;

/* One piece of a read's answer: bytes in memory (mem), or len bytes of
 * descriptor fd from off, which the adapter splices when it may. */
typedef struct ckfs_piece {
    const void *mem;
    int fd;
    uint64_t off;
    size_t len;
} ckfs_piece;

/* A read's answer: its pieces in order; owned: memory the plan frees. */
typedef struct ckfs_read_plan {
    ckfs_piece *pieces;
    size_t n, cap;
    size_t bytes;           /* the pieces' lengths together */
    char *owned;
    bool splice;            /* the mount lets the adapter splice */
    const struct ckfs *log_to; /* where a failed reply is said */
    const char *path;       /* and of which file */
    uint64_t off;           /* where the read began */
} ckfs_read_plan;

void ckfs_plan_init(ckfs_read_plan *p);
void ckfs_plan_free(ckfs_read_plan *p);
/* Add a piece (merged with the last one when they are contiguous memory);
 * -ENOMEM. */
int ckfs_plan_fd(ckfs_read_plan *p, int fd, uint64_t off, size_t len);
int ckfs_plan_mem(ckfs_read_plan *p, const void *mem, size_t len);
/* Memory of len bytes the plan owns, for a copy; NULL: out of memory. */
char *ckfs_plan_buffer(ckfs_read_plan *p, size_t len);

/* A listing, one name at a time: add returns false when the reply is
 * full (that name is not in it).  e->ino is 0 for "." and ".." of a
 * listing with entries (plus): they carry no lookup reference. */
typedef bool (*ckfs_dir_add)(void *ctx, const char *name, const ckfs_entry_out *e, off_t next);

/* An extended attribute's value: value (len bytes) points into text or
 * at the mount's own, valid while the hold lasts. */
#define CKFS_XATTR_TEXT 4096
typedef struct ckfs_xattr_out {
    const void *value;
    size_t len;
    char text[CKFS_XATTR_TEXT];
} ckfs_xattr_out;

/* An open's answer: the handle and whether cached pages stay. */
typedef struct ckfs_open_out {
    uint64_t fh;
    bool keep_cache;
} ckfs_open_out;

/* A handle that holds the automatic save back (an open for writing). */
#define FH_WRITER 1

/* How a request that waits for a save is answered (fuse/save_reply.c). */
enum reply {
    REPLY_ERR,      /* a second close of snapshot_done: the save's errno */
    REPLY_SYNC,     /* fsync: the errno of a save that holds back other
                     * tensors' refused edits (tree_save_ask.hold) */
    REPLY_OK,       /* a rename over snapshot_done: 0 whatever the save did */
    REPLY_OPEN,     /* `: > snapshot_done` */
    REPLY_ENTRY,    /* mknod snapshot_done */
    REPLY_SEAL,     /* ckptfs-umount: take no more edits once saved */
};

/* What a deferred request waits for. */
typedef enum ckfs_defer_kind {
    DEFER_SAVE,         /* ckfs_ask_save(req, fs, ino, reply, the open's answer) */
    DEFER_CREATE_DONE,  /* create of snapshot_done: answered now, its close waits */
    DEFER_FLUSH_DONE,   /* the close of that create: the save's errno */
    DEFER_SEAL,         /* user.ckptfs.unmount on a model mount */
} ckfs_defer_kind;

typedef struct ckfs_defer {
    ckfs_defer_kind kind;
    struct ckfs *fs;    /* the mount whose saver answers */
    ckfs_ino ino;       /* the mount's own number of the node asked through */
    enum reply reply;
    uint64_t fh;        /* DEFER_FLUSH_DONE: the created file's handle */
} ckfs_defer;

/* Returned (positive) by an operation whose request waits: not answered. */
#define CKFS_DEFER 1
/* Returned by an operation that took the request to answer it itself
 * later, through the caller's answer_later (a run directory's seal). */
#define CKFS_ANSWERED_LATER 2

/* The lock an operation left held for the reply; ckfs_hold_end lets go
 * (and tells the kernel when snapshot_done came or went meanwhile). */
typedef struct ckfs_hold {
    struct ckfs *fs;
    bool exclusive;
    bool done;          /* exclusive: whether the tree equalled the file before */
} ckfs_hold;

void ckfs_hold_end(ckfs_hold *h);

/* setattr's request: which of attr's fields to set. */
enum {
    CKFS_SET_MODE = 1 << 0,
    CKFS_SET_UID = 1 << 1,
    CKFS_SET_GID = 1 << 2,
    CKFS_SET_SIZE = 1 << 3,
    CKFS_SET_ATIME = 1 << 4,
    CKFS_SET_MTIME = 1 << 5,
    CKFS_SET_ATIME_NOW = 1 << 7,
    CKFS_SET_MTIME_NOW = 1 << 8,
    CKFS_SET_CTIME = 1 << 10,
};

typedef struct ckfs_front ckfs_front;

/* What a session's requests are answered by: one vtable, which a model
 * mount (mount/model_ops.c) and a run directory (mount/run_ops.c, which hands a
 * checkpoint's nodes to that checkpoint's own front) both implement.
 * Every inode number is the session's.  Each returns 0, a negative errno,
 * or CKFS_DEFER (only those given a defer); h may be left holding a lock.
 * NULL entries answer ENOSYS. */
typedef struct ckfs_front_ops {
    int (*lookup)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                  ckfs_entry_out *out, ckfs_hold *h);
    int (*getattr)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_attr_out *out,
                   ckfs_hold *h);
    int (*setattr)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const struct stat *attr,
                   int to_set, ckfs_attr_out *out, ckfs_hold *h);
    int (*readlink)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, char *target,
                    size_t cap, ckfs_hold *h);
    int (*opendir)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_hold *h);
    int (*readdir)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, off_t off, bool plus,
                   ckfs_dir_add add, void *ctx, ckfs_hold *h);
    /* flags: the open's (O_ACCMODE, O_TRUNC). */
    int (*open)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, int flags,
                ckfs_open_out *out, ckfs_defer *d, ckfs_hold *h);
    int (*read)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, size_t size, off_t off,
                ckfs_read_plan *plan, ckfs_hold *h);
    int (*write)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *buf, size_t size,
                 off_t off, ckfs_hold *h);
    int (*flush)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh, ckfs_defer *d,
                 ckfs_hold *h);
    /* *save_handle: fh was a created snapshot_done's, which the adapter
     * lets go of (fuse/save_reply.c). */
    int (*release)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh,
                   bool *save_handle, ckfs_hold *h);
    int (*fsync)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_defer *d,
                 ckfs_hold *h);
    /* create: flags as open's; out->fh FH_WRITER when it writes. */
    int (*create)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                  mode_t mode, int flags, ckfs_entry_out *e, ckfs_open_out *out, ckfs_defer *d,
                  ckfs_hold *h);
    int (*mknod)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                 mode_t mode, ckfs_entry_out *e, ckfs_defer *d, ckfs_hold *h);
    int (*mkdir)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                 mode_t mode, ckfs_entry_out *e, ckfs_hold *h);
    int (*unlink)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                  ckfs_hold *h);
    int (*rmdir)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                 ckfs_hold *h);
    int (*rename)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                  ckfs_ino newparent, const char *newname, unsigned flags, ckfs_defer *d,
                  ckfs_hold *h);
    int (*symlink)(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, ckfs_hold *h);
    int (*link)(ckfs_front *f, const ckfs_caller *c, ckfs_ino newparent, ckfs_hold *h);
    /* size: the caller's buffer (0: only the length is asked); an
     * operation that answers ERANGE itself does so by that. */
    int (*getxattr)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                    ckfs_xattr_out *out, ckfs_hold *h);
    int (*listxattr)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_xattr_out *out,
                     ckfs_hold *h);
    int (*setxattr)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                    const char *value, size_t size, ckfs_defer *d, ckfs_hold *h);
    int (*statfs)(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, struct statvfs *out,
                  ckfs_hold *h);
    /* The session has ended (NULL: nothing to do). */
    void (*destroy)(ckfs_front *f);
} ckfs_front_ops;

/* splice: whether reads may be spliced, which INIT clears when the kernel
 * cannot; max_read: the mount's, which INIT must repeat. */
struct ckfs_front {
    const ckfs_front_ops *ops;
    bool *splice;
    const unsigned *max_read;
};

#endif
