/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree: the entries of the mounted tree (tree.h), the piece every other
 * one stands on.  Making and freeing the tree; what an entry shows (its
 * name, type, shape, the size of `out`, the text of `meta`), edited or
 * not; the count of entries that differ from the file behind tree_dirty,
 * kept by tree_changed after every edit; the times nodes show; and the
 * one check of whether a tensor may be written.  It calls no piece but
 * the spill allocator (an edit's overlay is freed with it).
 */
#include "tree.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../codec/core/dtype.h"
#include "../codec/core/name_map.h"
#include "../codec/open_path.h"
#include "../codec/view.h"
#include "tree_spill.h"

/* The entry's name, quoted for a message. */
const char *tree_quoted(const tree *tr, const entry *e, char q[CK_QUOTE_BUF])
{
    size_t len;
    const char *name = entry_name(tr, e, &len);
    return ck_quote(q, name, len);
}

/* (Re)build the directory-name map from the live entries. */
int tree_index_names(tree *tr, ck_error *err)
{
    ck_name_map_free(&tr->by_dir);
    for (size_t i = 0; i < tr->n_entries; i++) {
        const entry *e = &tr->entries[i];
        if (e->deleted)
            continue;
        const char *dir = entry_dir_name(tr, e);
        if (ck_name_map_put(&tr->by_dir, dir, strlen(dir), (uint32_t)i) < 0)
            return ck_nomem(err, tr->model->path);
    }
    return 0;
}

int64_t tree_lookup(const tree *tr, const char *dir_name)
{
    uint32_t pos = ck_name_map_get(&tr->by_dir, dir_name, strlen(dir_name));
    return pos == CK_NAME_MAP_NONE ? -1 : (int64_t)pos;
}

int tree_init(tree *tr, ck_model *model, const ck_open_opts *opts, bool writable,
              ck_error *err)
{
    memset(tr, 0, sizeof *tr);
    tr->model = model;
    tr->file_st = model->st;
    tr->open_opts = opts ? *opts : (ck_open_opts){0};
    tr->writable = writable;
    tr->spill_fd = -1;
    tr->names_file = ck_copied_names_file();
    /* A quarter of the RAM unless -o spill_max says otherwise. */
    tr->spill_max = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 4;
    ck_name_map_init(&tr->by_dir);
    const ck_index *ix = &model->index;
    tr->cap_entries = ix->n_live ? ix->n_live : 16;
    tr->entries = calloc(tr->cap_entries, sizeof *tr->entries);
    if (tr->entries == NULL)
        return ck_nomem(err, model->path);
    for (size_t i = 0; i < ix->n_live; i++)
        tr->entries[i].tensor_id = ix->live[i];
    tr->n_entries = ix->n_live;
    return tree_index_names(tr, err);
}

void tree_edit_free(tree *tr, edit *ed)
{
    if (ed == NULL)
        return;
    spill_area_free(tr, &ed->overlay);
    free(ed->meta_buf);
    free(ed->name);
    free(ed->dir_name);
    free(ed);
}

void tree_free(tree *tr)
{
    if (tr->spill_fd >= 0)
        close(tr->spill_fd); /* every area goes with it */
    tr->spill_fd = -1;
    for (size_t i = 0; i < tr->n_extras; i++)
        free(tr->extras[i].name);
    free(tr->extras);
    for (size_t i = 0; i < tr->n_entries; i++)
        tree_edit_free(tr, tr->entries[i].edit);
    free(tr->entries);
    ck_name_map_free(&tr->by_dir);
    free(tr->freed);
    tree_renamed_free(tr->renamed, tr->n_renamed);
    memset(tr, 0, sizeof *tr);
}

size_t tree_footprint(const tree *tr)
{
    const ck_index *ix = &tr->model->index;
    return sizeof(ck_model) + ix->cap * sizeof(ck_tensor) + ix->arena.chunk_bytes +
           ix->n_live * sizeof(uint32_t) + tr->cap_entries * sizeof(entry) +
           tr->by_dir.cap * sizeof(ck_name_map_slot) + tr->cap_extras * sizeof(extra);
}

const char *entry_dir_name(const tree *tr, const entry *e)
{
    return e->edit && e->edit->dir_name ? e->edit->dir_name : entry_tensor(tr, e)->dir_name;
}

const char *entry_name(const tree *tr, const entry *e, size_t *len)
{
    if (e->edit && e->edit->name) {
        *len = e->edit->name_len;
        return e->edit->name;
    }
    *len = entry_tensor(tr, e)->name_len;
    return entry_tensor(tr, e)->name;
}

bool entry_has_meta(const entry *e)
{
    return !(e->edit && e->edit->no_meta);
}

bool entry_has_out(const entry *e)
{
    return !(e->edit && e->edit->no_out);
}

const ck_dtype *entry_dtype(const tree *tr, const entry *e)
{
    if (e->edit != NULL && e->edit->meta_changed)
        return e->edit->meta.dtype;
    return e->tensor_id == ENTRY_NEW ? NULL : entry_tensor(tr, e)->dtype;
}

const int64_t *entry_dims(const tree *tr, const entry *e, uint32_t *ndim)
{
    if (e->edit != NULL && e->edit->meta_changed) {
        *ndim = e->edit->meta.ndim;
        return e->edit->meta.dims;
    }
    if (e->tensor_id == ENTRY_NEW) {
        *ndim = 0;
        return NULL;
    }
    *ndim = entry_tensor(tr, e)->ndim;
    return entry_tensor(tr, e)->dims;
}

uint64_t entry_out_size(const tree *tr, const entry *e)
{
    if (e->edit != NULL && e->edit->overlay.used)
        return e->edit->overlay.size;
    return e->tensor_id == ENTRY_NEW ? 0 : entry_tensor(tr, e)->nbytes;
}

size_t entry_meta_text(const tree *tr, const entry *e, char *buf, size_t cap)
{
    const ck_dtype *dt = entry_dtype(tr, e);
    if (dt == NULL) { /* a new meta not valid yet: show what was written */
        const edit *ed = e->edit;
        size_t n = ed && ed->meta_buf ? (ed->meta_len < cap ? ed->meta_len : cap) : 0;
        if (n)
            memcpy(buf, ed->meta_buf, n);
        return n;
    }
    uint32_t ndim;
    const int64_t *dims = entry_dims(tr, e, &ndim);
    return ck_meta_format(dt, dims, ndim, buf, cap);
}

/* Whether the entry is not what the model file holds. */
bool tree_entry_differs(const entry *e)
{
    const edit *ed = e->edit;
    if (e->tensor_id == ENTRY_NEW ? !e->deleted : e->deleted)
        return true;
    if (e->deleted)
        return false; /* made and removed again: its edits are gone with it */
    return ed != NULL && (ed->meta_changed || ed->overlay.used || ed->name || ed->no_meta ||
                          ed->no_out);
}

bool tree_dirty(const tree *tr)
{
    /* A plain model a save wraps (-o enc_mode): the file is not what a
     * save writes until it is saved so. */
    if (tr->writable && tr->model->env.fresh && tr->model->n_sources > 0)
        return true;
    return tr->n_differ > 0 || tr->names_pending;
}

bool tree_equals_file(const tree *tr)
{
    return tr->model->n_sources > 0 && !tree_dirty(tr) && !tr->placing;
}

bool tree_numbered_as_file(const tree *tr)
{
    const ck_index *ix = &tr->model->index;
    if (tr->n_extras > 0 || tr->n_entries != ix->n_live)
        return false;
    for (size_t i = 0; i < tr->n_entries; i++)
        if (tr->entries[i].deleted || tr->entries[i].tensor_id != ix->live[i])
            return false;
    return true;
}

/* ---- times ---- */

void tree_stamp(struct timespec *t)
{
    clock_gettime(CLOCK_REALTIME, t);
}

static struct timespec later(struct timespec a, struct timespec b)
{
    return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec) ? a : b;
}

struct timespec tree_entry_mtime(const tree *tr, const entry *e)
{
    return e->edit != NULL ? later(tr->file_st.st_mtim, e->edit->mtime) : tr->file_st.st_mtim;
}

struct timespec tree_entry_dir_mtime(const tree *tr, const entry *e)
{
    return e->edit != NULL ? later(tr->file_st.st_mtim, e->edit->dir_mtime) : tr->file_st.st_mtim;
}

struct timespec tree_extra_mtime(const tree *tr, size_t id)
{
    return later(tr->file_st.st_mtim, tr->extras[id].mtime);
}

struct timespec tree_root_mtime(const tree *tr)
{
    return later(tr->file_st.st_mtim, tr->root_mtime);
}

/* After any change to e (idempotent, so nested edits may each call it):
 * keep the count of entries that differ from the file, and mark e as
 * changed since a running save began.  Returns rc, for `return
 * tree_changed(tr, e, edit(...))`. */
int tree_changed(tree *tr, entry *e, int rc)
{
    bool now = tree_entry_differs(e);
    if (now != e->counted) {
        if (now)
            tr->n_differ++;
        else
            tr->n_differ--;
        e->counted = now;
    }
    if (tr->saving)
        e->touched = true;
    if (rc >= 0 && e->edit != NULL)
        tree_stamp(&e->edit->mtime);
    return rc;
}

/* The count, from scratch: after a save changed every entry at once. */
void tree_recount(tree *tr)
{
    tr->n_differ = 0;
    for (size_t i = 0; i < tr->n_entries; i++) {
        entry *e = &tr->entries[i];
        e->counted = tree_entry_differs(e);
        tr->n_differ += e->counted;
    }
}

/* The one place that decides whether a tensor may be written: every edit
 * checks it, and the modes the mount shows come from it (entry_writable),
 * so a tensor without w bits is exactly one whose write would be refused.
 * EACCES is what the kernel says to a write of a file without w bits. */
int entry_write_check(const tree *tr, const entry *e, ck_error *err)
{
    char q[CK_QUOTE_BUF];
    const ck_tensor *t = entry_tensor(tr, e);
    if (!tr->writable)
        return ck_fail(err, EROFS, "%s: read-only mount", tr->model->path);
    if (t != NULL && t->part != CK_PART_WHOLE)
        return ck_fail(err, EACCES, "%s: tensor '%s': map parameters cannot be edited",
                       tr->model->path, tree_quoted(tr, e, q));
    if (t != NULL && t->read_only)
        return ck_fail(err, EACCES, "%s: tensor '%s': %s tensors are shown read-only",
                       tr->model->path, tree_quoted(tr, e, q), ck_dtype_canonical_name(t->dtype));
    return 0;
}

bool entry_writable(const tree *tr, const entry *e)
{
    ck_error err = {0};
    return entry_write_check(tr, e, &err) == 0;
}

/* The entry's edit record, after checking the entry may be edited. */
edit *tree_editable_edit(tree *tr, entry *e, ck_error *err)
{
    return entry_write_check(tr, e, err) < 0 ? NULL : tree_edit_of(tr, e, err);
}

edit *tree_edit_of(tree *tr, entry *e, ck_error *err)
{
    if (e->edit != NULL)
        return e->edit;
    e->edit = calloc(1, sizeof *e->edit);
    if (e->edit == NULL) {
        ck_nomem(err, tr->model->path);
        return NULL;
    }
    return e->edit;
}

int tree_nomem(const tree *tr, ck_error *err)
{
    return ck_nomem(err, tr->model->path);
}

void tree_renamed_free(tree_renamed *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i].old_dir);
    free(list);
}
