/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chunk_pass: one pass over a tensor's bytes in chunks by several threads,
 * shared by ckptfs-stat and ckptfs-diff so that both read a tensor the same
 * way: chunk k goes to whichever thread takes it next, each thread owns its
 * scratch (its read buffers, its partial counts), and memory stays at a
 * chunk or two per thread whatever the tensor's size.
 *
 * The caller's per-chunk function does the reading (ck_chunk_read) and
 * keeps a result per chunk when its results must be merged in order (so
 * that the numbers do not depend on the number of threads).
 */
#ifndef CK_CHUNK_PASS_H
#define CK_CHUNK_PASS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../codec/core/ck_error.h"
#include "../codec/core/model.h"

/* More threads than this would only cost memory (a chunk each). */
#define CK_CHUNK_THREADS_MAX 256
/* Partial results kept for one tensor, at most: past that its chunks grow
 * (ck_chunk_size), so that memory stays bounded whatever a caller asks. */
#define CK_CHUNK_PARTS_MAX (1u << 18)

typedef struct ck_chunk_pass {
    const char *path;       /* the model, named in an out-of-memory message */
    uint64_t n_chunks;
    unsigned threads;
    void *ctx;
    /* A thread's scratch, or NULL when out of memory. */
    void *(*scratch_new)(void *ctx);
    /* Chunk k with that scratch: 0, or -1 with err. */
    int (*chunk)(void *ctx, void *scratch, uint64_t k, ck_error *err);
    /* The thread is done: called under the pass's lock (fold its partial
     * results into the caller's, say), then frees scratch. */
    void (*scratch_done)(void *ctx, void *scratch);
} ck_chunk_pass;

/* -j N and --chunk=SIZE, as the tools take them. */
typedef struct ck_chunk_opts {
    unsigned threads;       /* default: the online CPUs */
    size_t chunk;           /* default 4 MiB; a multiple of 8: whole elements of every type */
} ck_chunk_opts;

ck_chunk_opts ck_chunk_opts_default(void);
/* Whether argv[*i] is -j N (-jN) or --chunk=SIZE: 1 when it is and was
 * taken (*i moved past a separate value), 0 when it is not, -1 when its
 * value is unusable. */
int ck_chunk_opt_arg(ck_chunk_opts *o, int argc, char **argv, int *i);

/* The chunk size for a tensor of nbytes when want bytes are asked for:
 * want, or larger so that there are at most CK_CHUNK_PARTS_MAX chunks; a
 * multiple of 8 (whole elements of every type) when want is. */
size_t ck_chunk_size(uint64_t nbytes, size_t want);

/* Run the pass with up to p->threads threads (none but the caller's for a
 * single chunk).  0, or -1 with the first error any thread met. */
int ck_chunk_run(const ck_chunk_pass *p, ck_error *err);

/* Read chunk k of t (chunk bytes a chunk, the last one shorter) into buf:
 * its length, or -1 with err (a short read named by its offset). */
long ck_chunk_read(const ck_model *m, const ck_tensor *t, void *buf, size_t chunk, uint64_t k,
                   ck_error *err);

#endif
