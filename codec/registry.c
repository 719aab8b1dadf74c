/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry: the tables of the formats, envelopes and collections ckptfs
 * knows (registry.h).
 */
#define _GNU_SOURCE
#include "registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cipher/cipher_envelope.h"
#include "ckpt/ckpt_reader.h"
#include "ckpt/ckpt_writer.h"
#include "collections/dist_merge.h"
#include "collections/hf_folder.h"
#include "collections/iteration_dir.h"
#include "oneflow/oneflow_dir.h"
#include "oneflow/oneflow_dir_writer.h"
#include "onnx_mindir/onnx_mindir_reader.h"
#include "onnx_mindir/onnx_mindir_writer.h"
#include "pytorch/dcp_dir.h"
#include "pytorch/pt_reader.h"
#include "pytorch/pt_writer.h"
#include "safetensors/safetensors_reader.h"
#include "safetensors/safetensors_set.h"
#include "safetensors/safetensors_set_writer.h"
#include "safetensors/safetensors_view.h"
#include "safetensors/safetensors_writer.h"
#include "zstd/zstd_envelope.h"

typedef struct format_entry {
    const ck_format *reader;
    const ck_writer *writer;    /* saves a model of it in place */
    const ck_target *target;    /* writes another model as it (ckptfs-convert) */
    const ck_view *view;        /* shows another model as its files (-o as=NAME) */
} format_entry;

/* The first is the default (ck_format_default). */
static const format_entry formats[] = {
    {&ck_format_ckpt, &ck_ckpt_writer, &ck_ckpt_target, NULL},
    {&ck_format_onnx, &ck_onnx_writer, NULL, NULL},
    {&ck_format_mindir, &ck_mindir_writer, NULL, NULL},
    {&ck_format_safetensors, &ck_safetensors_writer, &ck_safetensors_target,
     &ck_safetensors_view},
    {&ck_format_safetensors_set, &ck_safetensors_set_writer, &ck_safetensors_set_target, NULL},
    {&ck_format_oneflow, NULL, &ck_oneflow_target, NULL},
    {&ck_format_pytorch, &ck_pytorch_writer, &ck_pytorch_target, NULL},
};

#define N_FORMATS (sizeof formats / sizeof formats[0])

/* Detection tries them in this order; their magic numbers differ. */
static const ck_envelope_kind *const envelopes[] = {
    &ck_envelope_cipher,
    &ck_envelope_zstd,
};

#define N_ENVELOPES (sizeof envelopes / sizeof envelopes[0])

const ck_envelope_kind *ck_envelope_kind_at(size_t i)
{
    return i < N_ENVELOPES ? envelopes[i] : NULL;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

const ck_envelope_kind *ck_envelope_by_extension(const char *path)
{
    for (size_t i = 0; i < N_ENVELOPES; i++)
        if (envelopes[i]->extension != NULL && has_suffix(path, envelopes[i]->extension))
            return envelopes[i];
    return NULL;
}

const ck_envelope_kind *ck_envelope_keyed(void)
{
    for (size_t i = 0; i < N_ENVELOPES; i++)
        if (envelopes[i]->keyed)
            return envelopes[i];
    return NULL;
}

/* Whether path ends in ext, before an envelope's extension: a compressed
 * model is named after what it holds (model.onnx.zst). */
static bool named(const char *path, const char *ext)
{
    size_t n = strlen(path), k = strlen(ext);
    const ck_envelope_kind *e = ck_envelope_by_extension(path);
    if (e != NULL)
        n -= strlen(e->extension);
    return n >= k && memcmp(path + n - k, ext, k) == 0;
}

/* The length of the extension of f that path ends in, or 0. */
static size_t extension_of(const ck_format *f, const char *path)
{
    if (f->extension == NULL)
        return 0;
    if (named(path, f->extension))
        return strlen(f->extension);
    for (const char *const *e = f->also; e != NULL && *e != NULL; e++)
        if (named(path, *e))
            return strlen(*e);
    return 0;
}

const ck_format *ck_format_by_extension(const char *path)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        if (extension_of(formats[i].reader, path) > 0)
            return formats[i].reader;
    return NULL;
}

size_t ck_format_extension_len(const ck_format *f, const char *path)
{
    return extension_of(f, path);
}

const ck_format *ck_format_by_name(const char *name)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(name, formats[i].reader->name) == 0)
            return formats[i].reader;
    return NULL;
}

const ck_format *ck_format_default(void)
{
    return formats[0].reader;
}

static const format_entry *entry_of(const ck_format *f)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        if (formats[i].reader == f)
            return &formats[i];
    return NULL;
}

const ck_view *ck_format_view(const ck_format *f)
{
    const format_entry *e = entry_of(f);
    return e != NULL ? e->view : NULL;
}

const ck_writer *ck_format_writer(const ck_format *f)
{
    const format_entry *e = entry_of(f);
    return e != NULL ? e->writer : NULL;
}

const ck_target *ck_format_target(const ck_format *f)
{
    const format_entry *e = entry_of(f);
    return e != NULL ? e->target : NULL;
}

const ck_format *ck_format_at(size_t i)
{
    return i < N_FORMATS ? formats[i].reader : NULL;
}

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
