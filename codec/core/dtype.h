/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dtype: the element types ckptfs knows, and how they map between the
 * model formats' type names and OneFlow's DataType enum (the `meta` file).
 *
 * Types OneFlow has no name for are shown as their stored bytes under
 * kUInt8, read-only: MindSpore's Int4 (and ONNX's 4- and 2-bit types)
 * packed, since unpacking would invent a layout the reference only knows
 * from code reading; the 8-bit floats with the tensor's dims.
 *
 * One name for a type in the tools (issue 39, ck_dtype_canonical_name):
 * the lowercase numpy / torch names, and ml_dtypes' for what numpy lacks,
 * because they are what a user's own code prints and takes, and one
 * spelling lets listings, totals and diffs of different formats line up.
 * Two small tables: plain types by OneFlow number, which every format's
 * entry of a type shares, and the raw-byte types, which all borrow
 * kUInt8, by their entry.  The format's own spelling stays where it is
 * the file's or adds information: user.ckptfs.type, `meta`, the saved
 * index, ckptfs-dump --json's format_type, and a "type differs" line whose
 * two sides have one name (MindSpore's Int4 and ONNX's INT4 pack
 * differently).
 *
 * A shape rule (ck_shape_rule) is a reader's own bound, shared by the
 * readers, the tree's check of a meta, ckptfs-convert's plan and
 * ck_encode, which refuses such a shape for every writer before its
 * encoder writes a byte.
 */
#ifndef CK_DTYPE_H
#define CK_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ck_dtype_kind {
    CK_KIND_NUMERIC,    /* plain little-endian elements of itemsize bytes */
    CK_KIND_STR,        /* text: MindSpore `str` (UTF-32LE in the file), ONNX STRING;
                         * UTF-8 in the tree */
    CK_KIND_PACKED,     /* sub-byte elements (Int4, ONNX INT4/UINT2...): the packed
                         * bytes shown as kUInt8 [nbytes] */
    CK_KIND_OPAQUE,     /* random_op state, ONNX FLOAT8*: raw bytes as kUInt8 */
} ck_dtype_kind;

typedef struct ck_dtype {
    const char *ms_name;    /* MindSpore tensor_type string, e.g. "Float32" */
    const char *of_name;    /* OneFlow DataType name, e.g. "kFloat" */
    int of_value;           /* OneFlow DataType number */
    unsigned itemsize;      /* bytes per element in the file */
    ck_dtype_kind kind;
    int pb_code;            /* ONNX / MindIR TensorProto.DataType, 0 if none */
    unsigned per_byte;      /* PACKED ONNX types: elements per byte (2 or 4) */
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

/* An ONNX TensorProto.DataType (mindir = 0) or a MindIR one (mindir = 1);
 * the two enums agree on 1..16.  NULL for UNDEFINED and unknown values.
 * Types OneFlow has no name for (the 8-, 4- and 2-bit ONNX types) come
 * back as PACKED or OPAQUE kUInt8 entries; STRING as kind STR. */
const ck_dtype *ck_dtype_from_pb(long code, int mindir);

/* A safetensors dtype ("F32", "BF16", "F8_E4M3", ...; len bytes): the
 * type, and its size in bits (4 and 6 for the sub-byte floats) in *bits.
 * NULL for anything else. */
const ck_dtype *ck_dtype_from_safetensors(const char *name, size_t len, unsigned *bits);
/* The safetensors dtype of a type (the same OneFlow type when it comes from
 * another format); NULL when safetensors has none (str, Int4, complex128). */
const char *ck_dtype_safetensors_name(const ck_dtype *dt);
/* A safetensors dtype's place in the reference's `Dtype` list (BOOL 0 ...
 * U64 21), which its writer orders tensors by. */
unsigned ck_st_dtype_rank(const char *name);

/* The one name every tool prints for a type, whatever the format spelled
 * it (F32, FLOAT, torch.float32, Float32, kFloat: float32): numpy's and
 * torch's lowercase names, ml_dtypes' for the 8-, 6-, 4- and 2-bit types
 * (float8_e4m3fn, int4...), `str` for text, `random_op` for MindSpore's
 * opaque generator state.  Never NULL. */
const char *ck_dtype_canonical_name(const ck_dtype *dt);

/* A type by the name ck_dtype_canonical_name gives it ("float32",
 * "int64", "bfloat16"): MindSpore's entry where it has one.  NULL for
 * none. */
const ck_dtype *ck_dtype_from_canonical(const char *name);

/* Any type of any format by its ms_name (each is unique across the
 * tables: "Float32", "float32", "INT4", "F8_E4M3"...), for a saved index
 * (saved_index.h); NULL for none. */
const ck_dtype *ck_dtype_by_name(const char *name, size_t len);

/* How a format's reader bounds a shape: it multiplies the dims out, left
 * to right, from the item size (from 1 for sub-byte types) or from 1 (an
 * element count), and refuses a product past max at any step, so that
 * [2^62, 0] of Float32 is refused by one and read by another. */
typedef struct ck_shape_rule {
    bool elements;          /* start from 1, not from the item size */
    uint64_t max;
} ck_shape_rule;
/* The readers' rules: .ckpt and OneFlow count bytes in 64 bits; ONNX and
 * MindIR bytes up to INT64_MAX (sizes are off_t); safetensors elements up
 * to INT64_MAX (the reference's usize, and off_t). */
extern const ck_shape_rule ck_shape_ckpt, ck_shape_oneflow, ck_shape_pb, ck_shape_st;
/* The product under rule r into *out (may be NULL): -1, or the index of
 * the dim that takes it past r->max. */
long ck_shape_product(const ck_shape_rule *r, const ck_dtype *dt, const int64_t *dims,
                      uint32_t ndim, uint64_t *out);
/* Why the format of rule r cannot hold dims, into why (cap bytes), or
 * NULL when it can: a writer's refusal and a conversion plan's. */
const char *ck_shape_refusal(const ck_shape_rule *r, const ck_dtype *dt, const int64_t *dims,
                             uint32_t ndim, char *why, size_t cap);

#endif
