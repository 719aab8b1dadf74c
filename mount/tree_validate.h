/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_validate: whether each entry can be saved as it is (a meta, an
 * out of the size its meta says), and every entry that blocks a save
 * named in one line.  Reads the entries only; the save (tree_save.c)
 * refuses with it, or holds the blocking entries back.
 */
#ifndef CKPTFS_TREE_VALIDATE_H
#define CKPTFS_TREE_VALIDATE_H

#include "tree.h"

/* 0, or -1 and every blocking entry named in err. */
int tree_validate_all(tree *tr, ck_error *err);
/* The blocking entries, joined into `joined` (CK_ERROR_MSG_MAX bytes;
 * *shown of them), each marked held when hold; *first: the first one's
 * own message.  How many there are. */
size_t tree_blockers(tree *tr, bool hold, char *joined, size_t *shown, ck_error *first);
/* No entry held any more. */
void tree_unhold(tree *tr);

#endif
