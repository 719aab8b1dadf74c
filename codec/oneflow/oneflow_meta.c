/* SPDX-License-Identifier: Apache-2.0 */
#include "oneflow_meta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t ck_meta_format(const ck_dtype *dtype, const int64_t *dims, uint32_t ndim, char *buf,
                      size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "shape {\n");
    for (uint32_t i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "  dim: %" PRId64 "\n", dims[i]);
    if (n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "}\ndata_type: %s\n", dtype->of_name);
    return n < cap ? n : cap - 1;
}

/* ---- parsing (protobuf text format, VariableMetaInfo only) ---- */

enum tok_kind { TOK_END, TOK_IDENT, TOK_INT, TOK_PUNCT };

typedef struct lexer {
    const char *s;
    size_t len, pos;
    unsigned line;
    /* current token */
    enum tok_kind kind;
    const char *text;
    size_t text_len;
    ck_error *err;
} lexer;

static int lex_fail(lexer *lx, const char *what)
{
    return ck_fail(lx->err, EINVAL, "meta line %u: %s", lx->line, what);
}

static bool is_ident_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && c >= '0' && c <= '9');
}

/* Advance to the next token. */
static int lex_next(lexer *lx)
{
    for (;;) {
        if (lx->pos >= lx->len) {
            lx->kind = TOK_END;
            return 0;
        }
        char c = lx->s[lx->pos];
        if (c == '\n') {
            lx->line++;
            lx->pos++;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            lx->pos++;
        } else if (c == '#') {
            while (lx->pos < lx->len && lx->s[lx->pos] != '\n')
                lx->pos++;
        } else {
            break;
        }
    }
    size_t start = lx->pos;
    char c = lx->s[start];
    lx->text = lx->s + start;
    if (is_ident_char(c, true)) {
        while (lx->pos < lx->len && is_ident_char(lx->s[lx->pos], false))
            lx->pos++;
        lx->kind = TOK_IDENT;
    } else if ((c >= '0' && c <= '9') || c == '-') {
        lx->pos++;
        while (lx->pos < lx->len && (is_ident_char(lx->s[lx->pos], false)))
            lx->pos++;
        lx->kind = TOK_INT;
    } else if (strchr("{}<>:[],;", c) != NULL && c != '\0') {
        lx->pos++;
        lx->kind = TOK_PUNCT;
    } else {
        char what[48];
        snprintf(what, sizeof what, "unexpected byte 0x%02x", (unsigned char)c);
        return lex_fail(lx, what);
    }
    lx->text_len = lx->pos - start;
    return 0;
}

static bool is_punct(const lexer *lx, char c)
{
    return lx->kind == TOK_PUNCT && lx->text[0] == c;
}

static bool is_ident(const lexer *lx, const char *name)
{
    return lx->kind == TOK_IDENT && lx->text_len == strlen(name) &&
           memcmp(lx->text, name, lx->text_len) == 0;
}

/* An integer as protobuf's text parser reads it: decimal, 0x hex, C octal. */
static int lex_int(lexer *lx, int64_t *out)
{
    char buf[32];
    if (lx->kind != TOK_INT || lx->text_len >= sizeof buf)
        return lex_fail(lx, "expected an integer");
    memcpy(buf, lx->text, lx->text_len);
    buf[lx->text_len] = '\0';
    const char *digits = buf + (buf[0] == '-');
    int base = 10;
    if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
        base = 16;
    else if (digits[0] == '0' && digits[1] != '\0')
        base = 8;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, base);
    /* strtoll would also take spaces and a second sign after ours. */
    if (*end != '\0' || errno == ERANGE || !(digits[0] >= '0' && digits[0] <= '9'))
        return lex_fail(lx, "invalid integer");
    *out = v;
    return 0;
}

static int parse_dim_value(lexer *lx, ck_meta *m)
{
    int64_t v;
    if (lex_int(lx, &v) < 0)
        return -1;
    if (v < 0)
        return lex_fail(lx, "negative dim");
    if (m->ndim == CK_MAX_DIMS)
        return lex_fail(lx, "too many dims");
    m->dims[m->ndim++] = v;
    return lex_next(lx);
}

/* `dim: N` or `dim: [N, N, ...]`, cursor after the field name. */
static int parse_dim(lexer *lx, ck_meta *m)
{
    if (!is_punct(lx, ':'))
        return lex_fail(lx, "expected ':' after dim");
    if (lex_next(lx) < 0)
        return -1;
    if (!is_punct(lx, '['))
        return parse_dim_value(lx, m);
    if (lex_next(lx) < 0)
        return -1;
    if (is_punct(lx, ']'))
        return lex_next(lx);
    for (;;) {
        if (parse_dim_value(lx, m) < 0)
            return -1;
        if (is_punct(lx, ']'))
            return lex_next(lx);
        if (!is_punct(lx, ','))
            return lex_fail(lx, "expected ',' or ']' in the dim list");
        if (lex_next(lx) < 0)
            return -1;
    }
}

/* Skip one optional field separator. */
static int skip_separator(lexer *lx)
{
    if (is_punct(lx, ',') || is_punct(lx, ';'))
        return lex_next(lx);
    return 0;
}

/* `shape { dim: ... }`, cursor after the field name. */
static int parse_shape(lexer *lx, ck_meta *m)
{
    if (is_punct(lx, ':') && lex_next(lx) < 0)
        return -1;
    char close;
    if (is_punct(lx, '{'))
        close = '}';
    else if (is_punct(lx, '<'))
        close = '>';
    else
        return lex_fail(lx, "expected '{' after shape");
    if (lex_next(lx) < 0)
        return -1;
    while (!is_punct(lx, close)) {
        if (lx->kind == TOK_END)
            return lex_fail(lx, "shape is not closed");
        if (!is_ident(lx, "dim"))
            return lex_fail(lx, "unknown field in shape (only dim is allowed)");
        if (lex_next(lx) < 0 || parse_dim(lx, m) < 0 || skip_separator(lx) < 0)
            return -1;
    }
    return lex_next(lx);
}

static int parse_data_type(lexer *lx, ck_meta *m)
{
    if (!is_punct(lx, ':'))
        return lex_fail(lx, "expected ':' after data_type");
    if (lex_next(lx) < 0)
        return -1;
    if (lx->kind == TOK_IDENT) {
        m->dtype = ck_dtype_from_oneflow(lx->text, lx->text_len);
    } else {
        int64_t v;
        if (lex_int(lx, &v) < 0)
            return -1;
        m->dtype = ck_dtype_from_oneflow_number((long)v);
    }
    if (m->dtype == NULL)
        return lex_fail(lx, "unknown or unsupported data_type");
    return lex_next(lx);
}

static int parse(lexer *lx, ck_meta *out)
{
    bool seen_shape = false, seen_type = false;
    memset(out, 0, sizeof *out);
    if (lex_next(lx) < 0)
        return -1;
    while (lx->kind != TOK_END) {
        if (is_ident(lx, "shape")) {
            if (seen_shape)
                return lex_fail(lx, "shape given twice");
            seen_shape = true;
            if (lex_next(lx) < 0 || parse_shape(lx, out) < 0)
                return -1;
        } else if (is_ident(lx, "data_type")) {
            if (seen_type)
                return lex_fail(lx, "data_type given twice");
            seen_type = true;
            if (lex_next(lx) < 0 || parse_data_type(lx, out) < 0)
                return -1;
        } else {
            return lex_fail(lx, "unknown field (VariableMetaInfo has shape and data_type)");
        }
        if (skip_separator(lx) < 0)
            return -1;
    }
    if (!seen_type)
        return lex_fail(lx, "no data_type");
    return 0;
}

int ck_meta_parse(const char *text, size_t len, ck_meta *out, ck_error *err)
{
    lexer lx = {.s = text, .len = len, .line = 1, .err = err};
    return parse(&lx, out);
}

int ck_meta_prefix_check(const char *text, size_t len, ck_error *err)
{
    ck_meta m;
    lexer lx = {.s = text, .len = len, .line = 1, .err = err};
    if (parse(&lx, &m) == 0)
        return 0;
    /* Failed at the end, or on a token that reaches it (more bytes may
     * complete "sha" or "kFlo"): the text may be a prefix of a meta.  A
     * stray byte fails before any token reaches it. */
    if (lx.kind == TOK_END || (lx.kind != TOK_PUNCT && lx.text + lx.text_len == text + len))
        return 0;
    return -1;
}
