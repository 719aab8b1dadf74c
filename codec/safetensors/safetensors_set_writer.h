/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_set_writer: save a Hugging Face sharded set, its changed
 * shards and its index as one, or write a new one cut into shards
 * (safetensors_set_writer.c says how).
 */
#ifndef CK_SAFETENSORS_SET_WRITER_H
#define CK_SAFETENSORS_SET_WRITER_H

#include "../io/target.h"
#include "../io/writer.h"

/* The writer (writer.h). */
extern const ck_writer ck_safetensors_set_writer;
/* A new sharded set as ckptfs-convert's OUT (codec/io/target.h). */
extern const ck_target ck_safetensors_set_target;

/* huggingface_hub's default largest shard (MAX_SHARD_SIZE): 5 GB. */
#define CK_ST_SHARD_DEFAULT 5000000000ull

/* A new set of tensors cut into shards as huggingface_hub's
 * split_state_dict_into_shards cuts a state dict, so that a set written by
 * ckptfs-convert, or shown by the mount's safetensors view, has the
 * shards save_pretrained would give the same tensors. */
typedef struct ck_st_shards {
    size_t n;                   /* the shards */
    uint32_t *shard_of;         /* a tensor's shard */
    char **names;               /* a shard's file name: "model-00001-of-00003.safetensors" */
    uint64_t total;             /* the bytes of all tensors: "total_size" */
} ck_st_shards;

/* Cut tensors[0..n) of m into shards of at most max bytes (a larger
 * tensor alone in its own), named after stem ("model"); refused when the
 * set would have more shards than a model may have files. */
int ck_st_shards_cut(const ck_model *m, const char *stem, const ck_write_tensor *tensors,
                     size_t n, uint64_t max, ck_st_shards *s, ck_error *err);
/* The index of the cut set, as transformers' save_pretrained writes it,
 * ended by its newline; the tensors' names checked (ck_st_plan_new or the
 * shards' encoding) first.  NULL with err. */
char *ck_st_shards_index(const ck_model *m, const ck_st_shards *s,
                         const ck_write_tensor *tensors, size_t n, ck_error *err);
void ck_st_shards_free(ck_st_shards *s);

#endif
