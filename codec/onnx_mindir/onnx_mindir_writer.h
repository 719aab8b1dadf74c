/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_writer: encode a tree back into its ONNX or MindIR file.
 *
 * The file is copied byte for byte except for three kinds of edits, all
 * located by the reader's pb_layout:
 *   - a changed tensor's TensorProto field is re-encoded: its fields are
 *     copied in order, except dims and data_type (written anew where the
 *     first of them was), the name (when renamed) and the data field,
 *     written in the storage it had (raw_data stays raw_data, a typed field
 *     stays that typed field, re-encoded in memory up to 64 MiB and as
 *     raw_data past that); a renamed MindIR parameter gets its "<graph>:"
 *     prefix back;
 *   - a deleted tensor's field is dropped;
 *   - new tensors are appended to the main graph's initializers (ONNX) /
 *     parameters (MindIR), as dims, data_type, name and raw_data;
 * plus the length prefix of every message that encloses an edit.  So an
 * unchanged tree gives back the identical file, and so does a tree whose
 * every tensor was rewritten with its own bytes
 * (tests/bats/onnx_mindir_write.bats); unknown fields, the graph, nodes,
 * attributes and metadata are kept as they were.  The location fields
 * (external_data, data_location) count as data only for a tensor whose
 * bytes go to a new place in a data file: any other keeps them, such as
 * the data_location: DEFAULT that onnx's load leaves on the tensors it
 * inlined.  Before IR version 4 every initializer is also declared in
 * graph.input: a new or renamed one is declared after the last declared
 * input, and a deleted or renamed one takes its old declaration along.
 *
 * External data stays external: a data file holding changed bytes is
 * written anew as a copy of the old one with the tensor written over its
 * old bytes (same size, not shared with another tensor) or appended, and
 * joins the commit group.  Appended data is aligned as the format's own
 * writer aligns it (MindIR: 64 bytes, with zero padding after the last
 * tensor too; ONNX: 4096 for tensors over 1 MiB, as onnx's
 * save_external_data), and its location fields are written anew; in
 * place, they are copied as they were.  Bytes no tensor references any
 * more stay in the file, so a later save never has to move the others.
 * New parameters of a split MindIR go to its last data file.  An ONNX
 * model that would pass 2 GiB gets its largest new and changed tensors
 * moved to "<model>.data", as onnx's save does (EEXIST when that file
 * exists and is not the model's); a MindIR that would is refused (EFBIG:
 * MindSpore saves such a model split).  An ONNX model saved under
 * another name with its own data (ck_commit_group.own_data: ckptfs-convert
 * --into) puts every external tensor, given as new bytes, in that
 * "<new model>.data" beside it, and writes none of the original's data
 * files; a split MindIR is refused there.
 *
 * Nodes are never edited but for the values and dims of a tensor they
 * hold (a Constant's, an attribute's, a subgraph's), whose TensorProto is
 * rewritten in place inside its node, with the lengths around it.  The
 * caller makes sure no node reads a tensor it deletes or renames (the tree
 * refuses those edits, asking codec/pb/pb_users.h).  Constant and subgraph
 * tensors, which only a node edit could remove or rename, are refused here
 * too (EBUSY).
 */
#ifndef CK_ONNX_MINDIR_WRITER_H
#define CK_ONNX_MINDIR_WRITER_H

#include "../io/commit_group.h"
#include "../io/writer.h"

/* protobuf's limit on one message (INT_MAX bytes). */
#define CK_PB_MAX_MESSAGE 2147483647ull

/* The model goes to g->files[0]; changed data files are added to g. */
int ck_pb_write(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                ck_commit_group *g, ck_error *err);

/* The writers (writer.h): ck_pb_write. */
extern const ck_writer ck_onnx_writer;
extern const ck_writer ck_mindir_writer;

#endif
