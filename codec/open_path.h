/* SPDX-License-Identifier: Apache-2.0 */
/*
 * open_path: a path opened as one model, a collection's directory or a
 * model file, and the table of the collections ckptfs knows.
 *
 * The top of codec/: the collections (collection.h) open their member
 * files through the registry of formats (registry.h), so their table
 * cannot be the registry's without a circle; it is here, above both, and
 * the mount and the tools open paths through ck_open_path so that each
 * opens what the other does.  The table's order is the probing order (a
 * strategy given names the distributed merge; the Hugging Face folder is
 * last).  Adding a collection: its folder and one line in this table
 * (open_path.c).
 */
#ifndef CK_OPEN_PATH_H
#define CK_OPEN_PATH_H

#include "collection.h"
#include "registry.h"

/* The i-th collection of the table (in probing order), or NULL past the
 * last: ckptfs --help lists them. */
const ck_collection *ck_collection_at(size_t i);

/* The collection the directory path is: the distributed checkpoint when a
 * strategy is given, else the first whose probe claims it; NULL for a
 * file, or a directory none claims (a training run's). */
const ck_collection *ck_collection_of(const char *path, const char *strategy);

/* The names file a snapshot copied into a mount may bring (collection.h):
 * a collection's; NULL when none has one. */
const ck_names_file *ck_copied_names_file(void);

/* Open path as one model: a collection's directory (ck_collection_of), or
 * a model file (registry.h, ck_model_open), which a collection's
 * directory may stand for (ck_collection_file: its messages name
 * "path/file").  A collection's model files
 * take the key when they are encrypted and open plain beside it.  NULL
 * with err; messages name path as given. */
ck_model *ck_open_path(const char *path, const ck_collection_opts *o, ck_error *err);

#endif
