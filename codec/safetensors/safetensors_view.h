/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_view: -o as=safetensors, any model shown as the safetensors
 * file ckptfs-convert would write for it, or with -o max_shard_size the
 * Hugging Face sharded set (safetensors_view.c says how).
 */
#ifndef CK_SAFETENSORS_VIEW_H
#define CK_SAFETENSORS_VIEW_H

#include "../view.h"

/* The view (view.h), the safetensors entry's in the registry. */
extern const ck_view ck_safetensors_view;

#endif
