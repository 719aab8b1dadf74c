/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pickle_vm: a Python pickle read as data, never executed.
 *
 * OneFlow's pickled_data and PyTorch's data.pkl are pickles of state
 * dicts.  Python would rebuild them by importing and calling the globals
 * they name, which is how a hostile pickle runs code.  This machine runs
 * the opcodes symbolically instead: every value becomes a node of one
 * array, globals are looked up in the caller's allow-list (never
 * resolved), and calling one only records the call (its global and its
 * arguments) for the caller to interpret.  A global outside the list, an
 * opcode outside the small set state dicts are written with, and every
 * malformed sequence are refused with the byte offset of the opcode.
 *
 * The opcodes are those Python's pickler gives a state dict at protocols 2
 * to 5 (PROTO, FRAME, MARK, the dict/list/tuple builders, the unicode
 * strings, the small ints, NONE and the booleans, GLOBAL and STACK_GLOBAL,
 * REDUCE, NEWOBJ, BUILD, the memo opcodes, STOP), and what torch.save's
 * pickles use beyond OneFlow's: LONG1, BINFLOAT, SHORT_BINSTRING,
 * EMPTY_SET and ADDITEMS, BINPERSID (only when the caller's rules allow
 * persistent ids).
 *
 * Stack depth (2^16), marks (64 nested), the memo and the nodes (each at
 * most the caller's max_nodes), one container's items (its max_entries)
 * and every length (against the bytes left) are bounded; the whole pickle
 * is in memory (its caller bounds its size).
 */
#ifndef CK_PICKLE_VM_H
#define CK_PICKLE_VM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/ck_error.h"

#define CK_PK_NONE_ID UINT32_MAX

typedef enum ck_pk_kind {
    CK_PK_STR,      /* x: offset of its bytes in the pickle, n: their length */
    CK_PK_INT,      /* x: the value, as int64_t */
    CK_PK_FLOAT,    /* x: the IEEE 754 double's bits */
    CK_PK_NONE,
    CK_PK_BOOL,     /* x: 0 or 1 */
    CK_PK_TUPLE,    /* containers: a and b their first and last cell, n the count */
    CK_PK_LIST,
    CK_PK_DICT,     /* flag CK_PK_ORDERED: made by calling an ordered dict class
                     * (g: that class's global); x: the state BUILD gave it, with
                     * CK_PK_BUILT */
    CK_PK_SET,
    CK_PK_GLOBAL,   /* x: its index in the allow-list */
    CK_PK_CALL,     /* x: the global's id, g: its node, a: the arguments (a tuple),
                     * b: the state BUILD gave it (CK_PK_NONE_ID: none); flag
                     * CK_PK_NEWOBJ: NEWOBJ made it, not REDUCE */
    CK_PK_PERSID,   /* a: the persistent id (BINPERSID's operand) */
} ck_pk_kind;

enum {
    CK_PK_ORDERED = 1,  /* a dict from an ordered dict class */
    CK_PK_BUILT = 2,    /* an ordered dict whose _metadata BUILD has set */
    CK_PK_NEWOBJ = 4,   /* a call NEWOBJ made */
};

typedef struct ck_pk_node {
    uint8_t kind;
    uint8_t flag;
    uint32_t a, b, n;
    uint32_t g;
    uint32_t off;       /* the opcode that made it, for messages */
    uint64_t x;
} ck_pk_node;

/* An item of a container: key CK_PK_NONE_ID in tuples, lists and sets. */
typedef struct ck_pk_cell {
    uint32_t key, val;
    uint32_t next;
    uint32_t off;       /* the opcode that added it */
} ck_pk_cell;

/* A global the pickle may name.  makes_dict: calling it with no arguments
 * makes an (ordered) dict, which SETITEMS then fills (OrderedDict). */
typedef struct ck_pk_global {
    const char *module, *name;
    int id;
    bool makes_dict;
} ck_pk_global;

typedef struct ck_pk_rules {
    const char *what;           /* "a OneFlow state dict": in messages */
    const ck_pk_global *globals;
    size_t n_globals;
    bool persid;                /* BINPERSID is allowed */
    size_t max_nodes;           /* nodes, and cells, at most */
    uint32_t max_entries;       /* items of one container at most */
} ck_pk_rules;

/* A pickle's value: root is what STOP found on the stack. */
typedef struct ck_pickle {
    const uint8_t *buf;         /* the pickle's bytes (the caller's) */
    size_t len;
    const char *file;           /* names it in messages */
    ck_pk_node *nodes;
    size_t n_nodes;
    ck_pk_cell *cells;
    size_t n_cells;
    uint32_t root;
} ck_pickle;

/* Run buf (len bytes of one pickle, ending at its STOP) under rules r
 * into out: 0, or -1 with err naming file and the offset.  Free out with
 * ck_pickle_free, after a failure too. */
int ck_pickle_run(const void *buf, size_t len, const char *file, const ck_pk_rules *r,
                  ck_pickle *out, ck_error *err);
void ck_pickle_free(ck_pickle *p);

static inline const ck_pk_node *ck_pk_at(const ck_pickle *p, uint32_t id)
{
    return &p->nodes[id];
}

/* Whether node id is the string s. */
bool ck_pk_str_is(const ck_pickle *p, uint32_t id, const char *s);
/* Item i of container id (its value), or CK_PK_NONE_ID past its end. */
uint32_t ck_pk_item(const ck_pickle *p, uint32_t id, uint32_t i);
/* A copy of string node id, NUL-ended (NULL: out of memory). */
char *ck_pk_strdup(const ck_pickle *p, uint32_t id);
/* Fail with EINVAL: "FILE: offset OFF: WHAT". */
int ck_pk_fail(const ck_pickle *p, size_t off, ck_error *err, const char *what);

#endif
