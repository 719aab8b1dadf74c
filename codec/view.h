/* SPDX-License-Identifier: Apache-2.0 */
/*
 * view: how the mount shows a tensor, for fs/.  Each tensor is a directory
 * holding `meta`, a text of its type and shape (OneFlow's
 * VariableMetaInfo: oneflow/oneflow_meta.h defines, writes and parses it),
 * and `out`, its elements' bytes in row-major order, as many as
 * ck_view_shape counts for that meta.
 *
 * fs/ includes this, not the format that defines the text: the front-end
 * knows the view it shows, not where its language comes from, and a
 * second view of a model (a synthesized safetensors file, say) is one
 * more header here.  Types only, no .c of its own.
 */
#ifndef CK_VIEW_H
#define CK_VIEW_H

#include "core/dtype.h"
#include "oneflow/oneflow_meta.h"

/* The shapes a meta may give, and how its out's bytes are counted. */
static inline const ck_shape_rule *ck_view_shape(void)
{
    return &ck_shape_oneflow;
}

#endif
