/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_names: a map's rules applied to a list of names (map.h,
 * ck_map_names).  Each rule sees every name the rules before it left, at
 * once: a segment rule's sibling is looked up among the names as they
 * were before that rule, so a rule's own renames never decide its other
 * names.  What the rules made is then checked: no two names become one,
 * no name empty or longer than CK_MAP_NAME_MAX, and for an invertible map
 * the reverse gives every name back, so that a save or a conversion back
 * can trust it.  Cost: each rule visits each name once (a sibling is a
 * hash lookup), and each result is bounded.
 */
#define _GNU_SOURCE
#include "map.h"
#include "map_rules.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/name_map.h"

/* The names as the rules go: cur[i] (owned), or NULL once dropped; by[i]
 * the line of the last rule that changed it (0: none). */
typedef struct name_state {
    char **cur;
    unsigned *by;
    size_t n;
    const ck_map *m;
    ck_error *err;
} name_state;

/* A string being built, bounded by CK_MAP_NAME_MAX. */
typedef struct name_buf {
    char *s;
    size_t len, cap;
    bool over;
} name_buf;

static bool put(name_buf *b, const char *s, size_t len)
{
    if (b->len + len > CK_MAP_NAME_MAX) {
        b->over = true;
        return false;
    }
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *more = realloc(b->s, cap);
        if (more == NULL)
            return false;
        b->s = more;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, len);
    b->len += len;
    b->s[b->len] = '\0';
    return true;
}

/* The outcome of one rule on one name: *out a new name (malloc'd), or
 * NULL for unchanged; *dropped when the rule drops it. */
typedef struct rule_out {
    char *out;
    bool dropped;
} rule_out;

static bool any_glob(const map_rule *r, const char *name)
{
    for (size_t i = 0; i < r->n_globs; i++)
        if (fnmatch(r->globs[i], name, 0) == 0)
            return true;
    return false;
}

static bool has_name(const ck_name_map *set, name_buf *tmp, const char *prefix, size_t plen,
                     const char *sibling)
{
    tmp->len = 0;
    if (!put(tmp, prefix, plen) || !put(tmp, sibling, strlen(sibling)))
        return false;
    return ck_name_map_get(set, tmp->s, tmp->len) != CK_NAME_MAP_NONE;
}

/* Every dotted part of name equal to r->a, where the sibling is there. */
static int apply_segment(const map_rule *r, const char *name, const ck_name_map *set,
                         name_buf *b, name_buf *tmp)
{
    size_t alen = strlen(r->a);
    bool changed = false;
    const char *p = name;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        bool hit = len == alen && memcmp(p, r->a, alen) == 0 &&
                   (r->sibling == NULL || has_name(set, tmp, name, (size_t)(p - name),
                                                   r->sibling));
        if (tmp->over)
            return -1;
        if (hit && r->b == NULL) {
            /* removed with the dot after it, or the one before it when last */
            if (dot == NULL && b->len > 0)
                b->s[--b->len] = '\0';
        } else if (!put(b, hit ? r->b : p, hit ? strlen(r->b) : len) ||
                   (dot != NULL && !put(b, ".", 1))) {
            return -1;
        }
        changed |= hit;
        if (dot == NULL)
            break;
        p = dot + 1;
    }
    return changed ? 1 : 0;
}

static int apply_replace(const map_rule *r, const char *name, name_buf *b)
{
    size_t alen = strlen(r->a), blen = strlen(r->b);
    const char *p = name, *hit;
    bool changed = false;
    while ((hit = strstr(p, r->a)) != NULL) {
        if (!put(b, p, (size_t)(hit - p)) || !put(b, r->b, blen))
            return -1;
        p = hit + alen;
        changed = true;
    }
    if (!put(b, p, strlen(p)))
        return -1;
    return changed ? 1 : 0;
}

static int apply_regex(const map_rule *r, const char *name, name_buf *b)
{
    regmatch_t g[10];
    if (regexec(&r->re, name, 10, g, 0) != 0)
        return 0;
    if (!put(b, name, (size_t)g[0].rm_so))
        return -1;
    for (const char *p = r->b; *p; p++) {
        if (*p == '\\' && p[1] >= '0' && p[1] <= '9') {
            const regmatch_t *m = &g[p[1] - '0'];
            if (m->rm_so >= 0 && !put(b, name + m->rm_so, (size_t)(m->rm_eo - m->rm_so)))
                return -1;
            p++;
        } else if (*p == '\\' && p[1] == '\\') {
            if (!put(b, "\\", 1))
                return -1;
            p++;
        } else if (!put(b, p, 1)) {
            return -1;
        }
    }
    if (!put(b, name + g[0].rm_eo, strlen(name + g[0].rm_eo)))
        return -1;
    return 1;
}

/* Rule r on name: 1 changed (the new name in b), 0 unchanged, 2 dropped,
 * -1 failed (b->over: too long; else memory). */
static int apply_rule(const map_rule *r, const char *name, const ck_name_map *set,
                      name_buf *b, name_buf *tmp)
{
    b->len = 0;
    switch (r->kind) {
    case MAP_RENAME:
        if (strcmp(name, r->a) != 0)
            return 0;
        return put(b, r->b, strlen(r->b)) ? 1 : -1;
    case MAP_REPLACE:
        return apply_replace(r, name, b);
    case MAP_SEGMENT:
        return apply_segment(r, name, set, b, tmp);
    case MAP_REGEX:
        return apply_regex(r, name, b);
    case MAP_DROP:
        return any_glob(r, name) ? 2 : 0;
    case MAP_KEEP:
        return any_glob(r, name) ? 0 : 2;
    }
    return 0;
}

static bool needs_set(const map_rule *r)
{
    return r->kind == MAP_SEGMENT && r->sibling != NULL;
}

static int build_set(const name_state *s, ck_name_map *set)
{
    ck_name_map_init(set);
    for (size_t i = 0; i < s->n; i++)
        if (s->cur[i] != NULL && ck_name_map_put(set, s->cur[i], strlen(s->cur[i]),
                                                 (uint32_t)i) < 0)
            return -1;
    return 0;
}

/* One rule over every name left. */
static int run_rule(name_state *s, const map_rule *r)
{
    ck_name_map set;
    ck_name_map_init(&set);
    if (needs_set(r) && build_set(s, &set) < 0) {
        ck_name_map_free(&set);
        return ck_nomem(s->err, s->m->path);
    }
    char **next = calloc(s->n + 1, sizeof *next);
    name_buf b = {0}, tmp = {0};
    int rc = next == NULL ? ck_nomem(s->err, s->m->path) : 0;
    for (size_t i = 0; rc == 0 && i < s->n; i++) {
        if (s->cur[i] == NULL)
            continue;
        int got = apply_rule(r, s->cur[i], &set, &b, &tmp);
        if (got < 0 && (b.over || tmp.over)) {
            char q[CK_QUOTE_BUF];
            rc = ck_fail(s->err, EINVAL, "%s: line %u: '%s' would become a name longer than "
                         "%u bytes", s->m->path, r->line, ck_quote(q, s->cur[i],
                         strlen(s->cur[i])), CK_MAP_NAME_MAX);
        } else if (got < 0) {
            rc = ck_nomem(s->err, s->m->path);
        } else if (got == 1 && b.len == 0) {
            char q[CK_QUOTE_BUF];
            rc = ck_fail(s->err, EINVAL, "%s: line %u: '%s' would become an empty name",
                         s->m->path, r->line, ck_quote(q, s->cur[i], strlen(s->cur[i])));
        } else if (got == 1 && strcmp(b.s, s->cur[i]) != 0) {
            if ((next[i] = strdup(b.s)) == NULL)
                rc = ck_nomem(s->err, s->m->path);
        } else if (got == 2) {
            free(s->cur[i]);
            s->cur[i] = NULL;
            s->by[i] = r->line;
        }
    }
    for (size_t i = 0; next != NULL && i < s->n; i++)
        if (next[i] != NULL) {
            free(s->cur[i]);
            s->cur[i] = next[i];
            s->by[i] = r->line;
        }
    free(next);
    free(b.s);
    free(tmp.s);
    ck_name_map_free(&set);
    return rc;
}

static void state_free(name_state *s)
{
    for (size_t i = 0; s->cur != NULL && i < s->n; i++)
        free(s->cur[i]);
    free(s->cur);
    free(s->by);
}

/* Every rule of m over names: the outcome in s. */
static int run_map(const ck_map *m, const char *const *names, size_t n, name_state *s,
                   ck_error *err)
{
    *s = (name_state){.cur = calloc(n + 1, sizeof *s->cur), .by = calloc(n + 1, sizeof *s->by),
                      .n = n, .m = m, .err = err};
    if (s->cur == NULL || s->by == NULL)
        return ck_nomem(err, m->path);
    for (size_t i = 0; i < n; i++)
        if ((s->cur[i] = strdup(names[i])) == NULL)
            return ck_nomem(err, m->path);
    for (size_t k = 0; k < m->n; k++)
        if (run_rule(s, &m->rules[k]) < 0)
            return -1;
    return 0;
}

/* No two names the map left are one. */
static int check_distinct(const name_state *s, const char *const *names)
{
    ck_name_map set;
    ck_name_map_init(&set);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < s->n; i++) {
        if (s->cur[i] == NULL)
            continue;
        int64_t prev = ck_name_map_put(&set, s->cur[i], strlen(s->cur[i]), (uint32_t)i);
        if (prev < 0) {
            rc = ck_nomem(s->err, s->m->path);
        } else if (prev != CK_NAME_MAP_NONE) {
            char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF], q3[CK_QUOTE_BUF];
            size_t j = (size_t)prev;
            /* the later of the two rules that made them: where they met */
            unsigned line = s->by[i] > s->by[j] ? s->by[i] : s->by[j];
            rc = ck_fail(s->err, EINVAL, "%s: line %u: '%s' and '%s' would both be named '%s'",
                         s->m->path, line, ck_quote(q1, names[j], strlen(names[j])),
                         ck_quote(q2, names[i], strlen(names[i])),
                         ck_quote(q3, s->cur[i], strlen(s->cur[i])));
        }
    }
    ck_name_map_free(&set);
    return rc;
}

/* The reverse of an invertible map gives every name back. */
static int check_reverse(const ck_map *m, const name_state *s, const char *const *names,
                         ck_error *err)
{
    ck_map *rev = ck_map_reverse(m, err);
    if (rev == NULL)
        return -1;
    name_state back;
    int rc = run_map(rev, (const char *const *)s->cur, s->n, &back, err);
    for (size_t i = 0; rc == 0 && i < s->n; i++)
        if (strcmp(back.cur[i], names[i]) != 0) {
            char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF], q3[CK_QUOTE_BUF];
            rc = ck_fail(err, EINVAL, "%s: line %u: '%s' becomes '%s', which the reverse "
                         "makes '%s': the map says 'invertible' but is not, for these names",
                         m->path, s->by[i] ? s->by[i] : back.by[i],
                         ck_quote(q1, names[i], strlen(names[i])),
                         ck_quote(q2, s->cur[i], strlen(s->cur[i])),
                         ck_quote(q3, back.cur[i], strlen(back.cur[i])));
        }
    state_free(&back);
    ck_map_free(rev);
    return rc;
}

int ck_map_names(const ck_map *m, const char *const *names, size_t n, char **out,
                 ck_error *err)
{
    memset(out, 0, n * sizeof *out);
    name_state s;
    int rc = run_map(m, names, n, &s, err);
    if (rc == 0)
        rc = check_distinct(&s, names);
    if (rc == 0 && m->invertible)
        rc = check_reverse(m, &s, names, err);
    if (rc == 0) {
        memcpy(out, s.cur, n * sizeof *out);
        memset(s.cur, 0, n * sizeof *s.cur);
    }
    state_free(&s);
    return rc;
}
