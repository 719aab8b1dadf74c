#include "dtype.h"

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
    {"Float32", "kFloat", OF_FLOAT, 4, CK_KIND_NUMERIC},
    {"Float64", "kDouble", OF_DOUBLE, 8, CK_KIND_NUMERIC},
    {"Float16", "kFloat16", OF_FLOAT16, 2, CK_KIND_NUMERIC},
    {"BFloat16", "kBFloat16", OF_BFLOAT16, 2, CK_KIND_NUMERIC},
    {"Int8", "kInt8", OF_INT8, 1, CK_KIND_NUMERIC},
    {"Int16", "kInt16", OF_INT16, 2, CK_KIND_NUMERIC},
    {"Int32", "kInt32", OF_INT32, 4, CK_KIND_NUMERIC},
    {"Int64", "kInt64", OF_INT64, 8, CK_KIND_NUMERIC},
    {"UInt8", "kUInt8", OF_UINT8, 1, CK_KIND_NUMERIC},
    {"UInt16", "kUInt16", OF_UINT16, 2, CK_KIND_NUMERIC},
    {"UInt32", "kUInt32", OF_UINT32, 4, CK_KIND_NUMERIC},
    {"UInt64", "kUInt64", OF_UINT64, 8, CK_KIND_NUMERIC},
    {"Bool", "kBool", OF_BOOL, 1, CK_KIND_NUMERIC},
    {"Complex64", "kComplex64", OF_COMPLEX64, 8, CK_KIND_NUMERIC},
    {"Complex128", "kComplex128", OF_COMPLEX128, 16, CK_KIND_NUMERIC},
    {"str", "kChar", OF_CHAR, 4, CK_KIND_STR},
    /* MindSpore's type-size table gives qint4x2 one byte per element. */
    {"Int4", "kUInt8", OF_UINT8, 1, CK_KIND_PACKED},
    {"random_op", "kUInt8", OF_UINT8, 1, CK_KIND_OPAQUE},
};

/* numpy dtype strings, used only inside map tensors (mindspore-formats.md 1.3). */
static const ck_dtype numpy_types[] = {
    {"float32", "kFloat", OF_FLOAT, 4, CK_KIND_NUMERIC},
    {"float64", "kDouble", OF_DOUBLE, 8, CK_KIND_NUMERIC},
    {"float16", "kFloat16", OF_FLOAT16, 2, CK_KIND_NUMERIC},
    {"int8", "kInt8", OF_INT8, 1, CK_KIND_NUMERIC},
    {"int16", "kInt16", OF_INT16, 2, CK_KIND_NUMERIC},
    {"int32", "kInt32", OF_INT32, 4, CK_KIND_NUMERIC},
    {"int64", "kInt64", OF_INT64, 8, CK_KIND_NUMERIC},
    {"uint8", "kUInt8", OF_UINT8, 1, CK_KIND_NUMERIC},
    {"uint16", "kUInt16", OF_UINT16, 2, CK_KIND_NUMERIC},
    {"uint32", "kUInt32", OF_UINT32, 4, CK_KIND_NUMERIC},
    {"uint64", "kUInt64", OF_UINT64, 8, CK_KIND_NUMERIC},
    {"bool", "kBool", OF_BOOL, 1, CK_KIND_NUMERIC},
    {"complex64", "kComplex64", OF_COMPLEX64, 8, CK_KIND_NUMERIC},
    {"complex128", "kComplex128", OF_COMPLEX128, 16, CK_KIND_NUMERIC},
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
