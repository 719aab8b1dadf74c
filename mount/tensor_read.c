/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_read: a tensor's bytes planned for a read (tensor_read.h), and
 * whether the one who asks may read them.
 *
 * An out read is planned as descriptor pieces over the extents, which
 * fuse/ll_ops.c hands libfuse to splice (plain splice: SPLICE_MOVE
 * measured slower); a model whose sources are not all plain files
 * (encrypted, seekable zstd: fd -1) is copied through ck_model_read
 * instead (all_sources_are_files).
 */
#include "tensor_read.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#define MODEL(fs) ((fs)->tr.model)

/* The kernel checks the tree's modes, which are the model file's
 * (mount/nodes.c, file_mode_of), for every user; the directories between the
 * mount's root and each file a tensor is read from (a run's rank_<id>/ or
 * iteration_<N>/, a distributed checkpoint's ranks, beside the file's own
 * mode) have no node to carry their modes, so another user's read of a
 * tensor is checked here against the way to each of its files on disk:
 * EACCES where that user could not read it there, at the open (others_read)
 * and at each read.  The daemon's own user and root read what the daemon
 * opened. */
static int groups_of(const ckfs_caller *c, int cap, gid_t *list)
{
    return c->groups != NULL ? c->groups(c, cap, list) : 0;
}

bool ckfs_may_read(const ckfs_caller *c, const ckfs *fs, const ck_tensor *t, int *errnum)
{
    if (t == NULL || c->uid == 0 || c->uid == geteuid())
        return true;
    gid_t few[64], *groups = few;
    int n = groups_of(c, 64, few);
    if (n > 64 && (groups = malloc((size_t)n * sizeof *groups)) != NULL)
        n = groups_of(c, n, groups);
    ck_cred who = {.uid = c->uid, .gid = c->gid, .groups = groups,
                   .n_groups = n > 0 && groups != NULL ? (size_t)n : 0}; /* unknown: none */
    ck_error err = {0};
    int rc = ck_model_may_read(MODEL(fs), t, &who, &err);
    if (groups != few)
        free(groups);
    if (rc == 0)
        return true;
    *errnum = err.errnum ? err.errnum : EACCES;
    return false;
}

struct splice_ctx {
    const ck_model *m;
    ckfs_read_plan *plan;
};

static int add_fd_piece(void *ctx, uint32_t src, uint64_t src_off, size_t len)
{
    struct splice_ctx *c = ctx;
    return ckfs_plan_fd(c->plan, c->m->sources[src]->fd, src_off, len) < 0 ? -1 : 0;
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

int ckfs_add_extents(const ckfs *fs, const ck_tensor *t, uint64_t off, size_t size,
                     ckfs_read_plan *plan)
{
    struct splice_ctx c = {.m = MODEL(fs), .plan = plan};
    return ck_tensor_for_range(t, off, size, add_fd_piece, &c) < 0 ? -ENOMEM : 0;
}

/* The model file was truncated or rewritten under the mount (another
 * program; a save of ours opens the new file): its bytes are no longer the
 * indexed ones, and a splice past its end would end the read short and
 * silently.  One fstat per request; the reason is logged once. */
bool ckfs_model_changed(ckfs *fs, const ck_tensor *t, int *errnum)
{
    ck_error err = {0};
    if (ck_model_check_extents(MODEL(fs), t, &err) == 0)
        return false;
    if (!__atomic_exchange_n(&fs->changed_logged, true, __ATOMIC_RELAXED))
        ckfs_log(fs, LOG_ERR, "%s", err.msg);
    *errnum = err.errnum ? err.errnum : EIO;
    return true;
}

