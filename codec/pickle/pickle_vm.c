/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pickle_vm: the symbolic pickle machine (pickle_vm.h).
 *
 * Every value the pickle builds is a node in one growing array; the stack
 * and the memo hold node ids, so an object fetched from the memo (a class,
 * a storage's key) is the same node, and a dict filled by SETITEMS after
 * it was memoized is seen filled through every reference, as in Python.
 * Dict, list, set and tuple items are cells chained from their container.
 * Globals become nodes naming an entry of the caller's allow-list;
 * calling one (REDUCE, NEWOBJ) makes an empty dict (an ordered dict class)
 * or a call node, and BUILD gives a call node its state.  Nothing is ever
 * called, so a hostile pickle can only be refused.
 */
#define _GNU_SOURCE
#include "pickle_vm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dir_name.h"

/* Python's own pickles of a state dict need a stack of about 2 * 1000
 * (one SETITEMS batch) and a few marks; nesting is bounded by the marks. */
#define MAX_STACK (1u << 16)
#define MAX_MARKS 64u

typedef struct machine {
    ck_pickle *p;               /* buf, len, file; nodes and cells grow in it */
    const ck_pk_rules *r;
    size_t pos;
    size_t op;                  /* offset of the opcode being run */
    ck_error *err;
    size_t cap_nodes, cap_cells;
    uint32_t *stack;
    size_t depth;
    size_t marks[MAX_MARKS];
    size_t n_marks;
    uint32_t *memo;
    size_t n_memo, cap_memo;
} machine;

int ck_pk_fail(const ck_pickle *p, size_t off, ck_error *err, const char *what)
{
    return ck_fail(err, EINVAL, "%s: offset %zu: %s", p->file, off, what);
}

static int fail(machine *vm, const char *what)
{
    return ck_pk_fail(vm->p, vm->op, vm->err, what);
}

static int nomem(machine *vm)
{
    return ck_nomem(vm->err, vm->p->file);
}

/* Grow *v (elements of size) to hold one more than n, at most max. */
static int grow(machine *vm, void **v, size_t *cap, size_t n, size_t size, size_t max)
{
    if (n < *cap)
        return 0;
    if (n >= max) {
        char why[160];
        snprintf(why, sizeof why, "too many objects for %s", vm->r->what);
        return fail(vm, why);
    }
    size_t c = *cap ? *cap * 2 : 64;
    if (c > max)
        c = max;
    void *q = reallocarray(*v, c, size);
    if (q == NULL)
        return nomem(vm);
    *v = q;
    *cap = c;
    return 0;
}

static long new_node(machine *vm, ck_pk_kind k, uint64_t x)
{
    ck_pickle *p = vm->p;
    if (grow(vm, (void **)&p->nodes, &vm->cap_nodes, p->n_nodes, sizeof *p->nodes,
             vm->r->max_nodes) < 0)
        return -1;
    p->nodes[p->n_nodes] = (ck_pk_node){.kind = (uint8_t)k, .a = CK_PK_NONE_ID,
                                        .b = CK_PK_NONE_ID, .g = CK_PK_NONE_ID,
                                        .off = (uint32_t)vm->op, .x = x};
    return (long)p->n_nodes++;
}

/* Chain a cell (key CK_PK_NONE_ID for a sequence) to container c. */
static int add_cell(machine *vm, uint32_t c, uint32_t key, uint32_t val)
{
    ck_pickle *p = vm->p;
    if (grow(vm, (void **)&p->cells, &vm->cap_cells, p->n_cells, sizeof *p->cells,
             vm->r->max_nodes) < 0)
        return -1;
    ck_pk_node *d = &p->nodes[c];
    if (d->n >= vm->r->max_entries)
        return fail(vm, "more entries than ckptfs reads in one container");
    uint32_t id = (uint32_t)p->n_cells++;
    p->cells[id] = (ck_pk_cell){.key = key, .val = val, .next = CK_PK_NONE_ID,
                                .off = (uint32_t)vm->op};
    if (d->b == CK_PK_NONE_ID)
        d->a = id;
    else
        p->cells[d->b].next = id;
    d->b = id;
    d->n++;
    return 0;
}

static const ck_pk_node *nd(const machine *vm, uint32_t id)
{
    return &vm->p->nodes[id];
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

/* ---- reading operands ---------------------------------------------------- */

static int need(machine *vm, uint64_t n)
{
    if (n > vm->p->len - vm->pos)
        return fail(vm, "truncated: the operand runs past the end of the file");
    return 0;
}

static uint64_t le(const uint8_t *b, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | b[i];
    return v;
}

static int operand(machine *vm, unsigned n, uint64_t *v)
{
    if (need(vm, n) < 0)
        return -1;
    *v = le(vm->p->buf + vm->pos, n);
    vm->pos += n;
    return 0;
}

/* A string of len bytes at pos, its length field already read. */
static int string(machine *vm, uint64_t len)
{
    if (need(vm, len) < 0)
        return -1;
    long id = new_node(vm, CK_PK_STR, vm->pos);
    if (id < 0)
        return -1;
    vm->p->nodes[id].n = (uint32_t)len; /* len < the pickle's size: checked by need() */
    vm->pos += len;
    return push(vm, id);
}

/* LONG1: a two's complement integer of n <= 8 bytes (Python writes it for
 * ints past 32 bits: a numel of 2^31 and more). */
static int long1(machine *vm)
{
    uint64_t n = 0, v = 0;
    if (operand(vm, 1, &n) < 0)
        return -1;
    if (n > 8)
        return fail(vm, "an integer of more than 64 bits");
    if (operand(vm, (unsigned)n, &v) < 0)
        return -1;
    if (n > 0 && n < 8 && (v >> (8 * n - 1) & 1))
        v |= ~(uint64_t)0 << (8 * n); /* sign-extended */
    return push(vm, new_node(vm, CK_PK_INT, v));
}

/* BINFLOAT: a big-endian double. */
static int binfloat(machine *vm)
{
    if (need(vm, 8) < 0)
        return -1;
    uint64_t bits = 0;
    for (unsigned i = 0; i < 8; i++)
        bits = bits << 8 | vm->p->buf[vm->pos + i];
    vm->pos += 8;
    return push(vm, new_node(vm, CK_PK_FLOAT, bits));
}

/* ---- globals, calls and state -------------------------------------------- */

bool ck_pk_str_is(const ck_pickle *p, uint32_t id, const char *s)
{
    const ck_pk_node *n = &p->nodes[id];
    return n->kind == CK_PK_STR && n->n == strlen(s) && memcmp(p->buf + n->x, s, n->n) == 0;
}

static int global(machine *vm, const uint8_t *mod, size_t ml, const uint8_t *name, size_t nl)
{
    for (size_t i = 0; i < vm->r->n_globals; i++) {
        const ck_pk_global *g = &vm->r->globals[i];
        if (strlen(g->module) == ml && memcmp(g->module, mod, ml) == 0 &&
            strlen(g->name) == nl && memcmp(g->name, name, nl) == 0)
            return push(vm, new_node(vm, CK_PK_GLOBAL, i));
    }
    char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF], why[2 * CK_QUOTE_BUF + 160];
    snprintf(why, sizeof why, "global %s.%s is not one of the classes of %s (refused, never "
             "imported)", ck_quote(q1, mod, ml), ck_quote(q2, name, nl), vm->r->what);
    return fail(vm, why);
}

/* GLOBAL: "module\nname\n" as text (protocols 0 to 3). */
static int text_global(machine *vm)
{
    const uint8_t *b = vm->p->buf + vm->pos, *end = vm->p->buf + vm->p->len;
    const uint8_t *nl1 = memchr(b, '\n', (size_t)(end - b));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
    if (nl2 == NULL)
        return fail(vm, "truncated: GLOBAL's names are not two lines");
    vm->pos = (size_t)(nl2 + 1 - vm->p->buf);
    return global(vm, b, (size_t)(nl1 - b), nl1 + 1, (size_t)(nl2 - nl1 - 1));
}

static int stack_global(machine *vm)
{
    long name = pop(vm), mod = name < 0 ? -1 : pop(vm);
    if (mod < 0)
        return -1;
    const ck_pk_node *m = nd(vm, (uint32_t)mod), *n = nd(vm, (uint32_t)name);
    if (m->kind != CK_PK_STR || n->kind != CK_PK_STR)
        return fail(vm, "STACK_GLOBAL of names that are not strings");
    return global(vm, vm->p->buf + m->x, m->n, vm->p->buf + n->x, n->n);
}

/* REDUCE and NEWOBJ: an allowed global called with a tuple of arguments,
 * recorded, never run; an ordered dict class makes an empty dict. */
static int call(machine *vm, bool newobj)
{
    long args = pop(vm), fn = args < 0 ? -1 : pop(vm);
    if (fn < 0)
        return -1;
    const ck_pk_node *f = nd(vm, (uint32_t)fn), *a = nd(vm, (uint32_t)args);
    if (f->kind != CK_PK_GLOBAL)
        return fail(vm, "a call of something that is not an allowed global");
    if (a->kind != CK_PK_TUPLE)
        return fail(vm, "a call whose arguments are not a tuple");
    const ck_pk_global *g = &vm->r->globals[f->x];
    if (g->makes_dict) {
        if (a->n != 0)
            return fail(vm, "a class called with arguments (a state dict's OrderedDict "
                        "has none)");
        long id = new_node(vm, CK_PK_DICT, 0);
        if (id >= 0) {
            vm->p->nodes[id].flag = CK_PK_ORDERED;
            vm->p->nodes[id].g = (uint32_t)fn;
        }
        return push(vm, id);
    }
    long id = new_node(vm, CK_PK_CALL, (uint64_t)g->id);
    if (id >= 0) {
        ck_pk_node *c = &vm->p->nodes[id];
        c->a = (uint32_t)args;
        c->g = (uint32_t)fn;
        c->flag = newobj ? CK_PK_NEWOBJ : 0;
    }
    return push(vm, id);
}

/* BUILD: a call's state, or an OrderedDict's _metadata. */
static int build(machine *vm)
{
    long state = pop(vm), obj = state < 0 ? -1 : top(vm);
    if (obj < 0)
        return -1;
    ck_pk_node *o = &vm->p->nodes[obj];
    const ck_pk_node *s = nd(vm, (uint32_t)state);
    if (o->kind == CK_PK_CALL) {
        if (o->b != CK_PK_NONE_ID)
            return fail(vm, "an object's state is set twice");
        o->b = (uint32_t)state;
        return 0;
    }
    if (o->kind != CK_PK_DICT || !(o->flag & CK_PK_ORDERED) || (o->flag & CK_PK_BUILT))
        return fail(vm, "BUILD of something that is neither an object nor an OrderedDict");
    if (s->kind != CK_PK_DICT || s->n != 1 ||
        !ck_pk_str_is(vm->p, vm->p->cells[s->a].key, "_metadata"))
        return fail(vm, "an OrderedDict's state other than its _metadata");
    o->flag |= CK_PK_BUILT;
    o->x = (uint64_t)state;
    return 0;
}

static int dict_of(machine *vm, long id)
{
    if (id >= 0 && nd(vm, (uint32_t)id)->kind != CK_PK_DICT)
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

/* APPEND(S), ADDITEMS: the items from stack[from] on go to the list (or
 * set) just below. */
static int append_items(machine *vm, size_t from, ck_pk_kind kind)
{
    if (from == frame(vm))
        return fail(vm, "APPEND(S) without a list below the items");
    uint32_t l = vm->stack[from - 1];
    if (nd(vm, l)->kind != kind)
        return fail(vm, kind == CK_PK_LIST ? "APPEND(S) to something that is not a list"
                                           : "ADDITEMS to something that is not a set");
    for (size_t i = from; i < vm->depth; i++)
        if (add_cell(vm, l, CK_PK_NONE_ID, vm->stack[i]) < 0)
            return -1;
    vm->depth = from;
    return 0;
}

static int append(machine *vm)
{
    if (vm->depth - frame(vm) < 2)
        return fail(vm, "APPEND without a list and an item");
    return append_items(vm, vm->depth - 1, CK_PK_LIST);
}

/* TUPLE, TUPLE1..3: the items from stack[from] on become one tuple. */
static int tuple(machine *vm, size_t from)
{
    long t = new_node(vm, CK_PK_TUPLE, 0);
    if (t < 0)
        return -1;
    for (size_t i = from; i < vm->depth; i++)
        if (add_cell(vm, (uint32_t)t, CK_PK_NONE_ID, vm->stack[i]) < 0)
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

static int persid(machine *vm)
{
    if (!vm->r->persid)
        return fail(vm, "a persistent id, which no state dict of this kind holds");
    long pid = pop(vm), id = pid < 0 ? -1 : new_node(vm, CK_PK_PERSID, 0);
    if (id >= 0)
        vm->p->nodes[id].a = (uint32_t)pid;
    return push(vm, id);
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
                 vm->r->max_nodes) < 0)
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

/* The opcodes that make no new value from operands: containers, marks,
 * constants, and what combines the stack. */
static int step_stack(machine *vm, uint8_t op, bool *known)
{
    size_t from = 0;
    *known = true;
    switch (op) {
    case '(': /* MARK */
        if (vm->n_marks == MAX_MARKS)
            return fail(vm, "marks nested deeper than ckptfs allows");
        vm->marks[vm->n_marks++] = vm->depth;
        return 0;
    case '}': return push(vm, new_node(vm, CK_PK_DICT, 0));
    case ']': return push(vm, new_node(vm, CK_PK_LIST, 0));
    case ')': return push(vm, new_node(vm, CK_PK_TUPLE, 0));
    case 0x8f: return push(vm, new_node(vm, CK_PK_SET, 0)); /* EMPTY_SET */
    case 'N': return push(vm, new_node(vm, CK_PK_NONE, 0));
    case 0x88: return push(vm, new_node(vm, CK_PK_BOOL, 1)); /* NEWTRUE */
    case 0x89: return push(vm, new_node(vm, CK_PK_BOOL, 0)); /* NEWFALSE */
    case 'c': return text_global(vm);
    case 0x93: return stack_global(vm);
    case 'R': return call(vm, false); /* REDUCE */
    case 0x81: return call(vm, true);  /* NEWOBJ */
    case 'b': return build(vm);
    case 'Q': return persid(vm); /* BINPERSID */
    case 's': return setitem(vm);
    case 'u': return setitems(vm);
    case 'a': return append(vm);
    case 'e': return pop_mark(vm, &from) < 0 ? -1 : append_items(vm, from, CK_PK_LIST);
    case 0x90: return pop_mark(vm, &from) < 0 ? -1 : append_items(vm, from, CK_PK_SET);
    case 't': return pop_mark(vm, &from) < 0 ? -1 : tuple(vm, from);
    case 0x85: return tuple_n(vm, 1);
    case 0x86: return tuple_n(vm, 2);
    case 0x87: return tuple_n(vm, 3);
    case 0x94: return memo_put(vm, vm->n_memo); /* MEMOIZE */
    }
    *known = false;
    return 0;
}

static int step(machine *vm, bool *stop)
{
    uint64_t v = 0;
    bool known = false;
    vm->op = vm->pos;
    uint8_t op = vm->p->buf[vm->pos++];
    int rc = step_stack(vm, op, &known);
    if (known)
        return rc;
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
        return v > vm->p->len - vm->pos ? fail(vm, "a FRAME longer than the rest of the file")
                                        : 0;
    case '.': /* STOP */
        *stop = true;
        return 0;
    case 'K': return operand(vm, 1, &v) < 0 ? -1 : push(vm, new_node(vm, CK_PK_INT, v));
    case 'M': return operand(vm, 2, &v) < 0 ? -1 : push(vm, new_node(vm, CK_PK_INT, v));
    case 'J': /* BININT: signed */
        if (operand(vm, 4, &v) < 0)
            return -1;
        return push(vm, new_node(vm, CK_PK_INT, (uint64_t)(int64_t)(int32_t)(uint32_t)v));
    case 0x8a: return long1(vm);
    case 'G': return binfloat(vm);
    case 'U': /* SHORT_BINSTRING */
    case 0x8c: return operand(vm, 1, &v) < 0 ? -1 : string(vm, v); /* SHORT_BINUNICODE */
    case 'X': return operand(vm, 4, &v) < 0 ? -1 : string(vm, v);  /* BINUNICODE */
    case 0x8d: return operand(vm, 8, &v) < 0 ? -1 : string(vm, v); /* BINUNICODE8 */
    case 'q': return operand(vm, 1, &v) < 0 ? -1 : memo_put(vm, v); /* BINPUT */
    case 'r': return operand(vm, 4, &v) < 0 ? -1 : memo_put(vm, v); /* LONG_BINPUT */
    case 'h': return operand(vm, 1, &v) < 0 ? -1 : memo_get(vm, v); /* BINGET */
    case 'j': return operand(vm, 4, &v) < 0 ? -1 : memo_get(vm, v); /* LONG_BINGET */
    }
    char why[200];
    snprintf(why, sizeof why, "opcode 0x%02x is not one %s is pickled with", op, vm->r->what);
    return fail(vm, why);
}

int ck_pickle_run(const void *buf, size_t len, const char *file, const ck_pk_rules *r,
                  ck_pickle *out, ck_error *err)
{
    *out = (ck_pickle){.buf = buf, .len = len, .file = file, .root = CK_PK_NONE_ID};
    machine vm = {.p = out, .r = r, .err = err};
    int rc = 0;
    bool stop = false;
    if ((vm.stack = malloc(MAX_STACK * sizeof *vm.stack)) == NULL)
        rc = nomem(&vm);
    while (rc == 0 && !stop) {
        if (vm.pos == len)
            rc = ck_pk_fail(out, vm.pos, err, "truncated: no STOP");
        else
            rc = step(&vm, &stop);
    }
    if (rc == 0 && (vm.n_marks != 0 || vm.depth != 1))
        rc = fail(&vm, "STOP with other than one object on the stack");
    if (rc == 0 && vm.pos != len)
        rc = ck_pk_fail(out, vm.pos, err, "bytes after STOP");
    if (rc == 0)
        out->root = vm.stack[0];
    free(vm.stack);
    free(vm.memo);
    return rc;
}

void ck_pickle_free(ck_pickle *p)
{
    free(p->nodes);
    free(p->cells);
    p->nodes = NULL;
    p->cells = NULL;
    p->n_nodes = p->n_cells = 0;
}

uint32_t ck_pk_item(const ck_pickle *p, uint32_t id, uint32_t i)
{
    uint32_t c = p->nodes[id].a;
    while (c != CK_PK_NONE_ID && i-- > 0)
        c = p->cells[c].next;
    return c == CK_PK_NONE_ID ? CK_PK_NONE_ID : p->cells[c].val;
}

char *ck_pk_strdup(const ck_pickle *p, uint32_t id)
{
    const ck_pk_node *n = &p->nodes[id];
    char *s = malloc((size_t)n->n + 1);
    if (s != NULL) {
        memcpy(s, p->buf + n->x, n->n);
        s[n->n] = '\0';
    }
    return s;
}
