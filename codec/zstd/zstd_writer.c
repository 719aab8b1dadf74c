/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The seekable-zstd wrap writer: the plaintext is cut into frames of at
 * most CK_ZSTD_FRAME bytes, each compressed independently, and a seek
 * table (zstd's contrib/seekable_format) ends the file.  Every frame
 * carries zstd's own content checksum; the table has checksums too when
 * the model's file had them.  Frames are compressed with zstd's
 * multithreaded API (ZSTD_c_nbWorkers; frames under 512 KiB in the calling
 * thread).
 *
 * Two things decide where frames are cut besides their size:
 *
 * - Copies (ck_sink_copy: bytes of a source named, not written) are kept
 *   as a pending run of (source, offset, length) until something else
 *   comes.  When the source is seekable zstd, each of its frames that the
 *   run covers whole is copied as it is, compressed bytes and seek-table
 *   entry, with a frame cut before and after it; only the bytes of the run
 *   outside such frames are read (decompressed) and compressed again.  So
 *   a save re-compresses just the frames an edit touched, wherever the
 *   unchanged bytes land in the new file (a deleted tensor shifts them; a
 *   frame does not care where it sits).  Runs that continue one another
 *   in the source are one run, so a frame may span the copies of two
 *   neighbouring records.
 * - Payloads (ck_sink_payload: a tensor's content, which readers skip by
 *   its length) of at least CK_ZSTD_PAYLOAD_CUT bytes start a frame and
 *   are followed by a cut.  The record headers between large payloads
 *   then sit in small frames of their own, and a mount, which reads only
 *   headers, decompresses those and not the payloads (zstd_source.c's
 *   read_some stops a reader's window at a frame's end).  Such a payload
 *   is then cut every CK_ZSTD_FRAME (2 MiB) from its start.
 *
 * The interface is the sink's copy: no list of unchanged ranges is built
 * and the encoders know nothing of frames (a cipher writer has no copy, so
 * its copies are read).  A copied frame is not decompressed: damage in it
 * is carried to the new file as cp would, instead of failing the save (the
 * read-back still reads every changed tensor and every header).  Each
 * copied run first checks that the source file's size and mtime are still
 * those it was opened with (ck_source_check_fd).  When the new table has
 * checksums and a source's frames have none, those frames are compressed
 * again rather than decompressed to compute one.  A CRC trailer (.ckpt of
 * MindSpore 2.3+) needs every plaintext byte: copied ranges are then also
 * read for the CRC, but still copied.  An unchanged tree copies every
 * frame and the same table: the file comes back byte for byte
 * (ckptfs-reencode without --all).
 *
 * Memory: the plaintext buffer (2 MiB), one compressed frame (its bound),
 * the compression context with its workers (about 4 MiB at level 3 with
 * 2 workers, 9 MiB with 8; tens of MiB at levels 19 and up), 12 bytes
 * of seek table per frame, and the output's two 4 MiB buffers with the
 * thread that writes them (direct_out.h).
 */
#include "zstd_writer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "../core/le_bytes.h"

#include "zstd_source.h"
#include "../io/direct_out.h"

#define SEEK_MAX_FRAMES 0x8000000u
#define SEEK_HEADER 8
#define SEEK_ENTRY 12                   /* as kept here; 8 on disk without checksums */
#define SEEK_FOOTER 9
#define SEEK_CHECKSUM_FLAG 0x80u
#define NO_CUT UINT64_MAX
/* A 2 MiB frame is four 512 KiB jobs, so past four workers some idle;
 * the cap keeps the pool's memory (one compression context per worker)
 * bounded on large machines, and leaves room for a larger frame. */
#define MAX_WORKERS 8
#define JOB_SIZE (512u << 10)

typedef struct zstd_writer {
    struct ck_wrap_writer base;         /* first: the ops see this */
    ZSTD_CCtx *cctx;
    unsigned char *buf;                 /* the frame being gathered: fill bytes */
    size_t fill;
    unsigned char *cbuf;                /* one compressed frame */
    size_t ccap;
    ck_direct_out *out;                 /* the file's bytes go here */
    /* The seek-table frame as it grows: room for its header, then one
     * SEEK_ENTRY-byte entry per frame written; the footer is added at
     * finish. */
    unsigned char *table;
    size_t table_len, table_cap;
    uint32_t frames;
    bool sums;                          /* the table carries checksums */
    uint64_t plain;                     /* plaintext placed: in frames written, and fill */
    uint64_t cut;                       /* a frame ends at this plaintext offset, or NO_CUT */
    /* Copied bytes not placed yet: [run_off, run_off + run_len) of run_src. */
    ck_source *run_src;
    uint64_t run_off, run_len;
    bool failed, finished;
} zstd_writer;

/* Room for count more seek-table entries (and the footer), made before
 * their frames are written, so that a frame on disk always has its entry. */
static int reserve_entries(zstd_writer *z, uint32_t count, ck_error *err)
{
    if (count > SEEK_MAX_FRAMES - z->frames)
        return ck_fail(err, EFBIG, "%s: offset %llu: more than %u zstd frames, the seekable "
                       "format's limit", z->base.path, (unsigned long long)z->base.out_off,
                       SEEK_MAX_FRAMES);
    /* At most 12 * 2^27 + 17 bytes (1.5 GiB): no overflow below. */
    size_t need = z->table_len + (size_t)count * SEEK_ENTRY + SEEK_FOOTER, cap = z->table_cap;
    if (need <= cap)
        return 0;
    while (cap < need)
        cap *= 2;
    unsigned char *t = realloc(z->table, cap);
    if (t == NULL)
        return ck_fail(err, ENOMEM, "%s: out of memory for the zstd seek table (%u frames)",
                       z->base.path, z->frames);
    z->table = t;
    z->table_cap = cap;
    return 0;
}

/* The entry of a frame just written (room was reserved). */
static void add_entry(zstd_writer *z, uint32_t csize, uint32_t dsize, uint32_t sum)
{
    ck_put_le32(z->table + z->table_len, csize);
    ck_put_le32(z->table + z->table_len + 4, dsize);
    ck_put_le32(z->table + z->table_len + 8, sum);
    z->table_len += SEEK_ENTRY;
    z->frames++;
}

/* Bytes of the new file, in order: through the direct stream, which
 * keeps base.out_off (the offset messages name) with it. */
static int emit(zstd_writer *z, const void *p, size_t len, ck_error *err)
{
    if (ck_direct_out_write(z->out, p, len, err) < 0)
        return -1;
    z->base.out_off = ck_direct_out_len(z->out);
    return 0;
}

/* One frame of len (<= CK_ZSTD_FRAME) bytes, compressed and appended. */
static int compress_frame(zstd_writer *z, const void *src, size_t len, ck_error *err)
{
    if (reserve_entries(z, 1, err) < 0)
        return -1;
    size_t r = ZSTD_compress2(z->cctx, z->cbuf, z->ccap, src, len);
    if (ZSTD_isError(r))
        return ck_fail(err, ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? ENOMEM : EIO,
                       "%s: offset %llu: zstd compression of frame %u failed: %s",
                       z->base.path, (unsigned long long)z->base.out_off, z->frames,
                       ZSTD_getErrorName(r));
    if (emit(z, z->cbuf, r, err) < 0)
        return -1;
    /* r <= ZSTD_compressBound(CK_ZSTD_FRAME) and len <= CK_ZSTD_FRAME: both fit. */
    add_entry(z, (uint32_t)r, (uint32_t)len, z->sums ? ck_zstd_checksum(src, len) : 0);
    return 0;
}

/* End the frame being gathered, if it holds anything. */
static int end_frame(zstd_writer *z, ck_error *err)
{
    if (z->fill == 0)
        return 0;
    if (compress_frame(z, z->buf, z->fill, err) < 0)
        return -1;
    z->fill = 0;
    return 0;
}

/* Before gathering more: end the frame at a cut that was reached, then
 * how many bytes the frame takes before it is full or reaches the next
 * cut (at least 1). */
static int frame_room(zstd_writer *z, size_t *room, ck_error *err)
{
    if (z->cut == z->plain) {
        z->cut = NO_CUT;
        if (end_frame(z, err) < 0)
            return -1;
    }
    *room = CK_ZSTD_FRAME - z->fill;
    if (z->cut != NO_CUT && z->cut - z->plain < *room)
        *room = (size_t)(z->cut - z->plain);
    return 0;
}

static int gather_mem(zstd_writer *z, const unsigned char *p, size_t len, ck_error *err)
{
    while (len > 0) {
        size_t room;
        if (frame_room(z, &room, err) < 0)
            return -1;
        /* Whole frames straight from the caller's buffer: no copy. */
        if (z->fill == 0 && room == CK_ZSTD_FRAME && len >= CK_ZSTD_FRAME) {
            if (compress_frame(z, p, CK_ZSTD_FRAME, err) < 0)
                return -1;
        } else {
            room = room < len ? room : len;
            memcpy(z->buf + z->fill, p, room);
            z->fill += room;
            if (z->fill == CK_ZSTD_FRAME && end_frame(z, err) < 0)
                return -1;
        }
        p += room;
        len -= room;
        z->plain += room;
    }
    return 0;
}

/* Bytes [off, off + len) of src, read (decompressed, for a zstd source)
 * into the frames being gathered. */
static int gather_src(zstd_writer *z, ck_source *src, uint64_t off, uint64_t len,
                      ck_error *err)
{
    while (len > 0) {
        size_t room;
        if (frame_room(z, &room, err) < 0)
            return -1;
        if (room > len)
            room = (size_t)len;
        if (ck_source_read(src, z->buf + z->fill, room, off, err) < 0)
            return -1;
        z->fill += room;
        if (z->fill == CK_ZSTD_FRAME && end_frame(z, err) < 0)
            return -1;
        off += room;
        len -= room;
        z->plain += room;
    }
    return 0;
}

/* The compressed bytes [c_off, c_off + len) of file appended as they are.
 * They go past the page cache (direct_out.h says why): a one-tensor save
 * of a 1 GiB model is this copy of about 1 GB, which nothing reads back
 * but the frames holding record headers. */
static int copy_bytes(zstd_writer *z, ck_source *file, uint64_t c_off, uint64_t len,
                      ck_error *err)
{
    if (ck_direct_out_copy(z->out, file, c_off, len, err) < 0)
        return -1;
    z->base.out_off = ck_direct_out_len(z->out);
    return 0;
}

/* Frames [j, k) of f, copied as they are. */
static int copy_frames(zstd_writer *z, const ck_zstd_frames *f, uint32_t j, uint32_t k,
                       ck_error *err)
{
    /* The frames were indexed from the file as it was at mount; one that
     * was cut or rewritten since is not copied blind. */
    if (ck_source_check_fd(f->file, f->idx[k].c_off, err) < 0)
        return -1;
    if (reserve_entries(z, k - j, err) < 0)
        return -1;
    if (copy_bytes(z, f->file, f->idx[j].c_off, f->idx[k].c_off - f->idx[j].c_off, err) < 0)
        return -1;
    /* Each size was a 32-bit seek-table entry of the source. */
    for (uint32_t i = j; i < k; i++)
        add_entry(z, (uint32_t)(f->idx[i + 1].c_off - f->idx[i].c_off),
                  (uint32_t)(f->idx[i + 1].d_off - f->idx[i].d_off),
                  f->sums != NULL ? f->sums[i] : 0);
    z->plain += f->idx[k].d_off - f->idx[j].d_off;
    /* A cut inside the copied frames is passed: they end a frame anyway. */
    if (z->cut != NO_CUT && z->cut <= z->plain)
        z->cut = NO_CUT;
    return 0;
}

/* The first frame of f starting at or after plaintext offset off. */
static uint32_t first_frame_from(const ck_zstd_frames *f, uint64_t off)
{
    uint32_t lo = 0, hi = f->n;         /* the answer is in [lo, hi] */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (f->idx[mid].d_off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Place the pending run: frames of its source that it covers whole are
 * copied, the bytes around them gathered into new frames. */
static int place_run(zstd_writer *z, ck_error *err)
{
    ck_source *src = z->run_src;
    uint64_t pos = z->run_off, end = z->run_off + z->run_len;
    ck_zstd_frames f;
    z->run_len = 0;
    z->run_src = NULL;
    if (pos == end)
        return 0;
    /* Frames without a checksum cannot join a table that has them
     * (computing one means decompressing): they are compressed again. */
    if (!ck_zstd_frames_of(src, &f) || (z->sums && f.sums == NULL))
        return gather_src(z, src, pos, end - pos, err);
    uint32_t j = first_frame_from(&f, pos);
    while (j < f.n && f.idx[j].d_off < end && f.idx[j + 1].d_off <= end) {
        uint32_t k = j + 1;
        while (k < f.n && f.idx[k].d_off < end && f.idx[k + 1].d_off <= end)
            k++;
        if (f.idx[j].d_off > pos && gather_src(z, src, pos, f.idx[j].d_off - pos, err) < 0)
            return -1;
        if (end_frame(z, err) < 0 || copy_frames(z, &f, j, k, err) < 0)
            return -1;
        pos = f.idx[k].d_off;
        j = k;
    }
    return pos < end ? gather_src(z, src, pos, end - pos, err) : 0;
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

static int failed(zstd_writer *z)
{
    z->failed = true;
    return -1;
}

static int zw_write(ck_wrap_writer *w, const void *data, size_t len, ck_error *err)
{
    zstd_writer *z = (zstd_writer *)w;
    if (usable(z, err) < 0)
        return -1;
    if (place_run(z, err) < 0 || gather_mem(z, data, len, err) < 0)
        return failed(z);
    return 0;
}

static int zw_copy(ck_wrap_writer *w, ck_source *src, uint64_t off, uint64_t len,
                   ck_error *err)
{
    zstd_writer *z = (zstd_writer *)w;
    if (usable(z, err) < 0)
        return -1;
    if (off > src->size || len > src->size - off)
        return ck_fail(err, EIO, "%s: offset %llu: copy of %llu bytes past the end of %s "
                       "(%llu bytes)", z->base.path, (unsigned long long)off,
                       (unsigned long long)len, src->path, (unsigned long long)src->size);
    if (len == 0)
        return 0;
    if (z->run_len > 0 && z->run_src == src && z->run_off + z->run_len == off) {
        z->run_len += len;
        return 0;
    }
    if (place_run(z, err) < 0)
        return failed(z);
    z->run_src = src;
    z->run_off = off;
    z->run_len = len;
    return 0;
}

static int zw_payload(ck_wrap_writer *w, uint64_t len, ck_error *err)
{
    zstd_writer *z = (zstd_writer *)w;
    if (usable(z, err) < 0)
        return -1;
    if (place_run(z, err) < 0)
        return failed(z);
    if (len < CK_ZSTD_PAYLOAD_CUT)
        return 0;
    if (end_frame(z, err) < 0)
        return failed(z);
    z->cut = len > UINT64_MAX - z->plain ? NO_CUT : z->plain + len;
    return 0;
}

static int write_table(zstd_writer *z, ck_error *err)
{
    unsigned char *t = z->table;
    size_t esize = z->sums ? SEEK_ENTRY : 8, len = SEEK_HEADER;
    /* Entries are kept with a checksum; without, each moves down to 8
     * bytes (never past the next one's start). */
    for (uint32_t i = 0; i < z->frames; i++, len += esize)
        memmove(t + len, t + SEEK_HEADER + (size_t)i * SEEK_ENTRY, esize);
    ck_put_le32(t, CK_ZSTD_SEEK_TABLE_MAGIC);
    ck_put_le32(t + 4, (uint32_t)(len - SEEK_HEADER + SEEK_FOOTER));
    ck_put_le32(t + len, z->frames);
    t[len + 4] = z->sums ? SEEK_CHECKSUM_FLAG : 0;
    ck_put_le32(t + len + 5, CK_ZSTD_SEEKABLE_MAGIC);
    len += SEEK_FOOTER;
    return emit(z, t, len, err);
}

static int zw_finish(ck_wrap_writer *w, ck_error *err)
{
    zstd_writer *z = (zstd_writer *)w;
    if (usable(z, err) < 0)
        return -1;
    if (place_run(z, err) < 0 || end_frame(z, err) < 0 || write_table(z, err) < 0 ||
        ck_direct_out_finish(z->out, err) < 0)
        return failed(z);
    z->finished = true;
    return 0;
}

static void zw_destroy(ck_wrap_writer *w)
{
    zstd_writer *z = (zstd_writer *)w;
    ZSTD_freeCCtx(z->cctx);
    ck_direct_out_free(z->out);
    free(z->buf);
    free(z->cbuf);
    free(z->table);
    free(z);
}

static const struct ck_wrap_writer_ops zw_ops = {
    .write = zw_write,
    .copy = zw_copy,
    .payload = zw_payload,
    .finish = zw_finish,
    .destroy = zw_destroy,
};

/* Threads for one frame: the CPUs online, at most MAX_WORKERS; none when
 * the library was built without multithreading (it then refuses).  Frames
 * under 512 KiB (record headers) zstd compresses in the calling thread. */
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

ck_wrap_writer *ck_zstd_writer_new(int fd, const char *path, int level, bool sums,
                                   ck_error *err)
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
    z->sums = sums;
    z->cut = NO_CUT;
    z->cctx = ZSTD_createCCtx();
    z->buf = malloc(CK_ZSTD_FRAME);
    z->cbuf = malloc(z->ccap);
    z->table = malloc(z->table_cap);
    if (z->cctx == NULL || z->buf == NULL || z->cbuf == NULL || z->table == NULL) {
        ck_fail(err, ENOMEM, "%s: out of memory for a zstd writer", path);
        zw_destroy(&z->base);
        return NULL;
    }
    if (setup_cctx(z->cctx, level, path, err) < 0 ||
        (z->out = ck_direct_out_new(fd, path, err)) == NULL) {
        zw_destroy(&z->base);
        return NULL;
    }
    return &z->base;
}
