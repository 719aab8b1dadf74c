/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_path: RUN/latest and RUN/NAME resolved from the run's listing
 * (run_path.h).
 */
#define _GNU_SOURCE /* asprintf */
#include "run_path.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/model.h"
#include "open_path.h"
#include "run_dir.h"

/* Whether dir is a run's directory: a directory no collection claims. */
static bool is_run_dir(const char *dir)
{
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && ck_collection_of(dir, NULL) == NULL;
}

static int scan(const char *dir, ck_run_list *l, ck_error *err)
{
    *l = (ck_run_list){.latest = -1};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return ck_run_dir_scan(dir, CK_RUN_SETTLE_DEFAULT, &now, l, err);
}

typedef struct check_ctx {
    const char *dir;
    const struct ck_open_opts *o;
} check_ctx;

/* ck_run_list_pick_opening's question: does e open, as a mount opens it? */
static int opens(void *arg, ck_run_entry *e)
{
    const check_ctx *c = arg;
    ck_error ignored;
    struct ck_open_opts none = {0};
    return ck_run_entry_check_path(c->dir, e, c->o ? c->o : &none, &ignored);
}

/* The run directory itself: say how to name one of its checkpoints. */
static int refuse_run_dir(const char *path, const struct ck_open_opts *o, ck_error *err)
{
    ck_run_list l;
    if (scan(path, &l, err) < 0) {
        ck_run_list_free(&l);
        return -1;
    }
    check_ctx c = {.dir = path, .o = o};
    ck_run_list_pick_opening(&l, opens, &c);
    if (l.n == 0)
        ck_fail(err, EISDIR, "%s: is a directory holding no model", path);
    else
        ck_fail(err, EISDIR, "%s: is a training run's directory of %zu checkpoint%s; name one, "
                "as %s/latest%s%s%s or %s/NAME (ckptfs-dump %s lists them)", path, l.n,
                l.n == 1 ? "" : "s", path,
                l.latest >= 0 ? " (" : "", l.latest >= 0 ? l.e[l.latest].name : "",
                l.latest >= 0 ? ")" : "", path, path);
    ck_run_list_free(&l);
    return -1;
}

/* name among dir's checkpoints: its path into *real (1), or 0. */
static int find_named(const char *dir, const char *name, const struct ck_open_opts *o,
                      char **real, ck_error *err)
{
    ck_run_list l;
    if (scan(dir, &l, err) < 0) {
        ck_run_list_free(&l);
        return 0; /* not listable: let the open say why */
    }
    long at = -1;
    if (strcmp(name, "latest") == 0) {
        check_ctx c = {.dir = dir, .o = o};
        ck_run_list_pick_opening(&l, opens, &c);
        at = l.latest;
        if (at < 0) {
            ck_fail(err, ENOENT, "%s/latest: the run has no complete checkpoint that opens "
                    "(ckptfs-dump %s says why)", dir, dir);
            ck_run_list_free(&l);
            return -1;
        }
    }
    for (size_t i = 0; at < 0 && i < l.n; i++)
        if (strcmp(l.e[i].name, name) == 0)
            at = (long)i;
    int rc = 0;
    if (at >= 0)
        rc = asprintf(real, "%s/%s", dir, l.e[at].file) < 0 ? ck_nomem(err, dir) : 1;
    if (rc < 0)
        *real = NULL;
    ck_run_list_free(&l);
    return rc;
}

int ck_run_checkpoint_path(const char *path, const struct ck_open_opts *o, char **real,
                           ck_error *err)
{
    *real = NULL;
    struct stat st;
    if (lstat(path, &st) == 0)
        return is_run_dir(path) ? refuse_run_dir(path, o, err) : 0;
    if (errno != ENOENT)
        return 0;
    char *d = strdup(path), *b = strdup(path);
    int rc = 0;
    if (d == NULL || b == NULL)
        rc = ck_nomem(err, path);
    else {
        const char *dir = dirname(d), *name = basename(b);
        if (name[0] != '\0' && name[0] != '.' && is_run_dir(dir))
            rc = find_named(dir, name, o, real, err);
    }
    free(d);
    free(b);
    return rc;
}
