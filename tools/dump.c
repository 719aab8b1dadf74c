/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs-dump: list a model's tensors without mounting it.
 *
 * It uses the codec alone (no FUSE), like squashfuse_ls: handy to see what a
 * mount would show, where each tensor's bytes are, and why a file is refused.
 *
 *   ckptfs-dump [--nocrc] [--no-index] [-o index_dir=DIR] [-o key_file=PATH]
 *               [-o tmp_max=SIZE] MODEL [TENSOR...]
 *   one line per visible tensor (or per tensor the TENSOR names or shell
 *   globs select, in their order: ck_cli_select): directory name, type, shape, bytes, extents
 *   (of the plaintext, for an encrypted or compressed model), each OFF+LEN,
 *   FILE:OFF+LEN when it is in a data file (an ONNX external data file, a
 *   shard of a safetensors set), FILE relative to the model's directory
 *
 * The key of an encrypted model comes as for a mount: -o key_file=PATH or
 * CKPTFS_KEY_HEX; a zstd model without a seek table is decompressed into
 * $TMPDIR within -o tmp_max, as for a mount.
 *
 *   ckptfs-dump -o strategy=FILE DIST_DIR
 *   a distributed checkpoint merged by its strategy file (dist_merge.h), as
 *   a mount shows it: each extent RANK_FILE:OFF+LEN, and for a tensor cut
 *   along a dimension after the first, the length of the runs in which
 *   its extents interleave
 *
 *   ckptfs-dump RUN_DIR/iteration_<N>
 *   a MindSpore Transformers iteration directory (iteration_dir.h), its
 *   tensors as a mount shows them, each extent SHARD_FILE:OFF+LEN
 *
 *   ckptfs-dump SNAPSHOT_DIR
 *   a OneFlow snapshot directory (oneflow_dir.h): its tensors, named by
 *   pickled_data or by their directories; each extent FILE:OFF+LEN, FILE
 *   the tensor's `out` relative to the snapshot (tensor_5/out, conv1.weight/out)
 *
 *   ckptfs-dump [-o settle=SECONDS] RUN_DIR
 *   a training run's directory: one line per checkpoint (run_dir.h), none
 *   of them opened: its name, file, format, epoch and step when its name
 *   has them, and whether it is complete; the newest complete one in the
 *   summary line
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli_open.h"
#include "../codec/core/model.h"
#include "../codec/collections/run_dir.h"
#include "../codec/core/version.h"

/* Seconds a writable checkpoint must be left unchanged to count as
 * complete, by default (MindSpore's own are made read-only when done). */
#define SETTLE_DEFAULT 5.0

/* Extent e of t: FILE:OFF+LEN when its bytes are in a file of the model's
 * directory other than the model's own, else OFF+LEN. */
static void print_extent(const ck_model *m, const ck_tensor *t, const ck_extent *e)
{
    const char *path = m->sources[e->src]->path;
    size_t k = strlen(m->path);
    uint64_t off = e->off;
    const char *out = ck_model_extent_file(m, t, e->off, &off);
    if (out != NULL) {
        printf("%s:", out); /* a tensor's out, of a snapshot directory */
    } else if (ck_model_is_data_file(m, e->src)) {
        const char *rel = ck_dir_rel(m->dir, path);
        printf("%s:", rel != NULL ? rel : path);
    } else if (strncmp(path, m->path, k) == 0 && path[k] == '/') {
        printf("%s:", path + k + 1); /* a rank's file, of a merged checkpoint */
    }
    printf("%" PRIu64 "+%" PRIu64, off, e->len);
}

static void print_tensor(const ck_model *m, const ck_tensor *t)
{
    printf("%s\t%s\t[", t->dir_name, t->type_name);
    for (uint32_t i = 0; i < t->ndim; i++)
        printf("%s%" PRId64, i ? "," : "", t->dims[i]);
    printf("]\t%" PRIu64 "\t", t->nbytes);
    if (t->dtype->kind == CK_KIND_STR)
        printf("decoded ");
    for (uint32_t i = 0; i < t->n_ext; i++) {
        printf("%s", i ? "," : "");
        print_extent(m, t, ck_tensor_ext(t, i));
    }
    if (t->gather != NULL)
        printf("\t%s, %" PRIu64 "-byte runs", t->gather->step ? "strided" : "interleaved",
               t->gather->run);
    printf("\n");
}

static int dump_run_dir(const char *path, double settle)
{
    ck_run_list l;
    ck_error err = {0};
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (ck_run_dir_scan(path, settle, &now, &l, &err) < 0) {
        fprintf(stderr, "ckptfs-dump: %s\n", err.msg);
        ck_run_list_free(&l);
        return 1;
    }
    size_t complete = 0;
    for (size_t i = 0; i < l.n; i++)
        complete += l.e[i].complete;
    printf("# %s: run directory, %zu checkpoints (%zu complete), latest %s\n", path, l.n,
           complete, l.latest >= 0 ? l.e[l.latest].name : "none");
    for (size_t i = 0; i < l.n; i++) {
        const ck_run_entry *e = &l.e[i];
        printf("%s\t%s\t%s\t", e->name, e->file,
               e->iteration ? "iteration" : e->dcp ? "dcp" : e->format->name);
        if (e->numbered)
            printf("epoch %" PRIu64 " step %" PRIu64, e->epoch, e->step);
        else
            printf("-");
        printf("\t%s\n", e->complete ? "complete" : "being written");
    }
    ck_run_list_free(&l);
    return 0;
}

/* "2.5": seconds, 0 or more. */
static int parse_seconds(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= 0) || v > 1e9)
        return -1;
    *out = v;
    return 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

#define USAGE "usage: ckptfs-dump [OPTIONS] MODEL [TENSOR...] | RUN_DIR"

static void usage(FILE *to)
{
    fprintf(to, "usage: ckptfs-dump [--nocrc] [--no-index] [-o index_dir=DIR] [-o key_file=PATH]\n"
            "                   [-o tmp_max=SIZE] [-q] MODEL [TENSOR...]\n"
            "       ckptfs-dump -o strategy=FILE DIST_DIR\n"
            "       ckptfs-dump RUN_DIR/iteration_<N>\n"
            "       ckptfs-dump ONEFLOW_SNAPSHOT_DIR\n"
            "       ckptfs-dump [-o settle=SECONDS] RUN_DIR\n"
            "       ckptfs-dump -h | --help | -V | --version\n"
            "-o takes a list, -o a,b (a comma in a value: \\,); -q: no warning.\n"
            "TENSOR: only those tensors, in the order named: a name or a shell glob ('fc*',\n"
            "quoted from the shell); a model of any kind above but a RUN_DIR takes them.\n");
}

/* -o settle=SECONDS, ckptfs-dump's own option (ck_cli_args): 1 taken, 0
 * not it, -1 a bad value. */
static int own_arg(void *ctx, int argc, char **argv, int *i)
{
    const char *v = ck_cli_o_value(argc, argv, *i, "settle");
    if (v == NULL)
        return 0;
    *i += 1;
    return parse_seconds(v, ctx) < 0 ? -1 : 1;
}

/* Whether a TENSOR argument selects live tensor i of the index ctx: its
 * name or its directory name, equal or matched as a glob. */
static bool matches(void *ctx, size_t i, const char *pat)
{
    const ck_index *ix = ctx;
    const ck_tensor *t = &ix->tensors[ix->live[i]];
    return ck_cli_name_matches(pat, t->name, t->name_len, t->dir_name);
}

/* The live tensors to list, as indexes into ix->live: every one in file
 * order without patterns, else those pats select in their order
 * (ck_cli_select).  NULL (said) when a pattern selects none, before
 * anything is printed. */
static size_t *selected(const ck_index *ix, const char *path, const char **pats,
                        size_t n_pats, size_t *n)
{
    size_t *order = calloc(ix->n_live + 1, sizeof *order), missing = 0;
    long got = order == NULL ? -2 : n_pats == 0 ? (long)ix->n_live
               : ck_cli_select(ix->n_live, matches, (void *)ix, pats, n_pats, order, &missing);
    for (size_t i = 0; n_pats == 0 && order != NULL && i < ix->n_live; i++)
        order[i] = i;
    if (got >= 0) {
        *n = (size_t)got;
        return order;
    }
    char q[CK_QUOTE_BUF];
    if (got == -1)
        fprintf(stderr, "ckptfs-dump: %s: no tensor %s\n", path,
                ck_quote(q, pats[missing], strlen(pats[missing])));
    else
        fprintf(stderr, "ckptfs-dump: out of memory\n");
    free(order);
    return NULL;
}

static int dump_model(const ck_cli_open *o, const char *path, const char **pats,
                      size_t n_pats);

int main(int argc, char **argv)
{
    ck_cli_open o = {0};
    double settle = SETTLE_DEFAULT;
    /* MODEL, then the TENSOR patterns */
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    if (pos == NULL)
        return 2;
    ck_cli_args args = {.prog = "ckptfs-dump", .usage = usage, .open = &o, .own = own_arg,
                        .ctx = &settle, .pos = pos, .max_pos = (size_t)argc};
    int got = ck_cli_read_args(&args, argc, argv);
    const char *path = pos[0];
    bool run_dir = got == 0 && path != NULL && is_dir(path) && !ck_cli_opens_dir(&o, path);
    if (got != 0 || path == NULL || (run_dir && args.n_pos > 1)) {
        if (got == 0)
            fprintf(stderr, "ckptfs-dump: %s; ", path == NULL ? "no MODEL given"
                    : "a RUN_DIR takes no TENSOR");
        if (got <= 0)
            fprintf(stderr, USAGE " (try --help)\n");
        free(pos);
        return got > 0 ? 0 : 2; /* --help, --version: 0 */
    }
    int rc = run_dir ? dump_run_dir(path, settle)
                     : dump_model(&o, path, pos + 1, args.n_pos - 1);
    free(pos);
    return rc;
}

/* The model's summary line, then its tensors: all in file order, or those
 * pats select.  The exit status. */
static int dump_model(const ck_cli_open *o, const char *path, const char **pats,
                      size_t n_pats)
{
    ck_error err = {0};
    ck_model *m = ck_cli_open_model(o, path, &err);
    if (m == NULL) {
        fprintf(stderr, "ckptfs-dump: %s\n", err.msg);
        return 1;
    }
    const ck_index *ix = &m->index;
    size_t n = 0, *order = selected(ix, path, pats, n_pats, &n);
    if (order == NULL) {
        ck_model_close(m);
        return 1;
    }
    printf("# %s: format %s, %zu tensors (%zu records), index memory %zu bytes%s%s%s\n",
           m->path, m->format->name, ix->n_live, ix->count, ck_index_memory(ix),
           m->format->notes ? m->format->notes(m) : "",
           ck_envelope_is_wrapped(&m->env) ? ", " : "", ck_envelope_describe(&m->env));
    for (size_t k = 0; k < n; k++)
        print_tensor(m, &ix->tensors[ix->live[order[k]]]);
    free(order);
    ck_model_close(m);
    return 0;
}
