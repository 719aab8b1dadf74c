/* SPDX-License-Identifier: Apache-2.0 */
/*
 * map_model: a map applied to an open model's index (map_model.h).  The
 * names the map sees are the ones every tool shows (ck_tensor_shown_name),
 * so that a map written from `ckptfs-dump`'s listing applies as written.
 */
#define _GNU_SOURCE
#include "map_model.h"

#include <stdlib.h>
#include <string.h>

int ck_map_model(ck_model *m, const ck_map *map, ck_error *err)
{
    ck_index *ix = &m->index;
    size_t n = ix->n_live;
    char **shown = calloc(n + 1, sizeof *shown);
    char **out = calloc(n + 1, sizeof *out);
    uint32_t *ids = calloc(n + 1, sizeof *ids);
    const char **names = calloc(n + 1, sizeof *names);
    int rc = shown && out && ids && names ? 0 : ck_nomem(err, m->path);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        if (ck_tensor_has_own_name(t))
            names[i] = t->name;
        else if ((names[i] = shown[i] = ck_tensor_shown_name(t)) == NULL)
            rc = ck_nomem(err, m->path);
    }
    if (rc == 0)
        rc = ck_map_names(map, names, n, out, err);
    size_t kept = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (out[i] != NULL) {
            ids[kept] = ix->live[i];
            names[kept++] = out[i];
        }
    if (rc == 0)
        rc = ck_index_rename(ix, ids, names, kept, m->path, err);
    if (rc == 0 && (m->mapped_by = strdup(ck_map_name(map))) == NULL)
        rc = ck_nomem(err, m->path);
    for (size_t i = 0; i < n && shown != NULL && out != NULL; i++) {
        free(shown[i]);
        free(out[i]);
    }
    free(shown);
    free(out);
    free(ids);
    free(names);
    return rc;
}
