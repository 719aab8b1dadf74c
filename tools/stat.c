/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs-stat: the statistics of a model's tensors without mounting it,
 * the numbers one would otherwise load the model into numpy for.
 *
 *   ckptfs-stat [OPTIONS] MODEL [TENSOR...]
 *   per tensor (those the TENSOR names or shell globs select, in their order,
 *   ck_cli_select; else every one in file order): name, type (its canonical
 *   name, dtype.h, as ckptfs-dump prints it),
 *   shape, element count, min, max, mean, standard deviation (population),
 *   counts of NaN, +Inf, -Inf and zeros; --hist[=BINS] adds a histogram of
 *   the finite values over [min, max] (--hist-log: its bars on a log scale,
 *   bar_length); --json prints one JSON document.
 *
 * MODEL is anything ckptfs-dump opens, with the same options (cli_open.h).
 * Each tensor is read through the codec in chunks (--chunk, 4 MiB by
 * default) by -j threads (the online CPUs by default; chunk_pass.h), so memory stays at a
 * chunk per thread whatever the model's size; every chunk's partial result
 * is kept in chunk order and merged in that order, so the numbers do not
 * depend on the number of threads at all (tensor_stats.h).  A histogram
 * needs min and max first: it is a second pass over the tensor.  On a
 * terminal (stderr, without -q) a progress bar counts the bytes read, both
 * passes, and is cleared before the table is printed (progress.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_pass.h"
#include "cli_open.h"
#include "../codec/core/model.h"
#include "../codec/core/progress.h"
#include "tensor_stats.h"

#define PROG "ckptfs-stat"
#define BINS_DEFAULT 10
#define BINS_MAX 100000u

typedef struct stat_opts {
    ck_cli_open open;
    bool json;
    unsigned bins;          /* 0: no histogram */
    bool hist_log;          /* --hist-log: the table's bars on a log scale */
    ck_chunk_opts read;     /* -j, --chunk */
    ck_progress *progress;  /* the bar over the bytes read (NULL: none) */
} stat_opts;

/* What is printed for one tensor. */
typedef struct result {
    const ck_tensor *t;
    ck_elem elem;
    ck_stats s;
    uint64_t *counts;       /* bins of them, with a histogram of finite values */
    double *edges;          /* bins + 1 */
} result;

/* One pass over a tensor (chunk_pass.h): the statistics of each chunk, or
 * its histogram counts. */
typedef struct pass {
    const ck_model *m;
    const result *r;
    unsigned bins;
    size_t chunk;           /* o->chunk, or larger for a huge tensor (ck_chunk_size) */
    ck_stats *parts;        /* first pass: one per chunk, merged in order */
    uint64_t *counts;       /* second pass: summed as each thread ends */
    ck_progress *progress;  /* counts each chunk read (NULL: none) */
} pass;

/* A thread's scratch: a chunk's bytes, and on the second pass its counts. */
typedef struct scratch {
    unsigned char *buf;
    uint64_t *counts;
} scratch;

static void *scratch_new(void *ctx)
{
    pass *p = ctx;
    scratch *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->buf = malloc(p->chunk);
    s->counts = p->counts != NULL ? calloc(p->bins, sizeof *s->counts) : NULL;
    if (s->buf == NULL || (p->counts != NULL && s->counts == NULL)) {
        free(s->buf);
        free(s->counts);
        free(s);
        return NULL;
    }
    return s;
}

static void scratch_done(void *ctx, void *arg)
{
    pass *p = ctx;
    scratch *s = arg;
    for (unsigned i = 0; s->counts != NULL && i < p->bins; i++)
        p->counts[i] += s->counts[i];
    free(s->counts);
    free(s->buf);
    free(s);
}

static int pass_chunk(void *ctx, void *arg, uint64_t k, ck_error *err)
{
    pass *p = ctx;
    scratch *s = arg;
    unsigned size = ck_elem_size(p->r->elem);
    long len = ck_chunk_read(p->m, p->r->t, s->buf, p->chunk, k, err);
    if (len < 0)
        return -1;
    ck_progress_add(p->progress, (uint64_t)len);
    if (p->parts != NULL)
        ck_stats_add(&p->parts[k], p->r->elem, s->buf, (size_t)len / size);
    else
        ck_hist_add(s->counts, p->r->edges, p->bins, p->r->elem, s->buf, (size_t)len / size);
    return 0;
}

static int stat_tensor(const ck_model *m, result *r, const stat_opts *o, ck_error *err)
{
    const ck_tensor *t = r->t;
    unsigned size = ck_elem_size(r->elem);
    ck_stats_init(&r->s);
    if (r->elem == CK_ELEM_NONE)
        return 0;
    if (t->nbytes % size != 0)
        return ck_fail(err, EINVAL, "%s: tensor %s: %" PRIu64 " bytes are not whole %s "
                       "elements", m->path, t->dir_name, t->nbytes,
                       ck_dtype_canonical_name(t->dtype));
    pass p = {.m = m, .r = r, .bins = o->bins, .chunk = ck_chunk_size(t->nbytes, o->read.chunk),
              .progress = o->progress};
    ck_chunk_pass cp = {.path = m->path, .n_chunks = (t->nbytes + p.chunk - 1) / p.chunk,
                        .threads = o->read.threads, .ctx = &p, .scratch_new = scratch_new,
                        .chunk = pass_chunk, .scratch_done = scratch_done};
    int rc = 0;
    if ((p.parts = calloc(cp.n_chunks ? cp.n_chunks : 1, sizeof *p.parts)) == NULL)
        rc = ck_nomem(err, m->path);
    if (rc == 0)
        rc = ck_chunk_run(&cp, err);
    for (uint64_t k = 0; rc == 0 && k < cp.n_chunks; k++)
        ck_stats_merge(&r->s, &p.parts[k], r->elem);
    free(p.parts);
    p.parts = NULL;
    if (rc == 0 && o->bins > 0 && r->s.finite > 0) {
        r->counts = calloc(o->bins, sizeof *r->counts);
        r->edges = malloc(((size_t)o->bins + 1) * sizeof *r->edges);
        if (r->counts == NULL || r->edges == NULL) {
            rc = ck_nomem(err, m->path);
        } else {
            ck_hist_edges(&r->s, o->bins, r->edges);
            p.counts = r->counts;
            rc = ck_chunk_run(&cp, err);
        }
    } else if (rc == 0 && o->bins > 0) {
        ck_progress_add(o->progress, t->nbytes); /* no finite value: no second pass */
    }
    return rc;
}

/* What the bar counts to: the bytes of the numeric tensors selected, read
 * once, twice with a histogram (a tensor with no finite value skips the
 * second pass, and is counted done instead). */
static uint64_t bytes_to_read(const ck_index *ix, const size_t *sel, size_t n_sel,
                              unsigned bins)
{
    uint64_t sum = 0;
    for (size_t s = 0; s < n_sel; s++) {
        const ck_tensor *t = &ix->tensors[ix->live[sel[s]]];
        if (ck_elem_of(t->dtype) != CK_ELEM_NONE)
            sum += t->nbytes * (bins > 0 ? 2 : 1);
    }
    return sum;
}

/* ---- output ---- */

static uint64_t elements(const result *r)
{
    return r->t->nbytes / ck_elem_size(r->elem);
}

/* An integer extreme, exactly: the type's own integer. */
static void extreme_text(const result *r, bool is_max, char *out, size_t cap)
{
    const ck_stats *s = &r->s;
    if (ck_elem_is_float(r->elem))
        snprintf(out, cap, "%.6g", is_max ? s->max : s->min);
    else if (ck_elem_is_signed(r->elem))
        snprintf(out, cap, "%" PRId64, is_max ? s->imax : s->imin);
    else
        snprintf(out, cap, "%" PRIu64, is_max ? s->umax : s->umin);
}

enum { COL_NAME, COL_TYPE, COL_SHAPE, COL_COUNT, COL_MIN, COL_MAX, COL_MEAN, COL_STD,
       COL_NAN, COL_PINF, COL_NINF, COL_ZEROS, N_COLS };
#define CELL 128

static void row_cells(const result *r, char cells[N_COLS][CELL])
{
    const ck_tensor *t = r->t;
    char q[CK_QUOTE_BUF];
    const char *part = ck_cli_part(t);
    snprintf(cells[COL_NAME], CELL, "%s%s%s", ck_quote(q, t->name, t->name_len),
             part ? "%map." : "", part ? part : "");
    snprintf(cells[COL_TYPE], CELL, "%s", ck_dtype_canonical_name(t->dtype));
    ck_dims_text(t->dims, t->ndim, cells[COL_SHAPE], CELL);
    for (int c = COL_COUNT; c < N_COLS; c++)
        snprintf(cells[c], CELL, "%s", c == COL_COUNT && r->elem == CK_ELEM_NONE ? "not numeric"
                                       : r->elem == CK_ELEM_NONE ? "" : "-");
    if (r->elem == CK_ELEM_NONE)
        return;
    const ck_stats *s = &r->s;
    snprintf(cells[COL_COUNT], CELL, "%" PRIu64, elements(r));
    if (s->finite > 0) {
        extreme_text(r, false, cells[COL_MIN], CELL);
        extreme_text(r, true, cells[COL_MAX], CELL);
        snprintf(cells[COL_MEAN], CELL, "%.6g", ck_stats_mean(s));
        snprintf(cells[COL_STD], CELL, "%.6g", ck_stats_std(s));
    }
    uint64_t n[] = {s->nan, s->posinf, s->neginf, s->zeros};
    for (int c = COL_NAN; c <= COL_ZEROS; c++)
        snprintf(cells[c], CELL, "%" PRIu64, n[c - COL_NAN]);
}

#define BAR_MAX 40

/* The length of a bin's bar: linear, count / most of BAR_MAX; or with
 * log, log10(count + 1) / log10(most + 1) of it, at least 1 for a bin that
 * is not empty, so that a tail of a few elements beside millions shows. */
static int bar_length(uint64_t count, uint64_t most, bool log)
{
    if (most == 0 || count == 0)
        return 0;
    if (!log && count <= UINT64_MAX / BAR_MAX)
        return (int)(BAR_MAX * count / most); /* exact, as it always was */
    if (!log)
        return (int)(BAR_MAX * (count / (double)most)); /* 40 * count would overflow */
    int bar = (int)(BAR_MAX * log10((double)count + 1) / log10((double)most + 1));
    return bar < 1 ? 1 : bar > BAR_MAX ? BAR_MAX : bar;
}

static void print_hist(const result *r, const char *name, unsigned bins, bool log)
{
    static const char hashes[] = "########################################";
    uint64_t most = 0;
    for (unsigned b = 0; b < bins; b++)
        most = r->counts[b] > most ? r->counts[b] : most;
    printf("\nhistogram of %s (%u bins, finite values%s):\n", name, bins,
           log ? ", log scale" : "");
    for (unsigned b = 0; b < bins; b++) {
        int bar = bar_length(r->counts[b], most, log);
        printf("  [%12.6g, %12.6g%c %12" PRIu64 "%s%.*s\n", r->edges[b], r->edges[b + 1],
               b + 1 == bins ? ']' : ')', r->counts[b], bar ? " " : "", bar, hashes);
    }
}

static void print_table(const result *rs, size_t n, unsigned bins, bool log)
{
    static const char *head[N_COLS] = {"tensor", "type", "shape", "count", "min", "max",
                                       "mean", "std", "nan", "+inf", "-inf", "zeros"};
    size_t width[N_COLS];
    char (*cells)[N_COLS][CELL] = calloc(n ? n : 1, sizeof *cells);
    if (cells == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(1);
    }
    for (int c = 0; c < N_COLS; c++)
        width[c] = strlen(head[c]);
    for (size_t i = 0; i < n; i++) {
        row_cells(&rs[i], cells[i]);
        for (int c = 0; c < N_COLS; c++)
            if (!(rs[i].elem == CK_ELEM_NONE && c == COL_COUNT) && strlen(cells[i][c]) > width[c])
                width[c] = strlen(cells[i][c]);
    }
    /* Names and words left-aligned, numbers right-aligned; nothing after the
     * last column, so no line ends in spaces. */
    for (int c = 0; c < N_COLS; c++)
        printf(c < COL_COUNT ? "%s%-*s" : "%s%*s", c ? "  " : "", (int)width[c], head[c]);
    printf("\n");
    for (size_t i = 0; i < n; i++) {
        int last = rs[i].elem == CK_ELEM_NONE ? COL_COUNT : N_COLS - 1;
        for (int c = 0; c <= last; c++) {
            int w = c == last && c < COL_COUNT ? 0 : (int)width[c];
            if (c == COL_COUNT && rs[i].elem == CK_ELEM_NONE)
                w = 0;
            printf(c < COL_COUNT || w == 0 ? "%s%-*s" : "%s%*s", c ? "  " : "", w,
                   cells[i][c]);
        }
        printf("\n");
    }
    for (size_t i = 0; i < n && bins > 0; i++)
        if (rs[i].counts != NULL)
            print_hist(&rs[i], cells[i][COL_NAME], bins, log);
    free(cells);
}

/* A double, or null where it is undefined (JSON has no NaN). */
static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* jansson's integers are signed 64-bit: a uint64 above INT64_MAX is given
 * as its decimal digits, a string, rather than rounded. */
static json_t *juint(uint64_t v)
{
    char digits[24];
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    snprintf(digits, sizeof digits, "%" PRIu64, v);
    return json_string(digits);
}

static json_t *jextreme(const result *r, bool is_max)
{
    const ck_stats *s = &r->s;
    if (s->finite == 0)
        return json_null();
    if (ck_elem_is_float(r->elem))
        return jnum(is_max ? s->max : s->min);
    if (ck_elem_is_signed(r->elem))
        return json_integer(is_max ? s->imax : s->imin);
    return juint(is_max ? s->umax : s->umin);
}

static json_t *tensor_json(const result *r, unsigned bins)
{
    const ck_tensor *t = r->t;
    json_t *o = json_object(), *shape = json_array();
    json_t *name = json_stringn(t->name, t->name_len);
    if (name == NULL) { /* not UTF-8: the escaped form, as in the tree */
        char q[CK_QUOTE_BUF];
        name = json_string(ck_quote(q, t->name, t->name_len));
    }
    json_object_set_new(o, "name", name);
    if (ck_cli_part(t) != NULL)
        json_object_set_new(o, "part", json_string(ck_cli_part(t)));
    json_object_set_new(o, "dir", json_string(t->dir_name));
    json_object_set_new(o, "type", json_string(ck_dtype_canonical_name(t->dtype)));
    for (uint32_t i = 0; i < t->ndim; i++)
        json_array_append_new(shape, json_integer(t->dims[i]));
    json_object_set_new(o, "shape", shape);
    bool num = r->elem != CK_ELEM_NONE;
    json_object_set_new(o, "numeric", json_boolean(num));
    if (!num)
        return o;
    const ck_stats *s = &r->s;
    json_object_set_new(o, "count", json_integer((json_int_t)elements(r)));
    json_object_set_new(o, "min", jextreme(r, false));
    json_object_set_new(o, "max", jextreme(r, true));
    json_object_set_new(o, "mean", jnum(ck_stats_mean(s)));
    json_object_set_new(o, "std", jnum(ck_stats_std(s)));
    json_object_set_new(o, "nan", json_integer((json_int_t)s->nan));
    json_object_set_new(o, "posinf", json_integer((json_int_t)s->posinf));
    json_object_set_new(o, "neginf", json_integer((json_int_t)s->neginf));
    json_object_set_new(o, "zeros", json_integer((json_int_t)s->zeros));
    if (bins > 0) {
        json_t *h = json_null();
        if (r->counts != NULL) {
            json_t *edges = json_array(), *counts = json_array();
            for (unsigned b = 0; b <= bins; b++)
                json_array_append_new(edges, json_real(r->edges[b]));
            for (unsigned b = 0; b < bins; b++)
                json_array_append_new(counts, json_integer((json_int_t)r->counts[b]));
            h = json_pack("{s:o, s:o}", "edges", edges, "counts", counts);
        }
        json_object_set_new(o, "hist", h);
    }
    return o;
}

static int print_json(const ck_model *m, const result *rs, size_t n, unsigned bins)
{
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, tensor_json(&rs[i], bins));
    json_t *doc = json_pack("{s:s, s:s, s:o}", "file", m->path, "format", m->format->name,
                            "tensors", list);
    int rc = doc == NULL || json_dumpf(doc, stdout, JSON_INDENT(1)) < 0 ? -1 : 0;
    printf("\n");
    json_decref(doc);
    return rc;
}

/* ---- the command line ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [OPTIONS] MODEL [TENSOR...]\n"
            "Statistics of a model's tensors (all of them, in file order, or those named, in\n"
            "the order named; TENSOR may be a shell glob, 'fc*', quoted from the shell):\n"
            "type, shape, count, min, max, mean, std (of the finite values), and the counts\n"
            "of NaN, +Inf, -Inf and zeros.\n"
            "  --hist[=BINS]         a histogram of the finite values (%d bins by default)\n"
            "  --hist-log            --hist with bars on a log scale, log10(count+1), so the\n"
            "                        tails show (the counts are the same)\n"
            "  --json                one JSON document instead of a table\n"
            "  -j N                  threads reading a tensor (default: the online CPUs)\n"
            "  --chunk=SIZE          bytes read at a time per thread (default 4M)\n"
            "  --nocrc               do not verify a .ckpt CRC trailer\n"
            "  --no-index            neither read nor save a .ckpt's index (ckptfs(1));\n"
            "  -o index_dir=DIR      where it is kept (default ~/.cache/ckptfs)\n"
            "  --map NAME|FILE       MODEL's tensors under the names a map gives them\n"
            "                        (ckptfs --maps lists the shipped maps)\n"
            "  -o key_file=PATH      key of an encrypted model (or CKPTFS_KEY_HEX)\n"
            "  -o tmp_max=SIZE       most a zstd model without seek table may take in $TMPDIR\n"
            "  -o strategy=FILE      MODEL is a distributed checkpoint's directory\n"
            "  -o A,B                several -o options at once (a comma in a value: \\,)\n"
            "  -q, --quiet           no progress bar, no warning (an index not saved)\n"
            "  -h, --help; -V, --version\n"
            "MODEL: a file ckptfs reads, an iteration_<N> directory, a OneFlow snapshot\n"
            "directory, a Hugging Face model folder (config.json beside model.safetensors,\n"
            "its .index.json or pytorch_model.bin: that file), or with -o strategy a\n"
            "distributed checkpoint's directory.\n",
            BINS_DEFAULT);
}

/* An option of ckptfs-stat's own at argv[*i] (ck_cli_args): 1 taken, 0
 * not one, -1 a bad value. */
static int own_arg(void *ctx, int argc, char **argv, int *i)
{
    stat_opts *o = ctx;
    const char *a = argv[*i];
    int took = ck_chunk_opt_arg(&o->read, argc, argv, i);
    if (took != 0)
        return took;
    if (strcmp(a, "--json") == 0)
        o->json = true;
    else if (strcmp(a, "--hist") == 0)
        o->bins = BINS_DEFAULT;
    else if (strcmp(a, "--hist-log") == 0) { /* --hist implied; --hist=BINS still counts */
        o->hist_log = true;
        o->bins = o->bins ? o->bins : BINS_DEFAULT;
    }
    else if (strncmp(a, "--hist=", 7) == 0)
        return ck_cli_uint(a + 7, 1, BINS_MAX, &o->bins) < 0 ? -1 : 1;
    else
        return 0;
    return 1;
}

int main(int argc, char **argv)
{
    stat_opts o = {.read = ck_chunk_opts_default()};
    /* MODEL, then the TENSOR names */
    const char **pos = calloc((size_t)argc, sizeof *pos);
    if (pos == NULL)
        return 1;
    ck_cli_args args = {.prog = PROG, .usage = usage, .open = &o.open, .own = own_arg,
                        .ctx = &o, .pos = pos, .max_pos = (size_t)argc};
    int got = ck_cli_read_args(&args, argc, argv);
    if (got > 0) {
        free(pos);
        return 0; /* --help, --version */
    }
    if (got < 0 || args.n_pos == 0) {
        /* One line: what is wrong, then the usage. */
        if (got == 0)
            fprintf(stderr, PROG ": no MODEL given; ");
        fprintf(stderr, "usage: " PROG " [OPTIONS] MODEL [TENSOR...] (try --help)\n");
        free(pos);
        return 2;
    }
    const char *path = pos[0], **names = pos + 1;
    size_t n_names = args.n_pos - 1;
    ck_error err = {0};
    ck_model *m = ck_cli_open_model(&o.open, path, &err);
    if (m == NULL) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        free(pos);
        return 1;
    }
    const ck_index *ix = &m->index;
    size_t n_sel = 0, *sel = ck_cli_select_tensors(PROG, path, ix, names, n_names, &n_sel);
    if (sel == NULL) {
        ck_model_close(m);
        free(pos);
        return 1;
    }
    result *rs = calloc(n_sel ? n_sel : 1, sizeof *rs);
    size_t n = 0;
    int rc = rs == NULL ? 1 : 0;
    ck_progress bar;
    if (rc == 0 && ck_progress_wanted(stderr, o.open.quiet)) {
        ck_progress_start(&bar, bytes_to_read(ix, sel, n_sel, o.bins), true, stderr);
        o.progress = &bar;
    }
    for (size_t s = 0; rc == 0 && s < n_sel; s++) {
        const ck_tensor *t = &ix->tensors[ix->live[sel[s]]];
        result *r = &rs[n++];
        r->t = t;
        r->elem = ck_elem_of(t->dtype);
        if (stat_tensor(m, r, &o, &err) < 0) {
            ck_progress_end(o.progress);
            char q[CK_QUOTE_BUF];
            fprintf(stderr, PROG ": %s (tensor %s)\n", err.msg,
                    ck_quote(q, t->name, t->name_len));
            rc = 1;
        }
    }
    ck_progress_end(o.progress); /* the line cleared before the table */
    if (rs == NULL)
        fprintf(stderr, PROG ": out of memory\n");
    else if (rc == 0 && o.json)
        rc = print_json(m, rs, n, o.bins) < 0 ? 1 : 0;
    else if (rc == 0)
        print_table(rs, n, o.bins, o.hist_log);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, PROG ": cannot write the output: %s\n", strerror(errno));
        rc = 1;
    }
    for (size_t i = 0; i < n; i++) {
        free(rs[i].counts);
        free(rs[i].edges);
    }
    free(rs);
    free(sel);
    ck_model_close(m);
    free(pos);
    return rc;
}
