/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iteration_dir: a MindSpore Transformers "Checkpoint 2.0" iteration
 * directory (iteration_<N>/: metadata.json, common.json, and
 * [<prefix>-]{model,opt}-<i>-<n>.safetensors shard files) seen as the one
 * model it holds: every tensor of every shard file, each sliced parameter
 * assembled from its slices as mindformers' loader assembles it
 * (checkpoint/reshard.py), by metadata.json's chunks and storage entries.
 * No tensor byte is read to open it; reads go to the shard files' extents
 * (tensor_grid.h).  Read-only: its format has no writer.
 *
 * Its shard files open with no saved index (core/saved_index.h): their
 * bytes are read through the iteration's model, which would skip the
 * index's per-tensor check.  In a run directory it is one checkpoint
 * (its collection's completion rule: the number in iteration_<N>, and
 * mindformers' latest_checkpointed_iteration.txt), listed with its shard
 * files' size, mtime and mode together, computed as the opened model's
 * are (ck_mset_stat), so the "still the file listed" check holds for it.
 *
 * No public example of such a directory exists; the layout follows
 * mindformers' writer and loader (iteration_dir.c cites them).
 */
#ifndef CK_ITERATION_DIR_H
#define CK_ITERATION_DIR_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/ck_error.h"
#include "../collection.h"
#include "../core/model.h"

/* metadata.json bigger than this is refused (jansson holds several times
 * its size while parsing). */
#define CK_ITER_MAX_METADATA (64u << 20)
/* At most this many shard files: each is an open model. */
#define CK_ITER_MAX_FILES 4096

/* Whether name is an iteration directory's, "iteration_<digits>"; the
 * number into *n. */
bool ck_iteration_dir_name(const char *name, uint64_t *n);

/* Whether path's last component (trailing slashes aside) is an iteration
 * directory's name. */
bool ck_iteration_dir_path(const char *path);

/* Whether name is a shard file's, [<prefix>-]{model,opt}-<i>-<n>.safetensors
 * (at least 7 digits each); its kind (0 model, 1 opt) and i. */
bool ck_iteration_file_name(const char *name, int *kind, uint64_t *i);

/* Open the iteration directory below beneath the directory open as
 * root_fd (a run's: who may read its files is checked from there), or
 * root_fd itself when below is NULL (O_PATH will do; path names it in
 * messages), as one model.  Refuses, in one line naming the file and
 * the parameter, metadata.json that is not the layout described, a slice
 * missing or of another shape or type, a storage entry naming a file or a
 * tensor that is not there, and, with no metadata.json, a name in two
 * files.  watch: watch the files for writes (a mount). */
ck_model *ck_iteration_open_at(int root_fd, const char *below, const char *path,
                               const ck_open_opts *o, bool watch, ck_error *err);
/* The same, opening path first. */
ck_model *ck_iteration_open(const char *path, const ck_open_opts *o, bool watch,
                            ck_error *err);

/* The collection (registry.h): a directory named iteration_<N>. */
extern const ck_collection ck_collection_iteration;

#endif
