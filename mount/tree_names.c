/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_names: a copied snapshot's names (the names file, tree_names.h).
 *
 * cp -r, rsync and tar of a snapshot whose directories carry no names
 * (tensor_<N>) bring a root names file, which alone holds their real
 * names.
 * Renaming the directories while the tool still fills them would break it
 * (cp chmods each directory by its path when it is done, rsync renames its
 * temporaries inside them), so the names are applied when the edits are
 * saved, all of them or none.  A listed directory whose real name is
 * already a tensor's gives that tensor its meta and out, as copying a
 * legacy snapshot over it would: the tensor keeps its place (and its part
 * in a graph).
 */
#include "tree_names.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../codec/core/dir_name.h"
#include "../codec/core/name_map.h"
#include "tree_dirs.h"
#include "tree_edit.h"
#include "tree_extras.h"
#include "tree_spill.h"

size_t tree_take_renamed(tree *tr, tree_renamed **out)
{
    size_t n = tr->n_renamed;
    *out = tr->renamed;
    tr->renamed = NULL;
    tr->n_renamed = 0;
    return n;
}

void tree_plan_free(names_plan *plan)
{
    bool absent = plan->absent;
    for (size_t i = 0; i < plan->n; i++) {
        free(plan->v[i].name);
        free(plan->v[i].dir);
        free(plan->v[i].old_dir);
    }
    free(plan->v);
    free(plan->listed);
    free(plan->in_order);
    *plan = (names_plan){.absent = absent};
}

static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return -1;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* The file's names, parsed by the codec (nothing is executed). */
static int names_parse(tree *tr, const extra *x, ck_named_dirs *names, ck_error *err)
{
    uint64_t size = x->area.used ? x->area.size : 0;
    if (tree_names_file_room(tr, x, size, err) < 0)
        return -1;
    char *buf = malloc(size ? (size_t)size : 1);
    if (buf == NULL)
        return tree_nomem(tr, err);
    if (size > 0 && read_at(tr->spill_fd, buf, (size_t)size, x->area.base) < 0) {
        free(buf);
        return ck_fail_errno(err, errno, "%s: reading a spill file failed", tr->model->path);
    }
    ck_error perr = {0};
    int rc = tr->names_file->parse(buf, (size_t)size, x->name, names, &perr);
    free(buf);
    if (rc < 0)
        return ck_fail(err, perr.errnum ? perr.errnum : EINVAL, "%s: %s; nothing was saved, "
                       "the edits and %s are kept", tr->model->path, perr.msg, x->name);
    return 0;
}

/* A refusal of the file: one line, naming it. */
static int names_refused(tree *tr, const ck_named_dir *pe, const char *why, ck_error *err)
{
    char qn[CK_QUOTE_BUF], qp[CK_QUOTE_BUF];
    const char *file = tr->names_file->name;
    return ck_fail(err, EINVAL, "%s: %s: '%s' (of '%s') %s; nothing was saved, the edits and "
                   "%s are kept", tr->model->path, file, ck_quote(qp, pe->path, strlen(pe->path)),
                   ck_quote(qn, pe->name, strlen(pe->name)), why, file);
}

/* One listed directory: where it is and what its real name makes it. */
static int plan_step(tree *tr, names_plan *plan, ck_named_dir *pe, ck_error *err)
{
    int64_t pos = tree_lookup(tr, pe->path);
    if (pos < 0) {
        plan->absent = true;
        return names_refused(tr, pe, "is not in the tree", err);
    }
    if (plan->listed[pos])
        return names_refused(tr, pe, "is listed twice", err);
    plan->listed[pos] = LISTED;
    char dir[CK_DIR_NAME_MAX + 1];
    size_t len = strlen(pe->name);
    ck_dir_name(pe->name, len, NULL, dir);
    bool is_new = tr->entries[pos].tensor_id == ENTRY_NEW;
    if (is_new)
        plan->in_order[plan->n_in_order++] = (uint32_t)pos;
    if (strcmp(dir, pe->path) == 0)
        return 0; /* already its name */
    name_step *s = &plan->v[plan->n++];
    *s = (name_step){.pos = (uint32_t)pos, .into = -1, .name = pe->name, .name_len = len};
    pe->name = NULL; /* the step owns it now */
    s->dir = strdup(dir);
    s->old_dir = strdup(pe->path);
    if (s->dir == NULL || s->old_dir == NULL)
        return tree_nomem(tr, err);
    return 0;
}

/* Each renamed directory's target: free (or freed by another listed
 * directory), or a tensor, which it is then merged into.  Two real names
 * never make one directory name. */
static int plan_targets(tree *tr, names_plan *plan, ck_error *err)
{
    ck_name_map dirs;
    ck_name_map_init(&dirs);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < plan->n; i++) {
        name_step *s = &plan->v[i];
        entry *e = &tr->entries[s->pos];
        int64_t target = tree_lookup(tr, s->dir);
        ck_named_dir pe = {.name = s->name, .path = s->old_dir};
        if (ck_name_map_get(&dirs, s->dir, strlen(s->dir)) != CK_NAME_MAP_NONE)
            rc = names_refused(tr, &pe, "has the directory name of another name", err);
        else if (ck_name_map_put(&dirs, s->dir, strlen(s->dir), s->pos) < 0)
            rc = tree_nomem(tr, err);
        else if (tree_removable(tr, e, err) < 0 || tree_edit_of(tr, e, err) == NULL)
            rc = -1;
        else if (target >= 0 && !plan->listed[target])
            s->into = target;
        if (rc == 0 && s->into >= 0) {
            plan->listed[s->pos] = LISTED_MERGED;
            if (tree_editable_edit(tr, &tr->entries[s->into], err) == NULL ||
                tree_with_overlay(tr, e, false, err) == NULL)
                rc = -1; /* its bytes become the tensor's out */
        }
    }
    ck_name_map_free(&dirs);
    return rc;
}

int tree_plan_names(tree *tr, names_plan *plan, ck_error *err)
{
    ck_named_dirs names = {0};
    memset(plan, 0, sizeof *plan);
    int64_t id = tree_names_file_id(tr);
    if (id < 0)
        return 0;
    if (names_parse(tr, &tr->extras[id], &names, err) < 0) {
        tr->names_file->free_names(&names);
        return -1;
    }
    plan->v = calloc(names.n ? names.n : 1, sizeof *plan->v);
    plan->listed = calloc(tr->n_entries ? tr->n_entries : 1, 1);
    plan->in_order = calloc(names.n ? names.n : 1, sizeof *plan->in_order);
    int rc = plan->v && plan->listed && plan->in_order ? 0 : tree_nomem(tr, err);
    for (size_t i = 0; rc == 0 && i < names.n; i++)
        rc = plan_step(tr, plan, &names.v[i], err);
    if (rc == 0)
        rc = plan_targets(tr, plan, err);
    /* New directories keep the file's order; merged ones are gone. */
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < plan->n_in_order; i++) {
        uint32_t pos = plan->in_order[i];
        if (plan->listed[pos] == LISTED_MERGED)
            continue;
        plan->listed[pos] = LISTED_IN_ORDER;
        plan->in_order[k++] = pos;
    }
    plan->n_in_order = k;
    tr->names_file->free_names(&names);
    if (rc < 0)
        tree_plan_free(plan);
    return rc;
}

/* The copied tensor s replaces t's meta and out; s is gone. */
static void merge_into(tree *tr, entry *s, entry *t)
{
    edit *se = s->edit, *te = t->edit;
    const ck_tensor *tt = entry_tensor(tr, t);
    uint32_t ndim;
    const int64_t *dims = entry_dims(tr, s, &ndim);
    ck_meta m = {.dtype = entry_dtype(tr, s), .ndim = ndim};
    memcpy(m.dims, dims, ndim * sizeof m.dims[0]);
    spill_area_free(tr, &te->overlay);
    te->overlay = se->overlay;
    se->overlay = (spill_area){0};
    te->no_meta = te->no_out = false;
    if (tt != NULL && strcmp(m.dtype->of_name, tt->dtype->of_name) == 0)
        m.dtype = tt->dtype; /* as a meta written over it: the file's spelling */
    te->meta = m;
    te->meta_changed = tt == NULL || m.dtype != tt->dtype || m.ndim != tt->ndim ||
                       memcmp(m.dims, tt->dims, tt->ndim * sizeof tt->dims[0]) != 0;
    tree_forget_entry(tr, s);
    tree_changed(tr, t, 0);
}

/* Apply a plan: only out of memory can fail it now.  Merges first: each
 * forgets its directory's name, which a rename may then take. */
int tree_apply_names(tree *tr, names_plan *plan, ck_error *err)
{
    tree_renamed *more = realloc(tr->renamed, (tr->n_renamed + plan->n + 1) * sizeof *more);
    if (more == NULL)
        return tree_nomem(tr, err);
    tr->renamed = more;
    for (size_t i = 0; i < plan->n; i++) {
        name_step *s = &plan->v[i];
        if (s->into < 0)
            continue;
        merge_into(tr, &tr->entries[s->pos], &tr->entries[s->into]);
        tr->renamed[tr->n_renamed++] = (tree_renamed){.old_dir = s->old_dir,
                                                      .pos = (uint32_t)s->into, .merged = true};
        s->old_dir = NULL;
    }
    for (size_t i = 0; i < plan->n; i++)
        if (plan->v[i].into < 0)
            ck_name_map_del(&tr->by_dir, plan->v[i].old_dir, strlen(plan->v[i].old_dir));
    int rc = 0;
    for (size_t i = 0; i < plan->n; i++) {
        name_step *s = &plan->v[i];
        edit *ed = tr->entries[s->pos].edit;
        if (s->into >= 0)
            continue;
        tr->renamed[tr->n_renamed++] = (tree_renamed){.old_dir = s->old_dir, .pos = s->pos};
        s->old_dir = NULL;
        free(ed->name);
        free(ed->dir_name);
        ed->name = s->name;
        ed->name_len = s->name_len;
        ed->dir_name = s->dir;
        s->name = s->dir = NULL;
        if (ck_name_map_put(&tr->by_dir, ed->dir_name, strlen(ed->dir_name), s->pos) < 0)
            rc = tree_nomem(tr, err);
        tree_changed(tr, &tr->entries[s->pos], 0);
    }
    int64_t id = tree_names_file_id(tr);
    if (id >= 0)
        tree_extra_drop(tr, &tr->extras[id]); /* applied: the file is gone */
    return rc;
}
