/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zstd_writer: the wrap writer that compresses into a seekable zstd file
 * (zstd_writer.c says how the frames are cut).
 */
#ifndef CK_ZSTD_WRITER_H
#define CK_ZSTD_WRITER_H

#include <stdbool.h>

#include "../io/wrap_writer.h"

/* Frames of at most CK_ZSTD_FRAME bytes of plaintext, each compressed with
 * zstd's multithreaded API at level, cut where a payload of at least
 * CK_ZSTD_PAYLOAD_CUT bytes starts and ends; frames of a seekable source
 * that a copy covers whole are copied as they are. */
#define CK_ZSTD_FRAME (2u << 20)
#define CK_ZSTD_PAYLOAD_CUT (64u << 10)
/* sums: the seek table carries each frame's checksum (as the model's file
 * did). */
ck_wrap_writer *ck_zstd_writer_new(int fd, const char *path, int level, bool sums,
                                   ck_error *err);

#endif
