/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map: the map language read into rules, their reverse, and where the
 * shipped maps are (map.h; the language is docs/maps.md's).  Applying
 * the rules is map_apply.c's; the shapes of layout rules map_layout.c's.
 *
 * A line is words separated by blanks; a word may be quoted ("a b",
 * with \" and \\ inside) so that a name may hold a blank or a '#'; an
 * unquoted word starting with '#' begins a comment to the end of the
 * line.  A map is a page of rules, so the text, the rules and a word are
 * bounded (map.h), and a word is never interpreted beyond its rule: a
 * regular expression is compiled once, here, and a glob is fnmatch(3)'s.
 */
#define _GNU_SOURCE
#include "map.h"
#include "map_rules.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CKPTFS_MAPS_DIR
#define CKPTFS_MAPS_DIR "/usr/local/share/ckptfs/maps"
#endif

#define WORDS_MAX 64

/* Rules of kinds the reference needs that no map may use yet: refused by
 * name, so that a map written for a later ckptfs says what it lacks. */
static const char *const not_yet[] = {
    "split", "fuse", "concat", "cast", "keep-target",
};

typedef struct line_words {
    char *w[WORDS_MAX];
    size_t n;
} line_words;

static void words_free(line_words *lw)
{
    for (size_t i = 0; i < lw->n; i++)
        free(lw->w[i]);
    lw->n = 0;
}

/* Split line [p, end) into words; -1 with err for an unended quote, too
 * many words, or memory. */
static int split_words(const char *p, const char *end, const char *path, unsigned line,
                       line_words *lw, ck_error *err)
{
    lw->n = 0;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
            p++;
        if (p == end || *p == '#')
            return 0;
        if (lw->n == WORDS_MAX) {
            words_free(lw);
            return ck_fail(err, EINVAL, "%s: line %u: more than %d words", path, line,
                           WORDS_MAX);
        }
        char *w = malloc((size_t)(end - p) + 1);
        if (w == NULL) {
            words_free(lw);
            return ck_nomem(err, path);
        }
        size_t k = 0;
        if (*p == '"') {
            for (p++; p < end && *p != '"'; p++) {
                if (*p == '\\' && p + 1 < end && (p[1] == '"' || p[1] == '\\'))
                    p++;
                w[k++] = *p;
            }
            if (p == end) {
                free(w);
                words_free(lw);
                return ck_fail(err, EINVAL, "%s: line %u: a quoted word has no closing '\"'",
                               path, line);
            }
            p++;
        } else {
            while (p < end && *p != ' ' && *p != '\t' && *p != '\r')
                w[k++] = *p++;
        }
        w[k] = '\0';
        lw->w[lw->n++] = w;
    }
}

/* The rest of the line from word i, joined by single blanks. */
static char *join_from(const line_words *lw, size_t i)
{
    size_t len = 1;
    for (size_t k = i; k < lw->n; k++)
        len += strlen(lw->w[k]) + 1;
    char *s = malloc(len);
    if (s == NULL)
        return NULL;
    s[0] = '\0';
    for (size_t k = i; k < lw->n; k++) {
        if (k > i)
            strcat(s, " ");
        strcat(s, lw->w[k]);
    }
    return s;
}

static void rule_free(map_rule *r)
{
    free(r->a);
    free(r->b);
    free(r->sibling);
    for (size_t i = 0; i < r->n_globs; i++)
        free(r->globs[i]);
    free(r->globs);
    free(r->from);
    free(r->to);
    if (r->re_ok)
        regfree(&r->re);
}

void ck_map_free(ck_map *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++)
        if (!m->borrowed)
            rule_free(&m->rules[i]);
    free(m->rules);
    free(m->name);
    free(m->path);
    free(m->about);
    free(m->why_not);
    free(m->reverse_name);
    free(m->reverse_of);
    for (size_t i = 0; i < m->n_params; i++)
        free(m->params[i].name);
    free(m->needs);
    free(m);
}

static map_rule *new_rule(ck_map *m, map_rule_kind kind, unsigned line, ck_error *err)
{
    if (m->n == CK_MAP_RULES_MAX) {
        ck_fail(err, EINVAL, "%s: line %u: more than %d rules", m->path, line,
                CK_MAP_RULES_MAX);
        return NULL;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        map_rule *more = realloc(m->rules, cap * sizeof *more);
        if (more == NULL) {
            ck_nomem(err, m->path);
            return NULL;
        }
        m->rules = more;
        m->cap = cap;
    }
    map_rule *r = &m->rules[m->n++];
    *r = (map_rule){.kind = kind, .line = line};
    return r;
}

/* Whether word is a shipped map's name: what ck_map_find looks up. */
static bool map_name_ok(const char *s)
{
    if (s[0] == '\0' || s[0] == '.' || strlen(s) > 128)
        return false;
    for (; *s; s++)
        if (!(*s == '-' || *s == '_' || *s == '.' || (*s >= '0' && *s <= '9') ||
              (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

static int want(const line_words *lw, size_t lo, size_t hi, const char *path, unsigned line,
                const char *usage, ck_error *err)
{
    if (lw->n - 1 >= lo && lw->n - 1 <= hi)
        return 0;
    return ck_fail(err, EINVAL, "%s: line %u: usage: %s", path, line, usage);
}

/* Whether an extended regular expression is one whose compiled size and
 * matching time stay small: glibc's regcomp copies a subexpression for
 * every bound of an interval and compounds stacked quantifiers, so
 * `(a+)+++...` or `(a{255}){255}` would take memory and time without
 * end.  A map's patterns are names' shapes: at most REGEX_MAX bytes, no
 * quantifier on a quantifier, intervals of at most REGEX_BOUND_MAX and no
 * more than two of them, groups nested at most REGEX_DEPTH_MAX deep, no
 * back-reference (which makes matching exponential).  NULL, or why not. */
#define REGEX_MAX 512
#define REGEX_BOUND_MAX 32
#define REGEX_DEPTH_MAX 8
static const char *regex_unsafe(const char *re)
{
    if (strlen(re) > REGEX_MAX)
        return "longer than 512 bytes";
    unsigned depth = 0, intervals = 0;
    bool after_quantifier = false, in_bracket = false;
    for (const char *p = re; *p; p++) {
        if (in_bracket) {
            in_bracket = *p != ']' || p[-1] == '[' || (p[-1] == '^' && p[-2] == '[');
            continue;
        }
        bool quantifier = *p == '*' || *p == '+' || *p == '?' || *p == '{';
        if (quantifier && after_quantifier)
            return "a quantifier on a quantifier";
        if (*p == '\\' && p[1] >= '1' && p[1] <= '9')
            return "a back-reference";
        if (*p == '\\' && p[1] != '\0') {
            p++;
        } else if (*p == '[') {
            in_bracket = true;
        } else if (*p == '(' && ++depth > REGEX_DEPTH_MAX) {
            return "groups nested more than 8 deep";
        } else if (*p == ')' && depth > 0) {
            depth--;
        } else if (*p == '{') {
            char *end;
            unsigned long lo = strtoul(p + 1, &end, 10), hi = lo;
            if (*end == ',')
                hi = end[1] == '}' ? ULONG_MAX : strtoul(end + 1, &end, 10);
            if (++intervals > 2 || lo > REGEX_BOUND_MAX || hi > REGEX_BOUND_MAX)
                return "an interval past {32}, or more than two intervals";
        }
        after_quantifier = quantifier || (*p == '}' && after_quantifier);
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (close != NULL)
                p = close;
            after_quantifier = true;
        }
    }
    return NULL;
}

/* An axis word: a number below MAP_DIMS_MAX. */
static int take_axis(const char *w, uint32_t *axis, const char *path, unsigned line,
                     ck_error *err)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(w, &end, 10);
    if (w[0] < '0' || w[0] > '9' || *end != '\0' || errno != 0 || v >= MAP_DIMS_MAX)
        return ck_fail(err, EINVAL, "%s: line %u: an axis is a number below %d", path, line,
                       MAP_DIMS_MAX);
    *axis = (uint32_t)v;
    return 0;
}

static int take_shape(const char *w, bool infer, bool sibling, int64_t **dims, uint32_t *n,
                      const char *path, unsigned line, ck_error *err);

/* A count word (qk-permute's HEADS): a number from 1 to 2^40, or $NAME,
 * a `param` line's value. */
static int take_count(const ck_map *m, const char *w, uint64_t *v, unsigned line,
                      ck_error *err)
{
    char q[CK_QUOTE_BUF];
    if (w[0] == '$') {
        for (size_t i = 0; i < m->n_params; i++)
            if (strcmp(m->params[i].name, w + 1) == 0) {
                *v = m->params[i].value;
                return 0;
            }
        return ck_fail(err, EINVAL, "%s: line %u: '%s': no 'param' line above names it",
                       m->path, line, ck_quote(q, w, strlen(w)));
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(w, &end, 10);
    if (w[0] < '1' || w[0] > '9' || *end != '\0' || errno != 0 || n > MAP_COUNT_MAX)
        return ck_fail(err, EINVAL, "%s: line %u: '%s': a count is a number from 1 to 2^40, "
                       "or $NAME", m->path, line, ck_quote(q, w, strlen(w)));
    *v = n;
    return 0;
}

/* A permutation word "[1,0,2]" into r->to, its inverse into r->from (the
 * reverse's). */
static int take_perm(map_rule *r, const char *w, const char *path, unsigned line,
                     ck_error *err)
{
    if (take_shape(w, false, false, &r->to, &r->n_to, path, line, err) < 0)
        return -1;
    bool seen[MAP_DIMS_MAX] = {false};
    r->from = malloc((r->n_to + 1) * sizeof *r->from);
    r->n_from = r->n_to;
    for (uint32_t i = 0; r->from != NULL && i < r->n_to; i++) {
        if (r->to[i] >= r->n_to || seen[r->to[i]]) {
            char q[CK_QUOTE_BUF];
            return ck_fail(err, EINVAL, "%s: line %u: permute: '%s' names each axis from 0 "
                           "to %u once", path, line, ck_quote(q, w, strlen(w)), r->n_to - 1);
        }
        seen[r->to[i]] = true;
        r->from[r->to[i]] = i;
    }
    return r->from == NULL ? ck_nomem(err, path) : 0;
}

static int take_shape(const char *w, bool infer, bool sibling, int64_t **dims, uint32_t *n,
                      const char *path, unsigned line, ck_error *err)
{
    const char *why = map_parse_shape(w, infer, sibling, dims, n);
    if (why == NULL)
        return 0;
    char q[CK_QUOTE_BUF];
    return ck_fail(err, EINVAL, "%s: line %u: '%s': %s", path, line, ck_quote(q, w, strlen(w)),
                   why);
}

/* A layout rule (reshape, unsqueeze, squeeze, add): 1 when it was one. */
static int take_layout(ck_map *m, line_words *lw, unsigned line, ck_error *err)
{
    const char *k = lw->w[0], *path = m->path;
    map_rule r = {.line = line};
    int rc;
    if (strcmp(k, "reshape") == 0) {
        if (want(lw, 2, 3, path, line, "reshape GLOB [FROM-SHAPE] TO-SHAPE", err) < 0)
            return -1;
        r.kind = MAP_RESHAPE;
        rc = lw->n == 4 ? take_shape(lw->w[2], true, false, &r.from, &r.n_from, path, line, err)
                        : 0;
        if (rc == 0)
            rc = take_shape(lw->w[lw->n - 1], true, false, &r.to, &r.n_to, path, line, err);
    } else if (strcmp(k, "unsqueeze") == 0 || strcmp(k, "squeeze") == 0) {
        if (want(lw, 2, 2, path, line, k[0] == 'u' ? "unsqueeze GLOB AXIS" : "squeeze GLOB AXIS",
                 err) < 0)
            return -1;
        r.kind = k[0] == 'u' ? MAP_UNSQUEEZE : MAP_SQUEEZE;
        rc = take_axis(lw->w[2], &r.axis, path, line, err);
    } else if (strcmp(k, "permute") == 0) {
        if (want(lw, 2, 2, path, line, "permute GLOB [AXIS,...]", err) < 0)
            return -1;
        r.kind = MAP_PERMUTE;
        rc = take_perm(&r, lw->w[2], path, line, err);
    } else if (strcmp(k, "transpose") == 0) {
        if (lw->n != 2 && lw->n != 4)
            return ck_fail(err, EINVAL, "%s: line %u: usage: transpose GLOB [AXIS AXIS]",
                           path, line);
        r.kind = MAP_TRANSPOSE;
        r.axis2 = 1; /* a matrix's two */
        rc = lw->n == 4 ? take_axis(lw->w[2], &r.axis, path, line, err) : 0;
        if (rc == 0 && lw->n == 4)
            rc = take_axis(lw->w[3], &r.axis2, path, line, err);
    } else if (strcmp(k, "qk-permute") == 0 || strcmp(k, "qk-unpermute") == 0) {
        if (want(lw, 2, 2, path, line, k[3] == 'p' ? "qk-permute GLOB HEADS"
                                                  : "qk-unpermute GLOB HEADS", err) < 0)
            return -1;
        r.kind = k[3] == 'p' ? MAP_QK_PERMUTE : MAP_QK_UNPERMUTE;
        rc = take_count(m, lw->w[2], &r.heads, line, err);
    } else if (strcmp(k, "add") == 0) {
        const char *usage = "add NAME TYPE|= SHAPE [if SIBLING]";
        if (want(lw, 3, 5, path, line, usage, err) < 0)
            return -1;
        if (lw->n == 5 || (lw->n == 6 && strcmp(lw->w[4], "if") != 0))
            return ck_fail(err, EINVAL, "%s: line %u: usage: %s", path, line, usage);
        bool scoped = lw->n == 6;
        if (lw->w[1][0] == '\0' || (scoped && lw->w[5][0] == '\0'))
            return ck_fail(err, EINVAL, "%s: line %u: add: an empty name", path, line);
        r.kind = MAP_ADD;
        bool same = strcmp(lw->w[2], "=") == 0;
        if (same && !scoped)
            return ck_fail(err, EINVAL, "%s: line %u: add: '=' is the sibling's type, and "
                           "there is no 'if SIBLING'", path, line);
        if (!same && (r.dtype = ck_dtype_from_canonical(lw->w[2])) == NULL) {
            char q[CK_QUOTE_BUF];
            return ck_fail(err, EINVAL, "%s: line %u: add: no type '%s' (the names ckptfs-dump "
                           "shows: float32, int64, ...)", path, line,
                           ck_quote(q, lw->w[2], strlen(lw->w[2])));
        }
        rc = take_shape(lw->w[3], false, scoped, &r.to, &r.n_to, path, line, err);
    } else {
        return 0;
    }
    map_rule *to = rc == 0 ? new_rule(m, r.kind, line, err) : NULL;
    if (to == NULL) {
        free(r.from);
        free(r.to);
        return -1;
    }
    r.a = r.kind == MAP_ADD ? NULL : lw->w[1];
    r.b = r.kind == MAP_ADD ? lw->w[1] : NULL;
    r.sibling = r.kind == MAP_ADD && lw->n == 6 ? lw->w[5] : NULL;
    lw->w[1] = NULL;
    if (r.sibling != NULL)
        lw->w[5] = NULL;
    *to = r;
    return 1;
}

/* One rule line into m.  Rules that name strings take copies. */
static int take_rule(ck_map *m, line_words *lw, unsigned line, ck_error *err)
{
    const char *k = lw->w[0];
    const char *path = m->path;
    map_rule *r;
    if (strcmp(k, "rename") == 0 || strcmp(k, "replace") == 0) {
        if (want(lw, 2, 2, path, line, strcmp(k, "rename") == 0 ? "rename OLD NEW"
                                                                : "replace OLD NEW", err) < 0)
            return -1;
        if (lw->w[1][0] == '\0' || lw->w[2][0] == '\0')
            return ck_fail(err, EINVAL, "%s: line %u: %s of or to an empty string", path,
                           line, k);
        if ((r = new_rule(m, k[2] == 'n' ? MAP_RENAME : MAP_REPLACE, line, err)) == NULL)
            return -1;
        r->a = lw->w[1];
        r->b = lw->w[2];
        lw->w[1] = lw->w[2] = NULL;
        return 0;
    }
    if (strcmp(k, "segment") == 0) {
        const char *usage = "segment OLD NEW|- [if SIBLING]";
        if (want(lw, 2, 4, path, line, usage, err) < 0)
            return -1;
        if (lw->n == 4 || (lw->n == 5 && strcmp(lw->w[3], "if") != 0))
            return ck_fail(err, EINVAL, "%s: line %u: usage: %s", path, line, usage);
        const char *bad = strchr(lw->w[1], '.') ? lw->w[1] : strchr(lw->w[2], '.') ? lw->w[2]
                                                                                 : NULL;
        if (lw->w[1][0] == '\0' || lw->w[2][0] == '\0' || bad != NULL)
            return ck_fail(err, EINVAL, "%s: line %u: a segment is a non-empty name part "
                           "with no '.'", path, line);
        if (lw->n == 5 && lw->w[4][0] == '\0')
            return ck_fail(err, EINVAL, "%s: line %u: an empty sibling", path, line);
        if ((r = new_rule(m, MAP_SEGMENT, line, err)) == NULL)
            return -1;
        r->a = lw->w[1];
        r->b = strcmp(lw->w[2], "-") == 0 ? NULL : lw->w[2];
        if (r->b == NULL)
            free(lw->w[2]);
        r->sibling = lw->n == 5 ? lw->w[4] : NULL;
        lw->w[1] = lw->w[2] = NULL;
        if (lw->n == 5)
            lw->w[4] = NULL;
        return 0;
    }
    if (strcmp(k, "regex") == 0) {
        if (want(lw, 2, 2, path, line, "regex EXTENDED-RE NEW", err) < 0)
            return -1;
        const char *unsafe = regex_unsafe(lw->w[1]);
        if (unsafe != NULL)
            return ck_fail(err, EINVAL, "%s: line %u: regex: %s (a map's pattern stays "
                           "small)", path, line, unsafe);
        if ((r = new_rule(m, MAP_REGEX, line, err)) == NULL)
            return -1;
        int rc = regcomp(&r->re, lw->w[1], REG_EXTENDED);
        if (rc != 0) {
            char why[128];
            regerror(rc, &r->re, why, sizeof why);
            m->n--;
            return ck_fail(err, EINVAL, "%s: line %u: regex: %s", path, line, why);
        }
        r->re_ok = true;
        for (const char *p = lw->w[2]; *p; p++)
            if (*p == '\\' && p[1] >= '0' && p[1] <= '9' && (size_t)(p[1] - '0') > r->re.re_nsub) {
                m->n--;
                regfree(&r->re);
                return ck_fail(err, EINVAL, "%s: line %u: regex: \\%c names no group (it "
                               "has %zu)", path, line, p[1], r->re.re_nsub);
            }
        r->a = lw->w[1];
        r->b = lw->w[2];
        lw->w[1] = lw->w[2] = NULL;
        return 0;
    }
    if (strcmp(k, "drop") == 0 || strcmp(k, "keep") == 0) {
        if (lw->n < 2)
            return ck_fail(err, EINVAL, "%s: line %u: usage: %s GLOB...", path, line, k);
        map_rule_kind kind = k[0] == 'd' ? MAP_DROP : MAP_KEEP;
        /* Consecutive keep lines are one set: a name kept by any. */
        r = kind == MAP_KEEP && m->n > 0 && m->rules[m->n - 1].kind == MAP_KEEP &&
                    m->rules[m->n - 1].line_end + 1 == line
                ? &m->rules[m->n - 1]
                : new_rule(m, kind, line, err);
        if (r == NULL)
            return -1;
        char **more = realloc(r->globs, (r->n_globs + lw->n - 1) * sizeof *more);
        if (more == NULL)
            return ck_nomem(err, path);
        r->globs = more;
        for (size_t i = 1; i < lw->n; i++) {
            r->globs[r->n_globs++] = lw->w[i];
            lw->w[i] = NULL;
        }
        r->line_end = line;
        return 0;
    }
    int layout = take_layout(m, lw, line, err);
    if (layout != 0)
        return layout < 0 ? -1 : 0;
    for (size_t i = 0; i < sizeof not_yet / sizeof *not_yet; i++)
        if (strcmp(k, not_yet[i]) == 0)
            return ck_fail(err, EINVAL, "%s: line %u: '%s' rules are not built yet (this "
                           "ckptfs maps names, shapes and orders: rename, replace, segment, "
                           "regex, drop, keep, reshape, unsqueeze, squeeze, permute, transpose, "
                           "qk-permute, qk-unpermute, add)", path, line, k);
    char q[CK_QUOTE_BUF];
    return ck_fail(err, EINVAL, "%s: line %u: no rule or setting '%s' (docs/maps.md lists "
                   "them)", path, line, ck_quote(q, k, strlen(k)));
}

/* The value args ("K=V:K=V") give key, or NULL; its length in *len. */
static const char *arg_value(const char *args, const char *key, size_t *len)
{
    size_t klen = strlen(key);
    for (const char *p = args, *e; p != NULL && *p; p = e ? e + 1 : NULL) {
        e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > klen && memcmp(p, key, klen) == 0 && p[klen] == '=') {
            *len = n - klen - 1;
            return p + klen + 1;
        }
    }
    return NULL;
}

/* `param NAME [DEFAULT]`: a count the rules name as $NAME, given with
 * the map (NAME:KEY=VALUE) or its default (a count, or an earlier $NAME). */
static int take_param(ck_map *m, line_words *lw, unsigned line, ck_error *err)
{
    if (want(lw, 1, 2, m->path, line, "param NAME [DEFAULT]", err) < 0)
        return -1;
    const char *name = lw->w[1];
    bool ok = name[0] != '\0' && strlen(name) <= 64;
    for (const char *p = name; *p; p++)
        ok &= *p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z');
    if (!ok)
        return ck_fail(err, EINVAL, "%s: line %u: a param's name is letters, digits and '_'",
                       m->path, line);
    for (size_t i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return ck_fail(err, EINVAL, "%s: line %u: param %s again", m->path, line, name);
    if (m->n_params == MAP_PARAMS_MAX)
        return ck_fail(err, EINVAL, "%s: line %u: more than %d params", m->path, line,
                       MAP_PARAMS_MAX);
    size_t vlen = 0;
    const char *given = arg_value(m->args, name, &vlen);
    char word[32];
    if (given != NULL && vlen >= sizeof word)
        vlen = sizeof word - 1; /* too long for a count: take_count refuses it */
    if (given != NULL)
        snprintf(word, sizeof word, "%.*s", (int)vlen, given);
    else if (lw->n == 3)
        snprintf(word, sizeof word, "%.31s", lw->w[2]);
    else if (m->listing)
        snprintf(word, sizeof word, "1"); /* never applied: ck_map_apply refuses it */
    else
        return ck_fail(err, EINVAL, "%s: line %u: the map needs %s: give it with the map's "
                       "name, as %s:%s=N", m->path, line, name, m->name ? m->name : "NAME",
                       name);
    if (given == NULL && lw->n == 2 && m->needs == NULL && (m->needs = strdup(name)) == NULL)
        return ck_nomem(err, m->path);
    uint64_t v = 0;
    if (take_count(m, word, &v, line, err) < 0)
        return -1;
    m->params[m->n_params++] = (map_param){.name = lw->w[1], .value = v};
    lw->w[1] = NULL;
    return 0;
}

/* Every key args give is a param of m. */
static int check_args(const ck_map *m, ck_error *err)
{
    for (const char *p = m->args, *e; p != NULL && *p; p = e ? e + 1 : NULL) {
        e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        bool known = false;
        for (size_t i = 0; eq != NULL && i < m->n_params; i++)
            known |= strlen(m->params[i].name) == (size_t)(eq - p) &&
                     memcmp(m->params[i].name, p, (size_t)(eq - p)) == 0;
        if (!known) {
            char q[CK_QUOTE_BUF];
            return ck_fail(err, EINVAL, "%s: '%s': the map has no such param (its 'param' "
                           "lines name them; give them as NAME:KEY=VALUE)", m->path,
                           ck_quote(q, p, n));
        }
    }
    return 0;
}

/* A setting line (name, about, invertible, ...): 1 when it was one. */
static int take_setting(ck_map *m, line_words *lw, unsigned line, ck_error *err)
{
    const char *k = lw->w[0];
    char **slot = strcmp(k, "name") == 0 ? &m->name
                  : strcmp(k, "reverse") == 0 ? &m->reverse_name
                  : strcmp(k, "reverse-of") == 0 ? &m->reverse_of
                  : NULL;
    if (slot != NULL) {
        if (want(lw, 1, 1, m->path, line, "name|reverse|reverse-of MAP-NAME", err) < 0)
            return -1;
        if (!map_name_ok(lw->w[1]))
            return ck_fail(err, EINVAL, "%s: line %u: a map's name is letters, digits, "
                           "'-', '_' and '.', not starting with '.'", m->path, line);
        free(*slot);
        *slot = lw->w[1];
        lw->w[1] = NULL;
        return 1;
    }
    if (strcmp(k, "about") == 0 || strcmp(k, "not-invertible") == 0) {
        if (lw->n < 2)
            return ck_fail(err, EINVAL, "%s: line %u: usage: %s TEXT", m->path, line, k);
        char **to = k[0] == 'a' ? &m->about : &m->why_not;
        free(*to);
        if ((*to = join_from(lw, 1)) == NULL)
            return ck_nomem(err, m->path);
        return 1;
    }
    if (strcmp(k, "param") == 0)
        return take_param(m, lw, line, err) < 0 ? -1 : 1;
    if (strcmp(k, "invertible") == 0) {
        if (want(lw, 0, 0, m->path, line, "invertible", err) < 0)
            return -1;
        m->invertible = true;
        m->invertible_line = line;
        return 1;
    }
    return 0;
}

/* The map's own checks once every line is read. */
static int check_map(ck_map *m, ck_error *err)
{
    if (m->reverse_of != NULL) {
        if (m->n > 0 || m->invertible || m->why_not != NULL)
            return ck_fail(err, EINVAL, "%s: a reverse-of map holds only name and about "
                           "lines: its rules are the other map's", m->path);
        return 0;
    }
    if (m->invertible == (m->why_not != NULL))
        return ck_fail(err, EINVAL, "%s: a map says either 'invertible' or 'not-invertible "
                       "REASON' (docs/maps.md)", m->path);
    for (size_t i = 0; m->invertible && i < m->n; i++) {
        const map_rule *r = &m->rules[i];
        const char *none = r->kind == MAP_REGEX ? "a regex"
                           : r->kind == MAP_DROP ? "a drop"
                           : r->kind == MAP_KEEP ? "a keep"
                           : r->kind == MAP_SEGMENT && r->b == NULL ? "a segment removal"
                           : r->kind == MAP_ADD ? "an add (a tensor the source lacks)"
                           : r->kind == MAP_RESHAPE && r->from == NULL
                               ? "a reshape with no FROM-SHAPE"
                               : NULL;
        if (none != NULL)
            return ck_fail(err, EINVAL, "%s: line %u: %s has no reverse, yet line %u says "
                           "'invertible' (say 'not-invertible REASON')", m->path, r->line,
                           none, m->invertible_line);
    }
    return 0;
}

/* Default name: the file's, less ".map". */
static char *name_of_path(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 4 && strcmp(base + n - 4, ".map") == 0)
        n -= 4;
    return strndup(base, n);
}


static ck_map *parse(const char *text, size_t len, const char *path, const char *args,
                     bool listing, ck_error *err)
{
    if (len > CK_MAP_TEXT_MAX) {
        ck_fail(err, EFBIG, "%s: a map is at most %u bytes of rules; this is %zu", path,
                CK_MAP_TEXT_MAX, len);
        return NULL;
    }
    ck_map *m = calloc(1, sizeof *m);
    if (m == NULL || (m->path = strdup(path)) == NULL) {
        free(m);
        ck_nomem(err, path);
        return NULL;
    }
    m->args = args;
    m->listing = listing;
    if (memchr(text, '\0', len) != NULL) {
        ck_fail(err, EINVAL, "%s: offset %zu: a NUL byte: a map is text", path,
                (size_t)((const char *)memchr(text, '\0', len) - text));
        ck_map_free(m);
        return NULL;
    }
    const char *p = text, *end = text + len;
    unsigned line = 0;
    int rc = 0;
    line_words lw = {0};
    while (p < end && rc == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        rc = split_words(p, le, path, line, &lw, err);
        if (rc == 0 && lw.n > 0) {
            int s = take_setting(m, &lw, line, err);
            rc = s < 0 ? -1 : s == 0 ? take_rule(m, &lw, line, err) : 0;
        }
        words_free(&lw);
        p = nl ? nl + 1 : end;
    }
    if (rc == 0)
        rc = check_args(m, err);
    if (rc == 0)
        rc = check_map(m, err);
    m->args = NULL;
    if (rc == 0 && m->name == NULL && (m->name = name_of_path(path)) == NULL)
        rc = ck_nomem(err, path);
    if (rc < 0) {
        ck_map_free(m);
        return NULL;
    }
    return m;
}

/* A borrowed copy of m's rules, each inverted, in reverse order. */
static ck_map *reversed(const ck_map *m, const char *name, ck_error *err)
{
    if (!m->invertible) {
        ck_fail(err, EINVAL, "%s: map %s has no reverse: %s", m->path, m->name,
                m->why_not ? m->why_not : "it does not say it is invertible");
        return NULL;
    }
    ck_map *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->borrowed = true;
        r->rules = calloc(m->n + 1, sizeof *r->rules);
        r->path = strdup(m->path);
        r->about = strdup(m->about ? m->about : "");
        r->reverse_name = strdup(m->name);
        if (name != NULL)
            r->name = strdup(name);
        else if (asprintf(&r->name, "%s~", m->name) < 0)
            r->name = NULL;
    }
    if (r == NULL || r->rules == NULL || r->path == NULL || r->about == NULL ||
        r->reverse_name == NULL || r->name == NULL) {
        ck_map_free(r);
        ck_nomem(err, m->path);
        return NULL;
    }
    r->borrowed = true;
    r->invertible = true;
    r->n = r->cap = m->n;
    for (size_t i = 0; i < m->n; i++) {
        map_rule *to = &r->rules[m->n - 1 - i];
        *to = m->rules[i];
        if (to->kind == MAP_RESHAPE || to->kind == MAP_PERMUTE) { /* permute: from is the
                                                                  * inverse */
            to->from = m->rules[i].to;
            to->n_from = m->rules[i].n_to;
            to->to = m->rules[i].from;
            to->n_to = m->rules[i].n_from;
        } else if (to->kind == MAP_UNSQUEEZE || to->kind == MAP_SQUEEZE) {
            to->kind = to->kind == MAP_SQUEEZE ? MAP_UNSQUEEZE : MAP_SQUEEZE;
        } else if (to->kind == MAP_QK_PERMUTE || to->kind == MAP_QK_UNPERMUTE) {
            to->kind = to->kind == MAP_QK_PERMUTE ? MAP_QK_UNPERMUTE : MAP_QK_PERMUTE;
        } else if (to->kind == MAP_TRANSPOSE) {
            continue; /* its own reverse */
        } else {
            to->a = m->rules[i].b;
            to->b = m->rules[i].a;
        }
    }
    return r;
}

ck_map *ck_map_reverse(const ck_map *m, ck_error *err)
{
    return reversed(m, m->reverse_name, err);
}

const char *ck_map_name(const ck_map *m)
{
    return m->name;
}

const char *ck_map_path(const ck_map *m)
{
    return m->path;
}

bool ck_map_invertible(const ck_map *m)
{
    return m->invertible;
}

const char *ck_map_about(const ck_map *m)
{
    return m->about ? m->about : "";
}

/* dir appended to dirs (a copy in buf): whether there was room. */
static bool add_dir(const char *dirs[], size_t max, size_t *n, char *buf, size_t cap,
                    size_t *used, const char *dir, size_t len)
{
    if (len == 0 || *n == max || *used + len + 1 > cap)
        return false;
    memcpy(buf + *used, dir, len);
    buf[*used + len] = '\0';
    dirs[(*n)++] = buf + *used;
    *used += len + 1;
    return true;
}

size_t ck_map_dirs(const char *dirs[], size_t max, char *buf, size_t cap)
{
    size_t n = 0, used = 0;
    const char *env = getenv("CKPTFS_MAPS");
    for (const char *s = env, *e; s != NULL && *s; s = e ? e + 1 : NULL) {
        e = strchr(s, ':');
        add_dir(dirs, max, &n, buf, cap, &used, s, e ? (size_t)(e - s) : strlen(s));
    }
    /* The program's directory's parent: the source tree (build/..) or
     * the install's prefix (bin/..). */
    char exe[PATH_MAX], dir[PATH_MAX + 32];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[el > 0 ? el : 0] = '\0';
    for (int k = 0; k < 2; k++) {
        char *slash = strrchr(exe, '/');
        if (slash == NULL)
            break;
        *slash = '\0';
    }
    if (exe[0] == '/') {
        int len = snprintf(dir, sizeof dir, "%s/maps", exe);
        add_dir(dirs, max, &n, buf, cap, &used, dir, (size_t)len);
        len = snprintf(dir, sizeof dir, "%s/share/ckptfs/maps", exe);
        add_dir(dirs, max, &n, buf, cap, &used, dir, (size_t)len);
    }
    add_dir(dirs, max, &n, buf, cap, &used, CKPTFS_MAPS_DIR, strlen(CKPTFS_MAPS_DIR));
    return n;
}

int ck_map_find(const char *name, char *out, size_t cap, ck_error *err)
{
    size_t n = strlen(name);
    if (strchr(name, '/') != NULL || (n > 4 && strcmp(name + n - 4, ".map") == 0)) {
        if ((size_t)snprintf(out, cap, "%s", name) >= cap)
            return ck_fail(err, ENAMETOOLONG, "%s: the map's path is too long", name);
        return 0;
    }
    char q[CK_QUOTE_BUF];
    if (!map_name_ok(name))
        return ck_fail(err, EINVAL, "'%s': not a map's name nor a path (a map file is "
                       "named NAME.map)", ck_quote(q, name, n));
    const char *dirs[16];
    char buf[4 * PATH_MAX];
    size_t nd = ck_map_dirs(dirs, 16, buf, sizeof buf);
    for (size_t i = 0; i < nd; i++) {
        struct stat st;
        if ((size_t)snprintf(out, cap, "%s/%s.map", dirs[i], name) < cap &&
            stat(out, &st) == 0 && S_ISREG(st.st_mode))
            return 0;
    }
    return ck_fail(err, ENOENT, "map '%s': no such map (ckptfs --maps lists them)", name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The map names in directory dir, sorted (malloc'd strings), at most max. */
static size_t names_in(const char *dir, char **names, size_t max)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    size_t n = 0;
    struct dirent *de;
    while (n < max && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len <= 4 || strcmp(de->d_name + len - 4, ".map") != 0)
            continue;
        char *name = strndup(de->d_name, len - 4);
        if (name != NULL && map_name_ok(name))
            names[n++] = name;
        else
            free(name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    return n;
}

void ck_map_each(void (*fn)(void *arg, const char *name, const char *path), void *arg)
{
    enum { MAX = 4096 };
    const char *dirs[16];
    char buf[4 * PATH_MAX], path[PATH_MAX];
    size_t nd = ck_map_dirs(dirs, 16, buf, sizeof buf);
    char **names = calloc(MAX + 1, sizeof *names);
    for (size_t i = 0; names != NULL && i < nd; i++) {
        size_t n = names_in(dirs[i], names, MAX);
        for (size_t k = 0; k < n; k++) {
            ck_error err = {0};
            /* shown from the first directory that has it, as it is found */
            if (ck_map_find(names[k], path, sizeof path, &err) == 0 &&
                strncmp(path, dirs[i], strlen(dirs[i])) == 0 && path[strlen(dirs[i])] == '/')
                fn(arg, names[k], path);
            free(names[k]);
        }
    }
    free(names);
}

/* The text of map file path, at most CK_MAP_TEXT_MAX bytes, into *text. */
static int read_map_file(const char *path, char **text, size_t *len, ck_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return ck_fail_errno(err, e, "%s: cannot read the map", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ck_fail(err, EINVAL, "%s: a map is a regular file", path);
    }
    if ((uint64_t)st.st_size > CK_MAP_TEXT_MAX) {
        close(fd);
        return ck_fail(err, EFBIG, "%s: a map is at most %u bytes of rules; this is %lld",
                       path, CK_MAP_TEXT_MAX, (long long)st.st_size);
    }
    char *buf = malloc(CK_MAP_TEXT_MAX + 1);
    size_t got = 0;
    ssize_t r = 0;
    while (buf != NULL && got <= CK_MAP_TEXT_MAX &&
           (r = read(fd, buf + got, CK_MAP_TEXT_MAX + 1 - got)) > 0)
        got += (size_t)r;
    int e = errno;
    close(fd);
    if (buf == NULL)
        return ck_nomem(err, path);
    if (r < 0) {
        free(buf);
        return ck_fail_errno(err, e, "%s: cannot read the map", path);
    }
    *text = buf;
    *len = got; /* past the cap: ck_map_parse refuses it */
    return 0;
}

static ck_map *load_path(const char *path, const char *args, bool listing, ck_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (read_map_file(path, &text, &len, err) < 0)
        return NULL;
    ck_map *m = parse(text, len, path, args, listing, err);
    free(text);
    return m;
}

/* spec split into the map's name or path and its args: after the first
 * ':' past the last '/', unless spec is a file as it is. */
static int split_spec(const char *spec, char *name, size_t cap, const char **args,
                      ck_error *err)
{
    const char *slash = strrchr(spec, '/');
    const char *colon = strchr(slash ? slash : spec, ':');
    struct stat st;
    *args = NULL;
    if (colon == NULL || (stat(spec, &st) == 0 && S_ISREG(st.st_mode)))
        colon = spec + strlen(spec);
    else
        *args = colon + 1;
    if ((size_t)(colon - spec) >= cap)
        return ck_fail(err, ENAMETOOLONG, "%s: the map's path is too long", spec);
    memcpy(name, spec, (size_t)(colon - spec));
    name[colon - spec] = '\0';
    return 0;
}

static ck_map *load(const char *spec, bool listing, ck_error *err)
{
    char path[PATH_MAX], name[PATH_MAX];
    const char *args;
    if (split_spec(spec, name, sizeof name, &args, err) < 0 ||
        ck_map_find(name, path, sizeof path, err) < 0)
        return NULL;
    ck_map *m = load_path(path, args, listing, err);
    if (m == NULL || m->reverse_of == NULL)
        return m;
    /* The other map's reverse, one step only: a reverse-of naming another
     * reverse-of is refused, so no chain loops. */
    char other_path[PATH_MAX];
    ck_map *other = ck_map_find(m->reverse_of, other_path, sizeof other_path, err) == 0
                        ? load_path(other_path, args, listing, err)
                        : NULL;
    if (other != NULL && other->reverse_of != NULL) {
        ck_fail(err, EINVAL, "%s: reverse-of %s, itself a reverse-of: name the map that "
                "holds the rules", path, m->reverse_of);
        ck_map_free(other);
        other = NULL;
    }
    ck_map *r = other ? reversed(other, m->name, err) : NULL;
    if (r != NULL) {
        /* r borrows other's rules: own them from here. */
        r->borrowed = false;
        other->n = 0;
        free(r->about);
        r->about = m->about ? strdup(m->about) : strdup(other->about ? other->about : "");
        free(r->path);
        r->path = strdup(path);
        if (r->about == NULL || r->path == NULL) {
            ck_map_free(r);
            r = NULL;
            ck_nomem(err, path);
        }
    }
    ck_map_free(other);
    ck_map_free(m);
    return r;
}

ck_map *ck_map_parse(const char *text, size_t len, const char *path, ck_error *err)
{
    return parse(text, len, path, NULL, false, err);
}

ck_map *ck_map_parse_args(const char *text, size_t len, const char *path, const char *args,
                          ck_error *err)
{
    return parse(text, len, path, args, false, err);
}

ck_map *ck_map_load(const char *spec, ck_error *err)
{
    return load(spec, false, err);
}

ck_map *ck_map_load_listing(const char *spec, ck_error *err)
{
    return load(spec, true, err);
}

const char *ck_map_needs(const ck_map *m)
{
    return m->needs;
}
