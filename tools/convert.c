/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckptfs-convert: write a model in another format, without mounting it.
 *
 *   ckptfs-convert [OPTIONS] IN OUT
 *
 * IN is anything the other tools open (cli_open.h: a .ckpt, safetensors,
 * ONNX, MindIR, encrypted or zstd-compressed, an iteration directory, a
 * OneFlow snapshot directory, a distributed checkpoint with -o strategy).
 * OUT is in a format of the registry that has a target (codec/io/target.h):
 * a .ckpt, a .safetensors (either optionally .zst, a .ckpt optionally
 * encrypted with -o enc_mode), a Hugging Face sharded set (its
 * .safetensors.index.json, shards beside it cut at -o max_shard_size), a
 * PyTorch .pt or a OneFlow snapshot directory, chosen by
 * --to or by OUT's name: a name ending in "/" or an existing directory is
 * the directory format's.
 *
 * The output is a model created empty (ck_model_empty, as -o create does)
 * and every tensor of IN handed to its encoder as new bytes whose pieces are
 * IN's extents (codec/io/convert_plan.h, the list the mount's safetensors
 * view lays out too), so bytes stream from file to file (copy_file_range where
 * nothing needs to see them) and memory stays bounded whatever the size.
 * Everything OUT cannot hold is refused, naming the tensor, before anything
 * is written; OUT is written atomically, read back and checked against IN
 * before it replaces anything, holding OUT's write claim (save/write_claim.h:
 * its writer lock, an interrupted save's journal recovered), a directory
 * format's OUT too.  Leftovers of a killed convert are the atomic writer's
 * .OUT.ckptfs-* files, removed by ck_encode_cleanup on the next run.
 * Nothing reads IN's bytes on the way except a wrap writer or a CRC: the
 * sink copies with copy_file_range.  A merged distributed tensor, whose
 * extents interleave, is one piece of a byte source that reads it through
 * ck_model_read.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_open.h"
#include "../codec/core/dir_name.h"
#include "../codec/core/model.h"
#include "../codec/registry.h"
#include "../codec/safetensors/safetensors_writer.h"
#include "../codec/io/commit_group.h"
#include "../codec/io/convert_plan.h"
#include "../save/encoder.h"
#include "../codec/core/progress.h"
#include "../codec/io/target.h"
#include "../save/template_fill.h"
#include "../save/write_claim.h"

#define PROG "ckptfs-convert"

typedef struct convert_opts {
    ck_cli_open open;           /* how IN is opened */
    const ck_format *to;        /* --to, or from OUT's name: a format with a target */
    bool force;             /* -q is open.quiet: no progress bar, no warning */
    const char *enc_mode;       /* -o enc_mode: encrypt a .ckpt OUT */
    const char *zstd_level;     /* -o zstd_level: of a .zst OUT (NULL: the default) */
    size_t max_shard_size;      /* -o max_shard_size: of a sharded set OUT (0: the default) */
    const char *in, *out;
    const char *into, *map;     /* --into TEMPLATE, --map FILE (template_fill.h) */
    bool strict;                /* --strict */
} convert_opts;

/* ---- what OUT cannot hold ---- */

static const ck_target *target_of(const convert_opts *o)
{
    return ck_format_target(o->to);
}

/* ---- OUT's format ---- */

/* The i-th format ckptfs converts into, or NULL past the last. */
static const ck_format *target_at(size_t i)
{
    const ck_format *f;
    for (size_t k = 0; (f = ck_format_at(k)) != NULL; k++)
        if (ck_format_target(f) != NULL && i-- == 0)
            return f;
    return NULL;
}

/* The format that writes directories, or NULL. */
static const ck_format *dir_target(void)
{
    const ck_format *f;
    for (size_t i = 0; (f = target_at(i)) != NULL; i++)
        if (ck_format_target(f)->write_dir != NULL)
            return f;
    return NULL;
}

/* The targets' names, as --help and a refusal list them: "ckpt, safetensors or
 * oneflow". */
static const char *targets_list(char *buf, size_t cap)
{
    size_t n = 0, count = 0;
    while (target_at(count) != NULL)
        count++;
    buf[0] = '\0';
    for (size_t i = 0; i < count && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i == 0 ? "" : i + 1 == count ? " or "
                              : ", ", target_at(i)->name);
    return buf;
}

static const ck_format *target_by_name(const char *name)
{
    const ck_format *f = ck_format_by_name(name);
    return f != NULL && ck_format_target(f) != NULL ? f : NULL;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* OUT's format from its name: NULL when it says none. */
static const ck_format *target_of_out(const char *out)
{
    struct stat st;
    if (ends_with(out, "/") || (stat(out, &st) == 0 && S_ISDIR(st.st_mode)))
        return dir_target();
    const ck_format *f = ck_format_by_extension(out);
    const ck_target *tg = f != NULL ? ck_format_target(f) : NULL;
    return tg != NULL && tg->write_dir == NULL ? f : NULL;
}

/* ---- OUT ---- */

static bool same_file(const struct stat *a, dev_t dev, ino_t ino)
{
    return a->st_dev == dev && a->st_ino == ino;
}

/* OUT must not be IN or one of its files (it would be replaced while read). */
static int check_not_in(const convert_opts *o, const ck_model *m, ck_error *err)
{
    struct stat so, si;
    if (stat(o->out, &so) < 0)
        return 0;
    bool same = stat(o->in, &si) == 0 && same_file(&so, si.st_dev, si.st_ino);
    same = same || same_file(&so, m->st.st_dev, m->st.st_ino);
    for (uint32_t i = 0; !same && i < m->n_sources; i++)
        for (const ck_source *s = m->sources[i]; s != NULL && !same; s = s->inner)
            same = s->dev != 0 && same_file(&so, s->dev, s->ino);
    if (same)
        return ck_fail(err, EINVAL, "%s: is the model being converted (%s): write it elsewhere",
                       o->out, o->in);
    return 0;
}

/* An existing OUT is replaced only with -f, and a file format never
 * replaces a directory. */
static int check_out_file(const convert_opts *o, ck_error *err)
{
    struct stat st;
    if (lstat(o->out, &st) < 0)
        return errno == ENOENT ? 0 : ck_fail_errno(err, errno, "%s: cannot stat", o->out);
    const ck_format *dir = dir_target();
    if (S_ISDIR(st.st_mode))
        return ck_fail(err, EISDIR, "%s: is a directory (%s is written with --to %s)", o->out,
                       dir ? ck_format_target(dir)->holder : "a directory", dir ? dir->name : "?");
    if (!o->force)
        return ck_fail(err, EEXIST, "%s: exists (give -f to replace it)", o->out);
    return 0;
}

/* The directory OUT is in, made when missing for a sharded set (whose
 * shards it holds), as a OneFlow snapshot's directory is: one level, the
 * mode mkdir gives; *made says so, for removing it when nothing is
 * written. */
static int make_out_dir(const convert_opts *o, char **made, ck_error *err)
{
    *made = NULL;
    const char *slash = strrchr(o->out, '/');
    if (!ck_format_target(o->to)->sharded || slash == NULL || slash == o->out)
        return 0;
    char *dir = strndup(o->out, (size_t)(slash - o->out));
    if (dir == NULL)
        return ck_nomem(err, o->out);
    if (mkdir(dir, 0777) == 0) {
        *made = dir;
        return 0;
    }
    int e = errno;
    struct stat st;
    int rc = e == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? 0
             : ck_fail_errno(err, e, "%s: cannot create its directory %s", o->out, dir);
    free(dir);
    return rc;
}

/* The envelope options of OUT, handed to the envelopes by name: -o
 * zstd_level, and -o enc_mode with the key IN was opened with (which
 * without enc_mode is IN's alone).  0, or -1 (err) with env freed. */
static int out_envelope(const convert_opts *o, ck_envelope_args *env, ck_error *err)
{
    *env = (ck_envelope_args){.n = 0};
    if ((o->enc_mode != NULL &&
         (ck_envelope_args_copy(&o->open.env, NULL, env, err) < 0 ||
          ck_envelope_option("enc_mode", o->enc_mode, env, err) < 0)) ||
        (o->zstd_level != NULL && ck_envelope_option("zstd_level", o->zstd_level, env, err) < 0)) {
        ck_envelope_args_free(env);
        return -1;
    }
    return 0;
}

/* Whether the envelopes take NAME=VALUE (-o enc_mode, -o zstd_level). */
static bool envelope_takes(const char *name, const char *value)
{
    ck_envelope_args scratch = {0};
    ck_error ignored;
    int took = ck_envelope_option(name, value, &scratch, &ignored);
    ck_envelope_args_free(&scratch);
    return took > 0;
}

/* OUT as a .ckpt or .safetensors file: an empty model of that format,
 * encoded from IN's tree through a commit group, as a mount's save. */
static int write_file(const convert_opts *o, const ck_model *in, const ck_convert_plan *p,
                      ck_progress *prog, ck_error *err)
{
    ck_envelope_args env; /* OUT's: the key IN was opened with, with enc_mode */
    const ck_envelope_kind *wrap;
    if (out_envelope(o, &env, err) < 0)
        return -1;
    if (ck_envelope_for_new(o->out, &env, &wrap, err) < 0) { /* a mode without a key */
        ck_envelope_args_free(&env);
        return -1;
    }
    char *meta = NULL; /* safetensors' "__metadata__": IN's kept (ck_st_metadata_for) */
    char *made = NULL;
    if (ck_st_metadata_for(in, &meta, err) < 0 || make_out_dir(o, &made, err) < 0) {
        free(meta);
        ck_envelope_args_free(&env);
        return -1;
    }
    ck_open_opts oo = {.envelope = &env, .max_shard_size = o->max_shard_size,
                       .new_metadata = meta};
    ck_write_claim claim = CK_WRITE_CLAIM_NONE;
    ck_model *om = NULL;
    int rc = -1;
    if (ck_write_claim_take(&claim, o->out, PROG, err) == 0 && check_out_file(o, err) == 0 &&
        (om = ck_model_empty(claim.dir, o->out, o->to->name, &oo, err)) != NULL) {
        ck_encode_cleanup(om); /* what a killed convert to OUT's data files left */
        ck_progress_start(prog, p->bytes, prog->on, prog->out);
        ck_save_opts so = {.progress = prog, .data_replace = o->force}; /* a new set's shards */
        rc = ck_write_claim_save(&claim, om, p->w, p->n, &so, err);
        ck_progress_end(prog);
    }
    ck_envelope_args_free(&env); /* wipes the key */
    free(meta);
    ck_model_close(om);
    ck_write_claim_release(&claim);
    if (rc < 0 && made != NULL)
        rmdir(made); /* nothing written: as it was */
    free(made);
    return rc;
}

/* OUT as a directory format's (a OneFlow snapshot), which the format
 * writes whole: holding OUT's claim as a file's save does (its lock
 * beside OUT, named without a trailing slash), since the formats take no
 * lock of their own. */
static int write_dir(const convert_opts *o, const ck_model *in, const ck_convert_plan *p,
                     ck_progress *prog, ck_error *err)
{
    char *out = ck_path_trimmed(o->out);
    if (out == NULL)
        return ck_nomem(err, o->out);
    ck_write_claim claim = CK_WRITE_CLAIM_NONE;
    ck_target_args a = {.out = o->out, .force = o->force, .progress = prog, .m = in};
    int rc = ck_write_claim_take(&claim, out, PROG, err) < 0
             ? -1 : target_of(o)->write_dir(&a, p->w, p->n, p->bytes, err);
    ck_write_claim_release(&claim);
    free(out);
    return rc;
}

static int convert(const convert_opts *o)
{
    ck_error err = {0};
    ck_model *m = ck_cli_open_model(&o->open, o->in, &err);
    if (m == NULL) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    ck_convert_plan p = {0};
    ck_progress prog = {.on = ck_progress_wanted(stderr, o->open.quiet), .out = stderr};
    const ck_target *tg = target_of(o);
    int rc = ck_convert_plan_build(m, &p, &err) < 0 ||
             ck_convert_plan_check(&p, m, tg, o->in, &err) < 0 ||
             check_not_in(o, m, &err) < 0 ? -1
             : tg->write_dir != NULL ? write_dir(o, m, &p, &prog, &err)
                                     : write_file(o, m, &p, &prog, &err);
    if (rc < 0)
        fprintf(stderr, PROG ": %s\n", err.msg);
    ck_convert_plan_free(&p);
    ck_model_close(m);
    return rc < 0 ? 1 : 0;
}

/* ---- the command line ---- */

static void usage(FILE *f)
{
    char targets[128];
    fprintf(f, "usage: " PROG " [OPTIONS] IN OUT\n"
            "Write the model IN in another format as OUT: a MindSpore .ckpt, a .safetensors\n"
            "(either .zst-compressed when OUT ends in .zst), a sharded set (OUT names its\n"
            ".safetensors.index.json), a PyTorch .pt or a OneFlow snapshot directory.\n"
            "OUT's format is --to's, else its name's; a name ending in '/' or an existing\n"
            "directory is a OneFlow snapshot.  OUT is written atomically and checked against\n"
            "IN before it appears; what it cannot hold is refused before anything is written.\n"
            "  --to FORMAT           %s\n"
            "  -f, --force           replace an existing OUT (a directory only if it is a\n"
            "                        OneFlow snapshot or empty)\n"
            "  -q, --quiet           no progress bar (drawn only when stderr is a\n"
            "                        terminal), no warning\n"
            "  -o enc_mode=MODE      encrypt a .ckpt OUT: AES-GCM or AES-CBC, with the key\n"
            "  -o zstd_level=N       the level of a .zst OUT (default 3)\n"
            "  -o max_shard_size=SIZE  a sharded set's largest shard, as Hugging Face cuts\n"
            "                        them (default 5GB; KB, MB, GB are decimal, K, M, G\n"
            "                        and KiB, MiB, GiB binary)\n"
            "  --nocrc               do not verify IN's .ckpt CRC trailer\n"
            "  --no-index            neither read nor save a .ckpt's index (ckptfs(1));\n"
            "  -o index_dir=DIR      where it is kept (default ~/.cache/ckptfs)\n"
            "  --map NAME|FILE       write OUT under the names a map gives IN's\n"
            "                        (ckptfs --maps lists the shipped maps)\n"
            "  -o key_file=PATH      the key of an encrypted IN, and of OUT with enc_mode\n"
            "                        (else CKPTFS_KEY_HEX)\n"
            "  -o tmp_max=SIZE       most a zstd IN without seek table may take in $TMPDIR\n"
            "  -o strategy=FILE      IN is a distributed checkpoint's directory\n"
            "  -o A,B                several -o options at once (a comma in a value: \\,)\n"
            "  -h, --help; -V, --version\n"
            "or:    " PROG " --into TEMPLATE [--map FILE] [--strict] [OPTIONS] CKPT OUT\n"
            "Write the ONNX or MindIR graph TEMPLATE as OUT with its initializers (parameters)\n"
            "filled from CKPT's tensors of the same names, --map FILE's lines \"CKPT_NAME\n"
            "TEMPLATE_NAME\" renaming CKPT's first (with --into, --map is that file, not a\n"
            "map of docs/maps.md); --strict: every one must be filled.\n"
            "IN: a file ckptfs reads, an iteration_<N> directory, a OneFlow snapshot\n"
            "directory, a Hugging Face model folder (config.json beside model.safetensors,\n"
            "its .index.json or pytorch_model.bin: that file), or with -o strategy a\n"
            "distributed checkpoint's directory.  A set's missing directory is made.\n"
            "Exit status: 0 written, 1 failed (nothing written), 2 a usage error.\n",
            targets_list(targets, sizeof targets));
}

/* "--NAME VALUE" or "--NAME=VALUE" at argv[*i]: VALUE (*i moved past it),
 * or NULL when it is not that option.  A missing value is "". */
static const char *word_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0 || (a[n] != '\0' && a[n] != '='))
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    return *i + 1 < argc ? argv[++*i] : "";
}

/* An option of this tool's own at argv[*i] (ck_cli_args): 1 taken, 0 not
 * one, -1 bad. */
static int own_arg(void *ctx, int argc, char **argv, int *i)
{
    convert_opts *o = ctx;
    const char *a = argv[*i], *v;
    if (strcmp(a, "-f") == 0 || strcmp(a, "--force") == 0) {
        o->force = true;
    } else if (strcmp(a, "--strict") == 0) {
        o->strict = true;
    } else if ((v = word_value(argc, argv, i, "--into")) != NULL) {
        o->into = v;
    } else if (strcmp(a, "--to") == 0 || strncmp(a, "--to=", 5) == 0) {
        const char *name = a[4] == '=' ? a + 5 : *i + 1 < argc ? argv[++*i] : "";
        if ((o->to = target_by_name(name)) == NULL)
            return -1;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "enc_mode")) != NULL) {
        ++*i;
        o->enc_mode = v;
        return envelope_takes("enc_mode", v) ? 1 : -1;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "zstd_level")) != NULL) {
        ++*i;
        unsigned level; /* a level of zstd's, of 1 and more */
        if (ck_cli_uint(v, 1, UINT_MAX, &level) < 0 || !envelope_takes("zstd_level", v))
            return -1;
        o->zstd_level = v;
    } else if ((v = ck_cli_o_value(argc, argv, *i, "max_shard_size")) != NULL) {
        ++*i;
        if (ck_parse_size(v, &o->max_shard_size) < 0)
            return -1;
    } else {
        return 0;
    }
    return 1;
}

/* What mode the command line asks for.  ckptfs-convert has one today; a
 * mode that takes its own options (a graph filled from a checkpoint) is
 * parsed into its own arguments and dispatched in main beside it. */
typedef enum mode {
    MODE_CONVERT,
    MODE_FILL,                  /* --into TEMPLATE: template_fill.h */
} mode;

/* --into's options go together, and the target's options do not apply:
 * OUT is written in TEMPLATE's format.  A message, or NULL. */
static const char *check_fill_opts(const convert_opts *o)
{
    if (o->into == NULL)
        return o->strict ? "--strict goes with --into" : NULL;
    if (o->into[0] == '\0' || (o->map != NULL && o->map[0] == '\0'))
        return "--into and --map take a file";
    if (o->to != NULL || o->enc_mode != NULL || o->zstd_level != NULL || o->max_shard_size != 0)
        return "--into writes TEMPLATE's format: --to, -o enc_mode, -o zstd_level and "
               "-o max_shard_size do not apply";
    return NULL;
}

/* The consistency of the options with OUT: a message, or NULL. */
static const char *check_opts(convert_opts *o)
{
    static char why[192];
    if (o->to == NULL && (o->to = target_of_out(o->out)) == NULL) {
        char targets[128];
        snprintf(why, sizeof why, "cannot tell OUT's format from its name: give --to %s",
                 targets_list(targets, sizeof targets));
        return why;
    }
    if (o->enc_mode != NULL && (!o->to->encryptable || ck_envelope_by_extension(o->out)))
        return "-o enc_mode encrypts a .ckpt OUT only (not compressed)";
    if (o->zstd_level != NULL && (target_of(o)->write_dir != NULL || !ends_with(o->out, ".zst")))
        return "-o zstd_level is for a .zst OUT";
    if (o->max_shard_size != 0 && !target_of(o)->sharded)
        return "-o max_shard_size is for a sharded set OUT (NAME.safetensors.index.json)";
    return NULL;
}

int main(int argc, char **argv)
{
    convert_opts o = {0};
    mode md = MODE_CONVERT;
    const char *path[2] = {NULL, NULL};
    ck_cli_args args = {.prog = PROG, .usage = usage, .open = &o.open, .own = own_arg,
                        .ctx = &o, .pos = path, .max_pos = 2};
    int got = ck_cli_read_args(&args, argc, argv);
    if (got > 0)
        return 0; /* --help, --version */
    if (got < 0 || path[1] == NULL) {
        if (got == 0)
            fprintf(stderr, PROG ": %s; ", path[0] ? "no OUT given" : "no IN and OUT given");
        fprintf(stderr, "usage: " PROG " [OPTIONS] IN OUT (try --help)\n");
        return 2;
    }
    o.in = path[0];
    o.out = path[1];
    /* With --into, --map FILE is the fill's name map (template_fill.h),
     * older than the maps of codec/map/; without, IN's names are mapped. */
    if (o.into != NULL) {
        o.map = o.open.map;
        o.open.map = NULL;
    }
    const char *why = check_fill_opts(&o);
    if (why != NULL) {
        fprintf(stderr, PROG ": %s; usage: " PROG " [OPTIONS] IN OUT (try --help)\n", why);
        return 2;
    }
    if (o.into != NULL)
        md = MODE_FILL;
    /* The key encrypts OUT, or opens an encrypted TEMPLATE: IN may be plain. */
    o.open.key_optional = o.enc_mode != NULL || o.into != NULL;
    if (md == MODE_CONVERT && (why = check_opts(&o)) != NULL) {
        fprintf(stderr, PROG ": %s: %s\n", o.out, why);
        return 2;
    }
    ck_error err = {0};
    if (ck_cli_load_key(&o.open, &err) < 0) { /* once, for IN, OUT and TEMPLATE */
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 1;
    }
    ck_collection_opts open = ck_cli_collection_opts(&o.open, &o.open.env);
    int rc = md == MODE_CONVERT
                 ? convert(&o)
                 : ck_template_fill(&(ck_fill_args){.tmpl = o.into, .ckpt = o.in,
                                                    .open = &open, .map = o.map,
                                                    .out = o.out, .force = o.force,
                                                    .strict = o.strict,
                                                    .progress = ck_progress_wanted(stderr,
                                                                                   o.open.quiet)});
    ck_cli_key_wipe(&o.open);
    return rc;
}
