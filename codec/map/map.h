/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map: a map between frameworks' tensor names, read from its text
 * (docs/maps.md is the language's reference), and applied to a model's
 * tensors' names and shapes.  Rules so far: rename (exact, substring, a
 * dotted segment scoped by a sibling of its group, regular expression),
 * drop and keep; reshape, unsqueeze and squeeze (a new shape for the same
 * bytes); permute, transpose and the Meta q/k permutation (the same bytes
 * in another order); add (a zero tensor the source lacks).  Splits,
 * fusions and casts are refused by name until they are built.  A map may
 * take params (counts: a head count) given with its name.  Knows
 * nothing of formats: map_model.h applies a map to an open model's index.
 *
 * A map is a list of rules applied in order, each to every name the rules
 * before it left.  It declares itself `invertible` (then ck_map_reverse
 * derives the reverse, and every application checks that the reverse
 * gives each name back) or `not-invertible REASON`.
 */
#ifndef CK_MAP_H
#define CK_MAP_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/ck_error.h"
#include "../core/dtype.h"

/* The most a map's text may hold, and its rules: a map is a page of
 * rules, not data. */
#define CK_MAP_TEXT_MAX (1u << 20)
#define CK_MAP_RULES_MAX 10000
/* The longest name a rule may make: a tensor's name is a module path. */
#define CK_MAP_NAME_MAX 4096

typedef struct ck_map ck_map;

/* A map from its text (len bytes; path names it in messages and gives
 * its default name, the file's name less ".map").  NULL with err naming
 * the line. */
ck_map *ck_map_parse(const char *text, size_t len, const char *path, ck_error *err);
/* The same, with args ("KEY=VALUE:KEY=VALUE", or NULL) giving the values
 * of the map's `param` lines; a key no param names is refused. */
ck_map *ck_map_parse_args(const char *text, size_t len, const char *path, const char *args,
                          ck_error *err);
/* A map file, or a shipped map by its name (ck_map_find), then
 * optionally ':' and its args: "meta-to-hf-llama:n_heads=32". */
ck_map *ck_map_load(const char *spec, ck_error *err);
/* The same, to be listed: a param neither given nor defaulted is noted
 * (ck_map_needs) rather than refused, and the map can then not be
 * applied. */
ck_map *ck_map_load_listing(const char *spec, ck_error *err);
/* The first param such a map lacks, or NULL. */
const char *ck_map_needs(const ck_map *m);
/* The file a shipped map's name stands for, in the first of the
 * directories ck_map_dirs lists that has it; a name with a '/' or ending
 * in ".map" is a path as it is.  Into out (cap bytes); -1 with err when
 * there is none. */
int ck_map_find(const char *name, char *out, size_t cap, ck_error *err);
/* The directories searched for shipped maps, in order: $CKPTFS_MAPS
 * (colon-separated), then beside the program (../maps, the source tree's,
 * and ../share/ckptfs/maps, an install's), then CKPTFS_MAPS_DIR.  dirs[i]
 * point into buf (cap bytes); how many. */
size_t ck_map_dirs(const char *dirs[], size_t max, char *buf, size_t cap);

/* Every shipped map, once a name (the first directory's, as ck_map_find
 * would find it), in each directory's name order: fn(arg, name, path). */
void ck_map_each(void (*fn)(void *arg, const char *name, const char *path), void *arg);

/* The reverse of an invertible map (its rules inverted, in reverse
 * order), named by its `reverse` line or "NAME~"; NULL with err when it
 * is not invertible (the reason it gives). */
ck_map *ck_map_reverse(const ck_map *m, ck_error *err);
void ck_map_free(ck_map *m);

const char *ck_map_name(const ck_map *m);
const char *ck_map_path(const ck_map *m);
bool ck_map_invertible(const ck_map *m);
/* Its `about` line: where its rules come from ("" when it has none). */
const char *ck_map_about(const ck_map *m);

/* A tensor a map is applied to. */
typedef struct ck_map_tensor {
    const char *name;
    const ck_dtype *dtype;      /* NULL: names alone (no layout or add rule applies) */
    const int64_t *dims;
    uint32_t ndim;
} ck_map_tensor;

/* What a map made of them: each tensor kept, in their order, and each
 * one an add rule made, after the tensor its group was found by. */
typedef struct ck_map_out {
    char *name;                 /* malloc'd */
    long from;                  /* the input it is, or -1: a zero tensor an add made */
    const ck_dtype *dtype;      /* in[from]'s, or the added one's */
    int64_t *dims;              /* malloc'd when the shape changed or it is added;
                                 * NULL: in[from]'s, unchanged */
    uint32_t ndim;
    /* The order its elements are read in, when a permute moved them:
     * element x (row-major over view_dims[0..view_n)) is element
     * sum x_d * view_step[d] of in[from]'s bytes.  NULL, 0: in order. */
    int64_t *view_dims, *view_step;     /* malloc'd */
    uint32_t view_n;
    unsigned view_line;                 /* the rule that last moved them */
} ck_map_out;

/* in[0..n) mapped into *out (*n_out of them; ck_map_out_free).  Refused,
 * *out NULL, when two names become one, a rule makes an empty or
 * over-long name, a layout rule does not fit a tensor's shape, or an
 * invertible map's reverse does not give a tensor back: err names the
 * tensor and the rule's line. */
int ck_map_apply(const ck_map *m, const ck_map_tensor *in, size_t n, ck_map_out **out,
                 size_t *n_out, ck_error *err);
void ck_map_out_free(ck_map_out *out, size_t n);

/* names[0..n) mapped: out[i] the new name (malloc'd) or NULL when a rule
 * drops it.  Refused, every out[i] NULL, when two names become one, a
 * rule makes an empty or over-long name, or an invertible map's reverse
 * does not give a name back: err names the names and the rule's line.
 * A layout or add rule, which needs shapes, is refused naming the tensor. */
int ck_map_names(const ck_map *m, const char *const *names, size_t n, char **out,
                 ck_error *err);

#endif
