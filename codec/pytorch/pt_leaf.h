/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_leaf: a leaf of a torch.save pickle (pt_pickle.h) as a tensor of the
 * index (tensor_index.h), for a torch.save file (pt_reader.h) and for the
 * items of a Distributed Checkpoint (dcp_dir.h) alike.
 *
 * A tensor is a view of a storage: a storage's record, a storage offset,
 * sizes and strides in elements.  A contiguous view is one extent of the
 * record; any other (a transpose, a Fortran-ordered array, every other
 * column) is a strided gather of it, shown row-major without a copy.
 * Checked: the storage fits its record (numel x item size), the view ends
 * inside the storage (offset + sum (size_d - 1) x stride_d < numel,
 * overflow-checked), and a view larger than its storage (a stride of 0) is
 * at most 16 MiB.  Dimensions of size 1 are dropped and dimensions
 * contiguous with the next merged; what is left is one run of stride 1
 * (one extent of the record) or a gather with steps: runs of the innermost
 * stride-1 dimension, or of one element, over one extent from the view's
 * first element to its last.  (How a sparse gather is read, a window at a
 * time or a run at a time, is ck_model_read's.)  tests/unit/test_gather.c
 * checks each way against bytes computed from the storage.
 *
 * A Python int, float or bool is a read-only 0-d int64, float64 or bool
 * (type names "int", "float", "bool") whose 8, 8 or 1 little-endian bytes
 * go to a scratch memfd at open, bound as a source of the model once every
 * leaf is in.
 */
#ifndef CK_PT_LEAF_H
#define CK_PT_LEAF_H

#include <stdbool.h>

#include <stdint.h>

#include "../core/arena.h"
#include "../core/model.h"
#include "../core/tensor_index.h"
#include "pt_pickle.h"

/* A view may show more bytes than its storage holds only by repeating
 * elements (stride 0, torch.expand); past this it is refused, so that a
 * file of a few bytes cannot stand for terabytes of reads. */
#define CK_PT_MAX_REPEATED (16u << 20)

/* Whether leaf l fits the record of record_size bytes holding its
 * storage: NULL, with the view's bytes in *nbytes; else what is wrong,
 * for a message naming the tensor. */
const char *ck_pt_view_check(const ck_pt_leaf *l, uint64_t record_size, uint64_t *nbytes);

/* Give t (its nbytes set) the extent of view l, whose storage's bytes
 * start at data in source src, and the gather of its strides when it is
 * not one run: 0; -1 with *why (a bad view: "its size, stride and offset
 * reach past its storage"), or with *why NULL when out of memory. */
int ck_pt_place_view(ck_arena *a, ck_tensor *t, const ck_pt_leaf *l, uint32_t src,
                     uint64_t data, const char **why);

/* The numbers of one model, in their scratch file until they are bound. */
typedef struct ck_pt_numbers {
    int fd;                     /* -1 until the first number */
    uint64_t size;
} ck_pt_numbers;

#define CK_PT_NUMBERS_INIT {.fd = -1}

/* Give t (a new tensor of m's index, its name set) number l's type, 0-d
 * shape and value, written to the scratch file. */
int ck_pt_number_add(ck_pt_numbers *nums, const ck_model *m, ck_tensor *t, const ck_pt_leaf *l,
                     ck_error *err);
/* Make the scratch file a source of m, and point the numbers at it; nums
 * is done with (and ck_pt_numbers_close does nothing more). */
int ck_pt_numbers_bind(ck_pt_numbers *nums, ck_model *m, ck_error *err);
void ck_pt_numbers_close(ck_pt_numbers *nums);

#endif
