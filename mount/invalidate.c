/* SPDX-License-Identifier: Apache-2.0 */
/*
 * invalidate: the kernel's caches of a mount's names, attributes and
 * listings, dropped where they went stale without the kernel seeing it
 * (see mount/invalidate.h).  Apart from the requests, which call these, so
 * that the saver, which calls them after a save, needs only this.  The
 * kernel is told through the adapter's table (ckfs_kernel_set), so that
 * no libfuse is called from here: without one (a unit test) nothing is.
 */
#include "invalidate.h"

#include <string.h>

#include "inode_map.h"

static const ckfs_kernel *kernel;

void ckfs_kernel_set(const ckfs_kernel *k)
{
    kernel = k;
}

void ckfs_tell_inval_inode(struct fuse_session *se, ckfs_ino ino, int64_t off, int64_t len)
{
    if (se != NULL && kernel != NULL)
        kernel->inval_inode(se, ino, off, len);
}

void ckfs_tell_inval_entry(struct fuse_session *se, ckfs_ino parent, const char *name,
                           size_t len)
{
    if (se != NULL && kernel != NULL)
        kernel->inval_entry(se, parent, name, len);
}

/* The kernel's attributes of ino are stale.  Only attributes: that takes
 * no lock a request may hold, so it is safe from anywhere. */
void ckfs_invalidate_attrs(const ckfs *fs, ckfs_ino ino)
{
    if (fs->se != NULL)
        ckfs_tell_inval_inode(fs->se, fs->ino_base | ino, -1, 0);
}

/* The listing of directory ino changed where the kernel could not see
 * it: drop its cached listing (its pages; no lock a request holds). */
void ckfs_listing_changed(const ckfs *fs, ckfs_ino ino)
{
    if (fs->se != NULL)
        ckfs_tell_inval_inode(fs->se, fs->ino_base | ino, 0, 0);
}

void ckfs_invalidate_times(ckfs *fs)
{
    pthread_rwlock_rdlock(&fs->lock);
    ckfs_listing_changed(fs, INO_ROOT); /* snapshot_done is back */
    ckfs_invalidate_attrs(fs, INO_ROOT);
    for (size_t i = 0; fs->se != NULL && i < fs->tr.n_entries; i++) {
        if (fs->tr.entries[i].deleted)
            continue;
        ckfs_invalidate_attrs(fs, ino_of_tensor((uint32_t)i, NODE_TENSOR_DIR));
        ckfs_invalidate_attrs(fs, ino_of_tensor((uint32_t)i, NODE_META));
        ckfs_invalidate_attrs(fs, ino_of_tensor((uint32_t)i, NODE_OUT));
    }
    pthread_rwlock_unlock(&fs->lock);
}

void ckfs_renamed_inodes(ckfs *fs, const tree_renamed *list, size_t n)
{
    if (n == 0)
        return;
    pthread_rwlock_rdlock(&fs->lock);
    ckfs_listing_changed(fs, INO_ROOT);
    for (size_t i = 0; fs->se != NULL && i < n; i++) {
        if (!list[i].merged)
            continue;
        ckfs_invalidate_attrs(fs, ino_of_tensor(list[i].pos, NODE_META));
        ckfs_tell_inval_inode(fs->se, fs->ino_base | ino_of_tensor(list[i].pos,
                                                                             NODE_OUT), 0, 0);
    }
    pthread_rwlock_unlock(&fs->lock);
}

void ckfs_forget_names(struct fuse_session *se, ckfs_ino root, tree_renamed *list, size_t n)
{
    for (size_t i = 0; se != NULL && i < n; i++)
        ckfs_tell_inval_entry(se, root, list[i].old_dir, strlen(list[i].old_dir));
    tree_renamed_free(list, n);
}
