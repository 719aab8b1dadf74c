/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inode_map: inode numbers of the tree.
 *
 * Tensor directories keep their position in the tree for the life of the
 * mount (new ones are appended, removed ones stay as tombstones), so inode
 * numbers are computed, not allocated: four per entry (directory, meta, out,
 * one spare) after a few fixed ones, and other files (tools' temporaries)
 * from 2^40 up by their id.  Numbers are never reused, so lookup counts need
 * no bookkeeping and forget is a no-op; nothing else in mount/ knows the
 * arithmetic.
 *
 * Nor do they move, which NFS export needs (libfuse's doc/README.NFS): a
 * file handle holds the number and the generation, and the kernel, having
 * forgotten the inode, asks for "." on that number.  A removed tensor's
 * number stays its tombstone's (ESTALE), a renamed tensor keeps its
 * number, a save rebinds positions without moving them, a new directory
 * takes a new position; so one generation per mount (ckfs.generation)
 * makes every (number, generation) pair unique.  Only a tree opened
 * afresh numbers by the file's order: a run directory reopens a
 * checkpoint only when that gives the same numbers (ckfs_numbered_as_file).
 *
 * snapshot_done has the highest number, as it is last in the listing: it
 * means "the rest is complete", and cp -r copies a directory in inode order
 * (gnulib's savedir sorts by inode for speed), so a copy of the tree into a
 * writable mount creates it after the tensors and its save holds them all.
 * Below 2^42, the bits a run directory's checkpoint has (CKFS_INO_BITS).
 *
 * Tensor directories, meta and out get 16 + 4 * position + kind; other
 * files 2^40 + id; the view's files 2^39 + place; snapshot_done 2^41.
 */
#ifndef CKPTFS_INODE_MAP_H
#define CKPTFS_INODE_MAP_H

#include <stdbool.h>
#include <stdint.h>

#define INO_ROOT 1u
#define INO_SNAPSHOT_DONE (1ull << 41) /* above every extra file */
#define INO_TENSOR_BASE 16u
#define INO_VIEW_BASE (1ull << 39) /* -o as=NAME: the root's files, base + their
                                    * place (mount/file_view.h), above every tensor's */
#define INO_EXTRA_BASE (1ull << 40) /* extra files: base + their id */

typedef enum node_kind {
    NODE_ROOT,
    NODE_SNAPSHOT_DONE,
    NODE_TENSOR_DIR,
    NODE_META,
    NODE_OUT,
    NODE_EXTRA,
    NODE_VIEW,
    NODE_NONE,
} node_kind;

static inline uint64_t ino_of_tensor(uint32_t id, node_kind kind)
{
    uint64_t sub = kind == NODE_META ? 1 : kind == NODE_OUT ? 2 : 0;
    return INO_TENSOR_BASE + 4 * (uint64_t)id + sub;
}

/* Classify ino; for tensor nodes *id receives the entry's position. */
static inline node_kind ino_kind(uint64_t ino, uint32_t *id)
{
    if (ino == INO_ROOT)
        return NODE_ROOT;
    if (ino == INO_SNAPSHOT_DONE)
        return NODE_SNAPSHOT_DONE;
    if (ino < INO_TENSOR_BASE)
        return NODE_NONE;
    if (ino >= INO_EXTRA_BASE) {
        if (ino - INO_EXTRA_BASE > UINT32_MAX)
            return NODE_NONE;
        *id = (uint32_t)(ino - INO_EXTRA_BASE);
        return NODE_EXTRA;
    }
    if (ino >= INO_VIEW_BASE) {
        if (ino - INO_VIEW_BASE > UINT32_MAX)
            return NODE_NONE;
        *id = (uint32_t)(ino - INO_VIEW_BASE);
        return NODE_VIEW;
    }
    uint64_t rel = ino - INO_TENSOR_BASE;
    if (rel / 4 > UINT32_MAX)
        return NODE_NONE;
    *id = (uint32_t)(rel / 4);
    switch (rel % 4) {
    case 0: return NODE_TENSOR_DIR;
    case 1: return NODE_META;
    case 2: return NODE_OUT;
    default: return NODE_NONE;
    }
}

#endif
