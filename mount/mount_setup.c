/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mount_setup: an open model made the tree of a mount, and let go again,
 * the one way a single-model mount (fuse/main.c) and each checkpoint of a
 * run directory (mount/run_slots.c) do it, so that the two cannot drift.
 */
#include "ckptfs.h"

#include "../save/encoder.h"
#include "file_view.h"

int ckfs_attach(ckfs *fs, ck_model *model, const ck_open_opts *oo, bool writable,
                uint64_t spill_max, ck_error *err)
{
    /* What a save cut short left beside the model, now that it is ours to
     * write (the writer lock is held). */
    if (writable)
        ck_encode_cleanup(model);
    if (tree_init(&fs->tr, model, oo, writable, err) < 0)
        return -1;
    if (spill_max != 0)
        fs->tr.spill_max = spill_max;
    ckfs_lock_init(fs);
    return 0;
}

void ckfs_detach(ckfs *fs)
{
    ckfs_view_free(fs->view);
    fs->view = NULL;
    ck_model_close(fs->tr.model); /* a save may have replaced the one attached */
    tree_free(&fs->tr);
    pthread_rwlock_destroy(&fs->lock);
}
