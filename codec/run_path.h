/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_path: a training run's checkpoint named as a mount of the run shows
 * it, for the programs that take one model (ckptfs-stat, -diff, -convert,
 * -dump of a model, and ckptfs itself: fuse/main.c).
 *
 * A mount of RUN shows RUN/latest (the newest complete checkpoint that
 * opens) and RUN/NAME for each checkpoint (its file's name without the
 * format's extension; a collection's directory by its own name).  Those
 * names are not on disk, so a tool given one would say "no such file";
 * here they are taken as the mount takes them, from the same listing
 * (run_dir.h), so that `ckptfs-diff RUN/latest RUN/NAME` compares what
 * `diff -r MNT/latest MNT/NAME` would.  A name on disk always wins: a
 * file really called "latest" is that file.
 */
#ifndef CK_RUN_PATH_H
#define CK_RUN_PATH_H

#include "core/ck_error.h"

struct ck_open_opts;

/* How long an unfinished (owner-writable) file must stay unchanged to
 * count as complete, when the user gave no -o settle: the mount's. */
#define CK_RUN_SETTLE_DEFAULT 5.0

/* Resolve path for opening as one model.  1: path names a checkpoint of
 * a run by its shown name, *real the path of its file or directory (to
 * free); 0: path is to be opened as it is (*real NULL); -1 with err: path
 * is a run's directory itself, which no one-model program can open (the
 * message says how to name one of its checkpoints), or "latest" of a run
 * with none.  o opens candidates for latest as a mount would (NULL: the
 * defaults). */
int ck_run_checkpoint_path(const char *path, const struct ck_open_opts *o, char **real,
                           ck_error *err);

#endif
