/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dist_merge: a distributed checkpoint merged into one model (dist_merge.h).
 *
 * Which slice a rank holds, after mindspore/python/mindspore/parallel/
 * _tensor.py: rank r's coordinates in the device matrix are row-major
 * (the last axis fastest); tensor dimension d, mapped to device axis k,
 * is cut into dev[n - 1 - k] slices and the rank holds the one its
 * coordinate on that axis says.  With the parallel optimizer
 * (_construct_tensor_layout_for_opt_shard) rank r holds model-parallel
 * slice r % step, row-major over the cuts, and of its dim 0 the chunk
 * (r / step) % size: dim 0 is then cut into cuts[0] * size pieces.
 *
 * So every parameter is a grid of equal pieces, grid[d] along dimension
 * d, each piece one rank's whole tensor.  The merged tensor lists the
 * pieces' extents in row-major grid order, and when a dimension after
 * the first is cut, says how they interleave (ck_gather).
 */
#define _GNU_SOURCE
#include "dist_merge.h"
#include "../registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist_strategy.h"
#include "model_set.h"
#include "../run_files.h"
#include "tensor_grid.h"

/* What a merge is working with. */
typedef struct merge {
    const char *path;           /* DIST_DIR, for messages */
    const ck_strategy *strategy;
    ck_model *m;                /* the merged model */
    ck_model_set *ranks;        /* its state: rank r is model r */
    const ck_tensor **t;        /* per rank: the parameter being merged */
    uint32_t *owner;            /* per grid piece: the lowest rank holding it */
    ck_grid_piece *pieces;      /* and its tensor */
} merge;

static const ck_format dist_format =
    CK_MSET_FORMAT("distributed", "merged distributed checkpoint");

/* ---- finding the ranks ------------------------------------------------ */

/* Open DIST_DIR/rank_<r>/ for every r < n into fds (O_PATH, no link
 * followed); refuses a rank missing, a rank_<id> at or beyond n, and a
 * rank_<id> that is not a directory. */
static int open_rank_dirs(int dfd, const char *path, uint32_t n, int *fds, ck_error *err)
{
    DIR *d = ck_list_dir(dfd);
    if (d == NULL)
        return ck_fail_errno(err, errno, "%s: cannot list the directory", path);
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
        uint64_t id;
        if (!ck_rank_dir_name(de->d_name, &id))
            continue;
        struct stat st;
        if (id >= n)
            rc = ck_fail(err, EINVAL, "%s/%s: a rank beyond the strategy's %u devices", path,
                         de->d_name, n);
        else if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            rc = ck_fail_errno(err, errno, "%s/%s: cannot stat", path, de->d_name);
        else if (!S_ISDIR(st.st_mode))
            rc = ck_fail(err, EINVAL, "%s/%s: %s, not a rank's directory", path, de->d_name,
                         ck_file_kind(st.st_mode));
        else if ((fds[id] = openat(dfd, de->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW |
                                   O_CLOEXEC)) < 0)
            rc = ck_fail_errno(err, errno, "%s/%s: cannot open", path, de->d_name);
    }
    if (rc == 0 && errno != 0)
        rc = ck_fail_errno(err, errno, "%s: cannot list the directory", path);
    closedir(d);
    for (uint32_t r = 0; rc == 0 && r < n; r++)
        if (fds[r] < 0)
            rc = ck_fail(err, ENOENT, "%s/rank_%u: missing (the strategy is for %u devices)",
                         path, r, n);
    return rc;
}

/* The one checkpoint in rank r's directory (rfd, beneath DIST_DIR's dfd),
 * opened as a model: reached from DIST_DIR, the mount's root, so that
 * who may read it is checked along that way.  watch: its files are
 * watched for writes, with rank 0's watch when rank0 is given (one
 * inotify instance for all ranks). */
static ck_model *open_rank(int dfd, int rfd, const char *path, uint32_t r,
                           const ck_open_opts *o, bool watch, const ck_model *rank0,
                           ck_error *err)
{
    char dir[PATH_MAX], file[PATH_MAX], rel[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/rank_%u", path, r) >= sizeof dir) {
        ck_fail(err, ENAMETOOLONG, "%s: the path is too long", path);
        return NULL;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    ck_run_list list = {0};
    ck_model *m = NULL;
    if (ck_run_files_scan_at(rfd, dir, 0, &now, NULL, NULL, &list, err) < 0) {
        /* said */
    } else if (list.n != 1) {
        ck_fail(err, EINVAL, "%s: %zu checkpoints (a rank's directory holds exactly one)", dir,
                list.n);
    } else if ((size_t)snprintf(file, sizeof file, "%s/%s", dir, list.e[0].file) >=
                   sizeof file ||
               (size_t)snprintf(rel, sizeof rel, "rank_%u/%s", r, list.e[0].file) >=
                   sizeof rel) {
        ck_fail(err, ENAMETOOLONG, "%s: the path is too long", dir);
    } else {
        ck_model_dir *d = ck_dir_in(dfd, path, rel, err);
        if (d != NULL) {
            if (watch && rank0 == NULL)
                ck_dir_watch_files(d);
            else if (watch)
                ck_dir_share_watch(d, rank0->dir->watch);
            ck_open_opts member = *o;
            member.index = NULL; /* read through the merged model: model.h */
            m = ck_model_open_at(d, file, &member, err);
            ck_dir_unref(d);
        }
    }
    ck_run_list_free(&list);
    return m;
}

static int open_ranks(const char *path, uint32_t n, const ck_open_opts *o, bool watch,
                      ck_model_set *set, ck_error *err)
{
    int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return ck_fail_errno(err, errno, "%s: cannot open the directory", path);
    int *fds = malloc(n * sizeof *fds);
    int rc = fds == NULL ? ck_nomem(err, path) : 0;
    for (uint32_t r = 0; fds != NULL && r < n; r++)
        fds[r] = -1;
    if (rc == 0)
        rc = open_rank_dirs(dfd, path, n, fds, err);
    for (uint32_t r = 0; rc == 0 && r < n; r++) {
        const ck_model *rank0 = r > 0 ? set->models[0] : NULL;
        ck_model *m = open_rank(dfd, fds[r], path, r, o, watch, rank0, err);
        rc = m == NULL ? -1 : ck_mset_put(set, r, m, err);
    }
    for (uint32_t r = 0; fds != NULL && r < n; r++)
        if (fds[r] >= 0)
            close(fds[r]);
    free(fds);
    close(dfd);
    return rc;
}

/* ---- parameters by name ----------------------------------------------- */

static const char *quoted(const ck_tensor *t, char q[CK_QUOTE_BUF])
{
    return ck_quote(q, t->name, t->name_len);
}

static const char *shape(const ck_tensor *t, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < t->ndim && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "",
                              (long long)t->dims[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

/* Every rank holds the same parameters as rank 0; m->t[r] is set for
 * rank 0's tensor t0. */
static int gather_ranks(merge *g, const ck_tensor *t0, ck_error *err)
{
    char q[CK_QUOTE_BUF];
    for (uint32_t r = 0; r < g->ranks->n; r++) {
        const ck_tensor *t = r == 0 ? t0 : ck_mset_find(g->ranks, r, t0->name, t0->name_len);
        const char *rpath = g->ranks->models[r]->path;
        if (t == NULL)
            return ck_fail(err, EINVAL, "%s: no parameter '%s', which rank_0 has", rpath,
                           quoted(t0, q));
        if (t->part != CK_PART_WHOLE)
            return ck_fail(err, ENOTSUP, "%s: '%s' is part of a map parameter, which is not "
                           "merged", rpath, quoted(t0, q));
        g->t[r] = t;
    }
    return 0;
}

/* ---- one parameter ---------------------------------------------------- */

static int refuse(merge *g, uint32_t r, const ck_tensor *t, ck_error *err, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(err, EINVAL, "%s: parameter '%s': %s", g->ranks->models[r]->path,
                   quoted(t, q), what);
}

/* Same type and shape on every rank (MindSpore cuts evenly), and a
 * layout that fits the tensor. */
static int check_slices(merge *g, const ck_layout *l, ck_error *err)
{
    const ck_tensor *t0 = g->t[0];
    char a[256], b[256], why[600];
    if (l == NULL)
        return 0; /* rank 0's as stored, whatever the others hold */
    for (uint32_t r = 1; r < g->ranks->n; r++) {
        const ck_tensor *t = g->t[r];
        if (t->dtype != t0->dtype) {
            snprintf(why, sizeof why, "type %s, rank_0 has %s", t->type_name, t0->type_name);
            return refuse(g, r, t, err, why);
        }
        if (t->ndim != t0->ndim || memcmp(t->dims, t0->dims, t->ndim * sizeof *t->dims) != 0) {
            snprintf(why, sizeof why, "shape %s, rank_0 has %s (the strategy cuts it evenly)",
                     shape(t, a, sizeof a), shape(t0, b, sizeof b));
            return refuse(g, r, t, err, why);
        }
    }
    if (l->n_map != t0->ndim) {
        snprintf(why, sizeof why, "shape %s, but the strategy's tensor_map has %u entries",
                 shape(t0, a, sizeof a), l->n_map);
        return refuse(g, 0, t0, err, why);
    }
    if (l->field != 0)
        return refuse(g, 0, t0, err, "an embedding field layout (field != 0) is not merged");
    if (l->uneven)
        return refuse(g, 0, t0, err, "an uneven split (param_split_shape) is not merged");
    if (t0->dtype->kind != CK_KIND_NUMERIC) {
        snprintf(why, sizeof why, "type %s cannot be merged", t0->type_name);
        return refuse(g, 0, t0, err, why);
    }
    if (l->opt_step != 0 && t0->ndim == 0)
        return refuse(g, 0, t0, err, "an optimizer shard of a 0-d tensor");
    return 0;
}

/* Which grid piece rank r holds; grid[d] pieces along dimension d. */
static uint64_t piece_of(const ck_layout *l, const uint64_t *grid, uint32_t ndim, uint64_t r)
{
    uint64_t c[CK_MAX_DIMS] = {0};
    if (l->opt_step != 0) {
        uint64_t b = r % l->opt_step; /* row-major over the model-parallel cuts */
        for (uint32_t d = ndim; d-- > 0;) {
            uint64_t cut = ck_layout_split(l, d);
            c[d] = b % cut;
            b /= cut;
        }
        c[0] = c[0] * l->opt_size + r / l->opt_step % l->opt_size;
    } else {
        uint64_t coord[64], x = r;
        for (uint32_t i = l->n_dev; i-- > 0;) {
            coord[i] = x % (uint64_t)l->dev[i];
            x /= (uint64_t)l->dev[i];
        }
        for (uint32_t d = 0; d < ndim; d++)
            c[d] = l->map[d] < 0 ? 0 : coord[l->n_dev - 1 - (uint32_t)l->map[d]];
    }
    uint64_t p = 0;
    for (uint32_t d = 0; d < ndim; d++)
        p = p * grid[d] + c[d];
    return p;
}

/* The merged tensor's shape and the grid; the count of pieces. */
static int grid_of(merge *g, const ck_layout *l, uint64_t *grid, int64_t *full, uint64_t *pieces,
                   ck_error *err)
{
    const ck_tensor *t0 = g->t[0];
    *pieces = 1;
    for (uint32_t d = 0; d < t0->ndim; d++) {
        grid[d] = l == NULL ? 1 : ck_layout_split(l, d);
        if (d == 0 && l != NULL && l->opt_step != 0)
            grid[0] *= l->opt_size; /* both at most the device count */
        int64_t f;
        if (__builtin_mul_overflow(t0->dims[d], (int64_t)grid[d], &f) ||
            __builtin_mul_overflow(*pieces, grid[d], pieces) || *pieces > g->ranks->n)
            return refuse(g, 0, t0, err, "the strategy cuts it into more slices than there "
                          "are ranks");
        full[d] = f;
    }
    return 0;
}

/* The lowest rank holding each piece; every piece must be held. */
static int owners(merge *g, const ck_layout *l, const uint64_t *grid, uint64_t pieces,
                  ck_error *err)
{
    for (uint64_t p = 0; p < pieces; p++)
        g->owner[p] = UINT32_MAX;
    for (uint32_t r = g->ranks->n; l != NULL && r-- > 0;)
        g->owner[piece_of(l, grid, g->t[0]->ndim, r)] = r;
    if (l == NULL)
        g->owner[0] = 0;
    for (uint64_t p = 0; p < pieces; p++)
        if (g->owner[p] == UINT32_MAX) {
            char why[128];
            snprintf(why, sizeof why, "slice %llu of %llu is held by no rank",
                     (unsigned long long)p, (unsigned long long)pieces);
            return refuse(g, 0, g->t[0], err, why);
        }
    return 0;
}

/* The pieces' extents, in grid order (tensor_grid.h). */
static int place_pieces(merge *g, ck_tensor *t, const uint64_t *grid, uint64_t pieces,
                        ck_error *err)
{
    for (uint64_t p = 0; p < pieces; p++)
        g->pieces[p] = (ck_grid_piece){.t = g->t[g->owner[p]],
                                       .src_base = g->ranks->src_base[g->owner[p]]};
    char what[CK_QUOTE_BUF + 32], q[CK_QUOTE_BUF];
    snprintf(what, sizeof what, "%s: parameter '%s'", g->path, quoted(t, q));
    return ck_grid_place(&g->m->index.arena, t, grid, NULL, g->pieces, what, err);
}

static int merge_one(merge *g, const ck_tensor *t0, ck_error *err)
{
    const ck_layout *l = ck_strategy_find(g->strategy, t0->name, t0->name_len);
    uint64_t grid[CK_MAX_DIMS], pieces;
    int64_t full[CK_MAX_DIMS];
    if (gather_ranks(g, t0, err) < 0 || check_slices(g, l, err) < 0 ||
        grid_of(g, l, grid, full, &pieces, err) < 0 || owners(g, l, grid, pieces, err) < 0)
        return -1;
    ck_index *ix = &g->m->index;
    long id = ck_index_add(ix);
    if (id < 0)
        return ck_nomem(err, g->path);
    ck_tensor *t = &ix->tensors[id];
    char *name = ck_arena_strndup(&ix->arena, t0->name, t0->name_len);
    int64_t *dims = ck_arena_alloc(&ix->arena, (t0->ndim ? t0->ndim : 1) * sizeof *dims);
    if (name == NULL || dims == NULL)
        return ck_nomem(err, g->path);
    memcpy(dims, full, t0->ndim * sizeof *dims);
    uint64_t nbytes = t0->nbytes;
    for (uint32_t d = 0; d < t0->ndim; d++)
        nbytes *= grid[d]; /* at most the ranks' bytes together: no overflow */
    *t = (ck_tensor){.name = name, .name_len = t0->name_len, .type_name = t0->type_name,
                     .dtype = t0->dtype, .dims = dims, .ndim = t0->ndim, .nbytes = nbytes,
                     .scalar_dims_zero = t0->scalar_dims_zero, .read_only = true};
    return place_pieces(g, t, grid, pieces, err);
}

/* ---- the model -------------------------------------------------------- */

/* The strategy must not describe parameters the checkpoint lacks: it
 * would be another run's, whose cuts need not be these. */
static int check_strategy_names(merge *g, ck_error *err)
{
    for (size_t i = 0; i < g->strategy->n; i++) {
        const char *name = g->strategy->layouts[i].name;
        if (ck_mset_find(g->ranks, 0, name, strlen(name)) == NULL) {
            char q[CK_QUOTE_BUF];
            return ck_fail(err, EINVAL, "%s: rank_0 has no parameter '%s', which the strategy "
                           "names (a strategy of another run?)", g->ranks->models[0]->path,
                           ck_quote(q, name, strlen(name)));
        }
    }
    return 0;
}

/* Rank r holds other parameters than rank 0: name one. */
static int other_parameters(merge *g, uint32_t r, ck_error *err)
{
    char q[CK_QUOTE_BUF];
    const char *rpath = g->ranks->models[r]->path;
    for (int way = 0; way < 2; way++) {
        uint32_t from = way == 0 ? 0 : r, in = way == 0 ? r : 0;
        for (size_t k = 0; k < g->ranks->models[from]->index.n_live; k++) {
            const ck_tensor *t = ck_mset_sorted(g->ranks, from, k);
            if (ck_mset_find(g->ranks, in, t->name, t->name_len) != NULL)
                continue;
            return ck_fail(err, EINVAL, way == 0 ? "%s: no parameter '%s', which rank_0 has"
                                                 : "%s: parameter '%s', which rank_0 lacks",
                           rpath, quoted(t, q));
        }
    }
    return ck_fail(err, EINVAL, "%s: other parameters than rank_0's", rpath);
}

static int merge_all(merge *g, ck_error *err)
{
    uint32_t n = g->ranks->n;
    g->t = calloc(n, sizeof *g->t);
    g->owner = calloc(n, sizeof *g->owner);
    g->pieces = calloc(n, sizeof *g->pieces);
    if (g->t == NULL || g->owner == NULL || g->pieces == NULL)
        return ck_nomem(err, g->path);
    const ck_index *ix0 = &g->ranks->models[0]->index;
    for (uint32_t r = 1; r < n; r++)
        if (g->ranks->models[r]->index.n_live != ix0->n_live)
            return other_parameters(g, r, err);
    if (check_strategy_names(g, err) < 0 || ck_mset_add_views(g->ranks, g->m, err) < 0)
        return -1;
    for (size_t i = 0; i < ix0->n_live; i++)
        if (merge_one(g, &ix0->tensors[ix0->live[i]], err) < 0)
            return -1;
    return ck_index_finalize(&g->m->index, g->path, err);
}

static void merge_free(merge *g)
{
    free(g->t);
    free(g->owner);
    free(g->pieces);
}

ck_model *ck_dist_open(const char *dist_path, const char *strategy_path, const ck_open_opts *o,
                       bool watch, ck_error *err)
{
    ck_strategy s;
    if (ck_strategy_load(strategy_path, &s, err) < 0)
        return NULL;
    if (s.devices > CK_DIST_MAX_RANKS) {
        ck_fail(err, EINVAL, "%s: a strategy for %llu devices (ckptfs merges at most %d ranks)",
                strategy_path, (unsigned long long)s.devices, CK_DIST_MAX_RANKS);
        ck_strategy_free(&s);
        return NULL;
    }
    ck_model_set *set = ck_mset_new((uint32_t)s.devices, dist_path, err);
    ck_model *m = NULL;
    if (set == NULL) {
        /* said */
    } else if (open_ranks(dist_path, (uint32_t)s.devices, o, watch, set, err) < 0) {
        ck_mset_free(set);
    } else if ((m = ck_model_assembled(set->models[0]->dir, dist_path, &dist_format, err)) ==
               NULL) {
        ck_mset_free(set);
    } else {
        m->state = set; /* closed with m from here on */
        snprintf(set->notes, sizeof set->notes, ", merged from %u ranks", set->n);
        ck_mset_stat(set, &m->st);
        merge g = {.path = dist_path, .strategy = &s, .m = m, .ranks = set};
        int rc = merge_all(&g, err);
        merge_free(&g);
        if (rc < 0) {
            ck_model_close(m);
            m = NULL;
        }
    }
    ck_strategy_free(&s);
    return m;
}

static ck_model *open_dist(const char *path, const ck_collection_opts *o, ck_error *err)
{
    return ck_dist_open(path, o->strategy, &o->open, o->watch, err);
}

const ck_collection ck_collection_dist = {
    .name = "distributed", .title = "a distributed checkpoint", .open = open_dist,
};
