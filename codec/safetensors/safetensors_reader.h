/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safetensors_reader: index a safetensors file (safetensors_reader.c says
 * how it is read and what is refused).
 */
#ifndef CK_SAFETENSORS_READER_H
#define CK_SAFETENSORS_READER_H

#include <stdint.h>

#include "../core/ck_error.h"
#include "../format.h"

/* The reference implementation's limit on the header's length. */
#define CK_ST_MAX_HEADER 100000000u

/* The shape in the file of a tensor shown flat (the sub-byte dtypes). */
typedef struct ck_st_shape {
    uint32_t id;
    uint32_t ndim;
    const int64_t *dims;        /* in the index's arena */
} ck_st_shape;

/* One safetensors file of a model: the model file, or a shard of a set
 * (safetensors_index.c). */
typedef struct ck_st_file {
    uint32_t src;               /* its source in the model */
    const char *rel;            /* a shard's name as the index gives it; NULL: the model */
    uint64_t header_len;        /* N: the data starts at 8 + N */
    char *metadata;             /* "__metadata__" as compact JSON, or NULL */
    uint32_t first, end;        /* the ids of its tensors, [first, end) */
} ck_st_file;

/* What the reader keeps of a model (ck_model.state). */
typedef struct ck_st_info {
    ck_st_file *files;          /* in id order: one, or a set's shards */
    uint32_t n_files, cap_files;
    ck_st_shape *flat;          /* by id, the tensors shown flat */
    size_t n_flat;
    char *set_metadata;         /* a set's index "metadata" as compact JSON, or NULL */
} ck_st_info;

struct ck_model;

/* Index source src of m, a safetensors file, appending its tensors to
 * m->index and the file to info; rel: a shard's name (NULL for the model
 * file).  The caller finalizes the index. */
int ck_st_read_file(struct ck_model *m, ck_st_info *info, uint32_t src, const char *rel,
                    ck_error *err);
void ck_st_info_free(void *state);

/* text[0..len), found at file offset at, parsed by jansson with duplicate
 * keys refused; NULL with one line naming path, the offset and what (e.g.
 * "the header") when it is not JSON. */
struct json_t;
struct json_t *ck_st_parse_json(const char *text, size_t len, uint64_t at, const char *path,
                                const char *what, ck_error *err);

/* The format (format.h). */
extern const ck_format ck_format_safetensors;

/* What the reader found in m, a safetensors model or set (NULL: created
 * empty). */
const ck_st_info *ck_st_info_of(const struct ck_model *m);
/* The file holding tensor id, or NULL (a tensor that is not the file's). */
const ck_st_file *ck_st_file_of(const struct ck_model *m, uint32_t id);
/* The format's type names (format.h): safetensors dtype names. */
const char *ck_st_type_name(const struct ck_model *m, const ck_tensor *t, const ck_dtype *dt);

/* Tensor id's shape as the file has it (a sub-byte tensor's, not the flat
 * one shown): 0, or -1 when id is not one of the file's. */
int ck_st_shape_of(const struct ck_model *m, uint32_t id, const int64_t **dims,
                   uint32_t *ndim);

#endif
