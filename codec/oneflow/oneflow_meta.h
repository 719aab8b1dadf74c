/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_meta: the `meta` file of a OneFlow variable directory.
 *
 * OneFlow writes `text_format.MessageToString(VariableMetaInfo)`; ckptfs
 * produces exactly those bytes, e.g. for a float32 [3, 4]:
 *   "shape {\n  dim: 3\n  dim: 4\n}\ndata_type: kFloat\n"
 * and for a 0-d int64 scalar "shape {\n}\ndata_type: kInt64\n".
 *
 * Reading a meta someone wrote accepts what protobuf's text parser accepts
 * for this message: any whitespace, `#` comments, `:` before a message
 * optional, `{}` or `<>` around it, `,`/`;` between fields, list syntax
 * `dim: [3, 4]`, decimal/hex/octal integers, enum names or numbers, and a
 * missing `shape` (0-d).  Unknown fields, repeated singular fields, unknown
 * types and negative dims are errors.
 */
#ifndef CK_ONEFLOW_META_H
#define CK_ONEFLOW_META_H

#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"
#include "../core/tensor_index.h"

/* Upper bound of a meta text: CK_MAX_DIMS lines of "  dim: <int64>\n". */
#define CK_META_MAX (32 + CK_MAX_DIMS * 30)

/* Format into buf (cap >= CK_META_MAX); returns the length. */
size_t ck_meta_format(const ck_dtype *dtype, const int64_t *dims, uint32_t ndim, char *buf,
                      size_t cap);

/* A parsed meta. */
typedef struct ck_meta {
    const ck_dtype *dtype;
    uint32_t ndim;
    int64_t dims[CK_MAX_DIMS];
} ck_meta;

/* Parse text (len bytes, not NUL-terminated).  On error, err names the
 * line and the problem; the caller adds the file. */
int ck_meta_parse(const char *text, size_t len, ck_meta *out, ck_error *err);

/* Whether text could still become a meta as more is written after it:
 * 0 when it parses, or when it fails only where the text ends (a field
 * name or a number cut short, a shape not closed yet, no data_type yet);
 * -1 and err when no continuation can mend it (an unknown field or type
 * followed by more text, a negative dim, a stray byte).  A write can so
 * be refused as it happens, where the program that wrote it sees it. */
int ck_meta_prefix_check(const char *text, size_t len, ck_error *err);

static inline size_t ck_meta_of_tensor(const ck_tensor *t, char *buf, size_t cap)
{
    return ck_meta_format(t->dtype, t->dims, t->ndim, buf, cap);
}

#endif
