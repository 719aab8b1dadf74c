/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of how a training run's directory lists collections
 * (codec/run_dir.h, codec/collection.h), without a mount: every
 * collection with a completion rule has the hooks a run needs; the
 * watcher's markers come from those rules; a scan finds iteration, DCP
 * and OneFlow snapshot directories by their collections' probes, judges
 * them by their rules (a tracker alone once written, else read-only or
 * settled), shows their files' attributes together, and orders numbered
 * ones by number, the others by time, then by the last name.  The
 * directories hold names and bytes enough for the probes and stat_at,
 * not models: nothing is opened.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../codec/registry.h"
#include "../../codec/open_path.h"
#include "../../codec/run_dir.h"
#include "unit.h"

#define SHARD "model-0000000-0000001.safetensors"

static char run[512];
static int made = 1; /* every file and directory below was made */

/* Write len bytes of data to run/rel, with mtime age seconds ago. */
static void put(const char *rel, const void *data, size_t len, time_t age)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", run, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0 && write(fd, data, len) == (ssize_t)len;
    struct timespec t[2] = {{.tv_sec = time(NULL) - age}, {.tv_sec = time(NULL) - age}};
    ok = ok && futimens(fd, t) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok)
        check(0, "run_dir: made %s", rel);
    made &= ok;
}

static void dir(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", run, rel);
    if (mkdir(p, 0755) != 0) {
        check(0, "run_dir: made %s/", rel);
        made = 0;
    }
}

/* Set run/rel's mtime age seconds ago (a directory, once its files are
 * made). */
static void aged(const char *rel, time_t age)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", run, rel);
    struct timespec t[2] = {{.tv_sec = time(NULL) - age}, {.tv_sec = time(NULL) - age}};
    if (utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW) != 0) {
        check(0, "run_dir: aged %s", rel);
        made = 0;
    }
}

static const ck_run_entry *entry(const ck_run_list *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->e[i].name, name) == 0)
            return &l->e[i];
    return NULL;
}

static const char *kind(const ck_run_entry *e)
{
    return e == NULL ? "(none)" : e->collection != NULL ? e->collection->name : "(file)";
}

static const char *latest(const ck_run_list *l)
{
    return l->latest >= 0 ? l->e[l->latest].name : "(none)";
}

static int scan(double settle, ck_run_list *l)
{
    struct timespec now;
    ck_error err = {0};
    clock_gettime(CLOCK_REALTIME, &now);
    int rc = ck_run_dir_scan(run, settle, &now, l, &err);
    check(rc == 0, "run_dir: scanned (%s)", rc == 0 ? "ok" : err.msg);
    return rc;
}

/* Each rule is whole: a run lists its collection through these alone. */
static void test_rules(void)
{
    const ck_collection *c;
    size_t with_rule = 0;
    for (size_t i = 0; (c = ck_collection_at(i)) != NULL; i++) {
        if (c->done == NULL)
            continue;
        with_rule++;
        check(c->probe_at != NULL && c->open_at != NULL && c->done->stat_at != NULL,
              "run_dir: collection %s has probe_at, open_at and stat_at", c->name);
        check(c->done->tracker == NULL || c->done->number != NULL,
              "run_dir: collection %s has a tracker only with a number to compare", c->name);
    }
    check(with_rule >= 3, "run_dir: iteration, DCP and OneFlow have completion rules (%zu)",
          with_rule);
    check(ck_run_marker(".metadata"), "run_dir: DCP's .metadata is a marker");
    /* snapshot_done starts with no '.': the watcher heeds it without. */
    check(!ck_run_marker(".ckptfs.lock") && !ck_run_marker("metadata.json") &&
              !ck_run_marker("snapshot_done"),
          "run_dir: other names are no marker");
}

/* Probes and rules, with no tracker: settled or not. */
static void test_probes(void)
{
    static const unsigned char pickle[] = {0x80, 0x04, 0x95};
    dir("iteration_3");
    put("iteration_3/" SHARD, "abc", 3, 100);
    put("iteration_3/common.json", "{}", 2, 100);
    dir("iteration_5");
    put("iteration_5/" SHARD, "abcdefg", 7, 200); /* older, but numbered higher */
    dir("iteration_7");                           /* no shard file yet */
    put("iteration_7/metadata.json", "{}", 2, 100);
    dir("step-10");
    put("step-10/__0_0.distcp", "0123456789", 10, 300);
    put("step-10/.metadata", pickle, sizeof pickle, 300);
    dir("step-11");
    put("step-11/.metadata", "text", 4, 300);     /* not a pickle */
    dir("step-12");
    put("step-12/__0_0.distcp", "01", 2, 300);    /* .metadata not written yet */
    check(made, "run_dir: the run directory made");

    ck_run_list l;
    if (scan(1000, &l) == 0) {
        const ck_run_entry *i3 = entry(&l, "iteration_3"), *i5 = entry(&l, "iteration_5"),
                           *s10 = entry(&l, "step-10");
        check(l.n == 3, "run_dir: 3 checkpoints listed (%zu)", l.n);
        check(strcmp(kind(i3), "iteration") == 0 && strcmp(kind(i5), "iteration") == 0,
              "run_dir: iteration_N/ is an iteration (%s, %s)", kind(i3), kind(i5));
        check(strcmp(kind(s10), "dcp") == 0, "run_dir: step-10/ is a DCP (%s)", kind(s10));
        check(entry(&l, "iteration_7") == NULL && entry(&l, "step-11") == NULL &&
                  entry(&l, "step-12") == NULL,
              "run_dir: no shard file, no pickle, no .metadata: not listed");
        check(i3 != NULL && i3->size == 3 && i3->step == 3,
              "run_dir: an iteration's size is its shards' (%llu), its step its number",
              i3 ? (unsigned long long)i3->size : 0ull);
        check(s10 != NULL && s10->size == 13, "run_dir: a DCP's size is .metadata's and "
              "its data files' (%llu)", s10 ? (unsigned long long)s10->size : 0ull);
        check(i3 && !i3->complete && s10 && !s10->complete,
              "run_dir: writable and changed within settle: not complete");
        check(l.latest < 0, "run_dir: none complete, no latest (%s)", latest(&l));
    }
    ck_run_list_free(&l);
    if (scan(0, &l) == 0) {
        check(strcmp(latest(&l), "iteration_3") == 0,
              "run_dir: iterations and a DCP together: the newest by time (%s)", latest(&l));
    }
    ck_run_list_free(&l);
}

/* Numbered directories of one collection are ordered by number; a
 * tracker, once written, judges alone. */
static void test_tracker(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/step-10/.metadata", run);
    check(unlink(p) == 0, "run_dir: step-10 is no DCP any more");
    ck_run_list l;
    if (scan(0, &l) == 0)
        check(strcmp(latest(&l), "iteration_5") == 0,
              "run_dir: iterations alone: the highest number, not the newest (%s)", latest(&l));
    ck_run_list_free(&l);
    put("latest_checkpointed_iteration.txt", "3\n", 2, 0);
    if (scan(0, &l) == 0) {
        const ck_run_entry *i3 = entry(&l, "iteration_3"), *i5 = entry(&l, "iteration_5");
        check(i3 && i3->complete && i3->committed, "run_dir: the tracker commits iteration_3");
        check(i5 && !i5->complete && !i5->committed,
              "run_dir: iteration_5, settled but beyond the tracker: not complete");
        check(strcmp(latest(&l), "iteration_3") == 0, "run_dir: latest is the tracker's (%s)",
              latest(&l));
    }
    ck_run_list_free(&l);
}

/* OneFlow snapshots: one once the file its writer writes last is there
 * (snapshot_done, pickled_data), no link followed, no dot name; its size
 * every out's and meta's and that file's, its mode the directory's; no
 * number, so by time, then by the last name (SimpleCheckPointManager's
 * timestamped names sort so). */
static void test_oneflow(void)
{
    static const char meta[] = "shape {\n  dim: 1\n}\ndata_type: kFloat\n";
    static const char a[] = "snapshot_20260101_000000_000000",
                      b[] = "snapshot_20260102_000000_000000";
    char p[1024], q[1024];
    snprintf(run, sizeof run, "%s/run_oneflow", tmpdir);
    check(mkdir(run, 0755) == 0, "run_dir: made the OneFlow run directory");
    const char *legacy[] = {a, b, "writing", ".hidden"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/w", legacy[i]);
        dir(legacy[i]);
        dir(p);
        snprintf(p, sizeof p, "%s/w/out", legacy[i]);
        put(p, "abcd", 4, 300);
        snprintf(p, sizeof p, "%s/w/meta", legacy[i]);
        put(p, meta, sizeof meta - 1, 300);
        snprintf(p, sizeof p, "%s/snapshot_done", legacy[i]);
        if (strcmp(legacy[i], "writing") != 0) /* written last: not yet */
            put(p, "", 0, 300);
        aged(legacy[i], 300);
    }
    dir("pickled");
    dir("pickled/tensor_0");
    put("pickled/tensor_0/out", "abcdefgh", 8, 200);
    put("pickled/tensor_0/meta", meta, sizeof meta - 1, 200);
    put("pickled/pickled_data", "\x80\x02", 2, 200);
    aged("pickled", 200);
    snprintf(p, sizeof p, "%s/linked", run);
    check(symlink(a, p) == 0, "run_dir: made linked -> %s", a);
    check(made, "run_dir: the OneFlow run directory made");

    ck_run_list l;
    if (scan(1000, &l) == 0) {
        const ck_run_entry *ea = entry(&l, a), *ep = entry(&l, "pickled");
        check(l.n == 3, "run_dir: 3 OneFlow snapshots listed (%zu)", l.n);
        check(strcmp(kind(ea), "oneflow") == 0 && strcmp(kind(entry(&l, b)), "oneflow") == 0 &&
                  strcmp(kind(ep), "oneflow") == 0,
              "run_dir: legacy and pickled snapshots are oneflow (%s, %s)", kind(ea), kind(ep));
        check(entry(&l, "writing") == NULL && entry(&l, ".hidden") == NULL &&
                  entry(&l, "linked") == NULL,
              "run_dir: no snapshot_done yet, a dot name, a link: not listed");
        check(ea != NULL && ea->size == 4 + sizeof meta - 1,
              "run_dir: a legacy snapshot's size is its outs', metas' and snapshot_done's (%llu)",
              ea ? (unsigned long long)ea->size : 0ull);
        check(ep != NULL && ep->size == 8 + sizeof meta - 1 + 2 && ep->step == 0,
              "run_dir: a pickled one's adds pickled_data (%llu), and it has no number",
              ep ? (unsigned long long)ep->size : 0ull);
        struct stat ds;
        snprintf(p, sizeof p, "%s/%s", run, a);
        check(ea != NULL && stat(p, &ds) == 0 && ea->mode == ds.st_mode,
              "run_dir: a snapshot's mode is its directory's (%o)", ea ? ea->mode : 0u);
        check(ea && !ea->complete && ep && !ep->complete && l.latest < 0,
              "run_dir: writable and changed within settle: not complete, no latest (%s)",
              latest(&l));
    }
    ck_run_list_free(&l);
    if (scan(0, &l) == 0)
        check(strcmp(latest(&l), "pickled") == 0, "run_dir: settled: the newest by time (%s)",
              latest(&l));
    ck_run_list_free(&l);
    snprintf(p, sizeof p, "%s/pickled", run);
    snprintf(q, sizeof q, "%s/.pickled", run);
    check(rename(p, q) == 0, "run_dir: the pickled one hidden");
    if (scan(0, &l) == 0)
        check(strcmp(latest(&l), b) == 0, "run_dir: equal times: the last name (%s)",
              latest(&l));
    ck_run_list_free(&l);
}

void test_run_dir(void)
{
    snprintf(run, sizeof run, "%s/run", tmpdir);
    check(mkdir(run, 0755) == 0, "run_dir: made the run directory");
    test_rules();
    test_probes();
    test_tracker();
    test_oneflow();
}
