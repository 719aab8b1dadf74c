/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_set_writer: save a Hugging Face sharded set, its changed
 * shards and its index as one (safetensors_set_writer.c says how).
 */
#ifndef CK_SAFETENSORS_SET_WRITER_H
#define CK_SAFETENSORS_SET_WRITER_H

#include "../../export/writer.h"

/* The writer (writer.h). */
extern const ck_writer ck_safetensors_set_writer;

#endif
