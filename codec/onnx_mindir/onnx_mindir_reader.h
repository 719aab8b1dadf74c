/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_reader: index the weights of an ONNX or MindIR model.
 *
 * The two formats share ONNX's message shapes (MindIR started as a copy of
 * onnx.proto) with different field numbers, so one graph walk serves both,
 * driven by a table of field numbers per format (pb_graph_walk.h; the
 * reader is its visitor, as is the node-reader scan of pb_users.h).  It
 * streams the file with pb_wire: graph structure is read in small pieces
 * and tensor payloads are only located, never read.
 *
 * Weights shown, and their directory names (docs/design.md, "Naming"):
 *   main-graph initializers (ONNX) / parameters (MindIR)   NAME
 *     (MindIR: the part of the name after the first ':')
 *   Constant nodes' value tensors in the main graph        OUTPUT%const
 *   (ONNX: every TENSOR / TENSORS attribute of every node,
 *   e.g. ConstantOfShape.value, named as a Constant's value)
 *   initializers, Constants and attribute tensors inside
 *   subgraphs (If/Loop bodies, MindIR functions)            NAME%@NODE.ATTR
 *   MindIR map_parameter parts                              NAME%map.key ...
 * OUTPUT is the node's first output (the tensor's own name when the node
 * has none), whatever the attribute; several tensors of one node are told
 * apart by %dup (below).  MindIR shows a Constant's value only: its other
 * attributes' tensors describe an output's type and shape, without data.
 * "%c" and "%@" never come out of escaping a name, so the generated names
 * cannot collide with a main-graph name; two generated names that would be
 * equal get "%dup2", "%dup3"... in file order.
 *
 * Storage: raw_data and packed float_data/double_data become extents in
 * the model file; external data becomes extents in the external file (one
 * source per file, resolved beneath the model's directory); typed fields
 * stored as varints (int32_data, int64_data, uint64_data) and STRING
 * tensors are the one exception to "no tensor bytes at mount": they are
 * decoded once, while mounting, into an unlinked temporary file, because
 * their byte count is only known by decoding them.  Exporters use them for
 * small tensors only.
 */
#ifndef CK_ONNX_MINDIR_READER_H
#define CK_ONNX_MINDIR_READER_H

#include "../core/model.h"
#include "../pb/pb_graph_walk.h"
#include "../pb/pb_layout.h"

/* The front info opening each data file of a split MindIR. */
#define CK_MINDIR_DATA_HEADER 64u

/* The two formats (format.h).  Their open reads m->sources[0] into
 * m->index and a layout (m->state), adding the sources it needs. */
extern const ck_format ck_format_onnx;
extern const ck_format ck_format_mindir;

/* Which typed field of a TensorProto keeps the values of a data type
 * (onnx-format.md 2): where the reader expects them and the writer puts
 * them. */
uint32_t ck_pb_typed_field(const ck_pb_layout *pb, long type);

/* The ONNX / MindIR DataType name of a code, e.g. "FLOAT"; "?" if unknown. */
const char *ck_pb_type_name(long code, bool mindir);

#endif
