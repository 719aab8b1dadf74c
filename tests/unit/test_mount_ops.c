/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mount_ops: mount/'s operations driven directly, without FUSE or a kernel
 * (issue 40): a model mount's front on a safetensors file written here
 * (lookup, getattr, readdir, read, xattrs, another user's reads on a
 * read-only and a writable mount, an edit and its save), the same file
 * shown as -o as=safetensors (its view's one file read in small pieces,
 * its header parsed with jansson), and a run directory's front listing
 * two such files and reading through one.
 *
 * Every expected value comes from the file as this test wrote it (its
 * header's shapes and offsets, its bytes read back with pread), never
 * from what the operations answer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../../codec/core/model_dir.h"
#include "../../codec/io/commit_group.h"
#include "../../codec/registry.h"
#include "../../save/write_claim.h"
#include "../../mount/ckptfs.h"
#include "../../mount/file_view.h"
#include "../../mount/inode_map.h"
#include "../../mount/model_ops.h"
#include "../../mount/run_mount.h"
#include "../../mount/tensor_read.h"
#include "unit.h"

/* The file: tensor a, F32 [2,3] at data bytes [0, 24); b, I64 [4] at
 * [24, 56).  DATA_AT is where the data begins (8 + the header's length). */
#define A_BYTES 24
#define B_BYTES 32
static long data_at = -1;

/* Write a safetensors file of a and b (a's floats from base), mode mode;
 * where its data begins, or -1. */
static long write_model(const char *path, float base, mode_t mode)
{
    char header[256];
    int n = snprintf(header, sizeof header,
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,%d]},"
                     "\"b\":{\"dtype\":\"I64\",\"shape\":[4],\"data_offsets\":[%d,%d]}}",
                     A_BYTES, A_BYTES, A_BYTES + B_BYTES);
    while (n % 8 != 0)
        header[n++] = ' ';
    unsigned char len[8] = {0};
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)n >> (8 * i));
    float a[6];
    int64_t b[4];
    for (int i = 0; i < 6; i++)
        a[i] = base + (float)i;
    for (int i = 0; i < 4; i++)
        b[i] = 10 + i;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write(fd, len, 8) == 8 && write(fd, header, (size_t)n) == n &&
              write(fd, a, sizeof a) == (ssize_t)sizeof a && write(fd, b, sizeof b) == (ssize_t)sizeof b;
    if (fd >= 0)
        close(fd);
    ok = ok && chmod(path, mode) == 0;
    return ok ? 8 + n : -1;
}

/* Bytes [off, off + len) of the file, read independently of the mount. */
static bool file_bytes(const char *path, long off, void *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && pread(fd, buf, len, off) == (ssize_t)len;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* ---- a model mount built as fuse/main.c builds one ---- */

typedef struct mops {
    ckfs fs;
    ck_write_claim claim;       /* a writable mount's, as fuse/main.c takes it */
    bool open;
} mops;

static int mops_open(mops *mo, const char *path, bool writable, ck_error *err)
{
    memset(mo, 0, sizeof *mo);
    mo->claim = (ck_write_claim)CK_WRITE_CLAIM_NONE;
    mo->fs = (ckfs){.timeout = 60.0, .splice = true, .mountpoint = "/mnt/unit", .log_fd = -1,
                    .commit_delay = -1, .session_rw = writable};
    ckfs_front_init(&mo->fs);
    if (writable && ck_write_claim_take(&mo->claim, path, "test_mount_ops", err) < 0)
        return -1;
    ck_model_dir *dir = writable ? ck_dir_ref(mo->claim.dir) : ck_dir_open(path, err);
    if (dir == NULL)
        return -1;
    ck_open_opts oo = {0};
    ck_model *m = !writable && ck_group_recover(dir, true, err) < 0
                      ? NULL
                      : ck_model_open_at(dir, path, &oo, err);
    ck_dir_unref(dir); /* the model holds it */
    if (m == NULL)
        return -1;
    if (ckfs_attach(&mo->fs, m, &oo, writable, 0, err) < 0) {
        ck_model_close(m);
        return -1;
    }
    ckfs_saver_init(&mo->fs);
    mo->open = true;
    return 0;
}

/* The unmount: the saver stopped and the last save made. */
static void mops_close(mops *mo)
{
    if (mo->open) {
        ckfs_unmounted(&mo->fs);
        ckfs_detach(&mo->fs);
    }
    ck_write_claim_release(&mo->claim);
    mo->open = false;
}

static const ckfs_caller root_caller = {.uid = 0, .gid = 0};
static const ckfs_caller nobody = {.uid = 65534, .gid = 65534};

/* The plan's bytes gathered: its memory, and its descriptors' ranges read
 * with pread, as the adapter would splice them. */
static bool plan_bytes(const ckfs_read_plan *p, unsigned char *out, size_t cap, size_t *n)
{
    *n = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ckfs_piece *q = &p->pieces[i];
        if (*n + q->len > cap)
            return false;
        if (q->mem != NULL)
            memcpy(out + *n, q->mem, q->len);
        else if (pread(q->fd, out + *n, q->len, (off_t)q->off) != (ssize_t)q->len)
            return false;
        *n += q->len;
    }
    return true;
}

/* A read through the front: 0 and the bytes, or the negative errno. */
static int front_read(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, size_t size, off_t off,
                      unsigned char *out, size_t *n)
{
    ckfs_read_plan plan;
    ckfs_hold h = {0};
    ckfs_plan_init(&plan);
    int rc = f->ops->read(f, c, ino, size, off, &plan, &h);
    if (rc == 0 && !plan_bytes(&plan, out, size, n))
        rc = -EIO;
    ckfs_hold_end(&h);
    ckfs_plan_free(&plan);
    return rc;
}

static int front_lookup(ckfs_front *f, ckfs_ino parent, const char *name, ckfs_entry_out *e)
{
    ckfs_hold h = {0};
    int rc = f->ops->lookup(f, &root_caller, parent, name, e, &h);
    ckfs_hold_end(&h);
    return rc;
}

/* The inode of tensor directory dir's file (meta or out), or 0. */
static ckfs_ino file_ino(ckfs_front *f, ckfs_ino root, const char *dir, const char *file)
{
    ckfs_entry_out d, e;
    if (front_lookup(f, root, dir, &d) != 0 || front_lookup(f, d.ino, file, &e) != 0)
        return 0;
    return e.ino;
}

/* A listing collected: its names, joined by '/'. */
typedef struct names {
    char all[1024];
    size_t n;
} names;

static bool add_name(void *ctx, const char *name, const ckfs_entry_out *e, off_t next)
{
    (void)e, (void)next;
    names *l = ctx;
    l->n++;
    size_t len = strlen(l->all);
    snprintf(l->all + len, sizeof l->all - len, "%s/", name);
    return true;
}

static void test_reads(const char *path)
{
    mops mo;
    ck_error err = {0};
    if (mops_open(&mo, path, false, &err) < 0) {
        check(0, "mount_ops: a read-only mount of the file opens (%s)", err.msg);
        return;
    }
    ckfs_front *f = &mo.fs.front;
    ckfs_hold h = {0};
    ckfs_entry_out d;
    ckfs_attr_out a;
    check(front_lookup(f, INO_ROOT, "a", &d) == 0 && S_ISDIR(d.attr.st_mode),
          "mount_ops: lookup of tensor a is a directory");
    check(front_lookup(f, INO_ROOT, "nothing", &d) == -ENOENT, "mount_ops: lookup of a name "
          "not in the file is ENOENT");
    ckfs_ino a_out = file_ino(f, INO_ROOT, "a", "out"), b_out = file_ino(f, INO_ROOT, "b", "out");
    int rc = f->ops->getattr(f, &root_caller, a_out, &a, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && a.st.st_size == A_BYTES && S_ISREG(a.st.st_mode),
          "mount_ops: a/out's size is the header's 24 bytes (%lld)", (long long)a.st.st_size);
    rc = f->ops->getattr(f, &root_caller, b_out, &a, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && a.st.st_size == B_BYTES, "mount_ops: b/out's size is the header's 32 bytes");

    names l = {{0}, 0};
    rc = f->ops->readdir(f, &root_caller, INO_ROOT, 0, false, add_name, &l, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && strcmp(l.all, "./../a/b/snapshot_done/") == 0,
          "mount_ops: the root lists ., .., the file's two tensors and snapshot_done (%s)", l.all);
    names sub = {{0}, 0};
    rc = f->ops->readdir(f, &root_caller, d.ino, 0, true, add_name, &sub, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && strcmp(sub.all, "./../meta/out/") == 0,
          "mount_ops: a tensor's directory lists meta and out (%s)", sub.all);

    unsigned char want[A_BYTES + B_BYTES], got[A_BYTES + B_BYTES];
    size_t n = 0;
    bool have = file_bytes(path, data_at, want, sizeof want);
    rc = front_read(f, &root_caller, a_out, 4096, 0, got, &n);
    check(have && rc == 0 && n == A_BYTES && memcmp(got, want, A_BYTES) == 0,
          "mount_ops: a/out reads as the file's bytes (%zu)", n);
    rc = front_read(f, &root_caller, b_out, 8, 16, got, &n);
    check(rc == 0 && n == 8 && memcmp(got, want + A_BYTES + 16, 8) == 0,
          "mount_ops: 8 bytes of b/out at 16 are the file's");
    rc = front_read(f, &root_caller, a_out, 16, A_BYTES, got, &n);
    check(rc == 0 && n == 0, "mount_ops: a read past the end is empty");

    ckfs_xattr_out *x = malloc(sizeof *x);
    ckfs_entry_out be;
    bool xa = x != NULL && front_lookup(f, INO_ROOT, "b", &be) == 0;
    rc = xa ? f->ops->getxattr(f, &root_caller, be.ino, "user.ckptfs.shape", x, &h) : -1;
    ckfs_hold_end(&h);
    check(rc == 0 && x->len == 3 && memcmp(x->value, "[4]", 3) == 0,
          "mount_ops: b's shape xattr is the header's [4]");
    rc = xa ? f->ops->getxattr(f, &root_caller, be.ino, "user.ckptfs.dtype", x, &h) : -1;
    ckfs_hold_end(&h);
    check(rc == 0 && x->len == 5 && memcmp(x->value, "int64", 5) == 0,
          "mount_ops: b's dtype xattr is the header's I64, as int64");
    rc = xa ? f->ops->getxattr(f, &root_caller, be.ino, "security.selinux", x, &h) : -1;
    ckfs_hold_end(&h);
    check(rc == -EOPNOTSUPP, "mount_ops: security.* is not supported (%d)", rc);
    free(x);
    ckfs_open_out oo;
    ckfs_defer def;
    rc = f->ops->open(f, &root_caller, a_out, O_WRONLY, &oo, &def, &h);
    ckfs_hold_end(&h);
    check(rc == -ENOSYS, "mount_ops: a read-only session has no handles (%d)", rc);
    rc = f->ops->write(f, &root_caller, a_out, "x", 1, 0, &h);
    ckfs_hold_end(&h);
    check(rc == -EROFS, "mount_ops: a write on a read-only mount is EROFS (%d)", rc);
    mops_close(&mo);
}

/* -o as=safetensors through the operations: the root holds the view's
 * one file, and its bytes are a safetensors file (its header parsed with
 * jansson, not the codec) whose tensors hold the model file's bytes. */
static void test_view_files(const char *path)
{
    mops mo;
    ck_error err = {0};
    if (mops_open(&mo, path, false, &err) < 0 ||
        (mo.fs.view = ckfs_view_new(mo.fs.tr.model,
                                    ck_format_view(ck_format_by_name("safetensors")),
                                    &(ck_view_opts){.in = path}, &err)) == NULL) {
        check(0, "mount_ops: a view of the file is made (%s)", err.msg);
        mops_close(&mo);
        return;
    }
    ckfs_front *f = &mo.fs.front;
    ckfs_hold h = {0};
    names l = {{0}, 0};
    int rc = f->ops->readdir(f, &root_caller, INO_ROOT, 0, false, add_name, &l, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && strcmp(l.all, "./../model.safetensors/") == 0,
          "mount_ops: a view's root lists its one file (%s)", l.all);
    ckfs_entry_out e;
    rc = front_lookup(f, INO_ROOT, "model.safetensors", &e);
    check(rc == 0 && S_ISREG(e.attr.st_mode) && (e.attr.st_mode & 0222) == 0,
          "mount_ops: the view's file is a read-only regular file");
    size_t size = rc == 0 ? (size_t)e.attr.st_size : 0, n = 0, got = 0;
    unsigned char *bytes = size > 0 && size < 65536 ? malloc(size) : NULL;
    /* read in pieces of 7 bytes, so that reads cross every segment's end */
    for (rc = bytes != NULL ? 0 : -1; rc == 0 && got < size; got += n)
        if ((rc = front_read(f, &root_caller, e.ino, 7, (off_t)got, bytes + got, &n)) == 0 &&
            n == 0)
            break;
    check(rc == 0 && got == size, "mount_ops: the view's file reads whole (%zu of %zu)", got,
          size);
    uint64_t hlen = 0;
    for (int i = 7; got >= 8 && i >= 0; i--)
        hlen = hlen << 8 | bytes[i];
    json_error_t je;
    json_t *hdr = got >= 8 && hlen <= got - 8 ? json_loadb((char *)bytes + 8, hlen, 0, &je) : NULL;
    unsigned char want[A_BYTES + B_BYTES];
    bool have = file_bytes(path, data_at, want, sizeof want);
    const char *tensor[] = {"a", "b"};
    size_t at[] = {0, A_BYTES}, len[] = {A_BYTES, B_BYTES};
    for (int t = 0; t < 2; t++) {
        json_t *offs = json_object_get(json_object_get(hdr, tensor[t]), "data_offsets");
        json_int_t b0 = json_integer_value(json_array_get(offs, 0));
        json_int_t b1 = json_integer_value(json_array_get(offs, 1));
        bool in = hdr != NULL && b0 >= 0 && b1 - b0 == (json_int_t)len[t] &&
                  8 + hlen + (uint64_t)b1 <= got;
        check(have && in && memcmp(bytes + 8 + hlen + b0, want + at[t], len[t]) == 0,
              "mount_ops: the view's tensor %s holds the file's bytes", tensor[t]);
    }
    json_decref(hdr);
    free(bytes);
    mops_close(&mo);
}

/* Another user (65534) reads a tensor only when the file on disk lets
 * them: the predicate and the read alike, on either kind of mount. */
static void test_other_user(const char *path, bool writable)
{
    const char *kind = writable ? "writable" : "read-only";
    mops mo;
    ck_error err = {0};
    if (chmod(path, 0600) != 0 || mops_open(&mo, path, writable, &err) < 0) {
        check(0, "mount_ops: a %s mount of a 0600 file opens (%s)", kind, err.msg);
        return;
    }
    ckfs_front *f = &mo.fs.front;
    ckfs_ino a_out = file_ino(f, INO_ROOT, "a", "out");
    const ck_tensor *t = &mo.fs.tr.model->index.tensors[0];
    int errnum = 0;
    unsigned char got[A_BYTES];
    size_t n = 0;
    check(!ckfs_may_read(&nobody, &mo.fs, t, &errnum) && errnum == EACCES,
          "mount_ops: %s, 0600: uid 65534 may not read a tensor (errno %d)", kind, errnum);
    check(ckfs_may_read(&root_caller, &mo.fs, t, &errnum), "mount_ops: %s: root may", kind);
    int rc = front_read(f, &nobody, a_out, A_BYTES, 0, got, &n);
    check(rc == -EACCES, "mount_ops: %s, 0600: uid 65534's read is EACCES (%d)", kind, rc);
    if (chmod(path, 0644) != 0)
        check(0, "mount_ops: chmod 0644");
    errnum = 0;
    check(ckfs_may_read(&nobody, &mo.fs, t, &errnum) && errnum == 0,
          "mount_ops: %s, 0644: uid 65534 may read it", kind);
    unsigned char want[A_BYTES];
    rc = front_read(f, &nobody, a_out, A_BYTES, 0, got, &n);
    check(rc == 0 && n == A_BYTES && file_bytes(path, data_at, want, sizeof want) &&
              memcmp(got, want, A_BYTES) == 0,
          "mount_ops: %s, 0644: uid 65534 reads the file's bytes", kind);
    mops_close(&mo);
}

/* open for writing, write, close, then the save at unmount: the file on
 * disk holds the edit and nothing else changed. */
static void test_edit_and_save(const char *path)
{
    mops mo;
    ck_error err = {0};
    if (mops_open(&mo, path, true, &err) < 0) {
        check(0, "mount_ops: a writable mount opens (%s)", err.msg);
        return;
    }
    unsigned char before[A_BYTES + B_BYTES], after[A_BYTES + B_BYTES], got[A_BYTES];
    bool have = file_bytes(path, data_at, before, sizeof before);
    ckfs_front *f = &mo.fs.front;
    ckfs_hold h = {0};
    ckfs_ino a_out = file_ino(f, INO_ROOT, "a", "out");
    ckfs_open_out oo;
    ckfs_defer d;
    int rc = f->ops->open(f, &root_caller, a_out, O_WRONLY, &oo, &d, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && oo.fh == FH_WRITER, "mount_ops: a/out opens for writing (%d)", rc);
    const float edit = 42.5f;
    rc = f->ops->write(f, &root_caller, a_out, (const char *)&edit, sizeof edit, 4, &h);
    ckfs_hold_end(&h);
    check(rc == 0, "mount_ops: 4 bytes written at 4 (%d)", rc);
    size_t n = 0;
    rc = front_read(f, &root_caller, a_out, A_BYTES, 0, got, &n);
    check(rc == 0 && n == A_BYTES && memcmp(got, before, 4) == 0 &&
              memcmp(got + 4, &edit, 4) == 0 && memcmp(got + 8, before + 8, A_BYTES - 8) == 0,
          "mount_ops: the edit reads back before the save");
    ckfs_entry_out e;
    check(front_lookup(f, INO_ROOT, "snapshot_done", &e) == -ENOENT,
          "mount_ops: snapshot_done is absent while the edit is unsaved");
    bool save_handle = true;
    rc = f->ops->release(f, &root_caller, a_out, oo.fh, &save_handle, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && !save_handle, "mount_ops: the close ends the writer");
    rc = f->ops->fsync(f, &root_caller, a_out, &d, &h);
    check(rc == CKFS_DEFER && d.kind == DEFER_SAVE && d.reply == REPLY_SYNC,
          "mount_ops: fsync is deferred to the saver (%d)", rc);
    ckfs_hold_end(&h);
    mops_close(&mo); /* the save at unmount */
    check(!mo.fs.final_commit_failed, "mount_ops: the save at unmount succeeds");
    bool saved = have && file_bytes(path, data_at, after, sizeof after);
    check(saved && memcmp(after, before, 4) == 0 && memcmp(after + 4, &edit, 4) == 0 &&
              memcmp(after + 8, before + 8, sizeof before - 8) == 0,
          "mount_ops: the saved file holds the edit, every other byte as it was");
}

/* ---- a run directory ---- */

static void test_run(const char *dir)
{
    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s/m1.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/m2.safetensors", dir);
    struct timespec old[2] = {{.tv_sec = time(NULL) - 100}, {.tv_sec = time(NULL) - 100}};
    bool made = mkdir(dir, 0755) == 0 && write_model(p1, 0.0f, 0444) > 0 &&
                utimensat(AT_FDCWD, p1, old, 0) == 0 && write_model(p2, 100.0f, 0444) > 0;
    if (!made) {
        check(0, "mount_ops: the run directory is made");
        return;
    }
    ckfs proto = {.timeout = 60.0, .splice = true, .mountpoint = "/mnt/run", .log_fd = -1,
                  .commit_delay = -1};
    ckfs_front_init(&proto);
    ckrun_opts o = {.path = dir, .mountpoint = "/mnt/run", .settle = 5.0,
                    .watch = CKRUN_WATCH_INOTIFY, .poll = 2.0, .index_cache = 1u << 30,
                    .max_fds = 1000, .proto = &proto};
    ck_error err = {0};
    ckrun *r = ckrun_new(&o, &err);
    if (r == NULL) {
        check(0, "mount_ops: the run directory opens (%s)", err.msg);
        return;
    }
    ckfs_front *f = ckrun_front(r);
    ckfs_hold h = {0};
    names l = {{0}, 0};
    int rc = f->ops->readdir(f, &root_caller, 1, 0, true, add_name, &l, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && strcmp(l.all, "./../latest/m1/m2/") == 0,
          "mount_ops: the run's root lists latest and its two checkpoints by name (%s)", l.all);
    char target[256] = "";
    rc = f->ops->readlink(f, &root_caller, 2, target, sizeof target, &h);
    ckfs_hold_end(&h);
    check(rc == 0 && strcmp(target, "m2") == 0,
          "mount_ops: latest is the newer file (%s)", target);
    ckfs_entry_out cp;
    rc = front_lookup(f, 1, "m2", &cp);
    check(rc == 0 && S_ISDIR(cp.attr.st_mode) && (cp.ino >> CKFS_INO_BITS) != 0,
          "mount_ops: a checkpoint's directory has a slot's inode");
    ckfs_ino a_out = rc == 0 ? file_ino(f, cp.ino, "a", "out") : 0;
    unsigned char want[A_BYTES], got[A_BYTES];
    size_t n = 0;
    rc = a_out ? front_read(f, &root_caller, a_out, A_BYTES, 0, got, &n) : -1;
    check(rc == 0 && n == A_BYTES && file_bytes(p2, data_at, want, sizeof want) &&
              memcmp(got, want, A_BYTES) == 0,
          "mount_ops: a/out of the run's m2 reads as m2's bytes");
    rc = f->ops->mkdir(f, &root_caller, 1, "new", 0755, &cp, &h);
    ckfs_hold_end(&h);
    check(rc == -EROFS, "mount_ops: the run's root takes no mkdir (%d)", rc);
    ckrun_free(r);
}

void test_mount_ops(void)
{
    char path[512], run[512];
    snprintf(path, sizeof path, "%s/mount_ops.safetensors", tmpdir);
    snprintf(run, sizeof run, "%s/mount_ops_run", tmpdir);
    data_at = write_model(path, 0.0f, 0644);
    if (data_at < 0) {
        check(0, "mount_ops: the model is written");
        return;
    }
    test_reads(path);
    test_view_files(path);
    test_other_user(path, false);
    test_other_user(path, true);
    test_edit_and_save(path);
    test_run(run);
}
