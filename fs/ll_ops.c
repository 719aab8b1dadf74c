/*
 * ll_ops: the FUSE low-level operations of a read-only ckptfs mount.
 *
 * Every reply is computed from the tensor index; `out` reads go straight to
 * the model file's byte extents (spliced when the kernel allows it), `meta`
 * is formatted on demand.  Because the tree is immutable, entries and
 * attributes are cached by the kernel for a long time and file data is kept
 * in the page cache across opens (keep_cache).
 */
#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <syslog.h>

#include "../codec/oneflow_meta.h"
#include "inode_map.h"

#define XATTR_NAME "user.ckptfs.name"
#define XATTR_TYPE "user.ckptfs.type"
#define XATTR_SHAPE "user.ckptfs.shape"
/* The listxattr reply: the names, each NUL-terminated. */
static const char xattr_list[] = XATTR_NAME "\0" XATTR_TYPE "\0" XATTR_SHAPE;

void ckfs_log(const ckfs *fs, int priority, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (fs->use_syslog) {
        vsyslog(priority, fmt, ap);
    } else {
        fputs("ckptfs: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

static ckfs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* The visible tensor behind a tensor inode, or NULL. */
static const ck_tensor *tensor_at(const ckfs *fs, uint32_t id)
{
    const ck_index *ix = &fs->model->index;
    if (id >= ix->count || ix->tensors[id].superseded)
        return NULL;
    return &ix->tensors[id];
}

static node_kind resolve(const ckfs *fs, fuse_ino_t ino, const ck_tensor **t)
{
    uint32_t id = 0;
    node_kind k = ino_kind(ino, &id);
    *t = NULL;
    if (k == NODE_TENSOR_DIR || k == NODE_META || k == NODE_OUT) {
        *t = tensor_at(fs, id);
        if (*t == NULL)
            return NODE_NONE;
    }
    return k;
}

static uint32_t id_of(const ckfs *fs, const ck_tensor *t)
{
    return (uint32_t)(t - fs->model->index.tensors);
}

static int fill_attr(const ckfs *fs, fuse_ino_t ino, struct stat *st)
{
    const ck_tensor *t;
    node_kind k = resolve(fs, ino, &t);
    const struct stat *ms = &fs->model->st;
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = ms->st_uid;
    st->st_gid = ms->st_gid;
    st->st_atim = ms->st_mtim;
    st->st_mtim = ms->st_mtim;
    st->st_ctim = ms->st_mtim;
    st->st_blksize = 65536;
    switch (k) {
    case NODE_ROOT:
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2 + fs->model->index.n_live;
        break;
    case NODE_TENSOR_DIR:
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
        break;
    case NODE_SNAPSHOT_DONE:
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        break;
    case NODE_META: {
        char meta[CK_META_MAX];
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)ck_meta_of_tensor(t, meta, sizeof meta);
        break;
    }
    case NODE_OUT:
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)t->nbytes;
        break;
    default:
        return -ENOENT;
    }
    st->st_blocks = (st->st_size + 511) / 512;
    return 0;
}

static void reply_entry(fuse_req_t req, const ckfs *fs, fuse_ino_t ino)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    if (fill_attr(fs, ino, &e.attr) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    e.ino = ino;
    e.attr_timeout = fs->timeout;
    e.entry_timeout = fs->timeout;
    fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ckfs *fs = fs_of(req);
    const ck_tensor *t;
    switch (resolve(fs, parent, &t)) {
    case NODE_ROOT: {
        if (strcmp(name, "snapshot_done") == 0) {
            reply_entry(req, fs, INO_SNAPSHOT_DONE);
            return;
        }
        uint32_t id = ck_index_lookup(&fs->model->index, name, strlen(name));
        if (id == CK_NAME_MAP_NONE) {
            fuse_reply_err(req, ENOENT);
            return;
        }
        reply_entry(req, fs, ino_of_tensor(id, NODE_TENSOR_DIR));
        return;
    }
    case NODE_TENSOR_DIR:
        if (strcmp(name, "meta") == 0)
            reply_entry(req, fs, ino_of_tensor(id_of(fs, t), NODE_META));
        else if (strcmp(name, "out") == 0)
            reply_entry(req, fs, ino_of_tensor(id_of(fs, t), NODE_OUT));
        else
            fuse_reply_err(req, ENOENT);
        return;
    case NODE_NONE:
        fuse_reply_err(req, ENOENT);
        return;
    default:
        fuse_reply_err(req, ENOTDIR);
    }
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    ckfs *fs = fs_of(req);
    struct stat st;
    if (fill_attr(fs, ino, &st) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fuse_reply_attr(req, &st, fs->timeout);
}

/* ---- directories ---- */

/* Entry `pos` of a directory listing: its name and inode (0 past the end). */
static fuse_ino_t dir_entry(const ckfs *fs, fuse_ino_t dir, const ck_tensor *t, off_t pos,
                            const char **name)
{
    static const char *const fixed[] = {".", ".."};
    if (pos < 2) {
        *name = fixed[pos];
        return pos == 0 ? dir : INO_ROOT;
    }
    if (t == NULL) { /* the root */
        const ck_index *ix = &fs->model->index;
        if (pos == 2) {
            *name = "snapshot_done";
            return INO_SNAPSHOT_DONE;
        }
        if ((size_t)(pos - 3) >= ix->n_live)
            return 0;
        uint32_t id = ix->live[pos - 3];
        *name = ix->tensors[id].dir_name;
        return ino_of_tensor(id, NODE_TENSOR_DIR);
    }
    if (pos == 2) {
        *name = "meta";
        return ino_of_tensor(id_of(fs, t), NODE_META);
    }
    if (pos == 3) {
        *name = "out";
        return ino_of_tensor(id_of(fs, t), NODE_OUT);
    }
    return 0;
}

/* The directory at ino (t: its tensor, NULL for the root), or an errno. */
static int resolve_dir(const ckfs *fs, fuse_ino_t ino, const ck_tensor **t)
{
    node_kind k = resolve(fs, ino, t);
    if (k == NODE_ROOT || k == NODE_TENSOR_DIR)
        return 0;
    return k == NODE_NONE ? ENOENT : ENOTDIR;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
    ckfs *fs = fs_of(req);
    const ck_tensor *t;
    int e = resolve_dir(fs, ino, &t);
    if (e != 0) {
        fuse_reply_err(req, e);
        return;
    }
    char *buf = malloc(size);
    if (buf == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    for (off_t pos = off;; pos++) {
        const char *name;
        fuse_ino_t child = dir_entry(fs, ino, t, pos, &name);
        if (child == 0)
            break;
        size_t n;
        if (plus) {
            struct fuse_entry_param e;
            memset(&e, 0, sizeof e);
            fill_attr(fs, child, &e.attr);
            /* "." and ".." carry no lookup reference (ino 0). */
            if (pos >= 2) {
                e.ino = child;
                e.attr_timeout = fs->timeout;
                e.entry_timeout = fs->timeout;
            }
            n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, pos + 1);
        } else {
            struct stat st;
            fill_attr(fs, child, &st);
            n = fuse_add_direntry(req, buf + used, size - used, name, &st, pos + 1);
        }
        if (n > size - used)
            break;
        used += n;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, ino, size, off, true);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    const ck_tensor *t;
    int e = resolve_dir(fs_of(req), ino, &t);
    if (e != 0) {
        fuse_reply_err(req, e);
        return;
    }
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

/* ---- files ---- */

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    ckfs *fs = fs_of(req);
    const ck_tensor *t;
    node_kind k = resolve(fs, ino, &t);
    if (k == NODE_NONE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (k == NODE_ROOT || k == NODE_TENSOR_DIR) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, EROFS);
        return;
    }
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
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

/* Zero-copy: describe the extents to libfuse, which splices or copies. */
static void read_extents(fuse_req_t req, const ckfs *fs, const ck_tensor *t, size_t size,
                         off_t off)
{
    struct fuse_bufvec *bv = malloc(sizeof *bv + t->n_ext * sizeof bv->buf[0]);
    if (bv == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    memset(bv, 0, sizeof *bv);
    struct splice_ctx c = {.m = fs->model, .bv = bv};
    ck_tensor_for_range(t, (uint64_t)off, size, add_fd_buf, &c);
    /* Plain splice, not SPLICE_MOVE: moving page-cache pages measured 2-3x
     * slower here (docs/benchmarks.md). */
    int rc = fuse_reply_data(req, bv, fs->splice ? 0 : FUSE_BUF_NO_SPLICE);
    if (rc < 0 && rc != -ENOENT) { /* ENOENT: the request was interrupted */
        char q[CK_QUOTE_BUF];
        ckfs_log(fs, LOG_ERR, "%s: tensor '%s': read at %lld failed: %s", fs->model->path,
                 ck_quote(q, t->name, t->name_len), (long long)off, strerror(-rc));
    }
    free(bv);
}

static void read_copy(fuse_req_t req, const ckfs *fs, const ck_tensor *t, size_t size,
                      off_t off)
{
    char *buf = malloc(size ? size : 1);
    if (buf == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ck_error err;
    long n = ck_model_read(fs->model, t, buf, size, (uint64_t)off, &err);
    if (n < 0) {
        ckfs_log(fs, LOG_ERR, "%s", err.msg);
        fuse_reply_err(req, err.errnum ? err.errnum : EIO);
    } else {
        fuse_reply_buf(req, buf, (size_t)n);
    }
    free(buf);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)fi;
    ckfs *fs = fs_of(req);
    const ck_tensor *t;
    node_kind k = resolve(fs, ino, &t);
    if (off < 0) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    switch (k) {
    case NODE_SNAPSHOT_DONE:
        fuse_reply_buf(req, NULL, 0);
        return;
    case NODE_META: {
        char meta[CK_META_MAX];
        size_t n = ck_meta_of_tensor(t, meta, sizeof meta);
        if ((uint64_t)off >= n)
            fuse_reply_buf(req, NULL, 0);
        else
            fuse_reply_buf(req, meta + off, size < n - (size_t)off ? size : n - (size_t)off);
        return;
    }
    case NODE_OUT:
        if ((uint64_t)off >= t->nbytes || size == 0)
            fuse_reply_buf(req, NULL, 0);
        else if (t->inline_data == NULL && all_sources_are_files(fs->model))
            read_extents(req, fs, t, size, off);
        else
            read_copy(req, fs, t, size, off);
        return;
    case NODE_NONE:
        fuse_reply_err(req, ENOENT);
        return;
    default:
        fuse_reply_err(req, EISDIR);
    }
}

/* ---- extended attributes ---- */

static void reply_xattr_value(fuse_req_t req, const void *value, size_t len, size_t size)
{
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, value, len);
}

static size_t format_shape(const ck_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < t->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", t->dims[i]);
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "]");
    return n < cap ? n : cap - 1;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    ckfs *fs = fs_of(req);
    const ck_tensor *t;
    node_kind k = resolve(fs, ino, &t);
    if (k == NODE_NONE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (k != NODE_TENSOR_DIR) {
        fuse_reply_err(req, ENODATA);
        return;
    }
    if (strcmp(name, XATTR_NAME) == 0) {
        reply_xattr_value(req, t->name, t->name_len, size);
    } else if (strcmp(name, XATTR_TYPE) == 0) {
        reply_xattr_value(req, t->type_name, strlen(t->type_name), size);
    } else if (strcmp(name, XATTR_SHAPE) == 0) {
        char shape[CK_MAX_DIMS * 22 + 4];
        reply_xattr_value(req, shape, format_shape(t, shape, sizeof shape), size);
    } else {
        fuse_reply_err(req, ENODATA);
    }
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    ckfs *fs = fs_of(req);
    const ck_tensor *t;
    node_kind k = resolve(fs, ino, &t);
    if (k == NODE_NONE)
        fuse_reply_err(req, ENOENT);
    else if (k == NODE_TENSOR_DIR)
        reply_xattr_value(req, xattr_list, sizeof xattr_list, size);
    else
        reply_xattr_value(req, "", 0, size);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    ckfs *fs = fs_of(req);
    struct statvfs sv;
    memset(&sv, 0, sizeof sv);
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_blocks = ((uint64_t)fs->model->st.st_size + 4095) / 4096;
    sv.f_files = 2 + 3 * fs->model->index.n_live;
    sv.f_namemax = 255;
    sv.f_flag = ST_RDONLY;
    fuse_reply_statfs(req, &sv);
}

/* ---- everything that would change the tree: a read-only mount ---- */

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)ino, (void)attr, (void)to_set, (void)fi;
    fuse_reply_err(req, EROFS);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    (void)ino, (void)buf, (void)size, (void)off, (void)fi;
    fuse_reply_err(req, EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    (void)parent, (void)name, (void)mode, (void)fi;
    fuse_reply_err(req, EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    (void)parent, (void)name, (void)mode, (void)rdev;
    fuse_reply_err(req, EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    fuse_reply_err(req, EROFS);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)parent, (void)name;
    fuse_reply_err(req, EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    (void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
    fuse_reply_err(req, EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    (void)ino, (void)name, (void)value, (void)size, (void)flags;
    fuse_reply_err(req, EROFS);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    ckfs *fs = userdata;
    if (fs->splice && (conn->capable & FUSE_CAP_SPLICE_WRITE))
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    else
        fs->splice = false;
    if (conn->capable & FUSE_CAP_READDIRPLUS)
        conn->want |= FUSE_CAP_READDIRPLUS;
    conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
}

const struct fuse_lowlevel_ops ckfs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .open = op_open,
    .read = op_read,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .statfs = op_statfs,
    .setattr = op_setattr,
    .write = op_write,
    .create = op_create,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_unlink,
    .rename = op_rename,
    .setxattr = op_setxattr,
    .removexattr = op_unlink,
};
