/* SPDX-License-Identifier: Apache-2.0 */
/*
 * verify_cost: the time of a save's read-back check (ck_verify_save) next
 * to the encode it checks, for a one-tensor edit of MODEL (the tensor
 * TENSOR given as new bytes: its own).  Nothing is committed.  A key for
 * an encrypted model comes from CKPTFS_KEY_HEX.  Built and run by
 * bench/bench_verify.sh.
 *
 *   verify_cost MODEL TENSOR REPS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec/core/model.h"
#include "codec/registry.h"
#include "save/encoder.h"
#include "codec/onnx_mindir/onnx_mindir_writer.h"
#include "codec/ckpt/ckpt_writer.h"
#include "save/verify.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: verify_cost MODEL TENSOR REPS\n");
        return 2;
    }
    int reps = atoi(argv[3]);
    ck_error err;
    ck_envelope_args key = {0}; /* CKPTFS_KEY_HEX's, read by the envelopes */
    ck_open_opts o = {.envelope = &key};
    ck_model *m = ck_envelope_args_ready(&key, &err) < 0 ? NULL
                                                        : ck_model_open(argv[1], &o, &err);
    ck_envelope_args_free(&key); /* the model keeps its own key */
    if (m == NULL || reps < 1 || reps > 100) {
        fprintf(stderr, "verify_cost: %s\n", m ? "REPS is 1..100" : err.msg);
        ck_model_close(m);
        return 1;
    }
    const ck_index *ix = &m->index;
    ck_write_tensor *w = calloc(ix->n_live + 1, sizeof *w);
    ck_piece p = {0};
    int found = 0;
    for (size_t i = 0; i < ix->n_live; i++) {
        const ck_tensor *t = &ix->tensors[ix->live[i]];
        w[i] = (ck_write_tensor){.orig_id = ix->live[i], .unchanged = true};
        if (strcmp(t->name, argv[2]) != 0 || t->n_ext != 1)
            continue;
        p = (ck_piece){.src = m->sources[t->ext0.src], .off = t->ext0.off, .len = t->ext0.len};
        w[i] = (ck_write_tensor){.orig_id = ix->live[i], .name = t->name,
                                 .name_len = t->name_len, .dtype = t->dtype, .dims = t->dims,
                                 .ndim = t->ndim, .pieces = &p, .n_pieces = 1};
        found = 1;
    }
    double enc[100], ver[100];
    for (int r = 0; r < reps && found; r++) {
        ck_commit_group g;
        if (ck_group_begin(&g, m->dir, &err) < 0)
            break;
        double t0 = now();
        int rc = ck_writer_of(m)->encode(m, w, ix->n_live, &g, &err);
        double t1 = now();
        if (rc == 0)
            rc = ck_verify_save(m, w, ix->n_live, &g, NULL, NULL, &err);
        double t2 = now();
        ck_group_abort(&g);
        if (rc < 0) {
            fprintf(stderr, "verify_cost: %s\n", err.msg);
            return 1;
        }
        enc[r] = t1 - t0;
        ver[r] = t2 - t1;
    }
    if (!found) {
        fprintf(stderr, "verify_cost: no tensor %s\n", argv[2]);
        return 1;
    }
    qsort(enc, (size_t)reps, sizeof enc[0], cmp);
    qsort(ver, (size_t)reps, sizeof ver[0], cmp);
    printf("encode %.3fs  verify %.4fs  verify/encode %.1f%%\n", enc[reps / 2], ver[reps / 2],
           100 * ver[reps / 2] / enc[reps / 2]);
    free(w);
    ck_model_close(m);
    return 0;
}
