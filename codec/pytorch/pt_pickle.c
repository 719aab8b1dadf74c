/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_pickle: a torch.save data.pkl walked into named leaves (pt_pickle.h).
 *
 * torch.save pickles a tensor as
 *   REDUCE(torch._utils._rebuild_tensor_v2,
 *          (BINPERSID(('storage', torch.<T>Storage, key, location, numel)),
 *           storage_offset, size, stride, requires_grad, OrderedDict()[, metadata]))
 * (torch/serialization.py, _save's persistent_id; torch/_tensor.py,
 * __reduce_ex__), a Parameter as _rebuild_parameter(tensor, requires_grad,
 * hooks), and a tensor with Python attributes as
 * _rebuild_from_type_v2(func, type, args, state).  The machine records
 * those calls; this file reads their arguments back, checking each.
 */
#define _GNU_SOURCE
#include "pt_pickle.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dir_name.h"
#include "../pickle/pickle_vm.h"

#define NONE_ID CK_PK_NONE_ID
#define MAX_NAME 65535u
/* _rebuild_from_type_v2 of _rebuild_parameter of _rebuild_tensor_v2: 3. */
#define MAX_WRAPS 4

/* The allowed globals' ids (pt_pickle.h), shorter. */
enum {
    G_ORDERED_DICT = CK_PT_G_ORDERED_DICT,
    G_TENSOR_V2 = CK_PT_G_TENSOR_V2,
    G_PARAMETER = CK_PT_G_PARAMETER,
    G_PARAMETER_STATE = CK_PT_G_PARAMETER_STATE,
    G_FROM_TYPE = CK_PT_G_FROM_TYPE,
    G_CLASS = CK_PT_G_CLASS,
    G_OTHER = CK_PT_G_OTHER,
    G_STORAGE = CK_PT_G_STORAGE, /* + the storage class's index in storages[] */
};

static const struct storage_type {
    const char *cls, *ck_name, *torch_name;
} storages[] = {
    {"FloatStorage", "Float32", "torch.float32"},
    {"DoubleStorage", "Float64", "torch.float64"},
    {"HalfStorage", "Float16", "torch.float16"},
    {"BFloat16Storage", "BFloat16", "torch.bfloat16"},
    {"LongStorage", "Int64", "torch.int64"},
    {"IntStorage", "Int32", "torch.int32"},
    {"ShortStorage", "Int16", "torch.int16"},
    {"CharStorage", "Int8", "torch.int8"},
    {"ByteStorage", "UInt8", "torch.uint8"},
    {"BoolStorage", "Bool", "torch.bool"},
    {"ComplexFloatStorage", "Complex64", "torch.complex64"},
    {"ComplexDoubleStorage", "Complex128", "torch.complex128"},
    {"UInt16Storage", "UInt16", "torch.uint16"},
    {"UInt32Storage", "UInt32", "torch.uint32"},
    {"UInt64Storage", "UInt64", "torch.uint64"},
    {"Float8_e4m3fnStorage", "F8_E4M3", "torch.float8_e4m3fn"},
    {"Float8_e5m2Storage", "F8_E5M2", "torch.float8_e5m2"},
};

#define N_STORAGES (sizeof storages / sizeof *storages)

/* torch._weights_only_unpickler's _get_allowed_globals, less what a state
 * dict of dense CPU tensors never holds (quantized and sparse rebuilds,
 * dtypes, Counter): a file that has them is refused by name. */
static const ck_pk_global allowed[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT, true},
    {"torch._utils", "_rebuild_tensor_v2", G_TENSOR_V2, false},
    {"torch._utils", "_rebuild_parameter", G_PARAMETER, false},
    {"torch._utils", "_rebuild_parameter_with_state", G_PARAMETER_STATE, false},
    {"torch._tensor", "_rebuild_from_type_v2", G_FROM_TYPE, false},
    {"torch", "Tensor", G_CLASS, false},
    {"torch.nn.parameter", "Parameter", G_CLASS, false},
    {"torch", "Size", G_OTHER, false},
    {"torch", "device", G_OTHER, false},
    {"_codecs", "encode", G_OTHER, false},
    {"builtins", "set", G_OTHER, false},
    {"builtins", "complex", G_OTHER, false},
    {"builtins", "bytearray", G_OTHER, false},
    {"torch", "FloatStorage", G_STORAGE + 0, false},
    {"torch", "DoubleStorage", G_STORAGE + 1, false},
    {"torch", "HalfStorage", G_STORAGE + 2, false},
    {"torch", "BFloat16Storage", G_STORAGE + 3, false},
    {"torch", "LongStorage", G_STORAGE + 4, false},
    {"torch", "IntStorage", G_STORAGE + 5, false},
    {"torch", "ShortStorage", G_STORAGE + 6, false},
    {"torch", "CharStorage", G_STORAGE + 7, false},
    {"torch", "ByteStorage", G_STORAGE + 8, false},
    {"torch", "BoolStorage", G_STORAGE + 9, false},
    {"torch", "ComplexFloatStorage", G_STORAGE + 10, false},
    {"torch", "ComplexDoubleStorage", G_STORAGE + 11, false},
    {"torch", "UInt16Storage", G_STORAGE + 12, false},
    {"torch", "UInt32Storage", G_STORAGE + 13, false},
    {"torch", "UInt64Storage", G_STORAGE + 14, false},
    {"torch", "Float8_e4m3fnStorage", G_STORAGE + 15, false},
    {"torch", "Float8_e5m2Storage", G_STORAGE + 16, false},
};

/* About 15 nodes a tensor: 8M nodes is half a million tensors. */
static const ck_pk_rules rules = {
    .what = "a PyTorch state dict",
    .globals = allowed,
    .n_globals = sizeof allowed / sizeof *allowed,
    .persid = true,
    .max_nodes = 8u << 20,
    .max_entries = 1u << 22,
};

typedef struct walker {
    ck_pickle pk;
    ck_error *err;
    ck_pt_leaf_fn fn;
    void *ctx;
    ck_pt_walk *w;
    bool bare;                  /* the whole pickle may be one leaf, named "" */
    char *name;                 /* the current leaf's name */
    size_t len, cap;
    size_t visits, max_visits;
    int64_t dims[2 * CK_MAX_DIMS];
} walker;

static int fail_at(walker *k, size_t off, const char *what)
{
    return ck_pk_fail(&k->pk, off, k->err, what);
}

static const ck_pk_node *nd(const walker *k, uint32_t id)
{
    return ck_pk_at(&k->pk, id);
}

static int global_id(const walker *k, uint32_t id)
{
    const ck_pk_node *n = nd(k, id);
    return n->kind == CK_PK_GLOBAL ? allowed[n->x].id : -1;
}

/* ---- names --------------------------------------------------------------- */

/* Append ".part" (or "part" at the start) to the name; *mark is where to
 * cut it back to. */
static int name_push(walker *k, const char *part, size_t n, size_t off, size_t *mark)
{
    *mark = k->len;
    size_t need = k->len + (k->len > 0) + n + 1;
    if (memchr(part, '\0', n) != NULL)
        return fail_at(k, off, "a key with a NUL byte");
    if (!ck_utf8_valid(part, n)) /* Python decodes a key as UTF-8: it could not load it */
        return fail_at(k, off, "a key that is not UTF-8");
    if (need > MAX_NAME)
        return fail_at(k, off, "a name longer than ckptfs keeps (64 KiB)");
    if (need > k->cap) {
        size_t c = k->cap ? k->cap : 256;
        while (c < need)
            c *= 2;
        char *p = realloc(k->name, c);
        if (p == NULL)
            return ck_nomem(k->err, k->pk.file);
        k->name = p;
        k->cap = c;
    }
    if (k->len > 0)
        k->name[k->len++] = '.';
    memcpy(k->name + k->len, part, n);
    k->len += n;
    k->name[k->len] = '\0';
    return 0;
}

static void name_pop(walker *k, size_t mark)
{
    k->len = mark;
    if (k->name != NULL)
        k->name[mark] = '\0';
}

/* ---- tensors ------------------------------------------------------------- */

static bool is_int(const walker *k, uint32_t id, bool nonneg)
{
    const ck_pk_node *n = nd(k, id);
    return n->kind == CK_PK_INT && (!nonneg || (int64_t)n->x >= 0);
}

/* A tuple of at most CK_MAX_DIMS non-negative ints into out; its length. */
static long int_tuple(walker *k, uint32_t id, int64_t *out)
{
    const ck_pk_node *t = nd(k, id);
    if (t->kind != CK_PK_TUPLE || t->n > CK_MAX_DIMS)
        return -1;
    uint32_t i = 0;
    for (uint32_t c = t->a; c != NONE_ID; c = k->pk.cells[c].next, i++) {
        uint32_t v = k->pk.cells[c].val;
        if (!is_int(k, v, true))
            return -1;
        out[i] = (int64_t)nd(k, v)->x;
    }
    return (long)i;
}

/* BINPERSID(('storage', torch.<T>Storage, key, location, numel)). */
static int storage(walker *k, uint32_t id, ck_pt_leaf *l)
{
    const ck_pk_node *p = nd(k, id);
    static const char shape[] = "a tensor's storage is not ('storage', <storage class>, key, "
                                "location, numel)";
    if (p->kind != CK_PK_PERSID)
        return fail_at(k, p->off, "a tensor whose storage is not a persistent id");
    uint32_t t = p->a;
    if (nd(k, t)->kind != CK_PK_TUPLE || nd(k, t)->n != 5 ||
        !ck_pk_str_is(&k->pk, ck_pk_item(&k->pk, t, 0), "storage"))
        return fail_at(k, p->off, shape);
    int cls = global_id(k, ck_pk_item(&k->pk, t, 1));
    uint32_t key = ck_pk_item(&k->pk, t, 2), numel = ck_pk_item(&k->pk, t, 4);
    const ck_pk_node *kn = nd(k, key);
    if (cls < G_STORAGE || kn->kind != CK_PK_STR || nd(k, ck_pk_item(&k->pk, t, 3))->kind !=
        CK_PK_STR || !is_int(k, numel, true))
        return fail_at(k, p->off, shape);
    if (kn->n == 0 || kn->n > 255 || memchr(k->pk.buf + kn->x, '/', kn->n) != NULL ||
        memchr(k->pk.buf + kn->x, '\0', kn->n) != NULL)
        return fail_at(k, kn->off, "a storage key that is not a record name");
    const struct storage_type *s = &storages[cls - G_STORAGE];
    l->dtype = ck_dtype_by_name(s->ck_name, strlen(s->ck_name));
    l->type_name = s->torch_name;
    l->key = (const char *)k->pk.buf + kn->x;
    l->key_len = kn->n;
    l->numel = nd(k, numel)->x;
    return l->dtype == NULL ? fail_at(k, p->off, "a storage type ckptfs has no type for") : 0;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
 * backward_hooks[, metadata]). */
static int tensor_v2(walker *k, uint32_t args, size_t off, ck_pt_leaf *l)
{
    const ck_pk_node *a = nd(k, args);
    if (a->n < 6 || a->n > 7)
        return fail_at(k, off, "_rebuild_tensor_v2 with other than 6 or 7 arguments");
    if (storage(k, ck_pk_item(&k->pk, args, 0), l) < 0)
        return -1;
    uint32_t o = ck_pk_item(&k->pk, args, 1);
    if (!is_int(k, o, true))
        return fail_at(k, off, "a tensor whose storage offset is not an int of 0 or more");
    long n = int_tuple(k, ck_pk_item(&k->pk, args, 2), k->dims);
    long m = int_tuple(k, ck_pk_item(&k->pk, args, 3), k->dims + CK_MAX_DIMS);
    if (n < 0 || m != n)
        return fail_at(k, off, "a tensor whose size and stride are not two tuples of as many "
                       "ints of 0 or more (at most 64)");
    l->offset = nd(k, o)->x;
    l->ndim = (uint32_t)n;
    l->sizes = k->dims;
    l->strides = k->dims + CK_MAX_DIMS;
    return 0;
}

/* The tensor a rebuild call makes: fn (a global's id) called with args. */
static int tensor_of(walker *k, int fn, uint32_t args, size_t off, int wraps, ck_pt_leaf *l)
{
    if (nd(k, args)->kind != CK_PK_TUPLE)
        return fail_at(k, off, "a rebuild call whose arguments are not a tuple");
    if (wraps > MAX_WRAPS)
        return fail_at(k, off, "tensor rebuild calls nested deeper than PyTorch writes");
    if (fn == G_TENSOR_V2)
        return tensor_v2(k, args, off, l);
    uint32_t first = ck_pk_item(&k->pk, args, 0);
    if (first == NONE_ID)
        return fail_at(k, off, "a rebuild call without arguments");
    const ck_pk_node *f = nd(k, first);
    if (fn == G_PARAMETER || fn == G_PARAMETER_STATE) {
        if (f->kind != CK_PK_CALL)
            return fail_at(k, off, "a Parameter of something that is not a tensor");
        return tensor_of(k, (int)f->x, f->a, f->off, wraps + 1, l);
    }
    /* _rebuild_from_type_v2(func, new_type, args, state) */
    uint32_t inner = ck_pk_item(&k->pk, args, 2);
    if (nd(k, args)->n != 4 || global_id(k, ck_pk_item(&k->pk, args, 1)) != G_CLASS ||
        inner == NONE_ID)
        return fail_at(k, off, "_rebuild_from_type_v2 not of a tensor class");
    return tensor_of(k, global_id(k, first), inner, off, wraps + 1, l);
}

static bool is_rebuild(int fn)
{
    return fn == G_TENSOR_V2 || fn == G_PARAMETER || fn == G_PARAMETER_STATE ||
           fn == G_FROM_TYPE;
}

/* ---- the walk ------------------------------------------------------------ */

static int leaf(walker *k, ck_pt_leaf *l, size_t off)
{
    if (k->len == 0 && !k->bare)
        return fail_at(k, off, "a value without a name (ckptfs reads a dict of tensors, "
                       "not a bare tensor)");
    l->name = k->len == 0 ? "" : k->name;
    l->name_len = k->len;
    l->off = off;
    return k->fn(k->ctx, l, k->err);
}

static int skip(walker *k)
{
    k->w->skipped++;
    if (k->w->first_skipped == NULL && k->len > 0 &&
        (k->w->first_skipped = strdup(k->name)) == NULL)
        return ck_nomem(k->err, k->pk.file);
    return 0;
}

static int visit(walker *k, uint32_t id, unsigned depth);

/* A dict's items, or a sequence's (keys NONE_ID: named by index). */
static int visit_items(walker *k, const ck_pk_node *c, unsigned depth)
{
    if (depth >= CK_PT_MAX_DEPTH)
        return fail_at(k, c->off, "containers nested deeper than ckptfs reads (32)");
    uint64_t i = 0;
    for (uint32_t cell = c->a; cell != NONE_ID; cell = k->pk.cells[cell].next, i++) {
        const ck_pk_cell *e = &k->pk.cells[cell];
        char num[24];
        const char *part = num;
        size_t n = 0, mark = 0;
        if (e->key == NONE_ID) {
            n = (size_t)snprintf(num, sizeof num, "%" PRIu64, i);
        } else if (nd(k, e->key)->kind == CK_PK_STR) {
            part = (const char *)k->pk.buf + nd(k, e->key)->x;
            n = nd(k, e->key)->n;
        } else if (nd(k, e->key)->kind == CK_PK_INT) {
            n = (size_t)snprintf(num, sizeof num, "%" PRId64, (int64_t)nd(k, e->key)->x);
        } else {
            return fail_at(k, e->off, "a dict key that is neither a string nor an int");
        }
        if (name_push(k, part, n, e->off, &mark) < 0 || visit(k, e->val, depth + 1) < 0)
            return -1;
        name_pop(k, mark);
    }
    return 0;
}

static int visit(walker *k, uint32_t id, unsigned depth)
{
    const ck_pk_node *n = nd(k, id);
    ck_pt_leaf l = {0};
    if (++k->visits > k->max_visits)
        return fail_at(k, n->off, "values reached through more references than ckptfs "
                       "follows");
    switch (n->kind) {
    case CK_PK_DICT: case CK_PK_LIST: case CK_PK_TUPLE:
        return visit_items(k, n, depth);
    case CK_PK_INT: case CK_PK_FLOAT: case CK_PK_BOOL:
        l.kind = n->kind == CK_PK_INT ? CK_PT_INT : n->kind == CK_PK_FLOAT ? CK_PT_FLOAT
                                                                         : CK_PT_BOOL;
        l.value = n->x;
        return leaf(k, &l, n->off);
    case CK_PK_CALL:
        if (!is_rebuild((int)n->x))
            return skip(k);
        l.kind = CK_PT_TENSOR;
        if (tensor_of(k, (int)n->x, n->a, n->off, 0, &l) < 0)
            return -1;
        return leaf(k, &l, n->off);
    }
    return skip(k);
}

int ck_pt_pickle_run(const void *buf, size_t len, const char *file, ck_pickle *out,
                     ck_error *err)
{
    if (len > CK_PT_PICKLE_MAX_BYTES) {
        *out = (ck_pickle){0};
        return ck_fail(err, EFBIG, "%s: %zu bytes, more than a data.pkl ckptfs reads (%u)",
                       file, len, CK_PT_PICKLE_MAX_BYTES);
    }
    return ck_pickle_run(buf, len, file, &rules, out, err);
}

int ck_pt_node_role(const ck_pickle *p, uint32_t id)
{
    const ck_pk_node *n = ck_pk_at(p, id);
    switch (n->kind) {
    case CK_PK_DICT: case CK_PK_LIST: case CK_PK_TUPLE:
        return 0;
    case CK_PK_INT: case CK_PK_FLOAT: case CK_PK_BOOL:
        return 1;
    case CK_PK_CALL:
        return is_rebuild((int)n->x) ? 1 : -1;
    }
    return -1;
}

int ck_pt_global_id(const ck_pickle *p, uint32_t id)
{
    return allowed[ck_pk_at(p, id)->x].id;
}

void ck_pt_global_of(const ck_pickle *p, uint32_t id, const char **module, const char **name)
{
    const ck_pk_global *g = &allowed[ck_pk_at(p, id)->x];
    *module = g->module;
    *name = g->name;
}

int ck_pt_pickle_walk(const void *buf, size_t len, const char *file, bool bare,
                      ck_pt_leaf_fn fn, void *ctx, ck_pt_walk *w, ck_error *err)
{
    *w = (ck_pt_walk){0};
    walker k = {.err = err, .fn = fn, .ctx = ctx, .w = w, .bare = bare};
    int rc = ck_pt_pickle_run(buf, len, file, &k.pk, err);
    if (rc == 0) {
        /* Each node once, and as much again for values a pickle shares
         * (the memo lets one container be reached from many). */
        k.max_visits = 2 * k.pk.n_nodes + 1024;
        rc = visit(&k, k.pk.root, 0);
    }
    ck_pickle_free(&k.pk);
    free(k.name);
    return rc;
}

void ck_pt_walk_free(ck_pt_walk *w)
{
    free(w->first_skipped);
    *w = (ck_pt_walk){0};
}

static const struct storage_type *storage_of(const ck_dtype *dt)
{
    for (size_t i = 0; i < N_STORAGES; i++)
        if (strcmp(storages[i].ck_name, dt->ms_name) == 0)
            return &storages[i];
    return NULL;
}

const char *ck_pt_type_name(const ck_dtype *dt)
{
    const struct storage_type *s = storage_of(dt);
    return s != NULL ? s->torch_name : NULL;
}

const ck_dtype *ck_pt_dtype_named(const char *name, const char **type_name)
{
    for (size_t i = 0; i < N_STORAGES; i++)
        if (strcmp(storages[i].torch_name + 6, name) == 0) { /* after "torch." */
            *type_name = storages[i].torch_name;
            return ck_dtype_by_name(storages[i].ck_name, strlen(storages[i].ck_name));
        }
    return NULL;
}

const char *ck_pt_storage_class(const ck_dtype *dt)
{
    const struct storage_type *s = storage_of(dt);
    return s != NULL ? s->cls : NULL;
}
