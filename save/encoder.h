/* SPDX-License-Identifier: Apache-2.0 */
/*
 * encoder: the one entry point that saves a model in its own format: what
 * is refused before a byte is written, the format's writer, then the
 * read-back check (verify.h).  What the writers take and what a writer is
 * are in writer.h, which this includes for its callers.
 */
#ifndef CK_ENCODER_H
#define CK_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "../codec/core/model.h"
#include "../codec/io/commit_group.h"
#include "../codec/io/writer.h"

/* Whether m can be saved: 0, or -1 with the reason, naming m, in err (its
 * format has no writer, or its envelope is one ckptfs only reads). */
int ck_model_may_save(const ck_model *m, ck_error *err);

/* Encode the tree in m's format into the group's first file, adding the
 * data files that change (see ckpt_writer.h and onnx_mindir_writer.h),
 * then read the new files back and check them against the tree
 * (verify.h).  Errors name the tensor. */
int ck_encode(const ck_model *m, const ck_write_tensor *tensors, size_t n,
              ck_commit_group *g, ck_error *err);
/* The same, keeping the new files as read back (opened with the options
 * as) in *saved: what a mount switches to once they are committed
 * (ck_verify_save). */
int ck_encode_keep(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                   ck_commit_group *g, const ck_open_opts *as, ck_model **saved,
                   ck_error *err);

/* Remove the temporary files of a save interrupted before its commit
 * point: beside the model, each of its data files and the data file a
 * save of its format may add; those of the model's owner only. */
void ck_encode_cleanup(const ck_model *m);

#endif
