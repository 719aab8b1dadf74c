/* SPDX-License-Identifier: Apache-2.0 */
/*
 * onnx_mindir_reader: the ONNX and MindIR formats: opening a model, and
 * the layout its reading leaves for the encoder (onnx_mindir_reader.h;
 * onnx_mindir_internal.h lists the other files of the reader).
 *
 * One read: the graph walk over the model file (onnx_mindir_graph.c), a
 * legacy split MindIR's variables files, then the decoded typed fields
 * made a source; or, for a model of one file, its layout from a saved
 * index (onnx_mindir_state.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "onnx_mindir_internal.h"
#include "onnx_mindir_reader.h"
#include "../pb/pb_users.h"

static void layout_free(void *state)
{
    ck_pb_layout *pb = state;
    if (pb == NULL)
        return;
    ck_pb_users_free(pb->users);
    free(pb->frames);
    free(pb->tensors);
    free(pb);
}

static int read_model(ck_model *m, bool mindir, ck_error *err)
{
    rd *d = calloc(1, sizeof *d);
    ck_pb_layout *pb = omr_layout_new(mindir);
    if (d == NULL || pb == NULL) {
        free(d);
        free(pb);
        return ck_nomem(err, m->path);
    }
    const ck_pb_schema *sc = mindir ? &ck_pb_mindir_schema : &ck_pb_onnx_schema;
    m->state = pb;
    d->m = m;
    d->s = sc;
    d->pb = pb;
    d->src = m->sources[0];
    d->err = err;
    d->dec_fd = -1;
    ck_name_map_init(&d->locations);
    int rc = omr_walk_model(d);
    if (rc == 0)
        rc = omr_walk_legacy_variables(d);
    if (rc == 0)
        rc = omr_bind_decoded(d);
    if (d->dec_fd >= 0)
        close(d->dec_fd);
    ck_name_map_free(&d->locations);
    free(d);
    return rc;
}

/* ---- the formats ---- */

static int onnx_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    (void)o;
    return read_model(m, false, err);
}

static int mindir_open(ck_model *m, const ck_open_opts *o, ck_error *err)
{
    (void)o;
    return read_model(m, true, err);
}

static const char *pb_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt)
{
    return t != NULL ? t->type_name : ck_pb_type_name(dt->pb_code, ck_pb_layout_of(m)->mindir);
}

/* Every source but the decoded typed fields: external data files, a split
 * MindIR's data and variables files. */
static bool pb_is_data_file(const ck_model *m, uint32_t i)
{
    return i != ck_pb_layout_of(m)->decoded_src;
}

static uint32_t pb_record_source(const ck_model *m, uint32_t id)
{
    return ck_pb_layout_of(m)->tensors[id].pbfile;
}

const ck_format ck_format_onnx = {
    .name = "onnx",
    .title = "ONNX",
    .extension = ".onnx",
    .open = onnx_open,
    .free_state = layout_free,
    .type_name = pb_type_name,
    .may_remove = ck_pb_may_remove,
    .is_data_file = pb_is_data_file,
    .record_source = pb_record_source,
    .save_state = omr_save_state,
    .load_state = omr_load_state,
    .check_state = omr_check_state,
};

const ck_format ck_format_mindir = {
    .name = "mindir",
    .title = "MindIR",
    .extension = ".mindir",
    .encryptable = true,
    .data_files_encrypted = true,
    .open = mindir_open,
    .free_state = layout_free,
    .type_name = pb_type_name,
    .may_remove = ck_pb_may_remove,
    .is_data_file = pb_is_data_file,
    .record_source = pb_record_source,
    .save_state = omr_save_state,
    .load_state = omr_load_state,
    .check_state = omr_check_state,
};
