/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hf_folder: a Hugging Face model folder (what save_pretrained writes:
 * config.json beside the weights) as the one model file it holds, chosen
 * as transformers' from_pretrained chooses it: model.safetensors, else
 * model.safetensors.index.json (a sharded set), else pytorch_model.bin
 * (ckptfs reads no sharded .bin set: pytorch_model.bin.index.json alone
 * makes no model folder).
 * config.json is only looked for, never read.  The folder opens as that
 * file does, writable as it is (collection.h, model_file): ck_open_path
 * and the mount open the file as if it had been given, so every message
 * names FOLDER/FILE.  Probed last (open_path.c), so every other
 * collection keeps its precedence; a folder it does not claim stays a
 * training run's.
 */
#ifndef CK_HF_FOLDER_H
#define CK_HF_FOLDER_H

#include "../collection.h"

/* The name of the model file of the folder path (a static string), or
 * NULL when path is not a folder with config.json and one of them (each a
 * regular file, through symbolic links as the Hub's cache has them). */
const char *ck_hf_folder_file(const char *path);

extern const ck_collection ck_collection_hf;

#endif
