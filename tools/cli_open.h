/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_open: the options by which a command-line tool opens a model, shared
 * by ckptfs-dump, ckptfs-stat, ckptfs-diff and ckptfs-convert so that they
 * take a model the same way, the reading of the rest of their command line
 * (ck_cli_read_args), and the few things they print a tensor by.
 *
 *   --nocrc, -o nocrc     do not verify a .ckpt CRC trailer
 *   -o key_file=PATH      the key of an encrypted model (else CKPTFS_KEY_HEX)
 *   -o tmp_max=SIZE       most a zstd model without a seek table may
 *                         decompress to in $TMPDIR
 *   -o strategy=FILE      MODEL is a distributed checkpoint's directory,
 *                         merged by FILE (dist_merge.h)
 *   -o index_dir=DIR      where a model's saved index is kept (default
 *                         $XDG_CACHE_HOME/ckptfs, else ~/.cache/ckptfs), read
 *                         and written as a mount does (saved_index.h)
 *   --no-index, -o noindex  neither read nor write a saved index
 *   -q, --quiet           no warning (a saved index that cannot be written)
 *   --map NAME|FILE, -o map=NAME|FILE
 *                         MODEL's names as the map gives them (codec/map/,
 *                         docs/maps.md): a shipped map's name or a map file
 * -o key_file is handed to the envelopes by name (codec/registry.h,
 * ck_envelope_option), which read the key; a tool knows nothing of it.
 * -o takes a comma-separated list as ckptfs and mount(8) do: -o a,b is -o a
 * -o b, with a comma or backslash in a value escaped \, \\ (libfuse's rule).
 * MODEL may be any directory a collection claims (codec/registry.h).
 */
#ifndef CK_CLI_OPEN_H
#define CK_CLI_OPEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "../codec/core/ck_error.h"
#include "../codec/core/model.h"
#include "../codec/open_path.h"

typedef struct ck_cli_open {
    bool skip_crc;
    const char *key_file;       /* NULL: CKPTFS_KEY_HEX, or no key */
    size_t tmp_max;             /* 0: the default */
    const char *strategy;       /* NULL: not a distributed checkpoint */
    const char *index_dir;      /* NULL: the default place */
    bool no_index;
    const char *map;            /* --map: applied to the model opened (NULL: none) */
    bool quiet;                 /* -q: no warning; a tool's -q may say more */
    bool key_optional;          /* a plain model opens though a key is given (the
                                 * key may be for ckptfs-convert's output) */
    /* The envelopes' options (-o key_file: the key) once ck_cli_load_key
     * has read them (codec/registry.h, ck_envelope_option): opaque. */
    ck_envelope_args env;
    bool key_loaded;
} ck_cli_open;

/* Load the key once, for every model a tool opens: -o key_file, else
 * CKPTFS_KEY_HEX, which loading takes out of the environment (so a second
 * load would find none).  0, or -1 with err.  ck_cli_key_wipe wipes it. */
int ck_cli_load_key(ck_cli_open *o, ck_error *err);
void ck_cli_key_wipe(ck_cli_open *o);
/* The envelopes' options for one open, with the key, into *a (the caller
 * frees it, ck_envelope_args_free, which wipes the key): a copy of
 * ck_cli_load_key's, else loaded now (o NULL: CKPTFS_KEY_HEX or none).  0,
 * or -1 with err. */
int ck_cli_envelope_for_open(const ck_cli_open *o, ck_envelope_args *a, ck_error *err);

/* Map m's names by the map map_name (ck_map_load): 0, or -1 with err. */
int ck_cli_map_model(ck_model *m, const char *map_name, ck_error *err);

/* Whether argv[*i] (with argv[*i + 1] for -o) is one of the options above:
 * 1 when it is and was taken (*i moved past it), 0 when it is not one of
 * them, -1 when it is but its value is unusable. */
int ck_cli_open_arg(ck_cli_open *o, int argc, char **argv, int *i);

/* "-o NAME=VALUE" at argv[i] (two words): VALUE, or NULL when argv[i] is
 * not that option; for a tool's own -o options beside these. */
const char *ck_cli_o_value(int argc, char **argv, int i, const char *name);

/* A tool's command line as ckptfs-stat, -diff and -convert read it alike:
 * the options above, the tool's own, -h/--help, -V/--version, and `--`, after
 * which every word is a positional argument (a path may start with '-';
 * "-" alone always is one). */
typedef struct ck_cli_args {
    const char *prog;           /* "ckptfs-stat": messages, --version */
    void (*usage)(FILE *to);    /* --help's text */
    ck_cli_open *open;          /* where the options above go */
    /* The tool's own option at argv[*i]: 1 taken (*i moved past its
     * value), 0 not one of them, -1 its value unusable.  May be NULL. */
    int (*own)(void *ctx, int argc, char **argv, int *i);
    void *ctx;
    const char **pos;           /* the positional arguments, in order */
    size_t max_pos;             /* room in pos; one more is refused */
    size_t n_pos;               /* set: how many were given */
} ck_cli_args;

/* Read argv[1..] as a says, up to the first bad word, each -o list cut
 * into its options first (above).  0: read (the tool
 * checks n_pos); 1: -h/--help or -V/--version answered on stdout, exit 0; -1: a
 * bad word, and "PROG: bad option WORDS; " (or "an argument too many:")
 * printed on stderr, for the tool to end the line with its usage and exit
 * 2. */
int ck_cli_read_args(ck_cli_args *a, int argc, char **argv);

/* Whether path is a directory that ck_cli_open_model opens as a model (a
 * collection's: codec/registry.h). */
bool ck_cli_opens_dir(const ck_cli_open *o, const char *path);

/* The options as ck_open_path takes them (codec/open_path.h), with the
 * envelopes' options a (borrowed). */
ck_collection_opts ck_cli_collection_opts(const ck_cli_open *o, const ck_envelope_args *a);

/* Open path as the options say (codec/open_path.h, ck_open_path): with the
 * key ck_cli_load_key loaded, else one loaded for it (and wiped once the
 * model is open).  NULL with err on failure; the messages name path as
 * given. */
ck_model *ck_cli_open_model(const ck_cli_open *o, const char *path, ck_error *err);

/* A decimal number in [lo, hi] (-j N, --hist=BINS): 0, or -1. */
int ck_cli_uint(const char *text, unsigned lo, unsigned hi, unsigned *out);
/* A map parameter's part ("key", "value", "status"), or NULL for a tensor
 * of its own. */
const char *ck_cli_part(const ck_tensor *t);

/* Whether a TENSOR argument pat selects a tensor named name (name_len
 * bytes, not necessarily NUL-terminated; NULL for none) whose directory
 * is dir_name (NULL for none): either one equal to pat, or matched by pat as a shell glob
 * (fnmatch(3), no flags: `*` crosses `/` and `.`).  The equality keeps a
 * name with `[` or `*` in it selectable as it is written.  Out of memory:
 * equality only. */
bool ck_cli_name_matches(const char *pat, const char *name, size_t name_len,
                         const char *dir_name);

/* Which of n items the TENSOR patterns pats select, in the patterns'
 * order: the items the first selects, in their order, then those the
 * second selects and the first did not, and so on; an item selected twice
 * is listed once, at the first.  matches(ctx, i, pat) says whether item i
 * is selected by pat.  Fills order (room for n) and returns how many;
 * with a pattern that selects nothing, -1 and *missing its index; out
 * of memory, -2. */
long ck_cli_select(size_t n, bool (*matches)(void *ctx, size_t i, const char *pat),
                   void *ctx, const char *const *pats, size_t n_pats, size_t *order,
                   size_t *missing);

/* The live tensors of ix that TENSOR arguments select, as indexes into
 * ix->live: every one in file order without patterns, else in the
 * patterns' order (ck_cli_select over names and directory names).  NULL
 * when a pattern selects none, said on stderr as "PROG: PATH: no tensor
 * X" before anything else is printed (or out of memory).  Free it. */
size_t *ck_cli_select_tensors(const char *prog, const char *path, const ck_index *ix,
                              const char **pats, size_t n_pats, size_t *n);

#endif
