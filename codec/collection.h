/* SPDX-License-Identifier: Apache-2.0 */
/*
 * collection: what a collection is, for the rest of ckptfs.
 *
 * A collection is a directory that opens as one model: a distributed
 * checkpoint merged by its strategy file (collections/dist_merge.h), a
 * MindSpore Transformers iteration directory (collections/iteration_dir.h),
 * a OneFlow snapshot directory (oneflow/oneflow_dir.h), a Hugging Face
 * model folder (collections/hf_folder.h).  Their table (open_path.h)
 * lists them, so that the mount and the tools open the same directories
 * the same way; a collection opens its member files through the registry
 * of formats (registry.h), below that table.  A directory no collection
 * claims is a training run's, which the mount follows (mount/run_mount.h); a
 * collection with a completion rule (ck_collection_done) is one checkpoint
 * of such a run (codec/run_dir.h), found, judged and opened beneath the
 * run's descriptor through the hooks below alone, whatever its kind.
 */
#ifndef CK_COLLECTION_H
#define CK_COLLECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "core/ck_error.h"
#include "core/model.h"

/* How a collection is opened. */
typedef struct ck_collection_opts {
    ck_open_opts open;          /* for each of its model files */
    const char *strategy;       /* -o strategy=FILE: a distributed checkpoint's */
    bool watch;                 /* watch its files for other programs' writes (a mount) */
} ck_collection_opts;

/* A names file: a file at the root of a snapshot directory that alone
 * holds the real names of its tensor directories (OneFlow's pickled_data,
 * beside tensor_<N>/).  A snapshot copied into a mount (cp -r, rsync, tar)
 * takes those names at its next save (mount/tree_names.c). */
typedef struct ck_named_dir {
    char *name;                 /* the tensor's real name, UTF-8, NUL-terminated */
    char *path;                 /* its directory: a single component */
} ck_named_dir;

typedef struct ck_named_dirs {
    ck_named_dir *v;            /* in the file's order */
    size_t n;
} ck_named_dirs;

typedef struct ck_names_file {
    const char *name;           /* "pickled_data" */
    uint64_t max_bytes;         /* parsed whole in memory: a bigger one is refused */
    /* Parse buf (len bytes; file names it in messages) into out: 0, or -1
     * with err naming file and the offset.  Duplicate names or paths, and
     * a path that is not one directory name, are refused.  Free out with
     * free_names, after a failure too. */
    int (*parse)(const void *buf, size_t len, const char *file, ck_named_dirs *out,
                 ck_error *err);
    void (*free_names)(ck_named_dirs *names);
} ck_names_file;

/* When a directory of the collection in a training run's directory is
 * complete, its writer done with it: each writer's own signal, else the
 * settle rule files have (codec/run_dir.h: read-only, or unchanged for
 * the run's settle time), judged by the attributes stat_at gives. */
typedef struct ck_collection_done {
    /* The file its writer writes last, whose arrival makes the directory
     * one (DCP's .metadata); NULL: none.  A run's watcher passes over
     * names starting with '.' (its own locks, editors' files) but these;
     * a last file named otherwise (OneFlow's snapshot_done) needs none,
     * and the rule that a directory is one only once it is there is its
     * probe_at's and stat_at's, never this name's. */
    const char *marker;
    /* The directory's number from its name (iteration_<N>: N), or NULL.
     * A run whose complete checkpoints are all of this collection is
     * ordered by it, not by time. */
    bool (*number)(const char *name, uint64_t *n);
    /* A file beside the directory, in the run's, holding the number of
     * the last complete one (mindformers' latest_checkpointed_iteration.txt):
     * one it names, or a lower number, is complete by its writer's word
     * (committed), whatever its times say; a higher one is not.  NULL,
     * or no such file: the settle rule.  Needs number. */
    const char *tracker;
    /* The attributes of the directory name beneath dfd as a mount of it
     * gives them, from its files (no link followed): all their sizes, the
     * newest mtime, the permissions all of them grant, an owner; -1 when
     * it holds none of them (not shown yet) or is gone. */
    int (*stat_at)(int dfd, const char *name, struct stat *all);
} ck_collection_done;

typedef struct ck_collection {
    const char *name;           /* "iteration" */
    const char *title;          /* in messages: "an iteration directory" */
    /* Whether the directory path is one of these (NULL: only when asked
     * for by its option, -o strategy). */
    bool (*probe)(const char *path);
    /* Open the directory path as one model; NULL with err. */
    ck_model *(*open)(const char *path, const ck_collection_opts *o, ck_error *err);
    /* Whether name, an entry of the directory open as dfd (O_PATH will
     * do), is one of these, reached with no link followed; NULL: the
     * collection is found by path alone, never in a run's directory. */
    bool (*probe_at)(int dfd, const char *name);
    /* Open the directory below (one name) beneath the directory open as
     * dfd, no link followed, as one model; path names it in messages.
     * Who may read its files is checked from dfd (a run's directory).
     * NULL with err naming the file at fault. */
    ck_model *(*open_at)(int dfd, const char *below, const char *path,
                         const ck_collection_opts *o, ck_error *err);
    /* Its completion rule: set, with probe_at and open_at, for a
     * collection a training run's directory lists as a checkpoint (read-only
     * there: a run's writer lock is one file's); NULL: never listed. */
    const ck_collection_done *done;
    const ck_names_file *names_file; /* NULL: none */
    /* A directory that stands for one model file of it (a Hugging Face
     * model folder's model.safetensors): that file's name in path, a
     * static string, or NULL when path holds none.  The mount and the tools
     * open the file as when given it (ck_collection_file), writable as it
     * is.  NULL hook: the collection is its files together. */
    const char *(*model_file)(const char *path);
} ck_collection;

/* The model file a directory of collection c stands for (model_file):
 * "path/name" in a new string, path's trailing slashes aside; NULL when c
 * has none or path holds none (or out of memory).  Here, beside the type
 * (collection.c), so that a collection asks it without its table. */
char *ck_collection_file(const ck_collection *c, const char *path);

#endif
