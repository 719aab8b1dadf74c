/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_view: the model as safetensors files, laid out for the
 * mount (view.h).  One file, model.safetensors, or with -o max_shard_size
 * a Hugging Face sharded set when the model needs more than one shard
 * (model.safetensors.index.json and model-00001-of-0000N.safetensors...),
 * as save_pretrained names them.
 *
 * Their bytes are those ckptfs-convert writes for the model (to
 * model.safetensors, or to model.safetensors.index.json with the same
 * -o max_shard_size): the same list of tensors (codec/io/convert_plan.h),
 * cut into shards by the set writer's rule and laid out by the writer's
 * own planning (ck_st_plan_new), so the two cannot drift apart.  A file is
 * its header, one segment of bytes, then each tensor whole in the
 * layout's order; the index is one segment of text (shows_all: another
 * user's open of it is checked against every tensor).  Memory is the
 * headers and the index plus a few words per tensor.  ckptfs-convert
 * still writes through its encoder, not these segments: it streams to a
 * sink with its own checks and read-back, and the two share the plan and
 * the layout instead.
 */
#include "safetensors_view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../io/convert_plan.h"
#include "../core/model.h"
#include "safetensors_set_writer.h"
#include "safetensors_writer.h"

/* The view's own: every file's layout (the index's: its text as the
 * header, no tensors), which the segments' bytes point into. */
typedef struct st_state {
    ck_st_layout *lays;
    size_t n;
} st_state;

/* File f's segments from its layout: the header, then tensors ids[i] in
 * the layout's order, each right after the one before (checked: the mount
 * would serve other bytes than convert writes if they were not). */
static int add_segments(ck_view_file *f, const ck_model *m, const ck_st_layout *lay,
                        const uint32_t *ids, ck_error *err)
{
    if ((f->segs = calloc(lay->n + 1, sizeof *f->segs)) == NULL)
        return ck_nomem(err, m->path);
    f->segs[0] = (ck_view_seg){.kind = CK_SEG_BYTES, .len = lay->header_len,
                               .bytes = lay->header};
    uint64_t at = 0;
    for (size_t k = 0; k < lay->n; k++) {
        size_t i = lay->order[k];
        const ck_tensor *t = &m->index.tensors[ids[i]];
        if (lay->data_off[i] != at)
            return ck_fail(err, EIO, "%s: tensor '%s': not where the layout's last ended",
                           m->path, t->name);
        f->segs[k + 1] = (ck_view_seg){.kind = CK_SEG_TENSOR, .tensor = ids[i],
                                       .len = t->nbytes};
        at += t->nbytes;
    }
    f->n_segs = lay->n + 1;
    f->size = lay->header_len + at;
    if (f->size != lay->size)
        return ck_fail(err, EIO, "%s: the safetensors layout's size is not its parts'",
                       m->path);
    return 0;
}

/* File f: the tensors of plan p that shard `shard` of s holds (all of them
 * when s has no shards), laid out in *lay as a new safetensors file. */
static int add_shard(ck_view_file *f, ck_st_layout *lay, const ck_model *m,
                     const ck_convert_plan *p, const ck_st_shards *s, uint32_t shard,
                     const char *meta, ck_error *err)
{
    ck_write_tensor *mine = malloc((p->n + 1) * sizeof *mine);
    uint32_t *ids = malloc((p->n + 1) * sizeof *ids);
    int rc = -1;
    if (mine == NULL || ids == NULL) {
        ck_nomem(err, m->path);
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++)
        if (s->n == 0 || s->shard_of[i] == shard) {
            ids[k] = m->index.live[i];
            mine[k++] = p->w[i];
        }
    rc = ck_st_plan_new(m, mine, k, meta, lay, err);
    if (rc == 0)
        rc = add_segments(f, m, lay, ids, err);
out:
    free(mine);
    free(ids);
    return rc;
}

/* The set's index as file f: its text (as the layout's header) in one
 * segment, naming every tensor. */
static int add_index(ck_view_file *f, ck_st_layout *lay, const ck_model *m,
                     const ck_convert_plan *p, const ck_st_shards *s, ck_error *err)
{
    if ((f->name = strdup("model.safetensors.index.json")) == NULL)
        return ck_nomem(err, m->path);
    if ((lay->header = (unsigned char *)ck_st_shards_index(m, s, p->w, p->n, err)) == NULL)
        return -1;
    lay->header_len = lay->size = strlen((char *)lay->header);
    if ((f->segs = calloc(1, sizeof *f->segs)) == NULL)
        return ck_nomem(err, m->path);
    f->segs[0] = (ck_view_seg){.kind = CK_SEG_BYTES, .len = lay->header_len,
                               .bytes = lay->header};
    f->n_segs = 1;
    f->size = lay->size;
    f->shows_all = true;
    return 0;
}

/* The files of plan p: one, or the index and each shard of s, each with
 * meta as its "__metadata__" (as ckptfs-convert writes them). */
static int add_files(ck_view_files *v, st_state *st, const ck_model *m,
                     const ck_convert_plan *p, const ck_st_shards *s, const char *meta,
                     ck_error *err)
{
    bool set = s->n > 1; /* one shard is model.safetensors, as save_pretrained names it */
    size_t n = set ? s->n + 1 : 1;
    v->files = calloc(n, sizeof *v->files);
    st->lays = calloc(n, sizeof *st->lays);
    if (v->files == NULL || st->lays == NULL)
        return ck_nomem(err, m->path);
    v->n = st->n = n;
    if (!set) {
        v->files[0].name = strdup("model.safetensors");
        return v->files[0].name == NULL
                   ? ck_nomem(err, m->path)
                   : add_shard(&v->files[0], &st->lays[0], m, p, &(ck_st_shards){0}, 0, meta,
                               err);
    }
    for (uint32_t f = 0; f < s->n; f++) {
        if ((v->files[f + 1].name = strdup(s->names[f])) == NULL)
            return ck_nomem(err, m->path);
        if (add_shard(&v->files[f + 1], &st->lays[f + 1], m, p, s, f, meta, err) < 0)
            return -1;
    }
    return add_index(&v->files[0], &st->lays[0], m, p, s, err);
}

static int st_build(const ck_model *m, const ck_view_opts *o, ck_view_files *out, ck_error *err)
{
    memset(out, 0, sizeof *out);
    st_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return ck_nomem(err, m->path);
    out->state = st;
    ck_convert_plan p;
    ck_st_shards s = {0};
    char *meta = NULL;
    int rc = ck_convert_plan_build(m, &p, err);
    if (rc == 0)
        rc = ck_convert_plan_check(&p, m, &ck_safetensors_target, o->in, err);
    if (rc == 0 && o->max_shard != 0)
        rc = ck_st_shards_cut(m, "model", p.w, p.n, o->max_shard, &s, err);
    if (rc == 0)
        rc = ck_st_metadata_for(m, &meta, err);
    if (rc == 0)
        rc = add_files(out, st, m, &p, &s, meta, err);
    free(meta);
    ck_st_shards_free(&s);
    ck_convert_plan_free(&p);
    return rc;
}

static void st_free(ck_view_files *out)
{
    st_state *st = out->state;
    for (size_t i = 0; i < out->n; i++) {
        free(out->files[i].name);
        free(out->files[i].segs);
    }
    free(out->files);
    for (size_t i = 0; st != NULL && i < st->n; i++)
        ck_st_layout_free(&st->lays[i]);
    if (st != NULL)
        free(st->lays);
    free(st);
    memset(out, 0, sizeof *out);
}

const ck_view ck_safetensors_view = {
    .build = st_build,
    .free = st_free,
};
