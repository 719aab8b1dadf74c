/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_repickle: data.pkl pickled again (pt_repickle.h).
 *
 * Two walks of the original value, both in the reader's order (pt_pickle.c,
 * visit): the first names every leaf's parent and every dict, and decides
 * where each tensor of the new file goes; the second writes the pickle.
 * The opcodes are those Python's pickler writes at protocol 2 for these
 * values (PROTO, EMPTY_DICT/LIST/TUPLE, MARK, SETITEMS and APPENDS in
 * batches of 1000, TUPLE1-3, BININT1/BININT2/BININT/LONG1, BINFLOAT,
 * BINUNICODE, GLOBAL, REDUCE/NEWOBJ, BUILD, BINPERSID, NEWTRUE/NEWFALSE,
 * NONE).  A value the tree does not show is written as it was, and one
 * reached more than once (the original's memo: BINGET of one tuple, say)
 * is written once, put in the memo (BINPUT/LONG_BINPUT) and fetched
 * again (BINGET/LONG_BINGET) wherever else it is used, as Python's pickler
 * does: the sharing is kept, and the new pickle grows with the original's
 * nodes, not with the paths through them (a tuple of one tuple twice, 40
 * deep, is 2^40 paths).  The tree's containers and tensors are written
 * where the tree has them (the reader's walk bounds their visits).
 */
#define _GNU_SOURCE
#include "pt_repickle.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/arena.h"
#include "../core/dir_name.h"
#include "../core/name_map.h"
#include "pt_pickle.h"

#define NONE CK_PT_NONE
#define BATCH 1000              /* Python's pickler's SETITEMS/APPENDS batch */
/* Values the tree does not show are written as they were, to this depth
 * (the reader never walked into them: a pickle may nest them deeply). */
#define MAX_PLAIN_DEPTH 256

/* A leaf of the original, as the first walk found it. */
typedef struct leaf {
    const char *parent;         /* its container's name (arena) */
    size_t parent_len;
    bool keyed;                 /* its container is a dict and its key a string */
    bool in_seq;                /* its container is a list or tuple: its name is its place */
    const char *old_key;        /* its key as text (arena) */
    size_t old_key_len;
    uint32_t node;              /* its value: a rebuild call, or a number */
    uint32_t out;               /* the new file's tensor in its place, or NONE */
    const char *key;            /* that tensor's key there, when renamed (else NULL) */
    size_t key_len;
} leaf;

typedef struct rp {
    ck_pt_repickle *r;
    const ck_pickle *p;
    ck_error *err;
    ck_arena arena;
    leaf *leaves;
    uint32_t next_leaf;         /* the walks' leaf counter */
    ck_name_map names;          /* every dict's name -> 0; a value's not shown -> 1 */
    ck_name_map inserts;        /* a dict's name -> the first tensor to add to it */
    uint32_t *next_insert;      /* per tensor: the next one for the same dict */
    const char **insert_key;    /* per tensor added: its key in that dict */
    size_t *insert_key_len;
    bool *placed;               /* per tensor: in an original leaf's place */
    uint32_t *key_of_record;    /* an original record's new storage, or NONE */
    uint32_t *refs;             /* per node of the original: how many references it has */
    uint32_t *memo;             /* per node: 1 + its memo index once written, or 0 */
    uint32_t n_memo;
    char *path;                 /* the current container's name */
    size_t path_len, path_cap;
    ck_wbuf *b;
} rp;

enum { NAME_DICT = 0, NAME_VALUE = 1 };

static int nomem(rp *x)
{
    return ck_nomem(x->err, x->r->path);
}

static int refuse(rp *x, const char *name, size_t len, const char *why)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(x->err, ENOTSUP, "%s: tensor '%s': %s", x->r->path, ck_quote(q, name, len),
                   why);
}

static const ck_pk_node *nd(const rp *x, uint32_t id)
{
    return ck_pk_at(x->p, id);
}

/* ---- names --------------------------------------------------------------- */

/* The key of a container's cell i (NONE key: its index) as text. */
static const char *key_text(const rp *x, const ck_pk_cell *c, uint64_t i, char num[24],
                            size_t *n)
{
    if (c->key == NONE) {
        *n = (size_t)snprintf(num, 24, "%" PRIu64, i);
        return num;
    }
    const ck_pk_node *k = nd(x, c->key);
    if (k->kind == CK_PK_STR) {
        *n = k->n;
        return (const char *)x->p->buf + k->x;
    }
    *n = (size_t)snprintf(num, 24, "%" PRId64, (int64_t)k->x); /* an int: the reader's check */
    return num;
}

static int path_push(rp *x, const char *part, size_t n, size_t *mark)
{
    *mark = x->path_len;
    size_t need = x->path_len + 1 + n + 1;
    if (need > x->path_cap) {
        size_t cap = x->path_cap ? 2 * x->path_cap : 256;
        while (cap < need)
            cap *= 2;
        char *p = realloc(x->path, cap);
        if (p == NULL)
            return nomem(x);
        x->path = p;
        x->path_cap = cap;
    }
    if (x->path_len > 0)
        x->path[x->path_len++] = '.';
    memcpy(x->path + x->path_len, part, n);
    x->path_len += n;
    return 0;
}

static const char *path_copy(rp *x)
{
    return ck_arena_strndup(&x->arena, x->path ? x->path : "", x->path_len);
}

static int name_put(rp *x, const char *name, size_t len, uint32_t what)
{
    const char *copy = ck_arena_strndup(&x->arena, name, len);
    if (copy == NULL || ck_name_map_put(&x->names, copy, len, what) < 0)
        return nomem(x);
    return 0;
}

/* ---- the first walk: who is where ---------------------------------------- */

static int survey(rp *x, uint32_t id, unsigned depth);

static int survey_items(rp *x, const ck_pk_node *c, unsigned depth)
{
    bool dict = c->kind == CK_PK_DICT;
    if (dict && name_put(x, x->path ? x->path : "", x->path_len, NAME_DICT) < 0)
        return -1;
    const char *parent = path_copy(x);
    if (parent == NULL)
        return nomem(x);
    uint64_t i = 0;
    for (uint32_t cell = c->a; cell != NONE; cell = x->p->cells[cell].next, i++) {
        const ck_pk_cell *e = &x->p->cells[cell];
        char num[24];
        size_t n = 0, mark = 0;
        const char *part = key_text(x, e, i, num, &n);
        int role = ck_pt_node_role(x->p, e->val);
        if (path_push(x, part, n, &mark) < 0)
            return -1;
        if (role == 1) {
            leaf *l = &x->leaves[x->next_leaf++];
            *l = (leaf){.parent = parent, .parent_len = mark, .out = NONE,
                        .keyed = dict && nd(x, e->key)->kind == CK_PK_STR, .in_seq = !dict,
                        .old_key = ck_arena_strndup(&x->arena, part, n), .old_key_len = n,
                        .node = e->val};
            if (l->old_key == NULL)
                return nomem(x);
        } else if (role == 0) {
            if (survey(x, e->val, depth + 1) < 0)
                return -1;
        } else if (name_put(x, x->path, x->path_len, NAME_VALUE) < 0) {
            return -1;
        }
        x->path_len = mark;
    }
    return 0;
}

static int survey(rp *x, uint32_t id, unsigned depth)
{
    if (depth >= CK_PT_MAX_DEPTH)
        return ck_fail(x->err, EINVAL, "%s: data.pkl nests deeper than it did", x->r->path);
    return survey_items(x, nd(x, id), depth);
}

/* Whether `name` is prefix "." rest (or rest, at the root): its rest. */
static const char *after(const char *name, size_t len, const char *prefix, size_t plen,
                         size_t *rest)
{
    if (plen == 0) {
        *rest = len;
        return name;
    }
    if (len <= plen + 1 || memcmp(name, prefix, plen) != 0 || name[plen] != '.')
        return NULL;
    *rest = len - plen - 1;
    return name + plen + 1;
}

/* Tensor o of the new file in its original leaf's place, renamed within
 * its dict if need be; false when it must go elsewhere. */
static bool in_place(rp *x, uint32_t o)
{
    const ck_pt_out *t = &x->r->out[o];
    if (t->orig == NONE || t->orig >= x->r->n_leaves)
        return false;
    leaf *l = &x->leaves[t->orig];
    size_t rest = 0;
    const char *key = after(t->name, t->name_len, l->parent, l->parent_len, &rest);
    if (key == NULL || l->out != NONE)
        return false;
    /* Only a string key can change: an index or an int key is the name. */
    if (!l->keyed && (rest != l->old_key_len || memcmp(key, l->old_key, rest) != 0))
        return false;
    /* Nor may it take the name of a dict or a value the tree does not
     * show (a second key of one dict would drop one of them). */
    if (ck_name_map_get(&x->names, t->name, t->name_len) != CK_NAME_MAP_NONE)
        return false;
    l->out = o;
    if (l->keyed) {
        l->key = key;
        l->key_len = rest;
    }
    return true;
}

/* Where tensor o goes when not in a place: the dict named by the longest
 * prefix of its name; refused when none (a list at the root) or its key
 * there would name a value already there. */
static int place_new(rp *x, uint32_t o)
{
    const ck_pt_out *t = &x->r->out[o];
    for (size_t plen = t->name_len; ; plen--) {
        bool cut = plen == 0 || (plen < t->name_len && t->name[plen] == '.');
        if (cut && ck_name_map_get(&x->names, t->name, plen) == NAME_DICT) {
            size_t rest = 0;
            const char *key = after(t->name, t->name_len, t->name, plen, &rest);
            if (ck_name_map_get(&x->names, t->name, t->name_len) != CK_NAME_MAP_NONE)
                return refuse(x, t->name, t->name_len, "the file holds a value of that name "
                              "that the tree does not show as a tensor (a dict, a string, "
                              "None...)");
            uint32_t head = ck_name_map_get(&x->inserts, t->name, plen);
            x->next_insert[o] = head;
            x->insert_key[o] = key;
            x->insert_key_len[o] = rest;
            if (ck_name_map_put(&x->inserts, t->name, plen, o) < 0)
                return nomem(x);
            return 0;
        }
        if (plen == 0)
            break;
    }
    return refuse(x, t->name, t->name_len, "the file's value is not a dict, and a new name "
                  "has no place in it");
}

static int plan(rp *x)
{
    const ck_pt_repickle *r = x->r;
    for (uint32_t o = 0; o < r->n_out; o++)
        x->next_insert[o] = NONE;
    if (r->orig == NULL) { /* a new file: one OrderedDict of every tensor */
        if (ck_name_map_put(&x->names, "", 0, NAME_DICT) < 0)
            return nomem(x);
    } else if (ck_pt_node_role(x->p, x->p->root) != 0) {
        return ck_fail(x->err, EINVAL, "%s: data.pkl's value is not a container", r->path);
    } else if (survey(x, x->p->root, 0) < 0) {
        return -1;
    } else if (x->next_leaf != r->n_leaves) {
        return ck_fail(x->err, EIO, "%s: data.pkl has %u leaves, it had %zu when opened",
                       r->path, x->next_leaf, r->n_leaves);
    }
    for (uint32_t o = 0; o < r->n_out; o++)
        x->placed[o] = in_place(x, o);
    for (uint32_t o = 0; o < r->n_out; o++) {
        if (x->placed[o])
            continue;
        const ck_pt_out *t = &r->out[o];
        if (t->orig != NONE && x->leaves[t->orig].in_seq)
            return refuse(x, t->name, t->name_len, "an item of a list or tuple is named by "
                          "its place: it cannot be renamed");
        if (place_new(x, o) < 0)
            return -1;
    }
    for (size_t k = 0; k < r->n_leaves; k++) {
        const leaf *l = &x->leaves[k];
        if (l->in_seq && l->out == NONE)
            return ck_fail(x->err, ENOTSUP, "%s: an item of a list or tuple ('%.*s...') was "
                           "removed: the items after it would change names", r->path,
                           (int)(l->parent_len < 200 ? l->parent_len : 200), l->parent);
    }
    return 0;
}

/* ---- writing opcodes ----------------------------------------------------- */

static void op(rp *x, unsigned char c)
{
    ck_wbuf_u8(x->b, c);
}

static void put_int(rp *x, int64_t v)
{
    unsigned char b[9];
    if (v >= 0 && v < 256) {
        op(x, 'K');
        op(x, (unsigned char)v);
    } else if (v >= 0 && v < 65536) {
        op(x, 'M');
        op(x, (unsigned char)v);
        op(x, (unsigned char)(v >> 8));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        op(x, 'J');
        ck_wbuf_u32(x->b, (uint32_t)v);
    } else { /* LONG1: the fewest two's complement bytes, as Python's encode_long */
        unsigned n = 8;
        while (n > 1 && ((v >> (8 * (n - 1) - 1)) == 0 || (v >> (8 * (n - 1) - 1)) == -1))
            n--;
        b[0] = (unsigned char)n;
        for (unsigned i = 0; i < n; i++)
            b[1 + i] = (unsigned char)((uint64_t)v >> (8 * i));
        op(x, 0x8a);
        ck_wbuf_put(x->b, b, 1 + n);
    }
}

static void put_str(rp *x, const void *s, size_t n)
{
    op(x, 'X');
    ck_wbuf_u32(x->b, (uint32_t)n);
    ck_wbuf_put(x->b, s, n);
}

static void put_global(rp *x, const char *module, const char *name)
{
    op(x, 'c');
    ck_wbuf_put(x->b, module, strlen(module));
    op(x, '\n');
    ck_wbuf_put(x->b, name, strlen(name));
    op(x, '\n');
}

static void put_global_node(rp *x, uint32_t g)
{
    const char *module, *name;
    ck_pt_global_of(x->p, g, &module, &name);
    put_global(x, module, name);
}

/* A tuple's closing: TUPLE1-3 after its items, or TUPLE after a MARK. */
static void tuple_open(rp *x, uint32_t n)
{
    if (n == 0)
        op(x, ')');
    else if (n > 3)
        op(x, '(');
}

static void tuple_close(rp *x, uint32_t n)
{
    static const unsigned char small[] = {0, 0x85, 0x86, 0x87};
    if (n > 3)
        op(x, 't');
    else if (n > 0)
        op(x, small[n]);
}

static void put_dims(rp *x, const int64_t *v, uint32_t n)
{
    tuple_open(x, n);
    for (uint32_t i = 0; i < n; i++)
        put_int(x, v[i]);
    tuple_close(x, n);
}

static void put_ordered_dict(rp *x)
{
    put_global(x, "collections", "OrderedDict");
    op(x, ')');
    op(x, 'R');
}

/* ---- values as they were ------------------------------------------------- */

/* Every node's references in the original (a cell's key and value, a
 * call's global, arguments and state, a persistent id, an OrderedDict's
 * _metadata): a node with more than one is written once, then fetched
 * from the memo. */
static int count_refs(rp *x)
{
    const ck_pickle *p = x->p;
    x->refs = calloc(p->n_nodes ? p->n_nodes : 1, sizeof *x->refs);
    x->memo = calloc(p->n_nodes ? p->n_nodes : 1, sizeof *x->memo);
    if (x->refs == NULL || x->memo == NULL)
        return nomem(x);
#define REF(id) do { if ((id) != NONE && (id) < p->n_nodes && x->refs[id] < UINT32_MAX) \
                         x->refs[id]++; } while (0)
    for (size_t i = 0; i < p->n_cells; i++) {
        REF(p->cells[i].key);
        REF(p->cells[i].val);
    }
    for (size_t i = 0; i < p->n_nodes; i++) {
        const ck_pk_node *n = &p->nodes[i];
        if (n->kind == CK_PK_CALL) {
            REF(n->g);
            REF(n->a);
            REF(n->b);
        } else if (n->kind == CK_PK_PERSID) {
            REF(n->a);
        } else if (n->kind == CK_PK_DICT && (n->flag & CK_PK_BUILT)) {
            REF((uint32_t)n->x);
        } else if (n->kind == CK_PK_DICT && (n->flag & CK_PK_ORDERED)) {
            REF(n->g);
        }
    }
#undef REF
    return 0;
}

/* Whether node id is shared and of a kind Python's pickler memoizes. */
static bool memoized(const rp *x, uint32_t id)
{
    if (x->refs == NULL || x->refs[id] < 2)
        return false;
    switch (nd(x, id)->kind) {
    case CK_PK_STR: case CK_PK_TUPLE: case CK_PK_LIST: case CK_PK_DICT: case CK_PK_SET:
    case CK_PK_CALL: case CK_PK_PERSID:
        return true;
    }
    return false;
}

/* The value on top of the stack is node id: put in the next memo slot. */
static void memo_put(rp *x, uint32_t id)
{
    uint32_t i = x->n_memo++;
    x->memo[id] = i + 1;
    if (i < 256) {
        op(x, 'q');
        op(x, (unsigned char)i);
    } else {
        op(x, 'r');
        ck_wbuf_u32(x->b, i);
    }
}

static void memo_get(rp *x, uint32_t id)
{
    uint32_t i = x->memo[id] - 1;
    if (i < 256) {
        op(x, 'h');
        op(x, (unsigned char)i);
    } else {
        op(x, 'j');
        ck_wbuf_u32(x->b, i);
    }
}

static int plain(rp *x, uint32_t id, unsigned depth);
static int plain_value(rp *x, uint32_t id, unsigned depth, bool memo);

static int plain_items(rp *x, const ck_pk_node *c, unsigned depth)
{
    uint32_t i = 0;
    for (uint32_t cell = c->a; cell != NONE; cell = x->p->cells[cell].next, i++) {
        const ck_pk_cell *e = &x->p->cells[cell];
        if (i % BATCH == 0 && c->kind != CK_PK_TUPLE)
            op(x, '(');
        if ((e->key != NONE && plain(x, e->key, depth + 1) < 0) || plain(x, e->val, depth + 1) < 0)
            return -1;
        if ((i % BATCH == BATCH - 1 || e->next == NONE) && c->kind != CK_PK_TUPLE)
            op(x, c->kind == CK_PK_DICT ? 'u' : c->kind == CK_PK_LIST ? 'e' : 0x90);
    }
    return 0;
}

static void call_close(rp *x, const ck_pk_node *n)
{
    op(x, n->flag & CK_PK_NEWOBJ ? 0x81 : 'R');
}

static int plain_dict_open(rp *x, const ck_pk_node *n)
{
    if (n->flag & CK_PK_ORDERED) {
        put_global_node(x, n->g);
        op(x, ')');
        op(x, 'R');
    } else {
        op(x, '}');
    }
    return 0;
}

static int plain_build(rp *x, const ck_pk_node *n, unsigned depth)
{
    if (n->kind == CK_PK_DICT && (n->flag & CK_PK_BUILT)) {
        if (plain(x, (uint32_t)n->x, depth + 1) < 0)
            return -1;
        op(x, 'b');
    }
    return 0;
}

static uint32_t new_storage(rp *x, uint32_t record, uint32_t out);
static void put_key(rp *x, uint32_t key);

/* A persistent id in a value the tree does not show (a tensor in an
 * OrderedDict's _metadata, say): its storage is renumbered as the tree's
 * are, its record copied, or the file would name another storage, or
 * none.  ('storage', class, key, location, numel), as torch.save writes. */
static int hidden_storage(rp *x, const ck_pk_node *n, unsigned depth)
{
    const ck_pickle *p = x->p;
    const ck_pk_node *t = nd(x, n->a);
    uint32_t key = t->kind == CK_PK_TUPLE && t->n == 5 ? ck_pk_item(p, n->a, 2) : NONE;
    const ck_zip_entry *e = NULL;
    if (key != NONE && ck_pk_str_is(p, ck_pk_item(p, n->a, 0), "storage") &&
        nd(x, key)->kind == CK_PK_STR && nd(x, key)->n <= 256 && x->r->zip != NULL) {
        char name[8 + 256];
        int nl = snprintf(name, sizeof name, "data/%.*s", (int)nd(x, key)->n,
                          (const char *)p->buf + nd(x, key)->x);
        e = ck_zip_find(x->r->zip, name, (size_t)nl);
    }
    if (e == NULL || (size_t)(e - x->r->zip->v) >= x->r->n_records)
        return ck_fail(x->err, EINVAL, "%s: data.pkl: offset %u: a storage in a value the "
                       "tree does not show that is no record of the archive", x->r->path,
                       n->off);
    uint32_t rec = (uint32_t)(e - x->r->zip->v);
    if (x->key_of_record[rec] == NONE &&
        (x->key_of_record[rec] = new_storage(x, rec, NONE)) == NONE)
        return nomem(x);
    op(x, '(');
    put_str(x, "storage", 7);
    if (plain(x, ck_pk_item(p, n->a, 1), depth + 1) < 0)
        return -1;
    put_key(x, x->key_of_record[rec]);
    if (plain(x, ck_pk_item(p, n->a, 3), depth + 1) < 0 ||
        plain(x, ck_pk_item(p, n->a, 4), depth + 1) < 0)
        return -1;
    op(x, 't');
    op(x, 'Q');
    return 0;
}

/* Node id as it was: fetched from the memo when written before; a shared
 * list, dict or set is memoized as soon as it is made (before its items,
 * which may reach it again, as Python's pickler does), any other shared
 * value once whole. */
static int plain(rp *x, uint32_t id, unsigned depth)
{
    if (x->b->failed) /* past the bytes ckptfs reads back: stop here, not at the end */
        return ck_fail(x->err, EFBIG, "%s: the new data.pkl would pass the %u bytes ckptfs "
                       "reads", x->r->path, CK_PT_PICKLE_MAX_BYTES);
    if (x->memo != NULL && x->memo[id] != 0) {
        memo_get(x, id);
        return 0;
    }
    bool memo = memoized(x, id);
    if (plain_value(x, id, depth, memo) < 0)
        return -1;
    if (memo && x->memo[id] == 0)
        memo_put(x, id);
    return 0;
}

static int plain_value(rp *x, uint32_t id, unsigned depth, bool memo)
{
    const ck_pk_node *n = nd(x, id);
    unsigned char bits[8];
    if (depth > MAX_PLAIN_DEPTH)
        return ck_fail(x->err, ENOTSUP, "%s: data.pkl: offset %u: a value nested deeper than "
                       "ckptfs writes back (%u)", x->r->path, n->off, MAX_PLAIN_DEPTH);
    switch (n->kind) {
    case CK_PK_STR: put_str(x, x->p->buf + n->x, n->n); return 0;
    case CK_PK_INT: put_int(x, (int64_t)n->x); return 0;
    case CK_PK_FLOAT:
        for (unsigned i = 0; i < 8; i++)
            bits[i] = (unsigned char)(n->x >> (56 - 8 * i));
        op(x, 'G');
        ck_wbuf_put(x->b, bits, 8);
        return 0;
    case CK_PK_NONE: op(x, 'N'); return 0;
    case CK_PK_BOOL: op(x, n->x ? 0x88 : 0x89); return 0;
    case CK_PK_GLOBAL: put_global_node(x, id); return 0;
    case CK_PK_PERSID:
        return hidden_storage(x, n, depth);
    case CK_PK_TUPLE:
        tuple_open(x, n->n);
        if (plain_items(x, n, depth) < 0)
            return -1;
        tuple_close(x, n->n);
        return 0;
    case CK_PK_LIST:
        op(x, ']');
        if (memo)
            memo_put(x, id);
        return plain_items(x, n, depth);
    case CK_PK_SET:
        op(x, 0x8f);
        if (memo)
            memo_put(x, id);
        return plain_items(x, n, depth);
    case CK_PK_DICT:
        plain_dict_open(x, n);
        if (memo)
            memo_put(x, id);
        return plain_items(x, n, depth) < 0 ? -1 : plain_build(x, n, depth);
    case CK_PK_CALL:
        put_global_node(x, n->g);
        if (plain(x, n->a, depth + 1) < 0)
            return -1;
        call_close(x, n);
        if (n->b != NONE) {
            if (plain(x, n->b, depth + 1) < 0)
                return -1;
            op(x, 'b');
        }
        return 0;
    }
    return ck_fail(x->err, EINVAL, "%s: data.pkl: offset %u: a value ckptfs cannot write back",
                   x->r->path, n->off);
}

/* ---- tensors ------------------------------------------------------------- */

static uint32_t new_storage(rp *x, uint32_t record, uint32_t out)
{
    ck_pt_repickle *r = x->r;
    ck_pt_storage *s = reallocarray(r->storages, r->n_storages + 1, sizeof *s);
    if (s == NULL)
        return NONE;
    r->storages = s;
    s[r->n_storages] = (ck_pt_storage){.record = record, .out = out};
    return (uint32_t)r->n_storages++;
}

static void put_key(rp *x, uint32_t key)
{
    char k[16];
    int n = snprintf(k, sizeof k, "%u", key);
    put_str(x, k, (size_t)n);
}

/* _rebuild_tensor_v2's arguments for tensor o: its original ones (args,
 * NONE for a new tensor) with its storage's key, or a storage of its
 * own. */
static int tensor_args(rp *x, uint32_t args, uint32_t o)
{
    const ck_pt_out *t = &x->r->out[o];
    uint32_t pid = args != NONE ? nd(x, ck_pk_item(x->p, args, 0))->a : NONE;
    uint32_t key = NONE;
    if (t->record != NONE) { /* kept as it was: the storage renumbered */
        if (x->key_of_record[t->record] == NONE &&
            (x->key_of_record[t->record] = new_storage(x, t->record, NONE)) == NONE)
            return nomem(x);
        key = x->key_of_record[t->record];
    } else if ((key = new_storage(x, NONE, o)) == NONE) {
        return nomem(x);
    }
    const char *cls = ck_pt_storage_class(t->dtype);
    if (t->record == NONE && cls == NULL) {
        char q[CK_QUOTE_BUF];
        return ck_fail(x->err, EINVAL, "%s: tensor '%s': PyTorch has no storage of its type "
                       "(%s)", x->r->path, ck_quote(q, t->name, t->name_len), t->dtype->ms_name);
    }
    op(x, '(');
    op(x, '(');
    put_str(x, "storage", 7);
    if (t->record != NONE)
        plain(x, ck_pk_item(x->p, pid, 1), 1);
    else
        put_global(x, "torch", cls);
    put_key(x, key);
    if (pid != NONE)
        plain(x, ck_pk_item(x->p, pid, 3), 1); /* its location */
    else
        put_str(x, "cpu", 3);
    if (t->record != NONE) {
        plain(x, ck_pk_item(x->p, pid, 4), 1);
        op(x, 't');
        op(x, 'Q');
        for (uint32_t i = 1; i < nd(x, args)->n; i++) /* offset, size, stride, the rest */
            if (plain(x, ck_pk_item(x->p, args, i), 1) < 0)
                return -1;
        op(x, 't');
        return 0;
    }
    /* Its own storage, row-major. */
    int64_t numel = 1, stride[CK_MAX_DIMS];
    for (uint32_t d = t->ndim; d-- > 0;) {
        stride[d] = numel;
        numel *= t->dims[d]; /* the tree's shape rule bounds it */
    }
    put_int(x, numel);
    op(x, 't');
    op(x, 'Q');
    put_int(x, 0);
    put_dims(x, t->dims, t->ndim);
    put_dims(x, stride, t->ndim);
    if (args != NONE)
        plain(x, ck_pk_item(x->p, args, 4), 1); /* requires_grad as it was */
    else
        op(x, 0x89);
    put_ordered_dict(x);
    op(x, 't');
    return 0;
}

static void put_v2(rp *x)
{
    put_global(x, "torch._utils", "_rebuild_tensor_v2");
}

static int tensor(rp *x, uint32_t id, uint32_t o, unsigned wraps);

/* _rebuild_from_type_v2's args (its third argument) for tensor o: those of
 * func, _rebuild_tensor_v2's or a Parameter's (the tensor first). */
static int from_type_args(rp *x, uint32_t func, uint32_t args, uint32_t o, unsigned wraps)
{
    int g = nd(x, func)->kind == CK_PK_GLOBAL ? ck_pt_global_id(x->p, func) : -1;
    if (g == CK_PT_G_TENSOR_V2)
        return tensor_args(x, args, o);
    const ck_pk_node *a = nd(x, args);
    tuple_open(x, a->n);
    uint32_t i = 0;
    for (uint32_t c = a->a; c != NONE; c = x->p->cells[c].next, i++)
        if ((i == 0 ? tensor(x, x->p->cells[c].val, o, wraps + 1)
                    : plain(x, x->p->cells[c].val, 1)) < 0)
            return -1;
    tuple_close(x, a->n);
    return 0;
}

/* Leaf node id (NONE: a new tensor) written as tensor o: its wrappers
 * (Parameter, _rebuild_from_type_v2) kept around the rebuilt tensor. */
static int tensor(rp *x, uint32_t id, uint32_t o, unsigned wraps)
{
    if (id == NONE) {
        put_v2(x);
        if (tensor_args(x, NONE, o) < 0)
            return -1;
        op(x, 'R');
        return 0;
    }
    const ck_pk_node *n = nd(x, id);
    if (wraps > 4)
        return ck_fail(x->err, EINVAL, "%s: data.pkl: rebuild calls nested too deep", x->r->path);
    put_global_node(x, n->g);
    if (n->x == CK_PT_G_TENSOR_V2) {
        if (tensor_args(x, n->a, o) < 0)
            return -1;
    } else { /* a Parameter of the tensor, or _rebuild_from_type_v2(func, type, args, state) */
        const ck_pk_node *a = nd(x, n->a);
        tuple_open(x, a->n);
        uint32_t i = 0;
        for (uint32_t c = a->a; c != NONE; c = x->p->cells[c].next, i++) {
            uint32_t v = x->p->cells[c].val;
            int rc = 0;
            if (n->x != CK_PT_G_FROM_TYPE && i == 0)
                rc = tensor(x, v, o, wraps + 1);
            else if (n->x == CK_PT_G_FROM_TYPE && i == 2)
                rc = from_type_args(x, ck_pk_item(x->p, n->a, 0), v, o, wraps);
            else
                rc = plain(x, v, 1);
            if (rc < 0)
                return -1;
        }
        tuple_close(x, a->n);
    }
    call_close(x, n);
    if (n->b != NONE) {
        if (plain(x, n->b, 1) < 0)
            return -1;
        op(x, 'b');
    }
    return 0;
}

/* ---- the second walk: the pickle ----------------------------------------- */

static int emit(rp *x, uint32_t id, unsigned depth);

/* A list's or dict's items go in batches: MARK, up to 1000, APPENDS or
 * SETITEMS (a tuple's are written bare). */
typedef struct batch {
    unsigned char close;        /* 'u', 'e', or 0 for a tuple */
    uint32_t count;
    bool open;
} batch;

static void item_begin(rp *x, batch *bt)
{
    if (bt->close != 0 && !bt->open) {
        op(x, '(');
        bt->open = true;
    }
}

static void item_end(rp *x, batch *bt)
{
    if (bt->close != 0 && ++bt->count % BATCH == 0) {
        op(x, bt->close);
        bt->open = false;
    }
}

/* The tensors added to the dict being written (its name is x->path), in
 * the tree's order (the list is in reverse). */
static int emit_inserts(rp *x, batch *bt)
{
    uint32_t head = ck_name_map_get(&x->inserts, x->path ? x->path : "", x->path_len), n = 0;
    for (uint32_t o = head; o != NONE; o = x->next_insert[o])
        n++;
    uint32_t *order = malloc((n ? n : 1) * sizeof *order), k = n;
    if (order == NULL)
        return nomem(x);
    for (uint32_t o = head; o != NONE; o = x->next_insert[o])
        order[--k] = o;
    int rc = 0;
    for (k = 0; rc == 0 && k < n; k++) {
        uint32_t o = order[k], orig = x->r->out[o].orig;
        uint32_t node = orig != NONE ? x->leaves[orig].node : NONE; /* moved: as it was */
        item_begin(x, bt);
        put_str(x, x->insert_key[o], x->insert_key_len[o]);
        rc = node != NONE && nd(x, node)->kind != CK_PK_CALL ? plain(x, node, 1)
                                                              : tensor(x, node, o, 0);
        item_end(x, bt);
    }
    free(order);
    return rc;
}

static int emit_items(rp *x, const ck_pk_node *c, unsigned depth)
{
    bool dict = c->kind == CK_PK_DICT;
    batch bt = {.close = dict ? 'u' : c->kind == CK_PK_LIST ? 'e' : 0};
    uint64_t at = 0;
    for (uint32_t cell = c->a; cell != NONE; cell = x->p->cells[cell].next, at++) {
        const ck_pk_cell *e = &x->p->cells[cell];
        int role = ck_pt_node_role(x->p, e->val), rc = 0;
        const leaf *l = role == 1 ? &x->leaves[x->next_leaf++] : NULL;
        if (l != NULL && l->out == NONE)
            continue; /* removed (never from a list or tuple: plan refused it) */
        item_begin(x, &bt);
        if (dict && l != NULL && l->key != NULL)
            put_str(x, l->key, l->key_len);
        else if (dict)
            rc = plain(x, e->key, 1);
        if (rc == 0 && l != NULL) {
            rc = nd(x, e->val)->kind == CK_PK_CALL ? tensor(x, e->val, l->out, 0)
                                                   : plain(x, e->val, 1);
        } else if (rc == 0 && role == 0) {
            char num[24];
            size_t n = 0, mark = 0;
            const char *part = key_text(x, e, at, num, &n);
            rc = path_push(x, part, n, &mark);
            if (rc == 0)
                rc = emit(x, e->val, depth + 1);
            x->path_len = mark;
        } else if (rc == 0) {
            rc = plain(x, e->val, 1);
        }
        if (rc < 0)
            return -1;
        item_end(x, &bt);
    }
    if (dict && emit_inserts(x, &bt) < 0)
        return -1;
    if (bt.open)
        op(x, bt.close);
    return 0;
}

/* A container of the tree, its leaves as the tree has them. */
static int emit(rp *x, uint32_t id, unsigned depth)
{
    const ck_pk_node *n = nd(x, id);
    if (n->kind == CK_PK_TUPLE) {
        tuple_open(x, n->n);
        if (emit_items(x, n, depth) < 0)
            return -1;
        tuple_close(x, n->n);
        return 0;
    }
    if (n->kind == CK_PK_LIST)
        op(x, ']');
    else
        plain_dict_open(x, n);
    if (emit_items(x, n, depth) < 0)
        return -1;
    return plain_build(x, n, depth);
}

/* A new file: an OrderedDict of every tensor, keyed by its name (a state
 * dict). */
static int emit_new(rp *x)
{
    batch bt = {.close = 'u'};
    put_ordered_dict(x);
    if (emit_inserts(x, &bt) < 0)
        return -1;
    if (bt.open)
        op(x, 'u');
    return 0;
}

int ck_pt_repickle_run(ck_pt_repickle *r, ck_error *err)
{
    rp x = {.r = r, .p = r->orig, .err = err, .b = &r->pkl};
    size_t n = r->n_out ? r->n_out : 1;
    r->pkl = (ck_wbuf){.max = CK_PT_PICKLE_MAX_BYTES};
    ck_arena_init(&x.arena);
    ck_name_map_init(&x.names);
    ck_name_map_init(&x.inserts);
    x.leaves = calloc(r->n_leaves ? r->n_leaves : 1, sizeof *x.leaves);
    x.next_insert = malloc(n * sizeof *x.next_insert);
    x.insert_key = calloc(n, sizeof *x.insert_key);
    x.insert_key_len = calloc(n, sizeof *x.insert_key_len);
    x.placed = calloc(n, sizeof *x.placed);
    x.key_of_record = malloc((r->n_records ? r->n_records : 1) * sizeof *x.key_of_record);
    int rc = x.leaves && x.next_insert && x.insert_key && x.insert_key_len && x.placed &&
                     x.key_of_record ? 0 : nomem(&x);
    if (rc == 0 && r->orig != NULL)
        rc = count_refs(&x);
    for (size_t k = 0; rc == 0 && k < r->n_records; k++)
        x.key_of_record[k] = NONE;
    if (rc == 0)
        rc = plan(&x);
    if (rc == 0) {
        op(&x, 0x80);
        op(&x, 2);
        x.next_leaf = 0;
        x.path_len = 0;
        rc = r->orig != NULL ? emit(&x, r->orig->root, 0) : emit_new(&x);
        op(&x, '.');
    }
    if (rc == 0 && r->pkl.failed)
        rc = ck_fail(err, EFBIG, "%s: the new data.pkl would pass the %u bytes ckptfs reads",
                     r->path, CK_PT_PICKLE_MAX_BYTES);
    free(x.leaves);
    free(x.next_insert);
    free(x.insert_key);
    free(x.insert_key_len);
    free(x.placed);
    free(x.key_of_record);
    free(x.refs);
    free(x.memo);
    free(x.path);
    ck_name_map_free(&x.names);
    ck_name_map_free(&x.inserts);
    ck_arena_free(&x.arena);
    return rc;
}

void ck_pt_repickle_free(ck_pt_repickle *r)
{
    free(r->pkl.p);
    free(r->storages);
    r->pkl = (ck_wbuf){0};
    r->storages = NULL;
    r->n_storages = 0;
}
