/*
 * oneflow_meta: the `meta` file of a OneFlow variable directory.
 *
 * OneFlow writes `text_format.MessageToString(VariableMetaInfo)`; ckptfs
 * produces exactly those bytes, e.g. for a float32 [3, 4]:
 *   "shape {\n  dim: 3\n  dim: 4\n}\ndata_type: kFloat\n"
 * and for a 0-d int64 scalar "shape {\n}\ndata_type: kInt64\n".
 */
#ifndef CK_ONEFLOW_META_H
#define CK_ONEFLOW_META_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "tensor_index.h"

/* Upper bound of a meta text: CK_MAX_DIMS lines of "  dim: <int64>\n". */
#define CK_META_MAX (32 + CK_MAX_DIMS * 30)

/* Format into buf (cap >= CK_META_MAX); returns the length. */
size_t ck_meta_format(const ck_dtype *dtype, const int64_t *dims, uint32_t ndim, char *buf,
                      size_t cap);

static inline size_t ck_meta_of_tensor(const ck_tensor *t, char *buf, size_t cap)
{
    return ck_meta_format(t->dtype, t->dims, t->ndim, buf, cap);
}

#endif
