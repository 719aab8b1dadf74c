/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model_set: the models a merged model is assembled from (model_set.h).
 */
#define _GNU_SOURCE
#include "model_set.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int cmp_name(const ck_tensor *a, const char *name, size_t len)
{
    int c = memcmp(a->name, name, a->name_len < len ? a->name_len : len);
    return c != 0 ? c : (a->name_len > len) - (a->name_len < len);
}

static int cmp_ids(const void *a, const void *b, void *ix_)
{
    const ck_index *ix = ix_;
    const ck_tensor *y = &ix->tensors[*(const uint32_t *)b];
    return cmp_name(&ix->tensors[*(const uint32_t *)a], y->name, y->name_len);
}

ck_model_set *ck_mset_new(uint32_t cap, const char *path, ck_error *err)
{
    ck_model_set *s = calloc(1, sizeof *s);
    if (s != NULL) {
        s->cap = cap;
        s->models = calloc(cap ? cap : 1, sizeof *s->models);
        s->by_name = calloc(cap ? cap : 1, sizeof *s->by_name);
        s->src_base = calloc(cap ? cap : 1, sizeof *s->src_base);
    }
    if (s == NULL || s->models == NULL || s->by_name == NULL || s->src_base == NULL) {
        ck_mset_free(s);
        ck_nomem(err, path);
        return NULL;
    }
    return s;
}

int ck_mset_put(ck_model_set *s, uint32_t i, ck_model *m, ck_error *err)
{
    s->models[i] = m;
    if (i >= s->n)
        s->n = i + 1;
    const ck_index *ix = &m->index;
    uint32_t *ids = malloc((ix->n_live ? ix->n_live : 1) * sizeof *ids);
    if (ids == NULL)
        return ck_nomem(err, m->path);
    memcpy(ids, ix->live, ix->n_live * sizeof *ids);
    qsort_r(ids, ix->n_live, sizeof *ids, cmp_ids, (void *)ix);
    s->by_name[i] = ids;
    return 0;
}

const ck_tensor *ck_mset_find(const ck_model_set *s, uint32_t i, const char *name, size_t len)
{
    const ck_index *ix = &s->models[i]->index;
    size_t lo = 0, hi = ix->n_live;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ck_tensor *t = &ix->tensors[s->by_name[i][mid]];
        int c = cmp_name(t, name, len);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const ck_tensor *ck_mset_sorted(const ck_model_set *s, uint32_t i, size_t k)
{
    return &s->models[i]->index.tensors[s->by_name[i][k]];
}

int ck_mset_add_views(ck_model_set *s, ck_model *merged, ck_error *err)
{
    for (uint32_t i = 0; i < s->n; i++) {
        const ck_model *m = s->models[i];
        s->src_base[i] = merged->n_sources;
        for (uint32_t k = 0; k < m->n_sources; k++) {
            ck_source *v = ck_source_view(m->sources[k], err);
            long id = v == NULL ? -1 : ck_model_add_source(merged, v, err);
            if (id < 0)
                return -1;
            /* A decoding source is serialized by its own model's lock,
             * which its reads take: the merged model's would only
             * serialize the models against each other. */
            merged->sources[id]->serial = NULL;
        }
    }
    return 0;
}

void ck_mset_stat_join(struct stat *all, const struct stat *one)
{
    all->st_size += one->st_size;
    all->st_mode &= one->st_mode | S_IFMT;
    if (one->st_mtim.tv_sec > all->st_mtim.tv_sec ||
        (one->st_mtim.tv_sec == all->st_mtim.tv_sec && one->st_mtim.tv_nsec > all->st_mtim.tv_nsec))
        all->st_mtim = one->st_mtim;
}

void ck_mset_stat(const ck_model_set *s, struct stat *st)
{
    *st = s->models[0]->st;
    st->st_size = 0;
    for (uint32_t i = 0; i < s->n; i++)
        ck_mset_stat_join(st, &s->models[i]->st);
}

void ck_mset_free(void *state)
{
    ck_model_set *s = state;
    if (s == NULL)
        return;
    for (uint32_t i = 0; i < s->n; i++) {
        ck_model_close(s->models[i]);
        free(s->by_name[i]);
    }
    free(s->models);
    free(s->by_name);
    free(s->src_base);
    free(s);
}

const char *ck_mset_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    const ck_model_set *s = m->state;
    return t != NULL ? t->type_name : ck_model_type_name(s->models[0], NULL, dt);
}

bool ck_mset_is_data_file(const ck_model *m, uint32_t i)
{
    (void)m; /* every source is a view: the files are their own models' */
    (void)i;
    return false;
}

const char *ck_mset_notes(const ck_model *m)
{
    return ((const ck_model_set *)m->state)->notes;
}
