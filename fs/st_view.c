/* SPDX-License-Identifier: Apache-2.0 */
/*
 * st_view: the model as synthesized safetensors files (st_view.h).
 *
 * A read is cut at the header's end and at each tensor's: the header's
 * part is replied from memory, each tensor's part as `out` replies it,
 * spliced from the files while the reply holds at most SPLICE_PIECES
 * pieces, else (a gather of short runs, a source that is not a plain file,
 * or a read over many small tensors) copied through ck_model_read into a
 * buffer of the request's size.  Memory is the headers and the index plus
 * a few words per tensor, whatever the model's size.
 */
#include "st_view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "../codec/safetensors/safetensors_set_writer.h"
#include "../codec/safetensors/safetensors_writer.h"
#include "../export/convert_plan.h"
#include "tensor_read.h"

/* One file of the view: a safetensors file, or the set's index (its text
 * as the layout's header, no tensors). */
typedef struct view_file {
    char *name;
    ck_st_layout lay;
    const ck_tensor **tensors;  /* by the layout's tensor index */
} view_file;

struct st_view {
    view_file *files;           /* a set: the index first, then the shards */
    size_t n;
};

/* File f: the tensors of plan p that shard `shard` of s holds (all of them
 * when s has no shards), laid out as a new safetensors file. */
static int add_shard(view_file *f, const ck_model *m, const ck_convert_plan *p,
                     const ck_st_shards *s, uint32_t shard, const char *meta, ck_error *err)
{
    ck_write_tensor *mine = malloc((p->n + 1) * sizeof *mine);
    f->tensors = calloc(p->n + 1, sizeof *f->tensors);
    if (mine == NULL || f->tensors == NULL) {
        free(mine);
        return ck_nomem(err, m->path);
    }
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        if (s->n == 0 || s->shard_of[i] == shard) {
            f->tensors[k] = &m->index.tensors[m->index.live[i]];
            mine[k++] = p->w[i];
        }
    int rc = ck_st_plan_new(m, mine, k, meta, &f->lay, err);
    free(mine);
    return rc;
}

/* The files of plan p: one, or the index and each shard of s, each with
 * meta as its "__metadata__" (as ckptfs-convert writes them). */
static int add_files(st_view *v, const ck_model *m, const ck_convert_plan *p,
                     const ck_st_shards *s, const char *meta, ck_error *err)
{
    bool set = s->n > 1; /* one shard is model.safetensors, as save_pretrained names it */
    size_t n = set ? s->n + 1 : 1;
    if ((v->files = calloc(n, sizeof *v->files)) == NULL)
        return ck_nomem(err, m->path);
    v->n = n;
    if (!set) {
        v->files[0].name = strdup("model.safetensors");
        return v->files[0].name == NULL
                   ? ck_nomem(err, m->path)
                   : add_shard(&v->files[0], m, p, &(ck_st_shards){0}, 0, meta, err);
    }
    for (uint32_t f = 0; f < s->n; f++) {
        view_file *vf = &v->files[f + 1];
        if ((vf->name = strdup(s->names[f])) == NULL)
            return ck_nomem(err, m->path);
        if (add_shard(vf, m, p, s, f, meta, err) < 0)
            return -1;
    }
    view_file *ix = &v->files[0];
    if ((ix->name = strdup("model.safetensors.index.json")) == NULL)
        return ck_nomem(err, m->path);
    if ((ix->lay.header = (unsigned char *)ck_st_shards_index(m, s, p->w, p->n, err)) == NULL)
        return -1;
    ix->lay.header_len = ix->lay.size = strlen((char *)ix->lay.header);
    return 0;
}

st_view *ckfs_st_view_new(const ck_model *m, const char *in, uint64_t max_shard,
                          ck_error *err)
{
    ck_convert_plan p;
    ck_st_shards s = {0};
    char *meta = NULL;
    st_view *v = calloc(1, sizeof *v);
    if (v == NULL) {
        ck_nomem(err, m->path);
        return NULL;
    }
    int rc = ck_convert_plan_build(m, &p, err);
    if (rc == 0)
        rc = ck_convert_plan_check(&p, m, &ck_safetensors_target, in, err);
    if (rc == 0 && max_shard != 0)
        rc = ck_st_shards_cut(m, "model", p.w, p.n, max_shard, &s, err);
    if (rc == 0)
        rc = ck_st_metadata_for(m, &meta, err);
    if (rc == 0)
        rc = add_files(v, m, &p, &s, meta, err);
    free(meta);
    ck_st_shards_free(&s);
    ck_convert_plan_free(&p);
    if (rc == 0)
        return v;
    ckfs_st_view_free(v);
    return NULL;
}

void ckfs_st_view_free(st_view *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->n; i++) {
        free(v->files[i].name);
        ck_st_layout_free(&v->files[i].lay);
        free(v->files[i].tensors);
    }
    free(v->files);
    free(v);
}

size_t ckfs_st_view_count(const st_view *v)
{
    return v->n;
}

const char *ckfs_st_view_name(const st_view *v, size_t i)
{
    return v->files[i].name;
}

uint64_t ckfs_st_view_size(const st_view *v, size_t i)
{
    return v->files[i].lay.size;
}

long ckfs_st_view_find(const st_view *v, const char *name)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->files[i].name, name) == 0)
            return (long)i;
    return -1;
}

bool ckfs_st_view_may_open(fuse_req_t req, ckfs *fs, size_t i)
{
    const st_view *v = fs->view;
    bool index = v->n > 1 && i == 0;
    for (size_t f = index ? 0 : i; f < (index ? v->n : i + 1); f++)
        for (size_t k = 0; k < v->files[f].lay.n; k++)
            if (!ckfs_may_read(req, fs, v->files[f].tensors[k]))
                return false;
    return true;
}

/* The tensor at file position k: its bytes' offset in the file. */
static uint64_t start_at(const view_file *v, size_t k)
{
    return v->lay.header_len + v->lay.data_off[v->lay.order[k]];
}

/* The first file position whose tensor ends past byte pos of the file
 * (pos at or past the header); n when none does. */
static size_t first_after(const view_file *v, uint64_t pos)
{
    size_t lo = 0, hi = v->lay.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (start_at(v, mid) + v->tensors[v->lay.order[mid]]->nbytes <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A request's reply being built: bv with room for cap + 1 buffers (the
 * header's and cap more), and copy, of the request's size, made for the
 * first bytes that are not spliced. */
typedef struct reply {
    struct fuse_bufvec *bv;
    size_t cap;
    char *copy;
    uint64_t off;               /* the request's offset: copy[0] stands for it */
    size_t size;
} reply;

/* Bytes at mem into the reply: the last buffer grown when it ends at mem
 * (copies of consecutive tensors are consecutive in copy), so that a
 * buffer is added only after an extent or the header's, and the reply
 * never holds more than cap + 1. */
static void add_mem(reply *r, const void *mem, size_t len)
{
    struct fuse_buf *last = r->bv->count > 0 ? &r->bv->buf[r->bv->count - 1] : NULL;
    if (last != NULL && !(last->flags & FUSE_BUF_IS_FD) &&
        (const char *)last->mem + last->size == (const char *)mem) {
        last->size += len;
        return;
    }
    r->bv->buf[r->bv->count++] = (struct fuse_buf){.size = len, .mem = (void *)mem};
}

/* Bytes [at, at + len) of tensor t, at file byte pos, into the reply. */
static int add_tensor(reply *r, ckfs *fs, const ck_tensor *t, uint64_t at, size_t len,
                      uint64_t pos, ck_error *err)
{
    size_t pieces = ckfs_splice_pieces(fs, t, at, len);
    if (r->bv->count <= r->cap && pieces <= r->cap - r->bv->count) {
        ckfs_add_extents(fs, t, at, len, r->bv);
        return 0;
    }
    if (r->copy == NULL && (r->copy = malloc(r->size)) == NULL)
        return ck_nomem(err, fs->tr.model->path);
    char *dst = r->copy + (pos - r->off);
    long got = ck_model_read(fs->tr.model, t, dst, len, at, err);
    if (got < 0)
        return -1;
    if ((size_t)got != len)
        return ck_fail(err, EIO, "%s: tensor '%s': short read", fs->tr.model->path, t->name);
    add_mem(r, dst, len);
    return 0;
}

/* Whether each tensor of file positions [k, end) may be read by the
 * requester, as at the open, and is unchanged on disk; else answered. */
static bool tensors_readable(fuse_req_t req, ckfs *fs, const view_file *v, size_t k,
                             uint64_t end)
{
    for (; k < v->lay.n && start_at(v, k) < end; k++) {
        const ck_tensor *t = v->tensors[v->lay.order[k]];
        if (t->nbytes == 0)
            continue;
        if (!ckfs_may_read(req, fs, t) || ckfs_model_changed(req, fs, t))
            return false;
    }
    return true;
}

void ckfs_st_view_read(fuse_req_t req, ckfs *fs, size_t i, size_t size, off_t off)
{
    const view_file *v = &fs->view->files[i];
    uint64_t pos = (uint64_t)off;
    if (pos >= v->lay.size || size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    if (size > v->lay.size - pos)
        size = (size_t)(v->lay.size - pos);
    uint64_t end = pos + size;
    size_t k = pos < v->lay.header_len ? 0 : first_after(v, pos);
    if (!tensors_readable(req, fs, v, k, end))
        return;
    reply r = {.cap = SPLICE_PIECES, .off = pos, .size = size};
    r.bv = malloc(sizeof *r.bv + r.cap * sizeof r.bv->buf[0]);
    if (r.bv == NULL) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    memset(r.bv, 0, sizeof *r.bv);
    ck_error err = {0};
    int rc = 0;
    if (pos < v->lay.header_len) {
        size_t n = (size_t)(v->lay.header_len - pos) < size ? (size_t)(v->lay.header_len - pos)
                                                             : size;
        add_mem(&r, v->lay.header + pos, n);
        pos += n;
    }
    for (; rc == 0 && pos < end && k < v->lay.n; k++) {
        const ck_tensor *t = v->tensors[v->lay.order[k]];
        uint64_t start = start_at(v, k), at = pos - start;
        if (t->nbytes == 0)
            continue;
        size_t len = t->nbytes - at < end - pos ? (size_t)(t->nbytes - at) : (size_t)(end - pos);
        rc = add_tensor(&r, fs, t, at, len, pos, &err);
        pos += len;
    }
    if (rc < 0) {
        ckfs_log(fs, LOG_ERR, "%s", err.msg);
        fuse_reply_err(req, err.errnum ? err.errnum : EIO);
    } else {
        ckfs_reply_bufvec(req, fs, r.bv, off);
    }
    free(r.bv);
    free(r.copy);
}
