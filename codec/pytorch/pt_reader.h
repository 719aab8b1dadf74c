/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_reader: PyTorch's torch.save files (.pt, .pth, .bin), the ZIP layout
 * PyTorch writes since 1.6.
 *
 * The archive's records (pt_zip.h) are `<top>/data.pkl`, the pickled state
 * dict (pt_pickle.h), and `<top>/data/<key>`, one storage each, in the
 * byte order `<top>/byteorder` names.  Each tensor is a view of a storage:
 * a contiguous one is one extent of its record; any other (a transpose, a
 * Fortran-ordered array, every other column) is a strided gather of it
 * (tensor_index.h), shown row-major without a copy.  Several tensors may
 * view one storage (tied weights): they share its bytes.  Python ints,
 * floats and bools saved beside the tensors are shown as read-only 0-d
 * tensors (int64, float64, bool); strings and other values are counted in
 * the notes, not shown.
 *
 * Files from before PyTorch 1.6 (a sequence of pickles) are refused with
 * one line.  Saving is not supported yet: the mount is read-only.
 */
#ifndef CK_PT_READER_H
#define CK_PT_READER_H

#include "../format.h"

extern const ck_format ck_format_pytorch;

#endif
