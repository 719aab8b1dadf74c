/* SPDX-License-Identifier: Apache-2.0 */
/*
 * invalidate: telling the kernel of what changed where it could not see.
 *
 * The kernel caches names, attributes and listings long (mount/nodes.c,
 * ckfs_timeout_of).  What changes without a request through the kernel
 * (a meta reformatted when parsed at close, snapshot_done coming and
 * going, every node's times after a save, the names a save renamed) is
 * invalidated through these, by the requests (mount/model_ops.c) and by the
 * saver (mount/saver.c): a file of its own, so that the saver does not need
 * the requests'.
 */
#ifndef CKPTFS_INVALIDATE_H
#define CKPTFS_INVALIDATE_H

#include "ckptfs.h"

/* The kernel's attributes of ino are stale; safe from anywhere. */
void ckfs_invalidate_attrs(const ckfs *fs, ckfs_ino ino);
/* The listing of directory ino changed where the kernel could not see it. */
void ckfs_listing_changed(const ckfs *fs, ckfs_ino ino);

/* After a save: every node's times are the new file's.  Takes the lock. */
void ckfs_invalidate_times(ckfs *fs);
/* After a save that applied a copied snapshot's names (tree.h, the names
 * file).  Inodes: the root's listing, and a merged tensor's
 * meta and cached pages, are stale; takes the lock.  Names: the kernel
 * forgets the old directory names of the session se (root: the mount's
 * root as the kernel numbers it); frees list.  That takes no lock of ours
 * but waits for the root's directory lock, which a request waiting for a
 * save may hold: never on the saver's thread. */
void ckfs_renamed_inodes(ckfs *fs, const tree_renamed *list, size_t n);
void ckfs_forget_names(struct fuse_session *se, ckfs_ino root, tree_renamed *list, size_t n);

/* How the kernel is told, the adapter's (fuse/reply.c): one table for
 * the process, set before the session starts.  NULL: told nothing. */
typedef struct ckfs_kernel {
    void (*inval_inode)(struct fuse_session *se, ckfs_ino ino, int64_t off, int64_t len);
    void (*inval_entry)(struct fuse_session *se, ckfs_ino parent, const char *name,
                        size_t len);
} ckfs_kernel;
void ckfs_kernel_set(const ckfs_kernel *k);
/* Drop the kernel's cache of ino's pages [off, off + len) (off -1: its
 * attributes only; len 0: to the end), or of name in parent; se NULL:
 * nothing (unmounting). */
void ckfs_tell_inval_inode(struct fuse_session *se, ckfs_ino ino, int64_t off, int64_t len);
void ckfs_tell_inval_entry(struct fuse_session *se, ckfs_ino parent, const char *name,
                           size_t len);

#endif
