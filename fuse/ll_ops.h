/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuse_ops: the FUSE adapter (issue 40).  The one low-level operations
 * table of every session: each entry decodes its request, calls the
 * session's front (mount/ops.h: a model mount or a run directory, whose
 * operations return plain results), and replies exactly once, or hands
 * the request to the saver when it waits for a save (fuse/save_reply.c).
 * The userdata of a session is its ckfs_front.
 */
#ifndef CKPTFS_FUSE_LL_OPS_H
#define CKPTFS_FUSE_LL_OPS_H

#include "reply.h"

extern const struct fuse_lowlevel_ops ckfs_ops;

/* What every mount asks of the kernel at INIT: splice (cleared in *splice
 * when the kernel cannot), READDIRPLUS, and the mount's max_read. */
void ckfs_conn_init(struct fuse_conn_info *conn, bool *splice, unsigned max_read);

#endif
