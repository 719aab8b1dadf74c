/* SPDX-License-Identifier: Apache-2.0 */
/*
 * st_view: -o as=safetensors, the mounted model shown as read-only
 * safetensors files instead of the tree: one, model.safetensors, or with
 * -o max_shard_size a Hugging Face sharded set when the model needs more
 * than one shard (model.safetensors.index.json and
 * model-00001-of-0000N.safetensors...), as save_pretrained names them.
 *
 * Their bytes are those ckptfs-convert writes for the model (to
 * model.safetensors, or to model.safetensors.index.json with the same
 * -o max_shard_size): the same list of tensors (export/convert_plan.h),
 * cut into shards by the set writer's rule and laid out by the
 * safetensors writer's own planning (codec/safetensors/).  Only the
 * headers and the index are held in memory; a read of a file's data part
 * is mapped to the tensors it covers, each served as `out` is
 * (fs/tensor_read.h): spliced from the files' extents, or read through
 * ck_model_read where the codec must assemble or decode the bytes.
 */
#ifndef CKPTFS_ST_VIEW_H
#define CKPTFS_ST_VIEW_H

#include "ckptfs.h"

typedef struct st_view st_view;

/* The view of m (in: the model as the user named it, for refusals), cut
 * into shards of at most max_shard bytes (0: one file), or NULL with err:
 * what a safetensors file cannot hold, refused naming the tensor, as
 * ckptfs-convert refuses it. */
st_view *ckfs_st_view_new(const ck_model *m, const char *in, uint64_t max_shard,
                          ck_error *err);
void ckfs_st_view_free(st_view *v);

/* The view's files, at the mount's root: their count, and file i's name
 * and size; the file of a name, or -1. */
size_t ckfs_st_view_count(const st_view *v);
const char *ckfs_st_view_name(const st_view *v, size_t i);
uint64_t ckfs_st_view_size(const st_view *v, size_t i);
long ckfs_st_view_find(const st_view *v, const char *name);

/* An open of file i: another user (allow_other) must be able to read
 * every tensor it shows on disk, as for `out` (the index: every tensor,
 * whose names it lists); else answered with the errno. */
bool ckfs_st_view_may_open(fuse_req_t req, ckfs *fs, size_t i);
/* Answer a read of [off, off + size) of file i. */
void ckfs_st_view_read(fuse_req_t req, ckfs *fs, size_t i, size_t size, off_t off);

#endif
