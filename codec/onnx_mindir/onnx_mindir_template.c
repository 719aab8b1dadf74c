/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_mindir_template: the graphs --into fills (onnx_mindir_template.h). */
#include "onnx_mindir_template.h"

#include <errno.h>

/* The first of m's data files, or 0 when it keeps every tensor inline. */
static uint32_t first_data_file(const ck_model *m)
{
    for (uint32_t i = 1; i < m->n_sources; i++)
        if (ck_model_is_data_file(m, i))
            return i;
    return 0;
}

/* ONNX external data is copied into OUT's own data file. */
static int onnx_check(const ck_model *m, const char *path, bool *external, ck_error *err)
{
    (void)path;
    (void)err;
    *external = first_data_file(m) != 0;
    return 0;
}

static int mindir_check(const ck_model *m, const char *path, bool *external, ck_error *err)
{
    uint32_t i = first_data_file(m);
    *external = false;
    if (i != 0)
        return ck_fail(err, ENOTSUP, "%s: keeps tensor data in %s: a split MindIR template is "
                       "not supported (export it with its data inline first)", path,
                       m->sources[i]->path);
    return 0;
}

const ck_template ck_onnx_template = {
    .a_title = "an ONNX",
    .tensor = "initializer",
    .a_tensor = "an initializer",
    .check = onnx_check,
};

const ck_template ck_mindir_template = {
    .a_title = "a MindIR",
    .tensor = "parameter",
    .a_tensor = "a parameter",
    .check = mindir_check,
};
