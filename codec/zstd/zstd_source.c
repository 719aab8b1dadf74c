/* SPDX-License-Identifier: Apache-2.0 */
#include "zstd_source.h"
#include "../core/le_bytes.h"
#include "../core/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

/* The seekable format's limits (contrib/seekable_format/zstd_seekable.h). */
#define SEEK_FOOTER 9
#define SEEK_HEADER 8                   /* skippable magic + Frame_Size */
#define SEEK_MAX_FRAMES 0x8000000u
#define SEEK_CHECKSUM_FLAG 0x80u
/* Bits 6-2 are reserved and must be 0; bits 1-0 are "unused", which the
 * format says a decoder must not interpret, so they are not checked. */
#define SEEK_RESERVED_BITS 0x7Cu

/* The temporary-file path reads and writes in pieces of this size: few
 * syscalls, and the memory of a mount stays fixed whatever the file. */
#define STREAM_BUF (1u << 20)
/* The largest window the temporary-file path gives zstd: its own default
 * (ZSTD_WINDOWLOG_LIMIT_DEFAULT), which `zstd -d` also keeps unless given
 * --memory.  --long (2^27) fits; --long=28 and up are refused. */
#define STREAM_WINDOW_LOG 27
/* Walking the frames for their declared sizes reads one 3-byte header per
 * block (at most 128 KiB of plaintext each); past this many blocks (128 GiB
 * of plaintext at least) the walk stops and only the check while
 * decompressing applies. */
#define WALK_MAX_BLOCKS (1u << 20)

typedef ck_zstd_frame zframe;

/* What the seek table says: n frames, then one more entry holding the
 * ends (where the seek table starts, the plaintext size), so a frame's
 * sizes are differences of neighbours. */
typedef struct seek_table {
    uint32_t n;
    zframe *idx;                        /* n + 1 entries */
    uint32_t *sums;                     /* n checksums, or NULL */
    unsigned desc;
    uint64_t max_csize, max_dsize;
} seek_table;

typedef struct zsource {
    ck_source base;                     /* first: ck_source_close frees it */
    ck_source *file;
    ck_page_cache *cache;
    seek_table t;
    ZSTD_DCtx *dctx;
    unsigned char *cbuf;                /* one compressed frame */
    size_t ccap;
    uint32_t last_inflated;             /* the frame decompressed last, + 1 (0: none) */
} zsource;

/* ---- XXH64 ----
 *
 * The seek table's checksums are the low 32 bits of XXH64 (seed 0) of a
 * frame's plaintext.  libzstd carries XXH64 but does not export it in its
 * public API, so it is written here from the xxHash specification; the
 * unit tests check it against the content checksums zstd itself writes. */

#define XXP1 0x9E3779B185EBCA87ull
#define XXP2 0xC2B2AE3D27D4EB4Full
#define XXP3 0x165667B19E3779F9ull
#define XXP4 0x85EBCA77C2B2AE63ull
#define XXP5 0x27D4EB2F165667C5ull

static uint64_t rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t xx_round(uint64_t acc, uint64_t in)
{
    return rotl64(acc + in * XXP2, 31) * XXP1;
}

static uint64_t xx_merge(uint64_t acc, uint64_t v)
{
    return (acc ^ xx_round(0, v)) * XXP1 + XXP4;
}

static uint64_t xxh64(const unsigned char *p, size_t len)
{
    const unsigned char *end = p + len;
    uint64_t acc;
    if (len >= 32) {
        uint64_t v1 = XXP1 + XXP2, v2 = XXP2, v3 = 0, v4 = -XXP1;
        for (; end - p >= 32; p += 32) {
            v1 = xx_round(v1, ck_le64(p));
            v2 = xx_round(v2, ck_le64(p + 8));
            v3 = xx_round(v3, ck_le64(p + 16));
            v4 = xx_round(v4, ck_le64(p + 24));
        }
        acc = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        acc = xx_merge(xx_merge(xx_merge(xx_merge(acc, v1), v2), v3), v4);
    } else {
        acc = XXP5;
    }
    acc += len;
    for (; end - p >= 8; p += 8)
        acc = rotl64(acc ^ xx_round(0, ck_le64(p)), 27) * XXP1 + XXP4;
    if (end - p >= 4) {
        acc = rotl64(acc ^ ck_le32(p) * XXP1, 23) * XXP2 + XXP3;
        p += 4;
    }
    for (; p < end; p++)
        acc = rotl64(acc ^ *p * XXP5, 11) * XXP1;
    acc ^= acc >> 33;
    acc *= XXP2;
    acc ^= acc >> 29;
    acc *= XXP3;
    acc ^= acc >> 32;
    return acc;
}

/* ---- the seek table ---- */

static void table_free(seek_table *t)
{
    free(t->idx);
    free(t->sums);
    *t = (seek_table){0};
}

/* 1 when the file ends with a seekable footer (n and descriptor filled),
 * 0 when it does not, -1 on a read error. */
static int read_footer(ck_source *file, uint32_t *n, unsigned *desc, ck_error *err)
{
    if (file->size < SEEK_FOOTER)
        return 0;
    unsigned char f[SEEK_FOOTER];
    if (ck_source_read(file, f, sizeof f, file->size - SEEK_FOOTER, err) < 0)
        return -1;
    if (ck_le32(f + 5) != CK_ZSTD_SEEKABLE_MAGIC)
        return 0;
    *n = ck_le32(f);
    *desc = f[4];
    return 1;
}

/* Where the seek table's skippable frame starts, after checking that the
 * file holds it and that its header is the one its footer implies. */
static int locate_table(ck_source *file, uint32_t n, unsigned desc, uint64_t *table_off,
                        ck_error *err)
{
    uint64_t foot = file->size - SEEK_FOOTER;
    if (desc & SEEK_RESERVED_BITS)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table: descriptor 0x%02x has "
                       "reserved bits set", file->path, (unsigned long long)foot + 4, desc);
    if (n > SEEK_MAX_FRAMES)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table: %u frames, more than "
                       "the format's %u", file->path, (unsigned long long)foot, n, SEEK_MAX_FRAMES);
    /* n <= 2^27, so these sizes stay below 2^31: no overflow. */
    uint64_t esize = desc & SEEK_CHECKSUM_FLAG ? 12 : 8;
    uint64_t content = (uint64_t)n * esize + SEEK_FOOTER;
    uint64_t frame = SEEK_HEADER + content;
    if (frame > file->size)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table: %u frames need a "
                       "%llu-byte seek table, the file has %llu bytes", file->path,
                       (unsigned long long)foot, n, (unsigned long long)frame,
                       (unsigned long long)file->size);
    *table_off = file->size - frame;
    unsigned char h[SEEK_HEADER];
    if (ck_source_read(file, h, sizeof h, *table_off, err) < 0)
        return -1;
    if (ck_le32(h) != CK_ZSTD_SEEK_TABLE_MAGIC || ck_le32(h + 4) != content)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table: expected a skippable "
                       "frame header (magic 0x%08X, Frame_Size %llu) for %u frames, found "
                       "magic 0x%08X, Frame_Size %u", file->path,
                       (unsigned long long)*table_off, CK_ZSTD_SEEK_TABLE_MAGIC,
                       (unsigned long long)content, n, ck_le32(h), ck_le32(h + 4));
    return 0;
}

/* Entry i, read from e (esize bytes), into the index; the running sums
 * are checked against the seek table's offset as they grow, so a bad
 * entry is named. */
static int add_entry(ck_source *file, seek_table *t, uint32_t i, const unsigned char *e,
                     uint64_t table_off, uint64_t entry_off, ck_error *err)
{
    uint32_t csize = ck_le32(e), dsize = ck_le32(e + 4);
    zframe *f = &t->idx[i], *next = &t->idx[i + 1];
    /* Every entry is a frame, and the smallest frame (a skippable one) is
     * 8 bytes; zstd's seekable library never writes an empty entry. */
    if (csize == 0)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table entry %u: "
                       "Compressed_Size 0", file->path, (unsigned long long)entry_off, i);
    if (__builtin_add_overflow(f->c_off, csize, &next->c_off) || next->c_off > table_off)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table entry %u: its frame "
                       "(%u bytes at offset %llu) runs past the seek table at offset %llu",
                       file->path, (unsigned long long)entry_off, i, csize,
                       (unsigned long long)f->c_off, (unsigned long long)table_off);
    if (__builtin_add_overflow(f->d_off, dsize, &next->d_off))
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table entry %u: the "
                       "decompressed size overflows", file->path,
                       (unsigned long long)entry_off, i);
    if (t->sums != NULL)
        t->sums[i] = ck_le32(e + 8);
    if (csize > t->max_csize)
        t->max_csize = csize;
    if (dsize > t->max_dsize)
        t->max_dsize = dsize;
    return 0;
}

/* The entries are read in pieces: the seek table may be large (up to
 * 1.5 GiB at 2^27 frames) and the index is all that is kept of it. */
static int load_entries(ck_source *file, seek_table *t, unsigned desc, uint64_t table_off,
                        ck_error *err)
{
    size_t esize = desc & SEEK_CHECKSUM_FLAG ? 12 : 8;
    t->idx = calloc((size_t)t->n + 1, sizeof *t->idx);
    if (t->idx == NULL)
        return ck_fail(err, ENOMEM, "%s: out of memory for a %u-frame zstd index",
                       file->path, t->n);
    if (esize == 12 && (t->sums = calloc(t->n ? t->n : 1, sizeof *t->sums)) == NULL)
        return ck_fail(err, ENOMEM, "%s: out of memory for %u zstd checksums",
                       file->path, t->n);
    unsigned char buf[512 * 12];
    uint64_t off = table_off + SEEK_HEADER;
    for (uint32_t i = 0; i < t->n;) {
        uint32_t k = t->n - i < 512 ? t->n - i : 512;
        if (ck_source_read(file, buf, k * esize, off, err) < 0)
            return -1;
        for (uint32_t j = 0; j < k; j++, i++, off += esize)
            if (add_entry(file, t, i, buf + j * esize, table_off, off, err) < 0)
                return -1;
    }
    if (t->idx[t->n].c_off != table_off)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table: its %u frames add up "
                       "to %llu bytes, but the seek table starts at offset %llu", file->path,
                       (unsigned long long)table_off, t->n,
                       (unsigned long long)t->idx[t->n].c_off, (unsigned long long)table_off);
    return 0;
}

/* 1 with t filled when the file has a seek table, 0 when it has none,
 * -1 when it has a bad one. */
static int read_seek_table(ck_source *file, seek_table *t, ck_error *err)
{
    uint32_t n;
    unsigned desc;
    uint64_t table_off = 0;
    int rc = read_footer(file, &n, &desc, err);
    if (rc <= 0)
        return rc;
    if (locate_table(file, n, desc, &table_off, err) < 0)
        return -1;
    t->n = n;
    t->desc = desc;
    if (load_entries(file, t, desc, table_off, err) < 0) {
        table_free(t);
        return -1;
    }
    return 1;
}

/* Frames read through the cache must be pages of bounded size, and their
 * compressed bytes a bounded buffer.  Anything bigger is streamed. */
static bool frames_fit_cache(const seek_table *t)
{
    return t->max_dsize <= CK_ZSTD_MAX_FRAME &&
           t->max_csize <= ZSTD_compressBound(CK_ZSTD_MAX_FRAME);
}

/* ---- the seekable source ---- */

/* Frames up to PREFETCH_FRAME compressed bytes are asked for at open, in
 * all at most PREFETCH_MAX bytes of them.  Opening reads every record
 * header, and in ckptfs's own layout each sits in a small frame of its
 * own between payload frames: from a cold file (one just saved past the
 * page cache, or after a reboot) that was one synchronous disk read per
 * header, 0.3 s for 4096 of them; asked for together the disk serves them
 * in 0.05 s.  For frames already cached the asking costs a lookup each
 * (2.5 ms for 4096). */
#define PREFETCH_FRAME (64u << 10)
#define PREFETCH_MAX (64u << 20)

static void prefetch_small_frames(const ck_source *file, const seek_table *t)
{
    uint64_t budget = PREFETCH_MAX;
    for (uint32_t i = 0; i < t->n; i++) {
        uint64_t off = t->idx[i].c_off, len = t->idx[i + 1].c_off - off;
        if (len == 0 || len > PREFETCH_FRAME)
            continue;
        if (len > budget)
            return;
        budget -= len;
        /* Advice only: a filesystem without readahead just ignores it. */
        posix_fadvise(file->fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
    }
}

/* The frame holding plaintext offset off (< size): the last frame starting
 * at or before it, which skips empty frames. */
static uint32_t frame_of(const seek_table *t, uint64_t off)
{
    uint32_t lo = 0, hi = t->n;         /* idx[lo].d_off <= off < idx[hi].d_off */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->idx[mid].d_off <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Frames decompressed in a row (a scan of the headers, a cat of every
 * out): the next one's compressed bytes are asked of the disk while this
 * one decompresses, so a cold file is read at the speed of decompression,
 * not of decompression plus the disk.  Random reads ask for nothing more. */
static void read_ahead(zsource *z, uint32_t i)
{
    bool in_a_row = z->last_inflated == i;      /* frame i - 1 came last */
    z->last_inflated = i + 1;
    if (!in_a_row || i + 1 >= z->t.n)
        return;
    const zframe *next = &z->t.idx[i + 1];
    posix_fadvise(z->file->fd, (off_t)next->c_off, (off_t)(next[1].c_off - next->c_off),
                  POSIX_FADV_WILLNEED);
}

/* Decompress frame i into buf (dsize bytes) and check it. */
static int inflate_frame(zsource *z, uint32_t i, unsigned char *buf, size_t dsize,
                         ck_error *err)
{
    const zframe *f = &z->t.idx[i];
    size_t csize = (size_t)(f[1].c_off - f->c_off);
    read_ahead(z, i);
    if (csize > z->ccap) {
        /* Bounded by frames_fit_cache(); grown to the largest frame read. */
        unsigned char *nb = malloc(csize);
        if (nb == NULL)
            return ck_fail(err, ENOMEM, "%s: out of memory for zstd frame %u (%zu bytes)",
                           z->base.path, i, csize);
        free(z->cbuf);
        z->cbuf = nb;
        z->ccap = csize;
    }
    if (ck_source_read(z->file, z->cbuf, csize, f->c_off, err) < 0)
        return -1;
    size_t r = ZSTD_decompressDCtx(z->dctx, buf, dsize, z->cbuf, csize);
    if (ZSTD_isError(r))
        return ck_fail(err, EIO, "%s: offset %llu: zstd frame %u (%zu bytes, %zu decompressed "
                       "per the seek table): %s", z->base.path, (unsigned long long)f->c_off,
                       i, csize, dsize, ZSTD_getErrorName(r));
    if (r != dsize)
        return ck_fail(err, EIO, "%s: offset %llu: zstd frame %u decompresses to %zu bytes, "
                       "the seek table says %zu", z->base.path, (unsigned long long)f->c_off,
                       i, r, dsize);
    uint32_t sum;
    if (z->t.sums != NULL && (sum = (uint32_t)xxh64(buf, dsize)) != z->t.sums[i])
        return ck_fail(err, EIO, "%s: offset %llu: zstd frame %u: checksum 0x%08X, the seek "
                       "table says 0x%08X", z->base.path, (unsigned long long)f->c_off, i,
                       sum, z->t.sums[i]);
    return 0;
}

/* Frame i's plaintext, from the cache or decompressed into it.  Valid
 * until the next call into the cache. */
static const unsigned char *frame_bytes(zsource *z, uint32_t i, ck_error *err)
{
    size_t dsize = (size_t)(z->t.idx[i + 1].d_off - z->t.idx[i].d_off), len;
    const unsigned char *p = ck_page_cache_get(z->cache, z, i, &len);
    if (p != NULL)
        return p;
    /* The seek table is the file's as it was at mount: a resized or
     * rewritten file (size or mtime; not chmod's ctime) is refused rather
     * than decompressed by a stale table. */
    if (ck_source_check_fd(z->file, z->t.idx[i + 1].c_off, err) < 0)
        return NULL;
    unsigned char *buf = ck_page_cache_reserve(z->cache, z, i, dsize, err);
    if (buf == NULL)
        return NULL;
    if (inflate_frame(z, i, buf, dsize, err) < 0) {
        ck_page_cache_abandon(z->cache);
        return NULL;
    }
    ck_page_cache_commit(z->cache);
    return buf;
}

static int zs_read_at(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err)
{
    zsource *z = (zsource *)src;
    if (off > src->size || len > src->size - off)
        return ck_fail(err, EIO, "%s: offset %llu: read of %zu bytes past the end of the "
                       "decompressed data (%llu bytes)", src->path, (unsigned long long)off,
                       len, (unsigned long long)src->size);
    unsigned char *out = buf;
    while (len > 0) {
        uint32_t i = frame_of(&z->t, off);
        const unsigned char *p = frame_bytes(z, i, err);
        if (p == NULL)
            return -1;
        uint64_t in = off - z->t.idx[i].d_off;
        uint64_t avail = z->t.idx[i + 1].d_off - off;
        size_t k = avail < len ? (size_t)avail : len;
        memcpy(out, p + in, k);
        out += k;
        off += k;
        len -= k;
    }
    return 0;
}

/* What a reader's window asks for (pb_wire): at most to the end of the
 * frame holding off.  Frames that ckptfs writes end where a large tensor
 * payload starts (codec/zstd/zstd_writer.c), so the window over a record
 * header decompresses that header's small frame, not the payload's. */
static int zs_read_some(ck_source *src, void *buf, size_t len, uint64_t off, size_t *got,
                        ck_error *err)
{
    zsource *z = (zsource *)src;
    if (off >= src->size)
        return zs_read_at(src, buf, len, off, err);     /* the message */
    uint32_t i = frame_of(&z->t, off);
    uint64_t avail = z->t.idx[i + 1].d_off - off;
    *got = avail < len ? (size_t)avail : len;
    return zs_read_at(src, buf, *got, off, err);
}

bool ck_zstd_frames_of(ck_source *src, ck_zstd_frames *f)
{
    if (src == NULL || src->ops->read_at != zs_read_at)
        return false;
    zsource *z = (zsource *)src;
    *f = (ck_zstd_frames){.n = z->t.n, .idx = z->t.idx, .sums = z->t.sums, .desc = z->t.desc,
                          .file = z->file};
    return true;
}

uint32_t ck_zstd_checksum(const void *p, size_t len)
{
    return (uint32_t)xxh64(p, len);
}

static void zs_destroy(ck_source *src)
{
    zsource *z = (zsource *)src;
    ck_page_cache_drop(z->cache, z);
    ZSTD_freeDCtx(z->dctx);
    free(z->cbuf);
    table_free(&z->t);
    ck_source_close(z->file);
}

static const struct ck_source_ops zs_ops = {
    .read_at = zs_read_at,
    .read_some = zs_read_some,
    .destroy = zs_destroy,
};

/* Takes t and file, on failure too. */
static ck_source *seekable_open(ck_source *file, ck_page_cache *cache, seek_table *t,
                                ck_error *err)
{
    zsource *z = calloc(1, sizeof *z);
    char *path = strdup(file->path);
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    if (z == NULL || path == NULL || dctx == NULL) {
        ck_fail(err, ENOMEM, "%s: out of memory for a zstd source", file->path);
        free(z);
        free(path);
        ZSTD_freeDCtx(dctx);
        table_free(t);
        ck_source_close(file);
        return NULL;
    }
    z->base = (ck_source){.ops = &zs_ops, .path = path, .size = t->idx[t->n].d_off, .fd = -1,
                          .dev = file->dev, .ino = file->ino, .file_size = file->file_size,
                          .mtime = file->mtime};
    z->file = file;
    z->cache = cache;
    z->t = *t;
    z->dctx = dctx;
    return &z->base;
}

/* ---- the temporary-file path ---- */

static int tmp_write(int fd, const unsigned char *p, size_t len, uint64_t off,
                     const char *path, ck_error *err)
{
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ck_fail_errno(err, n < 0 ? errno : EIO, "%s: decompressed offset %llu: "
                                 "cannot write to the temporary file", path,
                                 (unsigned long long)off);
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- what the temporary file may take ----
 *
 * A few KiB of zstd can declare, or produce, gigabytes.  The output is
 * bounded twice: by tmp_max (-o tmp_max, else the default rule in
 * zstd_source.h) and by the free space of the temporary directory less a
 * margin left to everyone else.  Both are checked before anything is
 * written, against the sizes the frames declare, and again as the output
 * grows, which catches frames that declare none. */

typedef struct tmp_budget {
    uint64_t max;                       /* tmp_max */
    bool by_default;                    /* max is the default rule's */
    uint64_t room;                      /* free space less the margin (UINT64_MAX: unknown) */
    uint64_t free;
} tmp_budget;

/* The margin: 5% of the filesystem, at most 1 GiB. */
#define TMP_MARGIN_MAX (1ull << 30)

static const char *tmp_dir_name(void)
{
    const char *dir = getenv("TMPDIR");
    return dir != NULL && *dir != '\0' ? dir : "/tmp";
}

static tmp_budget budget_of(uint64_t tmp_max, uint64_t csize)
{
    tmp_budget b = {.max = tmp_max, .room = UINT64_MAX, .free = UINT64_MAX};
    if (tmp_max == 0) {
        b.by_default = true;
        b.max = csize > UINT64_MAX / CK_ZSTD_TMP_RATIO ? UINT64_MAX : csize * CK_ZSTD_TMP_RATIO;
        if (b.max < CK_ZSTD_TMP_FLOOR)
            b.max = CK_ZSTD_TMP_FLOOR;
    }
    return b;
}

/* The free space where fd (the temporary file) lives.  If it cannot be
 * known, ENOSPC still stops the output. */
static void measure_room(int fd, tmp_budget *b)
{
    struct statvfs v;
    if (fstatvfs(fd, &v) < 0)
        return;
    uint64_t size = (uint64_t)v.f_blocks * v.f_frsize;
    uint64_t margin = size / 20 < TMP_MARGIN_MAX ? size / 20 : TMP_MARGIN_MAX;
    b->free = (uint64_t)v.f_bavail * v.f_frsize;
    b->room = b->free > margin ? b->free - margin : 0;
}

/* 0 when size bytes of output fit the budget, else the refusal.  declared:
 * size is what the frames (or a seek table) declare, checked before
 * decompressing; else it is the output so far, at compressed offset c_off. */
static int check_budget(const tmp_budget *b, const char *path, uint64_t size, bool declared,
                        uint64_t c_off, ck_error *err)
{
    char what[128];
    if (size <= b->max && size <= b->room)
        return 0;
    if (declared)
        snprintf(what, sizeof what, "decompresses to %llu bytes (declared by its frames)",
                 (unsigned long long)size);
    else
        snprintf(what, sizeof what, "offset %llu: the decompressed output passes %llu bytes "
                 "(no declared size)", (unsigned long long)c_off, (unsigned long long)size);
    if (size > b->max)
        return ck_fail(err, EFBIG, "%s: %s, over tmp_max, the %llu-byte limit for "
                       "decompressing into %s%s; give a larger -o tmp_max=SIZE to mount it",
                       path, what, (unsigned long long)b->max, tmp_dir_name(),
                       b->by_default ? " (by default 64 times the compressed size, at least "
                                       "256M)" : "");
    return ck_fail(err, ENOSPC, "%s: %s, but %s has %llu bytes free and %llu must stay free; "
                   "make room or point TMPDIR at a larger directory", path, what,
                   tmp_dir_name(), (unsigned long long)b->free,
                   (unsigned long long)(b->free - b->room));
}

/* A frame header (RFC 8878, 3.1.1.1): its length, the content size it
 * declares (*known false: none) and whether a checksum ends the frame. */
static int frame_header(const unsigned char *h, size_t n, size_t *hsize, uint64_t *fcs,
                        bool *known, bool *checksum)
{
    static const unsigned did_len[4] = {0, 1, 2, 4}, fcs_len[4] = {0, 2, 4, 8};
    if (n < 5)
        return -1;
    unsigned d = h[4], single = (d >> 5) & 1;
    unsigned flen = (d >> 6) == 0 && single ? 1 : fcs_len[d >> 6];
    const unsigned char *f = h + 5 + !single + did_len[d & 3];
    *hsize = (size_t)(f - h) + flen;
    if (n < *hsize)
        return -1;
    *checksum = (d >> 2) & 1;
    *known = flen != 0;
    *fcs = flen == 1 ? f[0] : flen == 2 ? (uint64_t)(f[0] | f[1] << 8) + 256
         : flen == 4 ? ck_le32(f) : flen == 8 ? ck_le64(f) : 0;
    return 0;
}

/* Past the blocks of the frame whose header ends at *off (nothing is
 * decompressed: one 3-byte header per block).  -1 when the file ends
 * first, the walk is too long (*blocks) or a read fails. */
static int skip_blocks(ck_source *file, uint64_t *off, uint32_t *blocks)
{
    unsigned char b[3];
    ck_error ignored;
    for (bool last = false; !last;) {
        if (file->size - *off < 3 || ++*blocks > WALK_MAX_BLOCKS ||
            ck_source_read(file, b, 3, *off, &ignored) < 0)
            return -1;
        uint32_t bh = b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
        last = bh & 1;
        *off += 3 + (((bh >> 1) & 3) == 1 ? 1 : bh >> 3); /* an RLE block stores 1 byte */
        if (*off > file->size)
            return -1;
    }
    return 0;
}

/* The plaintext size the frames declare, summed (saturating), walking
 * them by their headers.  *known is false when a frame declares none (zstd
 * --no-content-size, or a pipe), when the walk would be too long, or at a
 * bad header: decompressing then says what is wrong. */
static uint64_t declared_size(ck_source *file, bool *known)
{
    uint64_t off = 0, sum = 0, fcs;
    uint32_t blocks = 0;
    unsigned char h[18];
    size_t hsize;
    bool checksum, declared;
    ck_error ignored;
    *known = false;
    while (off < file->size) {
        size_t n = file->size - off < sizeof h ? (size_t)(file->size - off) : sizeof h;
        if (n < 8 || ck_source_read(file, h, n, off, &ignored) < 0)
            return 0;
        if ((ck_le32(h) & CK_ZSTD_SKIPPABLE_MASK) == CK_ZSTD_SKIPPABLE_MAGIC) {
            off += 8 + (uint64_t)ck_le32(h + 4);
            continue;
        }
        if (ck_le32(h) != CK_ZSTD_MAGIC ||
            frame_header(h, n, &hsize, &fcs, &declared, &checksum) < 0 || !declared)
            return 0;
        sum = fcs > UINT64_MAX - sum ? UINT64_MAX : sum + fcs;
        off += hsize;
        if (skip_blocks(file, &off, &blocks) < 0)
            return 0;
        off += checksum ? 4 : 0;
    }
    *known = true;
    return sum;
}

typedef struct stream {
    ck_source *file;
    int fd;
    ZSTD_DStream *ds;
    unsigned char *in, *out;
    size_t in_len;                      /* in's size: a piece, or the whole file if smaller */
    uint64_t c_off, d_off;              /* consumed, produced */
    size_t last;                        /* ZSTD_decompressStream's last hint: 0 at a frame's end */
    tmp_budget budget;
    ck_progress *prog;                  /* the bar (off when nobody asked for one) */
    bool prog_plain;                    /* it counts d_off, else c_off (see stream_progress) */
} stream;

/* Why zstd stopped, at compressed offset c_off (how far it had read: the
 * damage is in the block that ends there) and decompressed offset d_off
 * (what it had written). */
static int stream_fail(stream *s, size_t r, uint64_t c_off, ck_error *err)
{
    const char *path = s->file->path;
    unsigned long long c = c_off, d = s->d_off;
    switch (ZSTD_getErrorCode(r)) {
    case ZSTD_error_memory_allocation:
        return ck_fail(err, ENOMEM, "%s: offset %llu: out of memory for zstd decompression",
                       path, c);
    case ZSTD_error_frameParameter_windowTooLarge:
        return ck_fail(err, ENOTSUP, "%s: offset %llu: zstd frame needs a window over %u MiB "
                       "(compressed with --long=28 or more?): %s", path, c,
                       1u << (STREAM_WINDOW_LOG - 20), ZSTD_getErrorName(r));
    default:
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd stream corrupt (decompressed "
                       "offset %llu): %s", path, c, d, ZSTD_getErrorName(r));
    }
}

/* Decompress one piece of input, writing all it yields. */
static int stream_piece(stream *s, size_t n, ck_error *err)
{
    ZSTD_inBuffer in = {s->in, n, 0};
    while (in.pos < in.size) {
        ZSTD_outBuffer out = {s->out, STREAM_BUF, 0};
        size_t r = ZSTD_decompressStream(s->ds, &out, &in);
        if (ZSTD_isError(r))
            return stream_fail(s, r, s->c_off + in.pos, err);
        /* off_t is what the temporary file can hold. */
        if (out.pos > (uint64_t)INT64_MAX - s->d_off)
            return ck_fail(err, EFBIG, "%s: offset %llu: decompressed data passes 2^63 bytes",
                           s->file->path, (unsigned long long)(s->c_off + in.pos));
        if (check_budget(&s->budget, s->file->path, s->d_off + out.pos, false,
                         s->c_off + in.pos, err) < 0)
            return -1;
        if (tmp_write(s->fd, s->out, out.pos, s->d_off, s->file->path, err) < 0)
            return -1;
        s->d_off += out.pos;
        s->last = r;
        if (s->prog_plain)
            ck_progress_add(s->prog, out.pos);
    }
    s->c_off += n;
    if (!s->prog_plain)
        ck_progress_add(s->prog, n);
    return 0;
}

static int stream_all(stream *s, ck_error *err)
{
    while (s->c_off < s->file->size) {
        uint64_t left = s->file->size - s->c_off;
        size_t n = left < s->in_len ? (size_t)left : s->in_len;
        if (ck_source_read(s->file, s->in, n, s->c_off, err) < 0)
            return -1;
        if (stream_piece(s, n, err) < 0)
            return -1;
    }
    if (s->last != 0)
        return ck_fail(err, EINVAL, "%s: offset %llu: zstd stream truncated inside a frame "
                       "(decompressed offset %llu)", s->file->path,
                       (unsigned long long)s->c_off, (unsigned long long)s->d_off);
    return 0;
}

/* The bar of a decompression at open, started on bar (NULL: none).  Its
 * total is the plaintext when the frames (or a seek table) declare its
 * size: the bytes shown are then the model's own, as a mount will show
 * them, and the temporary file's, which is what grows.  Without a declared
 * size (zstd --no-content-size, a pipe) the plaintext's end is unknown, so
 * the bar counts the compressed bytes consumed of the file's size instead,
 * which is always known and ends at exactly 100%; an estimate of the
 * plaintext would not.  A declared size that lies stops at 100% (drawing
 * clamps it) until zstd or the seek table's check refuses the file. */
static void stream_progress(stream *s, ck_progress *p, FILE *bar, bool known,
                            uint64_t declared)
{
    s->prog = p;
    s->prog_plain = known;
    ck_progress_start(p, known ? declared : s->file->size, bar != NULL, bar);
}

/* The whole file decompressed into an unlinked temporary file, served as
 * a plain file.  It never goes to memory, and the output is bounded by
 * tmp_max and the temporary directory's free space (see tmp_budget); the
 * space comes back when the descriptor is closed, on failure at once.
 * zstd's own memory is its window, at most 2^STREAM_WINDOW_LOG bytes.
 * expected: the plaintext size a seek table announced, or UINT64_MAX.  bar:
 * where to draw the progress of it (NULL: nowhere; stream_progress). */
static ck_source *inflate_to_tmpfile(ck_source *file, uint64_t expected, uint64_t tmp_max,
                                     FILE *bar, ck_error *err)
{
    stream s = {.file = file, .fd = -1, .budget = budget_of(tmp_max, file->size)};
    ck_progress prog = {0};
    ck_source *res = NULL;
    bool known = expected != UINT64_MAX;
    uint64_t declared = known ? expected : 0;
    if (file->size == 0) {
        /* Not a stream of zero frames: the caller saw a magic number. */
        ck_fail(err, EINVAL, "%s: offset 0: empty file, not zstd", file->path);
        ck_source_close(file);
        return NULL;
    }
    if (!known)
        declared = declared_size(file, &known);
    if (known && check_budget(&s.budget, file->path, declared, true, 0, err) < 0)
        goto done;
    s.ds = ZSTD_createDStream();
    s.in_len = file->size < STREAM_BUF ? (size_t)file->size : STREAM_BUF;
    s.in = malloc(s.in_len);
    s.out = malloc(STREAM_BUF);
    if (s.ds == NULL || s.in == NULL || s.out == NULL ||
        ZSTD_isError(ZSTD_DCtx_setParameter(s.ds, ZSTD_d_windowLogMax, STREAM_WINDOW_LOG))) {
        ck_fail(err, ENOMEM, "%s: out of memory for zstd decompression", file->path);
        goto done;
    }
    if ((s.fd = ck_scratch_fd(false, file->path, "the decompressed model", err)) < 0)
        goto done;
    measure_room(s.fd, &s.budget);
    if (known && check_budget(&s.budget, file->path, declared, true, 0, err) < 0)
        goto done;
    stream_progress(&s, &prog, bar, known, declared);
    if (stream_all(&s, err) < 0)
        goto done;
    if (expected != UINT64_MAX && s.d_off != expected) {
        ck_fail(err, EINVAL, "%s: offset %llu: zstd seek table: the frames decompress to "
                "%llu bytes, the seek table says %llu", file->path,
                (unsigned long long)file->size - SEEK_FOOTER, (unsigned long long)s.d_off,
                (unsigned long long)expected);
        goto done;
    }
    res = ck_source_adopt_fd(s.fd, file->path, err);
    s.fd = -1;                          /* adopted, or closed on failure */
done:
    ck_progress_end(&prog); /* the line cleared before the caller says anything */
    if (s.fd >= 0)
        close(s.fd);
    ZSTD_freeDStream(s.ds);
    free(s.in);
    free(s.out);
    ck_source_close(file);
    return res;
}

ck_source *ck_zstd_source_open(ck_source *file, ck_page_cache *cache, uint64_t tmp_max,
                               FILE *bar, bool *seekable, ck_error *err)
{
    seek_table t = {0};
    *seekable = false;
    int rc = read_seek_table(file, &t, err);
    if (rc < 0) {
        ck_source_close(file);
        return NULL;
    }
    if (rc == 1 && frames_fit_cache(&t)) {
        *seekable = true;
        prefetch_small_frames(file, &t);
        return seekable_open(file, cache, &t, err);
    }
    uint64_t expected = rc == 1 ? t.idx[t.n].d_off : UINT64_MAX;
    table_free(&t);
    return inflate_to_tmpfile(file, expected, tmp_max, bar, err);
}
