/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_mount: a training run's directory as one tree of snapshots
 * (run_mount.h says what is shown and why): its life, from the first
 * listing to the last save.  The run's pieces, bottom up, each calling
 * only those before it:
 *
 *   run_types.h    the run, its slots, the rules of a line (Slots, Locking)
 *   run_events.c   what inotify tells of files being written
 *   run_listing.c  which checkpoints are complete, `latest`; the watcher
 *   run_slots.c    the checkpoints' own mounts: writable, within the bound
 *   run_seal.c     ckptfs-umount's save-and-seal of every checkpoint
 *   run_ops.c      the requests: the run's nodes, the rest to a checkpoint
 *
 * -o threads is refused: a slot's open mount is the request thread's
 * alone (run_types.h, Locking).  Pinned checkpoints are closed, and saved,
 * at unmount (ckrun_close_all, after the session); the daemon exits
 * non-zero when one of those saves fails.
 */
#define _GNU_SOURCE
#include "run_mount.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <syslog.h>
#include <unistd.h>

#include "model_ops.h"
#include "run_events.h"
#include "run_listing.h"
#include "run_ops.h"
#include "run_slots.h"

ckrun *ckrun_new(const ckrun_opts *o, ck_error *err)
{
    ckrun *r = calloc(1, sizeof *r);
    if (r == NULL) {
        ck_nomem(err, o->path);
        return NULL;
    }
    r->dir_fd = r->inotify_fd = r->stop_fd = r->relist_fd = r->top_wd = r->wake_fd = -1;
    r->latest = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->error_mu, NULL);
    if ((r->path = strdup(o->path)) == NULL || (r->mountpoint = strdup(o->mountpoint)) == NULL ||
        (r->where = strdup(o->where ? o->where : o->mountpoint)) == NULL) {
        ckrun_free(r);
        ck_nomem(err, o->path);
        return NULL;
    }
    r->front = (ckfs_front){.ops = &ckrun_front_ops, .splice = &r->proto.splice,
                            .max_read = &r->proto.max_read};
    r->proto = *o->proto;
    r->settle = o->settle;
    r->budget = o->index_cache;
    r->max_fds = o->max_fds;
    r->open_opts = o->open_opts;
    r->writable = o->writable;
    r->spill_max = o->spill_max;
    if (r->writable)
        r->file_watch = ck_watch_new(); /* NULL: any new mtime counts as a write */
    r->dir_fd = open(r->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r->dir_fd >= 0 && ck_storage_of(r->dir_fd, &r->storage) < 0)
        snprintf(r->storage.name, sizeof r->storage.name, "unknown"); /* as local storage */
    r->poll = o->poll;
    r->polled = o->watch == CKRUN_WATCH_POLL ||
                (o->watch == CKRUN_WATCH_AUTO && r->storage.shared);
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->wake_fd < 0) {
        ck_fail_errno(err, errno, "%s: cannot make an eventfd", r->path);
        ckrun_free(r);
        return NULL;
    }
    if (r->dir_fd < 0 || fstat(r->dir_fd, &r->dir_st) < 0) {
        ck_fail_errno(err, errno, "%s: cannot read the run directory", r->path);
        ckrun_free(r);
        return NULL;
    }
    ckrun_events_open(r);
    ck_run_list l;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int rc = ck_run_dir_scan_at(r->dir_fd, r->path, r->settle, &now, &l, err);
    run_change ch = {0};
    if (rc == 0 && ckrun_apply_listing(r, &l, &ch) < 0)
        rc = ck_nomem(err, r->path);
    free(ch.dropped);
    ck_run_list_free(&l);
    if (rc < 0) {
        ckrun_free(r);
        return NULL;
    }
    return r;
}

void ckrun_idle_work(ckrun *r, ckfs_idle_work *work)
{
    *work = (ckfs_idle_work){.fd = r->wake_fd, .run = ckrun_close_gone_now, .arg = r};
}

ckfs_front *ckrun_front(ckrun *r)
{
    return &r->front;
}

int ckrun_start(ckrun *r, struct fuse_session *se, bool use_syslog)
{
    r->se = se;
    r->proto.se = se;
    r->proto.use_syslog = use_syslog;
    r->stop_fd = eventfd(0, EFD_CLOEXEC);
    r->relist_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = r->stop_fd < 0 || r->relist_fd < 0 ? errno
                                                : pthread_create(&r->watcher, NULL, ckrun_watch_main, r);
    if (rc != 0) {
        ckfs_log(&r->proto, LOG_ERR, "%s: cannot start watching the run: %s", r->path,
                 strerror(rc));
        return -1;
    }
    r->watching = true;
    return 0;
}

void ckrun_stop(ckrun *r)
{
    uint64_t one = 1;
    if (r->watching && write(r->stop_fd, &one, sizeof one) == sizeof one)
        pthread_join(r->watcher, NULL);
    r->watching = false;
    pthread_mutex_lock(&r->mu); /* unmounting: nothing left to invalidate */
    r->se = NULL;
    r->proto.se = NULL;
    for (size_t i = 0; i < r->n_slots; i++) {
        ckfs *fs = r->slots[i].fs;
        if (fs == NULL)
            continue;
        ckfs_leave_session(fs);
    }
    pthread_mutex_unlock(&r->mu);
}

int ckrun_close_all(ckrun *r)
{
    int rc = 0;
    for (size_t i = 0; i < r->n_slots; i++) {
        run_slot *s = &r->slots[i];
        pthread_mutex_lock(&r->mu);
        ckfs *fs = s->fs;
        pthread_mutex_unlock(&r->mu);
        if (fs == NULL)
            continue;
        /* Its last save tells the run (slot_saves): not under r->mu. */
        if (ckfs_saver_stop(fs) < 0)
            rc = -1;
        pthread_mutex_lock(&r->mu);
        ckrun_release_slot(r, s);
        pthread_mutex_unlock(&r->mu);
    }
    return rc;
}

void ckrun_free(ckrun *r)
{
    if (r == NULL)
        return;
    ckrun_stop(r);
    ckrun_close_all(r); /* after a failed start: nothing to save */
    if (r->stop_fd >= 0)
        close(r->stop_fd);
    if (r->relist_fd >= 0)
        close(r->relist_fd);
    if (r->inotify_fd >= 0)
        close(r->inotify_fd);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    if (r->dir_fd >= 0)
        close(r->dir_fd); /* after the writer locks, which are beneath it */
    for (size_t i = 0; i < r->n_writing; i++)
        free(r->writing[i].name);
    for (size_t i = 0; i < r->n_subdirs; i++)
        free(r->subdirs[i].name);
    free(r->subdirs);
    for (size_t i = 0; i < r->n_slots; i++) {
        free(r->slots[i].name);
        free(r->slots[i].file);
        free(r->slots[i].error);
    }
    ck_watch_free(r->file_watch);
    free(r->slots);
    free(r->listed);
    free(r->path);
    free(r->mountpoint);
    free(r->where);
    pthread_mutex_destroy(&r->error_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
