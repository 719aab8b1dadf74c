/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_apply: a map's rules applied to a model's tensors, their names and
 * shapes (map.h, ck_map_apply).  Each rule sees every tensor the rules
 * before it left, at once: a segment or add rule's sibling is looked up
 * among the names as they were before that rule, so a rule's own renames
 * never decide its other names.  What the rules made is then checked: no
 * two names become one, no name empty or longer than CK_MAP_NAME_MAX, and
 * for an invertible map the reverse gives every name and shape back, so
 * that a save or a conversion back can trust it.  Cost: each rule visits
 * each tensor once (a sibling is a hash lookup), and each result is
 * bounded.
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
#include "../core/tensor_index.h"

/* A tensor as the rules go: its name (owned), or NULL once dropped; by
 * the line of the last rule that changed it (0: none). */
typedef struct map_entry {
    char *name;
    long from;                  /* the input it is, or -1: an add rule's */
    const ck_dtype *dtype;      /* NULL: names alone */
    const int64_t *dims;        /* the input's, or own */
    int64_t *own;
    uint32_t ndim;
    unsigned by;
    map_view view;              /* the order an order rule read its elements in */
    unsigned view_by;           /* that rule's line */
} map_entry;

typedef struct name_state {
    map_entry *e;
    size_t n, cap;
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
    default:
        return 0; /* the layout rules: run_layout */
    }
}

static bool is_layout(const map_rule *r)
{
    return r->kind == MAP_RESHAPE || r->kind == MAP_UNSQUEEZE || r->kind == MAP_SQUEEZE ||
           map_is_order(r);
}

static const char *kind_word(const map_rule *r)
{
    static const char *const words[] = {
        [MAP_RESHAPE] = "reshape", [MAP_UNSQUEEZE] = "unsqueeze", [MAP_SQUEEZE] = "squeeze",
        [MAP_PERMUTE] = "permute", [MAP_TRANSPOSE] = "transpose",
        [MAP_QK_PERMUTE] = "qk-permute", [MAP_QK_UNPERMUTE] = "qk-unpermute",
        [MAP_ADD] = "add",
    };
    return words[r->kind] ? words[r->kind] : "?";
}

/* Rule r (a layout or order rule) on entry e: its new shape into out[],
 * *nd, and for an order rule its new order; as map_layout_shape. */
static int layout_one(const map_rule *r, map_entry *e, int64_t *out, uint32_t *nd,
                      const char **why)
{
    if (!map_is_order(r))
        return map_layout_shape(r, e->dims, e->ndim, out, nd, why);
    if (e->dtype->kind != CK_KIND_NUMERIC || e->dtype->per_byte != 0 ||
        e->dtype->itemsize == 0) {
        *why = "its elements are not whole bytes of numbers, which only a reshape can move";
        return -1;
    }
    if (map_order_shape(r, e->dims, e->ndim, &e->view, out, nd, why) < 0)
        return -1;
    e->view_by = r->line;
    return 1;
}

static int build_set(const name_state *s, ck_name_map *set)
{
    ck_name_map_init(set);
    for (size_t i = 0; i < s->n; i++)
        if (s->e[i].name != NULL && ck_name_map_put(set, s->e[i].name, strlen(s->e[i].name),
                                                    (uint32_t)i) < 0)
            return -1;
    return 0;
}

static int no_shape(const name_state *s, const map_rule *r, const char *name)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(s->err, EINVAL, "%s: line %u: tensor '%s': a '%s' rule needs the tensors' "
                   "shapes, and names alone were given", s->m->path, r->line,
                   ck_quote(q, name, strlen(name)), kind_word(r));
}

/* A layout rule over every tensor its glob matches: their new shapes. */
static int run_layout(name_state *s, const map_rule *r)
{
    int64_t dims[MAP_DIMS_MAX + 1];
    for (size_t i = 0; i < s->n; i++) {
        map_entry *e = &s->e[i];
        if (e->name == NULL || fnmatch(r->a, e->name, 0) != 0)
            continue;
        if (e->dtype == NULL)
            return no_shape(s, r, e->name);
        uint32_t nd = 0;
        const char *why = NULL;
        int got = layout_one(r, e, dims, &nd, &why);
        if (got < 0 && why == NULL)
            return ck_nomem(s->err, s->m->path);
        if (got < 0) {
            char q[CK_QUOTE_BUF], shape[128];
            ck_dims_text(e->dims, e->ndim, shape, sizeof shape);
            return ck_fail(s->err, EINVAL, "%s: line %u: tensor '%s' %s: %s", s->m->path,
                           r->line, ck_quote(q, e->name, strlen(e->name)), shape, why);
        }
        if (got == 0)
            continue;
        int64_t *own = malloc((nd + 1) * sizeof *own);
        if (own == NULL)
            return ck_nomem(s->err, s->m->path);
        memcpy(own, dims, nd * sizeof *own);
        free(e->own);
        e->dims = e->own = own;
        e->ndim = nd;
        e->by = r->line;
    }
    return 0;
}

/* Room for one more entry at s->e[at], the ones from it on moved up. */
static map_entry *insert_at(name_state *s, size_t at)
{
    if (s->n == s->cap) {
        size_t cap = s->cap * 2 + 8;
        map_entry *more = realloc(s->e, cap * sizeof *more);
        if (more == NULL)
            return NULL;
        s->e = more;
        s->cap = cap;
    }
    memmove(&s->e[at + 1], &s->e[at], (s->n - at) * sizeof *s->e);
    s->n++;
    s->e[at] = (map_entry){.from = -1};
    return &s->e[at];
}

/* The shape of the tensor r adds beside sib (NULL: alone) into out; -1
 * with err when sib lacks a dim it names. */
static int added_shape(const name_state *s, const map_rule *r, const map_entry *sib,
                       int64_t *out)
{
    for (uint32_t k = 0; k < r->n_to; k++) {
        uint32_t d = r->to[k] < 0 ? (uint32_t)(-r->to[k] - 1) : 0;
        if (r->to[k] >= 0) {
            out[k] = r->to[k];
        } else if (d < sib->ndim) {
            out[k] = sib->dims[d];
        } else {
            char q[CK_QUOTE_BUF];
            return ck_fail(s->err, EINVAL, "%s: line %u: tensor '%s' has no dim %u to give "
                           "its added '%s'", s->m->path, r->line,
                           ck_quote(q, sib->name, strlen(sib->name)), d, r->b);
        }
    }
    return 0;
}

/* One zero tensor named prefix + r->b at s->e[at], unless a tensor has
 * that name: 1 added, 0 there already. */
static int add_one(name_state *s, const map_rule *r, const ck_name_map *set, size_t at,
                   const map_entry *sib, size_t plen, name_buf *b)
{
    b->len = 0;
    if (!put(b, sib ? sib->name : "", plen) || !put(b, r->b, strlen(r->b))) {
        char q[CK_QUOTE_BUF];
        return b->over ? ck_fail(s->err, EINVAL, "%s: line %u: '%s' would add a name longer "
                                 "than %u bytes", s->m->path, r->line,
                                 ck_quote(q, sib->name, strlen(sib->name)), CK_MAP_NAME_MAX)
                       : ck_nomem(s->err, s->m->path);
    }
    if (ck_name_map_get(set, b->s, b->len) != CK_NAME_MAP_NONE)
        return 0;
    if (sib != NULL && sib->dtype == NULL)
        return no_shape(s, r, sib->name);
    int64_t *dims = malloc((r->n_to + 1) * sizeof *dims);
    char *name = strdup(b->s);
    map_entry *e = dims && name ? insert_at(s, at) : NULL;
    if (e == NULL || (sib != NULL && added_shape(s, r, &s->e[at - 1], dims) < 0)) {
        if (e != NULL) { /* undo the insert: nothing half made */
            memmove(&s->e[at], &s->e[at + 1], (--s->n - at) * sizeof *s->e);
        }
        free(dims);
        free(name);
        return e == NULL ? ck_nomem(s->err, s->m->path) : -1;
    }
    e = &s->e[at];
    if (sib == NULL)
        memcpy(dims, r->to, r->n_to * sizeof *dims);
    e->name = name;
    e->dtype = r->dtype ? r->dtype : s->e[at - 1].dtype; /* '=': the sibling's */
    e->dims = e->own = dims;
    e->ndim = r->n_to;
    e->by = r->line;
    return 1;
}

/* An add rule: its tensor beside every sibling (after it), or alone at
 * the end. */
static int run_add(name_state *s, const map_rule *r)
{
    ck_name_map set;
    name_buf b = {0};
    if (build_set(s, &set) < 0) {
        ck_name_map_free(&set);
        return ck_nomem(s->err, s->m->path);
    }
    int rc = 0;
    if (r->sibling == NULL) {
        bool shapes = s->n == 0 || s->e[0].dtype != NULL;
        rc = shapes ? add_one(s, r, &set, s->n, NULL, 0, &b) : no_shape(s, r, r->b);
    }
    size_t slen = r->sibling ? strlen(r->sibling) : 0;
    for (size_t i = 0; rc >= 0 && r->sibling != NULL && i < s->n; i++) {
        const char *name = s->e[i].name;
        size_t len = name ? strlen(name) : 0;
        if (name == NULL || s->e[i].from < 0 || len < slen ||
            strcmp(name + len - slen, r->sibling) != 0 ||
            (len > slen && name[len - slen - 1] != '.'))
            continue;
        rc = add_one(s, r, &set, i + 1, &s->e[i], len - slen, &b);
        i += rc > 0;
    }
    free(b.s);
    ck_name_map_free(&set);
    return rc < 0 ? -1 : 0;
}

/* One rule over every tensor left. */
static int run_rule(name_state *s, const map_rule *r)
{
    if (is_layout(r))
        return run_layout(s, r);
    if (r->kind == MAP_ADD)
        return run_add(s, r);
    ck_name_map set;
    ck_name_map_init(&set);
    if (r->kind == MAP_SEGMENT && r->sibling != NULL && build_set(s, &set) < 0) {
        ck_name_map_free(&set);
        return ck_nomem(s->err, s->m->path);
    }
    char **next = calloc(s->n + 1, sizeof *next);
    name_buf b = {0}, tmp = {0};
    int rc = next == NULL ? ck_nomem(s->err, s->m->path) : 0;
    for (size_t i = 0; rc == 0 && i < s->n; i++) {
        const char *cur = s->e[i].name;
        if (cur == NULL)
            continue;
        int got = apply_rule(r, cur, &set, &b, &tmp);
        char q[CK_QUOTE_BUF];
        if (got < 0 && (b.over || tmp.over)) {
            rc = ck_fail(s->err, EINVAL, "%s: line %u: '%s' would become a name longer than "
                         "%u bytes", s->m->path, r->line, ck_quote(q, cur, strlen(cur)),
                         CK_MAP_NAME_MAX);
        } else if (got < 0) {
            rc = ck_nomem(s->err, s->m->path);
        } else if (got == 1 && b.len == 0) {
            rc = ck_fail(s->err, EINVAL, "%s: line %u: '%s' would become an empty name",
                         s->m->path, r->line, ck_quote(q, cur, strlen(cur)));
        } else if (got == 1 && strcmp(b.s, cur) != 0) {
            if ((next[i] = strdup(b.s)) == NULL)
                rc = ck_nomem(s->err, s->m->path);
        } else if (got == 2) {
            free(s->e[i].name);
            s->e[i].name = NULL;
            s->e[i].by = r->line;
        }
    }
    for (size_t i = 0; next != NULL && i < s->n; i++)
        if (next[i] != NULL) {
            free(s->e[i].name);
            s->e[i].name = next[i];
            s->e[i].by = r->line;
        }
    free(next);
    free(b.s);
    free(tmp.s);
    ck_name_map_free(&set);
    return rc;
}

static void state_free(name_state *s)
{
    for (size_t i = 0; s->e != NULL && i < s->n; i++) {
        free(s->e[i].name);
        free(s->e[i].own);
        map_view_free(&s->e[i].view);
    }
    free(s->e);
}

/* Every rule of m over in[0..n), their elements in the orders views[]
 * (NULL: each the source's): the outcome in s. */
static int run_map(const ck_map *m, const ck_map_tensor *in, const map_view *views, size_t n,
                   name_state *s, ck_error *err)
{
    *s = (name_state){.e = calloc(n + 1, sizeof *s->e), .cap = n + 1, .m = m, .err = err};
    if (s->e == NULL)
        return ck_nomem(err, m->path);
    for (; s->n < n; s->n++) {
        map_entry *e = &s->e[s->n];
        *e = (map_entry){.from = (long)s->n, .dtype = in[s->n].dtype, .dims = in[s->n].dims,
                         .ndim = in[s->n].ndim};
        if ((e->name = strdup(in[s->n].name)) == NULL)
            return ck_nomem(err, m->path);
        const map_view *v = views ? &views[s->n] : NULL;
        if (v != NULL && v->n > 0) {
            e->view = (map_view){.dims = malloc(v->n * sizeof *v->dims),
                                 .step = malloc(v->n * sizeof *v->step), .n = v->n};
            if (e->view.dims == NULL || e->view.step == NULL)
                return ck_nomem(err, m->path);
            memcpy(e->view.dims, v->dims, v->n * sizeof *v->dims);
            memcpy(e->view.step, v->step, v->n * sizeof *v->step);
        }
    }
    for (size_t k = 0; k < m->n; k++)
        if (run_rule(s, &m->rules[k]) < 0)
            return -1;
    return 0;
}

/* The name a refusal gives entry e: the input's, or its own when added. */
static const char *origin(const map_entry *e, const ck_map_tensor *in)
{
    return e->from >= 0 ? in[e->from].name : e->name;
}

/* No two names the map left are one. */
static int check_distinct(const name_state *s, const ck_map_tensor *in)
{
    ck_name_map set;
    ck_name_map_init(&set);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < s->n; i++) {
        const char *cur = s->e[i].name;
        if (cur == NULL)
            continue;
        int64_t prev = ck_name_map_put(&set, cur, strlen(cur), (uint32_t)i);
        if (prev < 0) {
            rc = ck_nomem(s->err, s->m->path);
        } else if (prev != CK_NAME_MAP_NONE) {
            char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF], q3[CK_QUOTE_BUF];
            const map_entry *a = &s->e[prev], *b = &s->e[i];
            /* the later of the two rules that made them: where they met */
            unsigned line = b->by > a->by ? b->by : a->by;
            rc = ck_fail(s->err, EINVAL, "%s: line %u: '%s' and '%s' would both be named '%s'",
                         s->m->path, line, ck_quote(q1, origin(a, in), strlen(origin(a, in))),
                         ck_quote(q2, origin(b, in), strlen(origin(b, in))),
                         ck_quote(q3, cur, strlen(cur)));
        }
    }
    ck_name_map_free(&set);
    return rc;
}

/* e is tensor t again: its shape, and its elements in the source's order. */
static bool same_shape(const map_entry *e, const ck_map_tensor *t)
{
    return e->dtype == NULL ||
           (e->ndim == t->ndim && memcmp(e->dims, t->dims, t->ndim * sizeof *t->dims) == 0 &&
            e->view.n == 0);
}

/* The reverse of an invertible map gives every name and shape back. */
static int check_reverse(const ck_map *m, const name_state *s, const ck_map_tensor *in,
                         ck_error *err)
{
    ck_map *rev = ck_map_reverse(m, err);
    ck_map_tensor *mid = calloc(s->n + 1, sizeof *mid);
    map_view *views = calloc(s->n + 1, sizeof *views);
    if (rev == NULL || mid == NULL || views == NULL) {
        ck_map_free(rev);
        free(mid);
        free(views);
        return rev == NULL ? -1 : ck_nomem(err, m->path);
    }
    for (size_t i = 0; i < s->n; i++) {
        mid[i] = (ck_map_tensor){.name = s->e[i].name, .dtype = s->e[i].dtype,
                                 .dims = s->e[i].dims, .ndim = s->e[i].ndim};
        views[i] = s->e[i].view;
    }
    name_state back;
    int rc = run_map(rev, mid, views, s->n, &back, err);
    free(views);
    for (size_t i = 0; rc == 0 && i < s->n; i++) {
        const map_entry *b = &back.e[i];
        if (strcmp(b->name, in[i].name) == 0 && same_shape(b, &in[i]))
            continue;
        char q1[CK_QUOTE_BUF], q2[CK_QUOTE_BUF], q3[CK_QUOTE_BUF], d1[64], d2[64], d3[64];
        const map_entry *e = &s->e[i];
        bool shapes = e->dtype != NULL;
        if (shapes) {
            ck_dims_text(in[i].dims, in[i].ndim, d1, sizeof d1);
            ck_dims_text(e->dims, e->ndim, d2, sizeof d2);
            ck_dims_text(b->dims, b->ndim, d3, sizeof d3);
        }
        rc = ck_fail(err, EINVAL, "%s: line %u: '%s'%s%s becomes '%s'%s%s, which the reverse "
                     "makes '%s'%s%s%s: the map says 'invertible' but is not, for these "
                     "tensors",
                     m->path, e->by ? e->by : b->by, ck_quote(q1, in[i].name, strlen(in[i].name)),
                     shapes ? " " : "", shapes ? d1 : "", ck_quote(q2, e->name, strlen(e->name)),
                     shapes ? " " : "", shapes ? d2 : "", ck_quote(q3, b->name, strlen(b->name)),
                     shapes ? " " : "", shapes ? d3 : "",
                     b->view.n > 0 ? " with its elements in another order" : "");
    }
    state_free(&back);
    free(mid);
    ck_map_free(rev);
    return rc;
}

void ck_map_out_free(ck_map_out *out, size_t n)
{
    for (size_t i = 0; out != NULL && i < n; i++) {
        free(out[i].name);
        free(out[i].dims);
        free(out[i].view_dims);
        free(out[i].view_step);
    }
    free(out);
}

int ck_map_apply(const ck_map *m, const ck_map_tensor *in, size_t n, ck_map_out **out,
                 size_t *n_out, ck_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (m->needs != NULL)
        return ck_fail(err, EINVAL, "%s: the map needs %s: give it with the map's name, as "
                       "%s:%s=N", m->path, m->needs, m->name, m->needs);
    name_state s;
    int rc = run_map(m, in, NULL, n, &s, err);
    if (rc == 0)
        rc = check_distinct(&s, in);
    if (rc == 0 && m->invertible)
        rc = check_reverse(m, &s, in, err);
    ck_map_out *o = rc == 0 ? calloc(s.n + 1, sizeof *o) : NULL;
    if (rc == 0 && o == NULL)
        rc = ck_nomem(err, m->path);
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < s.n; i++) {
        map_entry *e = &s.e[i];
        if (e->name == NULL)
            continue;
        if (e->from < 0)
            map_view_free(&e->view); /* zeros: every order is theirs */
        o[k++] = (ck_map_out){.name = e->name, .from = e->from, .dtype = e->dtype,
                              .dims = e->own, .ndim = e->ndim, .view_dims = e->view.dims,
                              .view_step = e->view.step, .view_n = e->view.n,
                              .view_line = e->view_by};
        e->name = NULL;
        e->own = NULL;
        e->view = (map_view){0};
    }
    state_free(&s);
    if (rc < 0)
        return -1;
    *out = o;
    *n_out = k;
    return 0;
}

int ck_map_names(const ck_map *m, const char *const *names, size_t n, char **out,
                 ck_error *err)
{
    memset(out, 0, n * sizeof *out);
    ck_map_tensor *in = calloc(n + 1, sizeof *in);
    if (in == NULL)
        return ck_nomem(err, m->path);
    for (size_t i = 0; i < n; i++)
        in[i].name = names[i];
    ck_map_out *o;
    size_t k;
    int rc = ck_map_apply(m, in, n, &o, &k, err);
    for (size_t i = 0; rc == 0 && i < k; i++) {
        if (o[i].from >= 0) { /* names alone: no rule adds one */
            out[o[i].from] = o[i].name;
            o[i].name = NULL;
        }
    }
    if (rc == 0)
        ck_map_out_free(o, k);
    free(in);
    return rc;
}
