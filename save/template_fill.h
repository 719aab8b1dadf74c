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
 *
 * --map FILE is read whole (a regular file of at most 16 MiB, lines of at
 * most 64 KiB, no NUL); a line with the wrong number of names, a name
 * that is no tensor of its side (a typo), or a name mapped twice is
 * refused with its line number.  A mapped tensor no longer answers to its
 * own name, and wins over a checkpoint tensor that has the template's
 * name.  Type and shape must be exactly the template's (the same kind and
 * the same DataType in the graph, by the writer's same_type; the same
 * dims); the refusal names both sides' types by their canonical names,
 * adding each file's own spelling only where those are the same.
 * A filled tensor's pieces are the checkpoint's extents (one per run for
 * a merged tensor cut along a later dimension), up to 2^20 in all.
 *
 * OUT, and with a template's external data <OUT>.data, must not be the
 * template, the checkpoint or one of their files (by device and inode, so
 * links too), nor a directory, and an existing one needs -f.  An
 * encrypted template is opened with the tools' key and gives an OUT
 * encrypted the same way.  The read-back opens OUT in its own directory,
 * in the template's format whatever OUT's name (ck_open_opts.format), so
 * external locations resolve as any reader of OUT resolves them.  OUT and
 * <OUT>.data commit as one group, its journal beside OUT, once the write
 * claim has finished an earlier fill's journal and both files' temporary
 * files are removed.  (ckptfs-reencode to another path does not set
 * own_data: there an unchanged tree names the original's data files.)
 * The report is one line on stderr, the counts and up to six names of
 * each side; --strict makes unfilled template tensors an error.
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
