/*
 * safetensors_reader: index a safetensors file (safetensors_reader.c says
 * how it is read and what is refused).
 */
#ifndef CK_SAFETENSORS_READER_H
#define CK_SAFETENSORS_READER_H

#include <stdint.h>

#include "ck_error.h"
#include "format.h"

/* The reference implementation's limit on the header's length. */
#define CK_ST_MAX_HEADER 100000000u

/* The shape in the file of a tensor shown flat (the sub-byte dtypes). */
typedef struct ck_st_shape {
    uint32_t id;
    uint32_t ndim;
    const int64_t *dims;        /* in the index's arena */
} ck_st_shape;

/* What the reader keeps of a model (ck_model.state). */
typedef struct ck_st_info {
    uint64_t header_len;        /* N: the data starts at 8 + N */
    char *metadata;             /* "__metadata__" as compact JSON, or NULL */
    ck_st_shape *flat;          /* by id, the tensors shown flat */
    size_t n_flat;
} ck_st_info;

struct ck_model;

/* Index m->sources[0] into m->index and info; the caller finalizes. */
int ck_safetensors_read(struct ck_model *m, ck_st_info *info, ck_error *err);

/* The format (format.h). */
extern const ck_format ck_format_safetensors;

/* What the reader found in m, a safetensors model (NULL: created empty). */
const ck_st_info *ck_st_info_of(const struct ck_model *m);

/* Tensor id's shape as the file has it (a sub-byte tensor's, not the flat
 * one shown): 0, or -1 when id is not one of the file's. */
int ck_st_shape_of(const struct ck_model *m, uint32_t id, const int64_t **dims,
                   uint32_t *ndim);

#endif
