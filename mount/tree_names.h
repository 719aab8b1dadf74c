/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_names: a copied snapshot's names file applied by the save that
 * comes after it: planned first (every listed directory found, every real
 * name checked), so that a refusal changes nothing, then applied.  Above
 * the directories and extra files, whose rules it follows; below the save
 * (tree_save.c), which plans and applies it in tree_save_begin and writes
 * the new directories in the file's order.
 */
#ifndef CKPTFS_TREE_NAMES_H
#define CKPTFS_TREE_NAMES_H

#include "tree.h"

/* One listed directory that takes its real name: renamed, or merged
 * into the tensor of that name. */
typedef struct name_step {
    uint32_t pos;               /* the listed directory's entry */
    int64_t into;               /* the tensor of its real name, or -1: renamed */
    char *name;                 /* the real name (owned until applied) ... */
    size_t name_len;
    char *dir;                  /* ... and its directory name */
    char *old_dir;
} name_step;

/* What a save does with a names file, decided before anything
 * changes.  listed[pos]: LISTED, LISTED_MERGED, or LISTED_IN_ORDER for a
 * new directory, which the save writes in the file's order. */
enum { LISTED = 1, LISTED_IN_ORDER, LISTED_MERGED };

typedef struct names_plan {
    name_step *v;
    size_t n;
    uint8_t *listed;            /* per entry; NULL: no names file */
    uint32_t *in_order;         /* the LISTED_IN_ORDER entries, in the file's order */
    size_t n_in_order;
    /* The refusal was a listed directory not in the tree: a copy still
     * under way, or a wrong file (tree_save_ask.copier tells which may
     * wait).  Kept by tree_plan_free. */
    bool absent;
} names_plan;

/* The plan of the names file, if there is one (plan->listed stays NULL
 * when there is none): 0, or -1 and the refusal, one line naming the
 * file, with nothing changed. */
int tree_plan_names(tree *tr, names_plan *plan, ck_error *err);
/* Apply a plan (only out of memory can fail it now), and drop the file. */
int tree_apply_names(tree *tr, names_plan *plan, ck_error *err);
void tree_plan_free(names_plan *plan);

#endif
