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
#include "run_dir.h"

typedef struct dist_state {
    ck_model **ranks;
    uint32_t n;
    char notes[64];
} dist_state;

/* One rank's parameters by name, for lookups. */
typedef struct by_name {
    const ck_index *ix;
    uint32_t *ids;
    size_t n;
} by_name;

/* What a merge is working with. */
typedef struct merge {
    const char *path;           /* DIST_DIR, for messages */
    const ck_strategy *strategy;
    ck_model *m;                /* the merged model */
    dist_state *st;
    by_name *names;             /* per rank */
    uint32_t *src_base;         /* rank r's source i is the merged model's src_base[r] + i */
    const ck_tensor **t;        /* per rank: the parameter being merged */
    uint32_t *owner;            /* per grid piece: the lowest rank holding it */
} merge;

static void dist_free_state(void *state)
{
    dist_state *st = state;
    for (uint32_t r = 0; r < st->n; r++)
        ck_model_close(st->ranks[r]);
    free(st->ranks);
    free(st);
}

static const char *dist_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    const dist_state *st = m->state;
    return t != NULL ? t->type_name : ck_model_type_name(st->ranks[0], NULL, dt);
}

static bool dist_is_data_file(const ck_model *m, uint32_t i)
{
    (void)m; /* every source is a view of a rank's: the ranks' files are their own */
    (void)i;
    return false;
}

static const char *dist_notes(const ck_model *m)
{
    return ((const dist_state *)m->state)->notes;
}

/* Not in format.c's table: nothing is recognised as one, or saved as one. */
static const ck_format dist_format = {
    .name = "distributed",
    .title = "merged distributed checkpoint",
    .extension = "",
    .free_state = dist_free_state,
    .type_name = dist_type_name,
    .is_data_file = dist_is_data_file,
    .notes = dist_notes,
};

static int nomem(const char *path, ck_error *err)
{
    return ck_fail(err, ENOMEM, "%s: out of memory", path);
}

/* ---- finding the ranks ------------------------------------------------ */

/* Open DIST_DIR/rank_<r>/ for every r < n into fds (O_PATH, no link
 * followed); refuses a rank missing, a rank_<id> at or beyond n, and a
 * rank_<id> that is not a directory. */
static int open_rank_dirs(int dfd, const char *path, uint32_t n, int *fds, ck_error *err)
{
    int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = lfd < 0 ? NULL : fdopendir(lfd);
    if (d == NULL) {
        if (lfd >= 0)
            close(lfd);
        return ck_fail_errno(err, errno, "%s: cannot list the directory", path);
    }
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

/* The one checkpoint in rank r's directory, opened as a model.  watch:
 * its files are watched for writes, with rank 0's watch when rank0 is
 * given (one inotify instance for all ranks). */
static ck_model *open_rank(int rfd, const char *path, uint32_t r, const ck_open_opts *o,
                           bool watch, const ck_model *rank0, ck_error *err)
{
    char dir[PATH_MAX], file[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/rank_%u", path, r) >= sizeof dir) {
        ck_fail(err, ENAMETOOLONG, "%s: the path is too long", path);
        return NULL;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    ck_run_list list = {0};
    ck_model *m = NULL;
    if (ck_run_dir_scan_at(rfd, dir, 0, &now, &list, err) < 0) {
        /* said */
    } else if (list.n != 1) {
        ck_fail(err, EINVAL, "%s: %zu checkpoints (a rank's directory holds exactly one)", dir,
                list.n);
    } else if ((size_t)snprintf(file, sizeof file, "%s/%s", dir, list.e[0].file) >=
               sizeof file) {
        ck_fail(err, ENAMETOOLONG, "%s: the path is too long", dir);
    } else {
        ck_model_dir *d = ck_dir_in(rfd, dir, list.e[0].file, err);
        if (d != NULL) {
            if (watch && rank0 == NULL)
                ck_dir_watch_files(d);
            else if (watch)
                ck_dir_share_watch(d, rank0->dir->watch);
            m = ck_model_open_at(d, file, o, err);
            ck_dir_unref(d);
        }
    }
    ck_run_list_free(&list);
    return m;
}

static int open_ranks(const char *path, uint32_t n, const ck_open_opts *o, bool watch,
                      dist_state *st, ck_error *err)
{
    int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return ck_fail_errno(err, errno, "%s: cannot open the directory", path);
    int *fds = malloc(n * sizeof *fds);
    st->ranks = calloc(n, sizeof *st->ranks);
    int rc = fds == NULL || st->ranks == NULL ? nomem(path, err) : 0;
    for (uint32_t r = 0; fds != NULL && r < n; r++)
        fds[r] = -1;
    if (rc == 0)
        rc = open_rank_dirs(dfd, path, n, fds, err);
    for (uint32_t r = 0; rc == 0 && r < n; r++) {
        const ck_model *rank0 = r > 0 ? st->ranks[0] : NULL;
        if ((st->ranks[r] = open_rank(fds[r], path, r, o, watch, rank0, err)) == NULL)
            rc = -1;
        st->n = r + 1;
    }
    for (uint32_t r = 0; fds != NULL && r < n; r++)
        if (fds[r] >= 0)
            close(fds[r]);
    free(fds);
    close(dfd);
    return rc;
}

/* ---- parameters by name ----------------------------------------------- */

static int cmp_name(const ck_tensor *a, const char *name, size_t len)
{
    int c = memcmp(a->name, name, a->name_len < len ? a->name_len : len);
    return c != 0 ? c : (a->name_len > len) - (a->name_len < len);
}

static int cmp_ids(const void *a, const void *b, void *ix_)
{
    const ck_index *ix = ix_;
    const ck_tensor *y = &ix->tensors[*(const uint32_t *)b];
    return cmp_name(&ix->tensors[*(const uint32_t *)a], y->name, y->name_len);
}

static int index_names(by_name *bn, const ck_index *ix, const char *path, ck_error *err)
{
    bn->ix = ix;
    bn->n = ix->n_live;
    bn->ids = malloc((bn->n ? bn->n : 1) * sizeof *bn->ids);
    if (bn->ids == NULL)
        return nomem(path, err);
    memcpy(bn->ids, ix->live, bn->n * sizeof *bn->ids);
    qsort_r(bn->ids, bn->n, sizeof *bn->ids, cmp_ids, (void *)ix);
    return 0;
}

static const ck_tensor *find(const by_name *bn, const char *name, size_t len)
{
    size_t lo = 0, hi = bn->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ck_tensor *t = &bn->ix->tensors[bn->ids[mid]];
        int c = cmp_name(t, name, len);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

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
    for (uint32_t r = 0; r < g->st->n; r++) {
        const ck_tensor *t = r == 0 ? t0 : find(&g->names[r], t0->name, t0->name_len);
        const char *rpath = g->st->ranks[r]->path;
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
    return ck_fail(err, EINVAL, "%s: parameter '%s': %s", g->st->ranks[r]->path,
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
    for (uint32_t r = 1; r < g->st->n; r++) {
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
            __builtin_mul_overflow(*pieces, grid[d], pieces) || *pieces > g->st->n)
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
    for (uint32_t r = g->st->n; l != NULL && r-- > 0;)
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

static int add_extents(merge *g, ck_tensor *t, uint32_t r, ck_error *err)
{
    const ck_tensor *from = g->t[r];
    for (uint32_t k = 0; k < from->n_ext; k++) {
        const ck_extent *x = ck_tensor_ext(from, k);
        if (ck_tensor_add_extent(t, g->src_base[r] + x->src, x->off, x->len) < 0)
            return nomem(g->path, err);
    }
    return 0;
}

/* The interleaving of pieces cut along more than dim 0 (tensor_index.h). */
static int describe_gather(merge *g, ck_tensor *t, const uint64_t *grid, uint32_t last,
                           ck_error *err)
{
    ck_arena *a = &g->m->index.arena;
    ck_gather *gt = ck_arena_alloc(a, sizeof *gt);
    uint64_t *full = ck_arena_alloc(a, (last + 1) * sizeof *full);
    uint64_t *split = ck_arena_alloc(a, (last + 1) * sizeof *split);
    if (gt == NULL || full == NULL || split == NULL)
        return nomem(g->path, err);
    uint64_t rows = 1; /* of a piece, before dimension `last` */
    for (uint32_t d = 0; d <= last; d++) {
        full[d] = (uint64_t)t->dims[d];
        split[d] = grid[d];
        if (d < last)
            rows *= (uint64_t)g->t[0]->dims[d];
    }
    const ck_tensor *p0 = g->t[0];
    if (rows == 0 || p0->nbytes % rows != 0 || p0->nbytes == 0)
        return refuse(g, 0, p0, err, "its size does not match its shape");
    *gt = (ck_gather){.ndim = last + 1, .run = p0->nbytes / rows, .full = full, .split = split};
    t->gather = gt;
    return 0;
}

/* The pieces' extents, in grid order; a gather when a dimension after the
 * first is cut. */
static int place_pieces(merge *g, ck_tensor *t, const uint64_t *grid, uint64_t pieces,
                        ck_error *err)
{
    int last = -1;
    for (uint32_t d = 0; d < t->ndim && t->nbytes > 0; d++)
        if (grid[d] > 1)
            last = (int)d;
    if (last > 0) {
        for (uint64_t p = 0; p < pieces; p++) {
            const ck_tensor *from = g->t[g->owner[p]];
            if (from->n_ext != 1 || from->ext0.len != from->nbytes)
                return refuse(g, g->owner[p], from, err, "stored in pieces, which ckptfs "
                              "cannot interleave");
        }
    }
    for (uint64_t p = 0; p < pieces; p++)
        if (add_extents(g, t, g->owner[p], err) < 0)
            return -1;
    return last > 0 ? describe_gather(g, t, grid, (uint32_t)last, err) : 0;
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
        return nomem(g->path, err);
    ck_tensor *t = &ix->tensors[id];
    char *name = ck_arena_strndup(&ix->arena, t0->name, t0->name_len);
    int64_t *dims = ck_arena_alloc(&ix->arena, (t0->ndim ? t0->ndim : 1) * sizeof *dims);
    if (name == NULL || dims == NULL)
        return nomem(g->path, err);
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
        if (find(&g->names[0], name, strlen(name)) == NULL) {
            char q[CK_QUOTE_BUF];
            return ck_fail(err, EINVAL, "%s: rank_0 has no parameter '%s', which the strategy "
                           "names (a strategy of another run?)", g->st->ranks[0]->path,
                           ck_quote(q, name, strlen(name)));
        }
    }
    return 0;
}

static int add_views(merge *g, ck_error *err)
{
    for (uint32_t r = 0; r < g->st->n; r++) {
        const ck_model *rm = g->st->ranks[r];
        g->src_base[r] = g->m->n_sources;
        for (uint32_t i = 0; i < rm->n_sources; i++) {
            ck_source *v = ck_source_view(rm->sources[i], err);
            long id = v == NULL ? -1 : ck_model_add_source(g->m, v, err);
            if (id < 0)
                return -1;
            /* A decoding rank source is serialized by its own model's lock,
             * which its reads take: the merged model's would only serialize
             * the ranks against each other. */
            g->m->sources[id]->serial = NULL;
        }
    }
    return 0;
}

/* Rank r holds other parameters than rank 0: name one. */
static int other_parameters(merge *g, uint32_t r, ck_error *err)
{
    char q[CK_QUOTE_BUF];
    const char *rpath = g->st->ranks[r]->path;
    for (int way = 0; way < 2; way++) {
        const by_name *from = &g->names[way == 0 ? 0 : r], *in = &g->names[way == 0 ? r : 0];
        for (size_t i = 0; i < from->n; i++) {
            const ck_tensor *t = &from->ix->tensors[from->ids[i]];
            if (find(in, t->name, t->name_len) != NULL)
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
    uint32_t n = g->st->n;
    g->names = calloc(n, sizeof *g->names);
    g->src_base = calloc(n, sizeof *g->src_base);
    g->t = calloc(n, sizeof *g->t);
    g->owner = calloc(n, sizeof *g->owner);
    if (g->names == NULL || g->src_base == NULL || g->t == NULL || g->owner == NULL)
        return nomem(g->path, err);
    for (uint32_t r = 0; r < n; r++) {
        const ck_model *rm = g->st->ranks[r];
        if (index_names(&g->names[r], &rm->index, rm->path, err) < 0)
            return -1;
        if (r > 0 && rm->index.n_live != g->st->ranks[0]->index.n_live)
            return other_parameters(g, r, err);
    }
    if (check_strategy_names(g, err) < 0 || add_views(g, err) < 0)
        return -1;
    const ck_index *ix0 = &g->st->ranks[0]->index;
    for (size_t i = 0; i < ix0->n_live; i++)
        if (merge_one(g, &ix0->tensors[ix0->live[i]], err) < 0)
            return -1;
    return ck_index_finalize(&g->m->index, g->path, err);
}

static void merge_free(merge *g)
{
    for (uint32_t r = 0; g->names != NULL && r < g->st->n; r++)
        free(g->names[r].ids);
    free(g->names);
    free(g->src_base);
    free(g->t);
    free(g->owner);
}

/* What the mount shows as the model file's attributes: rank 0's file's
 * owner and times, all ranks' size, and only the permissions every rank's
 * file grants: a merged tensor holds bytes of each. */
static void merged_stat(ck_model *m, const dist_state *st)
{
    m->st = st->ranks[0]->st;
    m->st.st_size = 0;
    for (uint32_t r = 0; r < st->n; r++) {
        m->st.st_size += st->ranks[r]->st.st_size;
        m->st.st_mode &= st->ranks[r]->st.st_mode | S_IFMT;
    }
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
    dist_state *st = calloc(1, sizeof *st);
    ck_model *m = NULL;
    if (st == NULL) {
        nomem(dist_path, err);
    } else if (open_ranks(dist_path, (uint32_t)s.devices, o, watch, st, err) < 0) {
        dist_free_state(st);
    } else if ((m = ck_model_assembled(st->ranks[0]->dir, dist_path, &dist_format, err)) ==
               NULL) {
        dist_free_state(st);
    } else {
        m->state = st; /* closed with m from here on */
        snprintf(st->notes, sizeof st->notes, ", merged from %u ranks", st->n);
        merged_stat(m, st);
        merge g = {.path = dist_path, .strategy = &s, .m = m, .st = st};
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
