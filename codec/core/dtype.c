/* SPDX-License-Identifier: Apache-2.0 */
#include "dtype.h"

#include <stdio.h>
#include <string.h>

/* OneFlow DataType numbers: oneflow/core/common/data_type.proto (v0.6+). */
enum {
    OF_CHAR = 1, OF_FLOAT = 2, OF_DOUBLE = 3, OF_INT8 = 4, OF_INT32 = 5, OF_INT64 = 6,
    OF_UINT8 = 7, OF_FLOAT16 = 9, OF_BFLOAT16 = 11, OF_BOOL = 12, OF_UINT16 = 13,
    OF_UINT32 = 14, OF_UINT64 = 15, OF_INT16 = 17, OF_COMPLEX64 = 20, OF_COMPLEX128 = 21,
};

/* The MindSpore names are the string forms of mindspore dtypes
 * (mindspore-formats.md 2.1).  The first entry for each OneFlow type is the
 * canonical one used when a OneFlow meta is turned back into a checkpoint. */
static const ck_dtype mindspore_types[] = {
    {"Float32", "kFloat", OF_FLOAT, 4, CK_KIND_NUMERIC, 1, 0},
    {"Float64", "kDouble", OF_DOUBLE, 8, CK_KIND_NUMERIC, 11, 0},
    {"Float16", "kFloat16", OF_FLOAT16, 2, CK_KIND_NUMERIC, 10, 0},
    {"BFloat16", "kBFloat16", OF_BFLOAT16, 2, CK_KIND_NUMERIC, 16, 0},
    {"Int8", "kInt8", OF_INT8, 1, CK_KIND_NUMERIC, 3, 0},
    {"Int16", "kInt16", OF_INT16, 2, CK_KIND_NUMERIC, 5, 0},
    {"Int32", "kInt32", OF_INT32, 4, CK_KIND_NUMERIC, 6, 0},
    {"Int64", "kInt64", OF_INT64, 8, CK_KIND_NUMERIC, 7, 0},
    {"UInt8", "kUInt8", OF_UINT8, 1, CK_KIND_NUMERIC, 2, 0},
    {"UInt16", "kUInt16", OF_UINT16, 2, CK_KIND_NUMERIC, 4, 0},
    {"UInt32", "kUInt32", OF_UINT32, 4, CK_KIND_NUMERIC, 12, 0},
    {"UInt64", "kUInt64", OF_UINT64, 8, CK_KIND_NUMERIC, 13, 0},
    {"Bool", "kBool", OF_BOOL, 1, CK_KIND_NUMERIC, 9, 0},
    {"Complex64", "kComplex64", OF_COMPLEX64, 8, CK_KIND_NUMERIC, 14, 0},
    {"Complex128", "kComplex128", OF_COMPLEX128, 16, CK_KIND_NUMERIC, 15, 0},
    {"str", "kChar", OF_CHAR, 4, CK_KIND_STR, 0, 0},
    /* MindSpore's type-size table gives qint4x2 one byte per element. */
    {"Int4", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 0, 0},
    {"random_op", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 0, 0},
};

/* numpy dtype strings, used only inside map tensors (mindspore-formats.md 1.3). */
static const ck_dtype numpy_types[] = {
    {"float32", "kFloat", OF_FLOAT, 4, CK_KIND_NUMERIC, 0, 0},
    {"float64", "kDouble", OF_DOUBLE, 8, CK_KIND_NUMERIC, 0, 0},
    {"float16", "kFloat16", OF_FLOAT16, 2, CK_KIND_NUMERIC, 0, 0},
    {"int8", "kInt8", OF_INT8, 1, CK_KIND_NUMERIC, 0, 0},
    {"int16", "kInt16", OF_INT16, 2, CK_KIND_NUMERIC, 0, 0},
    {"int32", "kInt32", OF_INT32, 4, CK_KIND_NUMERIC, 0, 0},
    {"int64", "kInt64", OF_INT64, 8, CK_KIND_NUMERIC, 0, 0},
    {"uint8", "kUInt8", OF_UINT8, 1, CK_KIND_NUMERIC, 0, 0},
    {"uint16", "kUInt16", OF_UINT16, 2, CK_KIND_NUMERIC, 0, 0},
    {"uint32", "kUInt32", OF_UINT32, 4, CK_KIND_NUMERIC, 0, 0},
    {"uint64", "kUInt64", OF_UINT64, 8, CK_KIND_NUMERIC, 0, 0},
    {"bool", "kBool", OF_BOOL, 1, CK_KIND_NUMERIC, 0, 0},
    {"complex64", "kComplex64", OF_COMPLEX64, 8, CK_KIND_NUMERIC, 0, 0},
    {"complex128", "kComplex128", OF_COMPLEX128, 16, CK_KIND_NUMERIC, 0, 0},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const ck_dtype *find(const ck_dtype *table, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(table[i].ms_name) == len && memcmp(table[i].ms_name, name, len) == 0)
            return &table[i];
    return NULL;
}

const ck_dtype *ck_dtype_from_mindspore(const char *name, size_t len, int numpy_names)
{
    if (numpy_names)
        return find(numpy_types, COUNT(numpy_types), name, len);
    return find(mindspore_types, COUNT(mindspore_types), name, len);
}

/* Packed and opaque entries share kUInt8 with UInt8, which comes first. */
static const ck_dtype *canonical(int (*match)(const ck_dtype *, const void *), const void *arg)
{
    for (size_t i = 0; i < COUNT(mindspore_types); i++) {
        const ck_dtype *t = &mindspore_types[i];
        if ((t->kind == CK_KIND_NUMERIC || t->kind == CK_KIND_STR) && match(t, arg))
            return t;
    }
    return NULL;
}

struct name_arg {
    const char *name;
    size_t len;
};

static int match_name(const ck_dtype *t, const void *arg)
{
    const struct name_arg *a = arg;
    return strlen(t->of_name) == a->len && memcmp(t->of_name, a->name, a->len) == 0;
}

static int match_number(const ck_dtype *t, const void *arg)
{
    return t->of_value == *(const long *)arg;
}

const ck_dtype *ck_dtype_from_oneflow(const char *name, size_t len)
{
    struct name_arg a = {name, len};
    return canonical(match_name, &a);
}

const ck_dtype *ck_dtype_from_oneflow_number(long value)
{
    return canonical(match_number, &value);
}

/* ONNX types with no OneFlow name (onnx-format.md 1): their bytes are shown
 * as they are stored, read-only.  FLOAT8* keep one byte per element; the
 * 4- and 2-bit types are packed two or four to a byte. */
static const ck_dtype onnx_only_types[] = {
    {"FLOAT8E4M3FN", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 17, 0},
    {"FLOAT8E4M3FNUZ", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 18, 0},
    {"FLOAT8E5M2", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 19, 0},
    {"FLOAT8E5M2FNUZ", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 20, 0},
    {"UINT4", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 21, 2},
    {"INT4", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 22, 2},
    {"FLOAT4E2M1", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 23, 2},
    {"FLOAT8E8M0", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 24, 0},
    {"UINT2", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 25, 4},
    {"INT2", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 26, 4},
};

/* STRING tensors: elements shown as UTF-8 text, each ended by a NUL. */
static const ck_dtype pb_string = {"STRING", "kChar", OF_CHAR, 1, CK_KIND_STR, 8, 0};
/* MindIR's QINT4X2 (MindSpore Int4): the packed bytes. */
static const ck_dtype mindir_qint4x2 = {"QINT4X2", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 18, 2};

const ck_dtype *ck_dtype_from_pb(long code, int mindir)
{
    if (code == 8)
        return &pb_string;
    if (mindir && code == 17) /* FLOAT64: the loader's alias of DOUBLE */
        return &mindspore_types[1];
    if (mindir && code == 18)
        return &mindir_qint4x2;
    for (size_t i = 0; i < COUNT(mindspore_types); i++)
        if (mindspore_types[i].pb_code == code && code != 0)
            return &mindspore_types[i];
    if (mindir)
        return NULL;
    for (size_t i = 0; i < COUNT(onnx_only_types); i++)
        if (onnx_only_types[i].pb_code == code)
            return &onnx_only_types[i];
    return NULL;
}

/* safetensors dtypes (huggingface/safetensors, tensor.rs `Dtype`).  Those
 * with a OneFlow name are MindSpore's entries above; the 8-, 6- and 4-bit
 * floats have none: FP8 bytes are shown as they are stored, one per
 * element, and the sub-byte types packed, as for ONNX. */
static const ck_dtype safetensors_only_types[] = {
    {"F8_E5M2", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 0, 0},
    {"F8_E4M3", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 0, 0},
    {"F8_E8M0", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 0, 0},
    {"F8_E4M3FNUZ", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 0, 0},
    {"F8_E5M2FNUZ", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE, 0, 0},
    {"F6_E2M3", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 0, 0},
    {"F6_E3M2", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 0, 0},
    {"F4", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED, 0, 2},
};

/* In the reference's `Dtype` order, which its writer sorts by (descending). */
static const struct st_type {
    const char *name;
    unsigned bits;
    const ck_dtype *dtype;
} safetensors_types[] = {
    {"BOOL", 8, &mindspore_types[12]},
    {"F4", 4, &safetensors_only_types[7]},
    {"F6_E2M3", 6, &safetensors_only_types[5]},
    {"F6_E3M2", 6, &safetensors_only_types[6]},
    {"U8", 8, &mindspore_types[8]},
    {"I8", 8, &mindspore_types[4]},
    {"F8_E5M2", 8, &safetensors_only_types[0]},
    {"F8_E4M3", 8, &safetensors_only_types[1]},
    {"F8_E8M0", 8, &safetensors_only_types[2]},
    {"F8_E4M3FNUZ", 8, &safetensors_only_types[3]},
    {"F8_E5M2FNUZ", 8, &safetensors_only_types[4]},
    {"I16", 16, &mindspore_types[5]},
    {"U16", 16, &mindspore_types[9]},
    {"F16", 16, &mindspore_types[2]},
    {"BF16", 16, &mindspore_types[3]},
    {"I32", 32, &mindspore_types[6]},
    {"U32", 32, &mindspore_types[10]},
    {"F32", 32, &mindspore_types[0]},
    {"C64", 64, &mindspore_types[13]},
    {"F64", 64, &mindspore_types[1]},
    {"I64", 64, &mindspore_types[7]},
    {"U64", 64, &mindspore_types[11]},
};

unsigned ck_st_dtype_rank(const char *name)
{
    for (size_t i = 0; i < COUNT(safetensors_types); i++)
        if (strcmp(safetensors_types[i].name, name) == 0)
            return (unsigned)i;
    return 0;
}

const ck_dtype *ck_dtype_from_safetensors(const char *name, size_t len, unsigned *bits)
{
    for (size_t i = 0; i < COUNT(safetensors_types); i++) {
        const struct st_type *t = &safetensors_types[i];
        if (strlen(t->name) == len && memcmp(t->name, name, len) == 0) {
            *bits = t->bits;
            return t->dtype;
        }
    }
    return NULL;
}

const char *ck_dtype_safetensors_name(const ck_dtype *dt)
{
    for (size_t i = 0; i < COUNT(safetensors_types); i++)
        if (safetensors_types[i].dtype == dt)
            return safetensors_types[i].name;
    /* Another format's entry of the same type: by OneFlow type. */
    if (dt->kind != CK_KIND_NUMERIC)
        return NULL;
    for (size_t i = 0; i < COUNT(safetensors_types); i++) {
        const ck_dtype *st = safetensors_types[i].dtype;
        if (st->kind == CK_KIND_NUMERIC && st->of_value == dt->of_value)
            return safetensors_types[i].name;
    }
    return NULL;
}

const ck_dtype *ck_dtype_by_name(const char *name, size_t len)
{
    static const struct {
        const ck_dtype *v;
        size_t n;
    } tables[] = {
        {mindspore_types, COUNT(mindspore_types)},
        {numpy_types, COUNT(numpy_types)},
        {onnx_only_types, COUNT(onnx_only_types)},
        {&pb_string, 1},
        {&mindir_qint4x2, 1},
        {safetensors_only_types, COUNT(safetensors_only_types)},
    };
    for (size_t i = 0; i < COUNT(tables); i++) {
        const ck_dtype *t = find(tables[i].v, tables[i].n, name, len);
        if (t != NULL)
            return t;
    }
    return NULL;
}

/* Canonical names (ck_dtype_canonical_name).  The lowercase numpy / torch
 * names, because they are what a user's own code (numpy, torch, jax)
 * prints and takes, and one spelling lets the tools' type columns, totals
 * and diffs line up across formats.  Plain types are keyed by OneFlow
 * number, which every format's entry of that type shares. */
static const struct {
    int of_value;
    const char *name;
} canonical_numeric[] = {
    {OF_FLOAT, "float32"},     {OF_DOUBLE, "float64"},       {OF_FLOAT16, "float16"},
    {OF_BFLOAT16, "bfloat16"}, {OF_INT8, "int8"},            {OF_INT16, "int16"},
    {OF_INT32, "int32"},       {OF_INT64, "int64"},          {OF_UINT8, "uint8"},
    {OF_UINT16, "uint16"},     {OF_UINT32, "uint32"},        {OF_UINT64, "uint64"},
    {OF_BOOL, "bool"},         {OF_COMPLEX64, "complex64"},  {OF_COMPLEX128, "complex128"},
    {OF_CHAR, "str"},
};

/* The packed and opaque types all share kUInt8, so they are keyed by their
 * entry's ms_name (unique across the tables).  Their names are ml_dtypes'
 * (torch's float8_* too): the same bits under the same name, so that
 * ONNX's FLOAT8E4M3FN and safetensors' F8_E4M3 (torch.float8_e4m3fn, as
 * safetensors' own torch loader maps it) both read float8_e4m3fn. */
static const struct {
    const char *ms_name;
    const char *name;
} canonical_raw[] = {
    {"Int4", "int4"},     /* MindSpore qint4x2 */
    {"QINT4X2", "int4"},  /* MindIR's spelling of the same */
    {"random_op", "random_op"}, /* generator state: no element type, kept */
    {"FLOAT8E4M3FN", "float8_e4m3fn"},     {"FLOAT8E4M3FNUZ", "float8_e4m3fnuz"},
    {"FLOAT8E5M2", "float8_e5m2"},         {"FLOAT8E5M2FNUZ", "float8_e5m2fnuz"},
    {"FLOAT8E8M0", "float8_e8m0fnu"},      {"FLOAT4E2M1", "float4_e2m1fn"},
    {"UINT4", "uint4"},   {"INT4", "int4"},  {"UINT2", "uint2"},  {"INT2", "int2"},
    {"F8_E5M2", "float8_e5m2"},            {"F8_E4M3", "float8_e4m3fn"},
    {"F8_E8M0", "float8_e8m0fnu"},         {"F8_E4M3FNUZ", "float8_e4m3fnuz"},
    {"F8_E5M2FNUZ", "float8_e5m2fnuz"},    {"F6_E2M3", "float6_e2m3fn"},
    {"F6_E3M2", "float6_e3m2fn"},          {"F4", "float4_e2m1fn"},
};

const char *ck_dtype_canonical_name(const ck_dtype *dt)
{
    if (dt->kind == CK_KIND_NUMERIC || dt->kind == CK_KIND_STR) {
        for (size_t i = 0; i < COUNT(canonical_numeric); i++)
            if (canonical_numeric[i].of_value == dt->of_value)
                return canonical_numeric[i].name;
    } else {
        for (size_t i = 0; i < COUNT(canonical_raw); i++)
            if (strcmp(canonical_raw[i].ms_name, dt->ms_name) == 0)
                return canonical_raw[i].name;
    }
    /* a table entry added without a name here (the unit tests check there
     * is none): the format's own is still a name */
    return dt->ms_name;
}

const ck_dtype *ck_dtype_from_canonical(const char *name)
{
    static const struct {
        const ck_dtype *v;
        size_t n;
    } tables[] = {
        {mindspore_types, COUNT(mindspore_types)},
        {onnx_only_types, COUNT(onnx_only_types)},
        {safetensors_only_types, COUNT(safetensors_only_types)},
    };
    for (size_t i = 0; i < COUNT(tables); i++)
        for (size_t k = 0; k < tables[i].n; k++)
            if (strcmp(ck_dtype_canonical_name(&tables[i].v[k]), name) == 0)
                return &tables[i].v[k];
    return NULL;
}

const ck_shape_rule ck_shape_ckpt = {.elements = false, .max = UINT64_MAX};
const ck_shape_rule ck_shape_oneflow = {.elements = false, .max = UINT64_MAX};
const ck_shape_rule ck_shape_pb = {.elements = false, .max = INT64_MAX};
const ck_shape_rule ck_shape_st = {.elements = true, .max = INT64_MAX};

long ck_shape_product(const ck_shape_rule *r, const ck_dtype *dt, const int64_t *dims,
                      uint32_t ndim, uint64_t *out)
{
    uint64_t n = r->elements || dt->kind == CK_KIND_PACKED ? 1 : dt->itemsize;
    for (uint32_t i = 0; i < ndim; i++)
        if (dims[i] < 0 || __builtin_mul_overflow(n, (uint64_t)dims[i], &n) || n > r->max)
            return (long)i;
    if (out != NULL)
        *out = n;
    return -1;
}

const char *ck_shape_refusal(const ck_shape_rule *r, const ck_dtype *dt, const int64_t *dims,
                             uint32_t ndim, char *why, size_t cap)
{
    long bad = ck_shape_product(r, dt, dims, ndim, NULL);
    if (bad < 0)
        return NULL;
    size_t n = (size_t)snprintf(why, cap, "dims [");
    for (uint32_t i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(why + n, cap - n, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (n < cap)
        snprintf(why + n, cap - n, "] make %s past %s (at dim %ld)",
                 r->elements ? "an element count" : "a byte count",
                 r->max == INT64_MAX ? "2^63-1" : "2^64-1", bad);
    return why;
}
