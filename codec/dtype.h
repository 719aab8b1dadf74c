/*
 * dtype: the element types ckptfs knows, and how they map between the
 * model formats' type names and OneFlow's DataType enum (the `meta` file).
 */
#ifndef CK_DTYPE_H
#define CK_DTYPE_H

#include <stddef.h>

typedef enum ck_dtype_kind {
    CK_KIND_NUMERIC,    /* plain little-endian elements of itemsize bytes */
    CK_KIND_STR,        /* MindSpore `str`: UTF-32LE in the file, UTF-8 in the tree */
    CK_KIND_PACKED,     /* Int4 (qint4x2): raw packed bytes shown as kUInt8 */
    CK_KIND_OPAQUE,     /* random_op state: raw bytes shown as kUInt8 [n] */
} ck_dtype_kind;

typedef struct ck_dtype {
    const char *ms_name;    /* MindSpore tensor_type string, e.g. "Float32" */
    const char *of_name;    /* OneFlow DataType name, e.g. "kFloat" */
    int of_value;           /* OneFlow DataType number */
    unsigned itemsize;      /* bytes per element in the file */
    ck_dtype_kind kind;
} ck_dtype;

/* Look up a MindSpore checkpoint tensor_type string (len bytes, not
 * NUL-terminated).  Map-tensor parts use numpy dtype names ("float32"):
 * pass numpy_names = 1 to look those up instead. */
const ck_dtype *ck_dtype_from_mindspore(const char *name, size_t len, int numpy_names);

/* The type a OneFlow DataType (by name, e.g. "kFloat", or number) stands
 * for when a tree is written back: the canonical MindSpore type of that
 * DataType (kChar is `str`). */
const ck_dtype *ck_dtype_from_oneflow(const char *name, size_t len);
const ck_dtype *ck_dtype_from_oneflow_number(long value);

#endif
