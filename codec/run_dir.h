/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_dir: the checkpoints of a training run's directory, found by their
 * names and modes alone (run_files.h: which files count, when one is
 * complete, the newest; run_dir.c: a directory is a checkpoint when a
 * collection of the registry claims it, judged by that collection's
 * completion rule, collection.h).  No checkpoint is opened by the scan: a mount lists the
 * run from this, asks ck_run_entry_check of the one `latest` would name,
 * and opens a checkpoint when it is first looked into (a directory's by
 * ck_run_dir_open); ckptfs-dump RUN_DIR prints it through the same code
 * (ck_run_dir_scan, ck_run_entry_check; its format column the
 * collection's name for a directory).  Collections without a completion
 * rule (a distributed checkpoint, asked for by -o strategy; a Hugging
 * Face model folder) are found by path only and never listed in a run;
 * the iteration, OneFlow snapshot and DCP directories are.
 */
#ifndef CK_RUN_DIR_H
#define CK_RUN_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "collection.h"
#include "core/ck_error.h"
#include "run_files.h"

/* Read the directory at path into out.  A file whose mode still lets its
 * owner write and that changed less than settle seconds before now is not
 * complete yet.  The caller frees out with ck_run_list_free, also after a
 * failure. */
int ck_run_dir_scan(const char *path, double settle, const struct timespec *now,
                    ck_run_list *out, ck_error *err);
/* The same for the directory open as dfd (O_PATH will do), path naming it
 * in messages: a mount lists its run again through the one descriptor. */
int ck_run_dir_scan_at(int dfd, const char *path, double settle, const struct timespec *now,
                       ck_run_list *out, ck_error *err);


struct ck_open_opts;

/* Whether entry e of the run directory dfd (path naming it in messages)
 * opens: it is opened as a mount opens it, read-only, and closed.  For a
 * .ckpt that reads every record's framing, not its tensors' data: how a
 * truncated file is told.  On failure e->error is the reader's message
 * (file and offset), or NULL when out of memory; the failure is in err
 * too, errnum saying whether it was the file's or the process's
 * (EMFILE, ENOMEM). */
int ck_run_entry_check(int dfd, const char *path, ck_run_entry *e,
                       const struct ck_open_opts *o, ck_error *err);

/* The directory below of the run directory dfd, of collection c, as a
 * model: through c's open_at, no link followed, watching nothing (path
 * names it in messages).  How the mount and ck_run_entry_check open a
 * directory checkpoint.  NULL with err. */
ck_model *ck_run_dir_open(int dfd, const ck_collection *c, const char *below, const char *path,
                          const struct ck_open_opts *o, ck_error *err);

/* Whether a run's watcher must heed the file name beneath one of the
 * run's subdirectories though it starts with '.': a collection's marker
 * (collection.h, ck_collection_done), written last, that makes a
 * directory one. */
bool ck_run_marker(const char *name);

/* The same for the run directory at path. */
int ck_run_entry_check_path(const char *path, ck_run_entry *e, const struct ck_open_opts *o,
                            ck_error *err);



#endif
