/*
 * ckptfs: the FUSE front-end's shared state and entry points.
 *
 * The front-end is a thin translation of FUSE low-level requests onto the
 * tree (fs/tree.h: the model's index plus unsaved edits); it holds no
 * format knowledge.  Tree:
 *   /                       root
 *   /snapshot_done          empty file: the tree equals the model file
 *   /<dir_name>/            one directory per visible tensor
 *   /<dir_name>/meta        OneFlow VariableMetaInfo text
 *   /<dir_name>/out         the tensor's bytes
 */
#ifndef CKPTFS_H
#define CKPTFS_H

#define FUSE_USE_VERSION 34

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <time.h>

#include "../codec/model.h"
#include "tree.h"

#define CKPTFS_VERSION "0.1.0"

/* "TIME PATH: reason" of the last refused operation. */
#define CKFS_LAST_ERROR_MAX 4096

typedef struct ckfs {
    tree tr;                /* the model and the edits not yet saved */
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
    /* ckptfs-umount saved and is unmounting: no edit is taken, so the save
     * at unmount has nothing left to do, hence nothing left to fail. */
    bool sealed;
    bool changed_logged;    /* the model changed under the mount: said once */
    /* Saving on its own: commit_delay seconds after the last edit, with no
     * file open for writing (never when commit_delay < 0: -o commit=manual). */
    double commit_delay;
    unsigned open_writers;
    struct timespec last_edit;
    bool auto_commit_failed;  /* wait for a new edit before trying again */
} ckfs;

extern const struct fuse_lowlevel_ops ckfs_ops;

/* Milliseconds until the automatic save is due, or -1 for none pending. */
int ckfs_commit_wait_ms(const ckfs *fs);
/* The automatic save, run by the session loop when it is due. */
void ckfs_auto_commit(ckfs *fs);

/* One line to stderr or syslog, and to the -o log file. */
void ckfs_log(const ckfs *fs, int priority, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An operation on path (in the tree) was refused: log the reason and keep
 * it, with the time, as user.ckptfs.last_error. */
void ckfs_refused(ckfs *fs, const char *path, const ck_error *err);

#endif
