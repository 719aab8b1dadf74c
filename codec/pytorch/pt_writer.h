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
 *     the original's; an unchanged tree is the identical file.  The CRC
 *     sits in the data descriptor after the bytes for torch 1.13's writer,
 *     in the local header for newer ones (and for a record flagged as
 *     followed by a descriptor that is not there); a local header holding
 *     a CRC beside its descriptor gets both.  Each CRC is computed from the
 *     new bytes before anything is written; the rest is copied
 *     (copy_file_range).  A file whose records' bytes overlap (a local
 *     header through its data and descriptor, one hidden in another's
 *     extra field) is read, as torch reads it, but never patched: a patch
 *     of one record would change the other, so its saves lay it out again,
 *     each record copied into bytes of its own.
 *   - Anything else (renames, removals, new tensors, new types or shapes,
 *     an edit of a tied weight or a view): data.pkl pickled again
 *     (pt_repickle.h: every value the tree does not show kept, each edited
 *     or new tensor on a storage of its own, kept tensors on their storages,
 *     still shared) and the archive laid out as torch.save lays it out
 *     (pt_zip_writer.h): data.pkl, the original's other records before the
 *     storages (byteorder...), the storages in sorted(keys) order (as
 *     torch.save writes them), the rest after (version,
 *     .data/serialization_id), each copied as it was.  A new file gets
 *     byteorder and version, and the top directory torch.save would name
 *     after the file.
 *
 * Checked by tests/oracle/pytorch_oracle.py's edit-check (torch loads the
 * edit and every other leaf as before, zipfile verifies every CRC, and
 * only the record's bytes and its CRC fields differ) and by torch's own
 * load of saves with renames, moves, removals, new tensors, reshapes and
 * untied edits, and of ckptfs-convert and -o create outputs; the fuzz
 * target saves every fuzzed file's tensors again as new bytes and reopens
 * the result.
 */
#ifndef CK_PT_WRITER_H
#define CK_PT_WRITER_H

#include "../io/target.h"
#include "../io/writer.h"

extern const ck_writer ck_pytorch_writer;
extern const ck_target ck_pytorch_target;

#endif
