/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_model: a map applied to an open model's index (map_model.h).  The
 * names the map sees are the ones every tool shows (ck_tensor_shown_name),
 * so that a map written from `ckptfs-dump`'s listing applies as written.
 * A reshaped tensor keeps its extents under its new dims; a permuted one
 * keeps them too, read through a strided gather (ck_tensor_set_strided:
 * runs of its bytes in their new order, never a copy); a tensor an add
 * rule made is a new entry of the index reading one source of zeros, as
 * long as the largest of them, which every such tensor shares.
 */
#define _GNU_SOURCE
#include "map_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor t's elements read in the order o gives them. */
static int reorder(ck_model *m, const ck_map *map, ck_tensor *t, const ck_map_out *o,
                   ck_error *err)
{
    if (t->nbytes == 0)
        return 0;
    if (t->gather != NULL || t->n_ext != 1) {
        char q[CK_QUOTE_BUF];
        return ck_fail(err, ENOTSUP, "%s: line %u: tensor '%s': its bytes are already "
                       "gathered (a strided view, or slices merged), and a permute of those "
                       "is not built yet", ck_map_path(map), o->view_line,
                       ck_quote(q, o->name, strlen(o->name)));
    }
    uint64_t size[CK_MAX_DIMS + 2], stride[CK_MAX_DIMS + 2];
    for (uint32_t d = 0; d < o->view_n; d++) {
        size[d] = (uint64_t)o->view_dims[d];
        stride[d] = (uint64_t)o->view_step[d];
    }
    if (ck_tensor_set_strided(&m->index.arena, t, size, stride, o->view_n,
                              t->dtype->itemsize) < 0)
        return ck_nomem(err, m->path);
    return 0;
}

/* The map's outcome o[0..n) in the index, the inputs' ids in_ids[]:
 * reshaped dims set, added tensors made; each one's id into ids[i], its
 * name into names[i]. */
static int place(ck_model *m, const ck_map *map, const ck_map_out *o, size_t n,
                 const uint32_t *in_ids, uint32_t *ids, const char **names, ck_error *err)
{
    ck_index *ix = &m->index;
    uint64_t zeros = 0;
    long zsrc = -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes;
        if (o[i].from < 0 &&
            ck_shape_product(&ck_shape_ckpt, o[i].dtype, o[i].dims, o[i].ndim, &bytes) < 0 &&
            bytes > zeros)
            zeros = bytes;
    }
    for (size_t i = 0; i < n; i++) {
        names[i] = o[i].name;
        int64_t *dims = o[i].dims ? ck_arena_alloc(&ix->arena, (o[i].ndim + 1) * sizeof *dims)
                                  : NULL;
        if (o[i].dims != NULL && dims == NULL)
            return ck_nomem(err, m->path);
        if (dims != NULL)
            memcpy(dims, o[i].dims, o[i].ndim * sizeof *dims);
        if (o[i].from >= 0) {
            ck_tensor *t = &ix->tensors[in_ids[o[i].from]];
            ids[i] = in_ids[o[i].from];
            if (dims != NULL) {
                t->dims = dims;
                t->ndim = o[i].ndim;
                t->scalar_dims_zero = false; /* a shape of the map's */
            }
            if (o[i].view_n > 0 && reorder(m, map, t, &o[i], err) < 0)
                return -1;
            continue;
        }
        if (zsrc < 0) {
            char what[256];
            snprintf(what, sizeof what, "%s (zeros map %s adds)", m->path, ck_map_name(map));
            ck_source *z = ck_source_zeros(zeros, what, err);
            if (z == NULL || (zsrc = ck_model_add_source(m, z, err)) < 0)
                return -1;
        }
        long id = ck_index_add(ix);
        if (id < 0)
            return ck_nomem(err, m->path);
        ck_tensor *t = &ix->tensors[id];
        uint64_t bytes = 0;
        ck_shape_product(&ck_shape_ckpt, o[i].dtype, dims, o[i].ndim, &bytes);
        t->dtype = o[i].dtype;
        t->type_name = ck_model_type_name(m, NULL, o[i].dtype);
        t->dims = dims;
        t->ndim = o[i].ndim;
        t->nbytes = bytes;
        if (ck_tensor_add_extent(t, (uint32_t)zsrc, 0, bytes) < 0)
            return ck_nomem(err, m->path);
        ids[i] = (uint32_t)id;
    }
    return 0;
}

int ck_map_model(ck_model *m, const ck_map *map, ck_error *err)
{
    ck_index *ix = &m->index;
    size_t n = ix->n_live, n_out = 0;
    char **shown = calloc(n + 1, sizeof *shown);
    ck_map_tensor *in = calloc(n + 1, sizeof *in);
    ck_map_out *out = NULL;
    int rc = shown && in ? 0 : ck_nomem(err, m->path);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        in[i] = (ck_map_tensor){.name = t->name, .dtype = t->dtype, .dims = t->dims,
                                .ndim = t->ndim};
        if (!ck_tensor_has_own_name(t) && (in[i].name = shown[i] = ck_tensor_shown_name(t)) == NULL)
            rc = ck_nomem(err, m->path);
    }
    if (rc == 0)
        rc = ck_map_apply(map, in, n, &out, &n_out, err);
    uint32_t *ids = rc == 0 ? calloc(n_out + 1, sizeof *ids) : NULL;
    const char **names = rc == 0 ? calloc(n_out + 1, sizeof *names) : NULL;
    if (rc == 0 && (ids == NULL || names == NULL))
        rc = ck_nomem(err, m->path);
    if (rc == 0)
        rc = place(m, map, out, n_out, ix->live, ids, names, err);
    if (rc == 0)
        rc = ck_index_rename(ix, ids, names, n_out, m->path, err);
    if (rc == 0 && (m->mapped_by = strdup(ck_map_name(map))) == NULL)
        rc = ck_nomem(err, m->path);
    for (size_t i = 0; shown != NULL && i < n; i++)
        free(shown[i]);
    ck_map_out_free(out, n_out);
    free(shown);
    free(in);
    free(ids);
    free(names);
    return rc;
}
