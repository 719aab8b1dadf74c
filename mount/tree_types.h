/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_types: what the mounted tree is made of (its entries and their
 * edits, the extra files, the spill areas that hold the bytes written)
 * and the tree itself.  Types only: every piece of the tree (mount/tree*.c)
 * works on them, and the lowest, the spill allocator (tree_spill.h),
 * reaches them without the rest of the tree's interface (tree.h, which
 * includes this for the tree's users).
 */
#ifndef CKPTFS_TREE_TYPES_H
#define CKPTFS_TREE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "../codec/collection.h"
#include "../codec/core/model.h"
#include "../codec/view.h"

/* A meta is a few lines; anything longer is not one. */
#define TREE_META_MAX 65536

#define ENTRY_NEW UINT32_MAX

/* Bytes written into the tree (an edited `out`, an extra file) live in a
 * range of the mount's one spill file (tree.spill_fd), so that edits hold
 * no descriptor of their own: however many tensors are edited, the mount
 * holds one, and a save always has the descriptors it needs. */
typedef struct spill_area {
    bool used;                  /* false: no bytes here (not written yet, or freed) */
    bool frozen;                /* a running save reads these bytes: copy before changing */
    uint64_t base;              /* offset in the spill file */
    uint64_t cap;               /* bytes reserved from base; past size they read 0 */
    uint64_t size;              /* the file's size */
} spill_area;

/* What an entry's edits hold; allocated on the first edit only, so an
 * untouched mount costs 16 bytes per tensor here. */
typedef struct edit {
    char *name;                 /* renamed or new: the tensor name ... */
    size_t name_len;
    char *dir_name;             /* ... and its directory name */
    bool no_meta, no_out;       /* removed, or not yet made in a new directory */
    bool meta_changed;          /* meta holds the shown type and shape */
    ck_meta meta;
    spill_area overlay;         /* unused while `out` is the model's bytes */
    char *meta_buf;             /* a meta being written, or NULL */
    size_t meta_len;
    /* A write to it was refused (entry_meta_write): said then, so its
     * close says nothing more, and the previous meta stays. */
    bool meta_refused;
    /* When the tensor last changed: its directory, meta and out show it
     * (with the file's, whichever is later) as mtime and ctime, so that
     * rsync and make see an edit before it is saved. */
    struct timespec mtime;
    struct timespec dir_mtime;  /* its directory's: made, or meta or out made or removed */
} edit;

typedef struct entry {
    uint32_t tensor_id;         /* in the model's index, or ENTRY_NEW */
    bool deleted;               /* kept as a tombstone: positions are inodes */
    bool touched;               /* changed since the running save began */
    bool held;                  /* blocks the running save, which saves the rest (fsync) */
    bool counted;               /* in tree.n_differ */
    edit *edit;
} entry;

#define EXTRA_IN_ROOT UINT32_MAX

/* A root file named as the names file (tree.names_file, codec/collection.h:
 * a snapshot's, copied in with its tensor_<N> directories) is unlike
 * other files: it asks for a save,
 * which first gives the directories it lists their real names
 * (tree_save_begin) and then drops it. */

/* A directory name a save took away when it applied the names file, for
 * the front-end to tell the kernel: renamed (pos: the entry, now named
 * otherwise), or merged into the tensor of its real name (pos: that
 * tensor, whose meta and out it replaced). */
typedef struct tree_renamed {
    char *old_dir;
    uint32_t pos;
    bool merged;
} tree_renamed;

/* Any other file made in the tree: the temporary files of rsync, sed -i,
 * editors.  Their bytes live in the spill file until renamed over a meta or
 * out (or removed) and are never saved into the model. */
typedef enum extra_alias { ALIAS_NONE, ALIAS_META, ALIAS_OUT, ALIAS_SNAPSHOT_DONE } extra_alias;

typedef struct extra {
    uint32_t dir;               /* entry position, or EXTRA_IN_ROOT */
    char *name;
    spill_area area;
    bool deleted;               /* a tombstone: ids are inode numbers */
    /* Renamed over meta, out or snapshot_done: the kernel now knows that
     * file by this inode, which therefore stands for it from then on. */
    extra_alias alias;
    unsigned mode;              /* S_IFREG | bits after a chmod; 0: the tree's */
    struct timespec mtime;      /* its last write (as edit.mtime) */
    pid_t maker;                /* the process that created it (0: unknown): a names
                                 * file's copier (tree_save_ask.copier) */
} extra;

/* Bytes of the spill file freed while a save reads them: punched when
 * the save ends. */
typedef struct spill_range {
    uint64_t base, len;
} spill_range;

typedef struct tree {
    ck_model *model;
    /* The model file's owner, modes and mtime as shown, taken at the mount
     * and at each save: a save checks (and updates) the model's own on its
     * thread. */
    struct stat file_st;
    extra *extras;
    size_t n_extras, cap_extras;
    ck_open_opts open_opts;     /* to reopen the model after a commit */
    entry *entries;
    size_t n_entries, cap_entries;
    ck_name_map by_dir;         /* directory name -> position, live entries */
    bool writable;
    int spill_fd;               /* every spill_area's bytes; -1 until the first */
    uint64_t spill_end;         /* where the next area starts */
    uint64_t spill_max;         /* bytes of edits a secret envelope's model keeps in memory */
    size_t n_differ;            /* entries that differ from the file: O(1) tree_dirty */
    bool saving;                /* between tree_save_begin and tree_save_end */
    bool placing;               /* after it, until the new files are renamed into place
                                 * (journaled saves: tree_save_finish, then cleared by
                                 * the caller) */
    spill_range *freed;         /* frozen ranges given up during the save */
    size_t n_freed, cap_freed;
    const ck_names_file *names_file; /* the registry's (NULL: none) */
    bool names_pending;         /* a root names file waits for the next save */
    tree_renamed *renamed;      /* names taken away, until tree_take_renamed */
    size_t n_renamed;
    struct timespec root_mtime; /* the root's last entry made, removed or renamed */
} tree;

#endif
