/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_index: what a format reader produces and everything above reads.
 *
 * For each tensor the index holds its name, type, presented shape, and where
 * its bytes are: a list of extents (plaintext ranges of a byte source; for
 * the rare tensors whose bytes must be transformed, such as MindSpore `str`
 * values shown as UTF-8, ranges of a temporary file the reader decoded them
 * into).  Tensor bytes themselves are never loaded.  Every format's reader
 * fills the same structure, and the FUSE front-end and the encoders only
 * see this.  Beside them each tensor keeps the file span of its records
 * (rec_off, rec_end) and how a 0-d value was stored (scalar_dims_zero),
 * which the encoders need.
 *
 * Tensors are kept in file order, including entries a later record of the
 * same name replaced (`superseded`), because the encoders need the complete
 * record layout to re-create a file byte for byte: the bytes between known
 * spans (unknown top-level fields) are carried over verbatim, and an
 * unchanged tree re-encodes byte for byte.
 *
 * Names and dims live in an arena; memory is O(tensors), about 200 bytes
 * per tensor plus its name, whatever the file's size.  A temporary hash map
 * finds two tensors with one directory name at finalize; the mount's
 * lookups use the tree's own map.  A gathered tensor's run is found by
 * arithmetic over its dimensions (ck_tensor_for_range; with uneven cuts, a
 * binary search of each dimension's cuts), so the front-end always
 * gets (source, offset, length) pieces to splice, and no merged or strided
 * byte is ever built.
 */
#ifndef CK_TENSOR_INDEX_H
#define CK_TENSOR_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "ck_error.h"
#include "dtype.h"
#include "name_map.h"

#define CK_MAX_DIMS 64
/* About 200 bytes of index each: a file of millions of empty records must
 * not be able to make the daemon allocate without bound. */
#define CK_MAX_TENSORS 10000000u

typedef struct ck_extent {
    uint64_t off;       /* plaintext offset in the source */
    uint64_t len;
    uint32_t src;       /* which of the model's byte sources */
} ck_extent;

/* A tensor merged from slices that interleave in its bytes (a distributed
 * checkpoint split along a dimension other than the first): the tensor is
 * a sequence of runs of `run` bytes, each a contiguous row of one slice.
 * Its extents are then the slices, one each, in row-major order over
 * split[0 .. ndim - 1]; every slice holds full[d] / split[d] of dimension d,
 * or with cuts, the slices along a dimension before the last split one may
 * differ: cuts[d] holds the split[d] + 1 boundaries of d's slices, from 0
 * to full[d] (a PyTorch Distributed Checkpoint's rows cut unevenly by
 * FSDP, columns evenly by tensor parallelism).  The last split dimension
 * is always cut evenly, so that every run has one length.  Only dimensions
 * up to the last split one are described: after it, a run covers them
 * whole.  (A split of dim 0 alone needs none of this: the slices simply
 * follow each other, one extent each.) */
/* A view whose elements are not in row-major order in its one extent (a
 * PyTorch tensor with strides: a transpose, a slice of a wider tensor) is
 * a gather too: with step set, run q starts at byte sum over d of x_d *
 * step[d] of the extent, (x_0 .. x_{ndim-1}) being q in row-major order
 * over full[]; split is unused. */
typedef struct ck_gather {
    uint32_t ndim;              /* up to and including the last split dimension */
    uint64_t run;               /* bytes of one run: a slice's row from that dimension on */
    const uint64_t *full;       /* the merged tensor's sizes of those dimensions */
    const uint64_t *split;      /* and how many slices each is cut into */
    const uint64_t *const *cuts; /* uneven slices' boundaries (above), or NULL: even */
    const uint64_t *step;       /* a strided view: each dimension's step in bytes */
} ck_gather;

/* A MindSpore map parameter is one record holding three tensors; each is
 * shown as its own directory. */
typedef enum ck_part {
    CK_PART_WHOLE = 0,
    CK_PART_MAP_KEY,
    CK_PART_MAP_VALUE,
    CK_PART_MAP_STATUS,
} ck_part;

typedef struct ck_tensor {
    const char *name;           /* original name (may hold any byte), NUL-ended */
    const char *dir_name;       /* escaped, NUL-terminated, set by finalize */
    const char *dir_src;        /* what the directory name is made of, if not
                                 * the whole name (MindIR: after the first ':') */
    const char *dir_suffix;     /* generated suffix ("%const", "%@NODE.ATTR") */
    const char *type_name;      /* the format's own type string */
    const ck_dtype *dtype;
    const int64_t *dims;        /* presented shape (0-d: ndim 0) */
    uint64_t nbytes;            /* size of `out` */
    ck_extent ext0;             /* where `out` comes from: ext0, then ... */
    ck_extent *ext_more;        /* ... n_ext - 1 more (sliced tensors) */
    const ck_gather *gather;    /* the extents interleave (see above), or NULL */
    uint64_t rec_off, rec_end;  /* file span of the tensor's records */
    uint32_t name_len, dir_src_len;
    uint32_t ndim;
    uint32_t n_ext, cap_more;
    uint8_t part;               /* ck_part */
    bool superseded;            /* replaced by a later record of the same name */
    bool scalar_dims_zero;      /* stored as dims [0] + one element (pre-2.3) */
    bool read_only;             /* shown as stored; edits refused (see dtype kinds) */
} ck_tensor;

typedef struct ck_index {
    ck_tensor *tensors;         /* file order, superseded ones included */
    size_t count, cap;
    uint32_t *live;             /* ids of the visible tensors, tree order */
    size_t n_live;
    ck_arena arena;
} ck_index;

void ck_index_init(ck_index *ix);
void ck_index_free(ck_index *ix);

/* Append a zeroed tensor; returns its id, or -1 on allocation failure.
 * Pointers into ix->tensors are invalidated by the next add. */
long ck_index_add(ck_index *ix);

int ck_tensor_add_extent(ck_tensor *t, uint32_t src, uint64_t off, uint64_t len);

/* t's one extent read in the order of a strided view of it: element x
 * (row-major over size[0..ndim)) is element sum x_d * stride[d] of the
 * extent (es bytes each; the caller checked that every one is inside).
 * Sets t->gather (in a), or none when that order is the extent's own.
 * size and stride are scratch.  -1: out of memory. */
int ck_tensor_set_strided(ck_arena *a, ck_tensor *t, uint64_t *size, uint64_t *stride,
                          uint32_t ndim, unsigned es);

/* Extent i < t->n_ext.  Nearly every tensor has exactly one, kept inline. */
static inline const ck_extent *ck_tensor_ext(const ck_tensor *t, uint32_t i)
{
    return i == 0 ? &t->ext0 : &t->ext_more[i - 1];
}

/* After a reader is done: compute directory names and the visible list;
 * refuses two tensors that map to one directory.  (Looking tensors up by
 * directory name is the front-end's business: its tree keeps the map, so
 * the index does not hold a second one.) */
int ck_index_finalize(ck_index *ix, const char *path, ck_error *err);
/* The visible tensors become ids[0..n) (visible ones), in that order,
 * each named names[i] (copied) as its whole name: a map's outcome
 * (codec/map/map_model.h).  Their directory names are made again, and
 * two that meet refused as ck_index_finalize refuses them. */
int ck_index_rename(ck_index *ix, const uint32_t *ids, const char *const *names, size_t n,
                    const char *path, ck_error *err);

/* Call fn for each piece of the source ranges that hold bytes
 * [off, off + size) of an extent-backed tensor (clipped to nbytes).
 * Stops and returns fn's value if it is non-zero. */
typedef int (*ck_piece_fn)(void *ctx, uint32_t src, uint64_t src_off, size_t len);
int ck_tensor_for_range(const ck_tensor *t, uint64_t off, size_t size, ck_piece_fn fn,
                        void *ctx);
/* Run q of a gathered tensor: the extent (slice) holding it, and the
 * run's offset in that slice in *at.  Consecutive runs of one slice are
 * consecutive in it: the slice's rows are visited in their own order. */
uint32_t ck_tensor_gather_run(const ck_tensor *t, uint64_t q, uint64_t *at);

/* A map parameter's part ("key", "value", "status"), or NULL for a tensor
 * of its own. */
const char *ck_tensor_part_name(const ck_tensor *t);

/* The most pieces ck_tensor_for_range may give for bytes [off, off + size)
 * of t. */
size_t ck_tensor_max_pieces(const ck_tensor *t, uint64_t off, size_t size);

/* Bytes of memory the index holds, for the benchmark's accounting. */
size_t ck_index_memory(const ck_index *ix);

/* A tensor's one name, in every tool and in the mount: its own, unless the
 * mount shows it otherwise: a graph's constant or subgraph tensor (its
 * directory's generated suffix, "%const", "%@NODE.ATTR", "%dup2"..., tells
 * it from the tensors of the same name), a MindIR parameter (without its
 * "<graph>:" prefix).  Then the shown name, its escaped part decoded; a
 * name shortened by a hash stays as shown.  ck_tensor_has_own_name: the
 * name is t->name; else ck_tensor_shown_name allocates it (NULL: out of
 * memory). */
bool ck_tensor_has_own_name(const ck_tensor *t);
char *ck_tensor_shown_name(const ck_tensor *t);

/* A shape as messages, the tools and the shape xattr show it: "[3,4]",
 * "[]" for a scalar (cut at cap, which is at least 1).  Its length. */
size_t ck_dims_text(const int64_t *dims, uint32_t ndim, char *out, size_t cap);

#endif
