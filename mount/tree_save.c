/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_save: the save (tree_save_begin, _run, _end, _finish; tree.h),
 * the top piece of the tree.
 *
 * tree_save_begin copies what the encoder needs (names, shapes, where the
 * bytes are) into the save, and freezes the spill areas it reads: an edit
 * made before the save ends moves a frozen area's bytes before changing
 * them (spill_area_reserve), and a frozen range given up is punched only
 * when the save ends.  The old model file stays open, and readable, until
 * tree_save_end switches the tree to the new one.
 */
#include "tree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/core/arena.h"
#include "../codec/core/byte_source.h"
#include "../codec/core/name_map.h"
#include "../codec/core/saved_index.h"
#include "../codec/io/atomic_writer.h"
#include "../codec/io/writer.h"
#include "../codec/registry.h"
#include "../save/save_seq.h"
#include "tree_extras.h"
#include "tree_names.h"
#include "tree_spill.h"
#include "tree_validate.h"

/* A held tensor is saved as the file has it, under its old name: another
 * entry that took that name (a swap of two names, a directory made
 * where it was) would be saved beside it. */
static bool held_name_taken(const tree *tr)
{
    for (size_t i = 0; i < tr->n_entries; i++) {
        const entry *e = &tr->entries[i];
        const ck_tensor *t = entry_tensor(tr, e);
        if (!e->held || t == NULL)
            continue;
        int64_t now = tree_lookup(tr, t->dir_name);
        if (now >= 0 && (size_t)now != i)
            return true;
    }
    return false;
}

/* New entries come after the file's in the tree (ENTRY_NEW positions are
 * the last; the writers place new tensors after the others): a held new
 * entry before one this save writes as new would leave a new entry
 * before a saved one. */
static bool held_new_first(const tree *tr)
{
    bool held_new = false;
    for (size_t i = 0; i < tr->n_entries; i++) {
        const entry *e = &tr->entries[i];
        if (e->deleted || e->tensor_id != ENTRY_NEW)
            continue;
        if (e->held)
            held_new = true;
        else if (held_new)
            return true;
    }
    return false;
}

/* A save asked by fsync (ask->hold) does not fail because of other
 * tensors: the edits of those that block it are held back, unsaved and
 * still shown, and the rest is saved, as fsync of one file of a disk
 * makes that file durable whatever another file holds.  It fails as
 * tree_validate_all says when a tensor it must save (ask->need) is among
 * them, when a names file is in play (its renames are all or none), when
 * a held tensor's old name is taken, or when a held new tensor was made
 * before a new one it would save.  *held: what is held and why
 * (empty: nothing). */
static int hold_blockers(tree *tr, const tree_save_ask *ask, const names_plan *plan,
                         ck_error *held)
{
    char joined[CK_ERROR_MSG_MAX];
    size_t shown;
    ck_error first;
    if (!ask->hold || plan->listed != NULL || tr->names_pending)
        return -1;
    size_t n_held = tree_blockers(tr, true, joined, &shown, &first);
    bool refused = held_name_taken(tr) || held_new_first(tr);
    for (size_t k = 0; k < ask->n_need; k++)
        refused |= ask->need[k] < tr->n_entries && tr->entries[ask->need[k]].held;
    if (refused || n_held == 0) {
        tree_unhold(tr);
        return -1;
    }
    const char *path = tr->model->path;
    if (n_held == 1)
        ck_fail(held, first.errnum, "%s: saved all but 1 tensor, whose edits stay unsaved: %s",
                path, joined);
    else if (shown < n_held)
        ck_fail(held, first.errnum, "%s: saved all but %zu tensors, whose edits stay unsaved: "
                "%s; and %zu more", path, n_held, joined, n_held - shown);
    else
        ck_fail(held, first.errnum, "%s: saved all but %zu tensors, whose edits stay unsaved: "
                "%s", path, n_held, joined);
    return 0;
}

struct tree_save {
    ck_model *model;            /* the file saved over: the tree's, until the switch */
    ck_open_opts open_opts;     /* to open the new file */
    ck_arena arena;             /* copies of names, shapes, directory names, pieces */
    ck_write_tensor *w;         /* the tree when the save began, in order */
    uint32_t *pos;              /* w[k]'s entry */
    const char **dir;           /* w[k]'s directory name, as saved */
    size_t n;
    size_t n_entries;           /* entries when the save began */
    ck_source *spill;           /* the frozen areas' bytes */
    ck_save *seq;               /* the save sequence (save_seq.h), until tree_save_finish */
    ck_model *saved;            /* the new files as read back before the commit */
    ck_model *kept;             /* the same, once the tree's: not the save's to close */
    uint64_t bytes;             /* the tensors' bytes: about the new version's size */
    ck_progress *progress;      /* counts the bytes written (NULL: none) */
    FILE *progress_out;         /* and draws a bar there (NULL: none) */
};

/* The writer's view of entry e, copied into the save: an edit made while
 * the save runs may free or change the edit's own name and shape. */
static int describe(tree *tr, const entry *e, ck_write_tensor *w, tree_save *save,
                    ck_error *err)
{
    const ck_tensor *t = entry_tensor(tr, e);
    const edit *ed = e->edit;
    *w = (ck_write_tensor){.orig_id = t ? e->tensor_id : CK_WRITE_NEW, .unchanged = true};
    if (t != NULL && (e->held || ed == NULL ||
                      (!ed->meta_changed && !ed->overlay.used && !ed->name)))
        return 0;
    bool overlay = ed != NULL && ed->overlay.used;
    if (!overlay && t == NULL) { /* validation guarantees a new tensor's out exists */
        char q[CK_QUOTE_BUF];
        return ck_fail(err, EIO, "%s: tensor '%s' has no bytes", tr->model->path,
                       tree_quoted(tr, e, q));
    }
    size_t len;
    uint32_t ndim;
    const char *name = entry_name(tr, e, &len);
    const int64_t *dims = entry_dims(tr, e, &ndim);
    size_t n_pieces = overlay ? 1 : t->n_ext;
    int64_t *dims_copy = ck_arena_alloc(&save->arena, (ndim ? ndim : 1) * sizeof *dims_copy);
    ck_piece *p = ck_arena_alloc(&save->arena, (n_pieces ? n_pieces : 1) * sizeof *p);
    w->name = ck_arena_strndup(&save->arena, name, len);
    if (dims_copy == NULL || p == NULL || w->name == NULL)
        return tree_nomem(tr, err);
    if (ndim > 0)
        memcpy(dims_copy, dims, ndim * sizeof *dims_copy);
    w->unchanged = false;
    w->name_len = len;
    w->dtype = entry_dtype(tr, e);
    w->dims = dims_copy;
    w->ndim = ndim;
    w->scalar_dims_zero = t && t->scalar_dims_zero && ndim == 0;
    if (overlay)
        p[0] = (ck_piece){.src = save->spill, .off = ed->overlay.base, .len = ed->overlay.size};
    else
        ck_pieces_of(tr->model, t, p);
    w->pieces = p;
    w->n_pieces = n_pieces;
    return 0;
}

static void save_free(tree_save *save)
{
    if (save == NULL)
        return;
    ck_source_close(save->spill);
    ck_save_abort(save->seq);
    ck_model_close(save->saved);
    ck_arena_free(&save->arena);
    free(save->w);
    free(save->pos);
    free(save->dir);
    free(save);
}

/* Entry i, saved as save->w[save->n]; a held one as the file has it,
 * a held new one not at all. */
static int add_entry(tree *tr, tree_save *save, uint32_t i, ck_error *err)
{
    const entry *e = &tr->entries[i];
    const ck_tensor *t = entry_tensor(tr, e);
    if (e->held && t == NULL)
        return 0;
    const char *dir = e->held ? t->dir_name : entry_dir_name(tr, e);
    save->pos[save->n] = i;
    save->dir[save->n] = ck_arena_strndup(&save->arena, dir, strlen(dir));
    if (save->dir[save->n] == NULL)
        return tree_nomem(tr, err);
    if (describe(tr, &tr->entries[i], &save->w[save->n], save, err) < 0)
        return -1;
    save->bytes += e->held ? t->nbytes : entry_out_size(tr, e);
    save->n++;
    return 0;
}

/* Every live entry, in position order, but the new directories a
 * names file named: those where the first of them is, in its order. */
static int add_entries(tree *tr, tree_save *save, const names_plan *plan, ck_error *err)
{
    bool in_order_done = false;
    for (size_t i = 0; i < tr->n_entries; i++) {
        if (tr->entries[i].deleted)
            continue;
        if (plan->listed == NULL || plan->listed[i] != LISTED_IN_ORDER) {
            if (add_entry(tr, save, (uint32_t)i, err) < 0)
                return -1;
            continue;
        }
        for (size_t k = 0; !in_order_done && k < plan->n_in_order; k++)
            if (add_entry(tr, save, plan->in_order[k], err) < 0)
                return -1;
        in_order_done = true;
    }
    return 0;
}

/* Whether a save has something to write: edits, or (make_file) the file
 * of a model created empty that was never saved.  A format with no file of
 * no tensors refuses that save with the reason (the encoder) rather than
 * answering "saved" with no file. */
static bool to_save(const tree *tr, bool make_file)
{
    return tree_dirty(tr) ||
           (make_file && tr->writable && tr->model->n_sources == 0 && ck_writer_of(tr->model));
}

/* Whether anything but the held entries' edits is to be saved. */
static bool held_all(const tree *tr)
{
    if (tr->model->env.fresh || tr->names_pending)
        return false; /* see tree_dirty */
    for (size_t i = 0; i < tr->n_entries; i++)
        if (tree_entry_differs(&tr->entries[i]) && !tr->entries[i].held)
            return false;
    return true;
}

/* A names file's refusal (err) that a copy still under way explains: the
 * save waits (tree_save_ask.copier), said in *held.  0: it waits; -1: the
 * refusal stands. */
static int copy_not_done(tree *tr, const tree_save_ask *ask, const names_plan *plan,
                         const ck_error *err, ck_error *held)
{
    int64_t id = tree_names_file_id(tr);
    if (!plan->absent || ask->copier == 0 || id < 0 || tr->extras[id].maker != ask->copier)
        return -1;
    ck_fail(held, err->errnum, "%s; taken as the snapshot_done of a copy not done yet (the "
            "process that wrote %s): the save waits for the next touch of snapshot_done",
            err->msg, tr->extras[id].name);
    return 0;
}

static int save_begin(tree *tr, tree_save **out, const tree_save_ask *ask, names_plan *plan,
                      ck_error *held, ck_error *err)
{
    if (tree_plan_names(tr, plan, err) < 0)
        return copy_not_done(tr, ask, plan, err, held);
    if (tree_validate_all(tr, err) < 0 && hold_blockers(tr, ask, plan, held) < 0)
        return -1;
    if (plan->listed != NULL && tree_apply_names(tr, plan, err) < 0)
        return -1;
    if (!to_save(tr, ask->make_file))
        return 0; /* the names were the directories' own */
    if (held->msg[0] != '\0' && held_all(tr)) {
        tree_unhold(tr);
        return 0; /* the file has all the rest already */
    }
    size_t cap = tr->n_entries + 1;
    tree_save *save = calloc(1, sizeof *save);
    if (save == NULL)
        return tree_nomem(tr, err);
    ck_arena_init(&save->arena);
    save->w = calloc(cap, sizeof *save->w);
    save->pos = calloc(cap, sizeof *save->pos);
    save->dir = calloc(cap, sizeof *save->dir);
    /* Every overlay is a range of the one spill file. */
    save->spill = ck_source_wrap_fd(tr->spill_fd, tr->spill_end, "spill file", err);
    if (save->w == NULL || save->pos == NULL || save->dir == NULL || save->spill == NULL) {
        save_free(save);
        return tree_nomem(tr, err);
    }
    if (add_entries(tr, save, plan, err) < 0) {
        save_free(save);
        return -1;
    }
    for (size_t i = 0; i < tr->n_entries; i++) {
        edit *ed = tr->entries[i].edit;
        if (ed != NULL && ed->overlay.used)
            ed->overlay.frozen = true;
    }
    save->model = tr->model;
    save->open_opts = tr->open_opts;
    save->n_entries = tr->n_entries;
    tr->saving = true;
    *out = save;
    return 0;
}

int tree_save_begin(tree *tr, tree_save **out, bool make_file, ck_error *err)
{
    tree_save_ask ask = {.make_file = make_file};
    ck_error held;
    return tree_save_begin_ask(tr, out, &ask, &held, err);
}

int tree_save_begin_ask(tree *tr, tree_save **out, const tree_save_ask *ask, ck_error *held,
                        ck_error *err)
{
    *out = NULL;
    held->msg[0] = '\0';
    held->errnum = 0;
    if (!to_save(tr, ask->make_file))
        return 0;
    names_plan plan = {0};
    int rc = save_begin(tr, out, ask, &plan, held, err);
    tree_plan_free(&plan);
    if (rc < 0)
        tree_unhold(tr);
    return rc;
}

/* Just before the commit point: another program may have replaced or
 * rewritten the model since it was mounted or last saved (a training job
 * saving it again, a mv over it).  Its file wins; the edits stay in the
 * tree, to be copied out. */
static int unchanged_on_disk(void *model, ck_error *err)
{
    ck_model *m = model;
    if (ck_model_check_unchanged(m, err) == 0)
        return 0;
    size_t len = strlen(err->msg);
    snprintf(err->msg + len, sizeof err->msg - len, "; the edits are kept: copy them out of "
             "the tree, then unmount and mount the new file");
    return -1;
}

/* The save sequence's run: the model checked before it and just before
 * its commit point.  The files read back are the new model: read again, a
 * .ckpt would cost every record header once more (its whole file over
 * object storage). */
static int save_run(tree_save *save, ck_model *m, uint64_t free_before, ck_error *err)
{
    if (ck_save_run(save->seq, save->w, save->n, err) < 0) {
        ck_atomic_space_note(m->dir, save->bytes, free_before, err);
        return -1;
    }
    save->saved = ck_save_take_saved(save->seq);
    return 0;
}

void tree_save_show_progress(tree_save *save, ck_progress *p, FILE *out)
{
    save->progress = p;
    save->progress_out = out;
}

int tree_save_run(tree_save *save, ck_error *err)
{
    ck_model *m = save->model;
    uint64_t free_before = ck_atomic_free_space(m->dir);
    ck_save_opts o = {.progress = save->progress, .keep_as = &save->open_opts,
                      .check = unchanged_on_disk, .check_arg = m};
    if ((save->seq = ck_save_begin(m->dir, m, &o, err)) == NULL)
        return -1;
    if (save->progress != NULL) {
        /* A bar for a save that takes a while: a small one would flicker. */
        FILE *out = save->bytes >= TREE_PROGRESS_BAR_MIN ? save->progress_out : NULL;
        ck_progress_start(save->progress, save->bytes, true, out);
    }
    int rc = save_run(save, m, free_before, err);
    if (save->progress != NULL)
        ck_progress_end(save->progress);
    return rc;
}

int tree_save_finish(tree_save *save, int rc, ck_error *err)
{
    if (save == NULL)
        return rc;
    /* Past the commit point the renames are done whatever else failed. */
    ck_error why = {0};
    if (ck_save_finish(save->seq, &why) < 0 && rc == 0) {
        *err = why;
        rc = -1;
    }
    save->seq = NULL;
    /* Its files are in place now: watched as those of a model opened
     * from them (file_watch.h), and its index kept for the next mount
     * (saved_index.h), as a full read of them would. */
    if (rc == 0 && save->kept != NULL) {
        ck_model_watch_files(save->kept);
        ck_saved_index_store(save->kept, &save->open_opts);
    }
    save_free(save);
    return rc;
}

/* An entry changed during the save keeps its edits, now over the saved
 * tensor: a shape it shows from the old tensor is pinned as an edit, since
 * the saved tensor has the shape the save began with. */
static void keep_edits(tree *tr, entry *e)
{
    const ck_tensor *t = entry_tensor(tr, e);
    edit *ed = e->edit;
    if (ed == NULL || ed->meta_changed || t == NULL)
        return;
    ed->meta = (ck_meta){.dtype = t->dtype, .ndim = t->ndim};
    memcpy(ed->meta.dims, t->dims, t->ndim * sizeof t->dims[0]);
    ed->meta_changed = true;
}

/* An entry unchanged since the save began is the saved tensor, with no
 * edit left but a meta still open for writing. */
static int drop_edits(tree *tr, entry *e, ck_error *err)
{
    edit *ed = e->edit;
    if (ed == NULL)
        return 0;
    char *meta_buf = ed->meta_buf;
    size_t meta_len = ed->meta_len;
    ed->meta_buf = NULL;
    tree_edit_free(tr, ed);
    e->edit = NULL;
    if (meta_buf == NULL)
        return 0;
    if (tree_edit_of(tr, e, err) == NULL) {
        free(meta_buf);
        return -1;
    }
    e->edit->meta_buf = meta_buf;
    e->edit->meta_len = meta_len;
    return 0;
}

/* The saved file's id of each saved entry, found by the directory name
 * it was saved under (an encoder may place new tensors anywhere). */
static uint32_t *saved_ids(const tree *tr, const tree_save *save, ck_error *err)
{
    const ck_model *m = save->saved;
    uint32_t *ids = malloc((save->n_entries ? save->n_entries : 1) * sizeof *ids);
    ck_name_map by_dir;
    ck_name_map_init(&by_dir);
    int rc = ids == NULL ? tree_nomem(tr, err) : 0;
    for (size_t i = 0; rc == 0 && i < save->n_entries; i++)
        ids[i] = ENTRY_NEW;
    for (size_t k = 0; rc == 0 && k < m->index.n_live; k++) {
        const ck_tensor *t = &m->index.tensors[m->index.live[k]];
        if (ck_name_map_put(&by_dir, t->dir_name, strlen(t->dir_name), m->index.live[k]) < 0)
            rc = tree_nomem(tr, err);
    }
    for (size_t k = 0; rc == 0 && k < save->n; k++) {
        uint32_t id = ck_name_map_get(&by_dir, save->dir[k], strlen(save->dir[k]));
        if (id == CK_NAME_MAP_NONE)
            rc = ck_fail(err, EIO, "%s: the saved file's tensors are not the tree's", m->path);
        ids[save->pos[k]] = id;
    }
    if (rc == 0 && save->n != m->index.n_live)
        rc = ck_fail(err, EIO, "%s: the saved file's tensors are not the tree's", m->path);
    ck_name_map_free(&by_dir);
    if (rc < 0) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* Serve the new file: each entry saved is the saved tensor of its
 * directory name; entries made during the save stay new.  *old: the
 * model it replaced. */
static int switch_to_saved(tree *tr, tree_save *save, ck_model **old, ck_error *err)
{
    uint32_t *ids = saved_ids(tr, save, err);
    if (ids == NULL)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < save->n_entries; i++) {
        entry *e = &tr->entries[i];
        if (ids[i] == ENTRY_NEW && e->held && !e->deleted)
            continue; /* new, held back: still new */
        if (ids[i] == ENTRY_NEW) { /* removed before the save: gone from the file */
            tree_edit_free(tr, e->edit);
            e->edit = NULL;
            e->tensor_id = ENTRY_NEW;
            continue;
        }
        if (e->touched || e->held)
            keep_edits(tr, e); /* over the saved tensor, which is the file's as it was */
        else if (drop_edits(tr, e, err) < 0)
            rc = -1; /* out of memory: an open meta's buffer is lost, nothing else */
        e->tensor_id = ids[i];
    }
    free(ids);
    *old = tr->model;
    tr->model = save->saved;
    save->kept = save->saved;
    save->saved = NULL;
    tr->file_st = tr->model->st;
    return tree_index_names(tr, err) < 0 ? -1 : rc;
}

int tree_save_end(tree *tr, tree_save *save, int rc, ck_model **old, ck_error *err)
{
    *old = NULL;
    if (rc == 0)
        rc = switch_to_saved(tr, save, old, err);
    tr->saving = false;
    tr->placing = rc == 0 && ck_save_pending(save->seq);
    for (size_t i = 0; i < tr->n_entries; i++) {
        entry *e = &tr->entries[i];
        e->touched = false;
        e->held = false;
        if (e->edit != NULL)
            e->edit->overlay.frozen = false;
    }
    spill_punch_freed(tr);
    tree_recount(tr);
    if (rc == 0)
        spill_reclaim(tr);
    return rc;
}
