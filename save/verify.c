/* SPDX-License-Identifier: Apache-2.0 */
#include "verify.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/core/dir_name.h"
#include "../codec/registry.h"

#define CHUNK (1u << 20)

typedef struct verifier {
    const ck_model *m;          /* what the save started from */
    ck_model *nm;               /* the new files, read back */
    unsigned char *a, *b;       /* CHUNK bytes each: written / read back */
    ck_error *err;
} verifier;

/* The one line of a failure: the model, the tensor (by directory name)
 * and what differs. */
static int differs(verifier *v, const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int differs(verifier *v, const char *dir, const char *fmt, ...)
{
    char how[256], q[CK_QUOTE_BUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(how, sizeof how, fmt, ap);
    va_end(ap);
    return ck_fail(v->err, EIO, "%s: the saved file does not read back as the tree, nothing "
                   "was saved: tensor '%s': %s", v->m->path, ck_quote(q, dir, strlen(dir)), how);
}

/* Open the group's temporary files the way a mount opens the model:
 * through its envelope, with its data files, each target read from the
 * temporary file that will replace it. */
static ck_model *reopen(const ck_model *m, const ck_commit_group *g, const ck_open_opts *as_opts,
                        ck_error *err)
{
    ck_file_override *ov = calloc(g->n ? g->n : 1, sizeof *ov);
    /* The model is read as m->path: ckptfs-reencode writes elsewhere, but
     * the data files it names are found beside m.  A model saved with its
     * own data file is read where it goes, in m's format whatever its name. */
    ck_model_dir *dir = g->own_data ? ck_dir_in(g->dir->fd, g->dir->path, g->dir->base, err)
                                    : ck_dir_ref(m->dir);
    char path[PATH_MAX];
    const char *as = g->own_data ? ck_dir_join(g->dir, g->dir->base, path, sizeof path)
                                 : m->path;
    if (ov == NULL || dir == NULL) {
        if (ov == NULL)
            ck_nomem(err, m->path);
        free(ov);
        ck_dir_unref(dir);
        return NULL;
    }
    for (size_t i = 0; i < g->n; i++)
        if (i == 0)
            ck_override_init(&ov[i], dir, dir->base, as, g->files[i].fd);
        else
            ck_override_init(&ov[i], g->dir, g->files[i].rel, g->files[i].target,
                             g->files[i].fd);
    /* The CRC trailer was computed over the very bytes written; reading
     * the whole file again for it would double the cost of a save. */
    ck_open_opts o = as_opts != NULL ? *as_opts : (ck_open_opts){0};
    o.skip_crc = true;
    o.overrides = ov;
    o.n_overrides = g->n;
    o.format = m->format;
    ck_error e = {0};
    /* The envelope options that open m's envelope again (its key). */
    ck_envelope_args env_args;
    ck_model *nm = NULL;
    if (ck_envelope_args_copy(o.envelope, &m->env, &env_args, &e) == 0) {
        o.envelope = &env_args;
        nm = ck_model_open_at(dir, as, &o, &e);
        ck_envelope_args_free(&env_args);
    }
    free(ov);
    ck_dir_unref(dir);
    if (nm == NULL) {
        /* The reader's message names the model too: say it once. */
        size_t pl = strlen(as);
        const char *why = strncmp(e.msg, as, pl) == 0 && strncmp(e.msg + pl, ": ", 2) == 0
                              ? e.msg + pl + 2 : e.msg;
        ck_fail(err, EIO, "%s: the saved file does not read back, nothing was saved: %s",
                m->path, why);
    }
    return nm;
}

static bool same_type(const ck_model *m, const ck_dtype *a, const ck_dtype *b)
{
    if (a == b)
        return true;
    if (a == NULL || b == NULL || strcmp(a->of_name, b->of_name) != 0 || a->kind != b->kind)
        return false;
    return ck_writer_of(m)->same_type(a, b);
}

/* The directory a tree tensor must come back as. */
static const char *expected_dir(const ck_model *m, const ck_write_tensor *w,
                                char buf[CK_DIR_NAME_MAX + 1])
{
    if (w->orig_id != CK_WRITE_NEW) {
        const ck_tensor *ot = &m->index.tensors[w->orig_id];
        if (w->unchanged ||
            (w->name_len == ot->name_len && memcmp(w->name, ot->name, w->name_len) == 0))
            return ot->dir_name;
    }
    ck_dir_name(w->name, w->name_len, NULL, buf); /* new or renamed: no suffix */
    return buf;
}

/* The source that holds a tensor's record: extents in it move with it. */
static uint32_t home_of(const ck_model *m, const ck_tensor *t)
{
    const ck_format *f = m->format;
    return f->record_source ? f->record_source(m, (uint32_t)(t - m->index.tensors)) : 0;
}

/* A source decoded at open (ONNX typed fields, .ckpt str values): its
 * bytes come from the copied record, wherever they land in that file. */
static bool is_decoded(const ck_model *m, uint32_t src)
{
    return src != 0 && !ck_model_is_data_file(m, src);
}

/* An unchanged tensor was copied as its record: the same extents, at the
 * same places in that record, or in their data file. */
static int check_copied(verifier *v, const char *dir, const ck_tensor *ot, const ck_tensor *nt)
{
    if (ot->n_ext != nt->n_ext)
        return differs(v, dir, "%u pieces, the original has %u", nt->n_ext, ot->n_ext);
    uint32_t ho = home_of(v->m, ot), hn = home_of(v->nm, nt);
    for (uint32_t k = 0; k < ot->n_ext; k++) {
        const ck_extent *eo = ck_tensor_ext(ot, k), *en = ck_tensor_ext(nt, k);
        bool ok;
        if (eo->len != en->len)
            ok = false;
        else if (eo->src == ho)
            ok = en->src == hn && eo->off - ot->rec_off == en->off - nt->rec_off;
        else if (is_decoded(v->m, eo->src))
            ok = is_decoded(v->nm, en->src);
        else
            ok = eo->off == en->off &&
                 strcmp(v->m->sources[eo->src]->path, v->nm->sources[en->src]->path) == 0;
        if (!ok)
            return differs(v, dir, "piece %u is %llu bytes at %llu of %s, the original's %llu "
                           "bytes at %llu of %s", k, (unsigned long long)en->len,
                           (unsigned long long)en->off, v->nm->sources[en->src]->path,
                           (unsigned long long)eo->len, (unsigned long long)eo->off,
                           v->m->sources[eo->src]->path);
    }
    return 0;
}

/* A gathered tensor moved or renamed as it was: its bytes as they read,
 * not its extents (a PyTorch view's strided storage). */
static int check_gathered(verifier *v, const char *dir, const ck_tensor *ot,
                          const ck_tensor *nt)
{
    if (ot->nbytes != nt->nbytes)
        return differs(v, dir, "%llu bytes, the tree's %llu", (unsigned long long)nt->nbytes,
                       (unsigned long long)ot->nbytes);
    for (uint64_t at = 0; at < ot->nbytes; at += CHUNK) {
        size_t n = ot->nbytes - at < CHUNK ? (size_t)(ot->nbytes - at) : CHUNK;
        if (ck_model_read(v->m, ot, v->a, n, at, v->err) < 0 ||
            ck_model_read(v->nm, nt, v->b, n, at, v->err) < 0)
            return -1;
        if (memcmp(v->a, v->b, n) != 0)
            return differs(v, dir, "its bytes differ in [%llu, %llu)",
                           (unsigned long long)at, (unsigned long long)(at + n));
    }
    return 0;
}

/* A changed or new tensor: every byte read back is the byte written. */
static int check_bytes(verifier *v, const char *dir, const ck_write_tensor *w,
                       const ck_tensor *nt)
{
    const ck_tensor *ot = w->orig_id == CK_WRITE_NEW ? NULL : &v->m->index.tensors[w->orig_id];
    if (ot != NULL && ot->gather != NULL && ck_pieces_are_extents(v->m, w, ot))
        return check_gathered(v, dir, ot, nt);
    uint64_t at = 0;
    for (size_t i = 0; i < w->n_pieces; i++) {
        const ck_piece *p = &w->pieces[i];
        for (uint64_t pos = 0; pos < p->len;) {
            size_t n = p->len - pos < CHUNK ? (size_t)(p->len - pos) : CHUNK;
            const unsigned char *want = v->a;
            if (p->mem != NULL)
                want = (const unsigned char *)p->mem + pos;
            else if (ck_source_read(p->src, v->a, n, p->off + pos, v->err) < 0)
                return -1;
            long got = ck_model_read(v->nm, nt, v->b, n, at, v->err);
            if (got < 0)
                return -1;
            if ((size_t)got != n || memcmp(want, v->b, n) != 0) {
                size_t k = 0;
                while (k < (size_t)got && want[k] == v->b[k])
                    k++;
                return differs(v, dir, "its bytes differ from offset %llu",
                               (unsigned long long)(at + k));
            }
            pos += n;
            at += n;
        }
    }
    return 0;
}

static int check_tensor(verifier *v, const char *dir, const ck_write_tensor *w,
                        const ck_tensor *nt)
{
    const ck_tensor *ot = w->orig_id == CK_WRITE_NEW ? NULL : &v->m->index.tensors[w->orig_id];
    char q[CK_QUOTE_BUF];
    const char *name = w->unchanged ? ot->name : w->name;
    size_t name_len = w->unchanged ? ot->name_len : w->name_len;
    /* MindIR gives new and renamed parameters their graph's prefix. */
    bool exact = !ck_writer_of(v->m)->prefixes_names ||
                 (ot != NULL && name_len == ot->name_len && memcmp(name, ot->name, name_len) == 0);
    if (exact && (nt->name_len != name_len || memcmp(nt->name, name, name_len) != 0))
        return differs(v, dir, "named '%s'", ck_quote(q, nt->name, nt->name_len));
    const ck_dtype *dtype = w->unchanged ? ot->dtype : w->dtype;
    if (!same_type(v->m, dtype, nt->dtype))
        return differs(v, dir, "type %s, the tree's is %s", nt->dtype->of_name,
                       dtype ? dtype->of_name : "?");
    if (w->unchanged && ot->part != nt->part)
        return differs(v, dir, "no longer the same part of a map parameter");
    /* A str's shape is its text's length, checked with its bytes. */
    uint32_t ndim = w->unchanged ? ot->ndim : w->ndim;
    const int64_t *dims = w->unchanged ? ot->dims : w->dims;
    if (dtype->kind != CK_KIND_STR &&
        (nt->ndim != ndim || (ndim && memcmp(nt->dims, dims, ndim * sizeof *dims) != 0)))
        return differs(v, dir, "its shape changed (%u dims, the tree's %u)", nt->ndim, ndim);
    bool as_it_was = w->unchanged ||
                     (ot != NULL && ot->gather != NULL && ck_pieces_are_extents(v->m, w, ot));
    uint64_t nbytes = as_it_was ? ot->nbytes : ck_pieces_len(w);
    if (nt->nbytes != nbytes)
        return differs(v, dir, "%llu bytes, the tree's out has %llu",
                       (unsigned long long)nt->nbytes, (unsigned long long)nbytes);
    return w->unchanged ? check_copied(v, dir, ot, nt) : check_bytes(v, dir, w, nt);
}

/* Position in the new file's tree of each directory name. */
static int index_new(verifier *v, ck_name_map *pos)
{
    const ck_index *nx = &v->nm->index;
    for (size_t k = 0; k < nx->n_live; k++) {
        const char *d = nx->tensors[nx->live[k]].dir_name;
        if (ck_name_map_put(pos, d, strlen(d), (uint32_t)k) < 0)
            return ck_nomem(v->err, v->m->path);
    }
    return 0;
}

/* Every tree tensor comes back once, in tree order: exactly for .ckpt;
 * ONNX and MindIR put new tensors after the last main-graph one, so there
 * only the original tensors' order is fixed. */
static int compare(verifier *v, const ck_write_tensor *w, size_t n, ck_name_map *pos,
                   bool *seen)
{
    const ck_index *nx = &v->nm->index;
    long last = -1;
    char buf[CK_DIR_NAME_MAX + 1];
    for (size_t i = 0; i < n; i++) {
        const char *dir = expected_dir(v->m, &w[i], buf);
        uint32_t k = ck_name_map_get(pos, dir, strlen(dir));
        if (k == CK_NAME_MAP_NONE)
            return differs(v, dir, "missing");
        const ck_writer *wr = ck_writer_of(v->m);
        bool placed = wr->own_order ? true
                      : wr->in_tree_order ? k == i
                                          : w[i].orig_id == CK_WRITE_NEW || (long)k > last;
        if (!placed)
            return differs(v, dir, "at position %u, expected %zu", k, i);
        if (w[i].orig_id != CK_WRITE_NEW)
            last = k;
        seen[k] = true;
        if (check_tensor(v, dir, &w[i], &nx->tensors[nx->live[k]]) < 0)
            return -1;
    }
    for (size_t k = 0; k < nx->n_live; k++)
        if (!seen[k])
            return differs(v, nx->tensors[nx->live[k]].dir_name, "not in the tree");
    return 0;
}

int ck_verify_save(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                   const ck_commit_group *g, const ck_open_opts *as, ck_model **keep,
                   ck_error *err)
{
    verifier v = {.m = m, .err = err};
    v.nm = reopen(m, g, as, err);
    if (v.nm == NULL)
        return -1;
    ck_name_map pos;
    ck_name_map_init(&pos);
    v.a = malloc(CHUNK);
    v.b = malloc(CHUNK);
    bool *seen = calloc(v.nm->index.n_live + 1, sizeof *seen);
    int rc;
    if (v.a == NULL || v.b == NULL || seen == NULL)
        rc = ck_nomem(err, m->path);
    else if ((rc = index_new(&v, &pos)) == 0)
        rc = compare(&v, tensors, n, &pos, seen);
    ck_name_map_free(&pos);
    free(seen);
    free(v.a);
    free(v.b);
    if (rc == 0 && keep != NULL)
        *keep = v.nm;
    else
        ck_model_close(v.nm);
    return rc;
}
