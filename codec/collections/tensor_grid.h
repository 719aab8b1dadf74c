/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_grid: a full tensor described as a grid of equal slices, each a
 * whole tensor of another model (a rank's checkpoint, a shard file), with
 * no byte copied: what a distributed checkpoint merge (dist_merge) and a
 * MindSpore Transformers iteration directory (iteration_dir) both need.
 */
#ifndef CK_TENSOR_GRID_H
#define CK_TENSOR_GRID_H

#include <stdint.h>

#include "../core/ck_error.h"
#include "../core/tensor_index.h"

typedef struct ck_grid_piece {
    const ck_tensor *t;     /* one slice: a whole tensor of another model */
    uint32_t src_base;      /* that model's source i is source src_base + i here */
} ck_grid_piece;

/* Give t, whose ndim, dims and nbytes are the full tensor's, the extents
 * of pieces: grid[d] slices along dimension d, pieces in row-major order
 * over the grid, each of the full shape divided by the grid (the caller
 * has checked their shapes and types), or with cuts, cut along each
 * dimension d at cuts[d][0 .. grid[d]] (0 to the full size; a dimension
 * after the last one cut into several must be cut evenly: see ck_gather).
 * When a dimension after the first is cut, t also gets a ck_gather in
 * arena.  what names t in messages. */
int ck_grid_place(ck_arena *arena, ck_tensor *t, const uint64_t *grid,
                  const uint64_t *const *cuts, const ck_grid_piece *pieces, const char *what,
                  ck_error *err);

#endif
