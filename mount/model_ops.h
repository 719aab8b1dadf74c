/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll_ops: a model mount's operations as plain results (mount/ops.h says
 * what they return).  Each is called with the mount's lock held as its
 * front takes it (shared to look, exclusive to change: mount/model_ops.c, the
 * front); a unit test alone in the mount may call them without.  Inode
 * numbers are the mount's own (mount/inode_map.h); the entries answered
 * carry the session's (ino_base added).
 */
#ifndef CKPTFS_MODEL_OPS_H
#define CKPTFS_MODEL_OPS_H

#include "ckptfs.h"
#include "inode_map.h"

int ckfs_op_lookup(ckfs *fs, ckfs_ino parent, const char *name, ckfs_entry_out *out);
int ckfs_op_getattr(ckfs *fs, ckfs_ino ino, ckfs_attr_out *out);
int ckfs_op_setattr(ckfs *fs, ckfs_ino ino, const struct stat *attr, int to_set,
                    ckfs_attr_out *out);
int ckfs_op_readdir(ckfs *fs, ckfs_ino ino, off_t off, bool plus, ckfs_dir_add add, void *ctx);
int ckfs_op_open(ckfs *fs, const ckfs_caller *c, ckfs_ino ino, int flags, ckfs_open_out *out,
                 ckfs_defer *d);
int ckfs_op_read(ckfs *fs, const ckfs_caller *c, ckfs_ino ino, size_t size, off_t off,
                 ckfs_read_plan *plan);
int ckfs_op_write(ckfs *fs, ckfs_ino ino, const char *buf, size_t size, off_t off);
int ckfs_op_flush(ckfs *fs, ckfs_ino ino, uint64_t fh, ckfs_defer *d);
int ckfs_op_release(ckfs *fs, ckfs_ino ino, uint64_t fh, bool *save_handle);
int ckfs_op_fsync(ckfs *fs, ckfs_ino ino, ckfs_defer *d);
/* by: the process that creates (tree extra.maker). */
int ckfs_op_create(ckfs *fs, ckfs_ino parent, const char *name, int flags, pid_t by,
                   ckfs_entry_out *e, ckfs_open_out *out, ckfs_defer *d);
int ckfs_op_mknod(ckfs *fs, ckfs_ino parent, const char *name, mode_t mode, pid_t by,
                  ckfs_entry_out *e, ckfs_defer *d);
int ckfs_op_mkdir(ckfs *fs, ckfs_ino parent, const char *name, ckfs_entry_out *out);
int ckfs_op_rmdir(ckfs *fs, ckfs_ino parent, const char *name);
int ckfs_op_unlink(ckfs *fs, ckfs_ino parent, const char *name);
int ckfs_op_rename(ckfs *fs, ckfs_ino parent, const char *name, ckfs_ino newparent,
                   const char *newname, unsigned flags, ckfs_defer *d);
int ckfs_op_getxattr(ckfs *fs, ckfs_ino ino, const char *name, ckfs_xattr_out *out);
int ckfs_op_listxattr(ckfs *fs, ckfs_ino ino, ckfs_xattr_out *out);
int ckfs_op_setxattr(ckfs *fs, ckfs_ino ino, const char *name, ckfs_defer *d);
int ckfs_op_statfs(ckfs *fs, struct statvfs *sv);
/* The session has ended: the last save (final_commit_failed says how). */
void ckfs_unmounted(ckfs *fs);

/* A copy of a prototype mount (a run's checkpoint) made its own front. */
void ckfs_front_rebind(ckfs *fs);

/* What a run directory asks of a checkpoint's mount, so that it reaches
 * into none of its fields: the kind of node ino is (taking the lock);
 * whether it takes edits at all; the file it serves (a save switches it,
 * on the saver's thread); what its tree costs in memory; that it starts
 * sealed (before its first request); and that the session is ending
 * (the saver told nothing more to the kernel, under the lock). */
node_kind ckfs_kind_of(ckfs *fs, ckfs_ino ino);
bool ckfs_writable(const ckfs *fs);
const struct stat *ckfs_file_stat(const ckfs *fs);
size_t ckfs_footprint(const ckfs *fs);
void ckfs_start_sealed(ckfs *fs, bool sealed);
void ckfs_leave_session(ckfs *fs);

#endif
