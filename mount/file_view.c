/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_view: a view's files served (file_view.h).
 *
 * A read is cut at its segments' ends: the view's bytes are replied from
 * its memory, each tensor's part as `out` replies it, spliced from the
 * files while the reply holds at most SPLICE_PIECES pieces, else (a
 * gather of short runs, a source that is not a plain file, or a read over
 * many small pieces) copied, through ck_model_read for a tensor, into a
 * buffer of the request's size.  Memory is the view's plus a word per
 * segment (where it starts, for a read's binary search), whatever the
 * model's size.
 *
 * At the mount every segment is checked to stay within its tensor and the
 * sizes to add up.  The root holds the files, numbered INO_VIEW_BASE plus
 * their place (above every tensor's number, below the extra files').
 * Another user's open is checked against every tensor the file's segments
 * name (a file that shows_all, a set's index, against every tensor of the
 * view), its reads against those they cover, as for out.
 */
#include "file_view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "tensor_read.h"

struct ckfs_view {
    const ck_view *kind;
    const ck_model *m;          /* whose tensors the segments name */
    ck_view_files files;
    uint64_t **start;           /* file i's segment k begins at start[i][k] */
};

/* Whether segment s of file f (name for messages) stays within its tensor
 * or its bytes; else refused: a view's slip would be served as a read
 * past a tensor. */
static int check_segment(const ck_model *m, const ck_view_file *f, const ck_view_seg *s,
                         ck_error *err)
{
    if (s->kind == CK_SEG_BYTES)
        return s->len == 0 || s->bytes != NULL
                   ? 0 : ck_fail(err, EINVAL, "%s: view file %s: a segment without its bytes",
                                 m->path, f->name);
    if (s->kind != CK_SEG_TENSOR || s->tensor >= m->index.count)
        return ck_fail(err, EINVAL, "%s: view file %s: a segment of no tensor", m->path,
                       f->name);
    const ck_tensor *t = &m->index.tensors[s->tensor];
    if (s->off > t->nbytes || s->len > t->nbytes - s->off)
        return ck_fail(err, EINVAL, "%s: view file %s: tensor '%s': a segment past its bytes",
                       m->path, f->name, t->name);
    return 0;
}

/* Where each segment of file f begins, into *out (malloc'd); the
 * segments checked, and their lengths summed to the file's size. */
static int index_file(const ck_model *m, const ck_view_file *f, uint64_t **out, ck_error *err)
{
    uint64_t *start = malloc((f->n_segs + 1) * sizeof *start);
    if (start == NULL)
        return ck_nomem(err, m->path);
    uint64_t at = 0;
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < f->n_segs; k++) {
        rc = check_segment(m, f, &f->segs[k], err);
        start[k] = at;
        at = f->segs[k].len < INT64_MAX - at ? at + f->segs[k].len : INT64_MAX; /* no wrap */
    }
    if (rc < 0) {
        free(start);
        return -1;
    }
    if (at != f->size || at >= INT64_MAX) {
        free(start);
        return ck_fail(err, EINVAL, "%s: view file %s: its size is not its segments'", m->path,
                       f->name);
    }
    *out = start;
    return 0;
}

ckfs_view *ckfs_view_new(const ck_model *m, const ck_view *kind, const ck_view_opts *o,
                         ck_error *err)
{
    ckfs_view *v = calloc(1, sizeof *v);
    if (v == NULL) {
        ck_nomem(err, m->path);
        return NULL;
    }
    v->kind = kind;
    v->m = m;
    int rc = kind->build(m, o, &v->files, err);
    if (rc == 0 && (v->start = calloc(v->files.n + 1, sizeof *v->start)) == NULL)
        rc = ck_nomem(err, m->path);
    for (size_t i = 0; rc == 0 && i < v->files.n; i++)
        rc = index_file(m, &v->files.files[i], &v->start[i], err);
    if (rc == 0)
        return v;
    ckfs_view_free(v);
    return NULL;
}

void ckfs_view_free(ckfs_view *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; v->start != NULL && i < v->files.n; i++)
        free(v->start[i]);
    free(v->start);
    v->kind->free(&v->files);
    free(v);
}

size_t ckfs_view_count(const ckfs_view *v)
{
    return v->files.n;
}

const char *ckfs_view_name(const ckfs_view *v, size_t i)
{
    return v->files.files[i].name;
}

uint64_t ckfs_view_size(const ckfs_view *v, size_t i)
{
    return v->files.files[i].size;
}

long ckfs_view_find(const ckfs_view *v, const char *name)
{
    for (size_t i = 0; i < v->files.n; i++)
        if (strcmp(v->files.files[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* The tensor segment s names. */
static const ck_tensor *tensor_of(const ckfs_view *v, const ck_view_seg *s)
{
    return &v->m->index.tensors[s->tensor];
}

bool ckfs_view_may_open(const ckfs_caller *c, ckfs *fs, size_t i, int *errnum)
{
    const ckfs_view *v = fs->view;
    bool all = v->files.files[i].shows_all;
    for (size_t f = all ? 0 : i; f < (all ? v->files.n : i + 1); f++) {
        const ck_view_file *vf = &v->files.files[f];
        for (size_t k = 0; k < vf->n_segs; k++)
            if (vf->segs[k].kind == CK_SEG_TENSOR &&
                !ckfs_may_read(c, fs, tensor_of(v, &vf->segs[k]), errnum))
                return false;
    }
    return true;
}

/* The first segment of file f (starts: where each begins) that ends past
 * byte pos; n_segs when none does. */
static size_t first_after(const ck_view_file *f, const uint64_t *start, uint64_t pos)
{
    size_t lo = 0, hi = f->n_segs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (start[mid] + f->segs[mid].len <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A read's plan being built, with room for cap + 1 pieces; copy, of the
 * read's size (the plan's buffer), made for the first bytes that are not
 * answered where they are. */
typedef struct view_reply {
    ckfs_read_plan *plan;
    size_t cap;
    char *copy;
    uint64_t off;               /* the read's offset: copy[0] stands for it */
    size_t size;
} view_reply;

/* Whether pieces more leave the plan within cap. */
static bool fits(const view_reply *r, size_t pieces)
{
    return r->plan->n <= r->cap && pieces <= r->cap - r->plan->n;
}

/* Bytes at mem into the plan: the last piece grown when it ends at mem
 * (copies of consecutive segments are consecutive in copy, ckfs_plan_mem),
 * so that only a copy takes the plan past cap pieces, and never past
 * cap + 1: from then on everything is copied, after it. */
static int add_mem(view_reply *r, const void *mem, size_t len)
{
    return ckfs_plan_mem(r->plan, mem, len);
}

/* Where file byte pos goes in the copy, made on first use. */
static char *copy_at(view_reply *r, uint64_t pos)
{
    if (r->copy == NULL && (r->copy = ckfs_plan_buffer(r->plan, r->size)) == NULL)
        return NULL;
    return r->copy + (pos - r->off);
}

/* The view's bytes [mem, mem + len), at file byte pos, into the reply. */
static int add_bytes(view_reply *r, ckfs *fs, const unsigned char *mem, size_t len, uint64_t pos,
                     ck_error *err)
{
    if (fits(r, 1))
        return add_mem(r, mem, len) < 0 ? ck_nomem(err, fs->tr.model->path) : 0;
    char *dst = copy_at(r, pos);
    if (dst == NULL)
        return ck_nomem(err, fs->tr.model->path);
    memcpy(dst, mem, len);
    return add_mem(r, dst, len) < 0 ? ck_nomem(err, fs->tr.model->path) : 0;
}

/* Bytes [at, at + len) of tensor t, at file byte pos, into the reply. */
static int add_tensor(view_reply *r, ckfs *fs, const ck_tensor *t, uint64_t at, size_t len,
                      uint64_t pos, ck_error *err)
{
    if (fits(r, ckfs_splice_pieces(fs, t, at, len)))
        return ckfs_add_extents(fs, t, at, len, r->plan) < 0 ? ck_nomem(err, fs->tr.model->path)
                                                              : 0;
    char *dst = copy_at(r, pos);
    if (dst == NULL)
        return ck_nomem(err, fs->tr.model->path);
    long got = ck_model_read(fs->tr.model, t, dst, len, at, err);
    if (got < 0)
        return -1;
    if ((size_t)got != len)
        return ck_fail(err, EIO, "%s: tensor '%s': short read", fs->tr.model->path, t->name);
    return add_mem(r, dst, len) < 0 ? ck_nomem(err, fs->tr.model->path) : 0;
}

/* Whether each tensor of file f's segments [k, end) may be read by c, as
 * at the open, and is unchanged on disk; else false with the errno. */
static bool tensors_readable(const ckfs_caller *c, ckfs *fs, const ck_view_file *f,
                             const uint64_t *start, size_t k, uint64_t end, int *errnum)
{
    for (; k < f->n_segs && start[k] < end; k++) {
        const ck_view_seg *s = &f->segs[k];
        if (s->kind != CK_SEG_TENSOR || s->len == 0)
            continue;
        const ck_tensor *t = tensor_of(fs->view, s);
        if (!ckfs_may_read(c, fs, t, errnum) || ckfs_model_changed(fs, t, errnum))
            return false;
    }
    return true;
}

/* Segments k... of file f (starts: where each begins) from file byte pos
 * to end into the reply. */
static int add_segments(view_reply *r, ckfs *fs, const ck_view_file *f, const uint64_t *start,
                        size_t k, uint64_t pos, uint64_t end, ck_error *err)
{
    for (; pos < end && k < f->n_segs; k++) {
        const ck_view_seg *s = &f->segs[k];
        if (s->len == 0)
            continue;
        uint64_t at = pos - start[k];
        size_t len = s->len - at < end - pos ? (size_t)(s->len - at) : (size_t)(end - pos);
        int rc = s->kind == CK_SEG_BYTES
                     ? add_bytes(r, fs, s->bytes + at, len, pos, err)
                     : add_tensor(r, fs, tensor_of(fs->view, s), s->off + at, len, pos, err);
        if (rc < 0)
            return -1;
        pos += len;
    }
    return 0;
}

int ckfs_view_read(const ckfs_caller *c, ckfs *fs, size_t i, size_t size, off_t off,
                   ckfs_read_plan *plan)
{
    const ck_view_file *f = &fs->view->files.files[i];
    const uint64_t *start = fs->view->start[i];
    uint64_t pos = (uint64_t)off;
    int errnum = 0;
    if (pos >= f->size || size == 0)
        return 0;
    if (size > f->size - pos)
        size = (size_t)(f->size - pos);
    uint64_t end = pos + size;
    size_t k = first_after(f, start, pos);
    if (!tensors_readable(c, fs, f, start, k, end, &errnum))
        return -errnum;
    view_reply r = {.plan = plan, .cap = SPLICE_PIECES, .off = pos, .size = size};
    ck_error err = {0};
    if (add_segments(&r, fs, f, start, k, pos, end, &err) < 0) {
        ckfs_log(fs, LOG_ERR, "%s", err.msg);
        return -(err.errnum ? err.errnum : EIO);
    }
    return 0;
}
