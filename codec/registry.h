/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry: the formats, envelopes and collections ckptfs knows, each kind
 * in one table (registry.c).
 *
 * Each entry is a format's reader (format.h), its writer (export/writer.h;
 * NULL where ckptfs reads the format but does not save it) and what
 * ckptfs-convert needs to write another model as it (export/target.h;
 * NULL where it does not) and, optionally, its view: another model shown
 * by the mount as its files (view.h, -o as=NAME; NULL: none), all
 * defined in the format's folder,
 * codec/FORMAT/.  The table is
 * its own module, apart from the interfaces it lists, so that a format
 * includes only those interfaces and the table includes the formats.
 *
 * Adding a format: its folder with a reader defining a ck_format and a
 * writer defining a ck_writer, and one line in the table.
 *
 * A collection (collection.h) is a directory that opens as one model; the
 * mount and the tools open paths through ck_open_path, so that each opens
 * what the other does.
 *
 * Each envelope is a ck_envelope_kind (envelope_kind.h): how its files are
 * detected and opened, and the writer of its saves, defined in its
 * folder (codec/cipher/, codec/zstd/).  Adding an envelope: its folder and
 * one line in that table; envelope.c walks it and names none.
 */
#ifndef CK_REGISTRY_H
#define CK_REGISTRY_H

#include "collection.h"
#include "envelope_kind.h"
#include "format.h"

struct ck_writer;
struct ck_target;
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
/* Format f as ckptfs-convert's OUT (export/target.h); NULL when ckptfs
 * does not convert into it. */
const struct ck_target *ck_format_target(const ck_format *f);
/* The view of format f (view.h): -o as=NAME, f called NAME; NULL when f
 * has none. */
const struct ck_view *ck_format_view(const ck_format *f);
/* The i-th format of the table, or NULL past the last. */
const ck_format *ck_format_at(size_t i);

/* The i-th collection of the table (in probing order), or NULL past the
 * last: ckptfs --help lists them. */
const ck_collection *ck_collection_at(size_t i);

/* The collection the directory path is: the distributed checkpoint when a
 * strategy is given, else the first whose probe claims it; NULL for a
 * file, or a directory none claims (a training run's). */
const ck_collection *ck_collection_of(const char *path, const char *strategy);

/* The model file a directory of collection c stands for (collection.h,
 * model_file): "path/name" in a new string, path's trailing slashes
 * aside; NULL when c has none or path holds none (or out of memory). */
char *ck_collection_file(const ck_collection *c, const char *path);

/* The names file a snapshot copied into a mount may bring (collection.h):
 * a collection's; NULL when none has one. */
const ck_names_file *ck_copied_names_file(void);

/* Open path as one model: a collection's directory (ck_collection_of), or
 * a model file (core/model.h, ck_model_open), which a collection's
 * directory may stand for (ck_collection_file: its messages name
 * "path/file").  A collection's model files
 * take the key when they are encrypted and open plain beside it.  NULL
 * with err; messages name path as given. */
ck_model *ck_open_path(const char *path, const ck_collection_opts *o, ck_error *err);

/* The envelope kinds in the order a file's leading bytes are tried: the
 * i-th, or NULL past the last. */
const ck_envelope_kind *ck_envelope_kind_at(size_t i);
/* The kind a file name says by its extension (model.ckpt.zst), or NULL. */
const ck_envelope_kind *ck_envelope_by_extension(const char *path);
/* The kind a key wraps a plain model in on save (-o enc_mode), or NULL. */
const ck_envelope_kind *ck_envelope_keyed(void);

#endif
