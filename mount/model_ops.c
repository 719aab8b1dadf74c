/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ll_ops: the operations of a model mount, as plain results (mount/ops.h):
 * its front, which a one-model session answers by and a run directory
 * hands each checkpoint's nodes to.  No request is decoded or answered
 * here: the FUSE adapter (fuse/ll_ops.c) does, once, from what these
 * return.
 *
 * Every answer is computed from the tree (the tensor index plus unsaved
 * edits): `out` reads are planned straight from the model file's byte
 * extents, or from an edit's spill file (spliced when the kernel allows
 * it), `meta` is formatted on demand.  Entries and attributes are cached
 * by the kernel for a long time and file data is kept in the page cache
 * across opens (keep_cache): edits go through this process, which answers
 * with the new attributes, and a commit does not change any byte a reader
 * sees.  Only `snapshot_done`, which comes and goes on a writable mount,
 * is never cached there.
 *
 * On a writable mount, `out` and `meta` take writes; creating or touching
 * `snapshot_done`, fsync, and unmounting save the edits into the model
 * file: those requests are deferred (CKFS_DEFER), answered by the saver.
 *
 * What a node is to the kernel (attributes, timeouts, its path) is
 * mount/nodes.c; how a tensor's bytes are planned (shared with a view's
 * files, mount/file_view.c), mount/tensor_read.c; telling the kernel of what
 * changed behind it, mount/invalidate.c; the refusal log, mount/log.c.
 *
 * Why so few round trips: a read-only mount has no handles (no_handles),
 * so the kernel sends no OPEN, RELEASE, FLUSH, OPENDIR or RELEASEDIR and
 * caches every listing; a writable mount keeps file handles (a meta is
 * checked at flush, touch snapshot_done waits there, open files hold the
 * automatic save back).  Refusing security.* and system.* as unsupported
 * (ckfs_unserved_xattr) took ls -lR from 11 requests per tensor to 2
 * (docs/benchmarks.md, "Round trips").  readdirplus is always on.
 *
 * NFS export (fuse/ll_ops.c, ckfs_conn_init; lookup_dots): since nodes
 * are computed from numbers and never freed, no lookup of a forgotten
 * number reaches freed memory.  The generation is random per mount, so a
 * handle kept across a remount is ESTALE; the root's is 0, as the kernel
 * expects (ckfs_generation_of).  Tested by tests/bats/nfs_export.bats
 * (name_to_handle_at, open_by_handle_at after drop_caches) and through
 * nfs-ganesha serving a mount to libnfs's nfs-cat over NFSv4.
 */
#include "model_ops.h"

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

#define MODEL(fs) ((fs)->tr.model)

static uint32_t pos_of(const ckfs *fs, const entry *e)
{
    return (uint32_t)(e - fs->tr.entries);
}

/* The directory an extra file lives in, as tree_extra_* names it. */
static uint32_t extra_dir(ckfs_ino parent)
{
    uint32_t pos = 0;
    return ino_kind(parent, &pos) == NODE_TENSOR_DIR ? pos : EXTRA_IN_ROOT;
}

/* A request on ino (/name) refused: say why; the errno to answer. */
static int refused(ckfs *fs, ckfs_ino ino, const char *name, const ck_error *err)
{
    char path[NODE_PATH_MAX];
    ckfs_refused(fs, ckfs_path_of(fs, ino, name, path, sizeof path), err);
    return -(err->errnum ? err->errnum : EIO);
}

static int entry_of(ckfs *fs, ckfs_ino ino, ckfs_entry_out *out)
{
    return ckfs_fill_entry(fs, ino, out) < 0 ? -ENOENT : 0;
}

static bool is_dots(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* "." of any node, ".." of a directory.  The kernel asks for them only to
 * turn an NFS file handle back into a node it has forgotten (its export
 * operations: "." on the handle's number, ".." to reconnect a directory
 * to the root), so a number whose node is gone since (a removed tensor, a
 * tombstone) is ESTALE.  The answer counts as a lookup, as any other; a
 * node answers with its own number, an alias (a file renamed over meta
 * or out) with the number the kernel asked about. */
static int lookup_dots(ckfs *fs, ckfs_ino ino, const char *name, ckfs_entry_out *out)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE)
        return -ESTALE;
    if (name[1] == '\0')
        return entry_of(fs, ino, out);
    if (k == NODE_ROOT || k == NODE_TENSOR_DIR)
        return entry_of(fs, INO_ROOT, out); /* the root's parent is outside: itself */
    return -ENOTDIR;
}

static int lookup_in_root(ckfs *fs, const char *name, ckfs_entry_out *out)
{
    if (fs->view != NULL) {
        long i = ckfs_view_find(fs->view, name);
        return i >= 0 ? entry_of(fs, INO_VIEW_BASE + (uint64_t)i, out) : -ENOENT;
    }
    if (strcmp(name, "snapshot_done") == 0) /* absent until the edits are saved */
        return tree_equals_file(&fs->tr) ? entry_of(fs, INO_SNAPSHOT_DONE, out) : -ENOENT;
    int64_t pos = tree_lookup(&fs->tr, name);
    if (pos >= 0)
        return entry_of(fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR), out);
    int64_t x = tree_extra_lookup(&fs->tr, EXTRA_IN_ROOT, name);
    return x >= 0 ? entry_of(fs, INO_EXTRA_BASE + (uint64_t)x, out) : -ENOENT;
}

int ckfs_op_lookup(ckfs *fs, ckfs_ino parent, const char *name, ckfs_entry_out *out)
{
    entry *e;
    if (is_dots(name))
        return lookup_dots(fs, parent, name, out);
    switch (ckfs_resolve(fs, parent, &e)) {
    case NODE_ROOT:
        return lookup_in_root(fs, name, out);
    case NODE_TENSOR_DIR: {
        if (strcmp(name, "meta") == 0)
            return entry_of(fs, ino_of_tensor(pos_of(fs, e), NODE_META), out);
        if (strcmp(name, "out") == 0)
            return entry_of(fs, ino_of_tensor(pos_of(fs, e), NODE_OUT), out);
        int64_t x = tree_extra_lookup(&fs->tr, pos_of(fs, e), name);
        return x >= 0 ? entry_of(fs, INO_EXTRA_BASE + (uint64_t)x, out) : -ENOENT;
    }
    case NODE_NONE:
        return -ENOENT;
    default:
        return -ENOTDIR;
    }
}

int ckfs_op_getattr(ckfs *fs, ckfs_ino ino, ckfs_attr_out *out)
{
    if (ckfs_fill_attr(fs, ino, &out->st) < 0)
        return -ENOENT;
    out->timeout = ckfs_timeout_of(fs, ino);
    return 0;
}

/* ---- directories ---- */

#define SKIP ((ckfs_ino)-1) /* a listing position with nothing there now */

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
static ckfs_ino dir_entry(ckfs *fs, ckfs_ino dir, const entry *e, off_t pos,
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
static int resolve_dir(ckfs *fs, ckfs_ino ino, entry **e)
{
    node_kind k = ckfs_resolve(fs, ino, e);
    if (k == NODE_ROOT || k == NODE_TENSOR_DIR)
        return 0;
    return k == NODE_NONE ? ENOENT : ENOTDIR;
}

int ckfs_op_readdir(ckfs *fs, ckfs_ino ino, off_t off, bool plus, ckfs_dir_add add, void *ctx)
{
    entry *dir;
    int rc = resolve_dir(fs, ino, &dir);
    if (rc != 0)
        return -rc;
    off_t next;
    for (off_t pos = off;; pos = next) {
        const char *name = NULL;
        ckfs_ino child = dir_entry(fs, ino, dir, pos, &name, &next);
        if (child == 0)
            break;
        if (child == SKIP)
            continue;
        ckfs_entry_out e;
        memset(&e, 0, sizeof e);
        /* "." and ".." carry no lookup reference (ino 0). */
        if (plus && pos >= 2)
            ckfs_fill_entry(fs, child, &e);
        else
            ckfs_fill_attr(fs, child, &e.attr);
        if (!add(ctx, name, &e, next))
            break;
    }
    return 0;
}

/* A read-only tree never changes, so no file needs a handle: ENOSYS tells
 * the kernel that this connection has no open or flush at all (FUSE's
 * no-open support).  It then stops sending OPEN/RELEASE and FLUSH, and
 * keeps the page cache as keep_cache did; ENOENT and EISDIR still come
 * from lookup and the inode's type, and a write open from the ro mount
 * (EROFS).  Only when the whole session is read-only: a read-only
 * checkpoint of an -o rw run answers as a writable mount (session_rw). */
static bool no_handles(const ckfs *fs)
{
    return !fs->tr.writable && !fs->session_rw && !fs->others_read;
}

/* ---- files ---- */

/* An edit happened: the automatic save waits commit_delay from now. */
static void edited(ckfs *fs)
{
    clock_gettime(CLOCK_MONOTONIC, &fs->last_edit);
    fs->auto_commit_failed = false;
    ckfs_saver_poke(fs);
}

bool ckfs_opens_writer(int flags)
{
    return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

/* An open file that holds the automatic save back: its handle says so
 * (FH_WRITER). */
static void writer_opened(ckfs *fs, ckfs_open_out *out)
{
    out->fh = FH_WRITER;
    fs->open_writers++;
}

/* Whether c may open node k (a view's file i, or entry e's meta or out)
 * for reading; else *errnum.  The page cache would serve this user what
 * another one read. */
static bool may_open(const ckfs_caller *c, ckfs *fs, ckfs_ino ino, node_kind k, const entry *e,
                     int *errnum)
{
    if (k == NODE_VIEW)
        return ckfs_view_may_open(c, fs, ino - INO_VIEW_BASE, errnum);
    if (k == NODE_META || k == NODE_OUT)
        return ckfs_may_read(c, fs, entry_tensor(&fs->tr, e), errnum);
    return true;
}

/* An open for writing of node k: the truncation it asks for. */
static int open_for_writing(ckfs *fs, ckfs_ino ino, node_kind k, entry *e, int flags)
{
    ck_error err = {0};
    int rc = 0;
    /* as the mode says, also to root, whom the kernel lets past it */
    if ((k == NODE_META || k == NODE_OUT) && entry_write_check(&fs->tr, e, &err) < 0)
        return refused(fs, ino, NULL, &err);
    if (k == NODE_EXTRA)
        rc = (flags & O_TRUNC) && tree_extra_truncate(&fs->tr, ino - INO_EXTRA_BASE, 0,
                                                       &err) < 0 ? err.errnum : 0;
    else if (k == NODE_META)
        rc = entry_meta_begin(&fs->tr, e, flags & O_TRUNC, &err) < 0 ? err.errnum : 0;
    else if (flags & O_TRUNC)
        rc = entry_out_truncate(&fs->tr, e, 0, &err) < 0 ? err.errnum : 0;
    if (rc != 0 && err.msg[0] != '\0')
        return refused(fs, ino, NULL, &err);
    return -rc;
}

int ckfs_op_open(ckfs *fs, const ckfs_caller *c, ckfs_ino ino, int flags, ckfs_open_out *out,
                 ckfs_defer *d)
{
    entry *e;
    int errnum = 0;
    *out = (ckfs_open_out){0};
    if (no_handles(fs))
        return -ENOSYS;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE)
        return -ENOENT;
    if (k == NODE_ROOT || k == NODE_TENSOR_DIR)
        return -EISDIR;
    if (!may_open(c, fs, ino, k, e, &errnum))
        return -errnum;
    /* Cached pages stay valid unless the bytes may have changed behind the
     * kernel's back (a file renamed over this one). */
    out->keep_cache = k != NODE_OUT || e->edit == NULL;
    if (!ckfs_opens_writer(flags))
        return 0;
    if (!takes_edits(fs))
        return -EROFS;
    if (k == NODE_SNAPSHOT_DONE) { /* `: > snapshot_done` asks for a save too */
        *d = (ckfs_defer){.kind = DEFER_SAVE, .fs = fs, .ino = ino, .reply = REPLY_OPEN};
        return CKFS_DEFER;
    }
    int rc = open_for_writing(fs, ino, k, e, flags);
    if (rc < 0)
        return rc;
    writer_opened(fs, out); /* another file may yet be renamed over out */
    edited(fs);
    return 0;
}

/* An edited out or an extra file: planned from its range of the spill file. */
static int read_spill(const ckfs *fs, const spill_area *a, size_t size, off_t off,
                      ckfs_read_plan *plan)
{
    if (!a->used || (uint64_t)off >= a->size)
        return 0;
    if (size > a->size - (uint64_t)off)
        size = (size_t)(a->size - (uint64_t)off);
    return ckfs_plan_fd(plan, fs->tr.spill_fd, a->base + (uint64_t)off, size);
}

/* An envelope's bytes, or a tensor in more pieces than a splice takes:
 * copied into the plan. */
static int read_copy(const ckfs *fs, const ck_tensor *t, size_t size, off_t off,
                     ckfs_read_plan *plan)
{
    char *buf = ckfs_plan_buffer(plan, size ? size : 1);
    if (buf == NULL)
        return -ENOMEM;
    ck_error err;
    long n = ck_model_read(MODEL(fs), t, buf, size, (uint64_t)off, &err);
    if (n < 0) {
        ckfs_log(fs, LOG_ERR, "%s", err.msg);
        return -(err.errnum ? err.errnum : EIO);
    }
    return ckfs_plan_mem(plan, buf, (size_t)n);
}

static int read_out(ckfs *fs, const ckfs_caller *c, const entry *e, size_t size, off_t off,
                    ckfs_read_plan *plan)
{
    const ck_tensor *t = entry_tensor(&fs->tr, e);
    int errnum = 0;
    if (!ckfs_may_read(c, fs, t, &errnum))
        return -errnum;
    if (e->edit != NULL && e->edit->overlay.used)
        return read_spill(fs, &e->edit->overlay, size, off, plan);
    if (t == NULL || (uint64_t)off >= t->nbytes || size == 0)
        return 0;
    if (ckfs_model_changed(fs, t, &errnum))
        return -errnum;
    size_t pieces = ckfs_splice_pieces(fs, t, (uint64_t)off, size);
    if (pieces <= SPLICE_PIECES)
        return ckfs_add_extents(fs, t, (uint64_t)off, size, plan);
    return read_copy(fs, t, size, off, plan);
}

static int read_meta(ckfs *fs, const ckfs_caller *c, const entry *e, size_t size, off_t off,
                     ckfs_read_plan *plan)
{
    char meta[CK_META_MAX];
    int errnum = 0;
    if (!ckfs_may_read(c, fs, entry_tensor(&fs->tr, e), &errnum))
        return -errnum;
    size_t n = entry_meta_text(&fs->tr, e, meta, sizeof meta);
    if ((uint64_t)off >= n)
        return 0;
    size_t len = size < n - (size_t)off ? size : n - (size_t)off;
    char *buf = ckfs_plan_buffer(plan, len ? len : 1);
    if (buf == NULL)
        return -ENOMEM;
    memcpy(buf, meta + off, len);
    return ckfs_plan_mem(plan, buf, len);
}

int ckfs_op_read(ckfs *fs, const ckfs_caller *c, ckfs_ino ino, size_t size, off_t off,
                 ckfs_read_plan *plan)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    plan->splice = fs->splice;
    plan->log_to = fs;
    plan->path = MODEL(fs)->path;
    plan->off = (uint64_t)off;
    if (off < 0)
        return -EINVAL;
    switch (k) {
    case NODE_SNAPSHOT_DONE:
        return 0;
    case NODE_META:
        return read_meta(fs, c, e, size, off, plan);
    case NODE_OUT:
        return read_out(fs, c, e, size, off, plan);
    case NODE_VIEW:
        return ckfs_view_read(c, fs, ino - INO_VIEW_BASE, size, off, plan);
    case NODE_EXTRA:
        return read_spill(fs, &ckfs_extra_of(fs, ino)->area, size, off, plan);
    case NODE_NONE:
        return -ENOENT;
    default:
        return -EISDIR;
    }
}

int ckfs_op_write(ckfs *fs, ckfs_ino ino, const char *buf, size_t size, off_t off)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    ck_error err;
    int rc;
    if (!takes_edits(fs))
        return -EROFS;
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
    if (rc < 0)
        return refused(fs, ino, NULL, &err);
    edited(fs);
    return 0;
}

/* close(): a meta written through this handle is parsed now, so a bad one
 * fails the close with EINVAL (and the previous meta stays).  A reader's
 * close says nothing: the kernel sends a writer's RELEASE in the
 * background, so a reader that opened the meta right after the writer's
 * close could otherwise be told of the writer's bad meta.  The close of a
 * created snapshot_done (its handle a save handle) waits for its save. */
int ckfs_op_flush(ckfs *fs, ckfs_ino ino, uint64_t fh, ckfs_defer *d)
{
    entry *e;
    ck_error err;
    if (no_handles(fs))
        return -ENOSYS;
    if (fh > FH_WRITER) {
        *d = (ckfs_defer){.kind = DEFER_FLUSH_DONE, .fs = fs, .ino = ino, .fh = fh};
        return CKFS_DEFER;
    }
    if (fh != FH_WRITER || ckfs_resolve(fs, ino, &e) != NODE_META)
        return 0;
    int rc = entry_meta_check(&fs->tr, e, &err);
    ckfs_invalidate_attrs(fs, ino); /* shown as parsed: its size may differ from what was written */
    return rc < 0 ? refused(fs, ino, NULL, &err) : 0;
}

int ckfs_op_release(ckfs *fs, ckfs_ino ino, uint64_t fh, bool *save_handle)
{
    entry *e;
    ck_error err;
    node_kind k = ckfs_resolve(fs, ino, &e);
    char path[NODE_PATH_MAX];
    bool wrote_meta = k == NODE_META && fh == FH_WRITER; /* a reader's ends no edit */
    if (wrote_meta && entry_meta_finish(&fs->tr, e, &err) < 0)
        ckfs_refused(fs, ckfs_path_of(fs, ino, NULL, path, sizeof path), &err);
    if (wrote_meta)
        ckfs_invalidate_attrs(fs, ino);
    if (fh == FH_WRITER && fs->open_writers > 0) {
        fs->open_writers--;
        edited(fs);
    }
    *save_handle = fh > FH_WRITER;
    return 0;
}

int ckfs_op_fsync(ckfs *fs, ckfs_ino ino, ckfs_defer *d)
{
    if (!fs->tr.writable)
        return 0;
    *d = (ckfs_defer){.kind = DEFER_SAVE, .fs = fs, .ino = ino, .reply = REPLY_SYNC};
    return CKFS_DEFER;
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
static int mode_or_owner_change(ckfs *fs, ckfs_ino ino, node_kind k, const entry *e,
                                const struct stat *attr, int to_set, ck_error *err)
{
    struct stat cur;
    const char *model = MODEL(fs)->path;
    if (ckfs_attr_of(fs, ino, k, e, &cur) < 0)
        return ck_fail(err, ENOENT, "no such file");
    if ((to_set & CKFS_SET_MODE) &&
        (attr->st_mode & MODE_OF_FILE) != (cur.st_mode & MODE_OF_FILE))
        return ck_fail(err, EPERM, "chmod %04o: the tree has the read bits of the model file "
                       "(%04o here); change those of %s instead",
                       (unsigned)(attr->st_mode & 07777), (unsigned)(cur.st_mode & 07777),
                       model);
    if (((to_set & CKFS_SET_UID) && attr->st_uid != cur.st_uid) ||
        ((to_set & CKFS_SET_GID) && attr->st_gid != cur.st_gid))
        return ck_fail(err, EPERM, "chown: the tree has the owner of the model file (%u:%u); "
                       "change that of %s instead", (unsigned)cur.st_uid,
                       (unsigned)cur.st_gid, model);
    return 0;
}

/* A truncate of node k to size. */
static int truncate_node(ckfs *fs, ckfs_ino ino, node_kind k, entry *e, uint64_t size,
                         ck_error *err)
{
    if (k == NODE_OUT)
        return entry_out_truncate(&fs->tr, e, size, err) < 0 ? err->errnum : 0;
    if (k == NODE_EXTRA)
        return tree_extra_truncate(&fs->tr, ino - INO_EXTRA_BASE, size, err) < 0 ? err->errnum
                                                                                   : 0;
    if (k == NODE_META)
        return entry_meta_truncate(&fs->tr, e, size, err) < 0 ? err->errnum : 0;
    if (k != NODE_SNAPSHOT_DONE || size != 0)
        return ck_fail(err, EINVAL, "%s", k == NODE_SNAPSHOT_DONE ? "snapshot_done stays "
                       "empty" : "not a file");
    return 0;
}

int ckfs_op_setattr(ckfs *fs, ckfs_ino ino, const struct stat *attr, int to_set,
                    ckfs_attr_out *out)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE)
        return -ENOENT;
    /* Times alone change nothing (below): taken even once ckptfs-umount
     * has sealed the mount, so that the touch whose snapshot_done asked
     * for the save that sealed it gets that save's result, not EROFS. */
    bool times_only = (to_set & ~(CKFS_SET_ATIME | CKFS_SET_MTIME | CKFS_SET_ATIME_NOW |
                                  CKFS_SET_MTIME_NOW | CKFS_SET_CTIME)) == 0;
    if (!times_only && !takes_edits(fs))
        return -EROFS;
    int rc = 0;
    ck_error err = {0};
    int own_mode = k == NODE_EXTRA ? CKFS_SET_MODE : 0;
    if (mode_or_owner_change(fs, ino, k, e, attr, to_set & ~own_mode, &err) < 0)
        return refused(fs, ino, NULL, &err);
    if (to_set & own_mode)
        ckfs_extra_of(fs, ino)->mode = S_IFREG | (attr->st_mode & 0777);
    if (to_set & CKFS_SET_SIZE) {
        edited(fs);
        rc = truncate_node(fs, ino, k, e, (uint64_t)attr->st_size, &err);
    }
    if (rc != 0)
        return refused(fs, ino, NULL, &err);
    /* Times are accepted so that cp -a, rsync -a and touch work; the tree
     * keeps its own.  Setting them saves nothing: the create, open or
     * rename that made snapshot_done did, and when the tree is clean
     * there is nothing to save. */
    ckfs_attr_of(fs, ino, k, e, &out->st);
    out->timeout = ckfs_timeout_of(fs, ino);
    return 0;
}

/* The tensor directory `parent` and which of its files `name` is. */
static entry *file_of(ckfs *fs, ckfs_ino parent, const char *name, bool *meta)
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

/* Whether create or mknod of parent/name makes snapshot_done, which asks
 * for a save: a create is answered at once and its close waits for the
 * save (save_handle, fuse/save_reply.c); a mknod has no close, it is
 * answered by the saver. */
static bool makes_snapshot_done(const ckfs *fs, ckfs_ino parent, const char *name)
{
    return parent == INO_ROOT && strcmp(name, "snapshot_done") == 0 && takes_edits(fs);
}

/* What create and mknod make otherwise: a tensor directory's meta or out,
 * or another file, made by process `by`.  Returns an errno; *ino is the
 * new node. */
static int make_file(ckfs *fs, ckfs_ino parent, const char *name, pid_t by, ckfs_ino *ino)
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
        fs->tr.extras[id].maker = by;
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

int ckfs_op_create(ckfs *fs, ckfs_ino parent, const char *name, int flags, pid_t by,
                   ckfs_entry_out *e, ckfs_open_out *out, ckfs_defer *d)
{
    ckfs_ino ino = 0;
    *out = (ckfs_open_out){0};
    if (makes_snapshot_done(fs, parent, name)) {
        *d = (ckfs_defer){.kind = DEFER_CREATE_DONE, .fs = fs, .ino = INO_SNAPSHOT_DONE};
        return CKFS_DEFER;
    }
    int rc = make_file(fs, parent, name, by, &ino);
    if (rc == 0 && ckfs_fill_entry(fs, ino, e) < 0)
        rc = EIO;
    if (rc != 0)
        return -rc;
    if (ckfs_opens_writer(flags))
        writer_opened(fs, out);
    return 0;
}

int ckfs_op_mknod(ckfs *fs, ckfs_ino parent, const char *name, mode_t mode, pid_t by,
                  ckfs_entry_out *e, ckfs_defer *d)
{
    ckfs_ino ino = 0;
    if (S_ISREG(mode) && makes_snapshot_done(fs, parent, name)) {
        *d = (ckfs_defer){.kind = DEFER_SAVE, .fs = fs, .ino = INO_SNAPSHOT_DONE,
                          .reply = REPLY_ENTRY};
        return CKFS_DEFER;
    }
    int rc = S_ISREG(mode) ? make_file(fs, parent, name, by, &ino) : EPERM;
    if (rc != 0)
        return -rc;
    return entry_of(fs, ino, e);
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

/* SELinux labels, capabilities and POSIX ACLs (security.*, system.*): the
 * tree has none.  EOPNOTSUPP rather than ENODATA says the filesystem has
 * no such attributes at all, so ls -l (coreutils) stops asking for every
 * further file of the mount; the kernel caches neither answer. */
bool ckfs_unserved_xattr(const char *name)
{
    return strncmp(name, "security.", 9) == 0 || strncmp(name, "system.", 7) == 0;
}

/* The answer is value (len bytes), or text when value is NULL. */
static int xattr_is(ckfs_xattr_out *out, const void *value, size_t len)
{
    out->value = value != NULL ? value : out->text;
    out->len = len;
    return 0;
}

int ckfs_xattr_text(ckfs_xattr_out *out, const char *text)
{
    size_t n = strlen(text);
    if (n > sizeof out->text)
        n = sizeof out->text;
    memcpy(out->text, text, n);
    return xattr_is(out, NULL, n);
}

int ckfs_xattr_pid(ckfs_xattr_out *out)
{
    return xattr_is(out, NULL, (size_t)snprintf(out->text, sizeof out->text, "%ld",
                                                (long)getpid()));
}

/* Read by name only (not listed): there only while a save writes. */
static int progress_xattr(ckfs *fs, ckfs_xattr_out *out)
{
    uint64_t done, total;
    if (!ck_progress_read(&fs->save_progress, &done, &total))
        return -ENODATA;
    int pct = total ? (int)(done * 100 / total) : 100;
    int n = snprintf(out->text, sizeof out->text, "saving %llu of %llu bytes (%d%%)",
                     (unsigned long long)done, (unsigned long long)total, pct > 100 ? 100 : pct);
    return xattr_is(out, NULL, (size_t)n);
}

static int root_xattr(ckfs *fs, const char *name, ckfs_xattr_out *out)
{
    if (strcmp(name, XATTR_LAST_ERROR) == 0 && fs->last_error[0])
        return xattr_is(out, fs->last_error, strlen(fs->last_error));
    const char *meta = ck_model_metadata(MODEL(fs));
    if (meta != NULL && strcmp(name, XATTR_METADATA) == 0)
        return xattr_is(out, meta, strlen(meta));
    if (strcmp(name, XATTR_PROGRESS) == 0)
        return progress_xattr(fs, out);
    if (strcmp(name, XATTR_PID) == 0) /* for ckptfs-umount, which waits for us to save */
        return ckfs_xattr_pid(out);
    return -ENODATA;
}

static int tensor_xattr(ckfs *fs, const entry *e, const char *name, ckfs_xattr_out *out)
{
    const ck_dtype *dt = entry_dtype(&fs->tr, e);
    if (strcmp(name, XATTR_NAME) == 0) {
        size_t len;
        const char *tname = entry_name(&fs->tr, e, &len);
        return xattr_is(out, tname, len);
    }
    if (dt == NULL)
        return -ENODATA; /* no valid meta yet */
    if (strcmp(name, XATTR_TYPE) == 0)
        return ckfs_xattr_text(out, type_name(fs, e, dt));
    if (strcmp(name, XATTR_DTYPE) == 0)
        return ckfs_xattr_text(out, ck_dtype_canonical_name(dt));
    if (strcmp(name, XATTR_SHAPE) == 0) {
        uint32_t ndim;
        const int64_t *dims = entry_dims(&fs->tr, e, &ndim);
        return xattr_is(out, NULL, ck_dims_text(dims, ndim, out->text, sizeof out->text));
    }
    return -ENODATA;
}

int ckfs_op_getxattr(ckfs *fs, ckfs_ino ino, const char *name, ckfs_xattr_out *out)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE)
        return -ENOENT;
    if (ckfs_unserved_xattr(name))
        return -EOPNOTSUPP;
    if (k == NODE_ROOT)
        return root_xattr(fs, name, out);
    if (k != NODE_TENSOR_DIR)
        return -ENODATA;
    return tensor_xattr(fs, e, name, out);
}

/* The root's names: the pid, the model's metadata and the last refusal
 * when there are. */
static int root_xattrs(ckfs *fs, ckfs_xattr_out *out)
{
    size_t n = 0;
    memcpy(out->text, XATTR_PID, sizeof XATTR_PID);
    n += sizeof XATTR_PID;
    if (ck_model_metadata(MODEL(fs)) != NULL) {
        memcpy(out->text + n, XATTR_METADATA, sizeof XATTR_METADATA);
        n += sizeof XATTR_METADATA;
    }
    if (fs->last_error[0]) {
        memcpy(out->text + n, XATTR_LAST_ERROR, sizeof XATTR_LAST_ERROR);
        n += sizeof XATTR_LAST_ERROR;
    }
    return xattr_is(out, NULL, n);
}

int ckfs_op_listxattr(ckfs *fs, ckfs_ino ino, ckfs_xattr_out *out)
{
    entry *e;
    node_kind k = ckfs_resolve(fs, ino, &e);
    if (k == NODE_NONE)
        return -ENOENT;
    if (k == NODE_TENSOR_DIR)
        return xattr_is(out, xattr_list, sizeof xattr_list);
    if (k == NODE_ROOT)
        return root_xattrs(fs, out);
    return xattr_is(out, "", 0);
}

int ckfs_op_statfs(ckfs *fs, struct statvfs *sv)
{
    memset(sv, 0, sizeof *sv);
    sv->f_bsize = 4096;
    sv->f_frsize = 4096;
    sv->f_blocks = ((uint64_t)fs->tr.file_st.st_size + 4095) / 4096;
    sv->f_files = 2 + 3 * fs->tr.n_entries;
    sv->f_namemax = 255;
    sv->f_flag = fs->tr.writable ? 0 : ST_RDONLY;
    return 0;
}

/* ---- tensor directories ---- */

/* The outcome of a change to parent/name: an edit, or a refusal. */
static int status(ckfs *fs, ckfs_ino parent, const char *name, int rc, const ck_error *err)
{
    if (rc < 0)
        return refused(fs, parent, name, err);
    edited(fs);
    return 0;
}

int ckfs_op_mkdir(ckfs *fs, ckfs_ino parent, const char *name, ckfs_entry_out *out)
{
    ck_error err = {0};
    if (!takes_edits(fs))
        return -EROFS;
    if (parent != INO_ROOT)
        return fs->tr.writable ? -EPERM : -EROFS; /* tensors are one level */
    if (strcmp(name, "snapshot_done") == 0 ||
        tree_extra_lookup(&fs->tr, EXTRA_IN_ROOT, name) >= 0)
        return -EEXIST;
    int64_t pos = tree_mkdir(&fs->tr, name, &err);
    if (pos < 0)
        return status(fs, parent, name, -1, &err);
    edited(fs);
    return entry_of(fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR), out);
}

int ckfs_op_rmdir(ckfs *fs, ckfs_ino parent, const char *name)
{
    ck_error err = {0};
    if (!takes_edits(fs))
        return -EROFS;
    int64_t pos = parent == INO_ROOT ? tree_lookup(&fs->tr, name) : -1;
    if (pos < 0)
        return -ENOENT;
    for (size_t i = 0; i < fs->tr.n_extras; i++)
        if (!fs->tr.extras[i].deleted && fs->tr.extras[i].dir == (uint32_t)pos)
            return -ENOTEMPTY;
    int rc = tree_rmdir(&fs->tr, &fs->tr.entries[pos], &err);
    if (rc < 0) /* a tensor a node needs gets back the meta and out rm -r removed */
        ckfs_listing_changed(fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR));
    return status(fs, parent, name, rc, &err);
}

int ckfs_op_unlink(ckfs *fs, ckfs_ino parent, const char *name)
{
    ck_error err = {0};
    bool meta;
    if (!takes_edits(fs))
        return -EROFS;
    if (parent == INO_ROOT && strcmp(name, "snapshot_done") == 0)
        return fs->tr.writable ? -EPERM : -EROFS;
    entry *e = file_of(fs, parent, name, &meta);
    if (e == NULL) {
        int64_t x = tree_extra_lookup(&fs->tr, extra_dir(parent), name);
        if (x < 0)
            return -ENOENT;
        return tree_extra_unlink(&fs->tr, (size_t)x, &err) < 0 ? -err.errnum : 0;
    }
    if (meta ? !entry_has_meta(e) : !entry_has_out(e))
        return -ENOENT;
    return status(fs, parent, name, entry_unlink(&fs->tr, e, meta, &err), &err);
}

/* How rsync, sed -i and editors replace a file: write a temporary one, then
 * rename it over the target.  Over meta or out its content replaces theirs;
 * over snapshot_done it asks for a save; else it just takes the new name. */
static int rename_extra(ckfs *fs, size_t x, ckfs_ino parent, ckfs_ino newparent,
                        const char *newname, ckfs_defer *d)
{
    ck_error err = {0};
    bool meta;
    if (newparent != parent)
        return -EXDEV;
    if (parent == INO_ROOT && strcmp(newname, "snapshot_done") == 0) {
        /* A save; rsync renames its copy of a snapshot's snapshot_done
         * before the tensors are complete, so a failed save (logged, and
         * in user.ckptfs.last_error) does not fail the rename. */
        tree_extra_unlink(&fs->tr, x, &err);
        fs->tr.extras[x].alias = ALIAS_SNAPSHOT_DONE;
        *d = (ckfs_defer){.kind = DEFER_SAVE, .fs = fs, .ino = INO_SNAPSHOT_DONE,
                          .reply = REPLY_OK};
        return CKFS_DEFER;
    }
    if (parent == INO_ROOT && tree_lookup(&fs->tr, newname) >= 0)
        return -EISDIR; /* a file over a tensor directory */
    entry *e = file_of(fs, parent, newname, &meta);
    int rc = e ? tree_extra_replace_file(&fs->tr, x, e, meta, &err)
               : tree_extra_rename(&fs->tr, x, newname, &err);
    return status(fs, parent, newname, rc, &err);
}

int ckfs_op_rename(ckfs *fs, ckfs_ino parent, const char *name, ckfs_ino newparent,
                   const char *newname, unsigned flags, ckfs_defer *d)
{
    ck_error err = {0};
    if (!takes_edits(fs))
        return -EROFS;
    int64_t x = tree_extra_lookup(&fs->tr, extra_dir(parent), name);
    if (x >= 0)
        return rename_extra(fs, (size_t)x, parent, newparent, newname, d);
    /* Tensor directories can be renamed; meta and out cannot move (a tool
     * that gets EXDEV copies instead). */
    if (parent != INO_ROOT || newparent != INO_ROOT)
        return -EXDEV;
    int64_t pos = tree_lookup(&fs->tr, name);
    if (pos < 0)
        return strcmp(name, "snapshot_done") == 0 ? -EPERM : -ENOENT;
    if (tree_extra_lookup(&fs->tr, EXTRA_IN_ROOT, newname) >= 0)
        return -ENOTDIR; /* a tensor directory over a file */
    if (strcmp(newname, "snapshot_done") == 0 || (flags & RENAME_EXCHANGE) ||
        ((flags & RENAME_NOREPLACE) && tree_lookup(&fs->tr, newname) >= 0))
        return flags & RENAME_NOREPLACE ? -EEXIST : -EINVAL;
    int64_t target = tree_lookup(&fs->tr, newname);
    int rc = tree_rename(&fs->tr, &fs->tr.entries[pos], newname, &err);
    if (rc < 0) { /* either may get back the meta and out rm -r removed */
        ckfs_listing_changed(fs, ino_of_tensor((uint32_t)pos, NODE_TENSOR_DIR));
        if (target >= 0)
            ckfs_listing_changed(fs, ino_of_tensor((uint32_t)target, NODE_TENSOR_DIR));
    }
    return status(fs, parent, name, rc, &err);
}

/* user.ckptfs.unmount on the root, from ckptfs-umount: the seal, answered
 * by fuse/save_reply.c (ckfs_seal_request) with the save it asks for. */
int ckfs_op_setxattr(ckfs *fs, ckfs_ino ino, const char *name, ckfs_defer *d)
{
    if (!fs->tr.writable)
        return -EROFS;
    if (ino != INO_ROOT || strcmp(name, XATTR_UNMOUNT) != 0)
        return -ENOTSUP;
    *d = (ckfs_defer){.kind = DEFER_SEAL, .fs = fs, .ino = ino};
    return CKFS_DEFER;
}

/* Unmount: pending edits are saved before the daemon exits. */
void ckfs_unmounted(ckfs *fs)
{
    if (ckfs_saver_stop(fs) != 0)
        fs->final_commit_failed = true;
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

void ckfs_lock_init(ckfs *fs)
{
    pthread_rwlockattr_t la;
    pthread_rwlockattr_init(&la);
    pthread_rwlockattr_setkind_np(&la, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&fs->lock, &la);
    pthread_rwlockattr_destroy(&la);
}

/* ---- the front ----
 *
 * A model mount is its own front: every request holds its lock
 * (ckfs.lock), shared when it only looks at the tree, exclusive when it
 * may change it, until it is answered (ckfs_hold_end).  Reads of `out`
 * share it, so with the multi-threaded loop they run side by side, and
 * beside a save's encoding, which holds it only to begin and to end. */

static ckfs *shared(ckfs_front *f, ckfs_hold *h)
{
    ckfs *fs = ckfs_of_front(f);
    pthread_rwlock_rdlock(&fs->lock);
    *h = (ckfs_hold){.fs = fs};
    return fs;
}

/* Exclusive, noting whether the root showed snapshot_done (the tree
 * equalled the file), a change the kernel cannot see in its cached
 * listing. */
static ckfs *exclusive(ckfs_front *f, ckfs_hold *h)
{
    ckfs *fs = ckfs_of_front(f);
    pthread_rwlock_wrlock(&fs->lock);
    *h = (ckfs_hold){.fs = fs, .exclusive = true, .done = tree_equals_file(&fs->tr)};
    return fs;
}

void ckfs_hold_end(ckfs_hold *h)
{
    ckfs *fs = h->fs;
    if (fs == NULL)
        return;
    if (h->exclusive && tree_equals_file(&fs->tr) != h->done)
        ckfs_listing_changed(fs, INO_ROOT);
    pthread_rwlock_unlock(&fs->lock);
    h->fs = NULL;
}

static int m_lookup(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_entry_out *out, ckfs_hold *h)
{
    (void)c;
    return ckfs_op_lookup(shared(f, h), parent, name, out);
}

static int m_getattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_attr_out *out,
                     ckfs_hold *h)
{
    (void)c;
    return ckfs_op_getattr(shared(f, h), ino, out);
}

static int m_setattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const struct stat *attr,
                     int to_set, ckfs_attr_out *out, ckfs_hold *h)
{
    (void)c;
    return ckfs_op_setattr(exclusive(f, h), ino, attr, to_set, out);
}

/* A directory needs no handle, on a writable mount either: ENOSYS makes
 * the kernel stop sending OPENDIR and RELEASEDIR for the connection and
 * cache every listing (FOPEN_CACHE_DIR).  A listing changed through the
 * mount is dropped by the kernel itself; the two changes it cannot see,
 * snapshot_done coming and going and files put back by a refused rmdir,
 * are invalidated (ckfs_listing_changed). */
static int m_opendir(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_hold *h)
{
    (void)f, (void)c, (void)ino, (void)h;
    return -ENOSYS;
}

static int m_readdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, off_t off, bool plus,
                     ckfs_dir_add add, void *ctx, ckfs_hold *h)
{
    (void)c;
    return ckfs_op_readdir(shared(f, h), ino, off, plus, add, ctx);
}

/* Opening for reading changes nothing. */
static int m_open(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, int flags,
                  ckfs_open_out *out, ckfs_defer *d, ckfs_hold *h)
{
    ckfs *fs = ckfs_opens_writer(flags) ? exclusive(f, h) : shared(f, h);
    return ckfs_op_open(fs, c, ino, flags, out, d);
}

static int m_read(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, size_t size, off_t off,
                  ckfs_read_plan *plan, ckfs_hold *h)
{
    return ckfs_op_read(shared(f, h), c, ino, size, off, plan);
}

static int m_write(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *buf,
                   size_t size, off_t off, ckfs_hold *h)
{
    (void)c;
    return ckfs_op_write(exclusive(f, h), ino, buf, size, off);
}

/* A meta written is parsed at close: flush and release change the tree
 * on a writable mount. */
static int m_flush(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh,
                   ckfs_defer *d, ckfs_hold *h)
{
    (void)c;
    return ckfs_op_flush(exclusive(f, h), ino, fh, d);
}

static int m_release(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh,
                     bool *save_handle, ckfs_hold *h)
{
    (void)c;
    return ckfs_op_release(exclusive(f, h), ino, fh, save_handle);
}

static int m_fsync(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_defer *d,
                   ckfs_hold *h)
{
    (void)c;
    return ckfs_op_fsync(exclusive(f, h), ino, d);
}

static int m_create(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    mode_t mode, int flags, ckfs_entry_out *e, ckfs_open_out *out, ckfs_defer *d,
                    ckfs_hold *h)
{
    (void)mode;
    return ckfs_op_create(exclusive(f, h), parent, name, flags, c->pid, e, out, d);
}

static int m_mknod(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   mode_t mode, ckfs_entry_out *e, ckfs_defer *d, ckfs_hold *h)
{
    return ckfs_op_mknod(exclusive(f, h), parent, name, mode, c->pid, e, d);
}

static int m_mkdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   mode_t mode, ckfs_entry_out *e, ckfs_hold *h)
{
    (void)c, (void)mode;
    return ckfs_op_mkdir(exclusive(f, h), parent, name, e);
}

static int m_unlink(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_hold *h)
{
    (void)c;
    return ckfs_op_unlink(exclusive(f, h), parent, name);
}

static int m_rmdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   ckfs_hold *h)
{
    (void)c;
    return ckfs_op_rmdir(exclusive(f, h), parent, name);
}

static int m_rename(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_ino newparent, const char *newname, unsigned flags, ckfs_defer *d,
                    ckfs_hold *h)
{
    (void)c;
    return ckfs_op_rename(exclusive(f, h), parent, name, newparent, newname, flags, d);
}

static int m_getxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                      ckfs_xattr_out *out, ckfs_hold *h)
{
    (void)c;
    return ckfs_op_getxattr(shared(f, h), ino, name, out);
}

static int m_listxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_xattr_out *out,
                       ckfs_hold *h)
{
    (void)c;
    return ckfs_op_listxattr(shared(f, h), ino, out);
}

static int m_setxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                      const char *value, size_t size, ckfs_defer *d, ckfs_hold *h)
{
    (void)c, (void)value, (void)size;
    return ckfs_op_setxattr(exclusive(f, h), ino, name, d);
}

static int m_statfs(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, struct statvfs *out,
                    ckfs_hold *h)
{
    (void)c, (void)ino;
    return ckfs_op_statfs(shared(f, h), out);
}

static void m_destroy(ckfs_front *f)
{
    ckfs_unmounted(ckfs_of_front(f));
}

static const ckfs_front_ops model_ops = {
    .lookup = m_lookup,
    .getattr = m_getattr,
    .setattr = m_setattr,
    .opendir = m_opendir,
    .readdir = m_readdir,
    .open = m_open,
    .read = m_read,
    .write = m_write,
    .flush = m_flush,
    .release = m_release,
    .fsync = m_fsync,
    .create = m_create,
    .mknod = m_mknod,
    .mkdir = m_mkdir,
    .unlink = m_unlink,
    .rmdir = m_rmdir,
    .rename = m_rename,
    .getxattr = m_getxattr,
    .listxattr = m_listxattr,
    .setxattr = m_setxattr,
    .statfs = m_statfs,
    .destroy = m_destroy,
};

void ckfs_front_init(ckfs *fs)
{
    fs->front = (ckfs_front){.ops = &model_ops, .splice = &fs->splice,
                             .max_read = &fs->max_read};
    fs->ino_base = 0;
    fs->generation = mount_generation();
}

/* A run directory's own front binds each checkpoint copied from its
 * prototype to that checkpoint's own fields. */
void ckfs_front_rebind(ckfs *fs)
{
    fs->front.ops = &model_ops;
    fs->front.splice = &fs->splice;
    fs->front.max_read = &fs->max_read;
}

/* ---- what a run directory asks of a checkpoint's mount ---- */

node_kind ckfs_kind_of(ckfs *fs, ckfs_ino ino)
{
    entry *e;
    pthread_rwlock_rdlock(&fs->lock);
    node_kind k = ckfs_resolve(fs, ino, &e);
    pthread_rwlock_unlock(&fs->lock);
    return k;
}

bool ckfs_writable(const ckfs *fs)
{
    return fs->tr.writable;
}

const struct stat *ckfs_file_stat(const ckfs *fs)
{
    return &fs->tr.model->st;
}

size_t ckfs_footprint(const ckfs *fs)
{
    return tree_footprint(&fs->tr);
}

void ckfs_start_sealed(ckfs *fs, bool sealed)
{
    fs->sealed = sealed;
}

void ckfs_leave_session(ckfs *fs)
{
    pthread_rwlock_wrlock(&fs->lock);
    ckfs_saver_unmounting(fs);
    fs->se = NULL;
    pthread_rwlock_unlock(&fs->lock);
}

/* ---- the seal (ckptfs-umount) ---- */

/* A seal, done: sealed if saved, then the caller's waiter (arg) told, and
 * freed as the saver would have. */
static void sealed(ckfs_waiter *w, int errnum, const char *why)
{
    ckfs_waiter *asker = w->arg;
    w->fs->sealed = errnum == 0;
    w->fs->sealing = false;
    asker->fs = w->fs;
    asker->done(asker, errnum, why);
    free(asker);
}

void ckfs_seal_locked(ckfs *fs, ckfs_waiter *w)
{
    ckfs_waiter *own = calloc(1, sizeof *own);
    if (own == NULL) {
        w->fs = fs;
        w->done(w, ENOMEM, "out of memory");
        free(w);
        return;
    }
    *own = (ckfs_waiter){.ino = INO_ROOT, .reply = REPLY_SEAL, .entry = -1,
                         .done = sealed, .arg = w};
    fs->sealed = false;
    fs->sealing = true; /* no edit from now until the save says */
    ckfs_saver_ask(fs, own);
}

void ckfs_seal(ckfs *fs, ckfs_waiter *w)
{
    pthread_rwlock_wrlock(&fs->lock);
    ckfs_seal_locked(fs, w);
    pthread_rwlock_unlock(&fs->lock);
}

void ckfs_unseal_locked(ckfs *fs)
{
    fs->sealed = false;
    fs->sealing = false;
}

void ckfs_unseal(ckfs *fs)
{
    pthread_rwlock_wrlock(&fs->lock);
    ckfs_unseal_locked(fs);
    pthread_rwlock_unlock(&fs->lock);
}

bool ckfs_busy(ckfs *fs)
{
    pthread_rwlock_rdlock(&fs->lock);
    bool busy = fs->tr.writable && (tree_dirty(&fs->tr) || fs->tr.saving ||
                                    fs->open_writers > 0 || fs->sealing);
    pthread_rwlock_unlock(&fs->lock);
    return busy;
}
