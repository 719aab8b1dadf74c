/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats_elem: the element types of ckptfs-stat's statistics, an element's
 * value, and the partial result's start and merge (stats_elem.h).
 */
#include "stats_elem.h"

#include <math.h>
#include <string.h>

#include "../codec/core/le_bytes.h"

ck_elem ck_elem_of(const ck_dtype *dt)
{
    static const struct { const char *of_name; ck_elem e; } map[] = {
        {"kFloat16", CK_ELEM_F16}, {"kBFloat16", CK_ELEM_BF16}, {"kFloat", CK_ELEM_F32},
        {"kDouble", CK_ELEM_F64}, {"kInt8", CK_ELEM_I8}, {"kInt16", CK_ELEM_I16},
        {"kInt32", CK_ELEM_I32}, {"kInt64", CK_ELEM_I64}, {"kUInt8", CK_ELEM_U8},
        {"kUInt16", CK_ELEM_U16}, {"kUInt32", CK_ELEM_U32}, {"kUInt64", CK_ELEM_U64},
        {"kBool", CK_ELEM_BOOL},
    };
    /* Packed and opaque types (Int4, 8-bit floats...) borrow kUInt8 for the
     * tree: only the kind tells them from real bytes. */
    if (dt == NULL || dt->kind != CK_KIND_NUMERIC)
        return CK_ELEM_NONE;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(dt->of_name, map[i].of_name) == 0)
            return ck_elem_size(map[i].e) == dt->itemsize ? map[i].e : CK_ELEM_NONE;
    return CK_ELEM_NONE;
}

unsigned ck_elem_size(ck_elem e)
{
    switch (e) {
    case CK_ELEM_NONE: return 0;
    case CK_ELEM_I8: case CK_ELEM_U8: case CK_ELEM_BOOL: return 1;
    case CK_ELEM_F16: case CK_ELEM_BF16: case CK_ELEM_I16: case CK_ELEM_U16: return 2;
    case CK_ELEM_F32: case CK_ELEM_I32: case CK_ELEM_U32: return 4;
    case CK_ELEM_F64: case CK_ELEM_I64: case CK_ELEM_U64: return 8;
    }
    return 0;
}

bool ck_elem_is_float(ck_elem e)
{
    return e == CK_ELEM_F16 || e == CK_ELEM_BF16 || e == CK_ELEM_F32 || e == CK_ELEM_F64;
}

bool ck_elem_is_signed(ck_elem e)
{
    return e == CK_ELEM_I8 || e == CK_ELEM_I16 || e == CK_ELEM_I32 || e == CK_ELEM_I64 ||
           e == CK_ELEM_BOOL;
}

void ck_stats_init(ck_stats *s)
{
    memset(s, 0, sizeof *s);
}

double ck_elem_value(ck_elem e, const void *buf, size_t i)
{
    const unsigned char *p = (const unsigned char *)buf + i * ck_elem_size(e);
    switch (e) {
    case CK_ELEM_NONE: return NAN;
    case CK_ELEM_F16: return ck_half_to_double(ck_le16(p));
    case CK_ELEM_BF16: return ck_bf16_to_double(ck_le16(p));
    case CK_ELEM_F32: {
        uint32_t u = ck_le32(p);
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case CK_ELEM_F64: {
        uint64_t u = ck_le64(p);
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    case CK_ELEM_I8: return (int8_t)p[0];
    case CK_ELEM_I16: return (int16_t)ck_le16(p);
    case CK_ELEM_I32: return (int32_t)ck_le32(p);
    case CK_ELEM_I64: return (double)(int64_t)ck_le64(p);
    case CK_ELEM_U8: return p[0];
    case CK_ELEM_U16: return ck_le16(p);
    case CK_ELEM_U32: return ck_le32(p);
    case CK_ELEM_U64: return (double)ck_le64(p);
    case CK_ELEM_BOOL: return p[0] != 0; /* numpy reads any non-zero byte as True */
    }
    return NAN;
}

void ck_stats_merge(ck_stats *a, const ck_stats *b, ck_elem e)
{
    if (b->finite > 0 && a->finite == 0) {
        a->min = b->min;
        a->max = b->max;
        a->imin = b->imin;
        a->imax = b->imax;
        a->umin = b->umin;
        a->umax = b->umax;
        a->mean = b->mean;
        a->m2 = b->m2;
    } else if (b->finite > 0) {
        double na = (double)a->finite, nb = (double)b->finite, n = na + nb;
        double delta = b->mean - a->mean;
        a->mean += delta * (nb / n);
        a->m2 += b->m2 + delta * delta * (na * nb / n);
        a->min = b->min < a->min ? b->min : a->min;
        a->max = b->max > a->max ? b->max : a->max;
        if (ck_elem_is_signed(e)) {
            a->imin = b->imin < a->imin ? b->imin : a->imin;
            a->imax = b->imax > a->imax ? b->imax : a->imax;
        } else {
            a->umin = b->umin < a->umin ? b->umin : a->umin;
            a->umax = b->umax > a->umax ? b->umax : a->umax;
        }
    }
    a->count += b->count;
    a->finite += b->finite;
    a->nan += b->nan;
    a->posinf += b->posinf;
    a->neginf += b->neginf;
    a->zeros += b->zeros;
}
