/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree: the mounted tree and the edits not yet saved, without FUSE.
 *
 * Each visible tensor is an entry: its shown meta (type and shape), and
 * where `out` comes from — the model's extents, or an overlay in the spill
 * file once it has been written to.  A meta being written is buffered and only
 * replaces the entry's meta when it parses.  A save validates every entry,
 * re-encodes the model through save/ (unchanged tensors copied byte for
 * byte), replaces the file atomically and rebinds the entries to the new
 * file, which then serves every read.  The save runs beside the requests
 * (tree_save_begin/run/end): edits made meanwhile are kept for the next.
 *
 * Entries keep their position for the life of the mount (new directories
 * are appended, removed ones stay as tombstones), so the front-end can
 * derive inode numbers from it.
 *
 * Not thread-safe: the caller serializes every call on a tree, except
 * tree_save_run, which touches only its save.
 *
 * Mode: writable when the model's owner may write it (-o ro, -o rw
 * override).  -o create starts from ck_model_empty; until the first save
 * there is no file to equal, so no snapshot_done (tree_equals_file).  A
 * save asked for by name (creating snapshot_done, fsync) of such a model
 * saves even with no edit (make_file): an empty snapshot copied into a
 * new safetensors writes a 0-tensor file.  A .ckpt cannot be empty
 * (MindSpore loads no checkpoint without a tensor): that save, and any
 * save of a .ckpt whose tensors were all removed, is refused by its
 * writer before anything is written.
 *
 * A copied snapshot's names file (tree_names.c) is applied at the save
 * only once every path is a live directory, every entry removable as a
 * renamed tensor and the real names (through ck_dir_name) distinct; a
 * refusal (a parse error with its offset, a missing or doubled
 * directory) fails the save with one line naming the file, changes
 * nothing and keeps the file.  While it exists the tree is dirty
 * (names_pending), so snapshot_done is absent and the automatic save
 * comes.
 *
 * The tree is in pieces by mechanism, each calling only those below it:
 *   tree_spill.c     the spill file and its areas (the bytes written);
 *   tree.c           the entries: what each shows, whether it differs from
 *                    the file, its times, whether it may be written;
 *   tree_edit.c      edits of an entry's out and meta;
 *   tree_dirs.c      tensor directories, and making or removing their files;
 *   tree_extras.c    the other files (and which of them is a names file);
 *   tree_validate.c  what blocks a save, every tensor named;
 *   tree_names.c     a names file applied by the save;
 *   tree_save.c      the save (tree_save_*).
 * Their types are in tree_types.h.  This header is what the rest of the
 * mount uses, whichever piece defines it; its last part is what tree.c
 * gives the other pieces, which include it (tree.c includes none of
 * theirs but tree_spill.h).
 */
#ifndef CKPTFS_TREE_H
#define CKPTFS_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "../codec/collection.h"
#include "../codec/core/model.h"
#include "../codec/view.h"
#include "../codec/core/progress.h"

#include "tree_types.h"

int tree_init(tree *tr, ck_model *model, const ck_open_opts *opts, bool writable,
              ck_error *err);
void tree_free(tree *tr);

/* About how much memory the index and the tree hold (a run directory
 * bounds its open checkpoints by it): the arrays and the arena's chunks
 * (names), not the allocator's overhead nor the pages of a wrapped
 * model's cache. */
size_t tree_footprint(const tree *tr);

/* The tensor the entry came from, or NULL for a new one. */
static inline const ck_tensor *entry_tensor(const tree *tr, const entry *e)
{
    return e->tensor_id == ENTRY_NEW ? NULL : &tr->model->index.tensors[e->tensor_id];
}

/* Position of the live entry whose directory is dir_name, or -1. */
int64_t tree_lookup(const tree *tr, const char *dir_name);

const char *entry_dir_name(const tree *tr, const entry *e);
const char *entry_name(const tree *tr, const entry *e, size_t *len);
bool entry_has_meta(const entry *e);
bool entry_has_out(const entry *e);
/* Shown type and shape (NULL dtype: a new meta not yet valid), size of
 * `out`, text of `meta`. */
const ck_dtype *entry_dtype(const tree *tr, const entry *e);
const int64_t *entry_dims(const tree *tr, const entry *e, uint32_t *ndim);
uint64_t entry_out_size(const tree *tr, const entry *e);
size_t entry_meta_text(const tree *tr, const entry *e, char *buf, size_t cap);
/* Any change not yet in the model file, or a names file waiting
 * (snapshot_done is absent then); O(1). */
bool tree_dirty(const tree *tr);
/* The times a node shows: the later of the model file's mtime and the
 * node's last change (extra: an extra file's id, or -1; e: an entry, or
 * NULL for the root). */
struct timespec tree_entry_mtime(const tree *tr, const entry *e);
struct timespec tree_entry_dir_mtime(const tree *tr, const entry *e);
struct timespec tree_extra_mtime(const tree *tr, size_t id);
struct timespec tree_root_mtime(const tree *tr);

/* Whether the file exists and the tree equals it: when the root shows
 * snapshot_done.  A model created empty has no file until its first save. */
bool tree_equals_file(const tree *tr);

/* Whether a tree opened afresh from the model file (tree_init) would have
 * the same positions (hence inode numbers) for the same tensors: no
 * tombstone, no directory added, none moved by a save, no extra file ever
 * made (their ids would start again).  A run directory closes and opens
 * its checkpoints again only when this holds.  O(entries). */
bool tree_numbered_as_file(const tree *tr);

/* Tensor directories: make one (its name is unescaped by the listing
 * rule), remove an empty one, rename one (replacing the target).  Removing
 * or renaming (or replacing) a tensor of the model's graph is refused with
 * EBUSY while a node reads it, and always for tensors that live inside a
 * node (Constants, subgraphs, map parameters): see tree_dirs.c, in_use(). */
int64_t tree_mkdir(tree *tr, const char *dir_name, ck_error *err);
int tree_rmdir(tree *tr, entry *e, ck_error *err);
int tree_rename(tree *tr, entry *e, const char *new_dir_name, ck_error *err);
/* Make or remove an entry's `meta` or `out` file. */
int entry_create(tree *tr, entry *e, bool meta, ck_error *err);
int entry_unlink(tree *tr, entry *e, bool meta, ck_error *err);

/* Extra files: dir is an entry position or EXTRA_IN_ROOT. */
int64_t tree_extra_lookup(const tree *tr, uint32_t dir, const char *name);
int64_t tree_extra_create(tree *tr, uint32_t dir, const char *name, ck_error *err);
int tree_extra_unlink(tree *tr, size_t id, ck_error *err);
int tree_extra_write(tree *tr, size_t id, const void *buf, size_t size, uint64_t off,
                     ck_error *err);
int tree_extra_truncate(tree *tr, size_t id, uint64_t size, ck_error *err);
/* rename(2) of an extra file: over another name in the same directory, or
 * over the directory's meta (parsed; a bad one refuses the rename) or out
 * (its bytes become the new out). */
int tree_extra_rename(tree *tr, size_t id, const char *new_name, ck_error *err);
int tree_extra_replace_file(tree *tr, size_t id, entry *e, bool meta, ck_error *err);
/* The directory names the last saves' names file took away, handed
 * over (free with tree_renamed_free); their count. */
size_t tree_take_renamed(tree *tr, tree_renamed **out);
void tree_renamed_free(tree_renamed *list, size_t n);

/* Whether the entry's tensor may be written (a writable mount, a tensor
 * whose type the writer can write, not a map part): the w bits its files
 * show; check names the reason when it may not. */
bool entry_writable(const tree *tr, const entry *e);
int entry_write_check(const tree *tr, const entry *e, ck_error *err);

/* `out` edits: the first one copies the model's bytes to a spill file
 * (nothing is copied when truncating). */
int entry_out_truncate(tree *tr, entry *e, uint64_t size, ck_error *err);
int entry_out_write(tree *tr, entry *e, const void *buf, size_t size, uint64_t off,
                    ck_error *err);

/* `meta` edits: begin (optionally empty) and write into a buffer.  check
 * (at each close) parses it and applies it if valid, else refuses with the
 * reason, keeping the previous meta and the buffer (the file may still be
 * open through another descriptor); finish (at the last close) does the
 * same and drops the buffer. */
int entry_meta_begin(tree *tr, entry *e, bool truncate, ck_error *err);
int entry_meta_write(entry *e, const void *buf, size_t size, uint64_t off, ck_error *err);
int entry_meta_check(tree *tr, entry *e, ck_error *err);
int entry_meta_finish(tree *tr, entry *e, ck_error *err);
/* truncate(2) on a meta: only to 0, or within a meta being written. */
int entry_meta_truncate(tree *tr, entry *e, uint64_t size, ck_error *err);

/* A save, in three steps so that requests are answered while it encodes:
 *   begin  (serialized with the other calls): apply a names file
 *          (its names, then the file is gone), validate every entry and
 *          describe the tree as it is now; 0 and no save when nothing
 *          changed, -1 and err when the tree cannot be saved as it is
 *          (a refused names file changes nothing and stays);
 *   run    (on any thread, beside the other calls): encode, verify, commit
 *          and open the new file; the result goes to end;
 *   end    (serialized again): switch the tree to the new file, or on
 *          failure leave it as it is; frees the save.
 * Edits made between begin and end are kept as edits of the new file, for
 * the next save. */
typedef struct tree_save tree_save;
/* make_file: save even a tree with no edit when its model has no file yet
 * (-o create) and its format has a file of no tensors: a save asked for
 * by name then writes it. */
int tree_save_begin(tree *tr, tree_save **save, bool make_file, ck_error *err);
/* A save asked for otherwise than by snapshot_done, or one of its files:
 * hold: the edits of the tensors that block the save (a wrong-sized out,
 * no meta) are held back, still shown and unsaved, and the rest is
 * saved, unless one of need[] (entry positions: the file fsync'd) is
 * among them.  fsync of one tensor's out then makes it durable whatever
 * another tensor holds, as on a disk. */
typedef struct tree_save_ask {
    bool make_file;             /* as tree_save_begin's */
    bool hold;
    const uint32_t *need;
    size_t n_need;
    /* The one process that asked through snapshot_done (0: none, or
     * several).  When it also created the names file, and that file names
     * directories not in the tree yet, the snapshot_done is its copy's own,
     * made before the copy is done (GNU cp copies a directory in inode
     * order, which often puts a snapshot's two files before its tensor
     * directories): the save waits, said in *held, instead of failing the
     * copy.  The next ask (touch snapshot_done, fsync, the automatic save,
     * the unmount) saves, or refuses if they are still missing. */
    pid_t copier;
} tree_save_ask;
/* As tree_save_begin; *held: which tensors are held back and why, in one
 * line (msg empty: none), when it returns 0; *save may then be NULL when
 * the held edits were all there was. */
int tree_save_begin_ask(tree *tr, tree_save **save, const tree_save_ask *ask, ck_error *held,
                        ck_error *err);
/* Encode, read back and commit (codec/io/commit_group.h, up to the commit
 * point). */
int tree_save_run(tree_save *save, ck_error *err);
/* Before run: count the bytes it writes in p (a progress of its own, for
 * the caller to read from any thread: ck_progress_read), and draw a bar
 * on out unless it is NULL, for a save of TREE_PROGRESS_BAR_MIN bytes or
 * more. */
#define TREE_PROGRESS_BAR_MIN (64ull << 20)
void tree_save_show_progress(tree_save *save, ck_progress *p, FILE *out);
/* Switch the tree to the files read back (rc: tree_save_run's).  *old:
 * the model file replaced, for the caller to close once it no longer
 * holds what serializes the tree (closing frees the replaced file, which
 * takes a while for gigabytes); NULL when there is none. */
int tree_save_end(tree *tr, tree_save *save, int rc, ck_model **old, ck_error *err);
/* Then, without the tree's serialization and after closing *old: rename
 * the new files into place when the commit was a journal's, and free the
 * save; returns rc, or -1 when a rename fails (the next mount finishes
 * it).  Closing the old file first matters on a FUSE filesystem: libfuse
 * renames over an open file in two steps (to .fuse_hiddenN, then the new
 * file), and on s3fs each is a copy and a delete, between which other
 * machines see no model; over a closed one, s3fs replaces the object in
 * one copy. */
int tree_save_finish(tree_save *save, int rc, ck_error *err);

/* ---- for the tree's pieces (mount/tree_*.c), not its users ----
 *
 * Every edit ends in tree_changed, which keeps the count behind
 * tree_dirty, marks the entry for a running save and stamps its time:
 * `return tree_changed(tr, e, edit(...))`. */
int tree_changed(tree *tr, entry *e, int rc);
/* The count again, from scratch: after a save changed every entry at once. */
void tree_recount(tree *tr);
/* Whether the entry is not what the model file holds. */
bool tree_entry_differs(const entry *e);
/* The entry's edit record, made on the first edit; the editable one
 * checks first that the entry may be edited (entry_write_check). */
edit *tree_edit_of(tree *tr, entry *e, ck_error *err);
edit *tree_editable_edit(tree *tr, entry *e, ck_error *err);
void tree_edit_free(tree *tr, edit *ed);
/* (Re)build the directory-name map from the live entries. */
int tree_index_names(tree *tr, ck_error *err);
/* The entry's name, quoted for a message. */
const char *tree_quoted(const tree *tr, const entry *e, char q[CK_QUOTE_BUF]);
/* The time now, as a change's. */
void tree_stamp(struct timespec *t);
/* Out of memory, said for the model. */
int tree_nomem(const tree *tr, ck_error *err);

#endif
