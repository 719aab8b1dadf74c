/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_dir: a OneFlow snapshot directory, read-only, as one model for
 * the command-line tools (ckptfs-dump, ckptfs-stat, ckptfs-diff).
 *
 * Two layouts (docs/design.md, "OneFlow snapshot directories"):
 * - pickled (OneFlow 0.6-0.9 flow.save, and 1.0 with save_as_external_data):
 *   `pickled_data` names the tensors, in the state dict's order, and the
 *   directory `tensor_<N>/{meta,out}` of each (oneflow_pickle.h).  A
 *   listed directory missing, or a tensor directory the pickle does not
 *   list, is refused, naming it.
 * - legacy (flow.checkpoint.save, flow.save before 0.6, nn.Graph saves):
 *   every subdirectory holding `out` is a tensor named by the directory
 *   (decoded as dir_name.h escapes it, so a tree ckptfs wrote reads back
 *   under its names), sorted bytewise by name.  Entries without `out`, and
 *   files beside them (snapshot_done, model.mlir, stray *.npy), are skipped
 *   as OneFlow skips them; `out` without `meta` is refused, naming the
 *   entry: its shape cannot be known.
 * Each `out` must hold exactly the elements its `meta` describes.
 *
 * Files are reached beneath the directory's descriptor, no symbolic link
 * followed, FIFOs and devices refused without blocking.  No descriptor is
 * kept per tensor: the model's one byte source stands for all the `out`
 * files one after another, and opens the file a read falls in on demand,
 * checking it is still the file (device, inode, size) indexed at open.
 * So the number of tensors is bounded by memory alone, not by the
 * process's descriptors.
 */
#ifndef CK_ONEFLOW_DIR_H
#define CK_ONEFLOW_DIR_H

#include <stdbool.h>

#include "../core/ck_error.h"
#include "../collection.h"
#include "../core/model.h"

#define CK_ONEFLOW_PICKLE "pickled_data"
#define CK_ONEFLOW_DONE "snapshot_done"

/* Whether path is a directory that looks like a OneFlow snapshot: it holds
 * pickled_data or snapshot_done, or a subdirectory holds an `out`. */
bool ck_oneflow_dir_path(const char *path);

/* Open the snapshot directory path (named so in messages) as a model of
 * format "oneflow".  NULL with err on failure. */
ck_model *ck_oneflow_open(const char *path, ck_error *err);

/* The format of the model ck_oneflow_open gives (opened by its collection,
 * never by a file's name: it has no open and no extension). */
extern const ck_format ck_format_oneflow;

/* The collection (registry.h): a directory ck_oneflow_dir_path calls a
 * snapshot. */
extern const ck_collection ck_collection_oneflow;

#endif
