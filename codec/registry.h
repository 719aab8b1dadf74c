/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry: the formats and envelopes ckptfs knows, each kind
 * in one table (registry.c).
 *
 * Each entry is a format's reader (format.h), its writer (codec/io/writer.h;
 * NULL where ckptfs reads the format but does not save it) and what
 * ckptfs-convert needs to write another model as it (codec/io/target.h;
 * NULL where it does not), what --into needs to fill a model of it with
 * a checkpoint's weights (target.h too; NULL: none) and, optionally, its view: another model shown
 * by the mount as its files (view.h, -o as=NAME; NULL: none), all
 * defined in the format's folder,
 * codec/FORMAT/.  The table is
 * its own module, apart from the interfaces it lists, so that a format
 * includes only those interfaces and the table includes the formats.
 *
 * Adding a format: its folder with a reader defining a ck_format and a
 * writer defining a ck_writer, and one line in the table.  In full, it
 * touches its folder codec/FORMAT/ (reader and writer, each a .c and a
 * .h, the writer also defining the format's ck_target when ckptfs-convert
 * is to write it; the Makefile takes every source there), its line in the
 * table (which ckptfs-convert --to and the mount both read), its dtypes in
 * core/dtype.c when they are new, and its tests: a bats suite, an oracle,
 * the fuzz target's seeds in tests/fuzz/run.sh.
 *
 * The registry also opens a model file by its name (ck_model_open): it
 * chooses the format and hands the core (core/model.h) that format and
 * the table of envelopes, so that the core, the envelopes' walk
 * (envelope.c) and the writers (codec/io/writer.h) never call up into it.
 * The collections, which open their member files through it, have their
 * own table above it (open_path.h).
 *
 * Each envelope is a ck_envelope_kind (envelope_kind.h): how its files are
 * detected and opened, and the writer of its saves, defined in its
 * folder (codec/cipher/, codec/zstd/).  Adding an envelope: its folder
 * (kind, source, writer), one line in that table and its tests; envelope.c
 * walks it and names none.  What it keeps and the options it takes are
 * structs of its folder, behind ck_envelope.state and its ck_envelope_args
 * slot, made and freed by its own hooks (open, option, close,
 * free_options): nothing outside its folder gains a field.
 */
#ifndef CK_REGISTRY_H
#define CK_REGISTRY_H

#include "core/model.h"
#include "envelope_kind.h"
#include "format.h"

struct ck_writer;
struct ck_target;
struct ck_template;
struct ck_view;

/* The format a file name says by its extension (before an envelope's,
 * ".zst"), or NULL. */
const ck_format *ck_format_by_extension(const char *path);
/* How long the extension of f that path ends in is (".pth": 4), before an
 * envelope's; 0 when it ends in none of them. */
size_t ck_format_extension_len(const ck_format *f, const char *path);
/* The format called name, or NULL. */
const ck_format *ck_format_by_name(const char *name);
/* The format of a file whose name says none: a MindSpore checkpoint, which
 * has no magic number and whose users name it as they like. */
const ck_format *ck_format_default(void);
/* The writer of format f; NULL when ckptfs does not save it (yet). */
const struct ck_writer *ck_format_writer(const ck_format *f);
/* Format f as ckptfs-convert's OUT (codec/io/target.h); NULL when ckptfs
 * does not convert into it. */
const struct ck_target *ck_format_target(const ck_format *f);
/* Format f as ckptfs-convert --into's TEMPLATE (codec/io/target.h); NULL
 * when its models are no graph to fill. */
const struct ck_template *ck_format_template(const ck_format *f);
/* The view of format f (view.h): -o as=NAME, f called NAME; NULL when f
 * has none. */
const struct ck_view *ck_format_view(const ck_format *f);
/* The i-th format of the table, or NULL past the last. */
const ck_format *ck_format_at(size_t i);

/* The envelope kinds in the order a file's leading bytes are tried: the
 * i-th, or NULL past the last. */
const ck_envelope_kind *ck_envelope_kind_at(size_t i);
/* The kind a file name says by its extension (model.ckpt.zst), or NULL. */
const ck_envelope_kind *ck_envelope_by_extension(const char *path);
/* The envelope option NAME=VALUE (-o key_file=PATH, -o enc_mode=AES-GCM,
 * -o zstd_level=19), as the envelope that has it reads it into its slot of
 * a: 1 taken, 0 no envelope's, -1 a bad value (err, naming the option).
 * The caller names the options and knows nothing else of them. */
int ck_envelope_option(const char *name, const char *value, ck_envelope_args *a, ck_error *err);
/* Once the options are given: what they name is read (the key of -o
 * key_file, else of CKPTFS_KEY_HEX, which this takes out of the
 * environment).  0, or -1 (err). */
int ck_envelope_args_ready(ck_envelope_args *a, ck_error *err);
/* The kind a new model at path is wrapped in by its first save: as the
 * options a ask (a key and -o enc_mode), else as its name says (.zst),
 * else none (NULL).  -1 (EINVAL, naming path) for options no new model
 * can take (a key without a mode, a key and a compressed name). */
int ck_envelope_for_new(const char *path, const ck_envelope_args *a,
                        const ck_envelope_kind **wrap, ck_error *err);

/* Open dir->base in dir (ck_model_open_file): as opts->format, else the
 * format its name says, else the default; its envelope detected among the
 * table's kinds.  path names it in messages; the model keeps a reference
 * to dir. */
ck_model *ck_model_open_at(ck_model_dir *dir, const char *path, const ck_open_opts *opts,
                           ck_error *err);
/* The same, opening path's directory first (ckptfs-dump, tests). */
ck_model *ck_model_open(const char *path, const ck_open_opts *opts, ck_error *err);
/* A model with no tensors for a file that does not exist yet (mount -o
 * create; ck_model_new); the first commit creates dir->base.
 * format_name: a format's name (format.h), or NULL to go by the file
 * name's extension.  Refused (ENOTSUP, EINVAL) for a format ckptfs does
 * not create, or options ck_envelope_for_new refuses. */
ck_model *ck_model_empty(ck_model_dir *dir, const char *path, const char *format_name,
                         const ck_open_opts *opts, ck_error *err);
/* The writer of m's format (ck_format_writer), or NULL. */
const struct ck_writer *ck_writer_of(const ck_model *m);

#endif
