/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_seal: ckptfs-umount's user.ckptfs.unmount=1 on a run's root makes
 * every open writable checkpoint save and seal (ckfs_seal; one waiter
 * each, counted down in a seal_join), checkpoints opened later start
 * sealed, and the request is answered when all have ended; a failure puts
 * that checkpoint's reason in the root's user.ckptfs.last_error and has
 * the request thread unseal every checkpoint (ckrun_unseal_all, on the
 * next request into a checkpoint).  Pinned checkpoints are closed, and
 * saved, at unmount (ckrun_close_all, after the session).
 */
#include "run_seal.h"

#include <stdio.h>
#include <stdlib.h>

#include "model_ops.h"
#include "run_slots.h"

/* One user.ckptfs.unmount=1, answered once every open writable
 * checkpoint has saved (and sealed) or one has failed. */
typedef struct seal_join {
    pthread_mutex_t mu;         /* guards what follows */
    ckrun *r;
    void *req;                  /* answered through answer (the caller's answer_later) */
    void (*answer)(void *req, int errnum);
    unsigned left;              /* saves still running, plus one while they are asked for */
    int errnum;                 /* the first failure's */
} seal_join;

/* One of the join's saves has ended (why: its checkpoint's last error).
 * On the saver's thread under that checkpoint's lock, or the request
 * thread's: takes no lock of the run's but error_mu. */
static void seal_join_end(seal_join *j, int errnum, const char *why)
{
    ckrun *r = j->r;
    pthread_mutex_lock(&j->mu);
    if (errnum != 0 && j->errnum == 0) {
        j->errnum = errnum;
        pthread_mutex_lock(&r->error_mu);
        snprintf(r->last_error, sizeof r->last_error, "%s", why);
        pthread_mutex_unlock(&r->error_mu);
    }
    bool last = --j->left == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    if (j->errnum != 0) /* the request thread unseals every checkpoint */
        __atomic_store_n(&r->seal_failed, true, __ATOMIC_RELEASE);
    j->answer(j->req, j->errnum);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void seal_saved(ckfs_waiter *w, int errnum, const char *why)
{
    seal_join_end(w->arg, errnum, why);
}

/* user.ckptfs.unmount=1: save every open writable checkpoint and take no
 * more edits (those opened later too); =0: take them again.  The request
 * is answered once they have (CKFS_ANSWERED_LATER). */
int ckrun_seal(const ckfs_caller *c, ckrun *r, const char *value, size_t size)
{
    if (size != 1 || (value[0] != '0' && value[0] != '1'))
        return -EINVAL;
    seal_join *j = value[0] == '1' ? calloc(1, sizeof *j) : NULL;
    if (value[0] == '1' && j == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&r->mu);
    if (j == NULL) {
        ckrun_unseal_all(r);
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->r = r;
    j->req = c->req;
    j->answer = c->answer_later;
    j->left = 1;
    __atomic_store_n(&r->sealed, true, __ATOMIC_RELEASE);
    for (size_t i = 0; i < r->n_slots; i++) {
        ckfs *fs = r->slots[i].fs;
        if (fs == NULL || !ckfs_writable(fs))
            continue;
        ckfs_waiter *w = calloc(1, sizeof *w);
        pthread_mutex_lock(&j->mu);
        j->left++;
        pthread_mutex_unlock(&j->mu);
        if (w == NULL) {
            seal_join_end(j, ENOMEM, "out of memory");
            break;
        }
        *w = (ckfs_waiter){.done = seal_saved, .arg = j};
        ckfs_seal(fs, w);
    }
    pthread_mutex_unlock(&r->mu);
    seal_join_end(j, 0, NULL); /* all asked */
    return CKFS_ANSWERED_LATER;
}
