/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_dir_writer: a OneFlow snapshot directory, written beside OUT and
 * renamed into place (oneflow_dir_writer.h).
 *
 * Every file is reached through directory descriptors opened without
 * following links, so a link planted in OUT's parent or in the temporary
 * tree is never written through or removed beyond.  Removal (of an old
 * snapshot replaced with force, of a temporary tree left by a crash) only
 * ever takes a tree of the snapshot's shape: regular files at the root,
 * directories of regular files below it, nothing deeper.
 *
 * It takes no lock: its caller holds OUT's write claim (save/, above the
 * formats), whose writer lock keeps a second writer of OUT off.
 */
#define _GNU_SOURCE /* renameat2, O_PATH */
#include "oneflow_dir_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oneflow_dir.h"
#include "../core/byte_buf.h"
#include "../core/dir_name.h"
#include "oneflow_meta.h"
#include "oneflow_pickle.h"
#include "../io/byte_sink.h"

#define TMP_TAG ".ckptfs-"
#define CHUNK (1u << 20)

/* Why a snapshot cannot hold type dt, naming the OneFlow versions that
 * lack it. */
static const char *of_type_refusal(const ck_dtype *dt, char *buf, size_t cap)
{
    if (dt->kind == CK_KIND_STR)
        return "a str value has no place in it";
    if (strcmp(dt->of_name, "kBFloat16") == 0)
        return "OneFlow's DataType has kBFloat16 since 0.5.0, but no release (0.5 to 1.0) "
               "loads it from a snapshot";
    if (strcmp(dt->of_name, "kUInt16") == 0 || strcmp(dt->of_name, "kUInt32") == 0 ||
        strcmp(dt->of_name, "kUInt64") == 0) {
        snprintf(buf, cap, "OneFlow's DataType has %s since 0.6.0, but no release (0.6 to "
                 "1.0) loads it from a snapshot", dt->of_name);
        return buf;
    }
    return NULL;
}

/* ---- the parts of OUT ---- */

typedef struct out_dir {
    const char *out;            /* as given, for messages */
    char parent[PATH_MAX];      /* OUT's directory */
    char base[NAME_MAX + 1];    /* OUT's name in it */
    int parent_fd;
    char tmp[NAME_MAX + 1];     /* the temporary tree's name, "" when none */
    int tmp_fd;
    bool pickled;               /* a pickled_data keeps the tensors' order */
    size_t pickle_len;          /* its bytes */
    ck_error *err;
} out_dir;

static int split_out(out_dir *d)
{
    char path[PATH_MAX];
    size_t n = strlen(d->out);
    if (n == 0 || n >= sizeof path)
        return ck_fail(d->err, ENAMETOOLONG, "%s: bad snapshot directory name", d->out);
    memcpy(path, d->out, n + 1);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = '\0';
    char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 ||
        strlen(base) + sizeof TMP_TAG + 8 > NAME_MAX)
        return ck_fail(d->err, EINVAL, "%s: give the snapshot directory by its own name",
                       d->out);
    memcpy(d->base, base, strlen(base) + 1); /* checked against NAME_MAX above */
    if (slash == NULL)
        snprintf(d->parent, sizeof d->parent, ".");
    else if (slash == path)
        snprintf(d->parent, sizeof d->parent, "/");
    else
        snprintf(d->parent, sizeof d->parent, "%.*s", (int)(slash - path), path);
    d->parent_fd = open(d->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->parent_fd < 0)
        return ck_fail_errno(d->err, errno, "%s: cannot open its directory %s", d->out,
                             d->parent);
    return 0;
}

static int open_dir_at(int at, const char *name)
{
    return openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Call fn on each entry of the directory dfd but "." and "..": 0, or fn's
 * first non-zero result, or -1 (errno) when the directory cannot be read. */
static int each_entry(int dfd, int (*fn)(int dfd, const struct dirent *de, void *arg),
                      void *arg)
{
    int fd = dup(dfd);
    DIR *dir = fd < 0 ? NULL : fdopendir(fd);
    if (dir == NULL) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    rewinddir(dir);
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(dir)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            rc = fn(dfd, de, arg);
    closedir(dir);
    return rc;
}

static bool is_kind(int dfd, const char *name, mode_t kind)
{
    struct stat st;
    return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & S_IFMT) == kind;
}

/* ---- trees of the snapshot's shape ---- */

/* A variable directory's entry: a regular file; named meta or out when
 * *strict says the tree must be a real snapshot. */
static int leaf_ok(int dfd, const struct dirent *de, void *arg)
{
    bool strict = *(bool *)arg;
    if (!is_kind(dfd, de->d_name, S_IFREG))
        return 1;
    return strict && strcmp(de->d_name, "meta") != 0 && strcmp(de->d_name, "out") != 0;
}

typedef struct shape {
    bool strict;                /* only a snapshot's names */
    bool done;                  /* snapshot_done seen */
    size_t entries;
} shape;

static int top_ok(int dfd, const struct dirent *de, void *arg)
{
    shape *s = arg;
    s->entries++;
    if (is_kind(dfd, de->d_name, S_IFREG)) {
        s->done |= strcmp(de->d_name, "snapshot_done") == 0;
        return s->strict && strcmp(de->d_name, "snapshot_done") != 0 &&
               strcmp(de->d_name, "pickled_data") != 0;
    }
    int sub = is_kind(dfd, de->d_name, S_IFDIR) ? open_dir_at(dfd, de->d_name) : -1;
    if (sub < 0)
        return 1;
    int rc = each_entry(sub, leaf_ok, &s->strict);
    close(sub);
    return rc != 0;
}

/* Whether the tree in dfd has the snapshot's shape: strict, a OneFlow
 * snapshot (snapshot_done, directories of meta and out) or empty; else
 * anything this writer may have left half-written. */
static bool snapshot_shaped(int dfd, bool strict)
{
    shape s = {.strict = strict};
    if (each_entry(dfd, top_ok, &s) != 0)
        return false;
    return !strict || s.entries == 0 || s.done;
}

static int unlink_leaf(int dfd, const struct dirent *de, void *arg)
{
    (void)arg;
    return unlinkat(dfd, de->d_name, 0) < 0 ? -1 : 0;
}

static int unlink_top(int dfd, const struct dirent *de, void *arg)
{
    (void)arg;
    if (!is_kind(dfd, de->d_name, S_IFDIR))
        return unlinkat(dfd, de->d_name, 0) < 0 ? -1 : 0;
    int sub = open_dir_at(dfd, de->d_name);
    if (sub < 0)
        return -1;
    int rc = each_entry(sub, unlink_leaf, NULL);
    close(sub);
    return rc != 0 || unlinkat(dfd, de->d_name, AT_REMOVEDIR) < 0 ? -1 : 0;
}

/* Remove the tree name in parent_fd, checked to have the snapshot's shape
 * first (nothing is removed otherwise). */
static int remove_tree(int parent_fd, const char *name, bool strict)
{
    int fd = open_dir_at(parent_fd, name);
    if (fd < 0)
        return -1;
    int rc = snapshot_shaped(fd, strict) ? each_entry(fd, unlink_top, NULL) : -1;
    close(fd);
    if (rc != 0)
        return -1;
    return unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 ? -1 : 0;
}

/* The temporary trees an interrupted write to OUT left: ours, named
 * ".<OUT>.ckptfs-XXXXXX", of the snapshot's shape. */
static int cleanup_one(int dfd, const struct dirent *de, void *arg)
{
    const out_dir *d = arg;
    size_t k = strlen(d->base);
    const char *n = de->d_name;
    struct stat st;
    if (n[0] != '.' || strncmp(n + 1, d->base, k) != 0 ||
        strncmp(n + 1 + k, TMP_TAG, sizeof TMP_TAG - 1) != 0 ||
        strlen(n + 1 + k + sizeof TMP_TAG - 1) != 6 ||
        fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != getuid())
        return 0;
    remove_tree(dfd, n, false);
    return 0;
}

/* ---- OUT as it is ---- */

/* 0 when OUT may be written: absent, an empty directory, or with force a
 * OneFlow snapshot.  *exists: there is one to exchange with. */
static int check_existing(out_dir *d, bool force, bool *exists)
{
    struct stat st;
    *exists = false;
    if (fstatat(d->parent_fd, d->base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : ck_fail_errno(d->err, errno, "%s: cannot stat", d->out);
    if (!S_ISDIR(st.st_mode))
        return ck_fail(d->err, EEXIST, "%s: exists and is not a directory (a OneFlow "
                       "snapshot is a directory): not replaced", d->out);
    int fd = open_dir_at(d->parent_fd, d->base);
    if (fd < 0)
        return ck_fail_errno(d->err, errno, "%s: cannot open", d->out);
    shape s = {.strict = true};
    int rc = each_entry(fd, top_ok, &s);
    close(fd);
    *exists = true;
    if (s.entries == 0 && rc == 0)
        return 0;
    if (rc != 0 || !s.done)
        return ck_fail(d->err, EEXIST, "%s: exists and is not a OneFlow snapshot: not "
                       "replaced", d->out);
    if (!force)
        return ck_fail(d->err, EEXIST, "%s: exists (give -f to replace it)", d->out);
    return 0;
}

/* ---- writing the tree ---- */

/* name/meta and name/out for tensor w.  Made durable all at once before the
 * rename (write_tree's syncfs): an fsync per file and directory is a
 * journal commit each, seconds for a model of a few hundred tensors. */
static int write_tensor(out_dir *d, const char *name, const ck_write_tensor *w, ck_sink *s)
{
    char q[CK_QUOTE_BUF], meta[CK_META_MAX];
    ck_quote(q, w->name, w->name_len);
    if (mkdirat(d->tmp_fd, name, 0755) < 0)
        return ck_fail_errno(d->err, errno, "%s: tensor '%s': cannot create its directory",
                             d->out, q);
    int dfd = open_dir_at(d->tmp_fd, name);
    if (dfd < 0)
        return ck_fail_errno(d->err, errno, "%s: tensor '%s': cannot open its directory",
                             d->out, q);
    int rc = -1, fd = openat(dfd, "out", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    s->fd = fd;
    if (fd < 0)
        goto fail;
    for (size_t i = 0; i < w->n_pieces; i++)
        if (ck_sink_piece(s, &w->pieces[i], 0, w->pieces[i].len) < 0)
            goto out;
    if (close(fd) < 0) {
        fd = -1;
        goto fail;
    }
    size_t len = ck_meta_format(w->dtype, w->dims, w->ndim, meta, sizeof meta);
    fd = openat(dfd, "meta", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || ck_write_all(fd, meta, len) < 0)
        goto fail;
    rc = 0;
    goto out;
fail:
    ck_fail_errno(d->err, errno, "%s: tensor '%s': writing it failed", d->out, q);
out:
    if (fd >= 0)
        close(fd);
    close(dfd);
    return rc;
}

/* ---- the order ---- */

/* A legacy snapshot has no order of its own: OneFlow's legacy load walks
 * os.listdir, and ckptfs reads one in its names' byte order (oneflow_dir.c,
 * list_legacy).  Tensors in another order (a pickled snapshot's state dict,
 * through a .ckpt) are kept in it by a pickled_data that lists them, as
 * flow.save writes one: OneFlow >= 0.6 and ckptfs then read them in that
 * order, each from the directory it names. */

typedef struct of_name {
    char *name;                 /* as a legacy read names the directory */
    size_t len;
} of_name;

/* The name a legacy read gives directory dir: its escapes undone, or dir as
 * it is when escaping would not give it (add_legacy in oneflow_dir.c). */
static int legacy_name(const char *dir, of_name *out)
{
    size_t len = strlen(dir);
    if ((out->name = malloc(len + 1)) == NULL)
        return -1;
    long n = ck_dir_name_decode(dir, len, out->name, len + 1);
    if (n < 0) {
        memcpy(out->name, dir, len + 1);
        n = (long)len;
    }
    out->len = (size_t)n;
    return 0;
}

static int name_cmp(const of_name *x, const of_name *y)
{
    int c = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

static void put_op(ck_wbuf *b, unsigned char op)
{
    ck_wbuf_u8(b, op);
}

/* A str: SHORT_BINUNICODE, or BINUNICODE past 255 bytes. */
static void put_str(ck_wbuf *b, const char *s, size_t n)
{
    if (n < 256) {
        put_op(b, 0x8c);
        ck_wbuf_u8(b, (uint8_t)n);
    } else {
        put_op(b, 'X');
        ck_wbuf_u32(b, (uint32_t)n);
    }
    ck_wbuf_put(b, s, n);
}

/* module.name, by STACK_GLOBAL (protocol 4, as flow.save pickles). */
static void put_global(ck_wbuf *b, const char *module, const char *name)
{
    put_str(b, module, strlen(module));
    put_str(b, name, strlen(name));
    put_op(b, 0x93);
}

/* pickled_data for names[i] in directory dirs[i]: {"protocol_version": 1,
 * "data": OrderedDict([(name, Parameter with state {"path": dir}), ...])},
 * the opcodes flow.save emits (Parameter: NEWOBJ, then BUILD), less its
 * memo and frames, which a reader does not need. */
static int pickle_bytes(const of_name *names, const char *const *dirs, size_t n, ck_wbuf *b)
{
    put_op(b, 0x80);
    ck_wbuf_u8(b, 4);
    put_op(b, '}');
    put_op(b, '(');
    put_str(b, "protocol_version", strlen("protocol_version"));
    put_op(b, 'K');
    ck_wbuf_u8(b, 1);
    put_str(b, "data", 4);
    put_global(b, "collections", "OrderedDict");
    put_op(b, ')');
    put_op(b, 'R');
    put_op(b, '(');
    for (size_t i = 0; i < n; i++) {
        put_str(b, names[i].name, names[i].len);
        put_global(b, "oneflow.nn", "Parameter");
        put_op(b, ')');
        put_op(b, 0x81);
        put_op(b, '}');
        put_str(b, "path", 4);
        put_str(b, dirs[i], strlen(dirs[i]));
        put_op(b, 's');
        put_op(b, 'b');
    }
    put_op(b, 'u');
    put_op(b, 'u');
    put_op(b, '.');
    return b->failed ? -1 : 0;
}

static int name_qcmp(const void *x, const void *y)
{
    return name_cmp(x, y);
}

/* Whether two of names[0..n) are one name (an ONNX initializer "w%const"
 * beside a Constant "w": two directories, one legacy name), which a
 * pickle keyed by name cannot hold.  A sorted copy; false out of memory
 * too (the pickle is then refused by its own check). */
static bool names_clash(const of_name *names, size_t n)
{
    of_name *copy = n > 1 ? malloc(n * sizeof *copy) : NULL;
    bool clash = false;
    if (copy == NULL)
        return false;
    memcpy(copy, names, n * sizeof *copy);
    qsort(copy, n, sizeof *copy, name_qcmp);
    for (size_t i = 1; !clash && i < n; i++)
        clash = name_cmp(&copy[i - 1], &copy[i]) == 0;
    free(copy);
    return clash;
}

/* The pickled_data of the tensors, when their order is not the one a legacy
 * read gives: into *out (malloc'd, *len bytes); *out NULL when none is
 * needed, or when a name is not UTF-8, which a pickle's str cannot hold,
 * or two directories have one name (the snapshot is then read in byte
 * order, as any legacy one). */
static int order_pickle(out_dir *d, const ck_target_args *a, size_t n, unsigned char **out,
                        size_t *len)
{
    const ck_index *ix = &a->m->index;
    *out = NULL;
    of_name *names = calloc(n + 1, sizeof *names);
    const char **dirs = calloc(n + 1, sizeof *dirs);
    int rc = names == NULL || dirs == NULL ? -1 : 0;
    bool sorted = true, utf8 = true;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        dirs[i] = ix->tensors[ix->live[i]].dir_name;
        rc = legacy_name(dirs[i], &names[i]);
        if (rc == 0) {
            utf8 = utf8 && ck_utf8_valid(names[i].name, names[i].len);
            sorted = sorted && (i == 0 || name_cmp(&names[i - 1], &names[i]) < 0);
        }
    }
    ck_wbuf b = {0};
    if (rc == 0 && !sorted && utf8 && !names_clash(names, n)) {
        rc = pickle_bytes(names, dirs, n, &b);
        *out = b.p;
        *len = b.len;
        if (rc < 0)
            free(b.p), *out = NULL;
    }
    for (size_t i = 0; names != NULL && i < n; i++)
        free(names[i].name);
    free(names);
    free(dirs);
    return rc < 0 ? ck_nomem(d->err, d->out) : 0;
}

static int write_tree(out_dir *d, const ck_target_args *a, const ck_write_tensor *w,
                      size_t n)
{
    unsigned char *pickle = NULL;
    size_t pickle_len = 0;
    if (order_pickle(d, a, n, &pickle, &pickle_len) < 0)
        return -1;
    d->pickled = pickle != NULL;
    d->pickle_len = pickle_len;
    const ck_index *ix = &a->m->index;
    ck_sink s = {.path = d->out, .err = d->err, .progress = a->progress};
    s.buf = malloc(CK_SINK_BUF);
    if (s.buf == NULL) {
        free(pickle);
        return ck_nomem(d->err, d->out);
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = write_tensor(d, ix->tensors[ix->live[i]].dir_name, &w[i], &s);
    free(s.buf);
    if (rc < 0) {
        free(pickle);
        return -1;
    }
    if (pickle != NULL) {
        int pfd = openat(d->tmp_fd, CK_ONEFLOW_PICKLE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                         0644);
        rc = pfd < 0 || ck_write_all(pfd, pickle, pickle_len) < 0 ? -1 : 0;
        if ((pfd >= 0 && close(pfd) < 0) || rc < 0) {
            free(pickle);
            return ck_fail_errno(d->err, errno, "%s: writing " CK_ONEFLOW_PICKLE " failed",
                                 d->out);
        }
    }
    free(pickle);
    /* Kept with a pickled_data too: OneFlow 0.5, which has no pickle
     * branch, asserts it (and only warns of pickled_data). */
    int fd = openat(d->tmp_fd, "snapshot_done", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || close(fd) < 0)
        return ck_fail_errno(d->err, errno, "%s: writing snapshot_done failed", d->out);
    /* Every file and directory of the tree, durable (and a write-back
     * error reported) in one call; the rename comes after. */
    if (syncfs(d->tmp_fd) < 0 || fsync(d->tmp_fd) < 0)
        return ck_fail_errno(d->err, errno, "%s: making the new snapshot durable failed",
                             d->out);
    return 0;
}

/* ---- reading it back ---- */

typedef struct checker {
    out_dir *d;
    unsigned char *a, *b;       /* CHUNK bytes each */
} checker;

/* The whole of a small file (at most cap - 1 bytes) into buf. */
static long read_small(int dfd, const char *name, char *buf, size_t cap)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    ssize_t r;
    while (n < cap && (r = read(fd, buf + n, cap - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            close(fd);
            return -1;
        }
        n += (size_t)r;
    }
    close(fd);
    return n < cap ? (long)n : -1;
}

static int check_bytes(checker *c, int fd, const ck_write_tensor *w, const char *q)
{
    uint64_t at = 0;
    for (size_t i = 0; i < w->n_pieces; i++) {
        const ck_piece *p = &w->pieces[i];
        for (uint64_t pos = 0; pos < p->len;) {
            size_t n = p->len - pos < CHUNK ? (size_t)(p->len - pos) : CHUNK;
            const unsigned char *want = c->a;
            if (p->mem != NULL)
                want = (const unsigned char *)p->mem + pos;
            else if (ck_source_read(p->src, c->a, n, p->off + pos, c->d->err) < 0)
                return -1;
            if (pread(fd, c->b, n, (off_t)at) != (ssize_t)n || memcmp(want, c->b, n) != 0)
                return ck_fail(c->d->err, EIO, "%s: tensor '%s': its out reads back "
                               "differently near offset %llu", c->d->out, q,
                               (unsigned long long)at);
            pos += n;
            at += n;
        }
    }
    return 0;
}

static int check_tensor(checker *c, const char *name, const ck_write_tensor *w)
{
    out_dir *d = c->d;
    char q[CK_QUOTE_BUF], text[CK_META_MAX + 1];
    ck_quote(q, w->name, w->name_len);
    int dfd = open_dir_at(d->tmp_fd, name);
    long len = dfd < 0 ? -1 : read_small(dfd, "meta", text, sizeof text);
    ck_meta meta;
    ck_error perr = {0};
    if (len < 0 || ck_meta_parse(text, (size_t)len, &meta, &perr) < 0 ||
        meta.dtype->of_value != w->dtype->of_value || meta.ndim != w->ndim ||
        (w->ndim && memcmp(meta.dims, w->dims, w->ndim * sizeof *w->dims) != 0)) {
        if (dfd >= 0)
            close(dfd);
        return ck_fail(d->err, EIO, "%s: tensor '%s': its meta reads back differently%s%s",
                       d->out, q, perr.msg[0] ? ": " : "", perr.msg);
    }
    int fd = openat(dfd, "out", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    close(dfd);
    struct stat st;
    int rc = fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size != ck_pieces_len(w)
                 ? ck_fail(d->err, EIO, "%s: tensor '%s': its out has not the size written",
                           d->out, q)
                 : check_bytes(c, fd, w, q);
    if (fd >= 0)
        close(fd);
    return rc;
}

static int count_entry(int dfd, const struct dirent *de, void *arg)
{
    (void)dfd;
    (void)de;
    ++*(size_t *)arg;
    return 0;
}

/* pickled_data as written, read back by the reader's own parser: the
 * tensors in the order given, each under its legacy name, at its
 * directory. */
static int check_pickle(out_dir *d, const ck_target_args *a, size_t n)
{
    const ck_index *ix = &a->m->index;
    char *buf = malloc(d->pickle_len + 2);
    if (buf == NULL)
        return ck_nomem(d->err, d->out);
    long got = read_small(d->tmp_fd, CK_ONEFLOW_PICKLE, buf, d->pickle_len + 2);
    ck_pickle_names names = {0};
    int rc = got != (long)d->pickle_len
                 ? ck_fail(d->err, EIO, "%s: the written " CK_ONEFLOW_PICKLE " is not what "
                           "was written", d->out)
                 : ck_pickle_names_parse(buf, (size_t)got, CK_ONEFLOW_PICKLE, &names, d->err);
    bool same = names.n == n;
    for (size_t i = 0; rc == 0 && same && i < n; i++) {
        const char *dir = ix->tensors[ix->live[i]].dir_name;
        of_name want;
        if (legacy_name(dir, &want) < 0) {
            rc = ck_nomem(d->err, d->out);
            break;
        }
        same = strcmp(names.v[i].path, dir) == 0 && strlen(names.v[i].name) == want.len &&
               memcmp(names.v[i].name, want.name, want.len) == 0;
        free(want.name);
    }
    if (rc == 0 && !same)
        rc = ck_fail(d->err, EIO, "%s: the written " CK_ONEFLOW_PICKLE " does not list the "
                     "tensors in order", d->out);
    ck_pickle_names_free(&names);
    free(buf);
    return rc;
}

/* The tree as written, against the tensors: every directory's meta and
 * out, and nothing more at the root than they and snapshot_done. */
static int check_tree(out_dir *d, const ck_target_args *a, const ck_write_tensor *w,
                      size_t n)
{
    const ck_index *ix = &a->m->index;
    checker c = {.d = d, .a = malloc(CHUNK), .b = malloc(CHUNK)};
    int rc = c.a == NULL || c.b == NULL ? ck_nomem(d->err, d->out)
                                        : 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = check_tensor(&c, ix->tensors[ix->live[i]].dir_name, &w[i]);
    size_t entries = 0, want = n + 1 + (d->pickled ? 1 : 0);
    if (rc == 0 && (each_entry(d->tmp_fd, count_entry, &entries) != 0 || entries != want))
        rc = ck_fail(d->err, EIO, "%s: the written snapshot holds %zu entries, not %zu",
                     d->out, entries, want);
    if (rc == 0 && d->pickled && !is_kind(d->tmp_fd, CK_ONEFLOW_PICKLE, S_IFREG))
        rc = ck_fail(d->err, EIO, "%s: the written snapshot has no " CK_ONEFLOW_PICKLE, d->out);
    if (rc == 0 && d->pickled)
        rc = check_pickle(d, a, n);
    if (rc == 0 && !is_kind(d->tmp_fd, "snapshot_done", S_IFREG))
        rc = ck_fail(d->err, EIO, "%s: the written snapshot has no snapshot_done", d->out);
    free(c.a);
    free(c.b);
    return rc;
}

/* ---- the whole ---- */

static int make_tmp(out_dir *d)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/.%s" TMP_TAG "XXXXXX", d->parent, d->base);
    if (n < 0 || (size_t)n >= sizeof path)
        return ck_fail(d->err, ENAMETOOLONG, "%s: name too long", d->out);
    if (mkdtemp(path) == NULL)
        return ck_fail_errno(d->err, errno, "%s: cannot create a directory beside it", d->out);
    const char *tmp = strrchr(path, '/') + 1; /* ".<base>.ckptfs-XXXXXX": fits */
    memcpy(d->tmp, tmp, strlen(tmp) + 1);
    d->tmp_fd = open_dir_at(d->parent_fd, d->tmp);
    if (d->tmp_fd < 0)
        return ck_fail_errno(d->err, errno, "%s: cannot open %s", d->out, path);
    /* mkdtemp's 0700 is for the temporary name; the snapshot gets what
     * mkdir would give it. */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(d->tmp_fd, 0777 & ~mask) < 0)
        return ck_fail_errno(d->err, errno, "%s: cannot set the mode of %s", d->out, path);
    return 0;
}

/* The commit point: the tree takes OUT's name (exchanged with an existing
 * one, then removed), and the parent directory is made durable. */
static int commit(out_dir *d, bool exists)
{
    if (renameat2(d->parent_fd, d->tmp, d->parent_fd, d->base,
                  exists ? RENAME_EXCHANGE : RENAME_NOREPLACE) < 0)
        return ck_fail_errno(d->err, errno, "%s: cannot rename the new snapshot into place",
                             d->out);
    if (fsync(d->parent_fd) < 0)
        return ck_fail_errno(d->err, errno, "%s: cannot sync its directory", d->out);
    close(d->tmp_fd);
    d->tmp_fd = -1;
    /* The old snapshot now has the temporary name; a crash before it is
     * gone leaves it to the next write's cleanup. */
    if (!exists || remove_tree(d->parent_fd, d->tmp, true) == 0)
        d->tmp[0] = '\0';
    return 0;
}

static int of_write_dir(const ck_target_args *a, const ck_write_tensor *w, size_t n,
                        uint64_t bytes, ck_error *err)
{
    out_dir d = {.out = a->out, .parent_fd = -1, .tmp_fd = -1, .err = err};
    bool exists = false;
    int rc = -1;
    if (split_out(&d) < 0 || check_existing(&d, a->force, &exists) < 0)
        goto out;
    each_entry(d.parent_fd, cleanup_one, &d);
    if (make_tmp(&d) < 0)
        goto out;
    if (a->progress != NULL)
        ck_progress_start(a->progress, bytes, a->progress->on, a->progress->out);
    rc = write_tree(&d, a, w, n);
    if (a->progress != NULL)
        ck_progress_end(a->progress);
    if (rc == 0)
        rc = check_tree(&d, a, w, n);
    if (rc == 0)
        rc = commit(&d, exists);
out:
    if (d.tmp_fd >= 0)
        close(d.tmp_fd);
    if (d.tmp[0] != '\0')
        remove_tree(d.parent_fd, d.tmp, false);
    if (d.parent_fd >= 0)
        close(d.parent_fd);
    return rc;
}

/* A directory of that name is the pickle to OneFlow >= 0.6. */
static const char *of_name_refusal(const char *dir, size_t len)
{
    if (len == strlen(CK_ONEFLOW_PICKLE) && memcmp(dir, CK_ONEFLOW_PICKLE, len) == 0)
        return "a OneFlow snapshot cannot hold that name (OneFlow >= 0.6 would read it as its "
               "pickle)";
    return NULL;
}

const ck_target ck_oneflow_target = {
    .holder = "a OneFlow snapshot",
    .type_refusal = of_type_refusal,
    .name_refusal = of_name_refusal,
    .shape = &ck_shape_oneflow,
    .by_dir_name = true,
    .write_dir = of_write_dir,
};
