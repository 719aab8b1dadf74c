/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs-diff: what differs between two models, without mounting either,
 * the comparison one would otherwise load both into numpy for.
 *
 *   ckptfs-diff [OPTIONS] A B
 *   tensors are matched by name (ck_tensor_shown_name: the mount's and
 *   ckptfs-convert's, so a model and its conversion match) and map-tensor
 *   part; reported are the
 *   tensors only in A, only in B, those whose type or shape changed, and of
 *   the others those whose bytes differ, with the largest absolute and
 *   relative difference of their elements.  Exit status as diff(1)'s: 0
 *   equal, 1 different, 2 trouble.
 *
 * A and B are opened as ckptfs-stat opens MODEL, with the same options
 * (cli_open.h) for both: one key (-o key_file or CKPTFS_KEY_HEX) serves an
 * encrypted A, an encrypted B or both.  Types compare by what the codec
 * makes of them (dtype.h), not by the format's spelling: a .ckpt Float32
 * equals a safetensors F32.  Each pair of tensors is read in chunks of the
 * same size over -j threads (chunk_pass.h), so memory stays at two chunks
 * per thread whatever the models' size; the maxima are merged so that NaN
 * wins, which makes them independent of the order of the chunks.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "chunk_pass.h"
#include "cli_open.h"
#include "../codec/core/le_bytes.h"
#include "../codec/core/model.h"
#include "tensor_stats.h"

#define PROG "ckptfs-diff"

typedef struct diff_opts {
    ck_cli_open open;
    bool json;              /* -q is open.quiet: nothing printed, no warning */
    ck_chunk_opts read;     /* -j, --chunk */
} diff_opts;

typedef enum verdict {
    ONLY_A, ONLY_B, TYPE_DIFFERS, SHAPE_DIFFERS, BYTES_DIFFER, SAME,
} verdict;

/* One line of the report: a tensor of A, of B, or of both. */
typedef struct entry {
    const ck_tensor *a, *b;
    const char *name;       /* the pair's one name (ck_tensor_shown_name) */
    size_t name_len;
    verdict v;
    ck_elem elem;           /* the pair's element type (SAME, BYTES_DIFFER) */
    double max_abs, max_rel;
} entry;

/* The largest of m and x, NaN once either is: a NaN difference is the
 * largest there is, whatever chunk it came from. */
static double max_nan(double m, double x)
{
    return isnan(m) || isnan(x) ? NAN : x > m ? x : m;
}

/* ---- comparing a pair of tensors ---- */

typedef struct pair {
    const ck_model *ma, *mb;
    entry *e;
    size_t chunk;
    /* Folded in as each thread ends (under the pass's lock). */
    bool differ;
    double max_abs, max_rel;
} pair;

typedef struct scratch {
    unsigned char *a, *b;
    bool differ;
    double max_abs, max_rel;
} scratch;

static void *scratch_new(void *ctx)
{
    pair *p = ctx;
    scratch *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->a = malloc(p->chunk);
    s->b = malloc(p->chunk);
    if (s->a == NULL || s->b == NULL) {
        free(s->a);
        free(s->b);
        free(s);
        return NULL;
    }
    return s;
}

static void scratch_done(void *ctx, void *arg)
{
    pair *p = ctx;
    scratch *s = arg;
    p->differ |= s->differ;
    p->max_abs = max_nan(p->max_abs, s->max_abs);
    p->max_rel = max_nan(p->max_rel, s->max_rel);
    free(s->a);
    free(s->b);
    free(s);
}

/* The differences of two integers, exactly until the last rounding to a
 * double: an int64 difference can overflow, its magnitude never. */
static void int_diff(ck_elem e, const unsigned char *a, const unsigned char *b, size_t i,
                     double *abs_d, double *rel_d)
{
    uint64_t d, mag;
    if (ck_elem_is_signed(e)) {
        bool wide = e == CK_ELEM_I64; /* a double holds every narrower integer */
        int64_t x = wide ? (int64_t)ck_le64(a + 8 * i) : (int64_t)ck_elem_value(e, a, i);
        int64_t y = wide ? (int64_t)ck_le64(b + 8 * i) : (int64_t)ck_elem_value(e, b, i);
        d = x > y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
        uint64_t ax = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
        uint64_t ay = y < 0 ? 0 - (uint64_t)y : (uint64_t)y;
        mag = ax > ay ? ax : ay;
    } else {
        uint64_t x = e == CK_ELEM_U64 ? ck_le64(a + 8 * i) : (uint64_t)ck_elem_value(e, a, i);
        uint64_t y = e == CK_ELEM_U64 ? ck_le64(b + 8 * i) : (uint64_t)ck_elem_value(e, b, i);
        d = x > y ? x - y : y - x;
        mag = x > y ? x : y;
    }
    *abs_d = (double)d;
    *rel_d = mag == 0 ? 0.0 : (double)d / (double)mag;
}

/* The differences of two floats (widened to double exactly): none for the
 * same value, both infinities of a sign, or NaN beside NaN. */
static void float_diff(double x, double y, double *abs_d, double *rel_d)
{
    if (x == y || (isnan(x) && isnan(y))) {
        *abs_d = *rel_d = 0.0;
        return;
    }
    double ax = fabs(x), ay = fabs(y);
    *abs_d = fabs(x - y);
    *rel_d = *abs_d / (ax > ay ? ax : ay);
}

static int pair_chunk(void *ctx, void *arg, uint64_t k, ck_error *err)
{
    pair *p = ctx;
    scratch *s = arg;
    long la = ck_chunk_read(p->ma, p->e->a, s->a, p->chunk, k, err);
    if (la < 0)
        return -1;
    long lb = ck_chunk_read(p->mb, p->e->b, s->b, p->chunk, k, err);
    if (lb < 0)
        return -1;
    if (memcmp(s->a, s->b, (size_t)la) == 0)
        return 0;
    s->differ = true;
    ck_elem e = p->e->elem;
    if (e == CK_ELEM_NONE)
        return 0;
    size_t n = (size_t)la / ck_elem_size(e);
    /* bool: its truth (any non-zero byte is True, as for numpy), 0 or 1. */
    bool by_double = ck_elem_is_float(e) || e == CK_ELEM_BOOL;
    for (size_t i = 0; i < n; i++) {
        double d, r;
        if (by_double)
            float_diff(ck_elem_value(e, s->a, i), ck_elem_value(e, s->b, i), &d, &r);
        else
            int_diff(e, s->a, s->b, i, &d, &r);
        s->max_abs = max_nan(s->max_abs, d);
        s->max_rel = max_nan(s->max_rel, r);
    }
    return 0;
}

static int compare_pair(const ck_model *ma, const ck_model *mb, entry *e, const diff_opts *o,
                        ck_error *err)
{
    const ck_tensor *a = e->a;
    e->v = SAME;
    if (a->nbytes != e->b->nbytes) { /* text of another length, say */
        e->v = BYTES_DIFFER;
        e->max_abs = e->max_rel = NAN;
        return 0;
    }
    unsigned size = e->elem == CK_ELEM_NONE ? 1 : ck_elem_size(e->elem);
    if (a->nbytes % size != 0)
        return ck_fail(err, EINVAL, "%s: tensor %s: %" PRIu64 " bytes are not whole %s "
                       "elements", ma->path, a->dir_name, a->nbytes, a->type_name);
    if (e->b->nbytes % size != 0)
        return ck_fail(err, EINVAL, "%s: tensor %s: %" PRIu64 " bytes are not whole %s "
                       "elements", mb->path, e->b->dir_name, e->b->nbytes, e->b->type_name);
    pair p = {.ma = ma, .mb = mb, .e = e, .chunk = o->read.chunk};
    ck_chunk_pass cp = {.path = ma->path, .n_chunks = (a->nbytes + p.chunk - 1) / p.chunk,
                        .threads = o->read.threads, .ctx = &p, .scratch_new = scratch_new,
                        .chunk = pair_chunk, .scratch_done = scratch_done};
    if (ck_chunk_run(&cp, err) < 0)
        return -1;
    if (p.differ)
        e->v = BYTES_DIFFER;
    e->max_abs = p.max_abs;
    e->max_rel = p.max_rel;
    return 0;
}

/* ---- matching ---- */

/* Whether two types are the same to the codec: the same numeric element
 * type whatever the format calls it; else the same kind and OneFlow type,
 * and for the types that borrow kUInt8 (packed, opaque) the same name. */
static bool same_type(const ck_dtype *a, const ck_dtype *b)
{
    if (a == b)
        return true;
    if (a == NULL || b == NULL)
        return false;
    ck_elem ea = ck_elem_of(a), eb = ck_elem_of(b);
    if (ea != CK_ELEM_NONE || eb != CK_ELEM_NONE)
        return ea == eb;
    if (a->kind != b->kind || a->of_value != b->of_value)
        return false;
    if (a->kind == CK_KIND_STR)
        return true; /* UTF-8 in both trees, whatever the file holds */
    if (a->itemsize != b->itemsize || a->per_byte != b->per_byte)
        return false;
    return a->kind == CK_KIND_NUMERIC || strcasecmp(a->ms_name, b->ms_name) == 0;
}

static bool same_shape(const ck_tensor *a, const ck_tensor *b)
{
    return a->ndim == b->ndim && memcmp(a->dims, b->dims, a->ndim * sizeof *a->dims) == 0;
}

/* A tensor with the name it is matched by: the one the mount shows and
 * ckptfs-convert writes, so a model and its conversion match. */
typedef struct named {
    const ck_tensor *t;
    const char *name;
    size_t len;
    char *own;              /* allocated name, or NULL */
} named;

static int by_name(const named *a, const named *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, n);
    if (c != 0)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return (int)a->t->part - (int)b->t->part;
}

static int cmp_named(const void *x, const void *y)
{
    return by_name(*(const named *const *)x, *(const named *const *)y);
}

/* Each live tensor of ix with its name; NULL when out of memory. */
static named *name_all(const ck_index *ix)
{
    named *v = calloc(ix->n_live + 1, sizeof *v);
    for (size_t i = 0; v != NULL && i < ix->n_live; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        v[i] = (named){.t = t, .name = t->name, .len = t->name_len};
        if (ck_tensor_has_own_name(t))
            continue;
        if ((v[i].own = ck_tensor_shown_name(t)) == NULL) {
            for (size_t j = 0; j < i; j++)
                free(v[j].own);
            free(v);
            return NULL;
        }
        v[i].name = v[i].own;
        v[i].len = strlen(v[i].own);
    }
    return v;
}

static void names_free(named *v, size_t n)
{
    for (size_t i = 0; v != NULL && i < n; i++)
        free(v[i].own);
    free(v);
}

/* ---- output ---- */

static const char *name_text(const entry *e, const ck_tensor *t, char *out, size_t cap)
{
    char q[CK_QUOTE_BUF];
    const char *part = ck_cli_part(t);
    snprintf(out, cap, "%s%s%s", ck_quote(q, e->name, e->name_len), part ? "%map." : "",
             part ? part : "");
    return out;
}

typedef struct counts {
    size_t only_a, only_b, changed, differ, same;
} counts;

static void print_text(const char *pa, const char *pb, const entry *es, size_t n,
                       const counts *c)
{
    char name[CK_QUOTE_BUF + 16], sa[512], sb[512];
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        const ck_tensor *t = e->a ? e->a : e->b;
        name_text(e, t, name, sizeof name);
        switch (e->v) {
        case ONLY_A:
            printf("only in %s: %s\n", pa, name);
            break;
        case ONLY_B:
            printf("only in %s: %s\n", pb, name);
            break;
        case TYPE_DIFFERS:
        case SHAPE_DIFFERS:
            ck_dims_text(e->a->dims, e->a->ndim, sa, sizeof sa);
            ck_dims_text(e->b->dims, e->b->ndim, sb, sizeof sb);
            printf("%s differs: %s: %s %s, %s %s\n", e->v == TYPE_DIFFERS ? "type" : "shape",
                   name, e->a->type_name, sa, e->b->type_name, sb);
            break;
        case BYTES_DIFFER:
            if (e->elem == CK_ELEM_NONE)
                printf("bytes differ: %s (not numeric)\n", name);
            else
                printf("values differ: %s: max abs %.9g, max rel %.9g\n", name, e->max_abs,
                       e->max_rel);
            break;
        case SAME:
            break;
        }
    }
    if (c->only_a + c->only_b + c->changed + c->differ == 0)
        printf("identical\n");
    else
        printf("differ: %zu only in A, %zu only in B, %zu changed type or shape, "
               "%zu of %zu in both with other bytes\n", c->only_a, c->only_b,
               c->changed, c->differ, c->differ + c->same);
}

/* A difference: a number, or "nan" / "inf" (JSON has neither). */
static json_t *jdiff(double v)
{
    if (isnan(v))
        return json_string("nan");
    if (isinf(v))
        return json_string("inf");
    return json_real(v);
}

static json_t *jname(const entry *e)
{
    json_t *name = json_stringn(e->name, e->name_len);
    if (name == NULL) { /* not UTF-8: the escaped form, as in the tree */
        char q[CK_QUOTE_BUF];
        name = json_string(ck_quote(q, e->name, e->name_len));
    }
    return name;
}

static json_t *jside(const ck_tensor *t)
{
    json_t *shape = json_array();
    for (uint32_t i = 0; i < t->ndim; i++)
        json_array_append_new(shape, json_integer(t->dims[i]));
    return json_pack("{s:s, s:s, s:o}", "dir", t->dir_name, "type", t->type_name,
                     "shape", shape);
}

static const char *verdict_name(verdict v)
{
    static const char *names[] = {"only_a", "only_b", "type", "shape", "differ", "identical"};
    return names[v];
}

static int print_json(const ck_model *ma, const ck_model *mb,
                      const entry *es, size_t n, const counts *c)
{
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        const entry *e = &es[i];
        const ck_tensor *t = e->a ? e->a : e->b;
        json_t *o = json_object();
        json_object_set_new(o, "name", jname(e));
        if (ck_cli_part(t) != NULL)
            json_object_set_new(o, "part", json_string(ck_cli_part(t)));
        json_object_set_new(o, "status", json_string(verdict_name(e->v)));
        if (e->a)
            json_object_set_new(o, "a", jside(e->a));
        if (e->b)
            json_object_set_new(o, "b", jside(e->b));
        if (e->v == SAME || e->v == BYTES_DIFFER) {
            json_object_set_new(o, "numeric", json_boolean(e->elem != CK_ELEM_NONE));
            json_object_set_new(o, "bit_identical", json_boolean(e->v == SAME));
            if (e->elem != CK_ELEM_NONE) {
                json_object_set_new(o, "max_abs", jdiff(e->max_abs));
                json_object_set_new(o, "max_rel", jdiff(e->max_rel));
            }
        }
        json_array_append_new(list, o);
    }
    bool same = c->only_a + c->only_b + c->changed + c->differ == 0;
    json_t *doc = json_pack("{s:{s:s, s:s}, s:{s:s, s:s}, s:b, s:{s:I, s:I, s:I, s:I, s:I}, s:o}",
                            "a", "file", ma->path, "format", ma->format->name,
                            "b", "file", mb->path, "format", mb->format->name,
                            "identical", same,
                            "counts", "only_a", (json_int_t)c->only_a,
                            "only_b", (json_int_t)c->only_b, "changed", (json_int_t)c->changed,
                            "differ", (json_int_t)c->differ, "same", (json_int_t)c->same,
                            "tensors", list);
    int rc = doc == NULL || json_dumpf(doc, stdout, JSON_INDENT(1)) < 0 ? -1 : 0;
    printf("\n");
    json_decref(doc);
    return rc;
}

/* ---- the command line ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [OPTIONS] A B\n"
            "Compare two models tensor by tensor (matched by name): the tensors only in A,\n"
            "only in B, with another type or shape, and of the others those whose bytes\n"
            "differ, with the largest absolute and relative difference of their elements.\n"
            "Types compare as the codec reads them: a .ckpt Float32 equals a safetensors F32.\n"
            "  --json                one JSON document instead of lines\n"
            "  -q, --quiet           print nothing, no warning either: the exit status says it\n"
            "  -j N                  threads reading a tensor (default: the online CPUs)\n"
            "  --chunk=SIZE          bytes read at a time per thread and model (default 4M)\n"
            "  --nocrc               do not verify a .ckpt CRC trailer\n"
            "  --no-index            neither read nor save a .ckpt's index (ckptfs(1));\n"
            "  -o index_dir=DIR      where it is kept (default ~/.cache/ckptfs)\n"
            "  -o key_file=PATH      key of an encrypted A or B, one for both (or CKPTFS_KEY_HEX)\n"
            "  -o tmp_max=SIZE       most a zstd model without seek table may take in $TMPDIR\n"
            "  -o strategy=FILE      A and B are distributed checkpoints' directories\n"
            "  -o A,B                several -o options at once (a comma in a value: \\,)\n"
            "  -h, --help; -V, --version\n"
            "A, B: a file ckptfs reads, an iteration_<N> directory, a OneFlow snapshot\n"
            "directory, a Hugging Face model folder (config.json beside model.safetensors,\n"
            "its .index.json or pytorch_model.bin: that file), or with -o strategy a\n"
            "distributed checkpoint's directory; the options apply to both.\n"
            "Exit status (as diff's): 0 the same tensors, types, shapes and bytes; 1 they\n"
            "differ; 2 trouble (a usage error, a file that cannot be read).\n");
}

/* Every tensor of A in A's order (with its match in B), then those of B
 * no tensor of A matched, in B's order.  The entries' names live in
 * *na and *nb (each model's, in its order), freed by the caller. */
static entry *match(const ck_model *ma, const ck_model *mb, size_t *n_out, named **na,
                    named **nb)
{
    const ck_index *ia = &ma->index, *ib = &mb->index;
    entry *es = calloc(ia->n_live + ib->n_live + 1, sizeof *es);
    const named **sorted = calloc(ib->n_live + 1, sizeof *sorted);
    bool *used = calloc(ib->n_live + 1, sizeof *used);
    size_t n = 0;
    *na = name_all(ia);
    *nb = name_all(ib);
    if (es == NULL || sorted == NULL || used == NULL || *na == NULL || *nb == NULL) {
        free(es);
        es = NULL;
        goto out;
    }
    for (size_t i = 0; i < ib->n_live; i++)
        sorted[i] = &(*nb)[i];
    qsort(sorted, ib->n_live, sizeof *sorted, cmp_named);
    for (size_t i = 0; i < ia->n_live; i++) {
        const named *a = &(*na)[i];
        const named **hit = bsearch(&a, sorted, ib->n_live, sizeof *sorted, cmp_named);
        entry *e = &es[n++];
        *e = (entry){.a = a->t, .v = ONLY_A, .name = a->name, .name_len = a->len};
        if (hit != NULL) {
            e->b = (*hit)->t;
            used[hit - sorted] = true;
            e->v = !same_type(a->t->dtype, e->b->dtype) ? TYPE_DIFFERS
                   : !same_shape(a->t, e->b) ? SHAPE_DIFFERS : SAME;
            e->elem = ck_elem_of(a->t->dtype);
        }
    }
    for (size_t i = 0; i < ib->n_live; i++) {
        const named *b = &(*nb)[i];
        const named **hit = bsearch(&b, sorted, ib->n_live, sizeof *sorted, cmp_named);
        if (hit != NULL && !used[hit - sorted]) {
            used[hit - sorted] = true; /* a name twice in B is reported once */
            es[n++] = (entry){.b = b->t, .v = ONLY_B, .name = b->name, .name_len = b->len};
        }
    }
out:
    free(sorted);
    free(used);
    *n_out = n;
    return es;
}

/* An option of ckptfs-diff's own at argv[*i] (ck_cli_args): 1 taken, 0
 * not one, -1 a bad value. */
static int own_arg(void *ctx, int argc, char **argv, int *i)
{
    diff_opts *o = ctx;
    int took = ck_chunk_opt_arg(&o->read, argc, argv, i);
    if (took != 0)
        return took;
    if (strcmp(argv[*i], "--json") == 0)
        o->json = true;
    else
        return 0;
    return 1;
}

int main(int argc, char **argv)
{
    diff_opts o = {.read = ck_chunk_opts_default()};
    const char *path[2] = {NULL, NULL};
    ck_cli_args args = {.prog = PROG, .usage = usage, .open = &o.open, .own = own_arg,
                        .ctx = &o, .pos = path, .max_pos = 2};
    int got = ck_cli_read_args(&args, argc, argv);
    if (got > 0)
        return 0; /* --help, --version */
    if (got < 0 || path[1] == NULL) {
        if (got == 0)
            fprintf(stderr, PROG ": %s; ", path[0] ? "no B given" : "no A and B given");
        fprintf(stderr, "usage: " PROG " [OPTIONS] A B (try --help)\n");
        return 2;
    }
    o.open.key_optional = true; /* one key serves A, B or both */
    ck_error err = {0};
    ck_model *m[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        if ((k == 0 && ck_cli_load_key(&o.open, &err) < 0) ||
            (m[k] = ck_cli_open_model(&o.open, path[k], &err)) == NULL) {
            fprintf(stderr, PROG ": %s\n", err.msg);
            if (k == 1)
                ck_model_close(m[0]);
            ck_cli_key_wipe(&o.open);
            return 2;
        }
    }
    ck_cli_key_wipe(&o.open);
    size_t n = 0;
    named *na = NULL, *nb = NULL;
    entry *es = match(m[0], m[1], &n, &na, &nb);
    counts c = {0};
    int rc = es == NULL ? 2 : 0;
    if (es == NULL)
        fprintf(stderr, PROG ": out of memory\n");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        entry *e = &es[i];
        if (e->v == SAME && compare_pair(m[0], m[1], e, &o, &err) < 0) {
            char q[CK_QUOTE_BUF];
            fprintf(stderr, PROG ": %s (tensor %s)\n", err.msg,
                    ck_quote(q, e->name, e->name_len));
            rc = 2;
        }
        switch (e->v) {
        case ONLY_A: c.only_a++; break;
        case ONLY_B: c.only_b++; break;
        case TYPE_DIFFERS: case SHAPE_DIFFERS: c.changed++; break;
        case BYTES_DIFFER: c.differ++; break;
        case SAME: c.same++; break;
        }
    }
    if (rc == 0 && !o.open.quiet && o.json)
        rc = print_json(m[0], m[1], es, n, &c) < 0 ? 2 : 0;
    else if (rc == 0 && !o.open.quiet)
        print_text(path[0], path[1], es, n, &c);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, PROG ": cannot write the output: %s\n", strerror(errno));
        rc = 2;
    }
    if (rc == 0)
        rc = c.only_a + c.only_b + c.changed + c.differ == 0 ? 0 : 1;
    free(es);
    names_free(na, m[0]->index.n_live);
    names_free(nb, m[1]->index.n_live);
    ck_model_close(m[0]);
    ck_model_close(m[1]);
    return rc;
}
