/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hf_folder: a Hugging Face model folder as its model file (hf_folder.h).
 *
 * transformers' from_pretrained, given a local folder
 * (modeling_utils.py), takes the first of these that is a file:
 * model.safetensors, model.safetensors.index.json, pytorch_model.bin,
 * pytorch_model.bin.index.json.  ckptfs takes them in that order, the last
 * left out: it reads no sharded .bin set.  save_pretrained writes one of
 * them, so a folder with two is one someone made by hand; it opens as the
 * model transformers would load from it.
 */
#include "hf_folder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../registry.h"

#define CONFIG "config.json"

/* In preference order. */
static const char *const weights[] = {
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
};

static bool regular_in(const char *dir, const char *name)
{
    char p[4096];
    int n = snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return n > 0 && (size_t)n < sizeof p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *ck_hf_folder_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode) || !regular_in(path, CONFIG))
        return NULL;
    for (size_t i = 0; i < sizeof weights / sizeof weights[0]; i++)
        if (regular_in(path, weights[i]))
            return weights[i];
    return NULL;
}

static bool probe(const char *path)
{
    return ck_hf_folder_file(path) != NULL;
}

/* Opened as the file: ck_open_path and the mount go there through
 * model_file; this is for a caller holding only the collection. */
static ck_model *open_folder(const char *path, const ck_collection_opts *o, ck_error *err)
{
    char *file = ck_collection_file(&ck_collection_hf, path);
    if (file == NULL) {
        ck_fail(err, EINVAL, "%s: is no longer %s (or out of memory)", path,
                ck_collection_hf.title);
        return NULL;
    }
    ck_model *m = ck_model_open(file, &o->open, err);
    free(file);
    return m;
}

const ck_collection ck_collection_hf = {
    .name = "hf", .title = "a Hugging Face model folder", .probe = probe,
    .open = open_folder, .model_file = ck_hf_folder_file,
};
