/*
 * zstd_source: the plaintext of a zstd-compressed model file.
 *
 * A file in zstd's seekable format (independent frames, then a seek table
 * in a skippable frame at the end; zstd's contrib/seekable_format) is read
 * frame by frame: a read decompresses only the frames it touches, through
 * the shared page cache (a frame is a page).  Any other zstd file is
 * decompressed once, streaming, into an unlinked temporary file in $TMPDIR
 * (never into memory, bounded by tmp_max and the free space there), which
 * then serves reads as a plain file does.
 */
#ifndef CK_ZSTD_SOURCE_H
#define CK_ZSTD_SOURCE_H

#include <stdbool.h>

#include "byte_source.h"
#include "ck_error.h"
#include "page_cache.h"

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

/* file: the compressed file, owned by the result from then on (closed on
 * failure too).  tmp_max: the most a non-seekable file may decompress to
 * in $TMPDIR (0: the default above).  *seekable says which way it is read. */
ck_source *ck_zstd_source_open(ck_source *file, ck_page_cache *cache, uint64_t tmp_max,
                               bool *seekable, ck_error *err);

#endif
