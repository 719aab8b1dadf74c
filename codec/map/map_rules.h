/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_rules: a map's rules as map.c reads them and map_names.c applies
 * them.  Private to codec/map/.
 */
#ifndef CK_MAP_RULES_H
#define CK_MAP_RULES_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

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
} map_rule_kind;

typedef struct map_rule {
    map_rule_kind kind;
    unsigned line, line_end;    /* in the map's text (line_end: a keep's last line) */
    char *a, *b;
    char *sibling;              /* MAP_SEGMENT's condition, or NULL: always */
    char **globs;               /* MAP_DROP, MAP_KEEP */
    size_t n_globs;
    regex_t re;
    bool re_ok;
} map_rule;

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
};

#endif
