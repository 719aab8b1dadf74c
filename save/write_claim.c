/* SPDX-License-Identifier: Apache-2.0 */
/* write_claim: taking a model's files for writing, and saving into them
 * (see write_claim.h). */
#include "write_claim.h"

#include <unistd.h>

#include "../codec/io/commit_group.h"

/* What a claim does once its directory is open and its lock held: finish
 * or undo what a save cut short left. */
static int recover(ck_write_claim *c, ck_error *err)
{
    int rc = ck_group_recover(c->dir, false, err);
    if (rc < 0) {
        ck_write_claim_release(c);
        c->unrecovered = true;
        return -1;
    }
    c->finished = rc > 0;
    /* A journal's recovery removed what its save made; a save killed
     * before writing one left its temporary file beside the model. */
    ck_atomic_cleanup(c->dir, c->dir->base, getuid());
    return 0;
}

int ck_write_claim_take(ck_write_claim *c, const char *path, const char *who, ck_error *err)
{
    *c = (ck_write_claim)CK_WRITE_CLAIM_NONE;
    if ((c->dir = ck_dir_open(path, err)) == NULL)
        return -1;
    if (ck_writer_lock_take(&c->lock, path, who, err) < 0) {
        ck_write_claim_release(c);
        return -1;
    }
    return recover(c, err);
}

int ck_write_claim_take_at(ck_write_claim *c, int dfd, const char *path, const char *below,
                           const char *who, ck_error *err)
{
    *c = (ck_write_claim)CK_WRITE_CLAIM_NONE;
    if ((c->dir = ck_dir_in(dfd, path, below, err)) == NULL)
        return -1;
    if (ck_writer_lock_take_at(&c->lock, dfd, path, below, who, err) < 0) {
        ck_write_claim_release(c);
        return -1;
    }
    return recover(c, err);
}

void ck_write_claim_release(ck_write_claim *c)
{
    ck_writer_lock_release(&c->lock);
    ck_dir_unref(c->dir);
    c->dir = NULL;
}

int ck_write_claim_save(const ck_write_claim *c, const ck_model *m, const ck_write_tensor *w,
                        size_t n, const ck_save_opts *o, ck_error *err)
{
    ck_save *s = ck_save_begin(c->dir, m, o, err);
    if (s == NULL)
        return -1;
    int rc = ck_save_run(s, w, n, err);
    ck_error why = {0}; /* a failed run's reason is the one to tell */
    if (ck_save_finish(s, rc == 0 ? err : &why) < 0)
        rc = -1;
    return rc;
}
