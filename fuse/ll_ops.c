/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuse_ops: the FUSE adapter (fuse/ll_ops.h).  Each operation here
 * decodes its request into plain arguments and who asks (ckfs_caller),
 * calls the session's front (mount/ops.h), replies once from the plain
 * result, and then ends the hold the front left (a read's descriptors,
 * an xattr's text stay valid until the reply is sent).  A request that
 * waits for a save (CKFS_DEFER) is handed to fuse/save_reply.c, which
 * answers it when the save ends.  No tree, no run, no format: only
 * libfuse and the front's plain results.
 */
#include "ll_ops.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "save_reply.h"

/* setattr's bits are passed as they come. */
_Static_assert(CKFS_SET_MODE == FUSE_SET_ATTR_MODE && CKFS_SET_UID == FUSE_SET_ATTR_UID &&
                   CKFS_SET_GID == FUSE_SET_ATTR_GID && CKFS_SET_SIZE == FUSE_SET_ATTR_SIZE &&
                   CKFS_SET_ATIME == FUSE_SET_ATTR_ATIME &&
                   CKFS_SET_MTIME == FUSE_SET_ATTR_MTIME &&
                   CKFS_SET_ATIME_NOW == FUSE_SET_ATTR_ATIME_NOW &&
                   CKFS_SET_MTIME_NOW == FUSE_SET_ATTR_MTIME_NOW &&
                   CKFS_SET_CTIME == FUSE_SET_ATTR_CTIME,
               "setattr bits");

static ckfs_front *front_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static int groups_of(const ckfs_caller *c, int cap, gid_t *list)
{
    return fuse_req_getgroups(c->req, cap, list);
}

static void answer_later(void *req, int errnum)
{
    fuse_reply_err(req, errnum);
}

static ckfs_caller caller_of(fuse_req_t req)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    return (ckfs_caller){.uid = ctx->uid, .gid = ctx->gid, .pid = ctx->pid,
                         .umask = ctx->umask, .groups = groups_of, .req = req,
                         .answer_later = answer_later};
}

static void reply_entry(fuse_req_t req, int rc, const ckfs_entry_out *e)
{
    struct fuse_entry_param ep;
    if (rc < 0) {
        fuse_reply_err(req, -rc);
        return;
    }
    ckfs_fuse_entry(e, &ep);
    fuse_reply_entry(req, &ep);
}

static void reply_attr(fuse_req_t req, int rc, const ckfs_attr_out *a)
{
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &a->st, a->timeout);
}

/* A request that waits for a save, handed to the saver's replies (fi: the
 * open's or create's; value: a seal's). */
static void deferred(fuse_req_t req, const ckfs_defer *d, struct fuse_file_info *fi,
                     const char *value, size_t size)
{
    switch (d->kind) {
    case DEFER_SAVE:
        ckfs_ask_save(req, d->fs, d->ino, d->reply, d->reply == REPLY_OPEN ? fi : NULL);
        return;
    case DEFER_CREATE_DONE:
        ckfs_create_snapshot_done(req, d->fs, fi);
        return;
    case DEFER_FLUSH_DONE:
        ckfs_flush_snapshot_done(req, d->fs, d->ino, ckfs_save_handle_of(fi));
        return;
    case DEFER_SEAL:
        ckfs_seal_request(req, d->fs, value, size);
        return;
    }
}

/* An operation's bare outcome: 0 or the errno. */
static void reply_status(fuse_req_t req, int rc)
{
    fuse_reply_err(req, rc < 0 ? -rc : 0);
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_entry_out e;
    ckfs_hold h = {0};
    int rc = f->ops->lookup(f, &c, parent, name, &e, &h);
    reply_entry(req, rc, &e);
    ckfs_hold_end(&h);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_attr_out a;
    ckfs_hold h = {0};
    int rc = f->ops->getattr(f, &c, ino, &a, &h);
    reply_attr(req, rc, &a);
    ckfs_hold_end(&h);
}

static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)fi;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_attr_out a;
    ckfs_hold h = {0};
    int rc = f->ops->setattr(f, &c, ino, attr, to_set, &a, &h);
    reply_attr(req, rc, &a);
    ckfs_hold_end(&h);
}

static void ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    char target[PATH_MAX];
    ckfs_hold h = {0};
    int rc = f->ops->readlink ? f->ops->readlink(f, &c, ino, target, sizeof target, &h)
                              : -ENOSYS;
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_readlink(req, target);
    ckfs_hold_end(&h);
}

static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_hold h = {0};
    reply_status(req, f->ops->opendir(f, &c, ino, &h));
    ckfs_hold_end(&h);
}

/* A listing being put in a reply of the kernel's size. */
typedef struct listing {
    fuse_req_t req;
    char *buf;
    size_t size, used;
    bool plus;
} listing;

static bool add_name(void *ctx, const char *name, const ckfs_entry_out *e, off_t next)
{
    listing *l = ctx;
    size_t n;
    if (l->plus) {
        struct fuse_entry_param ep;
        ckfs_fuse_entry(e, &ep);
        n = fuse_add_direntry_plus(l->req, l->buf + l->used, l->size - l->used, name, &ep, next);
    } else {
        n = fuse_add_direntry(l->req, l->buf + l->used, l->size - l->used, name, &e->attr, next);
    }
    if (n > l->size - l->used)
        return false;
    l->used += n;
    return true;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    listing l = {.req = req, .buf = malloc(size ? size : 1), .size = size, .plus = plus};
    ckfs_hold h = {0};
    if (l.buf == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int rc = f->ops->readdir(f, &c, ino, off, plus, add_name, &l, &h);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, l.buf, l.used);
    ckfs_hold_end(&h);
    free(l.buf);
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, ino, size, off, false);
}

static void ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, ino, size, off, true);
}

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_open_out out = {0};
    ckfs_defer d;
    ckfs_hold h = {0};
    int rc = f->ops->open(f, &c, ino, fi->flags, &out, &d, &h);
    fi->keep_cache = out.keep_cache;
    if (out.fh != 0)
        fi->fh = out.fh;
    if (rc == CKFS_DEFER)
        deferred(req, &d, fi, NULL, 0);
    else if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_open(req, fi);
    ckfs_hold_end(&h);
}

/* Plain splice, not SPLICE_MOVE: moving page-cache pages measured 2-3x
 * slower here (docs/benchmarks.md).  One piece of memory is a plain
 * buffer; anything else goes through libfuse's buffers, which splice
 * the descriptors' pieces unless -o nosplice. */
static void reply_plan(fuse_req_t req, const ckfs_read_plan *p)
{
    if (p->n == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    if (p->n == 1 && p->pieces[0].mem != NULL) {
        fuse_reply_buf(req, p->pieces[0].mem, p->pieces[0].len);
        return;
    }
    struct fuse_bufvec *bv = calloc(1, sizeof *bv + p->n * sizeof bv->buf[0]);
    if (bv == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    bv->count = p->n;
    for (size_t i = 0; i < p->n; i++) {
        const ckfs_piece *q = &p->pieces[i];
        if (q->mem != NULL)
            bv->buf[i] = (struct fuse_buf){.size = q->len, .mem = (void *)q->mem};
        else
            bv->buf[i] = (struct fuse_buf){
                .size = q->len,
                .flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY,
                .fd = q->fd,
                .pos = (off_t)q->off,
            };
    }
    int rc = fuse_reply_data(req, bv, p->splice ? 0 : FUSE_BUF_NO_SPLICE);
    if (rc < 0 && rc != -ENOENT && p->log_to != NULL) /* ENOENT: the request was interrupted */
        ckfs_log(p->log_to, LOG_ERR, "%s: read at %lld failed: %s", p->path,
                 (long long)p->off, strerror(-rc));
    free(bv);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)fi;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_read_plan plan;
    ckfs_hold h = {0};
    ckfs_plan_init(&plan);
    int rc = f->ops->read(f, &c, ino, size, off, &plan, &h);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        reply_plan(req, &plan);
    ckfs_hold_end(&h);
    ckfs_plan_free(&plan);
}

static void ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    (void)fi;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_hold h = {0};
    int rc = f->ops->write(f, &c, ino, buf, size, off, &h);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_write(req, size);
    ckfs_hold_end(&h);
}

static void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_defer d;
    ckfs_hold h = {0};
    int rc = f->ops->flush(f, &c, ino, fi->fh, &d, &h);
    if (rc == CKFS_DEFER)
        deferred(req, &d, fi, NULL, 0);
    else
        reply_status(req, rc);
    ckfs_hold_end(&h);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    bool save_handle = false;
    ckfs_hold h = {0};
    int rc = f->ops->release(f, &c, ino, fi->fh, &save_handle, &h);
    if (save_handle)
        ckfs_save_handle_release(ckfs_save_handle_of(fi));
    reply_status(req, rc);
    ckfs_hold_end(&h);
}

static void ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)datasync, (void)fi;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_defer d;
    ckfs_hold h = {0};
    int rc = f->ops->fsync(f, &c, ino, &d, &h);
    if (rc == CKFS_DEFER)
        deferred(req, &d, NULL, NULL, 0);
    else
        reply_status(req, rc);
    ckfs_hold_end(&h);
}

static void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_entry_out e;
    ckfs_open_out out = {0};
    ckfs_defer d;
    ckfs_hold h = {0};
    int rc = f->ops->create(f, &c, parent, name, mode, fi->flags, &e, &out, &d, &h);
    if (rc == CKFS_DEFER) {
        deferred(req, &d, fi, NULL, 0);
    } else if (rc < 0) {
        fuse_reply_err(req, -rc);
    } else {
        struct fuse_entry_param ep;
        ckfs_fuse_entry(&e, &ep);
        if (out.fh != 0)
            fi->fh = out.fh;
        fuse_reply_create(req, &ep, fi);
    }
    ckfs_hold_end(&h);
}

static void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    (void)rdev;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_entry_out e;
    ckfs_defer d;
    ckfs_hold h = {0};
    int rc = f->ops->mknod(f, &c, parent, name, mode, &e, &d, &h);
    if (rc == CKFS_DEFER)
        deferred(req, &d, NULL, NULL, 0);
    else
        reply_entry(req, rc, &e);
    ckfs_hold_end(&h);
}

static void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_entry_out e;
    ckfs_hold h = {0};
    int rc = f->ops->mkdir(f, &c, parent, name, mode, &e, &h);
    reply_entry(req, rc, &e);
    ckfs_hold_end(&h);
}

static void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_hold h = {0};
    reply_status(req, f->ops->unlink(f, &c, parent, name, &h));
    ckfs_hold_end(&h);
}

static void ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_hold h = {0};
    reply_status(req, f->ops->rmdir(f, &c, parent, name, &h));
    ckfs_hold_end(&h);
}

static void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_defer d;
    ckfs_hold h = {0};
    int rc = f->ops->rename(f, &c, parent, name, newparent, newname, flags, &d, &h);
    if (rc == CKFS_DEFER)
        deferred(req, &d, NULL, NULL, 0);
    else
        reply_status(req, rc);
    ckfs_hold_end(&h);
}

static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    (void)link, (void)name;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_hold h = {0};
    reply_status(req, f->ops->symlink ? f->ops->symlink(f, &c, parent, &h) : -ENOSYS);
    ckfs_hold_end(&h);
}

static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    (void)ino, (void)newname;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_hold h = {0};
    reply_status(req, f->ops->link ? f->ops->link(f, &c, newparent, &h) : -ENOSYS);
    ckfs_hold_end(&h);
}

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_xattr_out *out = malloc(sizeof *out);
    ckfs_hold h = {0};
    if (out == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int rc = f->ops->getxattr(f, &c, ino, name, out, &h);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        ckfs_reply_xattr(req, out->value, out->len, size);
    ckfs_hold_end(&h);
    free(out);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_xattr_out *out = malloc(sizeof *out);
    ckfs_hold h = {0};
    if (out == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    int rc = f->ops->listxattr(f, &c, ino, out, &h);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        ckfs_reply_xattr(req, out->value, out->len, size);
    ckfs_hold_end(&h);
    free(out);
}

static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    (void)flags;
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    ckfs_defer d;
    ckfs_hold h = {0};
    int rc = f->ops->setxattr(f, &c, ino, name, value, size, &d, &h);
    if (rc == CKFS_DEFER)
        deferred(req, &d, NULL, value, size);
    else if (rc != CKFS_ANSWERED_LATER)
        reply_status(req, rc);
    ckfs_hold_end(&h);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
    ckfs_front *f = front_of(req);
    ckfs_caller c = caller_of(req);
    struct statvfs sv;
    ckfs_hold h = {0};
    int rc = f->ops->statfs(f, &c, ino, &sv, &h);
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_statfs(req, &sv);
    ckfs_hold_end(&h);
}

void ckfs_conn_init(struct fuse_conn_info *conn, bool *splice, unsigned max_read)
{
    if (*splice && (conn->capable & FUSE_CAP_SPLICE_WRITE))
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    else
        *splice = false;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    /* NFS export (libfuse's doc/README.NFS): the kernel may then turn a
     * file handle whose inode it has forgotten back into a node, by a
     * lookup of "." on its number and of ".." up to the root, which every
     * mount answers (ckfs_op_lookup, the run's lookup).  Numbers and
     * generations stay valid for the mount's life: mount/inode_map.h,
     * ckfs.generation. */
    if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
        conn->want |= FUSE_CAP_EXPORT_SUPPORT;
    conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
    /* libfuse refuses INIT unless this repeats the mount's max_read
     * (fuse/main.c, mount_max_read). */
    conn->max_read = max_read;
    /* Tests only: ask for capabilities the kernel may not have, for the
     * refused-INIT path (tests/bats/roundtrips.bats). */
    const char *want = getenv("CKPTFS_TEST_INIT_WANT");
    if (want != NULL)
        conn->want |= (unsigned)strtoul(want, NULL, 0);
}

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
    ckfs_front *f = userdata;
    ckfs_conn_init(conn, f->splice, *f->max_read);
}

static void ll_destroy(void *userdata)
{
    ckfs_front *f = userdata;
    if (f->ops->destroy != NULL)
        f->ops->destroy(f);
}

const struct fuse_lowlevel_ops ckfs_ops = {
    .init = ll_init,
    .destroy = ll_destroy,
    .lookup = ll_lookup,
    .getattr = ll_getattr,
    .setattr = ll_setattr,
    .readlink = ll_readlink,
    .opendir = ll_opendir,
    .readdir = ll_readdir,
    .readdirplus = ll_readdirplus,
    .open = ll_open,
    .read = ll_read,
    .write = ll_write,
    .flush = ll_flush,
    .release = ll_release,
    .fsync = ll_fsync,
    .fsyncdir = ll_fsync,
    .create = ll_create,
    .mknod = ll_mknod,
    .mkdir = ll_mkdir,
    .unlink = ll_unlink,
    .rmdir = ll_rmdir,
    .rename = ll_rename,
    .symlink = ll_symlink,
    .link = ll_link,
    .getxattr = ll_getxattr,
    .listxattr = ll_listxattr,
    .setxattr = ll_setxattr,
    .statfs = ll_statfs,
};
