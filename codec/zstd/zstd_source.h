/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zstd_source: the plaintext of a zstd-compressed model file.
 *
 * A file in zstd's seekable format (independent frames, then a seek table
 * in a skippable frame at the end; zstd's contrib/seekable_format) is read
 * frame by frame: a read decompresses only the frames it touches, through
 * the shared page cache (a frame is a page); the small frames (record
 * headers, in ckptfs's layout) are asked of the disk together at open, and
 * frames decompressed in a row ask for the next.  Any other zstd file is
 * decompressed once, streaming, into an unlinked temporary file in $TMPDIR
 * (never into memory, bounded by tmp_max and the free space there), which
 * then serves reads as a plain file does.
 *
 * The temporary file is an O_TMPFILE bounded by -o tmp_max (the default
 * rule is at CK_ZSTD_TMP_RATIO) and by its directory's free space
 * (fstatvfs of the file) less a margin (5% of the filesystem, at most
 * 1 GiB).  Before decompressing, the frames' declared content sizes are
 * summed by walking the frame and block headers (no decompression; at
 * most 2^20 blocks) and checked; while decompressing, the output is
 * checked as it grows, which catches frames that declare none.  A refusal
 * is one line with the file, the sizes, the bound and the option, and the
 * temporary file is closed.
 *
 * Mounting reads only what holds record headers: read_some answers a
 * reader's window up to the end of the frame holding the offset, so in
 * ckptfs's layout (zstd_writer.c cuts frames around payloads) the window
 * over a header is that header's small frame and a skipped payload is
 * never decompressed: a 1 GiB model of 4,096 tensors saved by ckptfs
 * mounts in about 2% of a `zstd -d` of the file (docs/benchmarks.md).  A
 * file cut by another tool (frames across records) costs about one
 * decompression of the frames that hold headers; `ckptfs-reencode --all`
 * rewrites it in ckptfs's layout.
 *
 * The small frames asked for at open are those of at most 64 KiB (at most
 * 64 MiB of them, POSIX_FADV_WILLNEED): in ckptfs's layout they hold the
 * record headers, which the read-back check reads next, and a save's
 * output bypassed the page cache (cold mount of 4,096 tensors: 0.06 s
 * instead of 0.26 s; 2.5 ms when cached).  A frame read misses the cache
 * only after the file's size and mtime were checked.
 */
#ifndef CK_ZSTD_SOURCE_H
#define CK_ZSTD_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/byte_source.h"
#include "../core/ck_error.h"
#include "../core/page_cache.h"

#define CK_ZSTD_MAGIC 0xFD2FB528u
#define CK_ZSTD_SKIPPABLE_MASK 0xFFFFFFF0u
#define CK_ZSTD_SKIPPABLE_MAGIC 0x184D2A50u   /* ..5F: skippable frames */
#define CK_ZSTD_SEEKABLE_MAGIC 0x8F92EAB1u
#define CK_ZSTD_SEEK_TABLE_MAGIC 0x184D2A5Eu

/* Largest frame read through the cache; a seekable file with a bigger
 * frame is decompressed to a temporary file instead. */
#define CK_ZSTD_MAX_FRAME (64u << 20)

/* The default bound on what a non-seekable file may decompress to in
 * $TMPDIR (-o tmp_max): 64 times its compressed size, at least 256 MiB.
 * Model weights compress by 1.1-2 times, so a real model of any size fits;
 * a small file that expands hundreds of times (a 13 KB file declaring
 * 400 MiB of zeros) is refused unless tmp_max says otherwise.  The free
 * space of the temporary directory bounds it too. */
#define CK_ZSTD_TMP_RATIO 64u
#define CK_ZSTD_TMP_FLOOR (256ull << 20)

/* The frames of a seekable source, for a writer that copies them as they
 * are (codec/zstd/zstd_writer.c): frame i holds plaintext [idx[i].d_off,
 * idx[i + 1].d_off) and is the compressed bytes [idx[i].c_off,
 * idx[i + 1].c_off) of file.  Checked at open: offsets grow, every frame
 * lies before the seek table, sizes fit 32 bits. */
typedef struct ck_zstd_frame {
    uint64_t c_off;                     /* in the file */
    uint64_t d_off;                     /* in the plaintext */
} ck_zstd_frame;

typedef struct ck_zstd_frames {
    uint32_t n;
    const ck_zstd_frame *idx;           /* n + 1 entries: the last holds the ends */
    const uint32_t *sums;               /* the seek table's n checksums, or NULL */
    unsigned desc;                      /* the seek table's descriptor byte */
    ck_source *file;                    /* the compressed file (a plain file source) */
} ck_zstd_frames;

/* true and *f filled when src is a seekable zstd source; false for any
 * other source (a plain file, a decompressed temporary file, a cipher). */
bool ck_zstd_frames_of(ck_source *src, ck_zstd_frames *f);

/* The low 32 bits of XXH64 (seed 0): the seek table's checksum of a
 * frame's plaintext, and zstd's content checksum. */
uint32_t ck_zstd_checksum(const void *p, size_t len);

/* file: the compressed file, owned by the result from then on (closed on
 * failure too).  tmp_max: the most a non-seekable file may decompress to
 * in $TMPDIR (0: the default above).  bar: where a progress bar of that
 * decompression is drawn (stderr on a terminal; NULL: none; progress.h),
 * cleared before this returns.  *seekable says which way it is read. */
ck_source *ck_zstd_source_open(ck_source *file, ck_page_cache *cache, uint64_t tmp_max,
                               FILE *bar, bool *seekable, ck_error *err);

#endif
