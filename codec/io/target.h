/* SPDX-License-Identifier: Apache-2.0 */
/*
 * target: a format as ckptfs-convert's OUT.
 *
 * What OUT cannot hold is refused, naming the tensor, before anything is
 * written; each format says so here, beside its writer in its folder, and
 * is paired with it in the registry (codec/registry.h, ck_format_target).
 * A file format is written as a save of an empty model of it
 * (ck_model_empty, ck_encode); a directory format (a OneFlow snapshot)
 * writes itself whole.
 */
#ifndef CK_TARGET_H
#define CK_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/model.h"
#include "../core/progress.h"
#include "writer.h"

/* What a directory format is given to write. */
typedef struct ck_target_args {
    const char *out;            /* OUT, as given */
    bool force;                 /* an existing OUT may be replaced */
    ck_progress *progress;      /* started with the total (NULL: none) */
    const ck_model *m;          /* the tensors' model, for directory names */
} ck_target_args;

typedef struct ck_target {
    const char *holder;         /* in refusals: "safetensors cannot hold it" */
    /* Why OUT cannot hold type dt, into buf (cap bytes); NULL: it can.  A
     * type is named by its canonical name (dtype.h), as the tools print it. */
    const char *(*type_refusal)(const ck_dtype *dt, char *buf, size_t cap);
    /* Why OUT cannot keep a tensor of this name (a whole sentence); NULL:
     * it can.  NULL hook: every name. */
    const char *(*name_refusal)(const char *name, size_t len);
    const ck_shape_rule *shape; /* the shapes its reader takes (dtype.h) */
    bool by_dir_name;           /* tensors are kept by their directory names, as the
                                 * mount shows them, not by their names */
    const char *empty_refusal;  /* why it cannot hold no tensors; NULL: it can */
    bool sharded;               /* cut into files of -o max_shard_size (a sharded set) */
    /* A directory format: write the n tensors (new bytes, m's live ones in
     * order; bytes their total) as a->out.  NULL: a file format. */
    int (*write_dir)(const ck_target_args *a, const ck_write_tensor *w, size_t n,
                     uint64_t bytes, ck_error *err);
} ck_target;

#endif
