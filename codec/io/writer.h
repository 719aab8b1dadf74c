/* SPDX-License-Identifier: Apache-2.0 */
/*
 * writer: what an encoder takes and what a format's writer is, apart from
 * the entry point that saves a model (encoder.h), so that the read-back
 * check (verify.h) and the formats' writers use them without including
 * the encoder that calls them.
 *
 * A tree is handed over as the list of its tensors in order: each either
 * an original tensor left as it was (copied byte for byte by the encoder)
 * or a tensor to encode from its name, type, shape and bytes.  An original
 * tensor missing from the list is deleted.
 */
#ifndef CK_WRITER_H
#define CK_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/model.h"
#include "byte_sink.h"
#include "commit_group.h"

#define CK_WRITE_NEW UINT32_MAX

typedef struct ck_write_tensor {
    uint32_t orig_id;           /* index id it came from, or CK_WRITE_NEW */
    bool unchanged;             /* identical to the original: copy its records */
    const char *name;           /* the rest is used when !unchanged */
    size_t name_len;
    const ck_dtype *dtype;
    const int64_t *dims;
    uint32_t ndim;
    bool scalar_dims_zero;      /* write a 0-d value as dims [0] (pre-2.3 files) */
    const ck_piece *pieces;     /* the bytes of `out` (UTF-8 text for str) */
    size_t n_pieces;
} ck_write_tensor;

/* The bytes tensor t of m shows as `out` (for str, its decoded text), as
 * pieces of m's sources: one per extent, into out (room for t->n_ext).
 * Returns how many. */
size_t ck_pieces_of(const ck_model *m, const ck_tensor *t, ck_piece *out);
/* Whether w's pieces are tensor t's extents of m, as they are: the
 * original's bytes, moved or renamed (for a gathered tensor, its slices or
 * strided storage, not its bytes in order: read them with ck_model_read). */
bool ck_pieces_are_extents(const ck_model *m, const ck_write_tensor *w, const ck_tensor *t);
/* The bytes of a tensor to encode: the sum of its pieces. */
uint64_t ck_pieces_len(const ck_write_tensor *t);
/* Tensor t of the model (its index id) as the encoder takes it unchanged:
 * name, type and shape as indexed, its records copied.  For new bytes, set
 * unchanged to false and give pieces (and orig_id CK_WRITE_NEW for a model
 * it does not come from). */
ck_write_tensor ck_write_unchanged(const ck_tensor *t, uint32_t id);
/* Tensor t of m as new bytes, its own: as ck_write_unchanged, with its
 * extents as pieces, put at *next (room for t->n_ext), which moves past
 * them.  So it is encoded anew, or moved to another file. */
ck_write_tensor ck_write_own(const ck_model *m, const ck_tensor *t, uint32_t id,
                             ck_piece **next);

/* A format's writer, paired with its reader in the registry (codec/registry.h). */
typedef struct ck_writer {
    /* Encode the tree into the group's first file, adding the data files
     * that change.  Errors name the tensor. */
    int (*encode)(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                  ck_commit_group *g, ck_error *err);
    /* The data file a save may add beside the model: its name, relative to
     * the model's directory, into rel; false when there is none. */
    bool (*new_data_file)(const ck_model *m, char *rel, size_t size);
    /* How a saved file reads back, for its check (verify.c): */
    bool in_tree_order;         /* every tensor at its tree position; else new
                                 * ones may follow the originals, in order */
    bool own_order;             /* the writer orders tensors by its own rule
                                 * (safetensors: dtype, then name) */
    bool prefixes_names;        /* new and renamed tensors get a prefix the tree
                                 * does not show (MindIR: its graph's name) */
    bool (*same_type)(const ck_dtype *a, const ck_dtype *b); /* of one kind and
                                 * OneFlow type: the same in the file */
    const ck_shape_rule *shape; /* the shapes its reader takes (dtype.h) */
} ck_writer;


#endif
