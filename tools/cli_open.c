/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_open: how the command-line tools open a model and read their command
 * line (cli_open.h), in one place so that the tools cannot drift apart.
 */
#define _GNU_SOURCE /* program_invocation_short_name */
#include "cli_open.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fuse_opt.h>

#include "../codec/map/map_model.h"
#include "../codec/registry.h"
#include "../codec/core/progress.h"
#include "../codec/core/saved_index.h"
#include "../codec/core/version.h"
#include "../codec/run_path.h"


const char *ck_cli_o_value(int argc, char **argv, int i, const char *name)
{
    size_t n = strlen(name);
    if (strcmp(argv[i], "-o") != 0 || i + 1 >= argc || strncmp(argv[i + 1], name, n) != 0 ||
        argv[i + 1][n] != '=')
        return NULL;
    return argv[i + 1] + n + 1;
}

/* "-o NAME" at argv[i] (two words), a flag as ckptfs spells it. */
static bool o_flag(int argc, char **argv, int i, const char *name)
{
    return strcmp(argv[i], "-o") == 0 && i + 1 < argc && strcmp(argv[i + 1], name) == 0;
}

int ck_cli_open_arg(ck_cli_open *o, int argc, char **argv, int *i)
{
    const char *v;
    /* ckptfs's spellings of --nocrc and --no-index, so that the -o list of
     * a mount works as a tool's (-o key_file=K,nocrc). */
    if (o_flag(argc, argv, *i, "nocrc")) {
        o->skip_crc = true;
        *i += 1;
        return 1;
    }
    if (o_flag(argc, argv, *i, "noindex")) {
        o->no_index = true;
        *i += 1;
        return 1;
    }
    if (strcmp(argv[*i], "-q") == 0 || strcmp(argv[*i], "--quiet") == 0) {
        o->quiet = true;
        return 1;
    }
    if (strcmp(argv[*i], "--nocrc") == 0) {
        o->skip_crc = true;
        return 1;
    }
    if (strcmp(argv[*i], "--no-index") == 0) {
        o->no_index = true;
        return 1;
    }
    if (strncmp(argv[*i], "--map=", 6) == 0) {
        o->map = argv[*i] + 6;
        return 1;
    }
    if (strcmp(argv[*i], "--map") == 0) {
        if (*i + 1 >= argc)
            return -1;
        o->map = argv[++*i];
        return 1;
    }
    if ((v = ck_cli_o_value(argc, argv, *i, "map")) != NULL) {
        o->map = v;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "key_file")) != NULL) {
        o->key_file = v;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "tmp_max")) != NULL) {
        if (ck_parse_size(v, &o->tmp_max) < 0)
            return -1;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "strategy")) != NULL) {
        o->strategy = v;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "index_dir")) != NULL) {
        o->index_dir = v;
    } else {
        return 0;
    }
    *i += 1;
    return 1;
}

/* An option at argv[*i], one of cli_open's or the tool's own: 1 taken, 0
 * not one, -1 bad. */
static int option(ck_cli_args *a, int argc, char **argv, int *i)
{
    int took = a->open != NULL ? ck_cli_open_arg(a->open, argc, argv, i) : 0;
    if (took == 0 && a->own != NULL)
        took = a->own(a->ctx, argc, argv, i);
    return took;
}

/* The start of the one error line: the words argv[first..last] refused,
 * and the value of an -o that was refused itself (unknown NAME). */
static void refuse(const ck_cli_args *a, bool extra, int argc, char **argv, int first,
                   int last)
{
    fprintf(stderr, "%s: %s", a->prog, extra ? "an argument too many:" : "bad option");
    for (int k = first; k <= last && k < argc; k++)
        fprintf(stderr, " %s", argv[k]);
    if (strcmp(argv[first], "-o") == 0 && last == first && last + 1 < argc)
        fprintf(stderr, " %s", argv[last + 1]);
    fprintf(stderr, "; ");
}

/* What a word that is no option is. */
typedef enum word_is {
    TAKEN,                  /* a positional argument, or `--` */
    ANSWERED,               /* --help, --version: printed, exit 0 */
    BAD,                    /* an unknown option, or an option's bad value */
    EXTRA,                  /* one positional argument too many */
} word_is;

static word_is plain_word(ck_cli_args *a, const char *w, bool *opts_done)
{
    if (*opts_done || w[0] != '-' || w[1] == '\0') {
        if (a->n_pos == a->max_pos)
            return EXTRA;
        a->pos[a->n_pos++] = w;
        return TAKEN;
    }
    if (strcmp(w, "--") == 0) {
        *opts_done = true;
        return TAKEN;
    }
    if (strcmp(w, "--help") == 0 || strcmp(w, "-h") == 0) {
        a->usage(stdout);
        return ANSWERED;
    }
    if (strcmp(w, "--version") == 0 || strcmp(w, "-V") == 0) {
        printf("%s %s\n", a->prog, CKPTFS_VERSION);
        return ANSWERED;
    }
    return BAD;
}

/* The words of the command line with every -o LIST (or -oLIST) cut into
 * one -o per option, as ckptfs and mount(8) take -o a,b.  The cutting is
 * libfuse's own (fuse_opt_parse, which ckptfs reads its -o by), so that a
 * comma or a backslash inside a value is escaped the same way for both: \,
 * and \\.  An option's value points into these words, so they are kept
 * until the tool exits (static: reachable, not a leak; a tool reads its
 * command line once). */
typedef struct words {
    char **v;
    int n, cap;
} words;

static int words_add(words *w, char *word)
{
    if (w->n + 1 >= w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        char **v = realloc(w->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return -1;
        w->v = v;
        w->cap = cap;
    }
    w->v[w->n++] = word;
    w->v[w->n] = NULL;
    return 0;
}

/* fuse_opt_parse's call for each option of a list: "-o" and the option,
 * an empty one (a,,b) dropped as libfuse's mount options drop it. */
static int one_option(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    (void)outargs;
    words *w = data;
    if (key != FUSE_OPT_KEY_OPT || arg[0] == '\0')
        return 0;
    char *copy = strdup(arg);
    if (copy == NULL || words_add(w, "-o") < 0 || words_add(w, copy) < 0) {
        free(copy);
        return -1;
    }
    return 0;
}

static int split_list(words *w, const char *list)
{
    char *fake[] = {"ckptfs-tool", "-o", (char *)list, NULL};
    struct fuse_args fa = FUSE_ARGS_INIT(3, fake);
    int rc = fuse_opt_parse(&fa, w, NULL, one_option);
    fuse_opt_free_args(&fa);
    return rc;
}

/* argv with its -o lists cut (words above); NULL when out of memory.
 * After `--` nothing is an option; "-o" last stays, for the error. */
static char **split_o(int argc, char **argv, int *argc_out)
{
    static words w;
    bool opts_done = false;
    w.n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int rc;
        if (!opts_done && strcmp(a, "-o") == 0 && i + 1 < argc)
            rc = split_list(&w, argv[++i]);
        else if (!opts_done && strncmp(a, "-o", 2) == 0 && a[2] != '\0')
            rc = split_list(&w, a + 2);
        else
            rc = words_add(&w, argv[i]);
        if (rc < 0)
            return NULL;
        opts_done |= i > 0 && strcmp(a, "--") == 0;
    }
    *argc_out = w.n;
    return w.v;
}

int ck_cli_read_args(ck_cli_args *a, int argc, char **argv)
{
    bool opts_done = false;
    if ((argv = split_o(argc, argv, &argc)) == NULL) {
        fprintf(stderr, "%s: out of memory; ", a->prog);
        return -1;
    }
    a->n_pos = 0;
    for (int i = 1; i < argc; i++) {
        int first = i; /* an option and its value may be two words */
        int took = opts_done ? 0 : option(a, argc, argv, &i);
        word_is is = took > 0 ? TAKEN : took < 0 ? BAD : plain_word(a, argv[i], &opts_done);
        if (is == ANSWERED)
            return 1;
        if (is == BAD || is == EXTRA) {
            refuse(a, is == EXTRA, argc, argv, first, i);
            return -1;
        }
    }
    return 0;
}

bool ck_cli_opens_dir(const ck_cli_open *o, const char *path)
{
    return ck_collection_of(path, o->strategy) != NULL;
}

/* -o key_file handed to the envelopes, which read the key it names (or
 * CKPTFS_KEY_HEX's) into a. */
static int load_envelope(const char *key_file, ck_envelope_args *a, ck_error *err)
{
    *a = (ck_envelope_args){.n = 0};
    if ((key_file != NULL && ck_envelope_option("key_file", key_file, a, err) < 0) ||
        ck_envelope_args_ready(a, err) < 0) {
        ck_envelope_args_free(a);
        return -1;
    }
    return 0;
}

int ck_cli_load_key(ck_cli_open *o, ck_error *err)
{
    if (load_envelope(o->key_file, &o->env, err) < 0)
        return -1;
    o->key_loaded = true;
    return 0;
}

void ck_cli_key_wipe(ck_cli_open *o)
{
    ck_envelope_args_free(&o->env);
    o->key_loaded = false;
}

int ck_cli_envelope_for_open(const ck_cli_open *o, ck_envelope_args *a, ck_error *err)
{
    if (o != NULL && o->key_loaded)
        return ck_envelope_args_copy(&o->env, NULL, a, err);
    return load_envelope(o ? o->key_file : NULL, a, err);
}

static void index_warning(const char *msg)
{
    fprintf(stderr, "%s: warning: %s\n", program_invocation_short_name, msg);
}

/* -q: the warning unsaid (the index is still read in full, as warned). */
static void no_warning(const char *msg)
{
    (void)msg;
}

/* The store the options name, the same for every model a tool opens. */
static ck_index_store *index_store(const ck_cli_open *o)
{
    static char dir[PATH_MAX];
    static ck_index_store store = {.dir = dir, .warn = index_warning};
    if (o->no_index)
        return NULL;
    store.warn = o->quiet ? no_warning : index_warning;
    if (o->index_dir == NULL)
        return ck_saved_index_default_dir(dir, sizeof dir) == 0 ? &store : NULL;
    int n = snprintf(dir, sizeof dir, "%s", o->index_dir);
    return n > 0 && (size_t)n < sizeof dir ? &store : NULL;
}

ck_collection_opts ck_cli_collection_opts(const ck_cli_open *o, const ck_envelope_args *a)
{
    /* A non-seekable .zst decompressed at open draws its bar as
     * ckptfs-convert's writes do: on a terminal, unless -q. */
    FILE *bar = ck_progress_wanted(stderr, o->quiet) ? stderr : NULL;
    return (ck_collection_opts){.open = {.skip_crc = o->skip_crc, .envelope = a,
                                         .key_if_encrypted = o->key_optional,
                                         .tmp_max = o->tmp_max, .progress = bar,
                                         .index = index_store(o)},
                                .strategy = o->strategy};
}

ck_model *ck_cli_open_model(const ck_cli_open *o, const char *path, ck_error *err)
{
    ck_envelope_args a;
    if (ck_cli_envelope_for_open(o, &a, err) < 0)
        return NULL;
    ck_collection_opts co = ck_cli_collection_opts(o, &a);
    char *real = NULL; /* RUN/latest, RUN/NAME: as a mount of RUN shows them */
    ck_model *m = NULL;
    if (co.strategy != NULL || ck_run_checkpoint_path(path, &co.open, &real, err) >= 0)
        m = ck_open_path(real != NULL ? real : path, &co, err);
    free(real);
    ck_envelope_args_free(&a); /* wipes the key */
    if (m != NULL && o->map != NULL && ck_cli_map_model(m, o->map, err) < 0) {
        ck_model_close(m);
        return NULL;
    }
    return m;
}

int ck_cli_map_model(ck_model *m, const char *map_name, ck_error *err)
{
    ck_map *map = ck_map_load(map_name, err);
    int rc = map != NULL ? ck_map_model(m, map, err) : -1;
    ck_map_free(map);
    return rc;
}

int ck_cli_uint(const char *text, unsigned lo, unsigned hi, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || *text == '-' || v < lo || v > hi)
        return -1;
    *out = (unsigned)v;
    return 0;
}

const char *ck_cli_part(const ck_tensor *t)
{
    return ck_tensor_part_name(t);
}

bool ck_cli_name_matches(const char *pat, const char *name, size_t name_len,
                         const char *dir_name)
{
    if ((name != NULL && strlen(pat) == name_len && memcmp(pat, name, name_len) == 0) ||
        (dir_name != NULL && strcmp(pat, dir_name) == 0))
        return true;
    if (dir_name != NULL && fnmatch(pat, dir_name, 0) == 0)
        return true;
    if (name == NULL || name_len == SIZE_MAX)
        return false;
    char *z = malloc(name_len + 1); /* fnmatch takes a string */
    if (z == NULL)
        return false;
    memcpy(z, name, name_len);
    z[name_len] = '\0';
    bool hit = strlen(z) == name_len && fnmatch(pat, z, 0) == 0;
    free(z);
    return hit;
}

long ck_cli_select(size_t n, bool (*matches)(void *ctx, size_t i, const char *pat),
                   void *ctx, const char *const *pats, size_t n_pats, size_t *order,
                   size_t *missing)
{
    bool *taken = calloc(n + 1, sizeof *taken);
    if (taken == NULL)
        return -2;
    size_t got = 0;
    for (size_t k = 0; k < n_pats; k++) {
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            if (!matches(ctx, i, pats[k]))
                continue;
            any = true;
            if (!taken[i]) {
                taken[i] = true;
                order[got++] = i;
            }
        }
        if (!any) {
            free(taken);
            *missing = k;
            return -1;
        }
    }
    free(taken);
    return (long)got;
}

/* Whether a TENSOR argument selects live tensor i of the index ctx. */
static bool live_matches(void *ctx, size_t i, const char *pat)
{
    const ck_index *ix = ctx;
    const ck_tensor *t = &ix->tensors[ix->live[i]];
    return ck_cli_name_matches(pat, t->name, t->name_len, t->dir_name);
}

size_t *ck_cli_select_tensors(const char *prog, const char *path, const ck_index *ix,
                              const char **pats, size_t n_pats, size_t *n)
{
    size_t *order = calloc(ix->n_live + 1, sizeof *order), missing = 0;
    long got = order == NULL ? -2 : n_pats == 0 ? (long)ix->n_live
               : ck_cli_select(ix->n_live, live_matches, (void *)ix, pats, n_pats, order,
                               &missing);
    for (size_t i = 0; n_pats == 0 && order != NULL && i < ix->n_live; i++)
        order[i] = i;
    if (got >= 0) {
        *n = (size_t)got;
        return order;
    }
    char q[CK_QUOTE_BUF];
    if (got == -1)
        fprintf(stderr, "%s: %s: no tensor %s\n", prog, path,
                ck_quote(q, pats[missing], strlen(pats[missing])));
    else
        fprintf(stderr, "%s: out of memory\n", prog);
    free(order);
    return NULL;
}
