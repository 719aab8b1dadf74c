/* SPDX-License-Identifier: Apache-2.0 */
/*
 * saver: the thread that saves a writable mount's edits, beside the
 * request loop.
 *
 * A save takes seconds for a model of gigabytes; answering no request
 * meanwhile would hang every program that touches the mount.  So the
 * saver takes the mount's lock only to begin a save (describe the tree,
 * freeze what it reads) and to end it (switch the tree to the new file,
 * answer who asked); encoding, verifying and committing run without it
 * (mount/tree.h, tree_save_*).
 *
 * A request that asks for a save (touch snapshot_done, fsync, a seal) is
 * queued and answered after the next save that begins after it, so that
 * the save covers every edit made before the request.  The automatic save
 * is the saver's own: it sleeps until commit_delay after the last edit
 * (commit_wait_ms), and is woken only when it was not already going
 * to wake up, so that edits cost no wakeup.
 *
 * A run directory's checkpoints start their saver's thread only when
 * something is to be saved (ckfs_saver_init): a browsed checkpoint costs
 * no thread.
 */
#include "ckptfs.h"
#include "inode_map.h"
#include "invalidate.h"
#include "nodes.h"
#include "recovery.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

typedef struct forget_job {
    ckfs *fs;
    struct fuse_session *se;
    tree_renamed *list;
    size_t n;
} forget_job;

static void *forget_main(void *arg)
{
    forget_job *job = arg;
    ckfs_saver *s = &job->fs->saver;
    pthread_mutex_lock(&s->mu);
    bool unmounting = s->final;
    pthread_mutex_unlock(&s->mu);
    ckfs_forget_names(unmounting ? NULL : job->se, job->fs->ino_base | INO_ROOT,
                      job->list, job->n);
    pthread_mutex_lock(&s->mu);
    s->forgetting--;
    pthread_cond_broadcast(&s->forgotten);
    pthread_mutex_unlock(&s->mu);
    free(job);
    return NULL;
}

/* Tell the kernel of the directories a save renamed (a copied
 * snapshot's names), on a thread of its own: the kernel takes the root's
 * directory lock for it, which a request waiting for the saver may hold
 * (ckptfs-umount's setxattr on the root).  Only names it cached long
 * need this: those of unsaved directories are not cached (nodes.c,
 * name_timeout_of); without it (fs->tell_renames) such an old name stays
 * until the root is listed or the new name looked up, when the kernel
 * moves the directory's one name.  se: the session, read under the
 * mount's lock. */
static void forget_later(ckfs *fs, struct fuse_session *se, tree_renamed *list, size_t n)
{
    ckfs_saver *s = &fs->saver;
    ckfs_renamed_inodes(fs, list, n);
    forget_job *job = n > 0 && se != NULL && fs->tell_renames ? malloc(sizeof *job) : NULL;
    pthread_attr_t attr;
    pthread_t t;
    if (job == NULL) {
        tree_renamed_free(list, n);
        return;
    }
    *job = (forget_job){.fs = fs, .se = se, .list = list, .n = n};
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&s->mu);
    bool started = !s->final && pthread_create(&t, &attr, forget_main, job) == 0;
    if (started)
        s->forgetting++;
    pthread_mutex_unlock(&s->mu);
    pthread_attr_destroy(&attr);
    if (!started) {
        tree_renamed_free(list, n);
        free(job);
    }
}

void ckfs_saver_unmounting(ckfs *fs)
{
    ckfs_saver *s = &fs->saver;
    pthread_mutex_lock(&s->mu);
    s->final = true;
    /* The session's descriptor is closed after this: a thread still in
     * the middle of telling the kernel would write to whatever file took
     * the number next (the final save's).  Waiting cannot hang: what such
     * a thread waits for is a request waiting for the saver, which still
     * runs and answers it, or an unmount, which ends both. */
    while (s->forgetting > 0)
        pthread_cond_wait(&s->forgotten, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* After a save (rc, err) under the mount's lock: record the outcome (the
 * refusal logged, kept in user.ckptfs.last_error) and complete each
 * waiter through its own done, freeing it; automatic: nobody asked. */
static void saved(ckfs *fs, int rc, const ck_error *err, ckfs_waiter *waiters, bool automatic)
{
    char path[NODE_PATH_MAX];
    int errnum = rc == 0 ? 0 : err->errnum ? err->errnum : EIO;
    if (rc == 0)
        fs->last_error[0] = '\0';
    else
        ckfs_refused(fs, ckfs_path_of(fs, waiters ? waiters->ino : INO_ROOT, NULL, path,
                                      sizeof path), err);
    if (rc != 0 && automatic)
        fs->auto_commit_failed = true; /* wait for a new edit before trying again */
    while (waiters != NULL) {
        ckfs_waiter *next = waiters->next;
        waiters->done(waiters, errnum, fs->last_error);
        free(waiters);
        waiters = next;
    }
}

/* What the waiters ask of a save: it may hold back tensors that block
 * it only when each of them is an fsync, and never the fsync'd ones
 * (need: their entries; freed by the caller); it may wait for a copy
 * (copier) only when one process asked, through snapshot_done. */
static void ask_of(const ckfs_waiter *waiters, tree_save_ask *ask, uint32_t **need)
{
    size_t n = 0;
    *ask = (tree_save_ask){.hold = waiters != NULL,
                           .copier = waiters != NULL ? waiters->pid : 0};
    for (const ckfs_waiter *w = waiters; w != NULL; w = w->next, n++) {
        ask->make_file |= w->make_file;
        ask->hold &= w->hold;
        if (w->ino != INO_SNAPSHOT_DONE || w->pid != ask->copier)
            ask->copier = 0;
    }
    *need = ask->hold ? malloc(n * sizeof **need) : NULL;
    if (*need == NULL) {
        ask->hold = false; /* out of memory: the save fails as a whole, if it does */
        return;
    }
    for (const ckfs_waiter *w = waiters; w != NULL; w = w->next)
        if (w->entry >= 0)
            (*need)[ask->n_need++] = (uint32_t)w->entry;
    ask->need = *need;
}

/* One save, with the requests that wait for it; 0 or -1 (why: the
 * reason, when not NULL). */
static int save(ckfs *fs, ckfs_waiter *waiters, bool automatic, ck_error *why)
{
    ck_error err = {0}, held = {0};
    tree_save *job = NULL;
    ck_model *old = NULL;
    tree_renamed *renamed;
    tree_save_ask ask;
    uint32_t *need;
    ask_of(waiters, &ask, &need);
    pthread_rwlock_wrlock(&fs->lock);
    int rc = tree_save_begin_ask(&fs->tr, &job, &ask, &held, &err);
    free(need);
    size_t n_renamed = tree_take_renamed(&fs->tr, &renamed);
    struct fuse_session *se = fs->se;
    bool wrote = job != NULL;
    if (wrote) {
        pthread_rwlock_unlock(&fs->lock);
        if (fs->on_save != NULL)
            fs->on_save(fs, true, false);
        /* A bar with -f on a terminal; the count always, for the attribute. */
        tree_save_show_progress(job, &fs->save_progress,
                                !fs->use_syslog && isatty(STDERR_FILENO) ? stderr : NULL);
        rc = tree_save_run(job, &err);
        pthread_rwlock_wrlock(&fs->lock);
        rc = tree_save_end(&fs->tr, job, rc, &old, &err);
        pthread_rwlock_unlock(&fs->lock);
        /* The replaced file is closed before the new one is renamed over
         * it (tree_save_finish), and not while requests wait. */
        ck_model_close(old);
        rc = tree_save_finish(job, rc, &err);
        pthread_rwlock_wrlock(&fs->lock);
        fs->tr.placing = false;
        if (rc == 0) /* the placed file's mtime (ck_model_watch_files) */
            fs->tr.file_st.st_mtim = fs->tr.model->st.st_mtim;
    }
    ckfs_ino asked_through = waiters != NULL ? waiters->ino : INO_ROOT;
    saved(fs, rc, &err, waiters, automatic); /* frees the waiters */
    if (rc == 0 && held.msg[0] != '\0') { /* said where a failed save's reason is */
        char path[NODE_PATH_MAX];
        ckfs_refused(fs, ckfs_path_of(fs, asked_through, NULL, path, sizeof path), &held);
    }
    pthread_rwlock_unlock(&fs->lock);
    if (wrote && fs->on_save != NULL)
        fs->on_save(fs, false, rc == 0);
    if (wrote && rc == 0)
        ckfs_invalidate_times(fs); /* the kernel caches them long */
    forget_later(fs, se, renamed, n_renamed);
    if (why != NULL)
        *why = err;
    return rc;
}

/* Milliseconds until the automatic save is due, or -1 for none pending.
 * Under the mount's lock. */
static int commit_wait_ms(const ckfs *fs)
{
    if (!fs->tr.writable || fs->commit_delay < 0 || fs->open_writers > 0 ||
        fs->auto_commit_failed || !tree_dirty(&fs->tr))
        return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double since = (double)(now.tv_sec - fs->last_edit.tv_sec) +
                   (double)(now.tv_nsec - fs->last_edit.tv_nsec) / 1e9;
    double left = fs->commit_delay - since;
    return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

/* Milliseconds until the automatic save is due (-1: none pending). */
static int due_in(ckfs *fs)
{
    pthread_rwlock_rdlock(&fs->lock);
    int ms = commit_wait_ms(fs);
    pthread_rwlock_unlock(&fs->lock);
    return ms;
}

static void wait_ms(ckfs_saver *s, int ms)
{
    if (ms < 0) {
        pthread_cond_wait(&s->wake, &s->mu);
        return;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->wake, &s->mu, &until);
}

static void *saver_main(void *arg)
{
    ckfs *fs = arg;
    ckfs_saver *s = &fs->saver;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        ckfs_waiter *asked = s->asked;
        if (asked == NULL && s->stop)
            break;
        if (asked == NULL) {
            s->poked = false;
            pthread_mutex_unlock(&s->mu);
            int ms = due_in(fs);
            pthread_mutex_lock(&s->mu);
            if (ms != 0) {
                if (s->poked || s->asked != NULL || s->stop)
                    continue; /* changed while we looked */
                s->armed = ms > 0;
                wait_ms(s, ms);
                s->armed = false;
                continue;
            }
        }
        asked = s->asked; /* with any that came while we looked */
        s->asked = NULL;
        pthread_mutex_unlock(&s->mu);
        save(fs, asked, asked == NULL, NULL);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void ckfs_saver_init(ckfs *fs)
{
    ckfs_saver *s = &fs->saver;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* commit_delay is measured so */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, &ca);
    pthread_cond_init(&s->forgotten, NULL);
    pthread_condattr_destroy(&ca);
}

/* The thread, if it is not running yet (under s->mu, or before any
 * request); 0, or the error number. */
static int start_thread(ckfs *fs, ckfs_saver *s)
{
    if (s->running || !fs->tr.writable)
        return 0; /* nothing to save, ever, for a read-only one */
    int rc = pthread_create(&s->thread, NULL, saver_main, fs);
    if (rc != 0) {
        ckfs_log(fs, LOG_ERR, "%s: cannot start the saving thread: %s", fs->tr.model->path,
                 strerror(rc));
        return rc;
    }
    s->running = true;
    return 0;
}

int ckfs_saver_start(ckfs *fs)
{
    ckfs_saver_init(fs);
    return start_thread(fs, &fs->saver) == 0 ? 0 : -1;
}

void ckfs_saver_ask(ckfs *fs, ckfs_waiter *w)
{
    ckfs_saver *s = &fs->saver;
    w->fs = fs;
    pthread_mutex_lock(&s->mu);
    int rc = start_thread(fs, s);
    if (rc == 0) {
        ckfs_waiter **tail = &s->asked;
        while (*tail != NULL)
            tail = &(*tail)->next;
        w->next = NULL;
        *tail = w;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) { /* nobody would answer it: say why now */
        ck_error err = {0};
        ck_fail(&err, rc, "cannot start the saving thread: %s", strerror(rc));
        w->next = NULL;
        saved(fs, -1, &err, w, false);
    }
}

void ckfs_saver_poke(ckfs *fs)
{
    ckfs_saver *s = &fs->saver;
    pthread_mutex_lock(&s->mu);
    s->poked = true;
    /* Without a thread the edit waits for the save at unmount (said). */
    if (start_thread(fs, s) == 0 && !s->armed) /* an armed saver wakes up anyway */
        pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* The save at unmount failed: the kernel has let go of the mount, so the
 * edits are kept in a recovery directory, and the line that says why the
 * save failed is followed by one that says where they are and how to get
 * them back (mount/recovery.h). */
static void keep_unsaved(ckfs *fs, const ck_error *why)
{
    ck_error err = {0};
    char dir[PATH_MAX + 64];
    const char *model = fs->tr.model->path;
    if (recovery_keep(&fs->tr, fs->recovery_dir, why->msg, dir, sizeof dir, &err) < 0)
        ckfs_log(fs, LOG_ERR, "%s: the edits are lost: %s", model, err.msg);
    else
        ckfs_log(fs, LOG_ERR, "%s: the edits are not saved but kept in %s; apply them with: "
                 "ckptfs -o rw,recover=%s %s MOUNTPOINT", model, dir, dir, model);
}

int ckfs_saver_stop(ckfs *fs)
{
    ckfs_saver *s = &fs->saver;
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        s->running = false;
    }
    ckfs_saver_unmounting(fs);
    ck_error why = {0};
    int rc = fs->tr.writable ? save(fs, NULL, false, &why) : 0;
    if (rc != 0 && tree_dirty(&fs->tr))
        keep_unsaved(fs, &why);
    pthread_cond_destroy(&s->forgotten);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    return rc;
}
