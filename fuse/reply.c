/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reply: plain results as libfuse's types (fuse/reply.h).
 */
#include "reply.h"

#include <errno.h>
#include <string.h>

void ckfs_fuse_entry(const ckfs_entry_out *in, struct fuse_entry_param *out)
{
    memset(out, 0, sizeof *out);
    out->ino = in->ino;
    out->generation = in->generation;
    out->attr = in->attr;
    out->attr_timeout = in->attr_timeout;
    out->entry_timeout = in->entry_timeout;
}

void ckfs_reply_xattr(fuse_req_t req, const void *value, size_t len, size_t size)
{
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, value, len);
}

static void inval_inode(struct fuse_session *se, ckfs_ino ino, int64_t off, int64_t len)
{
    fuse_lowlevel_notify_inval_inode(se, ino, off, len);
}

static void inval_entry(struct fuse_session *se, ckfs_ino parent, const char *name, size_t len)
{
    fuse_lowlevel_notify_inval_entry(se, parent, name, len);
}

const ckfs_kernel ckfs_fuse_kernel = {.inval_inode = inval_inode, .inval_entry = inval_entry};
