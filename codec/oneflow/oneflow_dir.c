/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_dir: a OneFlow snapshot directory as one model (oneflow_dir.h).
 *
 * The open lists the tensors (from pickled_data, or from the directory's
 * entries), reads each one's `meta`, checks its `out` against it, and
 * builds an assembled model whose only byte source is every `out` file
 * placed one after another: tensor i's bytes are that source's [base_i,
 * base_i + size_i).  A read opens the file it falls in beneath the
 * directory's descriptor and closes it again, so a snapshot of a million
 * tensors needs one descriptor, and reads from several threads share
 * nothing but that descriptor.
 */
#define _GNU_SOURCE
#include "oneflow_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../collections/model_set.h"
#include "../core/dir_name.h"
#include "oneflow_meta.h"
#include "oneflow_pickle.h"

/* A meta is a few lines; one with comments may be longer, not this long. */
#define META_MAX (64u << 10)

/* One tensor's `out`, as the open found it. */
typedef struct of_file {
    char *rel;              /* "<entry>/out" */
    uint64_t base, size;    /* where it sits in the source */
    dev_t dev;
    ino_t ino;
} of_file;

/* The source of every `out`, in tensor order. */
typedef struct of_source {
    ck_source src;          /* first: what the model holds */
    ck_model_dir *dir;      /* a reference */
    of_file *files;
    size_t n;
} of_source;

typedef struct of_state {
    char notes[96];
} of_state;

/* A tensor to be: its directory, and its name. */
typedef struct entry {
    char *dir;
    char *name;
    size_t name_len;
} entry;

typedef struct opener {
    const char *path;       /* the directory, for messages */
    ck_model_dir *dir;
    ck_model *m;
    entry *e;
    size_t n, cap;
    of_source *src;
    char **listed;          /* pickled: the directories pickled_data lists, sorted */
    size_t n_listed;
    bool probing;           /* only asking whether it is a snapshot: links are skipped */
} opener;

/* ---- the source ------------------------------------------------------- */

static int read_file(of_source *s, const of_file *f, unsigned char *buf, size_t len,
                     uint64_t off, ck_error *err)
{
    char full[PATH_MAX];
    ck_dir_join(s->dir, f->rel, full, sizeof full);
    struct stat st;
    int fd = ck_keep_regular(ck_dir_openat(s->dir, f->rel, O_RDONLY | O_NONBLOCK, 0), &st);
    if (fd < 0 && st.st_mode == 0)
        return ck_fail_errno(err, errno, "%s: cannot open again", full);
    if (fd < 0 || st.st_dev != f->dev || st.st_ino != f->ino ||
        (uint64_t)st.st_size != f->size) {
        if (fd >= 0)
            close(fd);
        return ck_fail(err, EIO, "%s: changed since the snapshot was opened (another file, "
                       "or another size)", full);
    }
    int rc = 0;
    while (rc == 0 && len > 0) {
        ssize_t got = pread(fd, buf, len, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            rc = got < 0 ? ck_fail_errno(err, errno, "%s: offset %llu: read failed", full,
                                         (unsigned long long)off)
                         : ck_fail(err, EIO, "%s: offset %llu: unexpected end of file "
                                   "(file changed?)", full, (unsigned long long)off);
        else {
            buf += got;
            off += (uint64_t)got;
            len -= (size_t)got;
        }
    }
    close(fd);
    return rc;
}

/* The file holding byte off of the source: the last one starting at or
 * before it that is not empty. */
static const of_file *file_at(const of_source *s, uint64_t off)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->files[mid].base <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo > 0 && s->files[lo - 1].size == 0)
        lo--;
    if (lo == 0 || off - s->files[lo - 1].base >= s->files[lo - 1].size)
        return NULL;
    return &s->files[lo - 1];
}

static int of_read_at(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err)
{
    of_source *s = (of_source *)src;
    unsigned char *p = buf;
    while (len > 0) {
        const of_file *f = file_at(s, off);
        if (f == NULL)
            return ck_fail(err, EIO, "%s: offset %llu is in no tensor's out", src->path,
                           (unsigned long long)off);
        uint64_t in = off - f->base, n = f->size - in < len ? f->size - in : len;
        if (read_file(s, f, p, (size_t)n, in, err) < 0)
            return -1;
        p += n;
        off += n;
        len -= (size_t)n;
    }
    return 0;
}

static void of_destroy(ck_source *src)
{
    of_source *s = (of_source *)src;
    for (size_t i = 0; i < s->n; i++)
        free(s->files[i].rel);
    free(s->files);
    ck_dir_unref(s->dir);
}

static const struct ck_source_ops of_ops = {.read_at = of_read_at, .destroy = of_destroy};

/* ---- the format ------------------------------------------------------- */

static const char *of_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    (void)m;
    return t != NULL ? t->type_name : dt->of_name;
}

static bool of_is_data_file(const ck_model *m, uint32_t i)
{
    (void)m;
    (void)i;
    return false; /* the one source is the snapshot itself */
}

static const char *of_notes(const ck_model *m)
{
    return ((const of_state *)m->state)->notes;
}

/* Tensor t's `out`: found by the tensor, not by off alone, since empty
 * files all sit at the offset of the next.  Tensor i's file is files[i]:
 * read_tensors adds them together. */
static const char *of_extent_file(const ck_model *m, const ck_tensor *t, uint64_t off,
                                  uint64_t *in)
{
    /* sources[0] is the snapshot's own; a map's zeros may follow it */
    if (m->n_sources == 0 || m->sources[0]->ops != &of_ops || t < m->index.tensors ||
        t >= m->index.tensors + m->index.count)
        return NULL;
    const of_source *s = (const of_source *)m->sources[0];
    size_t id = (size_t)(t - m->index.tensors);
    if (id >= s->n)
        return NULL;
    const of_file *f = &s->files[id];
    if (off < f->base || off - f->base > f->size)
        return NULL;
    *in = off - f->base;
    return f->rel;
}

const ck_format ck_format_oneflow = {
    .name = "oneflow", .title = "OneFlow snapshot directory", .extension = NULL,
    .free_state = free, .type_name = of_type_name, .is_data_file = of_is_data_file,
    .extent_file = of_extent_file, .notes = of_notes,
};

/* ---- listing the tensors ---------------------------------------------- */

static int add_entry(opener *o, const char *dir, const char *name, size_t len, ck_error *err)
{
    if (o->n == CK_MAX_TENSORS)
        return ck_fail(err, EFBIG, "%s: more than %u tensors", o->path, CK_MAX_TENSORS);
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        entry *e = reallocarray(o->e, cap, sizeof *e);
        if (e == NULL)
            return ck_nomem(err, o->path);
        o->e = e;
        o->cap = cap;
    }
    entry *e = &o->e[o->n];
    e->dir = strdup(dir);
    e->name = malloc(len + 1);
    if (e->dir == NULL || e->name == NULL) {
        free(e->dir);
        free(e->name);
        return ck_nomem(err, o->path);
    }
    memcpy(e->name, name, len);
    e->name[len] = '\0';
    e->name_len = len;
    o->n++;
    return 0;
}

/* What rel is, not following a link: 0 and its mode, or -1 with errno. */
static int mode_of(const opener *o, const char *rel, mode_t *mode)
{
    struct stat st;
    if (ck_dir_stat(o->dir, rel, &st) < 0)
        return -1;
    *mode = st.st_mode;
    return 0;
}

/* Whether entry name (a subdirectory) holds an `out`. */
static bool holds_out(const opener *o, const char *name)
{
    char rel[NAME_MAX + 8];
    mode_t mode;
    snprintf(rel, sizeof rel, "%s/out", name);
    return mode_of(o, rel, &mode) == 0;
}

/* Call fn for each subdirectory of the snapshot holding an `out`; a
 * symbolic link among the entries is refused, files are skipped. */
typedef int (*each_fn)(opener *o, const char *name, ck_error *err);

static int each_tensor_dir(opener *o, each_fn fn, ck_error *err)
{
    DIR *d = ck_list_dir(o->dir->fd);
    if (d == NULL)
        return ck_fail_errno(err, errno, "%s: cannot list the directory", o->path);
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        mode_t mode;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            mode_of(o, de->d_name, &mode) < 0)
            continue; /* gone since listed: not the snapshot's */
        if (S_ISLNK(mode) && !o->probing)
            rc = ck_fail(err, ELOOP, "%s/%s: a symbolic link; ckptfs follows no link in a "
                         "snapshot directory", o->path, de->d_name);
        else if (S_ISDIR(mode) && holds_out(o, de->d_name))
            rc = fn(o, de->d_name, err);
    }
    if (rc == 0 && errno != 0)
        rc = ck_fail_errno(err, errno, "%s: cannot list the directory", o->path);
    closedir(d);
    return rc;
}

static int add_legacy(opener *o, const char *name, ck_error *err)
{
    size_t len = strlen(name);
    char *decoded = malloc(len + 1);
    if (decoded == NULL)
        return ck_nomem(err, o->path);
    long n = ck_dir_name_decode(name, len, decoded, len + 1);
    /* A name that escaping would not give (a '%' of OneFlow's own) is taken
     * as it is. */
    int rc = n < 0 ? add_entry(o, name, name, len, err)
                   : add_entry(o, name, decoded, (size_t)n, err);
    free(decoded);
    return rc;
}

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    int c = memcmp(x->name, y->name, x->name_len < y->name_len ? x->name_len : y->name_len);
    return c != 0 ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static int list_legacy(opener *o, ck_error *err)
{
    if (each_tensor_dir(o, add_legacy, err) < 0)
        return -1;
    qsort(o->e, o->n, sizeof *o->e, cmp_entry);
    return 0;
}

static int read_pickle(opener *o, ck_pickle_names *names, ck_error *err)
{
    char file[PATH_MAX];
    struct stat st;
    ck_dir_join(o->dir, CK_ONEFLOW_PICKLE, file, sizeof file);
    int fd = ck_dir_open_regular(o->dir, CK_ONEFLOW_PICKLE, file, &st, err);
    if (fd < 0)
        return -1;
    unsigned char *buf = NULL;
    int rc = 0;
    if ((uint64_t)st.st_size > CK_PICKLE_MAX_BYTES)
        rc = ck_fail(err, EFBIG, "%s: %llu bytes, more than ckptfs reads (%u)", file,
                     (unsigned long long)st.st_size, CK_PICKLE_MAX_BYTES);
    else if ((buf = malloc((size_t)st.st_size + 1)) == NULL)
        rc = ck_nomem(err, file);
    else if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size)
        rc = ck_fail_errno(err, errno ? errno : EIO, "%s: cannot read", file);
    else
        rc = ck_pickle_names_parse(buf, (size_t)st.st_size, file, names, err);
    free(buf);
    close(fd);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A tensor directory pickled_data does not list is refused, naming it:
 * the pickle is the only place tensors are named, so it would be lost. */
static int listed(opener *o, const char *name, ck_error *err)
{
    const char *key = name;
    if (bsearch(&key, o->listed, o->n_listed, sizeof *o->listed, cmp_str) != NULL)
        return 0;
    char q[CK_QUOTE_BUF];
    return ck_fail(err, EINVAL, "%s/%s: a tensor directory that %s does not list",
                   o->path, ck_quote(q, name, strlen(name)), CK_ONEFLOW_PICKLE);
}

static int list_pickled(opener *o, ck_error *err)
{
    ck_pickle_names names;
    int rc = read_pickle(o, &names, err);
    char **paths = rc < 0 ? NULL : malloc((names.n ? names.n : 1) * sizeof *paths);
    if (rc == 0 && paths == NULL)
        rc = ck_nomem(err, o->path);
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        mode_t mode = 0;
        char q[CK_QUOTE_BUF], qp[CK_QUOTE_BUF];
        const ck_pickle_entry *pe = &names.v[i];
        /* Both from the pickle: quoted, so that the message stays one line. */
        if (mode_of(o, pe->path, &mode) < 0 || !S_ISDIR(mode))
            rc = ck_fail(err, ENOENT, "%s/%s: %s, where %s keeps tensor '%s'", o->path,
                         ck_quote(qp, pe->path, strlen(pe->path)),
                         mode == 0 ? "missing" : ck_file_kind(mode), CK_ONEFLOW_PICKLE,
                         ck_quote(q, pe->name, strlen(pe->name)));
        else
            rc = add_entry(o, pe->path, pe->name, strlen(pe->name), err);
        if (paths != NULL)
            paths[i] = pe->path;
    }
    if (rc == 0) {
        qsort(paths, names.n, sizeof *paths, cmp_str);
        o->listed = paths;
        o->n_listed = names.n;
        rc = each_tensor_dir(o, listed, err);
        o->listed = NULL;
    }
    free(paths);
    ck_pickle_names_free(&names);
    return rc;
}

/* ---- one tensor ------------------------------------------------------- */

static int read_meta(opener *o, const entry *e, ck_meta *meta, ck_error *err)
{
    char rel[NAME_MAX + 8], file[PATH_MAX];
    struct stat st;
    snprintf(rel, sizeof rel, "%s/meta", e->dir);
    ck_dir_join(o->dir, rel, file, sizeof file);
    mode_t mode;
    if (mode_of(o, rel, &mode) < 0 && errno == ENOENT)
        return ck_fail(err, EINVAL, "%s/%s: %s", o->path, e->dir, holds_out(o, e->dir)
                       ? "`out` without `meta`: its shape and type are unknown (OneFlow "
                         "0.3/0.4 took them from the job)" : "no `meta` and no `out`");
    int fd = ck_dir_open_regular(o->dir, rel, file, &st, err);
    if (fd < 0)
        return -1;
    char *text = NULL;
    int rc = 0;
    if ((uint64_t)st.st_size > META_MAX)
        rc = ck_fail(err, EFBIG, "%s: %llu bytes, not a meta", file,
                     (unsigned long long)st.st_size);
    else if ((text = malloc((size_t)st.st_size + 1)) == NULL)
        rc = ck_nomem(err, file);
    else if (pread(fd, text, (size_t)st.st_size, 0) != st.st_size)
        rc = ck_fail_errno(err, errno ? errno : EIO, "%s: cannot read", file);
    else if (ck_meta_parse(text, (size_t)st.st_size, meta, err) < 0) {
        char why[CK_ERROR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        rc = ck_fail(err, EINVAL, "%s: %s", file, why);
    } else if (meta->dtype->kind != CK_KIND_NUMERIC)
        rc = ck_fail(err, ENOTSUP, "%s: data_type %s is not read (its elements are not "
                     "numbers)", file, meta->dtype->of_name);
    free(text);
    close(fd);
    return rc;
}

/* Bytes of meta's elements; -1 when they overflow. */
static int meta_bytes(const ck_meta *meta, uint64_t *out)
{
    return ck_shape_product(&ck_shape_oneflow, meta->dtype, meta->dims, meta->ndim, out) < 0
               ? 0 : -1;
}

static int stat_out(opener *o, const entry *e, const ck_meta *meta, of_file *f, ck_error *err)
{
    char rel[NAME_MAX + 8], file[PATH_MAX];
    struct stat st;
    uint64_t want;
    snprintf(rel, sizeof rel, "%s/out", e->dir);
    ck_dir_join(o->dir, rel, file, sizeof file);
    if (meta_bytes(meta, &want) < 0)
        return ck_fail(err, EINVAL, "%s/%s/meta: a shape of more than 2^64 bytes", o->path,
                       e->dir);
    int fd = ck_dir_open_regular(o->dir, rel, file, &st, err);
    if (fd < 0)
        return -1;
    close(fd);
    if ((uint64_t)st.st_size != want)
        return ck_fail(err, EINVAL, "%s: %llu bytes, where meta's shape and %s make %llu", file,
                       (unsigned long long)st.st_size, meta->dtype->of_name,
                       (unsigned long long)want);
    if ((f->rel = strdup(rel)) == NULL)
        return ck_nomem(err, o->path);
    f->size = want;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    return 0;
}

static int add_tensor(opener *o, const entry *e, const ck_meta *meta, const of_file *f,
                      ck_error *err)
{
    ck_index *ix = &o->m->index;
    long id = ck_index_add(ix);
    char *name = ck_arena_strndup(&ix->arena, e->name, e->name_len);
    int64_t *dims = ck_arena_alloc(&ix->arena, (meta->ndim ? meta->ndim : 1) * sizeof *dims);
    if (id < 0 || name == NULL || dims == NULL)
        return ck_nomem(err, o->path);
    memcpy(dims, meta->dims, meta->ndim * sizeof *dims);
    ix->tensors[id] = (ck_tensor){.name = name, .name_len = (uint32_t)e->name_len,
                                  .type_name = meta->dtype->of_name, .dtype = meta->dtype,
                                  .dims = dims, .ndim = meta->ndim, .nbytes = f->size,
                                  .ext0 = {.off = f->base, .len = f->size, .src = 0},
                                  .n_ext = 1, .read_only = true};
    return 0;
}

static int read_tensors(opener *o, ck_error *err)
{
    of_source *s = o->src;
    if ((s->files = calloc(o->n ? o->n : 1, sizeof *s->files)) == NULL)
        return ck_nomem(err, o->path);
    uint64_t base = 0;
    for (size_t i = 0; i < o->n; i++) {
        ck_meta meta;
        of_file *f = &s->files[i];
        if (o->e[i].name_len > UINT32_MAX)
            return ck_fail(err, EINVAL, "%s/%s: a name too long", o->path, o->e[i].dir);
        if (read_meta(o, &o->e[i], &meta, err) < 0 || stat_out(o, &o->e[i], &meta, f, err) < 0)
            return -1;
        s->n++;
        f->base = base;
        if (__builtin_add_overflow(base, f->size, &base))
            return ck_fail(err, EFBIG, "%s: more than 2^64 bytes of tensors", o->path);
        if (add_tensor(o, &o->e[i], &meta, f, err) < 0)
            return -1;
    }
    s->src.size = base;
    return 0;
}

/* ---- the model -------------------------------------------------------- */

static of_source *new_source(opener *o, ck_error *err)
{
    of_source *s = calloc(1, sizeof *s);
    char *path = strdup(o->path);
    if (s == NULL || path == NULL) {
        free(s);
        free(path);
        ck_nomem(err, o->path);
        return NULL;
    }
    s->src = (ck_source){.ops = &of_ops, .path = path, .fd = -1, .wd = -1};
    s->dir = ck_dir_ref(o->dir);
    return s;
}

static int build(opener *o, bool pickled, bool done, ck_error *err)
{
    of_state *state = calloc(1, sizeof *state);
    if (state == NULL)
        return ck_nomem(err, o->path);
    o->m->state = state;
    int rc = pickled ? list_pickled(o, err) : list_legacy(o, err);
    if (rc == 0 && (o->src = new_source(o, err)) == NULL)
        rc = -1;
    if (rc == 0)
        rc = read_tensors(o, err);
    if (o->src != NULL && ck_model_add_source(o->m, &o->src->src, err) < 0)
        rc = -1; /* closed by the call */
    else if (o->src != NULL)
        o->src->src.serial = NULL; /* it keeps no state between reads: threads may share it */
    if (rc < 0)
        return -1;
    snprintf(state->notes, sizeof state->notes, ", %s%s", pickled ? "pickled_data"
             : "legacy layout", done ? ", snapshot_done" : "");
    return ck_index_finalize(&o->m->index, o->path, err);
}

static void opener_free(opener *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free(o->e[i].dir);
        free(o->e[i].name);
    }
    free(o->e);
}

/* The snapshot directory d as a model named shown (both the caller's). */
static ck_model *open_in(ck_model_dir *d, const char *shown, ck_error *err)
{
    ck_model *m = ck_model_assembled(d, shown, &ck_format_oneflow, err);
    opener o = {.path = shown, .dir = d, .m = m};
    mode_t mode;
    if (m != NULL) {
        bool pickled = mode_of(&o, CK_ONEFLOW_PICKLE, &mode) == 0;
        bool done = mode_of(&o, CK_ONEFLOW_DONE, &mode) == 0;
        if (build(&o, pickled, done, err) < 0) {
            ck_model_close(m);
            m = NULL;
        }
    }
    opener_free(&o);
    return m;
}

static int stat_snapshot(int fd, struct stat *all);

/* Its attributes are stat_snapshot's, as a run lists it, so that a run's
 * snapshot is what a mount of the directory shows; the directory's own
 * alone for a layout no run lists (an nn.Graph save, out files alone). */
ck_model *ck_oneflow_open(const char *path, ck_error *err)
{
    char *shown = ck_path_trimmed(path);
    if (shown == NULL) {
        ck_nomem(err, path);
        return NULL;
    }
    struct stat st;
    ck_model_dir *d = ck_dir_itself(shown, &st, err);
    ck_model *m = d == NULL ? NULL : open_in(d, shown, err);
    if (m != NULL && stat_snapshot(d->fd, &m->st) < 0)
        m->st = st;
    ck_dir_unref(d); /* the model holds it */
    free(shown);
    return m;
}

/* ---- recognising a snapshot ------------------------------------------- */

static int found(opener *o, const char *name, ck_error *err)
{
    (void)o;
    (void)name;
    (void)err;
    return 1; /* stops the listing */
}

bool ck_oneflow_dir_path(const char *path)
{
    struct stat st;
    ck_error err;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return false;
    ck_model_dir *d = ck_dir_itself(path, &st, &err);
    if (d == NULL)
        return false;
    opener o = {.path = path, .dir = d, .probing = true};
    mode_t mode;
    bool yes = mode_of(&o, CK_ONEFLOW_PICKLE, &mode) == 0 ||
               mode_of(&o, CK_ONEFLOW_DONE, &mode) == 0 || each_tensor_dir(&o, found, &err) > 0;
    ck_dir_unref(d);
    return yes;
}

/* Read-only, and nothing to watch: each read checks that its `out` is still
 * the file indexed. */
static ck_model *open_oneflow(const char *path, const ck_collection_opts *o, ck_error *err)
{
    (void)o; /* a snapshot is never encrypted */
    return ck_oneflow_open(path, err);
}

/* ---- in a training run's directory ------------------------------------ */

/* The files OneFlow's writers write last into a snapshot directory:
 * - snapshot_done, the legacy layout's: flow.checkpoint.save creates it
 *   after every variable's out and meta (oneflow@v0.4.0
 *   oneflow/python/framework/check_point_v2.py:308, "indicates that the
 *   save process finished normally"), flow.save of 0.5 too
 *   (oneflow@v0.5.0 python/oneflow/framework/check_point_v2.py:200), and
 *   the C++ SnapshotWriter::Close of 0.1-0.2 (oneflow@v0.2.0
 *   oneflow/core/persistence/snapshot.cpp:107).  OneFlow's own
 *   SimpleCheckPointManager counts a snapshot only once it is there, a
 *   regular file (oneflow@v0.2.0 oneflow/python/framework/check_point.py:
 *   161-165).
 * - pickled_data, the pickled layout's: flow.save pickles the object
 *   first, which writes every tensor_<N>/ (tensor_getstate, oneflow@v0.6.0
 *   python/oneflow/framework/check_point_v2.py:159-184), and writes the
 *   pickle's bytes to pickled_data after (same file, L326-331; v0.9.0
 *   L522-527; v1.0.0 L720-728 with save_as_external_data).  No
 *   snapshot_done then. */
static const char *const last_files[] = {CK_ONEFLOW_DONE, CK_ONEFLOW_PICKLE};

/* Which of last_files the snapshot directory open as fd holds, a regular
 * file (no link followed), its attributes into *st; -1 when neither: a
 * legacy snapshot still being written, or one whose writer gives no
 * signal (nn.Graph's flow.save writes model.mlir first, v0.6.0 L317-320;
 * converters' out-only trees), which a run does not list: nothing says
 * when it is whole. */
static int last_written(int fd, struct stat *st)
{
    for (int i = 0; i < 2; i++)
        if (fstatat(fd, last_files[i], st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st->st_mode))
            return i;
    return -1;
}

/* Add one's size to all's, and take its mtime when newer: not its mode,
 * nor its owner. */
static void add_file(struct stat *all, const struct stat *one)
{
    mode_t mode = all->st_mode;
    ck_mset_stat_join(all, one);
    all->st_mode = mode;
}

/* The attributes of the snapshot directory open as fd, as a mount of it
 * shows them and a run lists it: the directory's own mode, owner and
 * inode (who may read a tensor is then its `out`'s business, as on disk),
 * with the size of the files the open reads (the last-written one, the
 * other, every subdirectory's out and meta) and the newest mtime of
 * those and the directory's.  So a snapshot is read-only when nobody may
 * write the directory, where no file can be added any more.  -1 when it is
 * no snapshot of a run (last_written) or cannot be listed.  No link is
 * followed. */
static int stat_snapshot(int fd, struct stat *all)
{
    static const char *const files[] = {"out", "meta"};
    struct stat st;
    int i = last_written(fd, &st);
    if (i < 0 || fstat(fd, all) < 0)
        return -1;
    all->st_size = 0;
    add_file(all, &st);
    if (fstatat(fd, last_files[1 - i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        add_file(all, &st);
    DIR *d = ck_list_dir(fd);
    if (d == NULL)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if ((de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) ||
            strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        int tfd = openat(dirfd(d), de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (tfd < 0)
            continue; /* a file, a link, or gone: no tensor's */
        for (size_t k = 0; k < 2; k++)
            if (fstatat(tfd, files[k], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
                add_file(all, &st);
        close(tfd);
    }
    closedir(d);
    return 0;
}

/* Whether name beneath dfd is a snapshot directory (not a link, not a dot
 * name: ckptfs's own, editors') whose writer is done with its tensors:
 * it holds the file written last (last_written). */
static bool probe_oneflow_at(int dfd, const char *name)
{
    if (name[0] == '.')
        return false;
    int fd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false; /* not a directory (no link is followed), or gone */
    struct stat st;
    bool yes = last_written(fd, &st) >= 0;
    close(fd);
    return yes;
}

static int stat_oneflow_at(int dfd, const char *name, struct stat *all)
{
    int fd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1; /* gone or replaced since the probe */
    int rc = stat_snapshot(fd, all);
    close(fd);
    return rc;
}

/* Opened as by path, its attributes those stat_oneflow_at listed it with
 * (a run takes a model whose attributes differ as replaced since), and
 * refused when it has no file to judge it by any more. */
static ck_model *open_oneflow_at(int dfd, const char *below, const char *path,
                                 const ck_collection_opts *o, ck_error *err)
{
    (void)o; /* a snapshot is never encrypted, and nothing is watched */
    ck_model_dir *d = ck_dir_beneath(dfd, below, path, err);
    ck_model *m = d == NULL ? NULL : open_in(d, path, err);
    if (m != NULL && stat_snapshot(d->fd, &m->st) < 0) {
        ck_fail(err, ENOENT, "%s: no %s or %s any more: no longer a whole snapshot", path,
                CK_ONEFLOW_DONE, CK_ONEFLOW_PICKLE);
        ck_model_close(m);
        m = NULL;
    }
    ck_dir_unref(d); /* the model holds it */
    return m;
}

/* A snapshot is one of a run once its last file is there (probe_at), and
 * complete then as a file is, judged by stat_snapshot's attributes: its
 * directory read-only, or its files and directory unchanged for the run's
 * settle time (the file written last may still be being written).
 * No marker: snapshot_done and pickled_data start with no '.', so the
 * run's watcher heeds them anyway, and a marker only exempts a dot name
 * from its filter (collection.h, mount/run_events.c take_event).
 * No number: names are free (flow.save(path)), and
 * SimpleCheckPointManager's, its prefix ("snapshot_" by default,
 * oneflow@v0.2.0 oneflow/python/framework/check_point.py:151) and
 * strftime("%Y%m%d_%H%M%S_%f") (L188), hold a time of 20 digits, past
 * 2^64, whose order it takes by name (L167 sorted, L169-174 the last): a
 * run orders by time, then by the last name, which agrees. */
static const ck_collection_done oneflow_done = {
    .stat_at = stat_oneflow_at,
};

/* pickled_data: the names of a snapshot's tensor_<N> directories. */
static const ck_names_file pickled_data = {
    .name = CK_ONEFLOW_PICKLE, .max_bytes = CK_PICKLE_MAX_BYTES,
    .parse = ck_pickle_names_parse, .free_names = ck_pickle_names_free,
};

const ck_collection ck_collection_oneflow = {
    .name = "oneflow", .title = "a OneFlow snapshot directory", .probe = ck_oneflow_dir_path,
    .open = open_oneflow, .probe_at = probe_oneflow_at, .open_at = open_oneflow_at,
    .done = &oneflow_done, .names_file = &pickled_data,
};
