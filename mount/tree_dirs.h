/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_dirs: the tensor directories (mkdir, rmdir, rename) and making or
 * removing their meta and out files; their calls are in tree.h.  Below
 * the names file (tree_names.c), which renames and merges directories
 * with the same rules.
 */
#ifndef CKPTFS_TREE_DIRS_H
#define CKPTFS_TREE_DIRS_H

#include "tree.h"

/* The directory may be removed or renamed: a writable mount, a tensor no
 * node needs (else EBUSY, and an emptied directory made whole again), and
 * one that may be edited at all. */
int tree_removable(tree *tr, entry *e, ck_error *err);
/* The entry is gone (a tombstone: its position stays), its name free. */
void tree_forget_entry(tree *tr, entry *e);

#endif
