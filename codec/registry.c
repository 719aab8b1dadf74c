/* SPDX-License-Identifier: Apache-2.0 */
/*
 * format: the table of the formats ckptfs reads (format.h).
 */
#include "format.h"

#include <string.h>

#include "ckpt/ckpt_reader.h"
#include "onnx_mindir/onnx_mindir_reader.h"
#include "safetensors/safetensors_reader.h"
#include "safetensors/safetensors_set.h"

/* The first is the default (ck_format_default). */
static const ck_format *const formats[] = {
    &ck_format_ckpt,
    &ck_format_onnx,
    &ck_format_mindir,
    &ck_format_safetensors,
    &ck_format_safetensors_set,
};

#define N_FORMATS (sizeof formats / sizeof formats[0])

/* Whether path ends in ext, before a ".zst": a compressed model is named
 * after what it holds (model.onnx.zst). */
static bool named(const char *path, const char *ext)
{
    size_t n = strlen(path), k = strlen(ext);
    if (n >= 4 && strcmp(path + n - 4, ".zst") == 0)
        n -= 4;
    return n >= k && memcmp(path + n - k, ext, k) == 0;
}

const ck_format *ck_format_by_extension(const char *path)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        if (named(path, formats[i]->extension))
            return formats[i];
    return NULL;
}

const ck_format *ck_format_by_name(const char *name)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        if (strcmp(name, formats[i]->name) == 0)
            return formats[i];
    return NULL;
}

const ck_format *ck_format_default(void)
{
    return formats[0];
}
