/* SPDX-License-Identifier: Apache-2.0 */
/*
 * collection: what the collections share, below their table (collection.h):
 * the name of the model file a directory stands for.
 */
#define _GNU_SOURCE
#include "collection.h"

#include <stdio.h>
#include <string.h>

char *ck_collection_file(const ck_collection *c, const char *path)
{
    const char *name = c->model_file != NULL ? c->model_file(path) : NULL;
    if (name == NULL)
        return NULL;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    char *file = NULL;
    bool root = n > 0 && path[n - 1] == '/'; /* "/" itself */
    if (asprintf(&file, "%.*s%s%s", (int)n, path, root ? "" : "/", name) < 0)
        return NULL;
    return file;
}
