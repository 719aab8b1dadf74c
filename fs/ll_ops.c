/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll_ops: the FUSE low-level operations of a ckptfs mount.
 *
 * Every reply is computed from the tree (the tensor index plus unsaved
 * edits): `out` reads go straight to the model file's byte extents, or to an
 * edit's spill file (spliced when the kernel allows it), `meta` is formatted
 * on demand.  Entries and attributes are cached by the kernel for a long
 * time and file data is kept in the page cache across opens (keep_cache):
 * edits go through this process, which answers with the new attributes, and
 * a commit does not change any byte a reader sees.  Only `snapshot_done`,
 * which comes and goes on a writable mount, is never cached there.
 *
 * On a writable mount, `out` and `meta` take writes; creating or touching
 * `snapshot_done`, fsync, and unmounting save the edits into the model file.
 *
 * Only the operations are here.  What a node is to the kernel (attributes,
 * timeouts, its path) is fs/nodes.c; how a tensor's bytes are served
 * (shared with a view's files, fs/file_view.c), fs/tensor_read.c;
 * telling the kernel of what changed
 * behind it, fs/invalidate.c; the replies to requests that wait for a
 * save, and the seal, fs/save_reply.c; the refusal log, fs/log.c.  The
 * operations ask the saver (fs/saver.c), which answers through
 * fs/save_reply.c and fs/invalidate.c, never through this file.
 */
#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h> /* RENAME_NOREPLACE, RENAME_EXCHANGE */
#include <sys/random.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <unistd.h>

#include "../codec/view.h"
#include "inode_map.h"
#include "invalidate.h"
#include "nodes.h"
#include "save_reply.h"
#include "file_view.h"
#include "tensor_read.h"

#define XATTR_NAME "user.ckptfs.name"
#define XATTR_TYPE "user.ckptfs.type"   /* the format's own spelling */
#define XATTR_DTYPE "user.ckptfs.dtype" /* the canonical name, as the tools print it */
#define XATTR_SHAPE "user.ckptfs.shape"
#define XATTR_METADATA "user.ckptfs.metadata" /* the model's own (ck_model_metadata) */
/* The listxattr reply: the names, each NUL-terminated. */
static const char xattr_list[] = XATTR_NAME "\0" XATTR_TYPE "\0" XATTR_DTYPE "\0" XATTR_SHAPE;

/* Whether edits are taken now: a writable mount, not sealed for unmount
 * (nor being sealed: the seal's save decides). */
static bool takes_edits(const ckfs *fs)
{
    return fs->tr.writable && !fs->sealed && !fs->sealing;
}

/* Refuse an edit request with EROFS when edits are not taken now. */
static bool refused_now(fuse_req_t req, const ckfs *fs)
{
    if (takes_edits(fs))
        return false;
    fuse_reply_err(req, EROFS);
    return true;
}

#define MODEL(fs) ((fs)->tr.model)

static uint32_t pos_of(const ckfs *fs, const entry *e)
{
    return (uint32_t)(e - fs->tr.entries);
}

/* The directory an extra file lives in, as tree_extra_* names it. */
static uint32_t extra_dir(fuse_ino_t parent)
{
    uint32_t pos = 0;
    return ino_kind(parent, &pos) == NODE_TENSOR_DIR ? pos : EXTRA_IN_ROOT;
}

/* Refuse a request on ino (/name): say why, reply the errno. */
static void reply_refused(fuse_req_t req, ckfs *fs, fuse_ino_t ino, const char *name,
                          const ck_error *err)
{
    char path[NODE_PATH_MAX];
    ckfs_refused(fs, ckfs_path_of(fs, ino, name, path, sizeof path), err);
    fuse_reply_err(req, err->errnum ? err->errnum : EIO);
}

static void reply_entry(fuse_req_t req, ckfs *fs, fuse_ino_t ino)
{
    struct fuse_entry_param e;
    if (ckfs_fill_entry(fs, ino, &e) < 0)
        fuse_reply_err(req, ENOENT);
    else
        fuse_reply_entry(req, &e);
}

static bool is_dots(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* "." of any node, ".." of a directory.  The kernel asks for them only to
 * turn an NFS file handle back into a node it has forgotten (its export
 * operations: "." on the handle's number, ".." to reconnect a directory
 * to the root), so a number whose node is gone since (a removed tensor, a
 * tombstone) is ESTALE.  The reply counts as a lookup, as any other; a
 * node answers with its own number, an alias (a file renamed over meta
 * or out) with the number the kernel asked about. */
static void lookup_dots(fuse_req_t req, ckfs *fs, fuse_ino_t ino, const char *name)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE)
        fuse_reply_err(req, ESTALE);
    else if (name[1] == '\0')
        reply_entry(req, fs, ino);
    else if (k == NODE_ROOT || k == NODE_TENSOR_DIR)
        reply_entry(req, fs, INO_ROOT); /* the root's parent is outside: itself */
    else
        fuse_reply_err(req, ENOTDIR);
}

static void op_lookup(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name)
{
    entry *e;
    if (is_dots(name)) {
        lookup_dots(req, fs, parent, name);
        return;
    }
    switch (ckfs_resolve(fs, parent, &e)) {
    case NODE_ROOT: {
        if (fs->view != NULL) {
            long i = ckfs_view_find(fs->view, name);
            if (i >= 0)
                reply_entry(req, fs, INO_VIEW_BASE + (uint64_t)i);
            else
                fuse_reply_err(req, ENOENT);
            return;
        }
        if (strcmp(name, "snapshot_done") == 0) {
            if (!tree_equals_file(&fs->tr))
                fuse_reply_err(req, ENOENT); /* absent until the edits are saved */
            else
                reply_entry(req, fs, INO_SNAPSHOT_DONE);
            return;
        }
        int64_t pos = tree_lookup(&fs->tr, name);
        int64_t x = pos < 0 ? tree_extra_lookup(&fs->tr, EXTRA_IN_ROOT, name) : -1;
        if (pos >= 0)
            reply_entry(req, fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR));
        else if (x >= 0)
            reply_entry(req, fs, INO_EXTRA_BASE + (uint64_t)x);
        else
            fuse_reply_err(req, ENOENT);
        return;
    }
    case NODE_TENSOR_DIR: {
        int64_t x = tree_extra_lookup(&fs->tr, pos_of(fs, e), name);
        if (strcmp(name, "meta") == 0)
            reply_entry(req, fs, ino_of_tensor(pos_of(fs, e), NODE_META));
        else if (strcmp(name, "out") == 0)
            reply_entry(req, fs, ino_of_tensor(pos_of(fs, e), NODE_OUT));
        else if (x >= 0)
            reply_entry(req, fs, INO_EXTRA_BASE + (uint64_t)x);
        else
            fuse_reply_err(req, ENOENT);
        return;
    }
    case NODE_NONE:
        fuse_reply_err(req, ENOENT);
        return;
    default:
        fuse_reply_err(req, ENOTDIR);
    }
}

static void op_getattr(fuse_req_t req, ckfs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    if (ckfs_fill_attr(fs, ino, &st) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    fuse_reply_attr(req, &st, ckfs_timeout_of(fs, ino));
}

/* ---- directories ---- */

#define SKIP ((fuse_ino_t)-1) /* a listing position with nothing there now */

/* Listing positions: ".", "..", then a tensor directory's meta and out, or
 * the root's tensors by index; the extra files from EXTRA_POS, by id; and
 * last the root's snapshot_done at DONE_POS.  Each kind has its own range,
 * so a position stays the same name while tensors and files are added.
 * snapshot_done comes last because it means "the rest is complete", as in
 * the snapshots the tree imitates: a copy made in listing order (cp -r,
 * tar) into a writable mount creates it after the tensors, and that save
 * holds them all. */
#define EXTRA_POS ((off_t)1 << 40)
#define DONE_POS ((off_t)1 << 62)

/* Entry `pos` of a directory listing: its name and inode (0 past the end,
 * SKIP for a position that is empty now: snapshot_done while edits are
 * unsaved, a removed tensor, a missing meta or out), and the position that
 * follows it. */
static fuse_ino_t dir_entry(ckfs *fs, fuse_ino_t dir, const entry *e, off_t pos,
                            const char **name, off_t *next)
{
    static const char *const fixed[] = {".", ".."};
    *next = pos + 1;
    if (pos < 0)
        return 0;
    if (pos < 2) {
        *name = fixed[pos];
        return pos == 0 ? dir : INO_ROOT;
    }
    if (fs->view != NULL) { /* the root of a view: its files */
        size_t i = (size_t)pos - 2;
        if (i >= ckfs_view_count(fs->view))
            return 0;
        *name = ckfs_view_name(fs->view, i);
        return INO_VIEW_BASE + i;
    }
    if (pos < EXTRA_POS && e != NULL) { /* a tensor's directory */
        if (pos == 2) {
            *name = "meta";
            return entry_has_meta(e) ? ino_of_tensor(pos_of(fs, e), NODE_META) : SKIP;
        }
        if (pos == 3) {
            *name = "out";
            return entry_has_out(e) ? ino_of_tensor(pos_of(fs, e), NODE_OUT) : SKIP;
        }
        *next = EXTRA_POS;
        return SKIP;
    }
    if (pos < EXTRA_POS) { /* the root's tensors */
        size_t i = (size_t)pos - 2;
        if (i >= fs->tr.n_entries) {
            *next = EXTRA_POS;
            return SKIP;
        }
        if (fs->tr.entries[i].deleted)
            return SKIP;
        *name = entry_dir_name(&fs->tr, &fs->tr.entries[i]);
        return ino_of_tensor((uint32_t)i, NODE_TENSOR_DIR);
    }
    if (pos < DONE_POS) { /* the extra files */
        size_t id = (size_t)(pos - EXTRA_POS);
        if (id >= fs->tr.n_extras) {
            *next = DONE_POS;
            return e != NULL ? 0 : SKIP;
        }
        const extra *x = &fs->tr.extras[id];
        if (x->deleted || x->dir != (e ? pos_of(fs, e) : EXTRA_IN_ROOT))
            return SKIP;
        *name = x->name;
        return INO_EXTRA_BASE + id;
    }
    if (pos == DONE_POS && e == NULL) {
        *name = "snapshot_done";
        return tree_equals_file(&fs->tr) ? INO_SNAPSHOT_DONE : SKIP;
    }
    return 0;
}

/* The directory at ino (t: its tensor, NULL for the root), or an errno. */
static int resolve_dir(ckfs *fs, fuse_ino_t ino, entry **e)
{
    node_kind k = ckfs_resolve(fs, ino, e);
    if (k == NODE_ROOT || k == NODE_TENSOR_DIR)
        return 0;
    return k == NODE_NONE ? ENOENT : ENOTDIR;
}

static void do_readdir(fuse_req_t req, ckfs *fs, fuse_ino_t ino, size_t size, off_t off,
                       bool plus)
{
    entry *dir;
    int rc = resolve_dir(fs, ino, &dir);
    if (rc != 0) {
        fuse_reply_err(req, rc);
        return;
    }
    char *buf = malloc(size);
    if (buf == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    off_t next;
    for (off_t pos = off;; pos = next) {
        const char *name = NULL;
        fuse_ino_t child = dir_entry(fs, ino, dir, pos, &name, &next);
        if (child == 0)
            break;
        if (child == SKIP)
            continue;
        size_t n;
        if (plus) {
            struct fuse_entry_param e;
            memset(&e, 0, sizeof e);
            /* "." and ".." carry no lookup reference (ino 0). */
            if (pos >= 2)
                ckfs_fill_entry(fs, child, &e);
            else
                ckfs_fill_attr(fs, child, &e.attr);
            n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, next);
        } else {
            struct stat st;
            ckfs_fill_attr(fs, child, &st);
            n = fuse_add_direntry(req, buf + used, size - used, name, &st, next);
        }
        if (n > size - used)
            break;
        used += n;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_readdir(fuse_req_t req, ckfs *fs, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, fs, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, ckfs *fs, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    (void)fi;
    do_readdir(req, fs, ino, size, off, true);
}

/* A read-only tree never changes, so no file needs a handle: ENOSYS tells
 * the kernel that this connection has no open or flush at all (FUSE's
 * no-open support).  It then stops sending OPEN/RELEASE and FLUSH, and
 * keeps the page cache as keep_cache did; ENOENT and EISDIR still come
 * from lookup and the inode's type, and a write open from the ro mount
 * (EROFS).  Only when the whole session is read-only: a read-only
 * checkpoint of an -o rw run answers as a writable mount (session_rw). */
static bool no_handles(fuse_req_t req, const ckfs *fs)
{
    if (fs->tr.writable || fs->session_rw || fs->others_read)
        return false;
    fuse_reply_err(req, ENOSYS);
    return true;
}

/* A directory needs no handle, on a writable mount either: ENOSYS makes
 * the kernel stop sending OPENDIR and RELEASEDIR for the connection and
 * cache every listing (FOPEN_CACHE_DIR).  A listing changed through the
 * mount is dropped by the kernel itself; the two changes it cannot see,
 * snapshot_done coming and going and files put back by a refused rmdir,
 * are invalidated (ckfs_listing_changed). */
static void op_opendir(fuse_req_t req, ckfs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fs, (void)ino, (void)fi;
    fuse_reply_err(req, ENOSYS);
}

/* ---- files ---- */

/* An edit happened: the automatic save waits commit_delay from now. */
static void edited(ckfs *fs)
{
    clock_gettime(CLOCK_MONOTONIC, &fs->last_edit);
    fs->auto_commit_failed = false;
    ckfs_saver_poke(fs);
}

static bool is_writer(const struct fuse_file_info *fi)
{
    return (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
}

/* An open file that holds the automatic save back: its handle says so
 * (FH_WRITER, fs/save_reply.h). */
static void writer_opened(ckfs *fs, struct fuse_file_info *fi)
{
    fi->fh = FH_WRITER;
    fs->open_writers++;
}

static void op_open(fuse_req_t req, ckfs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
    entry *e;
    if (no_handles(req, fs))
        return;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (k == NODE_ROOT || k == NODE_TENSOR_DIR) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    /* the page cache would serve this user what another one read */
    if (k == NODE_VIEW && !ckfs_view_may_open(req, fs, ino - INO_VIEW_BASE))
        return;
    if ((k == NODE_META || k == NODE_OUT) && !ckfs_may_read(req, fs, entry_tensor(&fs->tr, e)))
        return;
    bool writing = is_writer(fi);
    /* Cached pages stay valid unless the bytes may have changed behind the
     * kernel's back (a file renamed over this one). */
    fi->keep_cache = k != NODE_OUT || e->edit == NULL;
    if (!writing) {
        fuse_reply_open(req, fi);
        return;
    }
    if (refused_now(req, fs))
        return;
    ck_error err = {0};
    int rc = 0;
    if (k == NODE_SNAPSHOT_DONE) {
        ckfs_ask_save(req, fs, ino, REPLY_OPEN, fi); /* `: > snapshot_done` asks for a save too */
        return;
    }
    /* as the mode says, also to root, whom the kernel lets past it */
    if ((k == NODE_META || k == NODE_OUT) && entry_write_check(&fs->tr, e, &err) < 0) {
        reply_refused(req, fs, ino, NULL, &err);
        return;
    }
    if (k == NODE_EXTRA)
        rc = (fi->flags & O_TRUNC) && tree_extra_truncate(&fs->tr, ino - INO_EXTRA_BASE, 0,
                                                          &err) < 0 ? err.errnum : 0;
    else if (k == NODE_META)
        rc = entry_meta_begin(&fs->tr, e, fi->flags & O_TRUNC, &err) < 0 ? err.errnum : 0;
    else if (fi->flags & O_TRUNC)
        rc = entry_out_truncate(&fs->tr, e, 0, &err) < 0 ? err.errnum : 0;
    if (rc != 0 && err.msg[0] != '\0') {
        reply_refused(req, fs, ino, NULL, &err);
        return;
    }
    if (rc != 0) {
        fuse_reply_err(req, rc);
        return;
    }
    writer_opened(fs, fi); /* another file may yet be renamed over out */
    edited(fs);
    fuse_reply_open(req, fi);
}

/* Zero-copy: describe the extents to libfuse, which splices or copies. */
static void read_extents(fuse_req_t req, const ckfs *fs, const ck_tensor *t, size_t size,
                         off_t off, size_t pieces)
{
    struct fuse_bufvec *bv = malloc(sizeof *bv + pieces * sizeof bv->buf[0]);
    if (bv == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    memset(bv, 0, sizeof *bv);
    ckfs_add_extents(fs, t, (uint64_t)off, size, bv);
    ckfs_reply_bufvec(req, fs, bv, off);
    free(bv);
}

/* An edited out or an extra file: spliced from its range of the spill file. */
static void read_spill(fuse_req_t req, const ckfs *fs, const spill_area *a, size_t size,
                       off_t off)
{
    if (!a->used || (uint64_t)off >= a->size) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    if (size > a->size - (uint64_t)off)
        size = (size_t)(a->size - (uint64_t)off);
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
    bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY;
    bv.buf[0].fd = fs->tr.spill_fd;
    bv.buf[0].pos = (off_t)a->base + off;
    ckfs_reply_bufvec(req, fs, &bv, off);
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
    long n = ck_model_read(MODEL(fs), t, buf, size, (uint64_t)off, &err);
    if (n < 0) {
        ckfs_log(fs, LOG_ERR, "%s", err.msg);
        fuse_reply_err(req, err.errnum ? err.errnum : EIO);
    } else {
        fuse_reply_buf(req, buf, (size_t)n);
    }
    free(buf);
}

static void read_out(fuse_req_t req, ckfs *fs, const entry *e, size_t size, off_t off)
{
    const ck_tensor *t = entry_tensor(&fs->tr, e);
    if (!ckfs_may_read(req, fs, t))
        return;
    if (e->edit != NULL && e->edit->overlay.used) {
        read_spill(req, fs, &e->edit->overlay, size, off);
        return;
    }
    if (t == NULL || (uint64_t)off >= t->nbytes || size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    if (ckfs_model_changed(req, fs, t))
        return;
    size_t pieces = ckfs_splice_pieces(fs, t, (uint64_t)off, size);
    if (pieces <= SPLICE_PIECES)
        read_extents(req, fs, t, size, off, pieces);
    else
        read_copy(req, fs, t, size, off);
}

static void op_read(fuse_req_t req, ckfs *fs, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)fi;
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
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
        if (!ckfs_may_read(req, fs, entry_tensor(&fs->tr, e)))
            return;
        size_t n = entry_meta_text(&fs->tr, e, meta, sizeof meta);
        if ((uint64_t)off >= n)
            fuse_reply_buf(req, NULL, 0);
        else
            fuse_reply_buf(req, meta + off, size < n - (size_t)off ? size : n - (size_t)off);
        return;
    }
    case NODE_OUT:
        read_out(req, fs, e, size, off);
        return;
    case NODE_VIEW:
        ckfs_view_read(req, fs, ino - INO_VIEW_BASE, size, off);
        return;
    case NODE_EXTRA: {
        read_spill(req, fs, &ckfs_extra_of(fs, ino)->area, size, off);
        return;
    }
    case NODE_NONE:
        fuse_reply_err(req, ENOENT);
        return;
    default:
        fuse_reply_err(req, EISDIR);
    }
}

static void op_write(fuse_req_t req, ckfs *fs, fuse_ino_t ino, const char *buf, size_t size,
                     off_t off, struct fuse_file_info *fi)
{
    (void)fi;
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    ck_error err;
    int rc;
    if (refused_now(req, fs))
        return;
    if (off < 0)
        rc = ck_fail(&err, EINVAL, "negative offset");
    else if (k == NODE_META)
        rc = entry_meta_write(e, buf, size, (uint64_t)off, &err);
    else if (k == NODE_OUT)
        rc = entry_out_write(&fs->tr, e, buf, size, (uint64_t)off, &err);
    else if (k == NODE_EXTRA)
        rc = tree_extra_write(&fs->tr, ino - INO_EXTRA_BASE, buf, size, (uint64_t)off, &err);
    else if (k == NODE_SNAPSHOT_DONE)
        rc = ck_fail(&err, EINVAL, "snapshot_done stays empty");
    else
        rc = ck_fail(&err, k == NODE_NONE ? ENOENT : EISDIR, "not a file");
    if (rc < 0) {
        reply_refused(req, fs, ino, NULL, &err);
        return;
    }
    edited(fs);
    fuse_reply_write(req, size);
}

/* close(): a meta written through this handle is parsed now, so a bad one
 * fails the close with EINVAL (and the previous meta stays).  A reader's
 * close says nothing: the kernel sends a writer's RELEASE in the
 * background, so a reader that opened the meta right after the writer's
 * close could otherwise be told of the writer's bad meta. */
static void op_flush(fuse_req_t req, ckfs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
    entry *e;
    ck_error err;
    if (no_handles(req, fs))
        return;
    if (ckfs_save_handle_of(fi) != NULL) {
        ckfs_flush_snapshot_done(req, fs, ino, ckfs_save_handle_of(fi));
        return;
    }
    if (fi->fh != FH_WRITER || ckfs_resolve(fs, ino, &e) != NODE_META) {
        fuse_reply_err(req, 0);
        return;
    }
    int rc = entry_meta_check(&fs->tr, e, &err);
    ckfs_invalidate_attrs(fs, ino); /* shown as parsed: its size may differ from what was written */
    if (rc < 0)
        reply_refused(req, fs, ino, NULL, &err);
    else
        fuse_reply_err(req, 0);
}

static void op_release(fuse_req_t req, ckfs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
    entry *e;
    ck_error err;
    node_kind k = ckfs_resolve(fs, ino, &e);
    char path[NODE_PATH_MAX];
    bool wrote_meta = k == NODE_META && fi->fh == FH_WRITER; /* a reader's ends no edit */
    if (wrote_meta && entry_meta_finish(&fs->tr, e, &err) < 0)
        ckfs_refused(fs, ckfs_path_of(fs, ino, NULL, path, sizeof path), &err);
    if (wrote_meta)
        ckfs_invalidate_attrs(fs, ino);
    if (fi->fh == FH_WRITER && fs->open_writers > 0) {
        fs->open_writers--;
        edited(fs);
    }
    if (ckfs_save_handle_of(fi) != NULL)
        ckfs_save_handle_release(ckfs_save_handle_of(fi));
    fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, ckfs *fs, fuse_ino_t ino, int datasync,
                     struct fuse_file_info *fi)
{
    (void)datasync, (void)fi;
    if (fs->tr.writable)
        ckfs_ask_save(req, fs, ino, REPLY_SYNC, NULL);
    else
        fuse_reply_err(req, 0);
}

/* chmod and chown: the tree has the model file's read bits and owner,
 * so a change of those is refused rather than ignored: nobody may believe
 * a tensor hidden that the file shows.  Write and execute bits are the
 * mount's (a read-only mount shows none, a tensor that cannot be written
 * none), so a chmod that differs only in them is taken and changes
 * nothing: cp -a, rsync -a and tar x from a read-only mount, or from a
 * tree on disk whose files are 0664, into a writable mount then succeed.
 * A tool's temporary file (an extra file, never saved) takes a chmod:
 * rsync gives up on a temporary file it cannot chmod. */
#define MODE_OF_FILE (S_ISUID | S_ISGID | S_ISVTX | 0444)
static int mode_or_owner_change(ckfs *fs, fuse_ino_t ino, node_kind k, const entry *e,
                                const struct stat *attr, int to_set, ck_error *err)
{
    struct stat cur;
    const char *model = MODEL(fs)->path;
    if (ckfs_attr_of(fs, ino, k, e, &cur) < 0)
        return ck_fail(err, ENOENT, "no such file");
    if ((to_set & FUSE_SET_ATTR_MODE) &&
        (attr->st_mode & MODE_OF_FILE) != (cur.st_mode & MODE_OF_FILE))
        return ck_fail(err, EPERM, "chmod %04o: the tree has the read bits of the model file "
                       "(%04o here); change those of %s instead",
                       (unsigned)(attr->st_mode & 07777), (unsigned)(cur.st_mode & 07777),
                       model);
    if (((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != cur.st_uid) ||
        ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != cur.st_gid))
        return ck_fail(err, EPERM, "chown: the tree has the owner of the model file (%u:%u); "
                       "change that of %s instead", (unsigned)cur.st_uid,
                       (unsigned)cur.st_gid, model);
    return 0;
}

static void op_setattr(fuse_req_t req, ckfs *fs, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)fi;
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    /* Times alone change nothing (below): taken even once ckptfs-umount
     * has sealed the mount, so that the touch whose snapshot_done asked
     * for the save that sealed it gets that save's result, not EROFS. */
    bool times_only = (to_set & ~(FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                                  FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW |
                                  FUSE_SET_ATTR_CTIME)) == 0;
    if (!times_only && refused_now(req, fs))
        return;
    int rc = 0;
    ck_error err = {0};
    int own_mode = k == NODE_EXTRA ? FUSE_SET_ATTR_MODE : 0;
    if (mode_or_owner_change(fs, ino, k, e, attr, to_set & ~own_mode, &err) < 0) {
        reply_refused(req, fs, ino, NULL, &err);
        return;
    }
    if (to_set & own_mode)
        ckfs_extra_of(fs, ino)->mode = S_IFREG | (attr->st_mode & 0777);
    if (to_set & FUSE_SET_ATTR_SIZE) {
        edited(fs);
        if (k == NODE_OUT)
            rc = entry_out_truncate(&fs->tr, e, (uint64_t)attr->st_size, &err) < 0 ? err.errnum : 0;
        else if (k == NODE_EXTRA)
            rc = tree_extra_truncate(&fs->tr, ino - INO_EXTRA_BASE, (uint64_t)attr->st_size,
                                     &err) < 0 ? err.errnum : 0;
        else if (k == NODE_META)
            rc = entry_meta_truncate(&fs->tr, e, (uint64_t)attr->st_size, &err) < 0 ? err.errnum
                                                                               : 0;
        else if (k != NODE_SNAPSHOT_DONE || attr->st_size != 0)
            rc = ck_fail(&err, EINVAL, "%s", k == NODE_SNAPSHOT_DONE ? "snapshot_done stays "
                         "empty" : "not a file");
    }
    if (rc != 0) {
        reply_refused(req, fs, ino, NULL, &err);
        return;
    }
    /* Times are accepted so that cp -a, rsync -a and touch work; the tree
     * keeps its own.  Setting them saves nothing: the create, open or
     * rename that made snapshot_done did, and when the tree is clean
     * there is nothing to save. */
    struct stat st;
    ckfs_attr_of(fs, ino, k, e, &st);
    fuse_reply_attr(req, &st, ckfs_timeout_of(fs, ino));
}

/* The tensor directory `parent` and which of its files `name` is. */
static entry *file_of(ckfs *fs, fuse_ino_t parent, const char *name, bool *meta)
{
    entry *e;
    if (ckfs_resolve(fs, parent, &e) != NODE_TENSOR_DIR)
        return NULL;
    if (strcmp(name, "meta") == 0)
        *meta = true;
    else if (strcmp(name, "out") == 0)
        *meta = false;
    else
        return NULL;
    return e;
}

/* Whether create (fi) or mknod (fi NULL) of parent/name makes
 * snapshot_done, which asks for a save: a create is answered at once and
 * its close waits for the save (save_handle); a mknod has no close, it is
 * answered by the saver. */
static bool makes_snapshot_done(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name,
                                struct fuse_file_info *fi)
{
    if (parent != INO_ROOT || strcmp(name, "snapshot_done") != 0 || !takes_edits(fs))
        return false;
    if (fi != NULL)
        ckfs_create_snapshot_done(req, fs, fi);
    else
        ckfs_ask_save(req, fs, INO_SNAPSHOT_DONE, REPLY_ENTRY, NULL);
    return true;
}

/* What create and mknod make otherwise: a tensor directory's meta or out,
 * or another file.  Returns an errno; *ino is the new node. */
static int make_file(ckfs *fs, fuse_ino_t parent, const char *name, fuse_ino_t *ino)
{
    if (!takes_edits(fs))
        return EROFS;
    bool meta;
    entry *e = file_of(fs, parent, name, &meta);
    ck_error err = {0};
    char path[NODE_PATH_MAX];
    if (e == NULL) { /* any other name: a temporary file of some tool */
        entry *dir;
        node_kind k = ckfs_resolve(fs, parent, &dir);
        if (k != NODE_ROOT && k != NODE_TENSOR_DIR)
            return k == NODE_NONE ? ENOENT : ENOTDIR;
        int64_t id = tree_extra_create(&fs->tr, extra_dir(parent), name, &err);
        if (id < 0) {
            ckfs_refused(fs, ckfs_path_of(fs, parent, name, path, sizeof path), &err);
            return err.errnum;
        }
        *ino = INO_EXTRA_BASE + (uint64_t)id;
        return 0;
    }
    if (entry_create(&fs->tr, e, meta, &err) < 0) {
        ckfs_refused(fs, ckfs_path_of(fs, parent, name, path, sizeof path), &err);
        return err.errnum;
    }
    edited(fs);
    *ino = ino_of_tensor(pos_of(fs, e), meta ? NODE_META : NODE_OUT);
    return 0;
}

static void op_create(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    (void)mode;
    fuse_ino_t ino = 0;
    struct fuse_entry_param e;
    if (makes_snapshot_done(req, fs, parent, name, fi))
        return;
    int rc = make_file(fs, parent, name, &ino);
    if (rc == 0 && ckfs_fill_entry(fs, ino, &e) < 0)
        rc = EIO;
    if (rc != 0) {
        fuse_reply_err(req, rc);
        return;
    }
    if (is_writer(fi))
        writer_opened(fs, fi);
    fuse_reply_create(req, &e, fi);
}

static void op_mknod(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name, mode_t mode,
                     dev_t rdev)
{
    (void)rdev;
    fuse_ino_t ino = 0;
    if (S_ISREG(mode) && makes_snapshot_done(req, fs, parent, name, NULL))
        return;
    int rc = S_ISREG(mode) ? make_file(fs, parent, name, &ino) : EPERM;
    if (rc != 0)
        fuse_reply_err(req, rc);
    else
        reply_entry(req, fs, ino);
}

/* ---- extended attributes ---- */

/* The model format's own name of an entry's type ("Float32", "FLOAT"):
 * the file's spelling while its meta is unchanged. */
static const char *type_name(const ckfs *fs, const entry *e, const ck_dtype *dt)
{
    const ck_tensor *t = entry_tensor(&fs->tr, e);
    bool as_in_file = t != NULL && (e->edit == NULL || !e->edit->meta_changed);
    return ck_model_type_name(MODEL(fs), as_in_file ? t : NULL, dt);
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

/* SELinux labels, capabilities and POSIX ACLs (security.*, system.*): the
 * tree has none.  EOPNOTSUPP rather than ENODATA says the filesystem has
 * no such attributes at all, so ls -l (coreutils) stops asking for every
 * further file of the mount; the kernel caches neither answer. */
bool ckfs_unserved_xattr(const char *name)
{
    return strncmp(name, "security.", 9) == 0 || strncmp(name, "system.", 7) == 0;
}

static void op_getxattr(fuse_req_t req, ckfs *fs, fuse_ino_t ino, const char *name, size_t size)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if (ckfs_unserved_xattr(name)) {
        fuse_reply_err(req, EOPNOTSUPP);
        return;
    }
    if (k == NODE_ROOT && strcmp(name, XATTR_LAST_ERROR) == 0 && fs->last_error[0]) {
        ckfs_reply_xattr(req, fs->last_error, strlen(fs->last_error), size);
        return;
    }
    const char *meta = k == NODE_ROOT ? ck_model_metadata(MODEL(fs)) : NULL;
    if (meta != NULL && strcmp(name, XATTR_METADATA) == 0) {
        ckfs_reply_xattr(req, meta, strlen(meta), size);
        return;
    }
    uint64_t done, total;
    if (k == NODE_ROOT && strcmp(name, XATTR_PROGRESS) == 0) {
        /* Read by name only (not listed): there only while a save writes. */
        if (!ck_progress_read(&fs->save_progress, &done, &total)) {
            fuse_reply_err(req, ENODATA);
            return;
        }
        char text[96];
        int pct = total ? (int)(done * 100 / total) : 100;
        int n = snprintf(text, sizeof text, "saving %llu of %llu bytes (%d%%)",
                         (unsigned long long)done, (unsigned long long)total,
                         pct > 100 ? 100 : pct);
        ckfs_reply_xattr(req, text, (size_t)n, size);
        return;
    }
    if (k == NODE_ROOT && strcmp(name, XATTR_PID) == 0) {
        /* for ckptfs-umount, which waits for this process to finish saving */
        char pid[24];
        ckfs_reply_xattr(req, pid, (size_t)snprintf(pid, sizeof pid, "%ld", (long)getpid()),
                          size);
        return;
    }
    if (k != NODE_TENSOR_DIR) {
        fuse_reply_err(req, ENODATA);
        return;
    }
    const ck_dtype *dt = entry_dtype(&fs->tr, e);
    if (strcmp(name, XATTR_NAME) == 0) {
        size_t len;
        const char *tname = entry_name(&fs->tr, e, &len);
        ckfs_reply_xattr(req, tname, len, size);
    } else if (dt == NULL) {
        fuse_reply_err(req, ENODATA); /* no valid meta yet */
    } else if (strcmp(name, XATTR_TYPE) == 0) {
        const char *tn = type_name(fs, e, dt);
        ckfs_reply_xattr(req, tn, strlen(tn), size);
    } else if (strcmp(name, XATTR_DTYPE) == 0) {
        const char *cn = ck_dtype_canonical_name(dt);
        ckfs_reply_xattr(req, cn, strlen(cn), size);
    } else if (strcmp(name, XATTR_SHAPE) == 0) {
        char shape[CK_MAX_DIMS * 22 + 4];
        uint32_t ndim;
        const int64_t *dims = entry_dims(&fs->tr, e, &ndim);
        ckfs_reply_xattr(req, shape, ck_dims_text(dims, ndim, shape, sizeof shape), size);
    } else {
        fuse_reply_err(req, ENODATA);
    }
}

/* The root's names: the pid, the model's metadata and the last refusal
 * when there are. */
static void reply_root_xattrs(fuse_req_t req, ckfs *fs, size_t size)
{
    char list[sizeof XATTR_PID + sizeof XATTR_METADATA + sizeof XATTR_LAST_ERROR];
    size_t n = 0;
    memcpy(list, XATTR_PID, sizeof XATTR_PID);
    n += sizeof XATTR_PID;
    if (ck_model_metadata(MODEL(fs)) != NULL) {
        memcpy(list + n, XATTR_METADATA, sizeof XATTR_METADATA);
        n += sizeof XATTR_METADATA;
    }
    if (fs->last_error[0]) {
        memcpy(list + n, XATTR_LAST_ERROR, sizeof XATTR_LAST_ERROR);
        n += sizeof XATTR_LAST_ERROR;
    }
    ckfs_reply_xattr(req, list, n, size);
}

static void op_listxattr(fuse_req_t req, ckfs *fs, fuse_ino_t ino, size_t size)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE)
        fuse_reply_err(req, ENOENT);
    else if (k == NODE_TENSOR_DIR)
        ckfs_reply_xattr(req, xattr_list, sizeof xattr_list, size);
    else if (k == NODE_ROOT)
        reply_root_xattrs(req, fs, size);
    else
        ckfs_reply_xattr(req, "", 0, size);
}

static void op_statfs(fuse_req_t req, ckfs *fs, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    memset(&sv, 0, sizeof sv);
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_blocks = ((uint64_t)fs->tr.file_st.st_size + 4095) / 4096;
    sv.f_files = 2 + 3 * fs->tr.n_entries;
    sv.f_namemax = 255;
    sv.f_flag = fs->tr.writable ? 0 : ST_RDONLY;
    fuse_reply_statfs(req, &sv);
}

/* ---- tensor directories ---- */

/* The outcome of a change to parent/name: an edit, or a refusal. */
static void reply_status(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name, int rc,
                         const ck_error *err)
{
    if (rc < 0) {
        reply_refused(req, fs, parent, name, err);
        return;
    }
    edited(fs);
    fuse_reply_err(req, 0);
}

static void op_mkdir(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)mode;
    ck_error err = {0};
    if (refused_now(req, fs))
        return;
    if (parent != INO_ROOT) {
        fuse_reply_err(req, fs->tr.writable ? EPERM : EROFS); /* tensors are one level */
        return;
    }
    if (strcmp(name, "snapshot_done") == 0 ||
        tree_extra_lookup(&fs->tr, EXTRA_IN_ROOT, name) >= 0) {
        fuse_reply_err(req, EEXIST);
        return;
    }
    int64_t pos = tree_mkdir(&fs->tr, name, &err);
    if (pos < 0) {
        reply_status(req, fs, parent, name, -1, &err);
        return;
    }
    edited(fs);
    reply_entry(req, fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR));
}

static void op_rmdir(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name)
{
    ck_error err = {0};
    if (refused_now(req, fs))
        return;
    int64_t pos = parent == INO_ROOT ? tree_lookup(&fs->tr, name) : -1;
    if (pos < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    for (size_t i = 0; i < fs->tr.n_extras; i++)
        if (!fs->tr.extras[i].deleted && fs->tr.extras[i].dir == (uint32_t)pos) {
            fuse_reply_err(req, ENOTEMPTY);
            return;
        }
    int rc = tree_rmdir(&fs->tr, &fs->tr.entries[pos], &err);
    if (rc < 0) /* a tensor a node needs gets back the meta and out rm -r removed */
        ckfs_listing_changed(fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR));
    reply_status(req, fs, parent, name, rc, &err);
}

static void op_unlink(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name)
{
    ck_error err = {0};
    bool meta;
    if (refused_now(req, fs))
        return;
    if (parent == INO_ROOT && strcmp(name, "snapshot_done") == 0) {
        fuse_reply_err(req, fs->tr.writable ? EPERM : EROFS);
        return;
    }
    entry *e = file_of(fs, parent, name, &meta);
    if (e == NULL) {
        int64_t x = tree_extra_lookup(&fs->tr, extra_dir(parent), name);
        if (x < 0)
            fuse_reply_err(req, ENOENT);
        else
            fuse_reply_err(req, tree_extra_unlink(&fs->tr, (size_t)x, &err) < 0 ? err.errnum : 0);
        return;
    }
    if (meta ? !entry_has_meta(e) : !entry_has_out(e)) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    reply_status(req, fs, parent, name, entry_unlink(&fs->tr, e, meta, &err), &err);
}

/* How rsync, sed -i and editors replace a file: write a temporary one, then
 * rename it over the target.  Over meta or out its content replaces theirs;
 * over snapshot_done it asks for a save; else it just takes the new name. */
static void rename_extra(fuse_req_t req, ckfs *fs, size_t x, fuse_ino_t parent,
                         fuse_ino_t newparent, const char *newname)
{
    ck_error err = {0};
    bool meta;
    if (newparent != parent) {
        fuse_reply_err(req, EXDEV);
        return;
    }
    if (parent == INO_ROOT && strcmp(newname, "snapshot_done") == 0) {
        /* A save; rsync renames its copy of a snapshot's snapshot_done
         * before the tensors are complete, so a failed save (logged, and
         * in user.ckptfs.last_error) does not fail the rename. */
        tree_extra_unlink(&fs->tr, x, &err);
        fs->tr.extras[x].alias = ALIAS_SNAPSHOT_DONE;
        ckfs_ask_save(req, fs, INO_SNAPSHOT_DONE, REPLY_OK, NULL);
        return;
    }
    if (parent == INO_ROOT && tree_lookup(&fs->tr, newname) >= 0) {
        fuse_reply_err(req, EISDIR); /* a file over a tensor directory */
        return;
    }
    entry *e = file_of(fs, parent, newname, &meta);
    int rc = e ? tree_extra_replace_file(&fs->tr, x, e, meta, &err)
               : tree_extra_rename(&fs->tr, x, newname, &err);
    reply_status(req, fs, parent, newname, rc, &err);
}

static void op_rename(fuse_req_t req, ckfs *fs, fuse_ino_t parent, const char *name,
                      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    ck_error err = {0};
    if (refused_now(req, fs))
        return;
    int64_t x = tree_extra_lookup(&fs->tr, extra_dir(parent), name);
    if (x >= 0) {
        rename_extra(req, fs, (size_t)x, parent, newparent, newname);
        return;
    }
    /* Tensor directories can be renamed; meta and out cannot move (a tool
     * that gets EXDEV copies instead). */
    if (parent != INO_ROOT || newparent != INO_ROOT) {
        fuse_reply_err(req, EXDEV);
        return;
    }
    int64_t pos = tree_lookup(&fs->tr, name);
    if (pos < 0) {
        fuse_reply_err(req, strcmp(name, "snapshot_done") == 0 ? EPERM : ENOENT);
        return;
    }
    if (tree_extra_lookup(&fs->tr, EXTRA_IN_ROOT, newname) >= 0) {
        fuse_reply_err(req, ENOTDIR); /* a tensor directory over a file */
        return;
    }
    if (strcmp(newname, "snapshot_done") == 0 || (flags & RENAME_EXCHANGE) ||
        ((flags & RENAME_NOREPLACE) && tree_lookup(&fs->tr, newname) >= 0)) {
        fuse_reply_err(req, flags & RENAME_NOREPLACE ? EEXIST : EINVAL);
        return;
    }
    int64_t target = tree_lookup(&fs->tr, newname);
    int rc = tree_rename(&fs->tr, &fs->tr.entries[pos], newname, &err);
    if (rc < 0) { /* either may get back the meta and out rm -r removed */
        ckfs_listing_changed(fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR));
        if (target >= 0)
            ckfs_listing_changed(fs, ino_of_tensor((uint32_t)target, NODE_TENSOR_DIR));
    }
    reply_status(req, fs, parent, name, rc, &err);
}

static void op_setxattr(fuse_req_t req, ckfs *fs, fuse_ino_t ino, const char *name,
                        const char *value, size_t size, int flags)
{
    (void)flags;
    if (!fs->tr.writable)
        fuse_reply_err(req, EROFS);
    else if (ino == INO_ROOT && strcmp(name, XATTR_UNMOUNT) == 0)
        ckfs_seal_request(req, fs, value, size);
    else
        fuse_reply_err(req, ENOTSUP);
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
     * mount answers (op_lookup, run_lookup).  Numbers and generations
     * stay valid for the mount's life: fs/inode_map.h, ckfs.generation. */
    if (conn->capable & FUSE_CAP_EXPORT_SUPPORT)
        conn->want |= FUSE_CAP_EXPORT_SUPPORT;
    conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
    /* libfuse refuses INIT unless this repeats the mount's max_read
     * (fs/main.c, mount_max_read). */
    conn->max_read = max_read;
    /* Tests only: ask for capabilities the kernel may not have, for the
     * refused-INIT path (tests/bats/roundtrips.bats). */
    const char *want = getenv("CKPTFS_TEST_INIT_WANT");
    if (want != NULL)
        conn->want |= (unsigned)strtoul(want, NULL, 0);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    ckfs *fs = ckfs_of_front(userdata);
    ckfs_conn_init(conn, &fs->splice, fs->max_read);
}

/* Unmount: pending edits are saved before the daemon exits. */
static void op_destroy(void *userdata)
{
    ckfs *fs = ckfs_of_front(userdata);
    if (ckfs_saver_stop(fs) != 0)
        fs->final_commit_failed = true;
}

static ckfs *mount_of_self(ckfs_front *front, fuse_ino_t *ino, int *errnum)
{
    (void)ino, (void)errnum;
    return ckfs_of_front(front);
}

/* A generation no earlier mount is likely to have had (ckfs.generation):
 * random, else the time and the process; never 0. */
static uint32_t mount_generation(void)
{
    uint32_t g = 0;
    if (getrandom(&g, sizeof g, GRND_NONBLOCK) != (ssize_t)sizeof g) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        g = (uint32_t)t.tv_sec ^ (uint32_t)t.tv_nsec ^ (uint32_t)getpid() << 16;
    }
    return g != 0 ? g : 1;
}

void ckfs_front_init(ckfs *fs)
{
    fs->front.mount_of = mount_of_self;
    fs->ino_base = 0;
    fs->generation = mount_generation();
}

void ckfs_lock_init(ckfs *fs)
{
    pthread_rwlockattr_t la;
    pthread_rwlockattr_init(&la);
    pthread_rwlockattr_setkind_np(&la, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&fs->lock, &la);
    pthread_rwlockattr_destroy(&la);
}

/* ---- the table ----
 *
 * A request first finds the mount its inode belongs to (the session's
 * front: the one model, or one checkpoint of a run directory), which makes
 * the inode that mount's own number.  It then holds that mount's lock
 * (ckfs.lock): shared when it only looks at the tree, exclusive when it
 * may change it.  Reads of `out` share it, so with the multi-threaded
 * loop they run side by side, and beside a save's encoding, which holds
 * it only to begin and to end. */

/* The mount serving *ino, with *ino made its own number; NULL, the
 * request answered, when there is none now. */
static ckfs *mount_at(fuse_req_t req, fuse_ino_t *ino)
{
    ckfs_front *front = fuse_req_userdata(req);
    int errnum = ESTALE;
    ckfs *fs = front->mount_of(front, ino, &errnum);
    if (fs == NULL)
        fuse_reply_err(req, errnum);
    return fs;
}

static ckfs *shared(fuse_req_t req, fuse_ino_t *ino)
{
    ckfs *fs = mount_at(req, ino);
    if (fs != NULL)
        pthread_rwlock_rdlock(&fs->lock);
    return fs;
}

/* Exclusive, noting whether the root showed snapshot_done (the tree
 * equalled the file), a change the kernel cannot see in its cached
 * listing. */
static ckfs *exclusive(fuse_req_t req, fuse_ino_t *ino, bool *done)
{
    ckfs *fs = mount_at(req, ino);
    if (fs == NULL)
        return NULL;
    pthread_rwlock_wrlock(&fs->lock);
    *done = tree_equals_file(&fs->tr);
    return fs;
}

static void exclusive_done(ckfs *fs, bool done)
{
    if (tree_equals_file(&fs->tr) != done)
        ckfs_listing_changed(fs, INO_ROOT);
    pthread_rwlock_unlock(&fs->lock);
}

/* locked_OP: find the mount of the inode `at`, lock it, run op_OP. */
#define SHARED(op, at, params, args)                                                       \
    static void locked_##op params                                                         \
    {                                                                                      \
        ckfs *fs = shared(req, &at);                                                       \
        if (fs == NULL)                                                                    \
            return;                                                                        \
        op_##op args;                                                                      \
        pthread_rwlock_unlock(&fs->lock);                                                  \
    }

#define EXCLUSIVE(op, at, params, args)                                                    \
    static void locked_##op params                                                         \
    {                                                                                      \
        bool done;                                                                        \
        ckfs *fs = exclusive(req, &at, &done);                                            \
        if (fs == NULL)                                                                    \
            return;                                                                        \
        op_##op args;                                                                      \
        exclusive_done(fs, done);                                                         \
    }

SHARED(lookup, parent, (fuse_req_t req, fuse_ino_t parent, const char *name),
       (req, fs, parent, name))
SHARED(getattr, ino, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
       (req, fs, ino, fi))
SHARED(opendir, ino, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi),
       (req, fs, ino, fi))
SHARED(readdir, ino,
       (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi),
       (req, fs, ino, size, off, fi))
SHARED(readdirplus, ino,
       (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi),
       (req, fs, ino, size, off, fi))
SHARED(read, ino,
       (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi),
       (req, fs, ino, size, off, fi))
SHARED(getxattr, ino, (fuse_req_t req, fuse_ino_t ino, const char *name, size_t size),
       (req, fs, ino, name, size))
SHARED(listxattr, ino, (fuse_req_t req, fuse_ino_t ino, size_t size), (req, fs, ino, size))
SHARED(statfs, ino, (fuse_req_t req, fuse_ino_t ino), (req, fs, ino))
EXCLUSIVE(setattr, ino,
          (fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
           struct fuse_file_info *fi),
          (req, fs, ino, attr, to_set, fi))
EXCLUSIVE(write, ino,
          (fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
           struct fuse_file_info *fi),
          (req, fs, ino, buf, size, off, fi))
EXCLUSIVE(fsync, ino, (fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi),
          (req, fs, ino, datasync, fi))
EXCLUSIVE(create, parent,
          (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
           struct fuse_file_info *fi),
          (req, fs, parent, name, mode, fi))
EXCLUSIVE(mknod, parent,
          (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev),
          (req, fs, parent, name, mode, rdev))
EXCLUSIVE(mkdir, parent, (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode),
          (req, fs, parent, name, mode))
EXCLUSIVE(unlink, parent, (fuse_req_t req, fuse_ino_t parent, const char *name),
          (req, fs, parent, name))
EXCLUSIVE(rmdir, parent, (fuse_req_t req, fuse_ino_t parent, const char *name),
          (req, fs, parent, name))
EXCLUSIVE(setxattr, ino,
          (fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
           int flags),
          (req, fs, ino, name, value, size, flags))

/* Both directories must be in one mount: one checkpoint of a run
 * directory cannot take another's files. */
static void locked_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                          fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    bool done;
    if ((parent & ~CKFS_INO_MASK) != (newparent & ~CKFS_INO_MASK)) {
        fuse_reply_err(req, EXDEV);
        return;
    }
    ckfs *fs = exclusive(req, &parent, &done);
    if (fs == NULL)
        return;
    op_rename(req, fs, parent, name, newparent & CKFS_INO_MASK, newname, flags);
    exclusive_done(fs, done);
}

/* Opening for reading, and closing, change nothing on a read-only mount
 * and when nothing was written. */
static void locked_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    bool done;
    if (!is_writer(fi)) {
        ckfs *fs = shared(req, &ino);
        if (fs == NULL)
            return;
        op_open(req, fs, ino, fi);
        pthread_rwlock_unlock(&fs->lock);
        return;
    }
    ckfs *fs = exclusive(req, &ino, &done);
    if (fs == NULL)
        return;
    op_open(req, fs, ino, fi);
    exclusive_done(fs, done);
}

/* A meta written is parsed at close: flush and release change the tree
 * on a writable mount. */
static void locked_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    bool done;
    ckfs *fs = exclusive(req, &ino, &done);
    if (fs == NULL)
        return;
    op_flush(req, fs, ino, fi);
    exclusive_done(fs, done);
}

static void locked_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    bool done;
    ckfs *fs = exclusive(req, &ino, &done);
    if (fs == NULL)
        return;
    op_release(req, fs, ino, fi);
    exclusive_done(fs, done);
}

const struct fuse_lowlevel_ops ckfs_ops = {
    .init = op_init,
    .destroy = op_destroy,
    .lookup = locked_lookup,
    .getattr = locked_getattr,
    .setattr = locked_setattr,
    .opendir = locked_opendir,
    .readdir = locked_readdir,
    .readdirplus = locked_readdirplus,
    .open = locked_open,
    .read = locked_read,
    .write = locked_write,
    .flush = locked_flush,
    .release = locked_release,
    .fsync = locked_fsync,
    .fsyncdir = locked_fsync,
    .create = locked_create,
    .mknod = locked_mknod,
    .getxattr = locked_getxattr,
    .listxattr = locked_listxattr,
    .statfs = locked_statfs,
    .mkdir = locked_mkdir,
    .unlink = locked_unlink,
    .rmdir = locked_rmdir,
    .rename = locked_rename,
    .setxattr = locked_setxattr,
};
