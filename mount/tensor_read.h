/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor_read: how a tensor's bytes are served to a read request, shared
 * by `out` (mount/model_ops.c) and a view's files (mount/file_view.c): who may
 * read them, whether the model changed under the mount, and the extents
 * put in a read's plan, which the adapter splices from the files.
 */
#ifndef CKPTFS_TENSOR_READ_H
#define CKPTFS_TENSOR_READ_H

#include "ckptfs.h"

/* The most pieces a read is spliced in.  libfuse splices a reply only
 * while its pipe holds a page per piece besides the data; past that it
 * reads each piece on its own.  A gather of short runs (a merged tensor
 * cut along a later dimension) is then read with one read per slice and
 * copied (ck_model_read). */
#define SPLICE_PIECES 64

/* Whether c may read t (NULL: nothing to check); else false with the
 * errno to answer.  A predicate: it answers nobody. */
bool ckfs_may_read(const ckfs_caller *c, const ckfs *fs, const ck_tensor *t, int *errnum);
/* Whether t's files changed under the mount; if so, *errnum is the errno
 * to answer (the reason logged once). */
bool ckfs_model_changed(ckfs *fs, const ck_tensor *t, int *errnum);
/* How many pieces bytes [off, off + size) of t would be spliced in at
 * most; SIZE_MAX when a source is not a plain file (decrypted,
 * decompressed, a gather's): those are read with ck_model_read. */
size_t ckfs_splice_pieces(const ckfs *fs, const ck_tensor *t, uint64_t off, size_t size);
/* Append those pieces, descriptor ranges, to the plan; -ENOMEM. */
int ckfs_add_extents(const ckfs *fs, const ck_tensor *t, uint64_t off, size_t size,
                     ckfs_read_plan *plan);

#endif
