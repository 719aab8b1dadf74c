/* SPDX-License-Identifier: Apache-2.0 */
/*
 * direct_out: a new file written front to back past the page cache.
 *
 * A one-tensor save of a seekable-zstd model is a copy of the old file
 * with one frame changed: about a gigabyte per gigabyte of model that
 * nothing reads back.  Through the page cache (copy_file_range, write) the
 * kernel allocates and fills a page per 4 KiB of the new file, throttles
 * on the dirty ones and evicts the readers' pages for them; on a virtual
 * machine that hands freed memory back to its host, each of those fresh
 * pages is also a fault in the host, and the same 1 GB copy took 0.6 s
 * one minute and 1.6-3 s the next (docs/benchmarks.md, "zstd at the speed
 * of its data").  Written with O_DIRECT from two aligned buffers, one
 * filled (memcpy from the old file, or the compressor's output) while a
 * thread writes the other, it costs one copy into the buffer and the
 * disk's write time, the same every time.
 *
 * What is written so lands on disk only: a reader of the new file reads
 * it from there (the zstd reader prefetches the small frames that hold
 * record headers, zstd_source.c).  Where O_DIRECT is refused (ramfs, some
 * network and FUSE filesystems, a device whose blocks are over 4 KiB), the
 * same bytes go through plain pwrite.
 *
 * Only the seekable-zstd writer writes so.  The encrypting wrap writer
 * keeps plain writes: its read-back check reads the whole new file again
 * (every block's tag, cipher_source.h), which the page cache then serves.
 *
 * The stream starts at offset 0 of fd, which nothing else writes until
 * ck_direct_out_finish; fd's flags are as they were again after it (or
 * after ck_direct_out_free).  Memory: two CK_DIRECT_BUF buffers and a
 * thread.
 */
#ifndef CK_DIRECT_OUT_H
#define CK_DIRECT_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "../core/byte_source.h"
#include "../core/ck_error.h"

#define CK_DIRECT_BUF (4u << 20)

typedef struct ck_direct_out ck_direct_out;

/* path: the model, for messages. */
ck_direct_out *ck_direct_out_new(int fd, const char *path, ck_error *err);
/* Append len bytes from memory. */
int ck_direct_out_write(ck_direct_out *o, const void *p, size_t len, ck_error *err);
/* Append bytes [off, off + len) of src, read straight into the buffer. */
int ck_direct_out_copy(ck_direct_out *o, ck_source *src, uint64_t off, uint64_t len,
                       ck_error *err);
/* Bytes appended so far: the next one's offset in the file. */
uint64_t ck_direct_out_len(const ck_direct_out *o);
/* Write what is buffered and give fd back with its own flags; the file is
 * then exactly the bytes appended.  Its fsync is the caller's. */
int ck_direct_out_finish(ck_direct_out *o, ck_error *err);
/* Stop the thread, free everything (after finish, or to give up). */
void ck_direct_out_free(ck_direct_out *o);

#endif
