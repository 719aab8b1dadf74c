/* SPDX-License-Identifier: Apache-2.0 */
/*
 * st_view: -o as=safetensors, the mounted model shown as one read-only
 * file, model.safetensors, instead of the tree.
 *
 * Its bytes are those ckptfs-convert writes for the model: the same list
 * of tensors (export/convert_plan.h) laid out by the safetensors writer's
 * own planning (codec/safetensors/safetensors_writer.h, ck_st_plan_new).
 * Only the header is held in memory; a read of the data part is mapped to
 * the tensors it covers, each served as `out` is (fs/tensor_read.h):
 * spliced from the files' extents, or read through ck_model_read where
 * the codec must assemble or decode the bytes.
 */
#ifndef CKPTFS_ST_VIEW_H
#define CKPTFS_ST_VIEW_H

#include "ckptfs.h"

#define CKFS_VIEW_NAME "model.safetensors"

typedef struct st_view st_view;

/* The view of m (in: the model as the user named it, for refusals), or
 * NULL with err: what a safetensors file cannot hold, refused naming the
 * tensor, as ckptfs-convert refuses it. */
st_view *ckfs_st_view_new(const ck_model *m, const char *in, ck_error *err);
void ckfs_st_view_free(st_view *v);
/* The file's size. */
uint64_t ckfs_st_view_size(const st_view *v);
/* An open of the file: another user (allow_other) must be able to read
 * every tensor on disk, as for `out`; else answered with the errno. */
bool ckfs_st_view_may_open(fuse_req_t req, ckfs *fs);
/* Answer a read of [off, off + size) of the file. */
void ckfs_st_view_read(fuse_req_t req, ckfs *fs, size_t size, off_t off);

#endif
