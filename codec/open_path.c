/* SPDX-License-Identifier: Apache-2.0 */
/*
 * open_path: the collections' table and a path opened as one model
 * (open_path.h).
 */
#include "open_path.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "collections/dist_merge.h"
#include "collections/hf_folder.h"
#include "collections/iteration_dir.h"
#include "oneflow/oneflow_dir.h"
#include "pytorch/dcp_dir.h"

/* Probed in this order; a strategy given names the first. */
static const ck_collection *const collections[] = {
    &ck_collection_dist,
    &ck_collection_iteration,
    &ck_collection_oneflow,
    &ck_collection_dcp,
    &ck_collection_hf,
};

#define N_COLLECTIONS (sizeof collections / sizeof collections[0])

const ck_collection *ck_collection_at(size_t i)
{
    return i < N_COLLECTIONS ? collections[i] : NULL;
}

const ck_collection *ck_collection_of(const char *path, const char *strategy)
{
    if (strategy != NULL)
        return &ck_collection_dist;
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return NULL;
    for (size_t i = 0; i < N_COLLECTIONS; i++)
        if (collections[i]->probe != NULL && collections[i]->probe(path))
            return collections[i];
    return NULL;
}

ck_model *ck_open_path(const char *path, const ck_collection_opts *o, ck_error *err)
{
    const ck_collection *c = ck_collection_of(path, o->strategy);
    if (c == NULL)
        return ck_model_open(path, &o->open, err);
    if (c->model_file != NULL) {
        char *file = ck_collection_file(c, path);
        if (file == NULL) {
            ck_fail(err, EINVAL, "%s: is no longer %s (or out of memory)", path, c->title);
            return NULL;
        }
        ck_model *m = ck_model_open(file, &o->open, err);
        free(file);
        return m;
    }
    ck_collection_opts each = *o;
    each.open.key_if_encrypted = true; /* ranks or shards, plain ones too */
    return c->open(path, &each, err);
}

const ck_names_file *ck_copied_names_file(void)
{
    for (size_t i = 0; i < N_COLLECTIONS; i++)
        if (collections[i]->names_file != NULL)
            return collections[i]->names_file;
    return NULL;
}
