/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of strided gathers (a PyTorch view, tensor_index.h's
 * ck_gather with step): ck_model_read against the bytes computed here from
 * the storage file's known content, through each of its three ways of
 * reading: one span (runs close together), a window dealt out (runs far
 * apart, the span worth reading), a read per run (the span not worth it).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../codec/core/model.h"
#include "../../codec/pytorch/pt_reader.h"
#include "unit.h"

#define STORAGE (32u << 20)

static unsigned char byte_at(uint64_t pos)
{
    return (unsigned char)((pos * 2654435761u) >> 13);
}

static int write_storage(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    unsigned char *buf = malloc(1u << 20);
    int rc = fd < 0 || buf == NULL ? -1 : 0;
    for (uint64_t at = 0; rc == 0 && at < STORAGE; at += 1u << 20) {
        for (uint64_t i = 0; i < 1u << 20; i++)
            buf[i] = byte_at(at + i);
        rc = pwrite(fd, buf, 1u << 20, (off_t)at) == 1 << 20 ? 0 : -1;
    }
    free(buf);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* A view of the storage: ndim outer dims (full, step in bytes), runs of run bytes. */
typedef struct view {
    uint32_t ndim;
    uint64_t full[2], step[2], run;
} view;

static uint64_t view_bytes(const view *v)
{
    uint64_t n = v->run;
    for (uint32_t d = 0; d < v->ndim; d++)
        n *= v->full[d];
    return n;
}

/* Byte j of the view, row-major. */
static unsigned char expected(const view *v, uint64_t j)
{
    uint64_t q = j / v->run, pos = j % v->run;
    for (uint32_t d = v->ndim; d-- > 0;) {
        pos += q % v->full[d] * v->step[d];
        q /= v->full[d];
    }
    return byte_at(pos);
}

static ck_tensor *add_view(ck_model *m, const view *v, const char *name)
{
    long id = ck_index_add(&m->index);
    ck_gather *g = ck_arena_alloc(&m->index.arena, sizeof *g);
    uint64_t *full = ck_arena_alloc(&m->index.arena, sizeof v->full);
    uint64_t *step = ck_arena_alloc(&m->index.arena, sizeof v->step);
    if (id < 0 || g == NULL || full == NULL || step == NULL)
        return NULL;
    memcpy(full, v->full, sizeof v->full);
    memcpy(step, v->step, sizeof v->step);
    *g = (ck_gather){.ndim = v->ndim, .run = v->run, .full = full, .step = step};
    ck_tensor *t = &m->index.tensors[id];
    t->name = name;
    t->name_len = (uint32_t)strlen(name);
    t->dtype = ck_dtype_by_name("UInt8", 5);
    t->nbytes = view_bytes(v);
    t->ext0 = (ck_extent){.src = 0, .off = 0, .len = STORAGE};
    t->n_ext = 1;
    t->gather = g;
    return t;
}

/* Ranges of t read with ck_model_read, each byte against expected(). */
static int check_reads(ck_model *m, const ck_tensor *t, const view *v)
{
    static const uint64_t ranges[][2] = {{0, 16384}, {6, 10001}, {131072, 131072}, {1, 3},
                                         {0, 1u << 20}};
    unsigned char *buf = malloc(1u << 20);
    int bad = buf == NULL;
    for (size_t r = 0; !bad && r < sizeof ranges / sizeof *ranges; r++) {
        uint64_t off = ranges[r][0], size = ranges[r][1];
        if (off >= t->nbytes)
            continue;
        if (size > t->nbytes - off)
            size = t->nbytes - off;
        ck_error err;
        long n = ck_model_read(m, t, buf, size, off, &err);
        bad = n != (long)size;
        for (uint64_t j = 0; !bad && j < size; j++)
            bad = buf[j] != expected(v, off + j);
    }
    free(buf);
    return bad;
}

void test_gather(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/storage.bin", tmpdir);
    if (write_storage(path) < 0) {
        check(0, "gather: writing the storage file: %s", strerror(errno));
        return;
    }
    ck_error err;
    ck_model_dir *dir = ck_dir_open(path, &err);
    ck_model *m = dir ? ck_model_assembled(dir, path, &ck_format_pytorch, &err) : NULL;
    ck_source *src = m ? ck_source_open_file(path, &err) : NULL;
    if (dir != NULL)
        ck_dir_unref(dir);
    if (src == NULL || ck_model_add_source(m, src, &err) < 0) {
        check(0, "gather: the model: %s", err.msg);
        ck_model_close(m);
        return;
    }
    static const struct {
        const char *what;
        view v;
    } cases[] = {
        /* a transpose of a small matrix: one span */
        {"one span", {2, {64, 128}, {4, 2048}, 4}},
        /* a column every 512 bytes: 2 MiB apart per 16 KiB read, a window */
        {"a window", {1, {65536}, {512}, 4}},
        /* a column every 8 KiB: 32 MiB per 16 KiB read, a read per run */
        {"a read per run", {1, {4096}, {8192}, 4}},
        /* runs of 3 bytes, rows of a wider matrix: partial runs at the edges */
        {"rows of a wider matrix", {2, {300, 5}, {40000, 7}, 3}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ck_tensor *t = add_view(m, &cases[i].v, cases[i].what);
        check(t != NULL && check_reads(m, t, &cases[i].v) == 0,
              "gather: %s: every range read is the view's bytes, row-major", cases[i].what);
    }
    ck_model_close(m);
    unlink(path);
}
