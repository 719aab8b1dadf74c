/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reply: the mount's plain results (mount/ops.h) as libfuse's types, and
 * the kernel told through libfuse (mount/invalidate.h): what the adapter
 * (fuse/ll_ops.c) and the replies to saves (fuse/save_reply.c) share,
 * below both.
 */
#ifndef CKPTFS_FUSE_REPLY_H
#define CKPTFS_FUSE_REPLY_H

#define FUSE_USE_VERSION 34

#include <fuse_lowlevel.h>

#include "../mount/ckptfs.h"
#include "../mount/invalidate.h"

/* An entry's reply from the plain one. */
void ckfs_fuse_entry(const ckfs_entry_out *in, struct fuse_entry_param *out);

/* An xattr's value: its size when size is 0, ERANGE when it does not fit. */
void ckfs_reply_xattr(fuse_req_t req, const void *value, size_t len, size_t size);

/* How the kernel is told what changed (mount/invalidate.h), through libfuse. */
extern const ckfs_kernel ckfs_fuse_kernel;

#endif
