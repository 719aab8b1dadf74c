/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_open: how the command-line tools open a model and read their command
 * line (cli_open.h), in one place so that the tools cannot drift apart.
 */
#define _GNU_SOURCE /* program_invocation_short_name */
#include "cli_open.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/cipher/key.h"
#include "../codec/core/saved_index.h"
#include "../codec/core/version.h"


const char *ck_cli_o_value(int argc, char **argv, int i, const char *name)
{
    size_t n = strlen(name);
    if (strcmp(argv[i], "-o") != 0 || i + 1 >= argc || strncmp(argv[i + 1], name, n) != 0 ||
        argv[i + 1][n] != '=')
        return NULL;
    return argv[i + 1] + n + 1;
}

int ck_cli_open_arg(ck_cli_open *o, int argc, char **argv, int *i)
{
    const char *v;
    if (strcmp(argv[*i], "--nocrc") == 0) {
        o->skip_crc = true;
        return 1;
    }
    if (strcmp(argv[*i], "--no-index") == 0) {
        o->no_index = true;
        return 1;
    }
    if ((v = ck_cli_o_value(argc, argv, *i, "key_file")) != NULL) {
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
    if (strcmp(w, "--help") == 0) {
        a->usage(stdout);
        return ANSWERED;
    }
    if (strcmp(w, "--version") == 0) {
        printf("%s %s\n", a->prog, CKPTFS_VERSION);
        return ANSWERED;
    }
    return BAD;
}

int ck_cli_read_args(ck_cli_args *a, int argc, char **argv)
{
    bool opts_done = false;
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

int ck_cli_load_key(ck_cli_open *o, ck_error *err)
{
    if (ck_key_load(o->key_file, &o->key, err) < 0)
        return -1;
    o->key_loaded = true;
    return 0;
}

void ck_cli_key_wipe(ck_cli_open *o)
{
    ck_key_wipe(&o->key);
    o->key_loaded = false;
}

int ck_cli_key_for_open(const ck_cli_open *o, ck_key *key, ck_error *err)
{
    if (o != NULL && o->key_loaded) {
        *key = o->key;
        return 0;
    }
    return ck_key_load(o ? o->key_file : NULL, key, err) < 0 ? -1 : 0;
}

static void index_warning(const char *msg)
{
    fprintf(stderr, "%s: warning: %s\n", program_invocation_short_name, msg);
}

/* The store the options name, the same for every model a tool opens. */
static ck_index_store *index_store(const ck_cli_open *o)
{
    static char dir[PATH_MAX];
    static ck_index_store store = {.dir = dir, .warn = index_warning};
    if (o->no_index)
        return NULL;
    if (o->index_dir == NULL)
        return ck_saved_index_default_dir(dir, sizeof dir) == 0 ? &store : NULL;
    int n = snprintf(dir, sizeof dir, "%s", o->index_dir);
    return n > 0 && (size_t)n < sizeof dir ? &store : NULL;
}

ck_collection_opts ck_cli_collection_opts(const ck_cli_open *o, const ck_key *key)
{
    return (ck_collection_opts){.open = {.skip_crc = o->skip_crc, .key = key,
                                         .key_if_encrypted = o->key_optional,
                                         .tmp_max = o->tmp_max, .index = index_store(o)},
                                .strategy = o->strategy};
}

ck_model *ck_cli_open_model(const ck_cli_open *o, const char *path, ck_error *err)
{
    ck_key key;
    if (ck_cli_key_for_open(o, &key, err) < 0)
        return NULL;
    ck_collection_opts co = ck_cli_collection_opts(o, &key);
    ck_model *m = ck_open_path(path, &co, err);
    ck_key_wipe(&key);
    return m;
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
