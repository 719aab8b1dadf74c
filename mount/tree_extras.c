/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_extras: the extra files (tree_extras.h).
 *
 * An extra is found by its directory and name, and keeps its id (an inode
 * number) for the mount's life: a removed one stays as a tombstone.  Its
 * bytes are a spill area.  Renamed over a tensor's meta or out it becomes
 * that file: its bytes are parsed as the meta, or handed over as the out,
 * and the extra stays behind as the inode the kernel now knows that file
 * by (extra.alias).
 */
#include "tree_extras.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tree_spill.h"

/* An extra file changed: its bytes, or (listing) its directory's entries
 * too.  A tensor directory's time is its edit's, made for it if need be
 * (out of memory, the time alone is not kept). */
static void extra_stamp(tree *tr, extra *x, bool listing)
{
    ck_error err = {0};
    tree_stamp(&x->mtime);
    if (!listing)
        return;
    if (x->dir == EXTRA_IN_ROOT) {
        tree_stamp(&tr->root_mtime);
        return;
    }
    edit *ed = x->dir < tr->n_entries ? tree_edit_of(tr, &tr->entries[x->dir], &err) : NULL;
    if (ed != NULL)
        tree_stamp(&ed->dir_mtime);
}

int64_t tree_extra_lookup(const tree *tr, uint32_t dir, const char *name)
{
    for (size_t i = 0; i < tr->n_extras; i++) {
        const extra *x = &tr->extras[i];
        if (!x->deleted && x->dir == dir && strcmp(x->name, name) == 0)
            return (int64_t)i;
    }
    return -1;
}

/* ---- which extra is the names file ----
 *
 * A root file named as the registry's names file (tree.names_file) is an
 * extra file like the others until a save applies it (tree_names.c): here
 * it is only recognized, bounded in size, and noted as waiting
 * (tree.names_pending), so that the tree is dirty while it exists. */

static bool is_names_file(const tree *tr, const extra *x)
{
    return tr->names_file != NULL && !x->deleted && x->dir == EXTRA_IN_ROOT &&
           strcmp(x->name, tr->names_file->name) == 0;
}

/* The names file's extra, or -1. */
int64_t tree_names_file_id(tree *tr)
{
    return tr->names_file == NULL ? -1 : tree_extra_lookup(tr, EXTRA_IN_ROOT, tr->names_file->name);
}

static void note_names_file(tree *tr)
{
    tr->names_pending = tr->writable && tree_names_file_id(tr) >= 0;
}

/* A names file is parsed whole in memory: bounded as its parser is. */
int tree_names_file_room(const tree *tr, const extra *x, uint64_t size, ck_error *err)
{
    if (!is_names_file(tr, x) || size <= tr->names_file->max_bytes)
        return 0;
    return ck_fail(err, EFBIG, "%s: %s: %llu bytes, more than the %llu MiB a snapshot's names "
                   "take", tr->model->path, x->name, (unsigned long long)size,
                   (unsigned long long)(tr->names_file->max_bytes >> 20));
}

/* ---- the files ---- */

int64_t tree_extra_create(tree *tr, uint32_t dir, const char *name, ck_error *err)
{
    if (!tr->writable)
        return ck_fail(err, EROFS, "%s: read-only mount", tr->model->path);
    if (tr->n_extras == tr->cap_extras) {
        size_t cap = tr->cap_extras ? tr->cap_extras * 2 : 16;
        extra *more = realloc(tr->extras, cap * sizeof *more);
        if (more == NULL)
            return ck_nomem(err, tr->model->path);
        tr->extras = more;
        tr->cap_extras = cap;
    }
    char *copy = strdup(name);
    if (copy == NULL)
        return ck_nomem(err, tr->model->path);
    tr->extras[tr->n_extras] = (extra){.dir = dir, .name = copy};
    spill_area_new(tr, &tr->extras[tr->n_extras].area);
    extra_stamp(tr, &tr->extras[tr->n_extras], true);
    tr->n_extras++;
    note_names_file(tr);
    return (int64_t)tr->n_extras - 1;
}

void tree_extra_drop(tree *tr, extra *x)
{
    spill_area_free(tr, &x->area);
    x->deleted = true;
    extra_stamp(tr, x, true);
    note_names_file(tr);
}

int tree_extra_unlink(tree *tr, size_t id, ck_error *err)
{
    (void)err;
    tree_extra_drop(tr, &tr->extras[id]);
    return 0;
}

int tree_extra_write(tree *tr, size_t id, const void *buf, size_t size, uint64_t off,
                     ck_error *err)
{
    extra *x = &tr->extras[id];
    if (off > UINT64_MAX - size || tree_names_file_room(tr, x, off + size, err) < 0 ||
        spill_room(tr, x->area.size, off + size, err) < 0)
        return -1;
    extra_stamp(tr, x, false);
    return spill_area_write(tr, &x->area, buf, size, off, err);
}

int tree_extra_truncate(tree *tr, size_t id, uint64_t size, ck_error *err)
{
    extra *x = &tr->extras[id];
    if (tree_names_file_room(tr, x, size, err) < 0 || spill_room(tr, x->area.size, size, err) < 0)
        return -1;
    extra_stamp(tr, x, false);
    return spill_area_truncate(tr, &x->area, size, err);
}

int tree_extra_rename(tree *tr, size_t id, const char *new_name, ck_error *err)
{
    extra *x = &tr->extras[id];
    extra renamed = {.dir = x->dir, .name = (char *)new_name};
    if (tree_names_file_room(tr, &renamed, x->area.size, err) < 0)
        return -1;
    char *copy = strdup(new_name);
    if (copy == NULL)
        return ck_nomem(err, tr->model->path);
    int64_t target = tree_extra_lookup(tr, x->dir, new_name);
    if (target >= 0 && (size_t)target != id)
        tree_extra_drop(tr, &tr->extras[target]);
    free(x->name);
    x->name = copy;
    extra_stamp(tr, x, true);
    note_names_file(tr);
    return 0;
}

static int extra_replace_file_edit(tree *tr, size_t id, entry *e, bool meta, ck_error *err)
{
    extra *x = &tr->extras[id];
    edit *ed = tree_editable_edit(tr, e, err);
    if (ed == NULL)
        return -1;
    if (!meta) {
        /* The file's bytes become the new out: hand its area over. */
        spill_area_free(tr, &ed->overlay);
        ed->overlay = x->area;
        ed->no_out = false;
        x->area = (spill_area){0};
        x->deleted = true;
        x->alias = ALIAS_OUT;
        return 0;
    }
    if (x->area.size > TREE_META_MAX)
        return ck_fail(err, EFBIG, "%s: a meta of %llu bytes", tr->model->path,
                       (unsigned long long)x->area.size);
    char *saved = ed->meta_buf;
    size_t saved_len = ed->meta_len;
    bool saved_no_meta = ed->no_meta;
    ed->meta_buf = malloc(TREE_META_MAX);
    if (ed->meta_buf == NULL) {
        ed->meta_buf = saved;
        return ck_nomem(err, tr->model->path);
    }
    ed->meta_len = (size_t)x->area.size;
    ssize_t n = ed->meta_len == 0 ? 0 : pread(tr->spill_fd, ed->meta_buf, ed->meta_len,
                                               (off_t)x->area.base);
    ed->no_meta = false;
    if (n != (ssize_t)ed->meta_len || entry_meta_finish(tr, e, err) < 0) {
        if (n != (ssize_t)ed->meta_len)
            ck_fail_errno(err, errno, "%s: reading a spill file failed", tr->model->path);
        free(ed->meta_buf);
        ed->meta_buf = saved;
        ed->meta_len = saved_len;
        ed->no_meta = saved_no_meta;
        return -1;
    }
    ed->meta_buf = saved;
    ed->meta_len = saved_len;
    tree_extra_drop(tr, x);
    x->alias = ALIAS_META;
    return 0;
}

int tree_extra_replace_file(tree *tr, size_t id, entry *e, bool meta, ck_error *err)
{
    return tree_changed(tr, e, extra_replace_file_edit(tr, id, e, meta, err));
}
