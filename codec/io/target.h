/* SPDX-License-Identifier: Apache-2.0 */
/*
 * target: a format as ckptfs-convert's OUT, and as the TEMPLATE of its
 * --into (save/template_fill.h).
 *
 * What OUT cannot hold is refused, naming the tensor, before anything is
 * written; each format says so here, beside its writer in its folder, and
 * is paired with it in the registry (codec/registry.h, ck_format_target).
 * A file format is written as a save of an empty model of it
 * (ck_model_empty, ck_encode); a directory format (a OneFlow snapshot)
 * writes itself whole.
 *
 * A graph format whose weights a checkpoint may fill (--into) says here
 * what its weights are called and which of its models it refuses as a
 * template (ck_template), so that the fill, in save/, names no format.
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
     * order; bytes their total) as a->out, whose writer lock its caller
     * holds (the formats take none).  NULL: a file format. */
    int (*write_dir)(const ck_target_args *a, const ck_write_tensor *w, size_t n,
                     uint64_t bytes, ck_error *err);
} ck_target;

/* A format as --into's TEMPLATE: a graph whose weights are filled from a
 * checkpoint's tensors of the same names, the rest of its bytes kept. */
typedef struct ck_template {
    const char *a_title;        /* the format with its article, in a refusal: "an ONNX" */
    const char *tensor;         /* what a weight of it is called: "initializer" */
    const char *a_tensor;       /* the same with its article: "an initializer" */
    /* 0 when m (its path as given) may be filled; *external set when it
     * keeps tensor data in data files, which the filled copy then keeps
     * in one new file of its own (commit_group.h, own_data).  -1 with the
     * reason when the format cannot fill such a model. */
    int (*check)(const ck_model *m, const char *path, bool *external, ck_error *err);
} ck_template;

#endif
