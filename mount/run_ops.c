/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_ops: the requests of a run mount (run_mount.h shows the tree).  The
 * root, `latest` and each checkpoint's own directory are answered from
 * the listing, nothing opened; every other request goes to the
 * checkpoint's own front (inside), which opens its mount if it must
 * (run_slots).  The run level is read-only, and a change that would move
 * a file between two checkpoints is EXDEV.
 */
#define _GNU_SOURCE
#include "run_ops.h"

#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "model_ops.h"
#include "nodes.h"
#include "run_events.h"
#include "run_listing.h"
#include "run_seal.h"
#include "run_slots.h"

/* How the run is followed, on its root: "poll every 2 s and inotify
 * (fuse.s3fs)". */
#define XATTR_WATCH "user.ckptfs.watch"

/* A directory's mode for a file's: r and w as the file has them, no w
 * when read-only, the owner's w when writable (as a model mount shows its
 * root), x wherever r. */
static mode_t dir_mode(mode_t file_mode, bool writable)
{
    mode_t m = file_mode & 0666;
    m = writable ? m | S_IWUSR : m & ~(mode_t)0222;
    return S_IFDIR | m | (m & 0444) >> 2;
}

/* Whether slot s's checkpoint is edited: in a writable run, a file that
 * could be written when last opened (guessed so before). */
static bool slot_writable(const ckrun *r, const run_slot *s)
{
    return r->writable && !slot_is_dir(s) && !s->read_only;
}

static void times_of(struct stat *st, const struct timespec *t)
{
    st->st_atim = *t;
    st->st_mtim = *t;
    st->st_ctim = *t;
}

/* Attributes of a run-level node (root, latest) or of a checkpoint's
 * directory, from the listing: nothing is opened.  Under r->mu. */
static int run_attr(ckrun *r, ckfs_ino ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_blksize = 65536;
    st->st_uid = r->dir_st.st_uid;
    st->st_gid = r->dir_st.st_gid;
    times_of(st, &r->dir_st.st_mtim);
    if (ino == RUN_INO_ROOT) {
        st->st_mode = dir_mode(r->dir_st.st_mode, false);
        st->st_nlink = 2 + r->n_listed;
        return 0;
    }
    if (ino == RUN_INO_LATEST) {
        if (r->latest < 0)
            return -1;
        st->st_mode = S_IFLNK | 0777;
        st->st_nlink = 1;
        st->st_size = (off_t)strlen(r->slots[r->latest].name);
        return 0;
    }
    uint64_t s = slot_of_ino(ino);
    if ((ino & CKFS_INO_MASK) != INO_ROOT || s < 1 || s > r->n_slots || r->slots[s - 1].gone)
        return -1;
    const run_slot *slot = &r->slots[s - 1];
    st->st_mode = dir_mode(slot->mode, slot_writable(r, slot));
    st->st_nlink = 1; /* not counted: that would open it (find takes 1 as "unknown") */
    st->st_uid = slot->uid;
    st->st_gid = slot->gid;
    times_of(st, &slot->mtime);
    return 0;
}

/* `latest` changes with the run: never cached.  The rest until the
 * watcher says otherwise. */
static double run_timeout(const ckrun *r, ckfs_ino ino)
{
    return ino == RUN_INO_LATEST ? 0.0 : r->proto.timeout;
}

static int run_entry(ckrun *r, ckfs_ino ino, ckfs_entry_out *e)
{
    memset(e, 0, sizeof *e);
    if (run_attr(r, ino, &e->attr) < 0)
        return -1;
    e->ino = ino;
    e->generation = ckfs_generation_of(&r->proto, ino); /* slots are never reused */
    e->attr_timeout = run_timeout(r, ino);
    e->entry_timeout = run_timeout(r, ino);
    return 0;
}

static bool is_run_node(ckfs_ino ino)
{
    return slot_of_ino(ino) == 0;
}

/* A checkpoint's own directory: its attributes come from the listing. */
static bool is_checkpoint_dir(ckfs_ino ino)
{
    return !is_run_node(ino) && (ino & CKFS_INO_MASK) == INO_ROOT;
}

/* ".." of a directory inside a checkpoint: its tensor directories' parent
 * is the checkpoint's directory, a run node (attributes from the listing),
 * once the checkpoint says the directory is still there. */
static int run_lookup_parent(ckrun *r, ckfs_ino parent, ckfs_entry_out *out)
{
    ckfs_ino ino = parent;
    int errnum = ESTALE;
    ckfs *fs = ckrun_slot_mount(r, &ino, &errnum);
    if (fs == NULL)
        return -errnum;
    node_kind k = ckfs_kind_of(fs, ino);
    int rc = -1;
    if (k == NODE_TENSOR_DIR) {
        pthread_mutex_lock(&r->mu);
        rc = run_entry(r, (parent & ~CKFS_INO_MASK) | INO_ROOT, out);
        pthread_mutex_unlock(&r->mu);
    }
    if (rc == 0)
        return 0;
    return k == NODE_NONE || k == NODE_TENSOR_DIR ? -ESTALE : -ENOTDIR;
}

/* The checkpoint front serving *ino, *ino made its own number; NULL with
 * *errnum when there is none now.  The one way a request reaches a
 * checkpoint: through that checkpoint's own front. */
static ckfs_front *inside(ckrun *r, ckfs_ino *ino, int *errnum)
{
    ckfs *fs = ckrun_slot_mount(r, ino, errnum);
    return fs != NULL ? &fs->front : NULL;
}

/* "." and ".." of the run's nodes and the checkpoints' directories (see
 * lookup_dots in mount/model_ops.c: NFS file handles), their ".." the run's
 * root; a node gone since is ESTALE.  Inside a checkpoint, "." is its
 * model mount's, ".." run_lookup_parent's. */
static int run_lookup_dots(ckrun *r, const ckfs_caller *c, ckfs_ino parent, const char *name,
                           ckfs_entry_out *out, ckfs_hold *h)
{
    bool dot = name[1] == '\0';
    if (!is_run_node(parent) && !is_checkpoint_dir(parent)) {
        if (!dot)
            return run_lookup_parent(r, parent, out);
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &parent, &errnum);
        return in != NULL ? in->ops->lookup(in, c, parent, name, out, h) : -errnum;
    }
    pthread_mutex_lock(&r->mu);
    int rc = run_entry(r, parent, out); /* whether parent is still there */
    if (rc == 0 && !dot && parent == RUN_INO_LATEST)
        rc = 1; /* a link has no ".." */
    else if (rc == 0 && !dot)
        rc = run_entry(r, RUN_INO_ROOT, out);
    pthread_mutex_unlock(&r->mu);
    if (rc == 0)
        return 0;
    return rc > 0 ? -ENOTDIR : -ESTALE;
}

static ckrun *run_of(ckfs_front *f)
{
    return (ckrun *)f;
}

static int r_lookup(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_entry_out *out, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
        return run_lookup_dots(r, c, parent, name, out, h);
    if (!is_run_node(parent)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &parent, &errnum);
        return in != NULL ? in->ops->lookup(in, c, parent, name, out, h) : -errnum;
    }
    int rc = -1;
    pthread_mutex_lock(&r->mu);
    if (parent == RUN_INO_ROOT && strcmp(name, "latest") == 0) {
        rc = run_entry(r, RUN_INO_LATEST, out);
    } else if (parent == RUN_INO_ROOT) {
        long s = ckrun_listed_slot(r, name);
        rc = s < 0 ? -1 : run_entry(r, slot_ino((size_t)s, INO_ROOT), out);
    }
    pthread_mutex_unlock(&r->mu);
    if (rc < 0)
        return parent == RUN_INO_ROOT ? -ENOENT : -ENOTDIR;
    return 0;
}

static int r_getattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_attr_out *out,
                     ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (!is_run_node(ino) && !is_checkpoint_dir(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->getattr(in, c, ino, out, h) : -errnum;
    }
    pthread_mutex_lock(&r->mu);
    int rc = run_attr(r, ino, &out->st);
    pthread_mutex_unlock(&r->mu);
    if (rc < 0)
        return is_run_node(ino) ? -ENOENT : -ESTALE;
    out->timeout = run_timeout(r, ino);
    return 0;
}

static int r_readlink(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, char *target,
                      size_t cap, ckfs_hold *h)
{
    (void)c, (void)h;
    ckrun *r = run_of(f);
    if (ino != RUN_INO_LATEST)
        return -EINVAL;
    target[0] = '\0';
    pthread_mutex_lock(&r->mu);
    if (r->latest >= 0)
        snprintf(target, cap, "%s", r->slots[r->latest].name);
    pthread_mutex_unlock(&r->mu);
    return target[0] == '\0' ? -ENOENT : 0;
}

/* Root listing positions: ".", "..", "latest", then the checkpoints by
 * name.  A checkpoint added between two reads of a listing may shift the
 * ones after it, as on any directory that changes while it is read. */
static int run_readdir_root(ckrun *r, off_t off, bool plus, ckfs_dir_add add, void *ctx)
{
    pthread_mutex_lock(&r->mu);
    for (off_t pos = off; pos >= 0; pos++) {
        const char *name;
        ckfs_ino ino;
        if (pos < 2) {
            name = pos == 0 ? "." : "..";
            ino = RUN_INO_ROOT;
        } else if (pos == 2) {
            if (r->latest < 0)
                continue;
            name = "latest";
            ino = RUN_INO_LATEST;
        } else if ((size_t)(pos - 3) < r->n_listed) {
            size_t s = r->listed[pos - 3];
            name = r->slots[s].name;
            ino = slot_ino(s, INO_ROOT);
        } else {
            break;
        }
        ckfs_entry_out e;
        run_entry(r, ino, &e);
        if (plus && pos < 2)
            e.ino = 0; /* "." and ".." carry no lookup reference */
        if (!add(ctx, name, &e, pos + 1))
            break;
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int r_readdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, off_t off, bool plus,
                     ckfs_dir_add add, void *ctx, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (ino == RUN_INO_ROOT)
        return run_readdir_root(r, off, plus, add, ctx);
    int errnum = ESTALE;
    ckfs_front *in = inside(r, &ino, &errnum);
    return in != NULL ? in->ops->readdir(in, c, ino, off, plus, add, ctx, h) : -errnum;
}

/* A checkpoint's directory's user.ckptfs.error: why it does not open,
 * where `ls` of it says only EIO.  It is opened to tell (once: a
 * failure is kept); one that opens has none. */
static int run_error_xattr(ckrun *r, ckfs_ino ino, ckfs_xattr_out *out)
{
    ckfs_ino inner = ino;
    int errnum = ESTALE;
    if (ckrun_slot_mount(r, &inner, &errnum) != NULL)
        return -ENODATA;
    char why[CKFS_LAST_ERROR_MAX] = "";
    uint64_t s = slot_of_ino(ino);
    pthread_mutex_lock(&r->mu);
    if (s >= 1 && s <= r->n_slots && r->slots[s - 1].error != NULL)
        snprintf(why, sizeof why, "%s", r->slots[s - 1].error);
    pthread_mutex_unlock(&r->mu);
    if (why[0] == '\0')
        return -errnum;
    return ckfs_xattr_text(out, why);
}

static int run_last_error_xattr(ckrun *r, ckfs_xattr_out *out)
{
    char why[CKFS_LAST_ERROR_MAX];
    pthread_mutex_lock(&r->error_mu);
    memcpy(why, r->last_error, sizeof why);
    pthread_mutex_unlock(&r->error_mu);
    if (why[0] == '\0')
        return -ENODATA;
    return ckfs_xattr_text(out, why);
}

/* The root has the pid (for ckptfs-umount); a checkpoint's directory has
 * its model's xattrs, which opening it gives, except the names ckptfs
 * never serves: `ls -l` of the root asks for those and must not open
 * every checkpoint to hear "not supported".  And user.ckptfs.error (above). */
static int r_getxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                      ckfs_xattr_out *out, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (is_checkpoint_dir(ino) && strcmp(name, XATTR_ERROR) == 0)
        return run_error_xattr(r, ino, out);
    if (!is_run_node(ino) && !(is_checkpoint_dir(ino) && ckfs_unserved_xattr(name))) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->getxattr(in, c, ino, name, out, h) : -errnum;
    }
    if (ckfs_unserved_xattr(name))
        return -EOPNOTSUPP;
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_PID) == 0)
        return ckfs_xattr_pid(out);
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_WATCH) == 0) {
        char how[128];
        ckrun_describe_watch(r, how, sizeof how);
        return ckfs_xattr_text(out, how);
    }
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_LAST_ERROR) == 0)
        return run_last_error_xattr(r, out);
    return -ENODATA;
}

static int r_listxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_xattr_out *out,
                       ckfs_hold *h)
{
    static const char names[] = XATTR_PID "\0" XATTR_WATCH "\0" XATTR_LAST_ERROR;
    ckrun *r = run_of(f);
    if (!is_run_node(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->listxattr(in, c, ino, out, h) : -errnum;
    }
    out->value = "";
    out->len = 0;
    if (ino != RUN_INO_ROOT)
        return 0;
    pthread_mutex_lock(&r->error_mu);
    bool failed = r->last_error[0] != '\0';
    pthread_mutex_unlock(&r->error_mu);
    out->value = names;
    out->len = failed ? sizeof names : sizeof XATTR_PID + sizeof XATTR_WATCH;
    return 0;
}

/* ckptfs-umount seals before it unmounts: a read-only run has nothing to
 * save. */
static int r_setxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                      const char *value, size_t size, ckfs_defer *d, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (!is_run_node(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->setxattr(in, c, ino, name, value, size, d, h) : -errnum;
    }
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_UNMOUNT) == 0 && r->writable)
        return ckrun_seal(c, r, value, size);
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_UNMOUNT) == 0)
        return size == 1 && (value[0] == '0' || value[0] == '1') ? 0 : -EINVAL;
    return -EROFS;
}

static int r_statfs(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, struct statvfs *sv,
                    ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (!is_run_node(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->statfs(in, c, ino, sv, h) : -errnum;
    }
    if (fstatvfs(r->dir_fd, sv) < 0)
        memset(sv, 0, sizeof *sv);
    sv->f_namemax = 255;
    sv->f_flag = r->writable ? 0 : ST_RDONLY;
    return 0;
}

/* Changes at the run level: the run is read-only.  Inside a checkpoint,
 * its own front decides. */
static int r_mknod(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   mode_t mode, ckfs_entry_out *e, ckfs_defer *d, ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->mknod(in, c, parent, name, mode, e, d, h) : -errnum;
}

static int r_mkdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   mode_t mode, ckfs_entry_out *e, ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->mkdir(in, c, parent, name, mode, e, h) : -errnum;
}

static int r_unlink(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->unlink(in, c, parent, name, h) : -errnum;
}

static int r_rmdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->rmdir(in, c, parent, name, h) : -errnum;
}

/* Both directories must be in one checkpoint: one cannot take another's
 * files. */
static int r_rename(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_ino newparent, const char *newname, unsigned flags, ckfs_defer *d,
                    ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent) || is_run_node(newparent))
        return -EROFS;
    if ((parent & ~CKFS_INO_MASK) != (newparent & ~CKFS_INO_MASK))
        return -EXDEV;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->rename(in, c, parent, name, newparent & CKFS_INO_MASK, newname,
                                        flags, d, h)
                      : -errnum;
}

/* Links: none in the run's root; a model mount makes none either. */
static int r_symlink(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, ckfs_hold *h)
{
    (void)f, (void)c, (void)h;
    return is_run_node(parent) ? -EROFS : -ENOSYS;
}

static int r_link(ckfs_front *f, const ckfs_caller *c, ckfs_ino newparent, ckfs_hold *h)
{
    (void)f, (void)c, (void)h;
    return is_run_node(newparent) ? -EROFS : -ENOSYS;
}

static int r_create(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    mode_t mode, int flags, ckfs_entry_out *e, ckfs_open_out *out, ckfs_defer *d,
                    ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->create(in, c, parent, name, mode, flags, e, out, d, h)
                      : -errnum;
}

static int r_setattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const struct stat *attr,
                     int to_set, ckfs_attr_out *out, ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(ino) || is_checkpoint_dir(ino))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->setattr(in, c, ino, attr, to_set, out, h) : -errnum;
}

/* No handles for directories, as in a model mount: ENOSYS stops OPENDIR
 * for the whole connection. */
static int r_opendir(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_hold *h)
{
    (void)f, (void)c, (void)ino, (void)h;
    return -ENOSYS;
}

static int r_fsync(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_defer *d,
                   ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(ino))
        return 0; /* nothing to save */
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->fsync(in, c, ino, d, h) : -errnum;
}

/* Files are all inside checkpoints. */
static int r_open(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, int flags,
                  ckfs_open_out *out, ckfs_defer *d, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->open(in, c, ino, flags, out, d, h) : -errnum;
}

static int r_read(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, size_t size, off_t off,
                  ckfs_read_plan *plan, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->read(in, c, ino, size, off, plan, h) : -errnum;
}

static int r_write(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *buf,
                   size_t size, off_t off, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->write(in, c, ino, buf, size, off, h) : -errnum;
}

static int r_flush(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh,
                   ckfs_defer *d, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->flush(in, c, ino, fh, d, h) : -errnum;
}

static int r_release(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh,
                     bool *save_handle, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->release(in, c, ino, fh, save_handle, h) : -errnum;
}

const ckfs_front_ops ckrun_front_ops = {
    .lookup = r_lookup,
    .getattr = r_getattr,
    .setattr = r_setattr,
    .readlink = r_readlink,
    .opendir = r_opendir,
    .readdir = r_readdir,
    .open = r_open,
    .read = r_read,
    .write = r_write,
    .flush = r_flush,
    .release = r_release,
    .fsync = r_fsync,
    .create = r_create,
    .mknod = r_mknod,
    .mkdir = r_mkdir,
    .unlink = r_unlink,
    .rmdir = r_rmdir,
    .rename = r_rename,
    .symlink = r_symlink,
    .link = r_link,
    .getxattr = r_getxattr,
    .listxattr = r_listxattr,
    .setxattr = r_setxattr,
    .statfs = r_statfs,
    .destroy = NULL, /* nothing to save: the checkpoints' last saves come after the session
                      * (ckrun_close_all) */
};
