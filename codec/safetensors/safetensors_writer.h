/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_writer: encode a tree back into a safetensors file
 * (safetensors_writer.c says how it is laid out).
 */
#ifndef CK_SAFETENSORS_WRITER_H
#define CK_SAFETENSORS_WRITER_H

#include "safetensors_reader.h"
#include "../io/target.h"
#include "../io/writer.h"

/* The writer (writer.h). */
extern const ck_writer ck_safetensors_writer;
/* A safetensors file as ckptfs-convert's OUT (codec/io/target.h). */
extern const ck_target ck_safetensors_target;

/* Write tensors[0..n) as one safetensors file into s (its wrap begun):
 * file's layout kept when its n_orig tensors are all still there as they
 * were (safetensors_writer.c), else the reference writer's; file NULL: a
 * new file.  Errors name m and the tensor. */
int ck_st_encode_file(const ck_model *m, const ck_st_file *file, size_t n_orig,
                      const ck_write_tensor *tensors, size_t n, ck_sink *s);

/* A new safetensors file as the reference writer lays it out (see
 * safetensors_writer.c): its header whole (the 8-byte length, the JSON,
 * its padding), then the tensors' bytes back to back in `order`, tensor i's
 * at header_len + data_off[i].  Memory O(number of tensors), never their
 * bytes: ckptfs-convert writes it, the mount's safetensors view serves it. */
typedef struct ck_st_layout {
    unsigned char *header;
    size_t header_len;
    size_t n;
    size_t *order;              /* file position -> index into the tensors */
    uint64_t *data_off;         /* tensor index -> its offset in the data part */
    uint64_t size;              /* the whole file's */
} ck_st_layout;

/* The layout of tensors[0..n) as a new file, meta (compact JSON, or NULL:
 * none) as its "__metadata__": a type or a name safetensors cannot hold
 * refused, naming the tensor. */
int ck_st_plan_new(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                   const char *meta, ck_st_layout *lay, ck_error *err);

/* The "__metadata__" of a safetensors file made from src's tensors, as
 * compact JSON into *out (malloc'd; NULL: none): a safetensors file's or
 * set's own, exactly (none when it had none); {"format":"pt"} for any
 * other format, as transformers' save_pretrained writes.  ckptfs-convert
 * and the mount's -o as=safetensors view both take it from here, so that
 * they agree.  0, or -1 out of memory. */
int ck_st_metadata_for(const ck_model *src, char **out, ck_error *err);
void ck_st_layout_free(ck_st_layout *lay);

/* jansson's \u escapes with serde_json's (and Python's) small hex digits. */
void ck_st_lower_escapes(char *text);

/* What a safetensors file cannot hold (ck_target's hooks): a set's shards
 * are safetensors files too. */
const char *ck_st_type_refusal(const ck_dtype *dt, char *buf, size_t cap);
const char *ck_st_name_refusal(const char *name, size_t len);

/* Whether two types are one safetensors dtype (ck_writer.same_type). */
bool ck_st_same_type(const ck_dtype *a, const ck_dtype *b);

#endif
