/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_writer: a PyTorch torch.save file saved back, and new ones written
 * (ckptfs-convert, -o create).
 *
 * Two layouts, by what changed:
 *   - Every tensor kept in order under its name, type and shape, each
 *     edited one its storage alone (the whole record, row-major, no other
 *     tensor viewing it): the file is patched, every byte copied but the
 *     edited records' and their CRC-32s (in the data descriptor or local
 *     header, and in the central directory).  data.pkl and the layout are
 *     the original's; an unchanged tree is the identical file.
 *   - Anything else (renames, removals, new tensors, new types or shapes,
 *     an edit of a tied weight or a view): data.pkl pickled again
 *     (pt_repickle.h: every value the tree does not show kept, each edited
 *     or new tensor on a storage of its own, kept tensors on their storages,
 *     still shared) and the archive laid out as torch.save lays it out
 *     (pt_zip_writer.h): data.pkl, the original's other records before the
 *     storages, the storages in key order, the rest after.
 */
#ifndef CK_PT_WRITER_H
#define CK_PT_WRITER_H

#include "../io/target.h"
#include "../io/writer.h"

extern const ck_writer ck_pytorch_writer;
extern const ck_target ck_pytorch_target;

#endif
