/* SPDX-License-Identifier: Apache-2.0 */
/*
 * convert_plan: a model's tensors as a conversion writes them, and what the
 * target format cannot hold, refused before anything is written.
 *
 * Every live tensor, in index order, as new bytes whose pieces are the
 * model's extents (a gathered tensor: one piece that reads it through
 * ck_model_read), under its one name (codec/core/tensor_index.h,
 * ck_tensor_shown_name: its own, unless the mount shows another, such as a
 * graph's generated %const or a MindIR parameter without its "<graph>:"
 * prefix); a target that writes directories (a OneFlow snapshot) uses the
 * directory names themselves.  ckptfs-convert hands it to OUT's encoder;
 * the mount's safetensors view (-o as=safetensors) lays out the very same
 * list, so the two give the same bytes.
 *
 * Every refusal is decided from the index before anything is opened for
 * writing: a type OUT cannot hold (str included), a map parameter's part,
 * a shape OUT's reader would refuse, a name OUT cannot hold (NUL in a
 * safetensors name, a OneFlow tensor named pickled_data), names that
 * clash, no tensors at all where OUT cannot be empty (.ckpt, a safetensors
 * set).  Messages of the sink (a failed write, ENOSPC) name the file
 * written, never IN or the --into template.
 */
#ifndef CK_CONVERT_PLAN_H
#define CK_CONVERT_PLAN_H

#include "target.h"
#include "writer.h"

typedef struct ck_convert_plan {
    ck_write_tensor *w;         /* w[i] is m->index.live[i] */
    ck_piece *pieces;
    ck_source **own;            /* tensor sources made for gathered tensors */
    char **names;               /* names made for OUT (ck_tensor_shown_name), else NULL */
    size_t n, n_own;
    uint64_t bytes;             /* the total of the tensors' bytes */
} ck_convert_plan;

/* m's live tensors as new bytes into p (freed by ck_convert_plan_free
 * whatever the outcome).  m must outlive p. */
int ck_convert_plan_build(const ck_model *m, ck_convert_plan *p, ck_error *err);
void ck_convert_plan_free(ck_convert_plan *p);

/* Refuse, naming the first tensor tg cannot hold (in, the model as the
 * user named it): a map parameter's part, a type it has no code for, a
 * shape its reader would refuse, a name it cannot store or that two
 * tensors would share; no tensors where tg needs some. */
int ck_convert_plan_check(const ck_convert_plan *p, const ck_model *m, const ck_target *tg,
                          const char *in, ck_error *err);

#endif
