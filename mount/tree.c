/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* O_TMPFILE, copy_file_range */
#include "tree.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../codec/io/atomic_writer.h"
#include "../save/save_seq.h"

#include "../codec/core/arena.h"
#include "../codec/core/dir_name.h"
#include "../codec/core/saved_index.h"
#include "../codec/open_path.h"
#include "tree_spill.h"

/* A copied snapshot's names (the names file): at the end of the file. */
typedef struct name_step {
    uint32_t pos;               /* the listed directory's entry */
    int64_t into;               /* the tensor of its real name, or -1: renamed */
    char *name;                 /* the real name (owned until applied) ... */
    size_t name_len;
    char *dir;                  /* ... and its directory name */
    char *old_dir;
} name_step;

/* What a save does with a names file, decided before anything
 * changes.  listed[pos]: LISTED, LISTED_MERGED, or LISTED_IN_ORDER for a
 * new directory, which the save writes in the file's order. */
enum { LISTED = 1, LISTED_IN_ORDER, LISTED_MERGED };

typedef struct names_plan {
    name_step *v;
    size_t n;
    uint8_t *listed;            /* per entry; NULL: no names file */
    uint32_t *in_order;         /* the LISTED_IN_ORDER entries, in the file's order */
    size_t n_in_order;
} names_plan;

static bool is_names_file(const tree *tr, const extra *x);
static void note_names_file(tree *tr);
static int names_file_room(const tree *tr, const extra *x, uint64_t size, ck_error *err);
static int plan_names(tree *tr, names_plan *plan, ck_error *err);
static int apply_names(tree *tr, names_plan *plan, ck_error *err);
static void plan_free(names_plan *plan);

/* The entry's name, quoted for a message. */
static const char *quoted(const tree *tr, const entry *e, char q[CK_QUOTE_BUF])
{
    size_t len;
    const char *name = entry_name(tr, e, &len);
    return ck_quote(q, name, len);
}

/* (Re)build the directory-name map from the live entries. */
static int index_names(tree *tr, ck_error *err)
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
    return index_names(tr, err);
}

static void edit_free(tree *tr, edit *ed)
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
        edit_free(tr, tr->entries[i].edit);
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
static bool entry_differs(const entry *e)
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

static void stamp(struct timespec *t)
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

static edit *edit_of(tree *tr, entry *e, ck_error *err);

/* An extra file changed: its bytes, or (listing) its directory's entries
 * too.  A tensor directory's time is its edit's, made for it if need be
 * (out of memory, the time alone is not kept). */
static void extra_stamp(tree *tr, extra *x, bool listing)
{
    ck_error err = {0};
    stamp(&x->mtime);
    if (!listing)
        return;
    if (x->dir == EXTRA_IN_ROOT) {
        stamp(&tr->root_mtime);
        return;
    }
    edit *ed = x->dir < tr->n_entries ? edit_of(tr, &tr->entries[x->dir], &err) : NULL;
    if (ed != NULL)
        stamp(&ed->dir_mtime);
}

/* After any change to e (idempotent, so nested edits may each call it):
 * keep the count of entries that differ from the file, and mark e as
 * changed since a running save began.  Returns rc, for `return
 * changed(tr, e, edit(...))`. */
static int changed(tree *tr, entry *e, int rc)
{
    bool now = entry_differs(e);
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
        stamp(&e->edit->mtime);
    return rc;
}

/* The count, from scratch: after a save changed every entry at once. */
static void recount(tree *tr)
{
    tr->n_differ = 0;
    for (size_t i = 0; i < tr->n_entries; i++) {
        entry *e = &tr->entries[i];
        e->counted = entry_differs(e);
        tr->n_differ += e->counted;
    }
}

/* ---- edits ---- */

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
                       tr->model->path, quoted(tr, e, q));
    if (t != NULL && t->read_only)
        return ck_fail(err, EACCES, "%s: tensor '%s': %s tensors are shown read-only",
                       tr->model->path, quoted(tr, e, q), ck_dtype_canonical_name(t->dtype));
    return 0;
}

bool entry_writable(const tree *tr, const entry *e)
{
    ck_error err = {0};
    return entry_write_check(tr, e, &err) == 0;
}

/* The entry's edit record, after checking the entry may be edited. */
static edit *editable_edit(tree *tr, entry *e, ck_error *err)
{
    return entry_write_check(tr, e, err) < 0 ? NULL : edit_of(tr, e, err);
}

static edit *edit_of(tree *tr, entry *e, ck_error *err)
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

static edit *with_overlay(tree *tr, entry *e, bool empty, ck_error *err)
{
    edit *ed = editable_edit(tr, e, err);
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
    edit *ed = with_overlay(tr, e, size == 0, err);
    if (ed == NULL || spill_room(tr, ed->overlay.size, size, err) < 0)
        return -1;
    return spill_area_truncate(tr, &ed->overlay, size, err);
}

int entry_out_truncate(tree *tr, entry *e, uint64_t size, ck_error *err)
{
    return changed(tr, e, out_truncate_edit(tr, e, size, err));
}

static int out_write_edit(tree *tr, entry *e, const void *buf, size_t size, uint64_t off,
                    ck_error *err)
{
    edit *ed = with_overlay(tr, e, false, err);
    if (ed == NULL || spill_room(tr, ed->overlay.size, off + size, err) < 0)
        return -1;
    return spill_area_write(tr, &ed->overlay, buf, size, off, err);
}

int entry_out_write(tree *tr, entry *e, const void *buf, size_t size, uint64_t off,
                    ck_error *err)
{
    return changed(tr, e, out_write_edit(tr, e, buf, size, off, err));
}

int entry_meta_begin(tree *tr, entry *e, bool truncate, ck_error *err)
{
    edit *ed = editable_edit(tr, e, err);
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
                       tr->model->path, quoted(tr, e, q), perr.msg);
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
    return changed(tr, e, meta_check_edit(tr, e, false, err));
}

static int meta_finish_edit(tree *tr, entry *e, ck_error *err)
{
    if (e->edit == NULL || e->edit->meta_buf == NULL)
        return 0;
    int rc = changed(tr, e, meta_check_edit(tr, e, true, err));
    free(e->edit->meta_buf);
    e->edit->meta_buf = NULL;
    e->edit->meta_refused = false;
    return rc;
}

int entry_meta_finish(tree *tr, entry *e, ck_error *err)
{
    return changed(tr, e, meta_finish_edit(tr, e, err));
}

/* ---- commit ---- */

static int validate(const tree *tr, const entry *e, ck_error *err)
{
    char q[CK_QUOTE_BUF];
    const char *path = tr->model->path;
    if (!entry_has_meta(e))
        return ck_fail(err, EINVAL, "%s: tensor '%s' has no meta; nothing was saved", path,
                       quoted(tr, e, q));
    if (!entry_has_out(e))
        return ck_fail(err, EINVAL, "%s: tensor '%s' has no out; nothing was saved", path,
                       quoted(tr, e, q));
    const ck_dtype *dt = entry_dtype(tr, e);
    if (dt == NULL)
        return ck_fail(err, EINVAL, "%s: tensor '%s': its meta is not valid; nothing was saved",
                       path, quoted(tr, e, q));
    if (dt->kind == CK_KIND_STR)
        return 0;
    uint32_t ndim;
    const int64_t *dims = entry_dims(tr, e, &ndim);
    uint64_t want;
    /* out's byte count, as the view counts it */
    if (ck_shape_product(ck_view_shape(), dt, dims, ndim, &want) >= 0)
        return ck_fail(err, EINVAL, "%s: tensor '%s': the meta's shape is too large", path,
                       quoted(tr, e, q));
    uint64_t have = entry_out_size(tr, e);
    if (have != want) {
        char shape[CK_META_MAX];
        size_t n = (size_t)snprintf(shape, sizeof shape, "[");
        for (uint32_t i = 0; i < ndim && n < sizeof shape; i++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? "," : "",
                                  (long long)dims[i]);
        snprintf(shape + n, sizeof shape - n, "]");
        return ck_fail(err, EINVAL, "%s: tensor '%s': out is %llu bytes but meta %s %s needs "
                       "%llu; nothing was saved", path, quoted(tr, e, q),
                       (unsigned long long)have, shape, dt->of_name, (unsigned long long)want);
    }
    return 0;
}

/* The entries that block a save, each as validate() says it without the
 * model's path and "; nothing was saved", joined with "; " as many as
 * joined's CK_ERROR_MSG_MAX bytes hold (*shown of them) beside the path;
 * hold: mark each (entry.held).  *first: the first one's own message.  How
 * many there are. */
static size_t blockers(tree *tr, bool hold, char *joined, size_t *shown, ck_error *first)
{
    static const char tail[] = "; nothing was saved";
    const char *path = tr->model->path;
    size_t plen = strlen(path), n_bad = 0, len = 0;
    *shown = 0;
    joined[0] = '\0';
    for (size_t i = 0; i < tr->n_entries; i++) {
        ck_error one = {0};
        if (tr->entries[i].deleted || validate(tr, &tr->entries[i], &one) == 0)
            continue;
        tr->entries[i].held = hold;
        if (n_bad++ == 0)
            *first = one;
        /* "PATH: tensor ...; nothing was saved" -> "tensor ..." */
        const char *m = one.msg;
        size_t mlen = strlen(m);
        if (mlen > plen + 2 && strncmp(m, path, plen) == 0 && m[plen] == ':')
            m += plen + 2, mlen -= plen + 2;
        if (mlen >= sizeof tail - 1 && strcmp(m + mlen - (sizeof tail - 1), tail) == 0)
            mlen -= sizeof tail - 1;
        if (len + mlen + 2 + 96 + plen >= CK_ERROR_MSG_MAX)
            continue; /* counted, not shown */
        len += (size_t)snprintf(joined + len, CK_ERROR_MSG_MAX - len, "%s%.*s",
                                *shown ? "; " : "", (int)mlen, m);
        (*shown)++;
    }
    return n_bad;
}

/* Every entry that blocks the save, named in one line: a user fixing
 * the first would otherwise learn of the next only at the next save.
 * One refusal reads as validate() says it; several are joined, as many
 * as the line holds, and counted. */
static int validate_all(tree *tr, ck_error *err)
{
    char joined[CK_ERROR_MSG_MAX];
    size_t shown;
    size_t n_bad = blockers(tr, false, joined, &shown, err);
    const char *path = tr->model->path;
    if (n_bad <= 1)
        return n_bad == 0 ? 0 : -1;
    if (shown < n_bad)
        return ck_fail(err, EINVAL, "%s: %zu tensors block the save: %s; and %zu more; nothing "
                       "was saved", path, n_bad, joined, n_bad - shown);
    return ck_fail(err, EINVAL, "%s: %zu tensors block the save: %s; nothing was saved", path,
                   n_bad, joined);
}

static void unhold(tree *tr)
{
    for (size_t i = 0; i < tr->n_entries; i++)
        tr->entries[i].held = false;
}

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
 * validate_all says when a tensor it must save (ask->need) is among
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
    size_t n_held = blockers(tr, true, joined, &shown, &first);
    bool refused = held_name_taken(tr) || held_new_first(tr);
    for (size_t k = 0; k < ask->n_need; k++)
        refused |= ask->need[k] < tr->n_entries && tr->entries[ask->need[k]].held;
    if (refused || n_held == 0) {
        unhold(tr);
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

/* ---- saving ----
 *
 * tree_save_begin copies what the encoder needs (names, shapes, where the
 * bytes are) into the save, and freezes the spill areas it reads: an edit
 * made before the save ends moves a frozen area's bytes before changing
 * them (spill_area_reserve), and a frozen range given up is punched only when
 * the save ends.  The old model file stays open, and readable, until
 * tree_save_end switches the tree to the new one. */

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

static int out_of_memory(const tree *tr, ck_error *err)
{
    return ck_nomem(err, tr->model->path);
}

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
                       quoted(tr, e, q));
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
        return out_of_memory(tr, err);
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
        return out_of_memory(tr, err);
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
        if (entry_differs(&tr->entries[i]) && !tr->entries[i].held)
            return false;
    return true;
}

static int save_begin(tree *tr, tree_save **out, const tree_save_ask *ask, names_plan *plan,
                      ck_error *held, ck_error *err)
{
    if (plan_names(tr, plan, err) < 0)
        return -1;
    if (validate_all(tr, err) < 0 && hold_blockers(tr, ask, plan, held) < 0)
        return -1;
    if (plan->listed != NULL && apply_names(tr, plan, err) < 0)
        return -1;
    if (!to_save(tr, ask->make_file))
        return 0; /* the names were the directories' own */
    if (held->msg[0] != '\0' && held_all(tr)) {
        unhold(tr);
        return 0; /* the file has all the rest already */
    }
    size_t cap = tr->n_entries + 1;
    tree_save *save = calloc(1, sizeof *save);
    if (save == NULL)
        return out_of_memory(tr, err);
    ck_arena_init(&save->arena);
    save->w = calloc(cap, sizeof *save->w);
    save->pos = calloc(cap, sizeof *save->pos);
    save->dir = calloc(cap, sizeof *save->dir);
    /* Every overlay is a range of the one spill file. */
    save->spill = ck_source_wrap_fd(tr->spill_fd, tr->spill_end, "spill file", err);
    if (save->w == NULL || save->pos == NULL || save->dir == NULL || save->spill == NULL) {
        save_free(save);
        return out_of_memory(tr, err);
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
    plan_free(&plan);
    if (rc < 0)
        unhold(tr);
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
    edit_free(tr, ed);
    e->edit = NULL;
    if (meta_buf == NULL)
        return 0;
    if (edit_of(tr, e, err) == NULL) {
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
    int rc = ids == NULL ? out_of_memory(tr, err) : 0;
    for (size_t i = 0; rc == 0 && i < save->n_entries; i++)
        ids[i] = ENTRY_NEW;
    for (size_t k = 0; rc == 0 && k < m->index.n_live; k++) {
        const ck_tensor *t = &m->index.tensors[m->index.live[k]];
        if (ck_name_map_put(&by_dir, t->dir_name, strlen(t->dir_name), m->index.live[k]) < 0)
            rc = out_of_memory(tr, err);
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
            edit_free(tr, e->edit);
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
    return index_names(tr, err) < 0 ? -1 : rc;
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
    recount(tr);
    if (rc == 0)
        spill_reclaim(tr);
    return rc;
}

/* ---- tensor directories ---- */

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
    edit *ed = edit_of(tr, e, err);
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
    changed(tr, e, 0);
    stamp(&tr->root_mtime);
    stamp(&ed->dir_mtime);
    return (int64_t)tr->n_entries++;
fail:
    edit_free(tr, ed);
    e->edit = NULL;
    return -1;
}

static void forget_entry(tree *tr, entry *e)
{
    const char *dir = entry_dir_name(tr, e);
    ck_name_map_del(&tr->by_dir, dir, strlen(dir));
    e->deleted = true;
    if (e->edit != NULL)
        spill_area_free(tr, &e->edit->overlay); /* its bytes are not needed any more */
    changed(tr, e, 0);
    stamp(&tr->root_mtime);
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
    changed(tr, e, 0);
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
static int removable(tree *tr, entry *e, ck_error *err)
{
    if (!tr->writable)
        return ck_fail(err, EROFS, "%s: read-only mount", tr->model->path);
    if (keep_if_in_use(tr, e, err) < 0)
        return -1;
    return entry_write_check(tr, e, err);
}

static int rmdir_edit(tree *tr, entry *e, ck_error *err)
{
    if (removable(tr, e, err) < 0)
        return -1;
    if (entry_has_meta(e) || entry_has_out(e))
        return ck_fail(err, ENOTEMPTY, "%s: directory not empty", tr->model->path);
    forget_entry(tr, e);
    return 0;
}

int tree_rmdir(tree *tr, entry *e, ck_error *err)
{
    return changed(tr, e, rmdir_edit(tr, e, err));
}

static int rename_edit(tree *tr, entry *e, const char *new_dir_name, ck_error *err)
{
    if (removable(tr, e, err) < 0)
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
    edit *ed = edit_of(tr, e, err);
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
        forget_entry(tr, &tr->entries[target]);
    ck_name_map_del(&tr->by_dir, old_dir, strlen(old_dir));
    free(old_dir);
    free(keep_dir);
    stamp(&tr->root_mtime);
    if (ck_name_map_put(&tr->by_dir, ed->dir_name, strlen(ed->dir_name),
                        (uint32_t)(e - tr->entries)) < 0)
        return ck_nomem(err, tr->model->path);
    return 0;
}

int tree_rename(tree *tr, entry *e, const char *new_dir_name, ck_error *err)
{
    return changed(tr, e, rename_edit(tr, e, new_dir_name, err));
}

static int create_edit(tree *tr, entry *e, bool meta, ck_error *err)
{
    edit *ed = editable_edit(tr, e, err);
    if (ed == NULL)
        return -1;
    stamp(&ed->dir_mtime);
    if (meta) {
        ed->no_meta = false;
        return entry_meta_begin(tr, e, true, err);
    }
    ed->no_out = false;
    return entry_out_truncate(tr, e, 0, err);
}

int entry_create(tree *tr, entry *e, bool meta, ck_error *err)
{
    return changed(tr, e, create_edit(tr, e, meta, err));
}

static int unlink_edit(tree *tr, entry *e, bool meta, ck_error *err)
{
    edit *ed = editable_edit(tr, e, err);
    if (ed == NULL)
        return -1;
    stamp(&ed->dir_mtime);
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
    return changed(tr, e, unlink_edit(tr, e, meta, err));
}

/* ---- extra files ---- */

int64_t tree_extra_lookup(const tree *tr, uint32_t dir, const char *name)
{
    for (size_t i = 0; i < tr->n_extras; i++) {
        const extra *x = &tr->extras[i];
        if (!x->deleted && x->dir == dir && strcmp(x->name, name) == 0)
            return (int64_t)i;
    }
    return -1;
}

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

static void drop_extra(tree *tr, extra *x)
{
    spill_area_free(tr, &x->area);
    x->deleted = true;
    extra_stamp(tr, x, true);
    note_names_file(tr);
}

int tree_extra_unlink(tree *tr, size_t id, ck_error *err)
{
    (void)err;
    drop_extra(tr, &tr->extras[id]);
    return 0;
}

int tree_extra_write(tree *tr, size_t id, const void *buf, size_t size, uint64_t off,
                     ck_error *err)
{
    extra *x = &tr->extras[id];
    if (off > UINT64_MAX - size || names_file_room(tr, x, off + size, err) < 0 ||
        spill_room(tr, x->area.size, off + size, err) < 0)
        return -1;
    extra_stamp(tr, x, false);
    return spill_area_write(tr, &x->area, buf, size, off, err);
}

int tree_extra_truncate(tree *tr, size_t id, uint64_t size, ck_error *err)
{
    extra *x = &tr->extras[id];
    if (names_file_room(tr, x, size, err) < 0 || spill_room(tr, x->area.size, size, err) < 0)
        return -1;
    extra_stamp(tr, x, false);
    return spill_area_truncate(tr, &x->area, size, err);
}

int tree_extra_rename(tree *tr, size_t id, const char *new_name, ck_error *err)
{
    extra *x = &tr->extras[id];
    extra renamed = {.dir = x->dir, .name = (char *)new_name};
    if (names_file_room(tr, &renamed, x->area.size, err) < 0)
        return -1;
    char *copy = strdup(new_name);
    if (copy == NULL)
        return ck_nomem(err, tr->model->path);
    int64_t target = tree_extra_lookup(tr, x->dir, new_name);
    if (target >= 0 && (size_t)target != id)
        drop_extra(tr, &tr->extras[target]);
    free(x->name);
    x->name = copy;
    extra_stamp(tr, x, true);
    note_names_file(tr);
    return 0;
}

static int extra_replace_file_edit(tree *tr, size_t id, entry *e, bool meta, ck_error *err)
{
    extra *x = &tr->extras[id];
    edit *ed = editable_edit(tr, e, err);
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
    drop_extra(tr, x);
    x->alias = ALIAS_META;
    return 0;
}

int tree_extra_replace_file(tree *tr, size_t id, entry *e, bool meta, ck_error *err)
{
    return changed(tr, e, extra_replace_file_edit(tr, id, e, meta, err));
}

/* ---- a copied snapshot's names (the names file) ----
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
 * in a graph). */

static bool is_names_file(const tree *tr, const extra *x)
{
    return tr->names_file != NULL && !x->deleted && x->dir == EXTRA_IN_ROOT &&
           strcmp(x->name, tr->names_file->name) == 0;
}

/* The names file's extra, or -1. */
static int64_t names_file_id(tree *tr)
{
    return tr->names_file == NULL ? -1 : tree_extra_lookup(tr, EXTRA_IN_ROOT, tr->names_file->name);
}

static void note_names_file(tree *tr)
{
    tr->names_pending = tr->writable && names_file_id(tr) >= 0;
}

/* A names file is parsed whole in memory: bounded as its parser is. */
static int names_file_room(const tree *tr, const extra *x, uint64_t size, ck_error *err)
{
    if (!is_names_file(tr, x) || size <= tr->names_file->max_bytes)
        return 0;
    return ck_fail(err, EFBIG, "%s: %s: %llu bytes, more than the %llu MiB a snapshot's names "
                   "take", tr->model->path, x->name, (unsigned long long)size,
                   (unsigned long long)(tr->names_file->max_bytes >> 20));
}

size_t tree_take_renamed(tree *tr, tree_renamed **out)
{
    size_t n = tr->n_renamed;
    *out = tr->renamed;
    tr->renamed = NULL;
    tr->n_renamed = 0;
    return n;
}

void tree_renamed_free(tree_renamed *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i].old_dir);
    free(list);
}

static void plan_free(names_plan *plan)
{
    for (size_t i = 0; i < plan->n; i++) {
        free(plan->v[i].name);
        free(plan->v[i].dir);
        free(plan->v[i].old_dir);
    }
    free(plan->v);
    free(plan->listed);
    free(plan->in_order);
    memset(plan, 0, sizeof *plan);
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
    if (names_file_room(tr, x, size, err) < 0)
        return -1;
    char *buf = malloc(size ? (size_t)size : 1);
    if (buf == NULL)
        return out_of_memory(tr, err);
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
    if (pos < 0)
        return names_refused(tr, pe, "is not in the tree", err);
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
        return out_of_memory(tr, err);
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
            rc = out_of_memory(tr, err);
        else if (removable(tr, e, err) < 0 || edit_of(tr, e, err) == NULL)
            rc = -1;
        else if (target >= 0 && !plan->listed[target])
            s->into = target;
        if (rc == 0 && s->into >= 0) {
            plan->listed[s->pos] = LISTED_MERGED;
            if (editable_edit(tr, &tr->entries[s->into], err) == NULL ||
                with_overlay(tr, e, false, err) == NULL)
                rc = -1; /* its bytes become the tensor's out */
        }
    }
    ck_name_map_free(&dirs);
    return rc;
}

static int plan_names(tree *tr, names_plan *plan, ck_error *err)
{
    ck_named_dirs names = {0};
    memset(plan, 0, sizeof *plan);
    int64_t id = names_file_id(tr);
    if (id < 0)
        return 0;
    if (names_parse(tr, &tr->extras[id], &names, err) < 0) {
        tr->names_file->free_names(&names);
        return -1;
    }
    plan->v = calloc(names.n ? names.n : 1, sizeof *plan->v);
    plan->listed = calloc(tr->n_entries ? tr->n_entries : 1, 1);
    plan->in_order = calloc(names.n ? names.n : 1, sizeof *plan->in_order);
    int rc = plan->v && plan->listed && plan->in_order ? 0 : out_of_memory(tr, err);
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
        plan_free(plan);
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
    forget_entry(tr, s);
    changed(tr, t, 0);
}

/* Apply a plan: only out of memory can fail it now.  Merges first: each
 * forgets its directory's name, which a rename may then take. */
static int apply_names(tree *tr, names_plan *plan, ck_error *err)
{
    tree_renamed *more = realloc(tr->renamed, (tr->n_renamed + plan->n + 1) * sizeof *more);
    if (more == NULL)
        return out_of_memory(tr, err);
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
            rc = out_of_memory(tr, err);
        changed(tr, &tr->entries[s->pos], 0);
    }
    int64_t id = names_file_id(tr);
    if (id >= 0)
        drop_extra(tr, &tr->extras[id]); /* applied: the file is gone */
    return rc;
}
