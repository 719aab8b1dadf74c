/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_pickle: the names in a OneFlow snapshot's `pickled_data`
 * (oneflow_pickle.h), read by the symbolic pickle machine
 * (pickle/pickle_vm.h), which never executes anything.
 *
 * The few classes OneFlow's state dict is made of are its allow-list;
 * once the machine reaches STOP, the value is checked against the one
 * shape OneFlow writes: {"protocol_version": 1, "data": {name: tensor}},
 * each tensor a Parameter or Tensor called with no arguments whose state
 * is {"path": dir}.
 */
#define _GNU_SOURCE
#include "oneflow_pickle.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dir_name.h"
#include "../pickle/pickle_vm.h"

#define NONE_ID CK_PK_NONE_ID

/* The classes a global may name: everything else is refused. */
enum cls { C_ORDERED_DICT, C_TENSOR };

static const ck_pk_global allowed[] = {
    {"collections", "OrderedDict", C_ORDERED_DICT, true},
    {"oneflow.nn", "Parameter", C_TENSOR, false},
    {"oneflow", "Tensor", C_TENSOR, false},
    {"oneflow.framework.tensor", "Tensor", C_TENSOR, false},
    {"oneflow._oneflow_internal", "Tensor", C_TENSOR, false},
    {"oneflow._oneflow_internal.nn", "Parameter", C_TENSOR, false},
};

/* A pickle of CK_PICKLE_MAX_ENTRIES tensors makes about 4 nodes each. */
static const ck_pk_rules rules = {
    .what = "a OneFlow state dict",
    .globals = allowed,
    .n_globals = sizeof allowed / sizeof *allowed,
    .max_nodes = 8u * CK_PICKLE_MAX_ENTRIES + 4096u,
    .max_entries = CK_PICKLE_MAX_ENTRIES,
};

/* The pickle's value, and where a refusal goes. */
typedef struct machine {
    ck_pickle pk;
    ck_error *err;
} machine;

static int fail_at(machine *vm, size_t off, const char *what)
{
    return ck_pk_fail(&vm->pk, off, vm->err, what);
}

static int nomem(machine *vm)
{
    return ck_nomem(vm->err, vm->pk.file);
}

static const ck_pk_node *nd(const machine *vm, uint32_t id)
{
    return ck_pk_at(&vm->pk, id);
}

static const ck_pk_cell *cell_at(const machine *vm, uint32_t c)
{
    return &vm->pk.cells[c];
}

static bool str_is(const machine *vm, uint32_t id, const char *s)
{
    return ck_pk_str_is(&vm->pk, id, s);
}

/* ---- the result ---------------------------------------------------------- */

static char *copy_str(machine *vm, uint32_t id)
{
    char *s = ck_pk_strdup(&vm->pk, id);
    if (s == NULL)
        nomem(vm);
    return s;
}

/* A tensor's directory: one name, no '/', not "." or "..". */
static bool one_component(const uint8_t *s, size_t n)
{
    if (n == 0 || n > 255 || memchr(s, '/', n) != NULL || (n == 1 && s[0] == '.') ||
        (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    return ck_utf8_valid(s, n);
}

/* The state {"path": dir} of the tensor node t (the entry's cell c): a
 * tensor class called with no arguments, then given its state by BUILD. */
static long tensor_path(machine *vm, const ck_pk_cell *c)
{
    const ck_pk_node *t = nd(vm, c->val);
    if (t->kind != CK_PK_CALL || t->x != C_TENSOR)
        return fail_at(vm, t->off, "a state dict value that is not a tensor");
    if (nd(vm, t->a)->n != 0)
        return fail_at(vm, t->off, "a class called with arguments (OneFlow's state dict "
                       "has none)");
    if (t->b == NONE_ID)
        return fail_at(vm, t->off, "a tensor without a state");
    const ck_pk_node *s = nd(vm, t->b);
    if (s->kind != CK_PK_DICT)
        return fail_at(vm, s->off, "a tensor's state is not a dict");
    if (s->n != 1 || !str_is(vm, cell_at(vm, s->a)->key, "path"))
        return fail_at(vm, s->off, "a tensor's state is not {\"path\": <directory>}");
    const ck_pk_node *p = nd(vm, cell_at(vm, s->a)->val);
    if (p->kind != CK_PK_STR || !one_component(vm->pk.buf + p->x, p->n))
        return fail_at(vm, p->off, "a tensor's path is not one directory name");
    return cell_at(vm, s->a)->val;
}

/* Entry i's name (which 0) or path (which 1), by entry index. */
typedef struct by_str {
    const ck_pickle_names *names;
    int which;
} by_str;

static const char *field(const by_str *k, uint32_t i)
{
    return k->which == 0 ? k->names->v[i].name : k->names->v[i].path;
}

static int cmp_field(const void *a, const void *b, void *ctx)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    int c = strcmp(field(ctx, x), field(ctx, y));
    return c != 0 ? c : (x > y) - (x < y);
}

/* No name and no path twice: the second one is named, at its SETITEM(S)
 * (offs[i]: entry i's). */
static int no_duplicates(machine *vm, const ck_pickle_names *out, const uint32_t *offs)
{
    uint32_t *ix = malloc((out->n ? out->n : 1) * sizeof *ix);
    if (ix == NULL)
        return nomem(vm);
    int rc = 0;
    for (int which = 0; rc == 0 && which < 2; which++) {
        by_str k = {.names = out, .which = which};
        for (size_t i = 0; i < out->n; i++)
            ix[i] = (uint32_t)i;
        qsort_r(ix, out->n, sizeof *ix, cmp_field, &k);
        for (size_t i = 1; rc == 0 && i < out->n; i++) {
            const char *s = field(&k, ix[i]);
            char q[CK_QUOTE_BUF], why[CK_QUOTE_BUF + 64];
            if (strcmp(field(&k, ix[i - 1]), s) != 0)
                continue;
            snprintf(why, sizeof why, "the %s '%s' is given twice",
                     which == 0 ? "name" : "tensor directory", ck_quote(q, s, strlen(s)));
            rc = fail_at(vm, offs[ix[i]], why);
        }
    }
    free(ix);
    return rc;
}

static int entries(machine *vm, const ck_pk_node *data, ck_pickle_names *out)
{
    uint32_t *offs = malloc((data->n ? data->n : 1) * sizeof *offs);
    if (offs == NULL || (out->v = calloc(data->n ? data->n : 1, sizeof *out->v)) == NULL) {
        free(offs);
        return nomem(vm);
    }
    int rc = 0;
    for (uint32_t c = data->a; rc == 0 && c != NONE_ID; c = cell_at(vm, c)->next) {
        const ck_pk_cell *e = cell_at(vm, c);
        const ck_pk_node *k = nd(vm, e->key);
        long p = -1;
        if (k->kind != CK_PK_STR || !ck_utf8_valid(vm->pk.buf + k->x, k->n)) {
            rc = fail_at(vm, k->off, "a state dict key that is not a UTF-8 string without NUL");
            break;
        }
        if ((p = tensor_path(vm, e)) < 0) {
            rc = -1;
            break;
        }
        offs[out->n] = e->off;
        ck_pickle_entry *en = &out->v[out->n++];
        if ((en->name = copy_str(vm, e->key)) == NULL ||
            (en->path = copy_str(vm, (uint32_t)p)) == NULL)
            rc = -1;
    }
    if (rc == 0)
        rc = no_duplicates(vm, out, offs);
    free(offs);
    return rc;
}

/* OneFlow 1.0 adds its magic key, "oneflow" (in some releases "__oneflow__"),
 * mapped to None, beside the two OneFlow 0.6 to 0.9 write. */
static bool magic(const machine *vm, const ck_pk_cell *e)
{
    return (str_is(vm, e->key, "oneflow") || str_is(vm, e->key, "__oneflow__")) &&
           nd(vm, e->val)->kind == CK_PK_NONE;
}

static int result(machine *vm, ck_pickle_names *out)
{
    static const char shape[] = "not OneFlow's {\"protocol_version\": 1, \"data\": ...} dict";
    const ck_pk_node *r = nd(vm, vm->pk.root);
    const ck_pk_node *version = NULL, *data = NULL;
    unsigned magics = 0;
    if (r->kind != CK_PK_DICT || r->n < 2 || r->n > 3)
        return fail_at(vm, r->off, shape);
    for (uint32_t c = r->a; c != NONE_ID; c = cell_at(vm, c)->next) {
        const ck_pk_cell *e = cell_at(vm, c);
        if (str_is(vm, e->key, "protocol_version") && version == NULL)
            version = nd(vm, e->val);
        else if (str_is(vm, e->key, "data") && data == NULL)
            data = nd(vm, e->val);
        else if (magic(vm, e))
            magics++;
    }
    if (version == NULL || data == NULL || 2 + magics != r->n)
        return fail_at(vm, r->off, shape);
    if (version->kind != CK_PK_INT || version->x != 1)
        return fail_at(vm, version->off, "protocol_version is not 1");
    if (data->kind != CK_PK_DICT)
        return fail_at(vm, data->off, "the data is not a state dict");
    return entries(vm, data, out);
}

int ck_pickle_names_parse(const void *buf, size_t len, const char *file, ck_pickle_names *out,
                          ck_error *err)
{
    *out = (ck_pickle_names){0};
    if (len > CK_PICKLE_MAX_BYTES)
        return ck_fail(err, EFBIG, "%s: %zu bytes, more than a pickled_data ckptfs reads "
                       "(%u)", file, len, CK_PICKLE_MAX_BYTES);
    machine vm = {.err = err};
    int rc = ck_pickle_run(buf, len, file, &rules, &vm.pk, err);
    if (rc == 0)
        rc = result(&vm, out);
    ck_pickle_free(&vm.pk);
    return rc;
}

void ck_pickle_names_free(ck_pickle_names *names)
{
    for (size_t i = 0; i < names->n; i++) {
        free(names->v[i].name);
        free(names->v[i].path);
    }
    free(names->v);
    *names = (ck_pickle_names){0};
}
