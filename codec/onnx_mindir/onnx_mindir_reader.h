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
 * Weights shown, and their directory names:
 *   main-graph initializers (ONNX) / parameters (MindIR)   NAME
 *     (MindIR: the part of the name after the first ':')
 *   Constant nodes' value tensors in the main graph        OUTPUT%const
 *   (ONNX: every TENSOR / TENSORS attribute of every node,
 *   e.g. ConstantOfShape.value, named as a Constant's value)
 *   initializers, Constants and attribute tensors inside
 *   subgraphs (If/Loop bodies, MindIR functions)            NAME%@NODE.ATTR
 *   MindIR map_parameter parts                              NAME%map.key ...
 * ONNX keeps values in the tensor attributes of other ops too (the fill
 * value of ConstantOfShape, at any depth: Silero's four sit two Ifs deep),
 * hence every attribute.  OUTPUT is the node's first output (the tensor's
 * own name when the node has none), whatever the attribute; several
 * tensors of one node are told apart by %dup (below).  NODE is the escaped
 * name of the node owning the subgraph ("#INDEX" when it has none); a
 * "%@NODE.ATTR" suffix over 120 bytes is cut and ended with "%~" and the
 * FNV-1a hash of the whole suffix (onnx_mindir_graph.c).  MindIR shows a
 * Constant's value only: its other attributes' tensors describe an
 * output's type and shape, without data; and a Constant's value without
 * data (the [ValueNode]s of MindSpore's bprop graphs) is not listed either,
 * since MindSpore's loader reads it as the data type it names
 * (onnx_mindir_tensor.c).  "%c" and "%@" never come out of escaping a name,
 * so the generated names cannot collide with a main-graph name; two
 * generated names that would be equal get "%dup2", "%dup3"... in file
 * order (rare: Silero v5 keeps the same weights in both branches of an If,
 * under distinct node names).
 *
 * Types OneFlow has no name for are shown read-only (dtype.c): FLOAT8* as
 * kUInt8 with the tensor's dims, the 4- and 2-bit types (and MindIR's
 * QINT4X2) as their packed bytes, kUInt8 [n], STRING as each element's
 * UTF-8 bytes followed by a NUL, kChar [n].  MindIR's header is checked as
 * MindSpore's loader checks it: producer_name and model_version present,
 * little_endian true if present, mind_ir_version 0..3.
 *
 * Storage: raw_data and packed float_data/double_data become extents in
 * the model file; external data becomes extents in the external file (one
 * source per file, resolved beneath the model's directory); typed fields
 * stored as varints (int32_data, int64_data, uint64_data) and STRING
 * tensors are the one exception to "no tensor bytes at mount": they are
 * decoded once, while mounting, into an unlinked temporary file
 * (O_TMPFILE in $TMPDIR; a memfd for an encrypted model, so no plaintext
 * reaches the disk), because their byte count is only known by decoding
 * them, and a count that does not match the dims must be refused at
 * mount.  Exporters use them for small tensors only (keras2onnx's are
 * under 2 MB in all).
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
