/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_dir_writer: a model written out as a OneFlow snapshot directory.
 *
 * The layout is the legacy one that every OneFlow >= 0.5 loads with
 * flow.load (and 0.3/0.4 with flow.checkpoint.get): one directory per
 * tensor, named as the mount shows it (dir_name.h), holding `meta` (the
 * VariableMetaInfo text, oneflow_meta.h) and `out` (the raw little-endian
 * elements), and an empty `snapshot_done` at the root.  No `pickled_data`:
 * OneFlow >= 0.6 would then take its pickle branch instead.
 *
 * Atomic: the tree is written into a temporary directory beside OUT,
 * ".<OUT>.ckptfs-XXXXXX", made durable (syncfs), read back and
 * checked against the tensors (names, meta, sizes, bytes), and only then
 * renamed into place (exchanged with an existing OUT, which is removed
 * after).  A crash leaves OUT absent, or old, or new and complete; the
 * temporary directories it leaves are removed by the next write to the
 * same OUT.  An existing OUT is only replaced with force, and only when it
 * is a OneFlow snapshot or empty: nothing else is ever removed.
 */
#ifndef CK_ONEFLOW_DIR_WRITER_H
#define CK_ONEFLOW_DIR_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/model.h"
#include "../../export/writer.h"
#include "../../export/progress.h"

typedef struct ck_oneflow_dir_args {
    const char *out;            /* the snapshot directory, as given */
    bool force;                 /* an existing snapshot may be replaced */
    ck_progress *progress;      /* started here with the total (NULL: none) */
    const ck_model *m;          /* the tensors' model, for directory names */
} ck_oneflow_dir_args;

/* Why a OneFlow snapshot cannot hold type dt (naming the OneFlow versions
 * that lack it), into buf; NULL when it can. */
const char *ck_oneflow_type_refusal(const ck_dtype *dt, char *buf, size_t cap);

/* Write the n tensors (each new bytes, as given to an encoder) to a->out,
 * whose tensors are m's live ones in order; bytes is their total.  Errors
 * name OUT and the tensor. */
int ck_oneflow_dir_write(const ck_oneflow_dir_args *a, const ck_write_tensor *w, size_t n,
                         uint64_t bytes, ck_error *err);

#endif
