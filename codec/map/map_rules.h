/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_rules: a map's rules as map.c reads them and map_apply.c applies
 * them (map_layout.c reads and applies the shapes of the layout rules).
 * Private to codec/map/.
 */
#ifndef CK_MAP_RULES_H
#define CK_MAP_RULES_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/dtype.h"

/* As map.h names it; this header stays below map.h (map.c includes both). */
typedef struct ck_map ck_map;

typedef enum map_rule_kind {
    MAP_RENAME,                 /* the whole name a becomes b */
    MAP_REPLACE,                /* every occurrence of a, left to right, becomes b */
    MAP_SEGMENT,                /* every dotted part a becomes b (NULL: removed), where
                                 * the name before it + sibling names a tensor too */
    MAP_REGEX,                  /* the first match of re becomes b, \0-\9 its groups */
    MAP_DROP,                   /* a name any glob matches is dropped */
    MAP_KEEP,                   /* a name no glob matches is dropped */
    /* Layout rules, on the tensors whose names glob a matches; the bytes
     * stay where they are, only the shape changes. */
    MAP_RESHAPE,                /* shape from (when given; -1 any dim) becomes to (-1:
                                 * what the element count leaves) */
    MAP_UNSQUEEZE,              /* a unit axis inserted before axis */
    MAP_SQUEEZE,                /* unit axis `axis` removed */
    /* Order rules: the elements are read in another order (a strided
     * gather of the same bytes; map_view). */
    MAP_PERMUTE,                /* axis i becomes axis to[i] (torch's permute) */
    MAP_TRANSPOSE,              /* axes `axis` and `axis2` swap */
    MAP_QK_PERMUTE,             /* Meta's q/k rows into HF's, `heads` heads: dim 0 seen
                                 * as [heads, d0 / heads / 2, 2], the last two swapped */
    MAP_QK_UNPERMUTE,           /* HF's into Meta's: [heads, 2, d0 / heads / 2], swapped */
    /* A zero tensor named b the source lacks: beside each name that is
     * sibling or ends in ".sibling" (its group), or b alone when sibling
     * is NULL; of type dtype (NULL: the sibling's) and shape to[0..n_to),
     * to[i] < 0 being the sibling's dim -to[i] - 1. */
    MAP_ADD,
} map_rule_kind;

/* The most axes a layout rule names: a tensor's (tensor_index.h). */
#define MAP_DIMS_MAX 64
/* The largest count a map writes (qk-permute's heads, a param's value). */
#define MAP_COUNT_MAX (1ull << 40)
/* The most `param` lines a map holds. */
#define MAP_PARAMS_MAX 16

typedef struct map_param {
    char *name;
    uint64_t value;
} map_param;

typedef struct map_rule {
    map_rule_kind kind;
    unsigned line, line_end;    /* in the map's text (line_end: a keep's last line) */
    char *a, *b;
    char *sibling;              /* MAP_SEGMENT's condition, or NULL: always */
    char **globs;               /* MAP_DROP, MAP_KEEP */
    size_t n_globs;
    regex_t re;
    bool re_ok;
    /* layout rules: shapes owned (NULL in a borrowed copy's own) */
    int64_t *from, *to;
    uint32_t n_from, n_to;
    uint32_t axis, axis2;
    uint64_t heads;
    const ck_dtype *dtype;
} map_rule;

/* The order of a tensor's elements once an order rule read them anew:
 * element x (row-major over dims[0..n)) of the tensor is element
 * sum x_d * step[d] of its bytes as the source holds them.  n 0 (dims,
 * step NULL): the source's own order.  The tensor's shape is apart: a
 * reshape after a permute keeps the order and changes only the shape. */
typedef struct map_view {
    int64_t *dims, *step;       /* malloc'd */
    uint32_t n;
} map_view;

static inline bool map_is_order(const map_rule *r)
{
    return r->kind == MAP_PERMUTE || r->kind == MAP_TRANSPOSE || r->kind == MAP_QK_PERMUTE ||
           r->kind == MAP_QK_UNPERMUTE;
}

/* Layout (map_layout.c).  A shape word "[2,3,-1]" ("[]": 0-d) into
 * *dims (malloc'd) and *n; infer lets -1 stand for a dim, sibling "=K"
 * (stored as -K - 1).  NULL, or why it is no shape. */
const char *map_parse_shape(const char *word, bool infer, bool sibling, int64_t **dims,
                            uint32_t *n);
/* Rule r (RESHAPE, UNSQUEEZE, SQUEEZE) on shape dims[0..ndim) into
 * out[], *out_n: 1 it applies, 0 the shape is not one it changes
 * (RESHAPE's from differs), or -1 with why: the shape cannot take it. */
int map_layout_shape(const map_rule *r, const int64_t *dims, uint32_t ndim, int64_t *out,
                     uint32_t *out_n, const char **why);
/* Order rule r on a tensor of shape dims[0..ndim) whose elements are in
 * order *v: its new shape into out[], *out_n and its new order into *v
 * (freed and emptied when it is the source's own again).  -1 with why:
 * the shape cannot take it, or out of memory (why NULL). */
int map_order_shape(const map_rule *r, const int64_t *dims, uint32_t ndim, map_view *v,
                    int64_t *out, uint32_t *out_n, const char **why);
void map_view_free(map_view *v);

struct ck_map {
    char *name, *path, *about;
    bool invertible;
    unsigned invertible_line;
    char *why_not;              /* not-invertible's reason */
    char *reverse_name;         /* the derived reverse's name (NULL: NAME~) */
    char *reverse_of;           /* this map is that one's reverse (parsed, not loaded) */
    map_rule *rules;
    size_t n, cap;
    bool borrowed;              /* the rules' strings are another map's */
    map_param params[MAP_PARAMS_MAX];
    size_t n_params;
    const char *args;           /* while parsing: the caller's "K=V:K=V", or NULL */
    bool listing;               /* loaded to be listed: a param not given is noted */
    char *needs;                /* the first param not given (listing), or NULL */
};

#endif
