/* SPDX-License-Identifier: Apache-2.0 */
/*
 * template_fill: ckptfs-convert --into, a graph filled with trained weights.
 *
 *   ckptfs-convert --into TEMPLATE.onnx|.mindir [--map FILE] [--strict] CKPT OUT
 *
 * writes TEMPLATE again as OUT with every initializer (ONNX) or parameter
 * (MindIR) whose name matches a tensor of CKPT replaced by that tensor's
 * bytes: what MindSpore's load_checkpoint followed by export does, with no
 * framework.  MindIR's "<graph>:" prefix is matched as the mount shows it;
 * --map renames CKPT's tensors first.  A shape or type mismatch is refused
 * naming the tensor, before anything is written; names matched on neither
 * side are reported.  OUT is written atomically and checked like any save.
 */
#ifndef CK_TEMPLATE_FILL_H
#define CK_TEMPLATE_FILL_H

#include <stdbool.h>

#include "../codec/collection.h"

typedef struct ck_fill_args {
    const char *tmpl;           /* TEMPLATE, as given */
    const char *ckpt;           /* CKPT, as given */
    const ck_collection_opts *open; /* how CKPT is opened (key, strategy...), and
                                 * TEMPLATE (with the key, if it is encrypted) */
    const char *map;            /* --map FILE, or NULL */
    const char *out;            /* OUT, as given */
    bool progress;              /* draw a progress bar on stderr */
    bool force;                 /* OUT may be replaced */
    bool strict;                /* a template tensor left unfilled is an error */
} ck_fill_args;

/* Run the fill; the exit status: 0 done, 1 failed (one line on stderr). */
int ck_template_fill(const ck_fill_args *a);

#endif
