/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_dir: the checkpoints of a training run's directory (run_dir.h).
 *
 * Which files are checkpoints, by name: regular files (a symbolic link is
 * not followed, as nowhere in ckptfs) whose names end in the extension of
 * a format ckptfs reads (format.h: .ckpt, .onnx, .mindir, .safetensors, a
 * sharded set's .safetensors.index.json), maybe followed by .zst.  Names
 * starting with '.' are not: ckptfs's own lock, journal and temporary
 * files, editors' files.  Neither are ModelCheckpoint's <prefix>-graph.meta,
 * JSON files or logs.  The shards of a sharded set are not checkpoints of
 * their own: "<base>-NNNNN-of-NNNNN.safetensors" beside
 * "<base>.safetensors.index.json" (the names transformers gives them; the
 * index is not read here).
 *
 * When a checkpoint is complete: MindSpore writes a checkpoint, then makes
 * it read-only (chmod 0400, in save_checkpoint of every version), so a
 * file nobody may write is complete.  A file still writable is complete
 * once it has not changed for `settle` seconds: the rule for writers that
 * give no signal (whoever opens it then checks that it parses).
 *
 * A distributed checkpoint's rank_<id>/ directory (one checkpoint per
 * rank, as MindSpore's transform_checkpoints lays them out) holding
 * exactly one checkpoint is shown as that checkpoint, named rank_<id>
 * (one level down, nothing deeper).  Its model directory is rank_<id>/
 * itself, opened beneath the run's descriptor (ck_dir_in), so its data
 * files, shards, journal, temporary files and writer lock are beside it,
 * never the run directory's files of the same names.
 * Any other directory (not a link, its name not starting with '.') that
 * a collection of the registry claims (collection.h: probe_at, in the
 * registry's order, with a completion rule, done) is one checkpoint named
 * as the directory, shown with the attributes the rule's stat_at gives
 * (none: not shown yet).  It is complete once the rule's tracker beside
 * it names its number or a later one (committed), else, with no tracker
 * written, as a file is (read-only, or settled), judged by those
 * attributes.  So a MindSpore Transformers iteration_<N>/ directory is
 * one, complete once latest_checkpointed_iteration.txt says N or later,
 * and a PyTorch Distributed Checkpoint (torchtitan's step-<N>/) is one
 * once its .metadata, written last, is there.  No kind is named here:
 * a collection with a rule is listed as these are.  Nothing deeper is
 * looked into.
 *
 * The newest: ModelCheckpoint names its files <prefix>-<epoch>_<step>.ckpt
 * and, when a run reuses a directory, renames the prefix <prefix>_1,
 * <prefix>_2...  When every complete checkpoint is so named with one
 * prefix, the newest is the highest (epoch, step); with one prefix and its
 * renamings, the highest (renaming, epoch, step); when they are all
 * directories of one collection whose rule numbers them by name
 * (iteration_<N>), the highest N; otherwise (DCP directories included:
 * their names are free), and between equals, the latest
 * modification time, then the last name.  One known not to open (its
 * error set: text named .ckpt, a file cut short) is never the newest;
 * ck_run_list_pick_opening asks, of the one picked, whether it opens,
 * since a name and a mode do not tell.
 */
#define _GNU_SOURCE
#include "run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/decimal.h"
#include "core/model.h"
#include "core/model_dir.h"
#include "open_path.h"
#include "registry.h"

#define SET_INDEX ".safetensors.index.json"
/* Collections whose trackers a scan reads once; past this, once an entry. */
#define TRACKED_MAX 16

/* The length of the prefix of a name "<prefix>-<epoch>_<step>", with epoch
 * and step; 0 when the name is not one. */
static size_t numbered(const char *name, uint64_t *epoch, uint64_t *step)
{
    const char *dash = strrchr(name, '-');
    const char *us = dash ? strchr(dash, '_') : NULL;
    if (dash == NULL || dash == name || us == NULL ||
        !ck_decimal(dash + 1, (size_t)(us - dash - 1), epoch) ||
        !ck_decimal(us + 1, strlen(us + 1), step))
        return 0;
    return (size_t)(dash - name);
}

/* The name a checkpoint file is shown as, or NULL when it is none. */
static char *shown_name(const char *file, const ck_format **format)
{
    if (file[0] == '.')
        return NULL;
    *format = ck_format_by_extension(file);
    if (*format == NULL || ((*format)->in_run != NULL && !(*format)->in_run(file)))
        return NULL;
    size_t n = strlen(file), ext = ck_format_extension_len(*format, file);
    if (n > 4 && strcmp(file + n - 4, ".zst") == 0)
        n -= 4;
    return n > ext ? strndup(file, n - ext) : NULL;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether file is a shard "<base>-NNNNN-of-NNNNN.safetensors" of a set
 * whose index "<base>.safetensors.index.json" is among names[0..n), which
 * are sorted. */
static bool is_shard(const char *file, char *const *names, size_t n)
{
    static const char tail[] = ".safetensors";
    size_t len = strlen(file), t = sizeof tail - 1;
    uint64_t i, k;
    /* "-NNNNN-of-NNNNN" before the extension: 15 characters */
    if (len < t + 15 || strcmp(file + len - t, tail) != 0)
        return false;
    const char *p = file + len - t - 15;
    if (p[0] != '-' || memcmp(p + 6, "-of-", 4) != 0 || !ck_decimal(p + 1, 5, &i) ||
        !ck_decimal(p + 10, 5, &k))
        return false;
    /* The index's name is shorter than the shard's (15 + 12 > 23). */
    char index[NAME_MAX + 1];
    const char *key = index;
    snprintf(index, sizeof index, "%.*s%s", (int)(p - file), file, SET_INDEX);
    return bsearch(&key, names, n, sizeof *names, by_name) != NULL;
}

static bool is_complete(const struct stat *st, double settle, const struct timespec *now)
{
    if ((st->st_mode & 0222) == 0)
        return true;
    double age = (double)(now->tv_sec - st->st_mtim.tv_sec) +
                 (double)(now->tv_nsec - st->st_mtim.tv_nsec) / 1e9;
    return age >= settle;
}

/* Every name in the directory, sorted. */
static int list_names(const char *path, int dfd, char ***out, size_t *n_out, ck_error *err)
{
    DIR *d = ck_list_dir(dfd);
    if (d == NULL)
        return ck_fail_errno(err, errno, "%s: cannot list", path);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    while (rc == 0) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (de == NULL) {
            if (errno != 0)
                rc = ck_fail_errno(err, errno, "%s: cannot list", path);
            break;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **more = realloc(names, cap * sizeof *more);
            if (more == NULL) {
                rc = ck_nomem(err, path);
                break;
            }
            names = more;
        }
        if ((names[n] = strdup(de->d_name)) == NULL)
            rc = ck_nomem(err, path);
        else
            n++;
    }
    closedir(d);
    if (rc == 0 && n > 1) /* qsort takes no NULL, even for nothing */
        qsort(names, n, sizeof *names, by_name);
    *out = names;
    *n_out = n;
    return rc;
}

/* The length of e's prefix without a renaming "_N", and N into *reuse. */
static size_t base_prefix(const ck_run_entry *e, unsigned *reuse)
{
    uint64_t ep, st, nth;
    size_t len = numbered(e->name, &ep, &st);
    const char *us = memrchr(e->name, '_', len);
    *reuse = 0;
    if (us != NULL && us > e->name && ck_decimal(us + 1, (size_t)(e->name + len - us - 1), &nth) &&
        nth <= 1000000) {
        *reuse = (unsigned)nth;
        return (size_t)(us - e->name);
    }
    return len;
}

bool ck_rank_dir_name(const char *name, uint64_t *id)
{
    size_t len = strlen(name);
    return strncmp(name, "rank_", 5) == 0 && (name[5] != '0' || len == 6) &&
           ck_decimal(name + 5, len - 5, id);
}

static int scan(int dfd, const char *path, double settle, const struct timespec *now,
                bool top, ck_run_list *out, ck_error *err);

/* The number a collection's tracker file (collection.h) in the run's
 * directory says is complete, or -1 (no tracker, or not a number). */
static int64_t tracked_number(int dfd, const char *tracker)
{
    char buf[32];
    struct stat st;
    int fd = ck_open_regular(dfd, tracker, O_RDONLY | O_NOFOLLOW, 0, &st);
    ssize_t n = fd < 0 ? -1 : pread(fd, buf, sizeof buf - 1, 0);
    if (fd >= 0)
        close(fd);
    uint64_t v;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r'))
        n--;
    return n > 0 && ck_decimal(buf, (size_t)n, &v) && v <= INT64_MAX ? (int64_t)v : -1;
}

/* What a scan of the run's own directory reads once: each collection's
 * tracker (-1: none), by its index in the registry. */
typedef struct run_trackers {
    int64_t number[TRACKED_MAX];
} run_trackers;

static void read_trackers(int dfd, run_trackers *t)
{
    for (size_t i = 0; i < TRACKED_MAX; i++) {
        const ck_collection *c = ck_collection_at(i);
        const ck_collection_done *d = c != NULL ? c->done : NULL;
        t->number[i] = d != NULL && d->tracker != NULL ? tracked_number(dfd, d->tracker) : -1;
    }
}

/* What collection i's tracker says: read once a scan, beyond
 * TRACKED_MAX each time. */
static int64_t tracked(int dfd, const run_trackers *t, size_t i, const ck_collection_done *d)
{
    if (d->tracker == NULL)
        return -1;
    return i < TRACKED_MAX ? t->number[i] : tracked_number(dfd, d->tracker);
}

/* A directory checkpoint's entry with the attributes of its files, all
 * (collection.h, stat_at). */
static ck_run_entry dir_entry(const struct stat *all)
{
    return (ck_run_entry){.mtime = all->st_mtim, .size = (uint64_t)all->st_size,
                          .mode = all->st_mode, .uid = all->st_uid, .gid = all->st_gid};
}

/* Whether a directory numbered n (has_number) is complete by its
 * collection's rule, its tracker saying tracked (-1: none); whether the
 * tracker names it into *committed.  A tracker written judges alone: a
 * directory it does not name yet is being written, whatever its mode. */
static bool dir_complete(int64_t tracked, bool has_number, uint64_t n, const struct stat *all,
                         double settle, const struct timespec *now, bool *committed)
{
    *committed = false;
    if (tracked >= 0 && has_number) {
        *committed = (uint64_t)tracked >= n;
        return *committed;
    }
    return is_complete(all, settle, now);
}

/* dir as the checkpoint of collection i (c) appended to l (which has
 * room), when c claims it and it holds its files: 1, or 0 when it does
 * not, -1 with err out of memory. */
static int add_collection_entry(ck_run_list *l, int dfd, const char *dir, size_t i,
                                const ck_collection *c, const run_trackers *t, double settle,
                                const struct timespec *now, const char *path, ck_error *err)
{
    const ck_collection_done *d = c->done;
    struct stat all;
    if (d == NULL || c->probe_at == NULL || c->open_at == NULL || d->stat_at == NULL ||
        !c->probe_at(dfd, dir) || d->stat_at(dfd, dir, &all) < 0)
        return 0;
    uint64_t n = 0;
    bool has_number = d->number != NULL && d->number(dir, &n);
    ck_run_entry e = dir_entry(&all);
    e.collection = c;
    e.step = has_number ? n : 0;
    e.complete = dir_complete(tracked(dfd, t, i, d), has_number, n, &all, settle, now,
                              &e.committed);
    e.name = strdup(dir);
    e.file = strdup(dir);
    if (e.name == NULL || e.file == NULL) {
        free(e.name);
        free(e.file);
        return ck_nomem(err, path);
    }
    l->e[l->n++] = e;
    return 1;
}

/* dir as the checkpoint of the first collection of the registry that
 * claims it (add_collection_entry). */
static int add_dir_entry(ck_run_list *l, int dfd, const char *dir, const run_trackers *t,
                         double settle, const struct timespec *now, const char *path,
                         ck_error *err)
{
    if (dir[0] == '.')
        return 0; /* ckptfs's own, editors' */
    const ck_collection *c;
    for (size_t i = 0; (c = ck_collection_at(i)) != NULL; i++) {
        int rc = add_collection_entry(l, dfd, dir, i, c, t, settle, now, path, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
    }
    return 0;
}

/* A distributed checkpoint's rank_<id>/ directory holding one checkpoint:
 * shown as rank_<id>, that checkpoint.  Anything else there (several
 * checkpoints, none, a directory that cannot be listed) is not shown. */
static int add_rank_entry(ck_run_list *l, int dfd, const char *dir, double settle,
                          const struct timespec *now, const char *path, ck_error *err)
{
    uint64_t id;
    struct stat st;
    if (!ck_rank_dir_name(dir, &id) || fstatat(dfd, dir, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode))
        return 0;
    int rfd = openat(dfd, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    char *sub = NULL;
    ck_run_list in = {0};
    ck_error ignored;
    int rc = 0;
    if (rfd >= 0 && asprintf(&sub, "%s/%s", path, dir) >= 0 &&
        scan(rfd, sub, settle, now, false, &in, &ignored) == 0 && in.n == 1) {
        ck_run_entry *e = &l->e[l->n];
        *e = in.e[0];
        e->numbered = false;
        e->name = strdup(dir);
        if (e->name == NULL || asprintf(&e->file, "%s/%s", dir, in.e[0].file) < 0) {
            free(e->name);
            rc = ck_nomem(err, path);
        } else {
            l->n++;
        }
    }
    ck_run_list_free(&in);
    free(sub);
    if (rfd >= 0)
        close(rfd);
    return rc;
}

/* Add names[i] to l when it is a checkpoint. */
static int add_entry(ck_run_list *l, int dfd, char *const *names, size_t n, size_t i,
                     double settle, const struct timespec *now, const char *path, ck_error *err)
{
    const ck_format *format;
    struct stat st;
    char *name = shown_name(names[i], &format);
    if (name == NULL || is_shard(names[i], names, n) ||
        fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode)) {
        free(name);
        return 0; /* not a checkpoint, or gone since it was listed */
    }
    ck_run_entry *e = &l->e[l->n];
    *e = (ck_run_entry){.name = name, .file = strdup(names[i]), .format = format,
                        .mtime = st.st_mtim, .size = (uint64_t)st.st_size,
                        .mode = st.st_mode, .uid = st.st_uid, .gid = st.st_gid,
                        .complete = is_complete(&st, settle, now)};
    if (e->file == NULL) {
        free(name);
        return ck_nomem(err, path);
    }
    e->numbered = numbered(name, &e->epoch, &e->step) > 0;
    if (e->numbered)
        base_prefix(e, &e->reuse);
    l->n++;
    return 0;
}

static int by_shown_name(const void *a, const void *b)
{
    return strcmp((*(ck_run_entry *const *)a)->name, (*(ck_run_entry *const *)b)->name);
}

/* Shown names are unique, and none is "latest", the name of a mount's
 * link to the newest checkpoint: a checkpoint whose name another has too
 * (a.ckpt and a.safetensors), or that is "latest", is shown by its whole
 * file name.  Repeated, since a file name may be another's shown name
 * (a.ckpt is a.ckpt.ckpt's); file names are unique, so it ends. */
static int unique_names(ck_run_list *l, const char *path, ck_error *err)
{
    if (l->n == 0)
        return 0;
    ck_run_entry **by = malloc(l->n * sizeof *by);
    bool *clash = malloc(l->n * sizeof *clash);
    int rc = by == NULL || clash == NULL ? ck_nomem(err, path) : 0;
    for (size_t changed = 1; rc == 0 && changed > 0;) {
        for (size_t i = 0; i < l->n; i++)
            by[i] = &l->e[i];
        qsort(by, l->n, sizeof *by, by_shown_name);
        for (size_t i = 0; i < l->n; i++)
            clash[by[i] - l->e] = strcmp(by[i]->name, "latest") == 0 ||
                                  (i > 0 && strcmp(by[i]->name, by[i - 1]->name) == 0) ||
                                  (i + 1 < l->n && strcmp(by[i]->name, by[i + 1]->name) == 0);
        changed = 0;
        for (size_t i = 0; rc == 0 && i < l->n; i++) {
            ck_run_entry *e = &l->e[i];
            if (!clash[i] || strcmp(e->name, e->file) == 0 || strchr(e->file, '/') != NULL)
                continue; /* a rank's directory keeps its name: the other one yields */
            char *whole = strdup(e->file);
            if (whole == NULL) {
                rc = ck_nomem(err, path);
                break;
            }
            free(e->name);
            e->name = whole;
            changed++;
        }
    }
    free(by);
    free(clash);
    return rc;
}

/* Whether the complete checkpoints are all directories of one collection
 * numbered by their names alone (collection.h, number): by step, then. */
static bool one_numbered_collection(const ck_run_list *l)
{
    const ck_collection *c = NULL;
    for (size_t i = 0; i < l->n; i++) {
        const ck_run_entry *e = &l->e[i];
        if (!e->complete)
            continue;
        if (e->collection == NULL || e->collection->done->number == NULL ||
            (c != NULL && e->collection != c))
            return false;
        c = e->collection;
    }
    return true;
}

/* How the complete checkpoints compare: by (renaming, epoch, step) when
 * they are all numbered with one base prefix, or by their directories'
 * numbers (one_numbered_collection), else by time alone. */
static bool one_run(ck_run_list *l)
{
    if (one_numbered_collection(l))
        return true;
    const ck_run_entry *first = NULL;
    size_t first_len = 0, first_base = 0;
    bool same_prefix = true, same_base = true;
    for (size_t i = 0; i < l->n; i++) {
        ck_run_entry *e = &l->e[i];
        if (!e->complete)
            continue;
        if (!e->numbered)
            return false;
        uint64_t ep, st;
        unsigned reuse;
        size_t len = numbered(e->name, &ep, &st), base = base_prefix(e, &reuse);
        if (first == NULL) {
            first = e;
            first_len = len;
            first_base = base;
            continue;
        }
        same_prefix &= len == first_len && memcmp(e->name, first->name, len) == 0;
        same_base &= base == first_base && memcmp(e->name, first->name, base) == 0;
    }
    if (same_prefix)
        for (size_t i = 0; i < l->n; i++)
            l->e[i].reuse = 0; /* "_N" was part of the one prefix */
    return same_prefix || same_base;
}

static int cmp_time(const ck_run_entry *a, const ck_run_entry *b)
{
    if (a->mtime.tv_sec != b->mtime.tv_sec)
        return a->mtime.tv_sec < b->mtime.tv_sec ? -1 : 1;
    if (a->mtime.tv_nsec != b->mtime.tv_nsec)
        return a->mtime.tv_nsec < b->mtime.tv_nsec ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int cmp_run(const ck_run_entry *a, const ck_run_entry *b)
{
    if (a->reuse != b->reuse)
        return a->reuse < b->reuse ? -1 : 1;
    if (a->epoch != b->epoch)
        return a->epoch < b->epoch ? -1 : 1;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return cmp_time(a, b);
}

void ck_run_list_pick_latest(ck_run_list *l)
{
    bool run = one_run(l);
    l->latest = -1;
    for (size_t i = 0; i < l->n; i++) {
        const ck_run_entry *e = &l->e[i];
        if (!e->complete || e->error != NULL)
            continue;
        if (l->latest < 0 ||
            (run ? cmp_run(e, &l->e[l->latest]) : cmp_time(e, &l->e[l->latest])) > 0)
            l->latest = (long)i;
    }
}

void ck_run_list_pick_opening(ck_run_list *l, int (*check)(void *arg, ck_run_entry *e),
                              void *arg)
{
    /* Each failed check sets an error, which takes that entry out of the
     * next pick: at most l->n rounds. */
    for (ck_run_list_pick_latest(l); l->latest >= 0; ck_run_list_pick_latest(l)) {
        ck_run_entry *e = &l->e[l->latest];
        if (check(arg, e) == 0)
            return;
        if (e->error == NULL && (e->error = strdup("does not open")) == NULL)
            return; /* out of memory: the pick stands rather than loop */
    }
}

ck_model *ck_run_dir_open(int dfd, const ck_collection *c, const char *below, const char *path,
                          const struct ck_open_opts *o, ck_error *err)
{
    ck_collection_opts co = {.open = *o};
    return c->open_at(dfd, below, path, &co, err);
}

bool ck_run_marker(const char *name)
{
    const ck_collection *c;
    for (size_t i = 0; (c = ck_collection_at(i)) != NULL; i++)
        if (c->done != NULL && c->done->marker != NULL && strcmp(c->done->marker, name) == 0)
            return true;
    return false;
}

int ck_run_entry_check(int dfd, const char *path, ck_run_entry *e,
                       const struct ck_open_opts *o, ck_error *err)
{
    char *where = NULL;
    if (asprintf(&where, "%s/%s", path, e->file) < 0)
        return ck_nomem(err, path);
    ck_model *model = NULL;
    if (e->collection != NULL) {
        model = ck_run_dir_open(dfd, e->collection, e->file, where, o, err);
    } else {
        ck_model_dir *dir = ck_dir_in(dfd, path, e->file, err);
        if (dir != NULL)
            model = ck_model_open_at(dir, where, o, err);
        ck_dir_unref(dir); /* the model holds it */
    }
    free(where);
    if (model != NULL) {
        ck_model_close(model);
        e->opens = true;
        return 0;
    }
    free(e->error);
    e->error = strdup(err->msg);
    return -1;
}

int ck_run_entry_check_path(const char *path, ck_run_entry *e, const struct ck_open_opts *o,
                            ck_error *err)
{
    int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        ck_fail_errno(err, errno, "%s: cannot open the directory", path);
        free(e->error);
        e->error = strdup(err->msg);
        return -1;
    }
    int rc = ck_run_entry_check(dfd, path, e, o, err);
    close(dfd);
    return rc;
}

/* The run's own directory is top: its rank_<id>/ and collections'
 * directories are looked into, and nothing deeper. */
static int scan(int dfd, const char *path, double settle, const struct timespec *now,
                bool top, ck_run_list *out, ck_error *err)
{
    *out = (ck_run_list){.latest = -1};
    char **names = NULL;
    size_t n = 0;
    int rc = list_names(path, dfd, &names, &n, err);
    if (rc == 0 && (out->e = calloc(n + 1, sizeof *out->e)) == NULL)
        rc = ck_nomem(err, path);
    run_trackers trackers = {{0}};
    if (top)
        read_trackers(dfd, &trackers);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t before = out->n;
        rc = add_entry(out, dfd, names, n, i, settle, now, path, err);
        if (rc == 0 && top && out->n == before)
            rc = add_rank_entry(out, dfd, names[i], settle, now, path, err);
        if (rc == 0 && top && out->n == before)
            rc = add_dir_entry(out, dfd, names[i], &trackers, settle, now, path, err);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc == 0)
        rc = unique_names(out, path, err);
    if (rc == 0)
        ck_run_list_pick_latest(out);
    return rc;
}

int ck_run_dir_scan_at(int dfd, const char *path, double settle, const struct timespec *now,
                       ck_run_list *out, ck_error *err)
{
    return scan(dfd, path, settle, now, true, out, err);
}

int ck_run_dir_scan(const char *path, double settle, const struct timespec *now,
                    ck_run_list *out, ck_error *err)
{
    *out = (ck_run_list){.latest = -1};
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return ck_fail_errno(err, errno, "%s: cannot open the directory", path);
    int rc = ck_run_dir_scan_at(dfd, path, settle, now, out, err);
    close(dfd);
    return rc;
}

void ck_run_list_free(ck_run_list *l)
{
    for (size_t i = 0; l->e != NULL && i < l->n; i++) {
        free(l->e[i].name);
        free(l->e[i].file);
        free(l->e[i].error);
    }
    free(l->e);
    *l = (ck_run_list){.latest = -1};
}
