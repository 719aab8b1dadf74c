/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_edit: edits of a tensor's `out` (an overlay in the spill file) and
 * `meta` (a buffer, parsed at each close); their calls are in tree.h.
 * Above the entries (tree.c) and the spill allocator, below the pieces
 * that edit as part of something larger (directories, extra files, a
 * names file).
 */
#ifndef CKPTFS_TREE_EDIT_H
#define CKPTFS_TREE_EDIT_H

#include "tree.h"

/* The entry's edit with an overlay for `out`: the model's bytes copied
 * into it on the first edit, unless empty (a truncate to 0). */
edit *tree_with_overlay(tree *tr, entry *e, bool empty, ck_error *err);

#endif
