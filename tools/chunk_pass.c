/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chunk_pass: a tensor's chunks over threads (chunk_pass.h), the loop
 * ckptfs-stat and ckptfs-diff share.
 */
#include "chunk_pass.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "cli_open.h"

typedef struct run {
    const ck_chunk_pass *p;
    atomic_uint_fast64_t next;
    pthread_mutex_t mu;
    bool failed;            /* under mu: the first error is kept */
    ck_error err;
} run;

static void fail_run(run *r, const ck_error *err)
{
    pthread_mutex_lock(&r->mu);
    if (!r->failed) {
        r->failed = true;
        r->err = *err;
    }
    pthread_mutex_unlock(&r->mu);
}

static void *worker(void *arg)
{
    run *r = arg;
    const ck_chunk_pass *p = r->p;
    ck_error err = {0};
    void *scratch = p->scratch_new(p->ctx);
    if (scratch == NULL) {
        ck_nomem(&err, p->path);
        fail_run(r, &err);
        return NULL;
    }
    for (;;) {
        uint64_t k = atomic_fetch_add(&r->next, 1);
        if (k >= p->n_chunks)
            break;
        pthread_mutex_lock(&r->mu);
        bool stop = r->failed;
        pthread_mutex_unlock(&r->mu);
        if (stop)
            break;
        if (p->chunk(p->ctx, scratch, k, &err) < 0) {
            fail_run(r, &err);
            break;
        }
    }
    pthread_mutex_lock(&r->mu);
    p->scratch_done(p->ctx, scratch);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

size_t ck_chunk_size(uint64_t nbytes, size_t want)
{
    uint64_t least = (nbytes / CK_CHUNK_PARTS_MAX + 8) & ~(uint64_t)7; /* whole elements */
    return least > want ? (size_t)least : want;
}

int ck_chunk_run(const ck_chunk_pass *p, ck_error *err)
{
    run r = {.p = p};
    atomic_init(&r.next, 0);
    pthread_mutex_init(&r.mu, NULL);
    unsigned threads = p->threads > CK_CHUNK_THREADS_MAX ? CK_CHUNK_THREADS_MAX : p->threads;
    uint64_t n = threads < p->n_chunks ? threads : p->n_chunks;
    pthread_t tid[CK_CHUNK_THREADS_MAX];
    uint64_t started = 0;
    for (; n > 1 && started < n; started++)
        if (pthread_create(&tid[started], NULL, worker, &r) != 0)
            break; /* the threads that did start do the work */
    if (started == 0)
        worker(&r);
    for (uint64_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&r.mu);
    if (r.failed) {
        *err = r.err;
        return -1;
    }
    return 0;
}

long ck_chunk_read(const ck_model *m, const ck_tensor *t, void *buf, size_t chunk, uint64_t k,
                   ck_error *err)
{
    uint64_t off = k * chunk, left = t->nbytes - off;
    size_t len = left < chunk ? (size_t)left : chunk;
    long got = ck_model_read(m, t, buf, len, off, err);
    if (got == (long)len)
        return got;
    if (got >= 0)
        ck_fail(err, EIO, "%s: short read at offset %" PRIu64, m->path, off + (uint64_t)got);
    return -1;
}

ck_chunk_opts ck_chunk_opts_default(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return (ck_chunk_opts){
        .threads = cpus < 1 ? 1 : cpus > CK_CHUNK_THREADS_MAX ? CK_CHUNK_THREADS_MAX
                                                              : (unsigned)cpus,
        .chunk = 4u << 20};
}

int ck_chunk_opt_arg(ck_chunk_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (strncmp(a, "-j", 2) == 0) {
        const char *v = a[2] ? a + 2 : *i + 1 < argc ? argv[++*i] : "";
        return ck_cli_uint(v, 1, CK_CHUNK_THREADS_MAX, &o->threads) < 0 ? -1 : 1;
    }
    if (strncmp(a, "--chunk=", 8) != 0)
        return 0;
    /* Whole elements of every type; small sizes let tests cut small
     * tensors into many chunks. */
    if (ck_parse_size(a + 8, &o->chunk) < 0 || o->chunk < 8 || o->chunk > (1u << 30))
        return -1;
    o->chunk &= ~(size_t)7;
    return 1;
}
