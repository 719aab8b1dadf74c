/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry: the tables of the formats and envelopes ckptfs knows, and a
 * model file opened by what they say (registry.h).  The collections'
 * table is above it (open_path.c).
 */
#define _GNU_SOURCE
#include "registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cipher/cipher_envelope.h"
#include "core/saved_index.h"
#include "ckpt/ckpt_reader.h"
#include "ckpt/ckpt_writer.h"
#include "oneflow/oneflow_dir.h"
#include "oneflow/oneflow_dir_writer.h"
#include "onnx_mindir/onnx_mindir_reader.h"
#include "onnx_mindir/onnx_mindir_template.h"
#include "onnx_mindir/onnx_mindir_writer.h"
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
    const ck_template *tmpl;    /* a model of it filled with a checkpoint's (--into) */
} format_entry;

/* The first is the default (ck_format_default). */
static const format_entry formats[] = {
    {&ck_format_ckpt, &ck_ckpt_writer, &ck_ckpt_target, NULL, NULL},
    {&ck_format_onnx, &ck_onnx_writer, NULL, NULL, &ck_onnx_template},
    {&ck_format_mindir, &ck_mindir_writer, NULL, NULL, &ck_mindir_template},
    {&ck_format_safetensors, &ck_safetensors_writer, &ck_safetensors_target,
     &ck_safetensors_view, NULL},
    {&ck_format_safetensors_set, &ck_safetensors_set_writer, &ck_safetensors_set_target, NULL,
     NULL},
    {&ck_format_oneflow, NULL, &ck_oneflow_target, NULL, NULL},
    {&ck_format_pytorch, &ck_pytorch_writer, &ck_pytorch_target, NULL, NULL},
};

#define N_FORMATS (sizeof formats / sizeof formats[0])

/* Detection tries them in this order; their magic numbers differ.
 * NULL-terminated: the list an open hands down (ck_envelope_opts.kinds). */
static const ck_envelope_kind *const envelopes[] = {
    &ck_envelope_cipher,
    &ck_envelope_zstd,
    NULL,
};

#define N_ENVELOPES (sizeof envelopes / sizeof envelopes[0] - 1)

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

const ck_template *ck_format_template(const ck_format *f)
{
    const format_entry *e = entry_of(f);
    return e != NULL ? e->tmpl : NULL;
}

const ck_format *ck_format_at(size_t i)
{
    return i < N_FORMATS ? formats[i].reader : NULL;
}

/* Kind k's option NAME=VALUE into its slot of a (made when it takes one). */
static int one_option(const ck_envelope_kind *k, const char *name, const char *value,
                      ck_envelope_args *a, ck_error *err)
{
    void *own = (void *)ck_envelope_args_of(a, k);
    bool had = own != NULL;
    int took = k->option(name, value, &own, err);
    if (own == NULL || had)
        return took;
    void **slot = ck_envelope_args_slot(a, k);
    if (slot == NULL) {
        k->free_options(own);
        return ck_fail(err, ENOMEM, "-o %s: more than %d envelopes' options", name,
                       CK_ENVELOPE_MAX);
    }
    *slot = own;
    return took;
}

int ck_envelope_option(const char *name, const char *value, ck_envelope_args *a, ck_error *err)
{
    for (size_t i = 0; i < N_ENVELOPES; i++) {
        int took = envelopes[i]->option != NULL
                       ? one_option(envelopes[i], name, value, a, err) : 0;
        if (took != 0)
            return took;
    }
    return 0;
}

int ck_envelope_args_ready(ck_envelope_args *a, ck_error *err)
{
    for (size_t i = 0; i < N_ENVELOPES; i++) {
        const ck_envelope_kind *k = envelopes[i];
        if (k->ready == NULL)
            continue;
        void *own = (void *)ck_envelope_args_of(a, k);
        bool had = own != NULL;
        int rc = k->ready(&own, err);
        void **slot = own != NULL && !had ? ck_envelope_args_slot(a, k) : NULL;
        if (slot != NULL)
            *slot = own;
        else if (own != NULL && !had) {
            k->free_options(own);
            return ck_fail(err, ENOMEM, "more than %d envelopes' options", CK_ENVELOPE_MAX);
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

int ck_envelope_for_new(const char *path, const ck_envelope_args *a,
                        const ck_envelope_kind **wrap, ck_error *err)
{
    const ck_envelope_kind *by_name = ck_envelope_by_extension(path);
    *wrap = by_name;
    for (size_t i = 0; i < N_ENVELOPES; i++) {
        const ck_envelope_kind *k = envelopes[i];
        int asks = k->new_model != NULL
                       ? k->new_model(ck_envelope_args_of(a, k), by_name, path, err) : 0;
        if (asks < 0)
            return -1;
        if (asks > 0)
            *wrap = k; /* the options, over the name */
    }
    return 0;
}

const ck_writer *ck_writer_of(const ck_model *m)
{
    return ck_format_writer(m->format);
}

ck_model *ck_model_open_at(ck_model_dir *dir, const char *path, const ck_open_opts *opts,
                           ck_error *err)
{
    const ck_format *f = opts && opts->format ? opts->format : ck_format_by_extension(path);
    if (f == NULL)
        f = ck_format_default();
    return ck_model_open_file(dir, path, f, envelopes, &ck_saved_index_hooks, opts, err);
}

ck_model *ck_model_open(const char *path, const ck_open_opts *opts, ck_error *err)
{
    ck_model_dir *dir = ck_dir_open(path, err);
    if (dir == NULL)
        return NULL;
    ck_model *m = ck_model_open_at(dir, path, opts, err);
    ck_dir_unref(dir);
    return m;
}

ck_model *ck_model_empty(ck_model_dir *dir, const char *path, const char *format_name,
                         const ck_open_opts *opts, ck_error *err)
{
    const ck_format *f = format_name ? ck_format_by_name(format_name)
                                     : ck_format_by_extension(path);
    if (f == NULL || !f->creatable) {
        ck_fail(err, ENOTSUP, "%s: cannot create a model of this type (give a .ckpt, "
                ".safetensors, .safetensors.index.json or .pt name, or -o format=ckpt, "
                "safetensors, safetensors-set or pytorch)", path);
        return NULL;
    }
    const ck_envelope_kind *wrap;
    if (ck_envelope_for_new(path, opts ? opts->envelope : NULL, &wrap, err) < 0)
        return NULL;
    /* Its save wraps it as the options, or else its name, ask. */
    return ck_model_new(dir, path, f, wrap, opts, err);
}
