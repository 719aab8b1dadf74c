/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nodes: what an inode the kernel holds is in the tree, and how the kernel
 * sees it: its attributes, how long it may cache them and the name, and
 * the path a refusal names.
 *
 * The mount's operations (mount/model_ops.c) answer with these, and so do the
 * replies to saves (fuse/save_reply.c), which must not need the operations:
 * so they are here, below both.  Nothing here replies to a request.
 */
#ifndef CKPTFS_NODES_H
#define CKPTFS_NODES_H

#include <limits.h>
#include <sys/stat.h>

#include "ckptfs.h"
#include "inode_map.h"

/* Room for the mount point, a tensor directory and a name from FUSE. */
#define NODE_PATH_MAX (PATH_MAX + 2 * 1024 + 8)

/* The node behind inode ino, of the mount's own numbering; *e its entry
 * for a tensor directory, meta or out, else NULL.  NODE_NONE: none. */
node_kind ckfs_resolve(ckfs *fs, ckfs_ino ino, entry **e);

/* The extra file behind an inode NODE_EXTRA resolved. */
static inline extra *ckfs_extra_of(ckfs *fs, ckfs_ino ino)
{
    return &fs->tr.extras[ino - INO_EXTRA_BASE];
}

/* Where node ino is (/name appended unless NULL), in buf of cap bytes
 * (NODE_PATH_MAX): returns buf. */
const char *ckfs_path_of(const ckfs *fs, ckfs_ino ino, const char *name, char *buf,
                         size_t cap);

/* The attributes of node ino, of kind k (entry e), or of ino resolved:
 * 0, or -ENOENT. */
int ckfs_attr_of(ckfs *fs, ckfs_ino ino, node_kind k, const entry *e, struct stat *st);
int ckfs_fill_attr(ckfs *fs, ckfs_ino ino, struct stat *st);

/* How long the kernel may keep ino's attributes. */
double ckfs_timeout_of(const ckfs *fs, ckfs_ino ino);

/* The generation of the node the kernel knows as ino (with the mount's
 * ino_base): the mount's, but 0 for the kernel's root, which the kernel
 * expects so (it warns and takes 0 otherwise). */
static inline uint64_t ckfs_generation_of(const ckfs *fs, ckfs_ino ino)
{
    return ino == INO_ROOT ? 0 : fs->generation;
}

/* The entry of a lookup's reply for ino: 0, or -1 when there is none. */
int ckfs_fill_entry(ckfs *fs, ckfs_ino ino, ckfs_entry_out *e);

/* Whether closing the mount and opening its file again would give every
 * tensor the inode number it has now (a read-only tree: always; a
 * writable one: tree_numbered_as_file), so that the kernel's cached
 * names and NFS file handles stay true.  Takes the lock. */
bool ckfs_numbered_as_file(ckfs *fs);

#endif
