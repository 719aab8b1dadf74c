/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_grid: a full tensor as a grid of slices (tensor_grid.h).
 *
 * When only dim 0 is cut, the slices simply follow each other: their
 * extents, in order, are the tensor's.  When a later dimension is cut, the
 * tensor's bytes interleave the slices' rows; ck_gather (tensor_index.h)
 * says how, and every slice must then be one extent.  Uneven cuts (a
 * PyTorch Distributed Checkpoint's) are copied into the gather, and every
 * slice checked to hold whole runs of the one length.
 */
#include "tensor_grid.h"

#include <errno.h>
#include <string.h>

static int add_extents(ck_tensor *t, const ck_grid_piece *p, const char *what, ck_error *err)
{
    for (uint32_t k = 0; k < p->t->n_ext; k++) {
        const ck_extent *x = ck_tensor_ext(p->t, k);
        if (ck_tensor_add_extent(t, p->src_base + x->src, x->off, x->len) < 0)
            return ck_nomem(err, what);
    }
    return 0;
}

/* Slice s's rows before dimension last: its runs. */
static uint64_t rows_of(const ck_tensor *s, uint32_t last)
{
    uint64_t rows = 1;
    for (uint32_t d = 0; d < last; d++)
        rows *= (uint64_t)s->dims[d];
    return rows;
}

/* cuts[0 .. last) into the arena, for the gather to keep. */
static const uint64_t *const *copy_cuts(ck_arena *a, const uint64_t *const *cuts,
                                        const uint64_t *grid, uint32_t last)
{
    const uint64_t **out = ck_arena_alloc(a, (last ? last : 1) * sizeof *out);
    for (uint32_t d = 0; out != NULL && d < last; d++) {
        uint64_t *c = ck_arena_alloc(a, (grid[d] + 1) * sizeof *c);
        if (c == NULL)
            return NULL;
        memcpy(c, cuts[d], (grid[d] + 1) * sizeof *c);
        out[d] = c;
    }
    return (const uint64_t *const *)out;
}

/* The interleaving when dimension last > 0 is the last one cut. */
static int describe_gather(ck_arena *a, ck_tensor *t, const uint64_t *grid,
                           const uint64_t *const *cuts, uint32_t last,
                           const ck_grid_piece *pieces, uint64_t n, const char *what,
                           ck_error *err)
{
    ck_gather *g = ck_arena_alloc(a, sizeof *g);
    uint64_t *full = ck_arena_alloc(a, (last + 1) * sizeof *full);
    uint64_t *split = ck_arena_alloc(a, (last + 1) * sizeof *split);
    const uint64_t *const *kept = cuts != NULL ? copy_cuts(a, cuts, grid, last) : NULL;
    if (g == NULL || full == NULL || split == NULL || (cuts != NULL && kept == NULL))
        return ck_nomem(err, what);
    for (uint32_t d = 0; d <= last; d++) {
        full[d] = (uint64_t)t->dims[d];
        split[d] = grid[d];
    }
    const ck_tensor *first = pieces[0].t;
    uint64_t rows = rows_of(first, last);
    if (rows == 0 || first->nbytes == 0 || first->nbytes % rows != 0)
        return ck_fail(err, EINVAL, "%s: a slice's size does not match its shape", what);
    uint64_t run = first->nbytes / rows;
    for (uint64_t p = 1; p < n; p++) /* uneven slices: rows of one length still */
        if (pieces[p].t->nbytes != rows_of(pieces[p].t, last) * run)
            return ck_fail(err, EINVAL, "%s: a slice's size does not match its shape", what);
    *g = (ck_gather){.ndim = last + 1, .run = run, .full = full, .split = split,
                     .cuts = kept};
    t->gather = g;
    return 0;
}

int ck_grid_place(ck_arena *arena, ck_tensor *t, const uint64_t *grid,
                  const uint64_t *const *cuts, const ck_grid_piece *pieces, const char *what,
                  ck_error *err)
{
    uint64_t n = 1;
    int last = -1;
    for (uint32_t d = 0; d < t->ndim; d++) {
        n *= grid[d];
        if (grid[d] > 1 && t->nbytes > 0)
            last = (int)d;
    }
    for (uint64_t p = 0; last > 0 && p < n; p++) {
        const ck_tensor *s = pieces[p].t;
        if (s->n_ext != 1 || s->ext0.len != s->nbytes)
            return ck_fail(err, EINVAL, "%s: a slice stored in pieces, which ckptfs cannot "
                           "interleave", what);
    }
    for (uint64_t p = 0; p < n; p++)
        if (add_extents(t, &pieces[p], what, err) < 0)
            return -1;
    return last > 0 ? describe_gather(arena, t, grid, cuts, (uint32_t)last, pieces, n, what,
                                      err)
                    : 0;
}
