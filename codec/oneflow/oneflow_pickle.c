/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_pickle: the names in a OneFlow snapshot's `pickled_data`
 * (oneflow_pickle.h), read by a symbolic pickle machine that never executes
 * anything.
 *
 * Every value the pickle builds is a node in one growing array; the stack
 * and the memo hold node ids, so an object fetched from the memo (the
 * Parameter class, the key "path") is the same node, and a dict filled by
 * SETITEMS after it was memoized is seen filled through every reference,
 * as in Python.  Dict items, list items and tuple items are cells chained
 * from their container.  Globals become nodes naming one of the few
 * classes OneFlow's state dict is made of; calling one (REDUCE, NEWOBJ)
 * makes an empty dict or a tensor node, BUILD gives a tensor its state.
 * Nothing else can be called, so a hostile pickle can only be refused.
 *
 * Once STOP is reached the value is checked against the one shape OneFlow
 * writes: {"protocol_version": 1, "data": {name: tensor{"path": dir}}}.
 */
#define _GNU_SOURCE
#include "oneflow_pickle.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dir_name.h"

/* Bounds beyond the header's: Python's own pickles of a state dict need a
 * stack of about 2 * 1000 (one SETITEMS batch) and a few marks. */
#define MAX_STACK (1u << 16)
#define MAX_MARKS 64u
/* A pickle of CK_PICKLE_MAX_ENTRIES tensors makes about 4 nodes each. */
#define MAX_NODES (8u * CK_PICKLE_MAX_ENTRIES + 4096u)
#define NONE_ID UINT32_MAX

enum kind {
    K_STR, K_INT, K_NONE, K_BOOL, K_TUPLE, K_LIST, K_DICT, K_GLOBAL, K_TENSOR,
};

/* The classes a global may name: everything else is refused. */
enum cls { C_ORDERED_DICT, C_TENSOR };

static const struct allowed {
    const char *module, *name;
    enum cls cls;
} allowed[] = {
    {"collections", "OrderedDict", C_ORDERED_DICT},
    {"oneflow.nn", "Parameter", C_TENSOR},
    {"oneflow", "Tensor", C_TENSOR},
    {"oneflow.framework.tensor", "Tensor", C_TENSOR},
    {"oneflow._oneflow_internal", "Tensor", C_TENSOR},
    {"oneflow._oneflow_internal.nn", "Parameter", C_TENSOR},
};

typedef struct node {
    uint8_t kind;
    uint8_t flag;           /* K_DICT: has had its _metadata set by BUILD */
    uint32_t a, b, n;       /* containers: first and last cell, count; tensor: its state
                             * dict (a, NONE_ID until BUILD); str: length (n) */
    uint32_t off;           /* the opcode that made it, for messages */
    uint64_t x;             /* str: offset in the buffer; int, bool: value; global: its
                             * enum cls; dict: 1 for an OrderedDict */
} node;

typedef struct cell {
    uint32_t key, val;      /* key: NONE_ID in lists and tuples */
    uint32_t next;
    uint32_t off;
} cell;

typedef struct machine {
    const uint8_t *buf;
    size_t len, pos;
    size_t op;              /* offset of the opcode being run */
    const char *file;
    ck_error *err;
    node *nodes;
    size_t n_nodes, cap_nodes;
    cell *cells;
    size_t n_cells, cap_cells;
    uint32_t *stack;
    size_t depth;
    size_t marks[MAX_MARKS];
    size_t n_marks;
    uint32_t *memo;
    size_t n_memo, cap_memo;
} machine;

static int fail_at(machine *vm, size_t off, const char *what)
{
    return ck_fail(vm->err, EINVAL, "%s: offset %zu: %s", vm->file, off, what);
}

static int fail(machine *vm, const char *what)
{
    return fail_at(vm, vm->op, what);
}

static int nomem(machine *vm)
{
    return ck_nomem(vm->err, vm->file);
}

/* Grow *v (elements of size) to hold one more than *n, at most max. */
static int grow(machine *vm, void **v, size_t *cap, size_t n, size_t size, size_t max)
{
    if (n < *cap)
        return 0;
    if (n >= max)
        return fail(vm, "too many objects for a OneFlow state dict");
    size_t c = *cap ? *cap * 2 : 64;
    if (c > max)
        c = max;
    void *p = reallocarray(*v, c, size);
    if (p == NULL)
        return nomem(vm);
    *v = p;
    *cap = c;
    return 0;
}

static long new_node(machine *vm, enum kind k, uint64_t x)
{
    if (grow(vm, (void **)&vm->nodes, &vm->cap_nodes, vm->n_nodes, sizeof(node), MAX_NODES) < 0)
        return -1;
    vm->nodes[vm->n_nodes] = (node){.kind = (uint8_t)k, .a = NONE_ID, .b = NONE_ID,
                                    .off = (uint32_t)vm->op, .x = x};
    return (long)vm->n_nodes++;
}

/* Chain a cell (key NONE_ID for a sequence) to container c. */
static int add_cell(machine *vm, uint32_t c, uint32_t key, uint32_t val)
{
    if (grow(vm, (void **)&vm->cells, &vm->cap_cells, vm->n_cells, sizeof(cell), MAX_NODES) < 0)
        return -1;
    node *d = &vm->nodes[c];
    if (d->n >= CK_PICKLE_MAX_ENTRIES)
        return fail(vm, "more entries than ckptfs reads in one container");
    uint32_t id = (uint32_t)vm->n_cells++;
    vm->cells[id] = (cell){.key = key, .val = val, .next = NONE_ID, .off = (uint32_t)vm->op};
    if (d->b == NONE_ID)
        d->a = id;
    else
        vm->cells[d->b].next = id;
    d->b = id;
    d->n++;
    return 0;
}

/* ---- the stack ----------------------------------------------------------- */

static int push(machine *vm, long id)
{
    if (id < 0)
        return -1;
    if (vm->depth == MAX_STACK)
        return fail(vm, "the pickle stack is deeper than ckptfs allows");
    vm->stack[vm->depth++] = (uint32_t)id;
    return 0;
}

/* The bottom of the current frame: the last mark, or the stack's bottom. */
static size_t frame(const machine *vm)
{
    return vm->n_marks ? vm->marks[vm->n_marks - 1] : 0;
}

static long pop(machine *vm)
{
    if (vm->depth == frame(vm))
        return fail(vm, "the stack is empty (or its top is a mark)");
    return vm->stack[--vm->depth];
}

static long top(machine *vm)
{
    if (vm->depth == frame(vm))
        return fail(vm, "the stack is empty (or its top is a mark)");
    return vm->stack[vm->depth - 1];
}

/* Drop the last mark: the items above it are at stack[*from ..]. */
static int pop_mark(machine *vm, size_t *from)
{
    if (vm->n_marks == 0)
        return fail(vm, "no mark on the stack");
    *from = vm->marks[--vm->n_marks];
    return 0;
}

static const node *nd(const machine *vm, uint32_t id)
{
    return &vm->nodes[id];
}

/* ---- reading operands ---------------------------------------------------- */

static int need(machine *vm, uint64_t n)
{
    if (n > vm->len - vm->pos)
        return fail(vm, "truncated: the operand runs past the end of the file");
    return 0;
}

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

static int operand(machine *vm, unsigned n, uint64_t *v)
{
    if (need(vm, n) < 0)
        return -1;
    *v = le(vm->buf + vm->pos, n);
    vm->pos += n;
    return 0;
}

/* A string of len bytes at pos, its length field already read. */
static int string(machine *vm, uint64_t len)
{
    if (need(vm, len) < 0)
        return -1;
    long id = new_node(vm, K_STR, vm->pos);
    if (id < 0)
        return -1;
    vm->nodes[id].n = (uint32_t)len; /* len <= CK_PICKLE_MAX_BYTES: checked by need() */
    vm->pos += len;
    return push(vm, id);
}

/* ---- globals, calls and state -------------------------------------------- */

static bool str_is(const machine *vm, uint32_t id, const char *s)
{
    const node *n = nd(vm, id);
    return n->kind == K_STR && n->n == strlen(s) && memcmp(vm->buf + n->x, s, n->n) == 0;
}

static int global(machine *vm, const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl)
{
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++) {
        const struct allowed *a = &allowed[i];
        if (strlen(a->module) == ml && memcmp(a->module, mod, ml) == 0 &&
            strlen(a->name) == nl && memcmp(a->name, name, nl) == 0)
            return push(vm, new_node(vm, K_GLOBAL, a->cls));
    }
    char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF], why[2 * CK_QUOTE_BUF + 64];
    snprintf(why, sizeof why, "global %s.%s is not one of the classes of a OneFlow state "
             "dict (refused, never imported)", ck_quote(q1, mod, ml), ck_quote(q2, name, nl));
    return fail(vm, why);
}

/* GLOBAL: "module\nname\n" as text (protocols 0 to 3). */
static int text_global(machine *vm)
{
    const uint8_t *p = vm->buf + vm->pos, *end = vm->buf + vm->len;
    const uint8_t *nl1 = memchr(p, '\n', (size_t)(end - p));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
    if (nl2 == NULL)
        return fail(vm, "truncated: GLOBAL's names are not two lines");
    vm->pos = (size_t)(nl2 + 1 - vm->buf);
    return global(vm, p, (size_t)(nl1 - p), nl1 + 1, (size_t)(nl2 - nl1 - 1));
}

static int stack_global(machine *vm)
{
    long name = pop(vm), mod = name < 0 ? -1 : pop(vm);
    if (mod < 0)
        return -1;
    const node *m = nd(vm, (uint32_t)mod), *n = nd(vm, (uint32_t)name);
    if (m->kind != K_STR || n->kind != K_STR)
        return fail(vm, "STACK_GLOBAL of names that are not strings");
    return global(vm, vm->buf + m->x, m->n, vm->buf + n->x, n->n);
}

/* REDUCE and NEWOBJ: an allowed class called with no arguments. */
static int call(machine *vm)
{
    long args = pop(vm), fn = args < 0 ? -1 : pop(vm);
    if (fn < 0)
        return -1;
    const node *f = nd(vm, (uint32_t)fn), *a = nd(vm, (uint32_t)args);
    if (f->kind != K_GLOBAL)
        return fail(vm, "a call of something that is not an allowed class");
    if (a->kind != K_TUPLE || a->n != 0)
        return fail(vm, "a class called with arguments (OneFlow's state dict has none)");
    long id = f->x == C_ORDERED_DICT ? new_node(vm, K_DICT, 1) : new_node(vm, K_TENSOR, 0);
    return push(vm, id);
}

/* BUILD: a tensor's {"path": ...} state, or an OrderedDict's _metadata. */
static int build(machine *vm)
{
    long state = pop(vm), obj = state < 0 ? -1 : top(vm);
    if (obj < 0)
        return -1;
    node *o = &vm->nodes[obj];
    const node *s = nd(vm, (uint32_t)state);
    if (o->kind == K_TENSOR) {
        if (o->a != NONE_ID)
            return fail(vm, "a tensor's state is set twice");
        if (s->kind != K_DICT)
            return fail(vm, "a tensor's state is not a dict");
        o->a = (uint32_t)state;
        return 0;
    }
    if (o->kind != K_DICT || o->x != 1 || o->flag)
        return fail(vm, "BUILD of something that is neither a tensor nor an OrderedDict");
    if (s->kind != K_DICT || s->n != 1 || !str_is(vm, vm->cells[s->a].key, "_metadata"))
        return fail(vm, "an OrderedDict's state other than its _metadata");
    o->flag = 1;
    return 0;
}

static int dict_of(machine *vm, long id)
{
    if (id >= 0 && nd(vm, (uint32_t)id)->kind != K_DICT)
        return fail(vm, "SETITEM(S) on something that is not a dict");
    return id < 0 ? -1 : 0;
}

static int setitem(machine *vm)
{
    long val = pop(vm), key = val < 0 ? -1 : pop(vm), d = key < 0 ? -1 : top(vm);
    if (dict_of(vm, d) < 0)
        return -1;
    return add_cell(vm, (uint32_t)d, (uint32_t)key, (uint32_t)val);
}

static int setitems(machine *vm)
{
    size_t from = 0;
    if (pop_mark(vm, &from) < 0)
        return -1;
    if ((vm->depth - from) % 2 != 0)
        return fail(vm, "SETITEMS of an odd number of items");
    if (from == frame(vm))
        return fail(vm, "SETITEMS without a dict below the items");
    long d = vm->stack[from - 1];
    if (dict_of(vm, d) < 0)
        return -1;
    for (size_t i = from; i < vm->depth; i += 2)
        if (add_cell(vm, (uint32_t)d, vm->stack[i], vm->stack[i + 1]) < 0)
            return -1;
    vm->depth = from;
    return 0;
}

/* APPEND(S): the items from stack[from] on go to the list just below. */
static int append_items(machine *vm, size_t from)
{
    if (from == frame(vm))
        return fail(vm, "APPEND(S) without a list below the items");
    uint32_t l = vm->stack[from - 1];
    if (nd(vm, l)->kind != K_LIST)
        return fail(vm, "APPEND(S) to something that is not a list");
    for (size_t i = from; i < vm->depth; i++)
        if (add_cell(vm, l, NONE_ID, vm->stack[i]) < 0)
            return -1;
    vm->depth = from;
    return 0;
}

static int append(machine *vm)
{
    if (vm->depth - frame(vm) < 2)
        return fail(vm, "APPEND without a list and an item");
    return append_items(vm, vm->depth - 1);
}

/* TUPLE, TUPLE1..3: the n items from stack[from] on become one tuple. */
static int tuple(machine *vm, size_t from)
{
    long t = new_node(vm, K_TUPLE, 0);
    if (t < 0)
        return -1;
    for (size_t i = from; i < vm->depth; i++)
        if (add_cell(vm, (uint32_t)t, NONE_ID, vm->stack[i]) < 0)
            return -1;
    vm->depth = from;
    return push(vm, t);
}

static int tuple_n(machine *vm, size_t n)
{
    if (vm->depth - frame(vm) < n)
        return fail(vm, "TUPLE of more items than the stack holds");
    return tuple(vm, vm->depth - n);
}

/* ---- the memo ------------------------------------------------------------ */

static int memo_put(machine *vm, uint64_t i)
{
    long v = top(vm);
    if (v < 0)
        return -1;
    if (i > vm->n_memo)
        return fail(vm, "a memo index beyond the next free one");
    if (i == vm->n_memo) {
        if (grow(vm, (void **)&vm->memo, &vm->cap_memo, vm->n_memo, sizeof *vm->memo,
                 MAX_NODES) < 0)
            return -1;
        vm->n_memo++;
    }
    vm->memo[i] = (uint32_t)v;
    return 0;
}

static int memo_get(machine *vm, uint64_t i)
{
    if (i >= vm->n_memo)
        return fail(vm, "a memo index that was never stored");
    return push(vm, vm->memo[i]);
}

/* ---- the opcodes --------------------------------------------------------- */

static int step(machine *vm, bool *stop)
{
    uint64_t v = 0;
    size_t from = 0;
    vm->op = vm->pos;
    uint8_t op = vm->buf[vm->pos++];
    switch (op) {
    case 0x80: /* PROTO */
        if (vm->op != 0)
            return fail(vm, "PROTO other than at the start");
        if (operand(vm, 1, &v) < 0)
            return -1;
        return v < 2 || v > 5 ? fail(vm, "a pickle protocol other than 2 to 5") : 0;
    case 0x95: /* FRAME: a hint for buffered readers; the bytes follow anyway */
        if (operand(vm, 8, &v) < 0)
            return -1;
        return v > vm->len - vm->pos ? fail(vm, "a FRAME longer than the rest of the file") : 0;
    case '.': /* STOP */
        *stop = true;
        return 0;
    case '(': /* MARK */
        if (vm->n_marks == MAX_MARKS)
            return fail(vm, "marks nested deeper than ckptfs allows");
        vm->marks[vm->n_marks++] = vm->depth;
        return 0;
    case '}': return push(vm, new_node(vm, K_DICT, 0));
    case ']': return push(vm, new_node(vm, K_LIST, 0));
    case ')': return push(vm, new_node(vm, K_TUPLE, 0));
    case 'N': return push(vm, new_node(vm, K_NONE, 0));
    case 0x88: return push(vm, new_node(vm, K_BOOL, 1)); /* NEWTRUE */
    case 0x89: return push(vm, new_node(vm, K_BOOL, 0)); /* NEWFALSE */
    case 'K': return operand(vm, 1, &v) < 0 ? -1 : push(vm, new_node(vm, K_INT, v));
    case 'M': return operand(vm, 2, &v) < 0 ? -1 : push(vm, new_node(vm, K_INT, v));
    case 'J': /* BININT: signed */
        if (operand(vm, 4, &v) < 0)
            return -1;
        return push(vm, new_node(vm, K_INT, (uint64_t)(int64_t)(int32_t)(uint32_t)v));
    case 0x8c: return operand(vm, 1, &v) < 0 ? -1 : string(vm, v); /* SHORT_BINUNICODE */
    case 'X': return operand(vm, 4, &v) < 0 ? -1 : string(vm, v);  /* BINUNICODE */
    case 0x8d: return operand(vm, 8, &v) < 0 ? -1 : string(vm, v); /* BINUNICODE8 */
    case 'c': return text_global(vm);
    case 0x93: return stack_global(vm);
    case 'R': case 0x81: return call(vm); /* REDUCE, NEWOBJ */
    case 'b': return build(vm);
    case 's': return setitem(vm);
    case 'u': return setitems(vm);
    case 'a': return append(vm);
    case 'e': return pop_mark(vm, &from) < 0 ? -1 : append_items(vm, from);
    case 't': return pop_mark(vm, &from) < 0 ? -1 : tuple(vm, from);
    case 0x85: return tuple_n(vm, 1);
    case 0x86: return tuple_n(vm, 2);
    case 0x87: return tuple_n(vm, 3);
    case 'q': return operand(vm, 1, &v) < 0 ? -1 : memo_put(vm, v); /* BINPUT */
    case 'r': return operand(vm, 4, &v) < 0 ? -1 : memo_put(vm, v); /* LONG_BINPUT */
    case 0x94: return memo_put(vm, vm->n_memo);                       /* MEMOIZE */
    case 'h': return operand(vm, 1, &v) < 0 ? -1 : memo_get(vm, v); /* BINGET */
    case 'j': return operand(vm, 4, &v) < 0 ? -1 : memo_get(vm, v); /* LONG_BINGET */
    }
    char why[80];
    snprintf(why, sizeof why, "opcode 0x%02x is not one OneFlow's state dict is pickled with",
             op);
    return fail(vm, why);
}

/* ---- the result ---------------------------------------------------------- */

static char *copy_str(machine *vm, const node *n)
{
    char *s = malloc((size_t)n->n + 1);
    if (s == NULL) {
        nomem(vm);
        return NULL;
    }
    memcpy(s, vm->buf + n->x, n->n);
    s[n->n] = '\0';
    return s;
}

/* A tensor's directory: one name, no '/', not "." or "..". */
static bool one_component(const uint8_t *s, size_t n)
{
    if (n == 0 || n > 255 || memchr(s, '/', n) != NULL || (n == 1 && s[0] == '.') ||
        (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    return ck_utf8_valid(s, n);
}

/* The state {"path": dir} of the tensor node t (the entry's cell c). */
static long tensor_path(machine *vm, const cell *c)
{
    const node *t = nd(vm, c->val);
    if (t->kind != K_TENSOR)
        return fail_at(vm, nd(vm, c->val)->off, "a state dict value that is not a tensor");
    if (t->a == NONE_ID)
        return fail_at(vm, t->off, "a tensor without a state");
    const node *s = nd(vm, t->a);
    if (s->n != 1 || !str_is(vm, vm->cells[s->a].key, "path"))
        return fail_at(vm, s->off, "a tensor's state is not {\"path\": <directory>}");
    const node *p = nd(vm, vm->cells[s->a].val);
    if (p->kind != K_STR || !one_component(vm->buf + p->x, p->n))
        return fail_at(vm, p->off, "a tensor's path is not one directory name");
    return vm->cells[s->a].val;
}

/* Entry i's name (which 0) or path (which 1), by entry index. */
typedef struct by_str {
    const ck_pickle_names *names;
    int which;
} by_str;

static const char *field(const by_str *k, uint32_t i)
{
    return k->which == 0 ? k->names->v[i].name : k->names->v[i].path;
}

static int cmp_field(const void *a, const void *b, void *ctx)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    int c = strcmp(field(ctx, x), field(ctx, y));
    return c != 0 ? c : (x > y) - (x < y);
}

/* No name and no path twice: the second one is named, at its SETITEM(S)
 * (offs[i]: entry i's). */
static int no_duplicates(machine *vm, const ck_pickle_names *out, const uint32_t *offs)
{
    uint32_t *ix = malloc((out->n ? out->n : 1) * sizeof *ix);
    if (ix == NULL)
        return nomem(vm);
    int rc = 0;
    for (int which = 0; rc == 0 && which < 2; which++) {
        by_str k = {.names = out, .which = which};
        for (size_t i = 0; i < out->n; i++)
            ix[i] = (uint32_t)i;
        qsort_r(ix, out->n, sizeof *ix, cmp_field, &k);
        for (size_t i = 1; rc == 0 && i < out->n; i++) {
            const char *s = field(&k, ix[i]);
            char q[CK_QUOTE_BUF], why[CK_QUOTE_BUF + 64];
            if (strcmp(field(&k, ix[i - 1]), s) != 0)
                continue;
            snprintf(why, sizeof why, "the %s '%s' is given twice",
                     which == 0 ? "name" : "tensor directory", ck_quote(q, s, strlen(s)));
            rc = fail_at(vm, offs[ix[i]], why);
        }
    }
    free(ix);
    return rc;
}

static int entries(machine *vm, const node *data, ck_pickle_names *out)
{
    uint32_t *offs = malloc((data->n ? data->n : 1) * sizeof *offs);
    if (offs == NULL || (out->v = calloc(data->n ? data->n : 1, sizeof *out->v)) == NULL) {
        free(offs);
        return nomem(vm);
    }
    int rc = 0;
    for (uint32_t c = data->a; rc == 0 && c != NONE_ID; c = vm->cells[c].next) {
        const cell *e = &vm->cells[c];
        const node *k = nd(vm, e->key);
        long p = -1;
        if (k->kind != K_STR || !ck_utf8_valid(vm->buf + k->x, k->n)) {
            rc = fail_at(vm, k->off, "a state dict key that is not a UTF-8 string without NUL");
            break;
        }
        if ((p = tensor_path(vm, e)) < 0) {
            rc = -1;
            break;
        }
        offs[out->n] = e->off;
        ck_pickle_entry *en = &out->v[out->n++];
        if ((en->name = copy_str(vm, k)) == NULL ||
            (en->path = copy_str(vm, nd(vm, (uint32_t)p))) == NULL)
            rc = -1;
    }
    if (rc == 0)
        rc = no_duplicates(vm, out, offs);
    free(offs);
    return rc;
}

/* OneFlow 1.0 adds its magic key, "oneflow" (in some releases "__oneflow__"),
 * mapped to None, beside the two OneFlow 0.6 to 0.9 write. */
static bool magic(const machine *vm, const cell *e)
{
    return (str_is(vm, e->key, "oneflow") || str_is(vm, e->key, "__oneflow__")) &&
           nd(vm, e->val)->kind == K_NONE;
}

static int result(machine *vm, ck_pickle_names *out)
{
    static const char shape[] = "not OneFlow's {\"protocol_version\": 1, \"data\": ...} dict";
    if (vm->n_marks != 0 || vm->depth != 1)
        return fail(vm, "STOP with other than one object on the stack");
    if (vm->pos != vm->len)
        return fail_at(vm, vm->pos, "bytes after STOP");
    const node *r = nd(vm, vm->stack[0]);
    const node *version = NULL, *data = NULL;
    unsigned magics = 0;
    if (r->kind != K_DICT || r->n < 2 || r->n > 3)
        return fail_at(vm, r->off, shape);
    for (uint32_t c = r->a; c != NONE_ID; c = vm->cells[c].next) {
        const cell *e = &vm->cells[c];
        if (str_is(vm, e->key, "protocol_version") && version == NULL)
            version = nd(vm, e->val);
        else if (str_is(vm, e->key, "data") && data == NULL)
            data = nd(vm, e->val);
        else if (magic(vm, e))
            magics++;
    }
    if (version == NULL || data == NULL || 2 + magics != r->n)
        return fail_at(vm, r->off, shape);
    if (version->kind != K_INT || version->x != 1)
        return fail_at(vm, version->off, "protocol_version is not 1");
    if (data->kind != K_DICT)
        return fail_at(vm, data->off, "the data is not a state dict");
    return entries(vm, data, out);
}

int ck_pickle_names_parse(const void *buf, size_t len, const char *file, ck_pickle_names *out,
                          ck_error *err)
{
    *out = (ck_pickle_names){0};
    if (len > CK_PICKLE_MAX_BYTES)
        return ck_fail(err, EFBIG, "%s: %zu bytes, more than a pickled_data ckptfs reads "
                       "(%u)", file, len, CK_PICKLE_MAX_BYTES);
    machine vm = {.buf = buf, .len = len, .file = file, .err = err};
    int rc = 0;
    bool stop = false;
    if ((vm.stack = malloc(MAX_STACK * sizeof *vm.stack)) == NULL)
        rc = nomem(&vm);
    while (rc == 0 && !stop) {
        if (vm.pos == vm.len)
            rc = fail_at(&vm, vm.pos, "truncated: no STOP");
        else
            rc = step(&vm, &stop);
    }
    if (rc == 0)
        rc = result(&vm, out);
    free(vm.stack);
    free(vm.nodes);
    free(vm.cells);
    free(vm.memo);
    return rc;
}

void ck_pickle_names_free(ck_pickle_names *names)
{
    for (size_t i = 0; i < names->n; i++) {
        free(names->v[i].name);
        free(names->v[i].path);
    }
    free(names->v);
    *names = (ck_pickle_names){0};
}
