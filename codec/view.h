/* SPDX-License-Identifier: Apache-2.0 */
/*
 * view: how the mount shows a model, for mount/.  Types only, no .c of its
 * own: mount/ includes this, not the formats that fill it in.
 *
 * The tree's view: each tensor is a directory holding `meta`, a text of
 * its type and shape (OneFlow's VariableMetaInfo: oneflow/oneflow_meta.h
 * defines, writes and parses it), and `out`, its elements' bytes in
 * row-major order, as many as ck_view_shape counts for that meta.
 *
 * A file view (-o as=NAME): the model shown instead as the files a format
 * would hold it in, a format's optional ck_view (the registry's entry of
 * the format called NAME, registry.h ck_format_view).  Its build lays the
 * files out without reading a tensor's bytes: each file is a list of
 * segments, a segment either bytes of the view's own (a header, an index,
 * padding) or a run of one tensor's bytes, which the mount serves from the
 * model's extents as it serves `out`.  A view is only this layout; what
 * the files mean, and what the format cannot hold, stay in its folder.
 * -o as= with a name that is no format's, or a format's without a view,
 * is refused in one line listing the formats that have one.  The one view
 * so far is safetensors' (safetensors/safetensors_view.h); a .ckpt or .pt
 * view would be a folder's file of its own: records or ZIP headers as
 * bytes between the tensors' runs.
 */
#ifndef CK_VIEW_H
#define CK_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ck_error.h"
#include "core/dtype.h"
#include "oneflow/oneflow_meta.h"

struct ck_model;

/* The shapes a meta may give, and how its out's bytes are counted. */
static inline const ck_shape_rule *ck_view_shape(void)
{
    return &ck_shape_oneflow;
}

typedef enum ck_seg_kind {
    CK_SEG_BYTES,               /* len bytes at `bytes`, the view's own */
    CK_SEG_TENSOR,              /* len bytes of tensor `tensor`'s, from its byte `off` */
} ck_seg_kind;

/* A run of a file's bytes; a file's segments follow one another with no
 * gap.  A tensor of no bytes may have a segment of length 0: the file
 * still shows it, and an open checks who may read it. */
typedef struct ck_view_seg {
    ck_seg_kind kind;
    uint32_t tensor;            /* CK_SEG_TENSOR: its id, m->index.tensors[tensor] */
    uint64_t len;
    uint64_t off;               /* CK_SEG_TENSOR: within the tensor's bytes (`out`) */
    const unsigned char *bytes; /* CK_SEG_BYTES */
} ck_view_seg;

typedef struct ck_view_file {
    char *name;                 /* at the mount's root */
    uint64_t size;              /* its segments' lengths, summed */
    ck_view_seg *segs;
    size_t n_segs;
    /* It describes every tensor of the view without holding their bytes (a
     * sharded set's index): it opens only for who may read them all. */
    bool shows_all;
} ck_view_file;

/* What a build made: the files, and whatever else the view keeps for
 * them (the memory its segments' bytes are in). */
typedef struct ck_view_files {
    ck_view_file *files;
    size_t n;
    void *state;
} ck_view_files;

typedef struct ck_view_opts {
    const char *in;             /* the model as the user named it, for refusals */
    uint64_t max_shard;         /* -o max_shard_size: its files' most tensor bytes,
                                 * for a view that shards (0: one file) */
} ck_view_opts;

typedef struct ck_view {
    /* The files of model m into *out (zeroed first): 0, or -1 with err,
     * what the format cannot hold refused as its ckptfs-convert would
     * refuse it.  m must outlive them; free releases *out after a failed
     * build too. */
    int (*build)(const struct ck_model *m, const ck_view_opts *o, ck_view_files *out,
                 ck_error *err);
    void (*free)(ck_view_files *out);
} ck_view;

#endif
