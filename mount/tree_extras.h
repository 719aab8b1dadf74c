/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_extras: every file made in the tree that is not a tensor's meta or
 * out (the temporary files of rsync, sed -i, editors; a copied snapshot's
 * names file); their calls are in tree.h.  Their bytes live in the spill
 * file and are never saved into the model.  Below the names file's
 * application (tree_names.c), which reads and then drops the file.
 */
#ifndef CKPTFS_TREE_EXTRAS_H
#define CKPTFS_TREE_EXTRAS_H

#include "tree.h"

/* The extra is removed (a tombstone: ids are inode numbers). */
void tree_extra_drop(tree *tr, extra *x);
/* The names file's extra, or -1; room for it to hold size bytes (refused,
 * EFBIG, past what its parser reads). */
int64_t tree_names_file_id(tree *tr);
int tree_names_file_room(const tree *tr, const extra *x, uint64_t size, ck_error *err);

#endif
