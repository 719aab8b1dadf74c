/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model: one model file opened as the format and envelope kinds its caller
 * chose (model.h); the registry (registry.c) chooses them by the file's
 * name and calls in here, so this core never calls up into the table.
 *
 * ck_model_read's sparse strided gathers (a transpose) are read through a
 * window dealt out to the runs it holds, else run by run, so a read's
 * memory stays bounded (the rule is at SPARSE_SLACK and WINDOW): a 16 MiB
 * transpose reads whole in 0.16 s (2.42 s a run at a time); a 256 MiB one
 * still costs a call per element (a FUSE read of 128 KiB covers every row
 * of its storage).  Transposed views in state dicts are rare, and a copy
 * would break "never a copy".
 */
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "storage.h"

const char *ck_model_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    return m->format->type_name(m, t, dt);
}

const char *ck_model_metadata(const ck_model *m)
{
    return m->format->metadata == NULL ? NULL : m->format->metadata(m);
}

int ck_model_may_remove(ck_model *m, uint32_t id, const char *shown, ck_error *err)
{
    return m->format->may_remove == NULL ? 0 : m->format->may_remove(m, id, shown, err);
}

/* A loaded saved index's checks (ck_index_hooks); none for an index read
 * from the file. */
static int saved_check(const ck_model *m, const ck_tensor *t, ck_error *err)
{
    return m->saved != NULL ? m->ix->check(m, t, err) : 0;
}

static int saved_check_all(const ck_model *m, ck_error *err)
{
    return m->saved != NULL ? m->ix->check_all(m, err) : 0;
}

static ck_envelope_opts envelope_opts(const ck_model *m, const ck_open_opts *o,
                                      const ck_envelope_kind *const *kinds)
{
    return (ck_envelope_opts){.kinds = kinds, .args = o ? o->envelope : NULL,
                              .key_if_encrypted = o && o->key_if_encrypted,
                              .tmp_max = o ? o->tmp_max : 0,
                              .progress = o ? o->progress : NULL, .cache = m->cache};
}

long ck_model_add_source(ck_model *m, ck_source *src, ck_error *err)
{
    if (src->dir == NULL)
        src->dir = m->dir;
    if (src->fd < 0)
        src->serial = &m->lock; /* it decodes: see ck_model.lock */
    if (m->n_sources == CK_MAX_SOURCES) {
        ck_fail(err, EMFILE, "%s: more than %d data files", m->path, CK_MAX_SOURCES);
        ck_source_close(src);
        return -1;
    }
    if (m->n_sources == m->cap_sources) {
        uint32_t cap = m->cap_sources ? m->cap_sources * 2 : 4;
        ck_source **s = realloc(m->sources, cap * sizeof *s);
        if (s == NULL) {
            ck_nomem(err, m->path);
            ck_source_close(src);
            return -1;
        }
        m->sources = s;
        m->cap_sources = cap;
    }
    m->sources[m->n_sources] = src;
    return (long)m->n_sources++;
}

long ck_model_add_data_file(ck_model *m, ck_source *src, ck_error *err)
{
    if (!m->format->data_files_encrypted || !ck_envelope_wraps_data_files(&m->env))
        return ck_model_add_source(m, src, err);
    /* MindSpore encrypts every file of a split model, and its loader
     * decrypts every one. */
    src = ck_envelope_open_data_file(src, &m->env, m->path, m->cache, err);
    return src == NULL ? -1 : ck_model_add_source(m, src, err);
}

long ck_model_open_data_file(ck_model *m, const char *rel, ck_error *err)
{
    char full[PATH_MAX];
    struct stat st = {0};
    ck_dir_join(m->dir, rel, full, sizeof full);
    int fd;
    if (m->n_overrides == 0) {
        if ((fd = ck_dir_open_regular(m->dir, rel, NULL, &st, err)) < 0)
            return -1;
    } else { /* a save's new file (a new set's shard) is read before it has its name */
        fd = ck_dir_openat(m->dir, rel, O_RDONLY | O_NONBLOCK, 0);
        fd = ck_keep_regular(ck_override_fd(m->overrides, m->n_overrides, full, fd), &st);
        if (fd < 0)
            return st.st_mode != 0 ? ck_fail(err, EINVAL, "%s: is %s, not a regular file", full,
                                             ck_file_kind(st.st_mode))
                                   : ck_fail_errno(err, errno, "%s: cannot open", full);
    }
    /* Another name of a file already open (a hard link, or the model
     * itself): a save would write one name and lose the edits made
     * through the other. */
    for (uint32_t i = 0; i < m->n_sources; i++) {
        const ck_source *s = m->sources[i];
        if (s->dev != st.st_dev || s->ino != st.st_ino)
            continue;
        close(fd);
        return ck_fail(err, EINVAL, "%s: the same file as %s (a hard link); a save would lose "
                       "the edits made through one of the names", full,
                       i == 0 ? m->path : s->path);
    }
    ck_source *src = ck_source_adopt_fd(fd, full, err);
    return src == NULL ? -1 : ck_model_add_data_file(m, src, err);
}

static ck_model *model_alloc(ck_model_dir *dir, const char *path, const ck_open_opts *o,
                             ck_error *err)
{
    ck_model *m = calloc(1, sizeof *m);
    if (m == NULL || (m->path = strdup(path)) == NULL) {
        free(m);
        ck_nomem(err, path);
        return NULL;
    }
    if (o != NULL && o->new_metadata != NULL &&
        (m->new_metadata = strdup(o->new_metadata)) == NULL) {
        free(m->path);
        free(m);
        ck_nomem(err, path);
        return NULL;
    }
    m->dir = ck_dir_ref(dir);
    m->file_wd = -1;
    m->max_shard_size = o ? o->max_shard_size : 0;
    pthread_mutex_init(&m->lock, NULL);
    ck_index_init(&m->index);
    size_t budget = o && o->cache_size ? o->cache_size : CK_CACHE_SIZE_DEFAULT;
    m->cache = ck_page_cache_new(budget, true, err);
    if (m->cache == NULL) {
        ck_model_close(m);
        return NULL;
    }
    return m;
}

/* A save can encrypt the model file on its own, not a model with data
 * files MindSpore would also expect encrypted. */
static int check_fresh_encryption(const ck_model *m, ck_error *err)
{
    if (!m->env.fresh)
        return 0;
    if (!m->format->encryptable)
        return ck_fail(err, ENOTSUP, "%s: -o enc_mode: MindSpore encrypts .ckpt and .mindir "
                       "models, not %s", m->path, m->format->title);
    for (uint32_t i = 1; i < m->n_sources; i++)
        if (ck_model_is_data_file(m, i))
            return ck_fail(err, ENOTSUP, "%s: -o enc_mode: the model has data files (%s); "
                           "encrypting a split MindIR is not supported", m->path,
                           m->sources[i]->path);
    return 0;
}

bool ck_model_is_data_file(const ck_model *m, uint32_t i)
{
    return i > 0 && i < m->n_sources && !m->sources[i]->computed &&
           m->format->is_data_file(m, i);
}

/* Watch a file of the model for writes by other programs (file_watch.h).
 * A write between its open and the watch would go unseen, so a file that
 * no longer matches what was opened counts as written from the start. */
static void watch_file(const ck_model *m, ck_source *src)
{
    struct stat st;
    src->wd = ck_watch_add(m->dir->watch, src->fd);
    if (src->wd < 0)
        return;
    src->watch = m->dir->watch;
    if (fstat(src->fd, &st) < 0 || (uint64_t)st.st_size != src->file_size ||
        st.st_mtim.tv_sec != src->mtime.tv_sec || st.st_mtim.tv_nsec != src->mtime.tv_nsec)
        ck_watch_mark(src->watch, src->wd);
}

/* Watch the file at the model's name when it is the one m read (a watch
 * is on the inode: the descriptor opened for it may go).  sources[0] may
 * be a decrypting or decompressing view with no file of its own. */
static void watch_model_file(ck_model *m)
{
    struct stat st;
    int fd = ck_dir_openat(m->dir, m->dir->base, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, 0);
    if (fd < 0)
        return;
    if (fstat(fd, &st) == 0 && st.st_dev == m->st.st_dev && st.st_ino == m->st.st_ino) {
        m->file_wd = ck_watch_add(m->dir->watch, fd);
        if (m->file_wd >= 0 && ((uint64_t)st.st_size != (uint64_t)m->st.st_size ||
                                st.st_mtim.tv_sec != m->st.st_mtim.tv_sec ||
                                st.st_mtim.tv_nsec != m->st.st_mtim.tv_nsec))
            ck_watch_mark(m->dir->watch, m->file_wd);
    }
    close(fd);
}

/* The file rel beneath d as it is now, when it is still the file of that
 * identity and size: 0, else -1. */
static int stat_same(const ck_model_dir *d, const char *rel, dev_t dev, ino_t ino, uint64_t size,
                     struct stat *st)
{
    if (rel == NULL || ck_dir_stat(d, rel, st) < 0)
        return -1;
    return st->st_dev == dev && st->st_ino == ino && (uint64_t)st->st_size == size ? 0 : -1;
}

/* A save's read-back recorded its files' mtimes while they were still
 * open for writing.  s3fs reports the creation second for such a file and
 * the upload's once it is closed, and shared storage has no watch to tell
 * a write from a touch: each file's mtime is the placed file's (its
 * identity and size unchanged), or the next check calls it a write. */
static void adopt_placed_mtimes(ck_model *m)
{
    pthread_mutex_lock(&m->lock);
    struct stat st;
    if (stat_same(m->dir, m->dir->base, m->st.st_dev, m->st.st_ino, (uint64_t)m->st.st_size,
                  &st) == 0)
        m->st.st_mtim = st.st_mtim;
    /* Every source on a file, wrappers too (they copy their file's). */
    for (uint32_t i = 0; i < m->n_sources; i++)
        for (ck_source *s = m->sources[i]; s != NULL; s = s->inner) {
            const ck_model_dir *d = s->dir != NULL ? s->dir : m->dir;
            if (s->dev != 0 && stat_same(d, ck_dir_rel(d, s->path), s->dev, s->ino,
                                         s->file_size, &st) == 0)
                s->mtime = st.st_mtim;
        }
    pthread_mutex_unlock(&m->lock);
}

void ck_model_watch_files(ck_model *m)
{
    bool placed = m->unplaced;
    m->unplaced = false;
    if (m->n_sources == 0 || (!placed && m->dir->watch == NULL))
        return;
    /* No watch where it cannot see every writer (file_watch.c): nor an
     * open of the model there to make one. */
    if (ck_storage_shared(m->dir->fd)) {
        if (placed)
            adopt_placed_mtimes(m);
        return;
    }
    if (m->dir->watch == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    if (m->file_wd < 0)
        watch_model_file(m);
    for (uint32_t i = 1; i < m->n_sources; i++)
        if (ck_model_is_data_file(m, i) && m->sources[i]->fd >= 0 && m->sources[i]->wd < 0)
            watch_file(m, m->sources[i]);
    pthread_mutex_unlock(&m->lock);
}

/* The model file, through its directory's descriptor (a regular file,
 * never a link), or the descriptor an override gives for it. */
static ck_source *open_model_file(ck_model *m, const char *path, ck_error *err)
{
    const ck_model_dir *dir = m->dir;
    int fd;
    if (m->n_overrides == 0) {
        fd = ck_dir_open_regular(dir, dir->base, path, &m->st, err); /* named as given */
    } else {
        fd = ck_dir_openat(dir, dir->base, O_RDONLY | O_NONBLOCK, 0);
        fd = ck_keep_regular(ck_override_fd(m->overrides, m->n_overrides, path, fd), &m->st);
        if (fd < 0) {
            if (m->st.st_mode != 0)
                ck_fail(err, EINVAL, "%s: is %s, not a regular file", path,
                        ck_file_kind(m->st.st_mode));
            else
                ck_fail_errno(err, errno, "%s: cannot open", path);
            return NULL;
        }
    }
    ck_source *src = fd < 0 ? NULL : ck_source_adopt_fd(fd, path, err);
    if (src != NULL && m->n_overrides == 0) { /* a save's files are read once */
        watch_file(m, src);
        m->file_wd = src->wd;
    }
    return src;
}

ck_model *ck_model_open_file(ck_model_dir *dir, const char *path, const ck_format *f,
                             const ck_envelope_kind *const *kinds, const ck_index_hooks *ix,
                             const ck_open_opts *opts, ck_error *err)
{
    ck_model *m = model_alloc(dir, path, opts, err);
    if (m == NULL)
        return NULL;
    m->format = f;
    m->ix = ix;
    if (opts != NULL) {
        m->overrides = opts->overrides;
        m->n_overrides = opts->n_overrides;
        m->unplaced = opts->n_overrides > 0;
    }
    ck_source *src = open_model_file(m, path, err);
    if (src == NULL)
        goto fail;
    if (src->size == 0) {
        ck_fail(err, EINVAL, "%s: empty file (0 bytes)", path);
        ck_source_close(src);
        goto fail;
    }
    ck_envelope_opts eo = envelope_opts(m, opts, kinds);
    if ((src = ck_envelope_open(src, &eo, &m->env, err)) == NULL ||
        ck_model_add_source(m, src, err) < 0)
        goto fail;
    if (src->size == 0) {
        ck_fail(err, EINVAL, "%s: empty content (0 bytes)", path);
        goto fail;
    }
    /* A saved index of this very file stands for the reader's pass over it. */
    bool loaded = ix != NULL && ix->load(m, opts) == 1;
    if (!loaded && m->format->open(m, opts, err) < 0) {
        ck_envelope_note_plaintext(&m->env, err); /* its offsets are the plaintext's */
        goto fail;
    }
    if (check_fresh_encryption(m, err) < 0 ||
        (!loaded && ck_index_finalize(&m->index, path, err) < 0))
        goto fail;
    if (!loaded)
        if (ix != NULL)
            ix->store(m, opts);
    for (uint32_t i = 1; i < m->n_sources && m->n_overrides == 0; i++)
        if (ck_model_is_data_file(m, i) && m->sources[i]->fd >= 0)
            watch_file(m, m->sources[i]);
    m->overrides = NULL; /* the caller's, valid only during the open */
    m->n_overrides = 0;
    return m;

fail:
    ck_model_close(m);
    return NULL;
}

ck_model *ck_model_assembled(ck_model_dir *dir, const char *path, const ck_format *f,
                             ck_error *err)
{
    ck_model *m = model_alloc(dir, path, NULL, err);
    if (m != NULL)
        m->format = f;
    return m;
}

ck_model *ck_model_new(ck_model_dir *dir, const char *path, const ck_format *f,
                       const ck_envelope_kind *wrap, const ck_open_opts *opts, ck_error *err)
{
    ck_model *m = model_alloc(dir, path, opts, err);
    if (m == NULL)
        return NULL;
    m->format = f;
    ck_envelope_opts eo = envelope_opts(m, opts, NULL);
    if (wrap != NULL && wrap->fresh(&eo, &m->env, path, err) < 0) {
        ck_model_close(m);
        return NULL;
    }
    m->st.st_mode = S_IFREG | 0644;
    m->st.st_uid = getuid();
    m->st.st_gid = getgid();
    clock_gettime(CLOCK_REALTIME, &m->st.st_mtim);
    if (ck_index_finalize(&m->index, path, err) < 0) {
        ck_model_close(m);
        return NULL;
    }
    return m;
}

void ck_model_close(ck_model *m)
{
    if (m == NULL)
        return;
    if (m->state != NULL)
        m->format->free_state(m->state); /* first: it may borrow the index's names */
    for (uint32_t i = 0; i < m->n_sources; i++)
        ck_source_close(m->sources[i]);
    free(m->sources);
    ck_page_cache_free(m->cache);
    ck_envelope_close(&m->env); /* wipes its key */
    ck_index_free(&m->index);
    free(m->mapped_by);
    if (m->saved != NULL)
        m->ix->free(m->saved);
    ck_dir_unref(m->dir);
    pthread_mutex_destroy(&m->lock);
    free(m->new_metadata);
    free(m->path);
    free(m);
}

/* "16M" and the like: bytes; K, M, G, T or KiB... (binary); KB, MB, GB, TB
 * (decimal, as Hugging Face's "5GB"). */
int ck_parse_size(const char *text, size_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t unit;
    } units[] = {
        {"", 1},
        {"K", 1ull << 10}, {"M", 1ull << 20}, {"G", 1ull << 30}, {"T", 1ull << 40},
        {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40},
        {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull}, {"TB", 1000000000000ull},
    };
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *text == '-' || v == 0)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].suffix) == 0) {
            if (v > SIZE_MAX / units[i].unit)
                return -1;
            *out = (size_t)(v * units[i].unit);
            return 0;
        }
    return -1;
}

struct read_ctx {
    const ck_model *m;
    unsigned char *dst;
    ck_error *err;
};

static int read_piece(void *ctx, uint32_t src, uint64_t src_off, size_t len)
{
    struct read_ctx *c = ctx;
    if (ck_source_read(c->m->sources[src], c->dst, len, src_off, c->err) < 0)
        return -1;
    c->dst += len;
    return 0;
}

/* The part [*a, *b) of run q that [off, off + size) covers. */
static void run_part(uint64_t q, uint64_t run, uint64_t off, size_t size, uint64_t *a,
                     uint64_t *b)
{
    uint64_t start = q * run, end = start + run;
    *a = (off > start ? off : start) - start;
    *b = (off + size < end ? off + size : end) - start;
}

/* A strided view's runs may lie far apart (a transpose reads a column of
 * its storage per row): when the spans would be more than twice the read
 * and this slack, they are not read whole into one buffer. */
#define SPARSE_SLACK (1u << 20)
/* Then the spans are read through a window of this size, each window
 * dealt out to the runs it holds, as long as that reads fewer bytes than
 * a read per run would cost (a system call is worth about this many bytes
 * copied); otherwise each run is read on its own. */
#define WINDOW (4u << 20)
#define BYTES_PER_CALL 4096u

static int runs_read(const ck_model *m, const ck_tensor *t, unsigned char *dst, size_t size,
                     uint64_t off, const uint32_t *slice, const uint64_t *at, uint64_t runs,
                     ck_error *err)
{
    uint64_t run = t->gather->run, q0 = off / run;
    for (uint64_t i = 0; i < runs; i++) {
        uint64_t a, b;
        const ck_extent *e = ck_tensor_ext(t, slice[i]);
        run_part(q0 + i, run, off, size, &a, &b);
        if (ck_source_read(m->sources[e->src], dst, b - a, e->off + at[i] + a, err) < 0)
            return -1;
        dst += b - a;
    }
    return 0;
}

/* Window [w, w + len) of slice k, read into buf, dealt out to the parts of
 * the runs that fall in it. */
static void deal_window(const ck_tensor *t, unsigned char *dst, size_t size, uint64_t off,
                        const uint32_t *slice, const uint64_t *at, uint64_t runs, uint32_t k,
                        const unsigned char *buf, uint64_t w, uint64_t len)
{
    uint64_t run = t->gather->run, q0 = off / run, pos = 0;
    for (uint64_t i = 0; i < runs; i++) {
        uint64_t a, b;
        run_part(q0 + i, run, off, size, &a, &b);
        uint64_t s = at[i] + a, e = at[i] + b;
        uint64_t cs = s > w ? s : w, ce = e < w + len ? e : w + len;
        if (slice[i] == k && cs < ce)
            memcpy(dst + pos + (cs - s), buf + (cs - w), ce - cs);
        pos += b - a;
    }
}

static int windowed_read(const ck_model *m, const ck_tensor *t, unsigned char *dst, size_t size,
                         uint64_t off, const uint32_t *slice, const uint64_t *at, uint64_t runs,
                         const uint64_t *lo, const uint64_t *hi, ck_error *err)
{
    unsigned char *buf = malloc(WINDOW);
    if (buf == NULL)
        return ck_nomem(err, m->path);
    int rc = 0;
    for (uint32_t k = 0; rc == 0 && k < t->n_ext; k++) {
        const ck_extent *e = ck_tensor_ext(t, k);
        for (uint64_t w = lo[k]; rc == 0 && w < hi[k]; w += WINDOW) {
            uint64_t len = hi[k] - w < WINDOW ? hi[k] - w : WINDOW;
            rc = ck_source_read(m->sources[e->src], buf, len, e->off + w, err);
            if (rc == 0)
                deal_window(t, dst, size, off, slice, at, runs, k, buf, w, len);
        }
    }
    free(buf);
    return rc;
}

/* A gathered tensor's bytes with one read per slice, not one per run:
 * within a range, each slice's runs are consecutive rows of it, so its
 * part is one span of its bytes (tensor_index.h), read whole and then
 * dealt out to the runs.  Short runs (a slice row of a few bytes) would
 * otherwise cost a read each. */
static int gather_read(const ck_model *m, const ck_tensor *t, unsigned char *dst, size_t size,
                       uint64_t off, ck_error *err)
{
    uint64_t run = t->gather->run, q0 = off / run, runs = (off + size - 1) / run - q0 + 1;
    uint32_t n = t->n_ext;
    uint64_t *lo = malloc(n * sizeof *lo), *hi = calloc(n, sizeof *hi);
    uint64_t *base = malloc(n * sizeof *base), *at = malloc(runs * sizeof *at), total = 0;
    uint32_t *slice = malloc(runs * sizeof *slice);
    unsigned char *span = NULL;
    int rc = lo == NULL || hi == NULL || base == NULL || at == NULL || slice == NULL
                 ? ck_nomem(err, m->path) : 0;
    for (uint32_t k = 0; rc == 0 && k < n; k++)
        lo[k] = UINT64_MAX;
    for (uint64_t i = 0; rc == 0 && i < runs; i++) { /* each run placed, each slice's span */
        uint64_t a, b;
        uint32_t k = slice[i] = ck_tensor_gather_run(t, q0 + i, &at[i]);
        run_part(q0 + i, run, off, size, &a, &b);
        lo[k] = at[i] + a < lo[k] ? at[i] + a : lo[k];
        hi[k] = at[i] + b > hi[k] ? at[i] + b : hi[k];
    }
    for (uint32_t k = 0; rc == 0 && k < n; k++) {
        base[k] = total; /* about size in all for slices: a span holds no gap */
        total += hi[k] > lo[k] ? hi[k] - lo[k] : 0;
    }
    if (rc == 0 && total > 2 * (uint64_t)size + SPARSE_SLACK) {
        rc = total / BYTES_PER_CALL < runs
                 ? windowed_read(m, t, dst, size, off, slice, at, runs, lo, hi, err)
                 : runs_read(m, t, dst, size, off, slice, at, runs, err);
        goto out;
    }
    if (rc == 0 && (span = malloc(total ? total : 1)) == NULL)
        rc = ck_nomem(err, m->path);
    for (uint32_t k = 0; rc == 0 && k < n; k++) {
        const ck_extent *e = ck_tensor_ext(t, k);
        if (hi[k] > lo[k])
            rc = ck_source_read(m->sources[e->src], span + base[k], hi[k] - lo[k],
                                e->off + lo[k], err);
    }
    for (uint64_t i = 0; rc == 0 && i < runs; i++) { /* dealt out to the runs */
        uint64_t a, b;
        uint32_t k = slice[i];
        run_part(q0 + i, run, off, size, &a, &b);
        memcpy(dst, span + base[k] + (at[i] + a - lo[k]), b - a);
        dst += b - a;
    }
out:
    free(span);
    free(slice);
    free(at);
    free(base);
    free(lo);
    free(hi);
    return rc;
}

long ck_model_read(const ck_model *m, const ck_tensor *t, void *buf, size_t size,
                   uint64_t off, ck_error *err)
{
    if (off >= t->nbytes)
        return 0;
    if (saved_check(m, t, err) < 0)
        return -1;
    if (size > t->nbytes - off)
        size = (size_t)(t->nbytes - off);
    if (t->gather != NULL && size > 0)
        return gather_read(m, t, buf, size, off, err) < 0 ? -1 : (long)size;
    struct read_ctx c = {.m = m, .dst = buf, .err = err};
    if (ck_tensor_for_range(t, off, size, read_piece, &c) != 0)
        return -1;
    return (long)size;
}

/* The model's lock, taken by checks that take a const model: it guards
 * what they may update, not the model's shape. */
static pthread_mutex_t *lock_of(const ck_model *m)
{
    return (pthread_mutex_t *)&m->lock;
}

static int check_extents(const ck_model *m, const ck_tensor *t, ck_error *err)
{
    uint32_t n = t->n_ext;
    for (uint32_t k = 0; k < n; k++) {
        const ck_extent *e = ck_tensor_ext(t, k);
        uint64_t end = e->off + e->len;
        /* One fstat for a run of extents in one source (a sliced tensor). */
        while (k + 1 < n && ck_tensor_ext(t, k + 1)->src == e->src) {
            const ck_extent *x = ck_tensor_ext(t, ++k);
            if (x->off + x->len > end)
                end = x->off + x->len;
        }
        ck_source *src = m->sources[e->src];
        if (src->fd >= 0 && ck_source_check_fd(src, end, err) < 0)
            return -1;
    }
    return 0;
}

const char *ck_model_extent_file(const ck_model *m, const ck_tensor *t, uint64_t off,
                                 uint64_t *in)
{
    return m->format->extent_file != NULL ? m->format->extent_file(m, t, off, in) : NULL;
}

int ck_model_may_read(const ck_model *m, const ck_tensor *t, const ck_cred *who,
                      ck_error *err)
{
    for (uint32_t k = 0; k < t->n_ext; k++) {
        const ck_extent *e = ck_tensor_ext(t, k);
        uint64_t in;
        const char *file = ck_model_extent_file(m, t, e->off, &in);
        if (file != NULL) {
            if (ck_dir_may_read(m->dir, file, who) < 0)
                return ck_fail_errno(err, errno == ENOENT ? ESTALE : errno,
                                     "%s/%s: tensor '%s': uid %u cannot read it on disk",
                                     m->path, file, t->name, (unsigned)who->uid);
            continue;
        }
        uint32_t i = e->src;
        if (k > 0 && ck_tensor_ext(t, k - 1)->src == i)
            continue; /* one check for a run of extents in one source */
        const ck_source *src = m->sources[i];
        while (src->inner != NULL)
            src = src->inner;
        if (src->computed)
            continue; /* a map's zeros: anyone may read them */
        /* NULL: no file of the directory (decoded values, kept aside) */
        const char *rel = src->dir ? ck_dir_rel(src->dir, src->path) : NULL;
        if (rel != NULL && ck_dir_may_read(src->dir, rel, who) < 0)
            return ck_fail_errno(err, errno == ENOENT ? ESTALE : errno,
                                 "%s: tensor '%s': uid %u cannot read it on disk", src->path,
                                 t->name, (unsigned)who->uid);
    }
    return 0;
}

int ck_model_check_extents(const ck_model *m, const ck_tensor *t, ck_error *err)
{
    pthread_mutex_lock(lock_of(m));
    int rc = check_extents(m, t, err);
    pthread_mutex_unlock(lock_of(m));
    return rc < 0 ? -1 : saved_check(m, t, err);
}

/* Whether the file at src->path (beneath the model's directory, reached
 * through its descriptor: the mount may cover that directory's name) is
 * still the one src was opened as.  A new mtime without a write is a
 * touch: it becomes src's. */
static int check_on_disk(const ck_model *m, ck_source *src, ck_error *err)
{
    struct stat st;
    const char *what = NULL, *rel = ck_dir_rel(m->dir, src->path);
    if (rel == NULL || ck_dir_stat(m->dir, rel, &st) < 0)
        what = rel && errno == ENOENT ? "it was removed" : "it cannot be examined";
    else if (st.st_dev != src->dev || st.st_ino != src->ino)
        what = "another file was put in its place";
    else if ((uint64_t)st.st_size != src->file_size)
        what = "its size changed";
    else if (ck_source_written(src, &st.st_mtim))
        what = "it was written to";
    if (what != NULL)
        return ck_fail(err, ESTALE, "%s: changed on disk since it was mounted (%s)", src->path,
                       what);
    return 0;
}

static int check_unchanged(ck_model *m, ck_error *err)
{
    if (m->n_sources == 0) {
        struct stat st;
        if (ck_dir_stat(m->dir, m->dir->base, &st) == 0)
            return ck_fail(err, ESTALE, "%s: changed on disk since it was mounted (another "
                           "program created it)", m->path);
        return 0;
    }
    /* sources[0] may be a decompressed copy: the file is m->st. */
    ck_source file = {.path = m->path, .dev = m->st.st_dev, .ino = m->st.st_ino,
                      .file_size = (uint64_t)m->st.st_size, .mtime = m->st.st_mtim,
                      .watch = m->file_wd >= 0 ? m->dir->watch : NULL, .wd = m->file_wd};
    if (check_on_disk(m, &file, err) < 0)
        return -1;
    m->st.st_mtim = file.mtime;
    for (uint32_t i = 1; i < m->n_sources; i++)
        if (ck_model_is_data_file(m, i) && check_on_disk(m, m->sources[i], err) < 0)
            return -1;
    return 0;
}

int ck_model_check_unchanged(ck_model *m, ck_error *err)
{
    pthread_mutex_lock(&m->lock);
    int rc = check_unchanged(m, err);
    pthread_mutex_unlock(&m->lock);
    /* A save copies the records it keeps as they are on disk: each must
     * be the one the saved index describes. */
    return rc < 0 ? -1 : saved_check_all(m, err);
}
