/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuse_ops: the FUSE adapter (issue 40).  The one low-level operations
 * table of every session: each entry decodes its request, calls the
 * session's front (fs/ops.h: a model mount or a run directory, whose
 * operations return plain results), and replies exactly once, or hands
 * the request to the saver when it waits for a save (fs/save_reply.c).
 * The userdata of a session is its ckfs_front.
 */
#ifndef CKPTFS_FUSE_OPS_H
#define CKPTFS_FUSE_OPS_H

#define FUSE_USE_VERSION 34

#include <fuse_lowlevel.h>

#include "ckptfs.h"
#include "invalidate.h"

extern const struct fuse_lowlevel_ops ckfs_ops;

/* How the kernel is told what changed (fs/invalidate.h), through libfuse. */
extern const ckfs_kernel ckfs_fuse_kernel;

/* What every mount asks of the kernel at INIT: splice (cleared in *splice
 * when the kernel cannot), READDIRPLUS, and the mount's max_read. */
void ckfs_conn_init(struct fuse_conn_info *conn, bool *splice, unsigned max_read);

/* An entry's reply from the plain one. */
void ckfs_fuse_entry(const ckfs_entry_out *in, struct fuse_entry_param *out);

/* An xattr's value: its size when size is 0, ERANGE when it does not fit. */
void ckfs_reply_xattr(fuse_req_t req, const void *value, size_t len, size_t size);

/* fs/session_loop.c.  Answer requests on this thread until the mount ends,
 * looking for the next request for busy_poll_us microseconds before
 * sleeping (0 and no work: libfuse's own loop), and doing work (NULL:
 * none) when asked.  0, or a negative errno. */
int ckfs_session_loop(struct fuse_session *se, unsigned busy_poll_us,
                      const ckfs_idle_work *work);

#endif
