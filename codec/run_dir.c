/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_dir: the checkpoints of a training run's directory (run_dir.h).
 *
 * Which files are checkpoints, when one is complete and which is the
 * newest: run_files.c, the half of the scan that knows no collection.
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
 * attributes.  No kind is named here: a collection with a rule is listed
 * as these are.  Nothing deeper is looked into.
 *
 * The collections a run lists so (open_path.c's table, in its order):
 * a MindSpore Transformers iteration_<N>/ directory, complete once
 * latest_checkpointed_iteration.txt says N or later; a OneFlow snapshot
 * directory (oneflow/oneflow_dir.c), once the file its writer writes last
 * is there (snapshot_done, legacy flow.checkpoint.save and SnapshotWriter;
 * pickled_data, flow.save from 0.6), then read-only or settled; a PyTorch
 * Distributed Checkpoint (torchtitan's step-<N>/), once its .metadata,
 * written last, is there, then likewise.  A distributed checkpoint merged
 * by -o strategy and a Hugging Face model folder have no rule: found by
 * path only, never listed; nor is a OneFlow directory with neither file
 * (a legacy save cut short, an nn.Graph save, out files alone), which
 * nothing says is whole.  A run's OneFlow and DCP directories, whose
 * names are free, are ordered by time, then by the last name (the order
 * OneFlow's SimpleCheckPointManager takes its snapshot_<time> names in;
 * run_files.c). */
#define _GNU_SOURCE
#include "run_dir.h"

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

/* Collections whose trackers a scan reads once; past this, once an entry. */
#define TRACKED_MAX 16









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
    return ck_run_settled(all, settle, now);
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
        ck_run_files_scan_at(rfd, sub, settle, now, NULL, NULL, &in, &ignored) == 0 &&
        in.n == 1) {
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

/* What the run's own scan hands each name that is no checkpoint file. */
typedef struct run_scan {
    double settle;
    const struct timespec *now;
    run_trackers trackers;
} run_scan;

/* The run's rank_<id>/ and collections' directories are looked into,
 * and nothing deeper. */
static int add_other(void *arg, ck_run_list *l, int dfd, const char *name, const char *path,
                     ck_error *err)
{
    const run_scan *s = arg;
    size_t before = l->n;
    int rc = add_rank_entry(l, dfd, name, s->settle, s->now, path, err);
    if (rc == 0 && l->n == before)
        rc = add_dir_entry(l, dfd, name, &s->trackers, s->settle, s->now, path, err);
    return rc;
}

int ck_run_dir_scan_at(int dfd, const char *path, double settle, const struct timespec *now,
                       ck_run_list *out, ck_error *err)
{
    run_scan s = {.settle = settle, .now = now};
    read_trackers(dfd, &s.trackers);
    return ck_run_files_scan_at(dfd, path, settle, now, add_other, &s, out, err);
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

