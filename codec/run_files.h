/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_files: the checkpoint files of a directory, by their names and
 * modes alone (run_files.c says which files count, when one is complete
 * and which is the newest), and the list a scan gives.  The half of a
 * training run's scan (run_dir.h) that knows no collection's table: a
 * distributed checkpoint lists each rank's directory with it, so that
 * the collections, below that table, never reach up into it.  What is
 * not a file checkpoint is handed to the caller's hook, which may add
 * an entry for it (the run's rank_<id>/ and collections' directories).
 */
#ifndef CK_RUN_FILES_H
#define CK_RUN_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "collection.h"
#include "core/ck_error.h"
#include "format.h"

/* One checkpoint of the directory. */
typedef struct ck_run_entry {
    char *name;                 /* what it is shown as: its file's name without
                                 * the format's extension (and ".zst"); the whole
                                 * file name when that would not be unique, or
                                 * would be "latest" */
    char *file;                 /* its file's name in the directory ("rank_<id>/<file>"
                                 * for a rank's directory, see run_dir.c) */
    const ck_format *format;    /* by the file's name (NULL for a directory) */
    const ck_collection *collection; /* the collection a directory of the run is
                                      * (iteration_<N>/, a OneFlow snapshot, a DCP
                                      * directory); NULL
                                      * for a file, or a rank's directory's file */
    bool numbered;              /* named <prefix>-<epoch>_<step>, as ModelCheckpoint does */
    unsigned reuse;             /* numbered: N of a prefix ModelCheckpoint renamed to
                                 * <prefix>_N when the run reused the directory; 0 */
    uint64_t epoch, step;       /* numbered: from the name */
    struct timespec mtime;
    uint64_t size;
    mode_t mode;                /* and owner: what a mount shows before it opens it */
    uid_t uid;
    gid_t gid;
    bool complete;              /* its writer is done (see run_dir.c) */
    bool committed;             /* one its collection's tracker names (an iteration):
                                 * complete by the writer's own word, whatever times
                                 * and events say */
    char *error;                /* why it does not open (ck_run_entry_check), or NULL:
                                 * such a one is never the newest */
    bool opens;                 /* ck_run_entry_check opened it */
} ck_run_entry;

typedef struct ck_run_list {
    ck_run_entry *e;            /* in name order */
    size_t n;
    long latest;                /* the newest complete one that is not known
                                 * not to open (error), or -1 */
} ck_run_list;

/* Asked of each name of the directory that is not a checkpoint file:
 * append at most one entry to l for it (l has room for one), 0, or -1
 * with err (out of memory). */
typedef int (*ck_run_other)(void *arg, ck_run_list *l, int dfd, const char *name,
                            const char *path, ck_error *err);

/* Read the checkpoints of the directory open as dfd (O_PATH will do;
 * path names it in messages) into out, other (arg) asked of each other
 * name (NULL: files alone), then make the shown names unique and pick
 * out->latest.  A file whose mode still lets its owner write and that
 * changed less than settle seconds before now is not complete yet.  The
 * caller frees out with ck_run_list_free, also after a failure. */
int ck_run_files_scan_at(int dfd, const char *path, double settle, const struct timespec *now,
                         ck_run_other other, void *arg, ck_run_list *out, ck_error *err);
void ck_run_list_free(ck_run_list *l);

/* Whether a file (or a directory's files together) of these attributes
 * is complete by the rule files have: read-only, or unchanged for settle
 * seconds before now. */
bool ck_run_settled(const struct stat *st, double settle, const struct timespec *now);

/* Pick l->latest again, by the rules above, after the caller has judged
 * some entries otherwise complete than their names and modes say (a
 * mount that saw one still being written). */
void ck_run_list_pick_latest(ck_run_list *l);

/* Pick l->latest as ck_run_list_pick_latest does, asking check (arg) of
 * the one picked whether it opens, until one does or none is left.  A
 * check that says no (-1) sets e->error; such an entry is passed over. */
void ck_run_list_pick_opening(ck_run_list *l, int (*check)(void *arg, ck_run_entry *e),
                              void *arg);

/* Whether name is a distributed checkpoint's rank directory, "rank_<id>"
 * with id in decimal, no leading zero; the id into *id. */
bool ck_rank_dir_name(const char *name, uint64_t *id);

#endif
