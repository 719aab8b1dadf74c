/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_repickle: data.pkl written again for a tree whose tensors were
 * renamed, added, removed, retyped, reshaped, or edited out of a shared
 * storage.
 *
 * The original pickle's value is walked as the reader walked it (the same
 * leaves in the same order: the model's tensor ids) and pickled again at
 * protocol 2, as torch.save pickles: every value the tree does not show
 * (strings, None, an optimizer's hyperparameters, an OrderedDict's
 * _metadata) as it was; a kept tensor with its storage renumbered; an
 * edited or new tensor as _rebuild_tensor_v2 over a storage of its own,
 * row-major (a Parameter stays a Parameter).  Where a tensor goes:
 *   - under its old name, or renamed within its dict (the name still
 *     starts with the dict's), in its place;
 *   - otherwise (new, or renamed elsewhere) into the dict whose name is
 *     the longest prefix of its name, after that dict's items, keyed by
 *     the rest of the name (so "model.fc.weight" goes into "model" as
 *     "fc.weight", as state dicts key their tensors);
 *   - a list's or tuple's items are named by their places: they stay, and
 *     one removed or renamed is refused, since the later items' names
 *     would change; so is a name that a value not shown already has in
 *     the dict it would go to.
 * A kept tensor's _rebuild_tensor_v2 keeps its arguments but its storage
 * key; a storage named in a value not shown (a tensor in _metadata, say)
 * is renumbered too, its record copied.  A tensor whose bytes are its
 * original extents (renamed, or re-encoded whole) keeps its storage and
 * view, so shared storages stay shared and a strided view is not
 * flattened.  An edited or new tensor keeps its original requires_grad and
 * location (else False and "cpu"); wrappers (_rebuild_parameter,
 * _rebuild_from_type_v2) are kept, and values not shown are written with
 * NEWOBJ or REDUCE as they were.  Storages are keyed "0", "1"... in the
 * order the pickle first names them (torch.save's order).
 */
#ifndef CK_PT_REPICKLE_H
#define CK_PT_REPICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/byte_buf.h"
#include "../core/ck_error.h"
#include "../core/dtype.h"
#include "../pickle/pickle_vm.h"
#include "pt_zip.h"

#define CK_PT_NONE UINT32_MAX

/* A tensor of the new file. */
typedef struct ck_pt_out {
    const char *name;
    size_t name_len;
    uint32_t orig;              /* the original leaf (tensor id) it is, or CK_PT_NONE */
    uint32_t record;            /* its original storage's record, kept with its view
                                 * (an unchanged tensor); CK_PT_NONE: a storage of its
                                 * own, row-major, of dtype and dims */
    const ck_dtype *dtype;
    const int64_t *dims;
    uint32_t ndim;
} ck_pt_out;

/* A storage of the new file, its key its place in the list. */
typedef struct ck_pt_storage {
    uint32_t record;            /* the original record it copies, or CK_PT_NONE */
    uint32_t out;               /* else: the tensor whose bytes it is */
} ck_pt_storage;

typedef struct ck_pt_repickle {
    const ck_pickle *orig;      /* the original data.pkl's value (NULL: a new file) */
    size_t n_leaves;            /* its leaves: the model's tensors */
    size_t n_records;           /* the original archive's records */
    const ck_zip *zip;          /* that archive: the records of storages named in values
                                 * the tree does not show (an OrderedDict's _metadata may
                                 * hold a tensor) are found by name in it */
    const ck_pt_out *out;
    size_t n_out;
    const char *path;           /* the model, for messages */
    /* What it gives: */
    ck_wbuf pkl;                /* the new data.pkl (free pkl.p) */
    ck_pt_storage *storages;    /* malloc'd */
    size_t n_storages;
} ck_pt_repickle;

/* 0, or -1 with the reason naming the tensor (ENOTSUP: a place the rules
 * above have none for, a type PyTorch has no storage for). */
int ck_pt_repickle_run(ck_pt_repickle *r, ck_error *err);
void ck_pt_repickle_free(ck_pt_repickle *r);

#endif
