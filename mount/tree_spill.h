/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_spill: the spill file of a mount and the areas in it, which hold
 * every byte written into the tree (an edited `out`, an extra file) so
 * that edits hold no descriptor of their own (spill_area, tree_types.h).
 * The lowest piece of the tree: it works on the tree's fields and calls
 * none of its functions.  A running save reads frozen areas; changing one
 * moves it first, and a frozen range given up waits for the save's end
 * (spill_punch_freed).
 */
#ifndef CKPTFS_TREE_SPILL_H
#define CKPTFS_TREE_SPILL_H

#include "tree_types.h"

/* Room for a spill file to grow from old to new bytes: refused (ENOSPC)
 * past -o spill_max when the edits are held in memory (a secret
 * envelope's model). */
int spill_room(const tree *tr, uint64_t old, uint64_t new, ck_error *err);

/* A new, empty area (its bytes start at the end of the spill file), and
 * one given up: its range punched now, or when the running save ends. */
void spill_area_new(tree *tr, spill_area *a);
void spill_area_free(tree *tr, spill_area *a);
/* The area holds at least need bytes and is free to change (moved to the
 * end of the spill file when it must grow elsewhere, or is frozen). */
int spill_area_reserve(tree *tr, spill_area *a, uint64_t need, ck_error *err);
int spill_area_write(tree *tr, spill_area *a, const void *buf, size_t size, uint64_t off,
                     ck_error *err);
int spill_area_truncate(tree *tr, spill_area *a, uint64_t size, ck_error *err);

/* When a save ends: the frozen ranges given up during it are punched,
 * and (after a save that succeeded) with no area left in use the spill
 * file is emptied. */
void spill_punch_freed(tree *tr);
void spill_reclaim(tree *tr);

#endif
