/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_files: the checkpoint files of a directory (run_files.h).
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
 * The newest: ModelCheckpoint names its files <prefix>-<epoch>_<step>.ckpt
 * and, when a run reuses a directory, renames the prefix <prefix>_1,
 * <prefix>_2...  When every complete checkpoint is so named with one
 * prefix, the newest is the highest (epoch, step); with one prefix and its
 * renamings, the highest (renaming, epoch, step); when they are all
 * directories of one collection whose rule numbers them by name
 * (iteration_<N>), the highest N; otherwise (DCP and OneFlow directories
 * included: their names are free), and between equals, the latest
 * modification time, then the last name.  One known not to open (its
 * error set: text named .ckpt, a file cut short) is never the newest;
 * ck_run_list_pick_opening asks, of the one picked, whether it opens,
 * since a name and a mode do not tell.
 */
#define _GNU_SOURCE
#include "run_files.h"

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
#include "core/model_dir.h"
#include "registry.h"

#define SET_INDEX ".safetensors.index.json"

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

bool ck_run_settled(const struct stat *st, double settle, const struct timespec *now)
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
                        .complete = ck_run_settled(&st, settle, now)};
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

int ck_run_files_scan_at(int dfd, const char *path, double settle, const struct timespec *now,
                         ck_run_other other, void *arg, ck_run_list *out, ck_error *err)
{
    *out = (ck_run_list){.latest = -1};
    char **names = NULL;
    size_t n = 0;
    int rc = list_names(path, dfd, &names, &n, err);
    if (rc == 0 && (out->e = calloc(n + 1, sizeof *out->e)) == NULL)
        rc = ck_nomem(err, path);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t before = out->n;
        rc = add_entry(out, dfd, names, n, i, settle, now, path, err);
        if (rc == 0 && other != NULL && out->n == before)
            rc = other(arg, out, dfd, names[i], path, err);
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
