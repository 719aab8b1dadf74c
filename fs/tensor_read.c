/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_read: a tensor's bytes served to a read request (tensor_read.h).
 */
#include "tensor_read.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#define MODEL(fs) ((fs)->tr.model)

/* The kernel checks the tree's modes, which are the model file's
 * (fs/nodes.c, file_mode_of), for every user; the directories between the
 * mount's root and each file a tensor is read from (a run's rank_<id>/ or
 * iteration_<N>/, a distributed checkpoint's ranks, beside the file's own
 * mode) have no node to carry their modes, so another user's read of a
 * tensor is checked here against the way to each of its files on disk:
 * EACCES where that user could not read it there, at the open (others_read)
 * and at each read.  The daemon's own user and root read what the daemon
 * opened. */
bool ckfs_may_read(fuse_req_t req, const ckfs *fs, const ck_tensor *t)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    if (t == NULL || ctx->uid == 0 || ctx->uid == geteuid())
        return true;
    gid_t few[64], *groups = few;
    int n = fuse_req_getgroups(req, 64, few);
    if (n > 64 && (groups = malloc((size_t)n * sizeof *groups)) != NULL)
        n = fuse_req_getgroups(req, n, groups);
    ck_cred who = {.uid = ctx->uid, .gid = ctx->gid, .groups = groups,
                   .n_groups = n > 0 && groups != NULL ? (size_t)n : 0}; /* unknown: none */
    ck_error err = {0};
    int rc = ck_model_may_read(MODEL(fs), t, &who, &err);
    if (groups != few)
        free(groups);
    if (rc == 0)
        return true;
    fuse_reply_err(req, err.errnum ? err.errnum : EACCES);
    return false;
}

struct splice_ctx {
    const ck_model *m;
    struct fuse_bufvec *bv;
};

static int add_fd_buf(void *ctx, uint32_t src, uint64_t src_off, size_t len)
{
    struct splice_ctx *c = ctx;
    struct fuse_buf *b = &c->bv->buf[c->bv->count++];
    *b = (struct fuse_buf){
        .size = len,
        .flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY,
        .fd = c->m->sources[src]->fd,
        .pos = (off_t)src_off,
    };
    return 0;
}

static bool all_sources_are_files(const ck_model *m)
{
    for (uint32_t i = 0; i < m->n_sources; i++)
        if (m->sources[i]->fd < 0)
            return false;
    return true;
}

size_t ckfs_splice_pieces(const ckfs *fs, const ck_tensor *t, uint64_t off, size_t size)
{
    return all_sources_are_files(MODEL(fs)) ? ck_tensor_max_pieces(t, off, size) : SIZE_MAX;
}

void ckfs_add_extents(const ckfs *fs, const ck_tensor *t, uint64_t off, size_t size,
                      struct fuse_bufvec *bv)
{
    struct splice_ctx c = {.m = MODEL(fs), .bv = bv};
    ck_tensor_for_range(t, off, size, add_fd_buf, &c);
}

void ckfs_reply_bufvec(fuse_req_t req, const ckfs *fs, struct fuse_bufvec *bv, off_t off)
{
    /* Plain splice, not SPLICE_MOVE: moving page-cache pages measured 2-3x
     * slower here (docs/benchmarks.md). */
    int rc = fuse_reply_data(req, bv, fs->splice ? 0 : FUSE_BUF_NO_SPLICE);
    if (rc < 0 && rc != -ENOENT) /* ENOENT: the request was interrupted */
        ckfs_log(fs, LOG_ERR, "%s: read at %lld failed: %s", MODEL(fs)->path, (long long)off,
                 strerror(-rc));
}

/* The model file was truncated or rewritten under the mount (another
 * program; a save of ours opens the new file): its bytes are no longer the
 * indexed ones, and a splice past its end would end the read short and
 * silently.  One fstat per request; the reason is logged once. */
bool ckfs_model_changed(fuse_req_t req, ckfs *fs, const ck_tensor *t)
{
    ck_error err = {0};
    if (ck_model_check_extents(MODEL(fs), t, &err) == 0)
        return false;
    if (!__atomic_exchange_n(&fs->changed_logged, true, __ATOMIC_RELAXED))
        ckfs_log(fs, LOG_ERR, "%s", err.msg);
    fuse_reply_err(req, err.errnum ? err.errnum : EIO);
    return true;
}

