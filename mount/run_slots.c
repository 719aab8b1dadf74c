/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_slots: the checkpoints' own mounts.  A checkpoint is opened on the
 * first request inside it, as a model mount (a ckfs, its inode numbers
 * shifted above CKFS_INO_BITS by its slot), and closed when the bound
 * says, unless it has edits to save.
 *
 * Writable (-o rw).  A checkpoint is opened as a writable model mount,
 * holding its file's write claim (save/write_claim.h: the writer lock, and
 * a save a crash cut short finished), whenever the lock can be had and its
 * format is saved (else it is shown read-only, said once); its saver's
 * thread starts with its first edit.  A checkpoint with unsaved edits, a
 * save running or a file open for writing is never closed before the
 * unmount, which saves it.  Its own saves must not look like another
 * program's: the saver tells the run when a save begins and ends
 * (slot_saves); meanwhile the listing keeps the slot as it was, and
 * after a commit the slot is the new file, complete as it is.  A
 * listing scanned across a save's start or end is scanned again
 * (save_gen).  A checkpoint another program deletes or replaces while
 * it has unsaved edits stays listed, its edits readable, its saves
 * refused (tree_save_run says why) until the unmount.
 *
 * The bound.  The open checkpoints are charged their tree's footprint
 * (the index arena's chunks, not the bytes used in them), their ckfs and,
 * when encrypted or compressed, their page cache's budget, against
 * -o index_cache, and may hold at most half the descriptors the file
 * limit leaves (fuse/main.c, fd_budget).  Only a closable checkpoint is
 * closed; a failure to open for want of descriptors or memory is tried
 * once more after closing every idle one (transient).
 *
 * Everything here runs on the request thread, under r->mu, but
 * slot_saves (a saver's, holding no lock).
 */
#define _GNU_SOURCE
#include "run_slots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "../codec/core/model_dir.h"
#include "../codec/core/page_cache.h"
#include "invalidate.h"
#include "model_ops.h"
#include "nodes.h"
#include "run_listing.h"

/* What a writable checkpoint costs beyond a read-only one: its saver's
 * thread (stack pages) and its share of a spill file. */
#define WRITABLE_COST (64u << 10)
#define WRITABLE_FDS 3          /* the writer lock and its directory, the spill file */

/* Release a slot's claim (NULL: none). */
static void drop_claim(ck_write_claim *c)
{
    if (c != NULL)
        ck_write_claim_release(c);
    free(c);
}

/* Let slot s's checkpoint go, its saver stopped.  Under r->mu. */
void ckrun_release_slot(ckrun *r, run_slot *s)
{
    ckfs *fs = s->fs;
    ckfs_detach(fs);
    free((char *)fs->mountpoint);
    free(fs);
    s->fs = NULL;
    drop_claim(s->claim); /* after its last save */
    s->claim = NULL;
    r->open_cost -= s->cost;
    r->open_fds -= s->fds;
    s->cost = 0;
    s->fds = 0;
    if (s->gone)
        r->n_gone_open--;
}

/* Close slot s's checkpoint, which has nothing to save (its saver's last
 * save then writes nothing, and so tells the run nothing).  Under r->mu. */
static void close_slot(ckrun *r, run_slot *s)
{
    if (s->fs == NULL)
        return;
    ckfs_saver_stop(s->fs);
    ckrun_release_slot(r, s);
}

/* Whether slot s's open checkpoint may be closed, to be opened again on
 * the next request: not pinned, and numbered as its file would number it
 * afresh.  A checkpoint whose tensors this mount has removed, added or
 * had a save reorder keeps its tree open until the unmount: opened again,
 * its numbers would name other tensors, under the names the kernel has
 * cached and in the NFS file handles it has given out.  Under r->mu. */
static bool closable(const run_slot *s)
{
    return !pinned(s) && ckfs_numbered_as_file(s->fs);
}

/* Close the least recently used checkpoints, not keep, while the open
 * ones hold more memory or descriptors than they may.  One with
 * something to save stays: the bound is exceeded rather than an edit
 * lost. */
static void evict(ckrun *r, const run_slot *keep)
{
    while (r->open_cost > r->budget || r->open_fds > r->max_fds) {
        run_slot *victim = NULL;
        for (size_t i = 0; i < r->n_slots; i++) {
            run_slot *s = &r->slots[i];
            if (s->fs != NULL && s != keep && (victim == NULL || s->used < victim->used) &&
                closable(s))
                victim = s;
        }
        if (victim == NULL)
            return;
        close_slot(r, victim);
    }
}

/* Why a checkpoint did not open, with the reader's reason: said once.  A
 * transient failure is this request's alone (its errno); any other is the
 * file's, EIO from now on (the file is as it was). */
static int open_failed(ckrun *r, run_slot *s, const ck_error *err, int *errnum)
{
    /* latest_opens said it already, when it could not open it either */
    bool said = s->check_failed && s->error != NULL && strcmp(s->error, err->msg) == 0;
    if (!said && (!transient(err->errnum) || !s->said_transient))
        ckfs_log(&r->proto, LOG_ERR, "%s%s", err->msg,
                 transient(err->errnum) ? " (tried again on the next request)" : "");
    if (transient(err->errnum)) {
        s->said_transient = true;
        *errnum = err->errnum;
        return -1;
    }
    s->failed = true;
    free(s->error);
    s->error = strdup(err->msg);
    ckrun_set_last_error(r, s->name, err->msg);
    /* `latest` is the newest that opens: when it was this one, the
     * watcher lists again and moves it, telling the kernel (not from
     * here, a request: see run_listing.c, relist). */
    if (r->latest == s - r->slots)
        ckrun_relist_soon(r);
    *errnum = EIO;
    return -1;
}

static bool file_is_slots(const run_slot *s, const struct stat *st)
{
    return (uint64_t)st->st_size == s->size && st->st_mtim.tv_sec == s->mtime.tv_sec &&
           st->st_mtim.tv_nsec == s->mtime.tv_nsec &&
           (s->file_ino == 0 || st->st_ino == s->file_ino);
}

/* Slot s's checkpoint as a model: its file, or its collection's
 * directory (beneath the run directory, no link followed, opened by the
 * collection's own open_at).  claim: the file's, which recovered what a
 * crash cut short; the file is then watched for other programs'
 * writes. */
static ck_model *open_checkpoint(ckrun *r, const run_slot *s, const char *path,
                                 const ck_write_claim *claim, ck_error *err)
{
    if (s->collection != NULL)
        return ck_run_dir_open(r->dir_fd, s->collection, s->file, path, &r->open_opts, err);
    if (claim != NULL) {
        ck_dir_share_watch(claim->dir, r->file_watch);
        return ck_model_open_at(claim->dir, path, &r->open_opts, err);
    }
    ck_model_dir *dir = ck_dir_in(r->dir_fd, r->path, s->file, err);
    ck_model *model = dir != NULL ? ck_model_open_at(dir, path, &r->open_opts, err) : NULL;
    ck_dir_unref(dir); /* the model holds it */
    return model;
}

/* Why slot s is read-only in a writable run: said once a slot. */
static void say_read_only(ckrun *r, run_slot *s, const char *why)
{
    if (!s->said)
        ckfs_log(&r->proto, LOG_WARNING, "%s; %s/%s is shown read-only", why, r->mountpoint,
                 s->name);
    s->said = true;
    s->read_only = true;
}

/* Slot s's file claimed for writing (save/write_claim.h), or NULL: when
 * another writer holds its lock or the lock cannot be made, said, and
 * the slot is then read-only; when what a crash cut short cannot be
 * finished, *failed set with err, and the slot does not open. */
static ck_write_claim *take_slot_claim(ckrun *r, run_slot *s, bool *failed, ck_error *err)
{
    ck_write_claim *c = malloc(sizeof *c);
    if (c == NULL)
        ck_fail(err, ENOMEM, "%s/%s: out of memory", r->path, s->file);
    else if (ck_write_claim_take_at(c, r->dir_fd, r->path, s->file, r->where, err) == 0)
        return c;
    *failed = c != NULL && c->unrecovered;
    free(c);
    if (!*failed)
        say_read_only(r, s, err->msg);
    return NULL;
}


/* A model ckptfs reads but cannot save is shown read-only. */
static bool savable(ckrun *r, run_slot *s, const ck_model *model)
{
    ck_error err = {0};
    if (ck_model_may_save(model, &err) == 0)
        return true;
    say_read_only(r, s, err.msg);
    return false;
}

/* Slot s is the file of attributes st, written by this mount (a save, or
 * one a crash cut short that its claim finished).  Under r->mu. */
static void slot_is_now(run_slot *s, const struct stat *st)
{
    s->size = (uint64_t)st->st_size;
    s->mtime = st->st_mtim;
    s->file_ino = st->st_ino;
    s->ours = true;
}

/* The saver of slot fs tells the run of its save (ckfs.on_save): while it
 * writes, the listing keeps the slot as it is; once committed, the slot
 * is the new file, which is listed again at once.  Holding no lock. */
static void slot_saves(ckfs *fs, bool begins, bool committed)
{
    ckrun *r = fs->owner;
    pthread_mutex_lock(&r->mu);
    run_slot *s = &r->slots[slot_of_ino(fs->ino_base) - 1];
    r->save_gen++;
    s->saving = begins;
    if (committed) /* tr.model is switched by this very thread */
        slot_is_now(s, ckfs_file_stat(fs));
    pthread_mutex_unlock(&r->mu);
    if (!begins)
        ckrun_relist_soon(r);
}

/* Open slot s's checkpoint as a model mount: writable when the run is
 * and the checkpoint can be.  Under r->mu. */
static int open_slot(ckrun *r, size_t index, int *errnum)
{
    run_slot *s = &r->slots[index];
    ck_error err = {0};
    char *path = NULL, *shown = NULL;
    if (asprintf(&path, "%s/%s", r->path, s->file) < 0) {
        *errnum = ENOMEM;
        return -1;
    }
    s->read_only = false;
    bool unrecovered = false;
    ck_write_claim *claim =
        r->writable && !slot_is_dir(s) ? take_slot_claim(r, s, &unrecovered, &err) : NULL;
    ck_model *model = unrecovered ? NULL : open_checkpoint(r, s, path, claim, &err);
    free(path);
    if (model != NULL && claim != NULL && claim->finished) {
        slot_is_now(s, &model->st); /* the listing saw the file before */
        ckrun_relist_soon(r);
    }
    if (model != NULL && !file_is_slots(s, &model->st)) { /* replaced since it was listed */
        ck_model_close(model);
        model = NULL;
        err.errnum = ENOENT;
    }
    if (model != NULL && claim != NULL && !savable(r, s, model)) {
        drop_claim(claim);
        claim = NULL;
    }
    ckfs *fs = model ? calloc(1, sizeof *fs) : NULL;
    if (fs == NULL || asprintf(&shown, "%s/%s", r->mountpoint, s->name) < 0) {
        free(fs);
        ck_model_close(model);
        drop_claim(claim);
        if (model != NULL) {
            *errnum = ENOMEM;
            return -1;
        }
        if (err.errnum != ENOENT)
            return open_failed(r, s, &err, errnum);
        *errnum = ESTALE; /* gone since it was listed: the watcher will say so */
        return -1;
    }
    *fs = r->proto;
    ckfs_front_rebind(fs); /* its own front, not the prototype's */
    fs->mountpoint = shown;
    fs->ino_base = slot_ino(index, 0);
    if (ckfs_attach(fs, model, &r->open_opts, claim != NULL, claim != NULL ? r->spill_max : 0,
                    &err) < 0) {
        ck_model_close(model);
        drop_claim(claim);
        free(shown);
        free(fs);
        return open_failed(r, s, &err, errnum);
    }
    fs->owner = r;
    fs->on_save = claim != NULL ? slot_saves : NULL;
    ckfs_start_sealed(fs, __atomic_load_n(&r->sealed, __ATOMIC_ACQUIRE));
    s->said_transient = false;
    s->opens = true;
    if (s->check_failed) { /* it opens after all: it may be `latest` (run_listing.c, latest_opens) */
        s->check_failed = false;
        free(s->error);
        s->error = NULL;
        ckrun_relist_soon(r);
    }
    ckfs_saver_init(fs); /* its thread starts with the first edit */
    s->file_ino = model->st.st_ino;
    s->fs = fs;
    s->claim = claim;
    /* The index, the mount around it, a guess at the allocator's and the
     * kernel's share, and what the pages of a wrapped one may hold; its
     * files and directory, and the run's, kept again when that is below
     * it (rank_<id>/, a collection's directory). */
    s->cost = ckfs_footprint(fs) + sizeof *fs + 4096 +
              (ck_envelope_is_wrapped(&model->env) ? ck_page_cache_budget(model->cache) : 0) +
              (claim != NULL ? WRITABLE_COST : 0);
    s->fds = model->n_sources + 1 + (model->dir->root != NULL) +
             (claim != NULL ? WRITABLE_FDS : 0);
    r->open_cost += s->cost;
    r->open_fds += s->fds;
    if (s->read_only && r->se != NULL) /* its directory loses its w bits */
        ckfs_tell_inval_inode(r->se, slot_ino(index, INO_ROOT), -1, 0);
    evict(r, s);
    return 0;
}

/* Close every open checkpoint but keep that has nothing to save: how
 * many were. */
static size_t close_idle(ckrun *r, const run_slot *keep)
{
    size_t closed = 0;
    for (size_t i = 0; i < r->n_slots; i++) {
        run_slot *s = &r->slots[i];
        if (s->fs != NULL && s != keep && closable(s)) {
            close_slot(r, s);
            closed++;
        }
    }
    return closed;
}

/* Open slot index's checkpoint; out of descriptors or memory (another
 * large one open, a low `ulimit -n`), once more after closing the idle
 * ones, which the next request into them opens again.  Under r->mu. */
static int open_slot_or_make_room(ckrun *r, size_t index, int *errnum)
{
    if (open_slot(r, index, errnum) == 0)
        return 0;
    if (!transient(*errnum) || close_idle(r, &r->slots[index]) == 0)
        return -1;
    return open_slot(r, index, errnum);
}

/* Let the files of deleted or replaced checkpoints go.  One an edit
 * reached while the watcher looked stays, for the unmount to say so.
 * Under r->mu, on the request thread. */
static void close_gone(ckrun *r)
{
    for (size_t i = 0; r->n_gone_open > 0 && i < r->n_slots; i++)
        if (r->slots[i].gone && r->slots[i].fs != NULL && !pinned(&r->slots[i]))
            close_slot(r, &r->slots[i]);
}

void ckrun_close_gone_now(void *arg)
{
    ckrun *r = arg;
    pthread_mutex_lock(&r->mu);
    close_gone(r);
    pthread_mutex_unlock(&r->mu);
}

/* A failed seal: every open checkpoint takes edits again.  Under r->mu,
 * on the request thread (which holds no checkpoint's lock here). */
void ckrun_unseal_all(ckrun *r)
{
    __atomic_store_n(&r->sealed, false, __ATOMIC_RELEASE);
    for (size_t i = 0; i < r->n_slots; i++)
        if (r->slots[i].fs != NULL && ckfs_writable(r->slots[i].fs))
            ckfs_unseal(r->slots[i].fs);
}

/* The checkpoint mount serving *ino, opened if it must be, *ino made its
 * own number; NULL with *errnum when there is none now.  On the request
 * thread. */
ckfs *ckrun_slot_mount(ckrun *r, ckfs_ino *ino, int *errnum)
{
    uint64_t s = slot_of_ino(*ino);
    ckfs *fs = NULL;
    pthread_mutex_lock(&r->mu);
    if (__atomic_exchange_n(&r->seal_failed, false, __ATOMIC_ACQ_REL))
        ckrun_unseal_all(r);
    close_gone(r); /* the watcher asked for it too: this may come first */
    run_slot *slot = s >= 1 && s <= r->n_slots ? &r->slots[s - 1] : NULL;
    if (slot == NULL || slot->gone) {
        *errnum = ESTALE;
    } else if (slot->failed) {
        *errnum = EIO; /* and why, each time: a user looks after the EIO */
        ckrun_set_last_error(r, slot->name, slot->error != NULL ? slot->error : "does not open");
    } else if (slot->fs != NULL || open_slot_or_make_room(r, (size_t)(s - 1), errnum) == 0) {
        slot->used = ++r->clock;
        fs = slot->fs;
    }
    pthread_mutex_unlock(&r->mu);
    if (fs != NULL)
        *ino &= CKFS_INO_MASK;
    return fs;
}
