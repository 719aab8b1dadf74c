/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_pickle: the tensors (and numbers) of a torch.save file's data.pkl,
 * read by the symbolic pickle machine (pickle/pickle_vm.h) with exactly
 * the globals PyTorch's weights_only unpickler trusts for a state dict:
 * nothing is imported or executed, and any other global is refused with
 * its offset.
 *
 * The pickled object is walked as PyTorch users address it: dicts (plain
 * or OrderedDict), lists and tuples nest, and a leaf's name is its keys
 * and indices joined with '.' ("model.layers.0.weight",
 * "optimizer.state.0.exp_avg").  Leaves are tensors (_rebuild_tensor_v2,
 * inside _rebuild_parameter and _rebuild_from_type_v2 too) and Python
 * ints, floats and bools; strings, None and anything else are not
 * shown, only counted ("values neither tensors nor numbers", the first
 * named in ckptfs-dump's summary).  Dict keys are strings or ints.  Calls
 * are recorded, not made; BINPERSID makes a persistent-id node.  A rebuild
 * call's arguments are checked: a ('storage', class, key, location, numel)
 * persistent id, an offset, and size and stride tuples of as many
 * non-negative ints, at most CK_MAX_DIMS.  torch.Size, torch.device,
 * _codecs.encode, builtins.set, complex and bytearray are allowed because
 * they may appear beside tensors; they are never shown.
 *
 * Bounded: 64 MiB of pickle, 8 x 2^20 nodes, containers nested 32 deep,
 * rebuild calls 4 deep, names of 64 KiB, and visits of twice the node
 * count (plus 1024): the memo lets a pickle reach one container many
 * times, and a chain of lists each holding the previous one twice would
 * otherwise name 2^depth leaves.
 */
#ifndef CK_PT_PICKLE_H
#define CK_PT_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/ck_error.h"
#include "../core/dtype.h"
#include "../core/tensor_index.h"

/* data.pkl bigger than this is refused: torch.save's is ~150 bytes a tensor. */
#define CK_PT_PICKLE_MAX_BYTES (64u << 20)
/* Containers nested deeper than this are refused (a state dict nests 3). */
#define CK_PT_MAX_DEPTH 32u

typedef enum ck_pt_kind { CK_PT_TENSOR, CK_PT_INT, CK_PT_FLOAT, CK_PT_BOOL } ck_pt_kind;

/* One leaf, valid during the callback. */
typedef struct ck_pt_leaf {
    const char *name;           /* joined with '.', NUL-ended (no NUL inside) */
    size_t name_len;
    ck_pt_kind kind;
    size_t off;                 /* the pickle opcode that made it, for messages */
    uint64_t value;             /* INT: an int64_t; FLOAT: a double's bits; BOOL: 0, 1 */
    /* CK_PT_TENSOR: */
    const ck_dtype *dtype;      /* from the storage class */
    const char *type_name;      /* PyTorch's name of it: "torch.float32" */
    const char *key;            /* its storage: the record data/<key> */
    size_t key_len;
    uint64_t numel;             /* the storage's elements */
    uint64_t offset;            /* the tensor's first element in the storage */
    uint32_t ndim;
    const int64_t *sizes, *strides; /* in elements */
} ck_pt_leaf;

typedef int (*ck_pt_leaf_fn)(void *ctx, const ck_pt_leaf *leaf, ck_error *err);

typedef struct ck_pt_walk {
    size_t skipped;             /* values neither tensors nor numbers */
    char *first_skipped;        /* the first one's name (malloc'd), or NULL */
} ck_pt_walk;

/* Run buf (len bytes; file names it in messages) and call fn for each
 * leaf in the pickle's order: 0, or -1 with err naming file and the
 * opcode's offset (or fn's failure).  bare: the pickle may be a leaf
 * itself, named "" (a DCP item: torch.save of one tensor or value); else
 * that is refused.  Free w with ck_pt_walk_free. */
int ck_pt_pickle_walk(const void *buf, size_t len, const char *file, bool bare,
                      ck_pt_leaf_fn fn, void *ctx, ck_pt_walk *w, ck_error *err);
void ck_pt_walk_free(ck_pt_walk *w);

/* PyTorch's name of a type ckptfs shows ("torch.float32"), or NULL. */
const char *ck_pt_type_name(const ck_dtype *dt);
/* The type a dtype global of PyTorch names ("float32", for torch.float32),
 * with PyTorch's name of it in *type_name ("torch.float32"); NULL when
 * ckptfs shows no such type. */
const ck_dtype *ck_pt_dtype_named(const char *name, const char **type_name);
/* The storage class torch.save pickles a tensor of type dt with
 * ("FloatStorage"), or NULL when PyTorch has none. */
const char *ck_pt_storage_class(const ck_dtype *dt);

/* ---- for pt_repickle, which writes data.pkl again -------------------------- */

struct ck_pickle;

/* What the allowed globals are (a CK_PK_CALL's x). */
enum {
    CK_PT_G_ORDERED_DICT,
    CK_PT_G_TENSOR_V2,          /* torch._utils._rebuild_tensor_v2 */
    CK_PT_G_PARAMETER,          /* torch._utils._rebuild_parameter */
    CK_PT_G_PARAMETER_STATE,    /* torch._utils._rebuild_parameter_with_state */
    CK_PT_G_FROM_TYPE,          /* torch._tensor._rebuild_from_type_v2 */
    CK_PT_G_CLASS,              /* a tensor class, _rebuild_from_type_v2's type */
    CK_PT_G_OTHER,              /* allowed, never a tensor: torch.Size, torch.device... */
    CK_PT_G_STORAGE,            /* + the storage class's index */
};

/* Run buf as data.pkl under the reader's rules (the same nodes the walk
 * saw).  Free out with ck_pickle_free. */
int ck_pt_pickle_run(const void *buf, size_t len, const char *file, struct ck_pickle *out,
                     ck_error *err);
/* Whether node id is a leaf the walk names (a rebuild call or a number),
 * a container it descends into (dict, list, tuple), or neither (a value
 * it skips): 1, 0 or -1. */
int ck_pt_node_role(const struct ck_pickle *p, uint32_t id);
/* Global node id's id (CK_PT_G_...). */
int ck_pt_global_id(const struct ck_pickle *p, uint32_t id);
/* The module and name of global node id. */
void ck_pt_global_of(const struct ck_pickle *p, uint32_t id, const char **module,
                     const char **name);

#endif
