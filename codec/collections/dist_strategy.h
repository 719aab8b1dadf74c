/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dist_strategy: MindSpore's parallel strategy file (ParallelStrategyMap,
 * node_strategy.proto), read for what a merge of a distributed checkpoint
 * needs: each parameter's layout over the device matrix.
 *
 * The file is small (a few hundred bytes per parameter) and decoded whole
 * by protobuf-c (node_strategy.proto declares every dimension int64,
 * wire-compatible with MindSpore's uint32 and int32 varints and
 * range-checked after), what it may cost unpacked bounded first
 * (dist_strategy.c).  The layout items are sorted by name, a "0-" pipeline
 * prefix stripped.  Everything MindSpore's merge would trip on, or silently
 * get wrong, is refused here with one line naming the file and the
 * parameter; what is read is checked like dist_oracle.py's `parse`
 * (tests/oracle), which follows mindspore/python/mindspore/parallel.
 */
#ifndef CK_DIST_STRATEGY_H
#define CK_DIST_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/ck_error.h"

/* A strategy bigger than this is not one (a 10,000-parameter model's is
 * about 2 MiB). */
#define CK_STRATEGY_MAX_BYTES (256u << 20)

/* One parameter's layout.  tensor_map entry k names device axis
 * dev[n_dev - 1 - k] (MindSpore counts axes from the last); -1: that tensor
 * dimension is not split. */
typedef struct ck_layout {
    const char *name;           /* without a pipeline strategy's "<stage>-" prefix */
    const int64_t *dev;         /* the device matrix, each in [1, 2^31) */
    const int64_t *map;         /* one entry per tensor dimension */
    uint32_t n_dev, n_map;
    int32_t field;              /* != 0: an embedding's field layout */
    bool uneven;                /* a param_split_shape: slices of unequal sizes */
    /* The parallel optimizer's shard of dim 0 (0, 0: none): rank r holds
     * model-parallel slice r % opt_step and, of that slice's dim 0, chunk
     * (r / opt_step) % opt_size.  A size of -1 in the file is resolved. */
    uint32_t opt_step, opt_size;
} ck_layout;

typedef struct ck_strategy {
    ck_layout *layouts;         /* sorted by name */
    size_t n;
    uint64_t devices;           /* the device matrix's size, the same for all */
    void *msg;                  /* the decoded file the layouts point into */
} ck_strategy;

/* Read and check the strategy file at path. */
int ck_strategy_load(const char *path, ck_strategy *s, ck_error *err);
void ck_strategy_free(ck_strategy *s);

/* The layout of the parameter called name (len bytes), or NULL. */
const ck_layout *ck_strategy_find(const ck_strategy *s, const char *name, size_t len);

/* How many slices a layout cuts tensor dimension d into. */
uint64_t ck_layout_split(const ck_layout *l, uint32_t d);

#endif
