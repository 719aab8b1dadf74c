/*
 * The seekable-zstd wrap writer: plaintext is cut into CK_ZSTD_FRAME-byte
 * pieces, each compressed into one independent frame, and a seek table
 * (zstd's contrib/seekable_format, without checksums: every frame carries
 * zstd's own content checksum) ends the file.
 *
 * Memory: the plaintext buffer (2 MiB), one compressed frame (its bound),
 * the compression context with its workers (about 4 MiB at level 3 with
 * 2 workers, 9 MiB with 8; tens of MiB at levels 19 and up) and 8 bytes
 * of seek table per frame.
 */
#include "wrap_writer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "../codec/le_bytes.h"

#include "../codec/zstd_source.h"

#define SEEK_MAX_FRAMES 0x8000000u
#define SEEK_HEADER 8
#define SEEK_ENTRY 8
#define SEEK_FOOTER 9
/* A 2 MiB frame is four 512 KiB jobs, so past four workers some idle;
 * the cap keeps the pool's memory (one compression context per worker)
 * bounded on large machines, and leaves room for a larger frame. */
#define MAX_WORKERS 8
#define JOB_SIZE (512u << 10)

typedef struct zstd_writer {
    struct ck_wrap_writer base;         /* first: the ops see this */
    ZSTD_CCtx *cctx;
    unsigned char *buf;                 /* CK_ZSTD_FRAME bytes of plaintext */
    size_t fill;
    unsigned char *cbuf;                /* one compressed frame */
    size_t ccap;
    /* The seek-table frame as it grows: room for its header, then one
     * entry per frame written; the footer is added at finish. */
    unsigned char *table;
    size_t table_len, table_cap;
    uint32_t frames;
    bool failed, finished;
} zstd_writer;

/* Room for one more seek-table entry (and the footer), made before the
 * frame is written, so that a frame on disk always has its entry. */
static int reserve_entry(zstd_writer *z, ck_error *err)
{
    if (z->frames == SEEK_MAX_FRAMES)
        return ck_fail(err, EFBIG, "%s: offset %llu: more than %u zstd frames, the seekable "
                       "format's limit", z->base.path, (unsigned long long)z->base.out_off,
                       SEEK_MAX_FRAMES);
    if (z->table_cap - z->table_len >= SEEK_ENTRY + SEEK_FOOTER)
        return 0;
    /* At most 8 * 2^27 + 17 bytes (1 GiB): no overflow in the doubling. */
    size_t cap = z->table_cap * 2;
    unsigned char *t = realloc(z->table, cap);
    if (t == NULL)
        return ck_fail(err, ENOMEM, "%s: out of memory for the zstd seek table (%u frames)",
                       z->base.path, z->frames);
    z->table = t;
    z->table_cap = cap;
    return 0;
}

/* One frame of len (<= CK_ZSTD_FRAME) bytes, appended to the file. */
static int write_frame(zstd_writer *z, const void *src, size_t len, ck_error *err)
{
    if (reserve_entry(z, err) < 0)
        return -1;
    size_t r = ZSTD_compress2(z->cctx, z->cbuf, z->ccap, src, len);
    if (ZSTD_isError(r))
        return ck_fail(err, ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? ENOMEM : EIO,
                       "%s: offset %llu: zstd compression of frame %u failed: %s",
                       z->base.path, (unsigned long long)z->base.out_off, z->frames,
                       ZSTD_getErrorName(r));
    if (ck_wrap_pwrite(&z->base, z->cbuf, r, z->base.out_off, err) < 0)
        return -1;
    z->base.out_off += r;
    /* r <= ZSTD_compressBound(CK_ZSTD_FRAME) and len <= CK_ZSTD_FRAME: both fit. */
    ck_put_le32(z->table + z->table_len, (uint32_t)r);
    ck_put_le32(z->table + z->table_len + 4, (uint32_t)len);
    z->table_len += SEEK_ENTRY;
    z->frames++;
    return 0;
}

/* A writer that failed half-way has left the file in no known state. */
static int usable(zstd_writer *z, ck_error *err)
{
    if (z->failed)
        return ck_fail(err, EIO, "%s: offset %llu: an earlier zstd write failed",
                       z->base.path, (unsigned long long)z->base.out_off);
    if (z->finished)
        return ck_fail(err, EINVAL, "%s: offset %llu: write after the zstd seek table",
                       z->base.path, (unsigned long long)z->base.out_off);
    return 0;
}

static int zw_write_some(zstd_writer *z, const unsigned char *p, size_t len, ck_error *err)
{
    while (len > 0) {
        /* Whole frames straight from the caller's buffer: no copy. */
        if (z->fill == 0 && len >= CK_ZSTD_FRAME) {
            if (write_frame(z, p, CK_ZSTD_FRAME, err) < 0)
                return -1;
            p += CK_ZSTD_FRAME;
            len -= CK_ZSTD_FRAME;
            continue;
        }
        size_t k = CK_ZSTD_FRAME - z->fill < len ? CK_ZSTD_FRAME - z->fill : len;
        memcpy(z->buf + z->fill, p, k);
        z->fill += k;
        p += k;
        len -= k;
        if (z->fill == CK_ZSTD_FRAME) {
            if (write_frame(z, z->buf, z->fill, err) < 0)
                return -1;
            z->fill = 0;
        }
    }
    return 0;
}

static int zw_write(ck_wrap_writer *w, const void *data, size_t len, ck_error *err)
{
    zstd_writer *z = (zstd_writer *)w;
    if (usable(z, err) < 0)
        return -1;
    if (zw_write_some(z, data, len, err) < 0) {
        z->failed = true;
        return -1;
    }
    return 0;
}

static int write_table(zstd_writer *z, ck_error *err)
{
    unsigned char *t = z->table;
    size_t len = z->table_len;          /* room for the footer was kept */
    ck_put_le32(t, CK_ZSTD_SEEK_TABLE_MAGIC);
    ck_put_le32(t + 4, (uint32_t)(len - SEEK_HEADER + SEEK_FOOTER));
    ck_put_le32(t + len, z->frames);
    t[len + 4] = 0;                     /* descriptor: no checksums */
    ck_put_le32(t + len + 5, CK_ZSTD_SEEKABLE_MAGIC);
    len += SEEK_FOOTER;
    if (ck_wrap_pwrite(&z->base, t, len, z->base.out_off, err) < 0)
        return -1;
    z->base.out_off += len;
    return 0;
}

static int zw_finish(ck_wrap_writer *w, ck_error *err)
{
    zstd_writer *z = (zstd_writer *)w;
    if (usable(z, err) < 0)
        return -1;
    if ((z->fill > 0 && write_frame(z, z->buf, z->fill, err) < 0) || write_table(z, err) < 0) {
        z->failed = true;
        return -1;
    }
    z->fill = 0;
    z->finished = true;
    return 0;
}

static void zw_destroy(ck_wrap_writer *w)
{
    zstd_writer *z = (zstd_writer *)w;
    ZSTD_freeCCtx(z->cctx);
    free(z->buf);
    free(z->cbuf);
    free(z->table);
    free(z);
}

static const struct ck_wrap_writer_ops zw_ops = {
    .write = zw_write,
    .finish = zw_finish,
    .destroy = zw_destroy,
};

/* Threads for one frame: the CPUs online, at most MAX_WORKERS; none when
 * the library was built without multithreading (it then refuses). */
static void set_workers(ZSTD_CCtx *cctx)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : cpus > MAX_WORKERS ? MAX_WORKERS : (int)cpus;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, n))) {
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, 0);
        return;
    }
    /* The smallest jobs zstd takes, so that one frame keeps every worker
     * busy; each job sees the whole window before it (overlapLog 9), so
     * splitting a frame costs no matches: with the default overlap, a
     * repeat 1 MiB back went unseen and such frames were stored raw. */
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_jobSize, JOB_SIZE);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_overlapLog, 9);
}

static int setup_cctx(ZSTD_CCtx *cctx, int level, const char *path, ck_error *err)
{
    ZSTD_bounds b = ZSTD_cParam_getBounds(ZSTD_c_compressionLevel);
    if (level < b.lowerBound || level > b.upperBound)
        return ck_fail(err, EINVAL, "%s: zstd level %d is outside %d..%d", path, level,
                       b.lowerBound, b.upperBound);
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1)))
        return ck_fail(err, EINVAL, "%s: zstd refuses level %d", path, level);
    set_workers(cctx);
    return 0;
}

ck_wrap_writer *ck_zstd_writer_new(int fd, const char *path, int level, ck_error *err)
{
    zstd_writer *z = calloc(1, sizeof *z);
    if (z == NULL) {
        ck_fail(err, ENOMEM, "%s: out of memory for a zstd writer", path);
        return NULL;
    }
    z->base = (struct ck_wrap_writer){.ops = &zw_ops, .fd = fd, .path = path};
    z->ccap = ZSTD_compressBound(CK_ZSTD_FRAME);
    z->table_cap = 4096;
    z->table_len = SEEK_HEADER;
    z->cctx = ZSTD_createCCtx();
    z->buf = malloc(CK_ZSTD_FRAME);
    z->cbuf = malloc(z->ccap);
    z->table = malloc(z->table_cap);
    if (z->cctx == NULL || z->buf == NULL || z->cbuf == NULL || z->table == NULL) {
        ck_fail(err, ENOMEM, "%s: out of memory for a zstd writer", path);
        zw_destroy(&z->base);
        return NULL;
    }
    if (setup_cctx(z->cctx, level, path, err) < 0) {
        zw_destroy(&z->base);
        return NULL;
    }
    return &z->base;
}
