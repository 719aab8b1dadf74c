/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_dir: a OneFlow snapshot directory, read-only, as one model: a
 * collection (format `oneflow`, without a writer) that the mount and every
 * tool (ckptfs-dump, -stat, -diff, -convert) take as MODEL.  A directory is
 * one when it holds `pickled_data` or `snapshot_done`, or a subdirectory
 * holds an `out`; -o strategy and iteration directories keep their
 * precedence (open_path.c's order).
 *
 * Two layouts:
 * - pickled (OneFlow 0.6-0.9 flow.save, and 1.0 with save_as_external_data):
 *   `pickled_data` names the tensors, in the state dict's order, and the
 *   directory `tensor_<N>/{meta,out}` of each (oneflow_pickle.h).  A
 *   listed directory missing, or a tensor directory the pickle does not
 *   list, is refused, naming it.
 * - legacy (flow.checkpoint.save, flow.save before 0.6, nn.Graph saves):
 *   every subdirectory holding `out` is a tensor named by the directory
 *   (decoded as dir_name.h escapes it, so a tree ckptfs wrote reads back
 *   under its names; a name escaping would not give is taken as it is),
 *   sorted bytewise by name.  Entries without `out`, and files beside them
 *   (snapshot_done, model.mlir, stray *.npy), are skipped as OneFlow skips
 *   them; `out` without `meta` is refused, naming the entry: its shape
 *   cannot be known (OneFlow 0.3/0.4 took it from the job).  A symbolic
 *   link among the entries is refused, not followed.
 * Each `meta` (oneflow_meta.h) must name a numeric type (kChar's one-byte
 * elements are not MindSpore str: refused), and each `out` must be a
 * regular file of exactly the elements x type size its `meta` describes
 * (overflow-checked).
 *
 * Files are reached beneath the directory's descriptor, no symbolic link
 * followed, FIFOs and devices refused without blocking.  No descriptor is
 * kept per tensor: the model's one byte source stands for all the `out`
 * files one after another, and opens the file a read falls in on demand,
 * checking it is still the file (device, inode, size) indexed at open
 * (else EIO, "changed since the snapshot was opened").  So the number of
 * tensors is bounded by memory alone, not by the process's descriptors
 * (often 1024) nor CK_MAX_SOURCES; an open per read is cheap beside the
 * chunk it reads (the tools' 4 MiB by default), and since the source keeps
 * no state between reads the tools' threads share it without its lock.
 * The format's extent_file names the `out` holding a tensor's bytes, for
 * ckptfs-dump's FILE:OFF+LEN and for another user's reads through an
 * allow_other mount (checked against that `out`'s mode and the way to it,
 * as on disk); it maps an offset back by the tensor (tensor i's file is the
 * i-th), not by the offset alone, which an empty `out` shares with the
 * next file.
 *
 * In a training run's directory (codec/run_dir.h) a subdirectory is a
 * snapshot once it holds the file OneFlow's writers write last,
 * snapshot_done (legacy) or pickled_data (pickled), a regular file, no
 * link followed; it is complete then when nobody may write the directory
 * or its files have settled, and orders by time (oneflow_dir.c cites the
 * writers).  Its attributes, in the run and in a mount of it alone, are
 * the directory's mode, owner and inode, its files' sizes together and
 * the newest mtime of those and the directory's.
 *
 * Checked against tests/oracle/oneflow_oracle.py (Python's own pickler and
 * a restricted unpickler, protobuf's text_format, numpy) in
 * tests/bats/oneflow_dir.bats: the real fixtures, pickles of protocols 2 to
 * 5, 0 and 10,000 entries, a 5,000-tensor legacy snapshot read with 64
 * descriptors allowed, hostile pickles and directories.
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
