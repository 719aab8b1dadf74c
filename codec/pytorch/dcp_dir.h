/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dcp_dir: a PyTorch Distributed Checkpoint directory (what
 * torch.distributed.checkpoint.save writes with its FileSystemWriter)
 * seen as the one model it was saved from.
 *
 * The directory holds `.metadata` (dcp_metadata.h) and data files
 * `__<rank>_<n>.distcp`.  Each item of a data file is a byte range: a
 * chunk of a tensor saved as a standalone torch.save archive, or a value
 * (BytesStorageMetadata) saved as torch.save bytes.  Each tensor is
 * assembled from its chunks as a distributed merge assembles MindSpore
 * ranks (tensor_grid.h), from the chunks' byte extents: chunks cut along
 * dimension 0 follow each other (any sizes), chunks of a grid interleave
 * (a gather; only the last dimension cut must be even), and a tensor of
 * one chunk is that chunk's view whatever its strides.  No tensor byte is
 * read to open it: only .metadata and, per item, the archive's directory
 * and its data.pkl.
 *
 * Values saved as bytes show as pt_reader shows a torch.save file's
 * leaves, under their name: numbers as read-only 0-d tensors, tensors as
 * views; anything else is counted in the notes.  The model reads and is
 * never saved: its format has no writer.
 */
#ifndef CK_DCP_DIR_H
#define CK_DCP_DIR_H

#include <stdbool.h>

#include "../collection.h"

/* Whether path is a directory holding a DCP `.metadata` (a pickle). */
bool ck_dcp_dir_path(const char *path);
/* Whether dir, a name in the directory open as dfd (O_PATH will do), is
 * such a directory, reached with no link followed (neither dir nor its
 * .metadata): a DCP checkpoint in a training run's directory.  A name
 * starting with '.' never is. */
bool ck_dcp_dir_at(int dfd, const char *dir);

/* Open the DCP directory below (a single name) beneath the directory open
 * as root_fd (a run's, O_PATH will do: who may read its files is checked
 * from there), with no link followed, as one model; path names it in
 * messages.  watch: watch its files for other programs' writes.  NULL
 * with err naming the file at fault. */
ck_model *ck_dcp_open_at(int root_fd, const char *below, const char *path, bool watch,
                         ck_error *err);

/* The collection (registry.h), probed by ck_dcp_dir_path. */
extern const ck_collection ck_collection_dcp;

#endif
