/* SPDX-License-Identifier: Apache-2.0 */
/*
 * save_reply: the replies to requests that wait for a save (see
 * fuse/save_reply.h).  This file asks the saver (ckfs_saver_ask), each
 * waiter with its own done (answered, below), and finds nodes
 * (mount/nodes.h), nothing more of the front-end; the saver records the
 * outcome and calls only that done, so it calls nothing of this file.
 */
#include "save_reply.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../mount/nodes.h"

/* ---- saves ----
 *
 * A request that asks for a save gets its reply when the saver has saved
 * (mount/saver.c), in the form the request needs. */

static void answered(ckfs_waiter *w, int errnum, const char *why);

/* A waiter for req, answered as `reply` says; fi is the open's or
 * create's.  NULL: out of memory, answered so. */
static ckfs_waiter *waiter_of(fuse_req_t req, ckfs *fs, fuse_ino_t ino, enum reply reply,
                              const struct fuse_file_info *fi)
{
    ckfs_waiter *w = calloc(1, sizeof *w);
    if (w == NULL) {
        fuse_reply_err(req, ENOMEM);
        return NULL;
    }
    *w = (ckfs_waiter){.req = req, .ino = ino, .reply = (int)reply,
                       .make_file = reply != REPLY_SEAL, .entry = -1, .done = answered,
                       .pid = fuse_req_ctx(req)->pid};
    if (reply == REPLY_SYNC) {
        entry *e = NULL;
        w->hold = true;
        if (ckfs_resolve(fs, ino, &e) != NODE_NONE && e != NULL)
            w->entry = e - fs->tr.entries;
    }
    if (fi != NULL)
        w->fi = (ckfs_open_out){.fh = fi->fh, .keep_cache = fi->keep_cache};
    return w;
}

/* Ask for a save, through node ino, answered as `reply` says. */
void ckfs_ask_save(fuse_req_t req, ckfs *fs, fuse_ino_t ino, enum reply reply,
                   const struct fuse_file_info *fi)
{
    ckfs_waiter *w = waiter_of(req, fs, ino, reply, fi);
    if (w != NULL)
        ckfs_saver_ask(fs, w);
}

/* A request's waiter, done: the reply its request needs. */
static void answered(ckfs_waiter *w, int errnum, const char *why)
{
    (void)why; /* logged by the saver, kept in user.ckptfs.last_error */
    ckfs *fs = w->fs;
    struct fuse_entry_param e;
    struct fuse_file_info fi = {.fh = w->fi.fh, .keep_cache = w->fi.keep_cache};
    ckfs_entry_out eo;
    ckfs_fill_entry(fs, INO_SNAPSHOT_DONE, &eo); /* by inode: there even if edited again */
    ckfs_fuse_entry(&eo, &e);
    if (w->reply == REPLY_OK)
        errnum = 0;
    switch (errnum != 0 ? REPLY_ERR : (enum reply)w->reply) {
    case REPLY_OPEN:
        fuse_reply_open(w->req, &fi);
        break;
    case REPLY_ENTRY:
        fuse_reply_entry(w->req, &e);
        break;
    default: /* REPLY_ERR, REPLY_SYNC, REPLY_OK, REPLY_SEAL */
        fuse_reply_err(w->req, errnum);
    }
}

/* touch of an absent snapshot_done: the kernel holds the root's directory
 * lock for the whole create, so a create answered only once the save is
 * durable would hold back every lookup of a name not cached in the root
 * for as long as the save runs.  The create is answered at once instead,
 * with this as its handle, and the save it asked for is waited for by the
 * file's close (FLUSH), which the kernel sends holding no directory lock:
 * touch still returns once the file is durable, and fails with the save's
 * errno (touch checks close).  Any other fh value (0, FH_WRITER) is no
 * such handle. */
struct save_handle {
    bool saved;        /* the save has ended, with errnum */
    int errnum;
    fuse_req_t flush;  /* a close waiting for it */
    bool released;     /* the kernel let go of the handle before the save ended */
    save_handle *prev, *next; /* in live_handles */
};

/* Every handle not yet freed.  The kernel sends a handle's RELEASE after
 * the close returns, so one may still be queued when an unmount ends the
 * session, and is then never sent: ckfs_save_handles_free frees what is
 * left once the session is gone.  One list for the process, not one per
 * mount: a run directory's checkpoint may be closed and opened again
 * while a handle made in it is still held, and the handle is its own
 * allocation, never the mount's. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static save_handle *live_handles;

static void live_add(save_handle *h)
{
    pthread_mutex_lock(&live_mu);
    h->prev = NULL;
    h->next = live_handles;
    if (live_handles != NULL)
        live_handles->prev = h;
    live_handles = h;
    pthread_mutex_unlock(&live_mu);
}

static void handle_free(save_handle *h)
{
    pthread_mutex_lock(&live_mu);
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        live_handles = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    pthread_mutex_unlock(&live_mu);
    free(h);
}

void ckfs_save_handles_free(void)
{
    pthread_mutex_lock(&live_mu);
    save_handle *h = live_handles;
    live_handles = NULL;
    pthread_mutex_unlock(&live_mu);
    while (h != NULL) {
        save_handle *next = h->next;
        free(h);
        h = next;
    }
}

save_handle *ckfs_save_handle_of(const struct fuse_file_info *fi)
{
    return fi->fh > FH_WRITER ? (save_handle *)(uintptr_t)fi->fh : NULL;
}

/* The save that created the file has ended (under the mount's lock). */
static void save_handle_saved(ckfs_waiter *w, int errnum, const char *why)
{
    (void)why; /* logged by the saver, kept in user.ckptfs.last_error */
    save_handle *h = w->arg;
    h->saved = true;
    h->errnum = errnum;
    if (h->flush != NULL)
        fuse_reply_err(h->flush, errnum);
    h->flush = NULL;
    if (h->released)
        handle_free(h);
}

/* The kernel will send nothing more for handle h. */
void ckfs_save_handle_release(save_handle *h)
{
    if (h->saved)
        handle_free(h);
    else
        h->released = true; /* freed when the save ends */
}

/* Create snapshot_done: ask for a save, answer now (see save_handle). */
void ckfs_create_snapshot_done(fuse_req_t req, ckfs *fs, struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    ckfs_entry_out eo;
    save_handle *h = calloc(1, sizeof *h);
    ckfs_waiter *w = calloc(1, sizeof *w);
    if (h == NULL || w == NULL) {
        free(h);
        free(w);
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ckfs_fill_entry(fs, INO_SNAPSHOT_DONE, &eo); /* by inode: the name shows once saved */
    ckfs_fuse_entry(&eo, &e);
    live_add(h);
    fi->fh = (uintptr_t)h;
    *w = (ckfs_waiter){.ino = INO_SNAPSHOT_DONE, .done = save_handle_saved, .arg = h,
                       .make_file = true, .pid = fuse_req_ctx(req)->pid};
    ckfs_saver_ask(fs, w); /* ends, at the earliest, once we let go of the mount's lock */
    if (fuse_reply_create(req, &e, fi) != 0) /* interrupted: no close will come */
        ckfs_save_handle_release(h);
}

/* The close of a created snapshot_done: answered when its save has ended.
 * A second close meanwhile (a duplicated descriptor) waits for a save of
 * its own. */
void ckfs_flush_snapshot_done(fuse_req_t req, ckfs *fs, fuse_ino_t ino, save_handle *h)
{
    if (h->saved)
        fuse_reply_err(req, h->errnum);
    else if (h->flush == NULL)
        h->flush = req;
    else
        ckfs_ask_save(req, fs, ino, REPLY_ERR, NULL);
}

/* user.ckptfs.unmount=1 on the root, from ckptfs-umount before it
 * unmounts: save, and if that worked take no more edits, so that no edit
 * made in between can fail the save at unmount, when nobody is left to
 * tell.  =0 takes edits again (the unmount failed: the mount is busy).
 * Edits still open for writing keep it from being unmounted anyway. */
void ckfs_seal_request(fuse_req_t req, ckfs *fs, const char *value, size_t size)
{
    if (size != 1 || (value[0] != '0' && value[0] != '1')) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    if (value[0] == '0') {
        ckfs_unseal_locked(fs);
        fuse_reply_err(req, 0);
        return;
    }
    ckfs_waiter *w = waiter_of(req, fs, INO_ROOT, REPLY_SEAL, NULL);
    if (w != NULL)
        ckfs_seal_locked(fs, w);
}
