/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_writer: a PyTorch torch.save file saved back, its values edited in
 * place.
 *
 * A save that keeps every tensor (its name, type and shape, in order)
 * rewrites the file as it is: every byte copied but the edited tensors'
 * values, each written over its storage's record, and that record's CRC-32
 * (in its data descriptor or local header, and in the central directory).
 * data.pkl and the ZIP layout are untouched, so an unchanged tree saves to
 * the identical file, and torch.load reads the edited one as it read the
 * original.  An edited tensor must be its storage alone (the whole record,
 * row-major, no other tensor viewing it: tied weights, slices and
 * transposes are not yet written back); renaming, adding, removing,
 * retyping or reshaping tensors is not supported yet.  Both are refused
 * in one line naming the tensor, before anything is written.
 */
#ifndef CK_PT_WRITER_H
#define CK_PT_WRITER_H

#include "../../export/writer.h"

extern const ck_writer ck_pytorch_writer;

#endif
