/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_set: a Hugging Face sharded set (model.safetensors.index.json
 * and its shards) as one model (safetensors_set.c says how it is read).
 * Its state is a ck_st_info (safetensors_reader.h) with one file per shard.
 */
#ifndef CK_SAFETENSORS_SET_H
#define CK_SAFETENSORS_SET_H

#include "../format.h"

/* The format (format.h). */
extern const ck_format ck_format_safetensors_set;

#endif
