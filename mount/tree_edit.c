/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_edit: a tensor's `out` and `meta` edited (tree_edit.h).
 *
 * The first write to `out` copies the model's bytes into an overlay, a
 * spill area (nothing is copied when truncating), which then serves the
 * reads.  A `meta` being written is buffered: each write is judged as it
 * comes when it can be, and the text replaces the shown type and shape
 * only when it parses (entry_meta_check, entry_meta_finish), so a bad meta
 * leaves the previous one.
 */
#include "tree_edit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/view.h"
#include "tree_spill.h"

/* Copy the model's bytes of the tensor into its overlay. */
static int fill_overlay(tree *tr, entry *e, spill_area *a, ck_error *err)
{
    const ck_tensor *t = entry_tensor(tr, e);
    if (t == NULL)
        return 0;
    /* Not the bytes of a file rewritten under the mount. */
    if (ck_model_check_extents(tr->model, t, err) < 0 ||
        spill_area_reserve(tr, a, t->nbytes, err) < 0)
        return -1;
    uint64_t at = 0;
    char buf[65536];
    while (at < t->nbytes) {
        long n = ck_model_read(tr->model, t, buf, sizeof buf, at, err);
        if (n <= 0)
            return n < 0 ? -1 : ck_fail(err, EIO, "%s: short read", tr->model->path);
        if (spill_area_write(tr, a, buf, (size_t)n, at, err) < 0)
            return -1;
        at += (uint64_t)n;
    }
    return 0;
}

edit *tree_with_overlay(tree *tr, entry *e, bool empty, ck_error *err)
{
    edit *ed = tree_editable_edit(tr, e, err);
    if (ed == NULL || ed->overlay.used)
        return ed;
    if (!empty && spill_room(tr, 0, entry_out_size(tr, e), err) < 0)
        return NULL;
    spill_area a;
    spill_area_new(tr, &a);
    if (!empty && fill_overlay(tr, e, &a, err) < 0) {
        spill_area_free(tr, &a);
        return NULL;
    }
    ed->overlay = a;
    return ed;
}

static int out_truncate_edit(tree *tr, entry *e, uint64_t size, ck_error *err)
{
    edit *ed = tree_with_overlay(tr, e, size == 0, err);
    if (ed == NULL || spill_room(tr, ed->overlay.size, size, err) < 0)
        return -1;
    return spill_area_truncate(tr, &ed->overlay, size, err);
}

int entry_out_truncate(tree *tr, entry *e, uint64_t size, ck_error *err)
{
    return tree_changed(tr, e, out_truncate_edit(tr, e, size, err));
}

static int out_write_edit(tree *tr, entry *e, const void *buf, size_t size, uint64_t off,
                    ck_error *err)
{
    edit *ed = tree_with_overlay(tr, e, false, err);
    if (ed == NULL || spill_room(tr, ed->overlay.size, off + size, err) < 0)
        return -1;
    return spill_area_write(tr, &ed->overlay, buf, size, off, err);
}

int entry_out_write(tree *tr, entry *e, const void *buf, size_t size, uint64_t off,
                    ck_error *err)
{
    return tree_changed(tr, e, out_write_edit(tr, e, buf, size, off, err));
}

int entry_meta_begin(tree *tr, entry *e, bool truncate, ck_error *err)
{
    edit *ed = tree_editable_edit(tr, e, err);
    if (ed == NULL)
        return -1;
    if (ed->meta_buf == NULL) {
        ed->meta_buf = malloc(TREE_META_MAX);
        if (ed->meta_buf == NULL)
            return ck_nomem(err, tr->model->path);
        ed->meta_len = entry_meta_text(tr, e, ed->meta_buf, TREE_META_MAX);
    }
    if (truncate) {
        ed->meta_len = 0;
        ed->meta_refused = false;
    }
    return 0;
}

int entry_meta_write(entry *e, const void *buf, size_t size, uint64_t off, ck_error *err)
{
    edit *ed = e->edit;
    if (ed == NULL || ed->meta_buf == NULL)
        return ck_fail(err, EBADF, "meta is not open for writing");
    if (off > TREE_META_MAX || size > TREE_META_MAX - off)
        return ck_fail(err, EFBIG, "meta longer than %d bytes", TREE_META_MAX);
    if (ed->meta_refused)
        return ck_fail(err, EINVAL, "an earlier write to this meta was refused; write it again "
                       "from the start (O_TRUNC)");
    /* Text written from the start on (no hole) is judged as it comes: a
     * write no later write could mend is refused, so that `echo bad >
     * meta` fails where the shell sees it (shells ignore close).  A write
     * past the end is judged at the close only. */
    bool judged = off <= ed->meta_len;
    size_t old_len = ed->meta_len;
    char *old = judged ? malloc(size ? size : 1) : NULL;
    if (judged && old == NULL)
        return ck_fail(err, ENOMEM, "out of memory");
    if (judged)
        memcpy(old, ed->meta_buf + off, off + size <= old_len ? size : old_len - off);
    if (off > ed->meta_len)
        memset(ed->meta_buf + ed->meta_len, 0, off - ed->meta_len);
    memcpy(ed->meta_buf + off, buf, size);
    if (off + size > ed->meta_len)
        ed->meta_len = off + size;
    ck_error why;
    if (judged && ck_meta_prefix_check(ed->meta_buf, ed->meta_len, &why) < 0) {
        memcpy(ed->meta_buf + off, old, off + size <= old_len ? size : old_len - off);
        ed->meta_len = old_len;
        ed->meta_refused = true;
        free(old);
        return ck_fail(err, EINVAL, "%s; not written", why.msg);
    }
    free(old);
    return 0;
}

int entry_meta_truncate(tree *tr, entry *e, uint64_t size, ck_error *err)
{
    edit *ed = e->edit;
    if (ed == NULL || ed->meta_buf == NULL) {
        if (size != 0)
            return ck_fail(err, EINVAL, "%s: a meta can only be truncated to 0 bytes",
                           tr->model->path);
        return entry_meta_begin(tr, e, true, err);
    }
    if (size < ed->meta_len)
        ed->meta_len = (size_t)size;
    if (size == 0)
        ed->meta_refused = false;
    return 0;
}

/* last: the last close; before it (a flush), a meta with nothing written
 * yet is no refusal: bash's `>` closes the descriptor it opened, after
 * dup2, before its command writes. */
static int meta_check_edit(tree *tr, entry *e, bool last, ck_error *err)
{
    edit *ed = e->edit;
    if (ed == NULL || ed->meta_buf == NULL || ed->meta_refused || (!last && ed->meta_len == 0))
        return 0;
    ck_meta m;
    ck_error perr;
    if (ck_meta_parse(ed->meta_buf, ed->meta_len, &m, &perr) < 0) {
        char q[CK_QUOTE_BUF];
        return ck_fail(err, EINVAL, "%s: tensor '%s': %s; the previous meta stays",
                       tr->model->path, tree_quoted(tr, e, q), perr.msg);
    }
    const ck_tensor *t = entry_tensor(tr, e);
    if (t != NULL) {
        /* A kUInt8 meta on an Int4 or random_op tensor keeps its type. */
        if (strcmp(m.dtype->of_name, t->dtype->of_name) == 0)
            m.dtype = t->dtype;
        /* The file's own meta again is no change. */
        if (m.dtype == t->dtype && m.ndim == t->ndim &&
            memcmp(m.dims, t->dims, t->ndim * sizeof t->dims[0]) == 0) {
            ed->meta_changed = false;
            return 0;
        }
    }
    ed->meta = m;
    ed->meta_changed = true;
    return 0;
}

int entry_meta_check(tree *tr, entry *e, ck_error *err)
{
    return tree_changed(tr, e, meta_check_edit(tr, e, false, err));
}

static int meta_finish_edit(tree *tr, entry *e, ck_error *err)
{
    if (e->edit == NULL || e->edit->meta_buf == NULL)
        return 0;
    int rc = tree_changed(tr, e, meta_check_edit(tr, e, true, err));
    free(e->edit->meta_buf);
    e->edit->meta_buf = NULL;
    e->edit->meta_refused = false;
    return rc;
}

int entry_meta_finish(tree *tr, entry *e, ck_error *err)
{
    return tree_changed(tr, e, meta_finish_edit(tr, e, err));
}
