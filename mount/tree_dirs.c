/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_dirs: tensor directories made, removed and renamed, and their
 * files made and removed (tree_dirs.h).
 *
 * A new directory is appended (positions are inode numbers) and a removed
 * one stays as a tombstone.  Its name must be one the listing rule makes
 * (the escaped tensor name), so it comes back the same.  Removing or
 * renaming a tensor its model's graph needs is refused here, where the
 * user sees it, rather than by the save (in_use).
 */
#include "tree_dirs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/core/dir_name.h"
#include "../codec/core/name_map.h"
#include "tree_spill.h"

static int set_name(tree *tr, edit *ed, const char *dir_name, ck_error *err)
{
    size_t dlen = strlen(dir_name);
    if (dlen > CK_DIR_NAME_MAX) /* FUSE passes names up to 1024 bytes */
        return ck_fail(err, ENAMETOOLONG, "%s: a tensor directory name is at most %d bytes",
                       tr->model->path, CK_DIR_NAME_MAX);
    char *name = malloc(dlen + 1);
    if (name == NULL)
        return ck_nomem(err, tr->model->path);
    long len = ck_dir_name_decode(dir_name, dlen, name, dlen);
    char canonical[CK_DIR_NAME_MAX + 1];
    /* Only names the listing rule produces: "%zz", "a%2f" (lower case) or a
     * shortened "%~" name would not come back the same. */
    if (len < 0 || ck_dir_name(name, (size_t)len, NULL, canonical) != dlen ||
        memcmp(canonical, dir_name, dlen) != 0) {
        free(name);
        return ck_fail(err, EINVAL, "%s: '%s' is not a valid escaped tensor name",
                       tr->model->path, dir_name);
    }
    char *dir = strdup(dir_name);
    if (dir == NULL) {
        free(name);
        return ck_nomem(err, tr->model->path);
    }
    free(ed->name);
    free(ed->dir_name);
    ed->name = name;
    ed->name_len = (size_t)len;
    ed->dir_name = dir;
    return 0;
}

int64_t tree_mkdir(tree *tr, const char *dir_name, ck_error *err)
{
    if (!tr->writable)
        return ck_fail(err, EROFS, "%s: read-only mount", tr->model->path);
    if (tree_lookup(tr, dir_name) >= 0)
        return ck_fail(err, EEXIST, "%s: '%s' exists", tr->model->path, dir_name);
    if (tr->n_entries == tr->cap_entries) {
        size_t cap = tr->cap_entries * 2;
        entry *more = realloc(tr->entries, cap * sizeof *more);
        if (more == NULL)
            return ck_nomem(err, tr->model->path);
        tr->entries = more;
        tr->cap_entries = cap;
    }
    entry *e = &tr->entries[tr->n_entries];
    *e = (entry){.tensor_id = ENTRY_NEW};
    edit *ed = tree_edit_of(tr, e, err);
    if (ed == NULL)
        return -1;
    ed->no_meta = ed->no_out = true;
    if (set_name(tr, ed, dir_name, err) < 0)
        goto fail;
    if (ck_name_map_put(&tr->by_dir, ed->dir_name, strlen(ed->dir_name),
                        (uint32_t)tr->n_entries) < 0) {
        ck_nomem(err, tr->model->path);
        goto fail;
    }
    tree_changed(tr, e, 0);
    tree_stamp(&tr->root_mtime);
    tree_stamp(&ed->dir_mtime);
    return (int64_t)tr->n_entries++;
fail:
    tree_edit_free(tr, ed);
    e->edit = NULL;
    return -1;
}

void tree_forget_entry(tree *tr, entry *e)
{
    const char *dir = entry_dir_name(tr, e);
    ck_name_map_del(&tr->by_dir, dir, strlen(dir));
    e->deleted = true;
    if (e->edit != NULL)
        spill_area_free(tr, &e->edit->overlay); /* its bytes are not needed any more */
    tree_changed(tr, e, 0);
    tree_stamp(&tr->root_mtime);
}

/* Deleting or renaming a tensor that the model's graph needs under its
 * name would save a model its runtime refuses, so the rmdir or rename
 * itself is refused (EBUSY, naming a node), not the save.  Entries made in
 * the mount are not in the file. */
static int in_use(tree *tr, const entry *e, ck_error *err)
{
    if (e->tensor_id == ENTRY_NEW)
        return 0;
    return ck_model_may_remove(tr->model, e->tensor_id, entry_dir_name(tr, e), err);
}

/* rm -r removes meta and out before the directory.  When the directory is
 * then refused, the two come back as they are in the model file, so a
 * refused rm -r leaves the tensor whole and the tree saveable.  (Removing
 * them is allowed: `mv` from another filesystem replaces out that way.)
 * A directory only partly emptied is left as it is: the user's own edit. */
static void put_back_files(tree *tr, entry *e)
{
    if (e->edit == NULL || entry_has_meta(e) || entry_has_out(e))
        return;
    e->edit->no_meta = false;
    e->edit->no_out = false;
    tree_changed(tr, e, 0);
}

/* in_use(), and an emptied directory of a tensor that must stay is made
 * whole again. */
static int keep_if_in_use(tree *tr, entry *e, ck_error *err)
{
    if (in_use(tr, e, err) == 0)
        return 0;
    put_back_files(tr, e);
    return -1;
}

/* rmdir and rename of a tensor directory: a writable mount, a tensor no
 * node needs, and one that may be edited at all. */
int tree_removable(tree *tr, entry *e, ck_error *err)
{
    if (!tr->writable)
        return ck_fail(err, EROFS, "%s: read-only mount", tr->model->path);
    if (keep_if_in_use(tr, e, err) < 0)
        return -1;
    return entry_write_check(tr, e, err);
}

static int rmdir_edit(tree *tr, entry *e, ck_error *err)
{
    if (tree_removable(tr, e, err) < 0)
        return -1;
    if (entry_has_meta(e) || entry_has_out(e))
        return ck_fail(err, ENOTEMPTY, "%s: directory not empty", tr->model->path);
    tree_forget_entry(tr, e);
    return 0;
}

int tree_rmdir(tree *tr, entry *e, ck_error *err)
{
    return tree_changed(tr, e, rmdir_edit(tr, e, err));
}

static int rename_edit(tree *tr, entry *e, const char *new_dir_name, ck_error *err)
{
    if (tree_removable(tr, e, err) < 0)
        return -1;
    if (strcmp(entry_dir_name(tr, e), new_dir_name) == 0)
        return 0;
    int64_t target = tree_lookup(tr, new_dir_name);
    if (target >= 0 && (entry_has_meta(&tr->entries[target]) ||
                        entry_has_out(&tr->entries[target])))
        return ck_fail(err, ENOTEMPTY, "%s: '%s' is not empty", tr->model->path, new_dir_name);
    /* Replacing the target deletes its tensor. */
    if (target >= 0 && keep_if_in_use(tr, &tr->entries[target], err) < 0)
        return -1;
    edit *ed = tree_edit_of(tr, e, err);
    if (ed == NULL)
        return -1;
    char *old_dir = strdup(entry_dir_name(tr, e));
    if (old_dir == NULL)
        return ck_nomem(err, tr->model->path);
    char *keep_name = ed->name, *keep_dir = ed->dir_name;
    size_t keep_len = ed->name_len;
    ed->name = ed->dir_name = NULL;
    if (set_name(tr, ed, new_dir_name, err) < 0) {
        ed->name = keep_name, ed->dir_name = keep_dir, ed->name_len = keep_len;
        free(old_dir);
        return -1;
    }
    free(keep_name);
    /* rename(2) replaces an empty target directory. */
    if (target >= 0)
        tree_forget_entry(tr, &tr->entries[target]);
    ck_name_map_del(&tr->by_dir, old_dir, strlen(old_dir));
    free(old_dir);
    free(keep_dir);
    tree_stamp(&tr->root_mtime);
    if (ck_name_map_put(&tr->by_dir, ed->dir_name, strlen(ed->dir_name),
                        (uint32_t)(e - tr->entries)) < 0)
        return ck_nomem(err, tr->model->path);
    return 0;
}

int tree_rename(tree *tr, entry *e, const char *new_dir_name, ck_error *err)
{
    return tree_changed(tr, e, rename_edit(tr, e, new_dir_name, err));
}

static int create_edit(tree *tr, entry *e, bool meta, ck_error *err)
{
    edit *ed = tree_editable_edit(tr, e, err);
    if (ed == NULL)
        return -1;
    tree_stamp(&ed->dir_mtime);
    if (meta) {
        ed->no_meta = false;
        return entry_meta_begin(tr, e, true, err);
    }
    ed->no_out = false;
    return entry_out_truncate(tr, e, 0, err);
}

int entry_create(tree *tr, entry *e, bool meta, ck_error *err)
{
    return tree_changed(tr, e, create_edit(tr, e, meta, err));
}

static int unlink_edit(tree *tr, entry *e, bool meta, ck_error *err)
{
    edit *ed = tree_editable_edit(tr, e, err);
    if (ed == NULL)
        return -1;
    tree_stamp(&ed->dir_mtime);
    if (meta) {
        ed->no_meta = true;
        ed->meta_changed = false;
        free(ed->meta_buf);
        ed->meta_buf = NULL;
    } else {
        ed->no_out = true;
        spill_area_free(tr, &ed->overlay);
    }
    return 0;
}

int entry_unlink(tree *tr, entry *e, bool meta, ck_error *err)
{
    return tree_changed(tr, e, unlink_edit(tr, e, meta, err));
}
