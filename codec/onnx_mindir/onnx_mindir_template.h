/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_template: ONNX and MindIR graphs as ckptfs-convert --into's
 * TEMPLATE (codec/io/target.h, ck_template), paired with their formats in
 * the registry: their weights are an ONNX graph's initializers and a
 * MindIR graph's parameters.  An ONNX template with external data is
 * filled into a copy with a data file of its own; a split MindIR
 * (MindSpore's <prefix>_variables/data_N layout) is refused.
 */
#ifndef CK_ONNX_MINDIR_TEMPLATE_H
#define CK_ONNX_MINDIR_TEMPLATE_H

#include "../io/target.h"

extern const ck_template ck_onnx_template;
extern const ck_template ck_mindir_template;

#endif
