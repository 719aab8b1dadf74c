/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_view: -o as=NAME, the mounted model shown as read-only files of a
 * format instead of the tree: the files the format's view (codec/view.h)
 * lays out, at the mount's root.  This serves any view alike and knows
 * none: a file's bytes are its segments', a segment of the view's own
 * bytes replied from memory, a tensor's run served as `out` is
 * (mount/tensor_read.h): spliced from the files' extents, or read through
 * ck_model_read where the codec must assemble or decode the bytes.
 */
#ifndef CKPTFS_FILE_VIEW_H
#define CKPTFS_FILE_VIEW_H

#include "../codec/view.h"
#include "ckptfs.h"

typedef struct ckfs_view ckfs_view;

/* The files view `kind` makes of m (o: its options), or NULL with err:
 * the view's refusal, or a layout that does not fit m's tensors. */
ckfs_view *ckfs_view_new(const ck_model *m, const ck_view *kind, const ck_view_opts *o,
                         ck_error *err);
void ckfs_view_free(ckfs_view *v);

/* The view's files: their count, and file i's name and size; the file of
 * a name, or -1. */
size_t ckfs_view_count(const ckfs_view *v);
const char *ckfs_view_name(const ckfs_view *v, size_t i);
uint64_t ckfs_view_size(const ckfs_view *v, size_t i);
long ckfs_view_find(const ckfs_view *v, const char *name);

/* An open of file i: another user (allow_other) must be able to read
 * every tensor it shows on disk, as for `out` (a file that shows all:
 * every tensor of the view); else false with the errno.  A predicate. */
bool ckfs_view_may_open(const ckfs_caller *c, ckfs *fs, size_t i, int *errnum);
/* Plan a read of [off, off + size) of file i: 0 or a negative errno. */
int ckfs_view_read(const ckfs_caller *c, ckfs *fs, size_t i, size_t size, off_t off,
                   ckfs_read_plan *plan);

#endif
