/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dist_merge: a MindSpore distributed checkpoint (one checkpoint per rank,
 * DIST_DIR/rank_<id>/) seen as the one model it was cut from.
 *
 * The strategy file (dist_strategy.h) says how each parameter was cut over
 * the devices; each rank's checkpoint holds its slice.  The merged model's
 * tensors are the full parameters, assembled as MindSpore's own merge
 * (_reshape_param_data, transform_checkpoints) assembles them, but never
 * in memory: each is described by the ranks' byte extents.  A split of
 * dim 0 is the slices' extents one after the other; any other split is a
 * strided gather (tensor_index.h, ck_gather).  A slice several ranks hold
 * (replicas) is read from the lowest of them, and a parameter the strategy
 * does not name is rank 0's as stored.  No tensor byte is read to open it.
 *
 * The ranks are rank_0 .. rank_<devices - 1>, each opened beneath the one
 * descriptor of DIST_DIR (no link followed) and its one checkpoint file
 * found by the rules of a run's files (run_files.h), opened as any model
 * (any format, envelopes included).  Their files share one inotify instance
 * (ck_dir_share_watch): the per-user instances are few.  A rank opens
 * with no saved index (core/saved_index.h): its bytes are read through the
 * merged model, which would skip the index's per-tensor check.  The
 * merged model owns one view per rank source (model_set.h).
 *
 * The merged model reads and is never saved: its format (dist_format) is
 * in no registry table and has no writer, so nothing recognises, creates
 * or saves one, and the mount is read-only.
 *
 * Checked against tests/oracle/dist_oracle.py (MindSpore's
 * _reshape_param_data and _construct_tensor_layout_for_opt_shard in
 * numpy) and by dist_random.py's random layouts against both that merge
 * and the full model the ranks were cut from; the fuzz target's
 * `strategy` mode feeds mutated strategies to the merge of four fixed
 * ranks.
 */
#ifndef CK_DIST_MERGE_H
#define CK_DIST_MERGE_H

#include <stdbool.h>

#include "../core/ck_error.h"
#include "../collection.h"
#include "../core/model.h"

/* Each rank holds one open model, and so at least one descriptor. */
#define CK_DIST_MAX_RANKS 4096

/* Open the ranks in the directory dist_path and merge them by the
 * strategy file at strategy_path.  Refuses, in one line naming the rank
 * and the parameter, what does not fit the strategy: a rank missing or
 * beyond its devices, a rank holding other than one checkpoint, ranks
 * disagreeing on a parameter's type or shape or on which parameters
 * there are, a strategy naming parameters the ranks lack.  watch: watch
 * the ranks' files for writes by other programs (what a mount does). */
ck_model *ck_dist_open(const char *dist_path, const char *strategy_path, const ck_open_opts *o,
                       bool watch, ck_error *err);

/* The collection (registry.h): asked for by -o strategy, never probed. */
extern const ck_collection ck_collection_dist;

#endif
