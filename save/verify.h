/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verify: read a save's new files back before they replace the model.
 *
 * An encoder's output is only committed once the codec's own reader, run
 * on the temporary files exactly as a mount would open them (through the
 * envelope, external and split data files included), yields the tree it
 * was given: the same tensors in the same order, with the same names,
 * types, shapes and sizes.  Bytes are compared in full for every changed
 * or new tensor; an unchanged tensor was copied as its original record, so
 * its extents must keep their lengths and their places in that record (or
 * in their data file).  A mismatch fails the save with one line naming the
 * model, the first tensor that differs and how, and nothing is replaced:
 * "M: the saved file does not read back as the tree, nothing was saved:
 * tensor 'info.str_ascii': 3 bytes, the tree's out has 4" (a .ckpt str
 * ending in U+0000 reads back without it).
 *
 * The temporary files are opened through ck_model_open_at as the model
 * itself, in its format, its envelope and data files included
 * (ck_open_opts overrides, codec/core/file_override.h).  The order is
 * exact where the writer keeps the tree's; ONNX and MindIR put new tensors
 * after the main graph's last, so there only the original tensors' order
 * is checked.  A gathered tensor given as its original's extents (renamed,
 * or re-encoded whole), which the writers take as kept, not as new bytes,
 * is compared with the original's bytes as they read: its extents are its
 * strided storage, not its bytes in order.  The CRC trailer is not
 * re-read: it was computed over the bytes written.  The check writes
 * nothing of its own: an encrypted model's plaintext stays in memory
 * (codec/core/page_cache.h, and memfds for bytes decoded at open).
 */
#ifndef CK_VERIFY_H
#define CK_VERIFY_H

#include <stddef.h>

#include "../codec/io/commit_group.h"
#include "../codec/io/writer.h"

/* The group's files (not yet committed) against the tree that was
 * encoded into them from m.  keep non-NULL: the files as read back, opened
 * with the options as (NULL: the defaults) and named as m's, are kept in
 * *keep when they pass: once the group is committed they are the saved
 * model, read from the new files' descriptors, so a mount need not read
 * it again (nor keep the old file open while it is replaced). */
int ck_verify_save(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                   const ck_commit_group *g, const ck_open_opts *as, ck_model **keep,
                   ck_error *err);

#endif
