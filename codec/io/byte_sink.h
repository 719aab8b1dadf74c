/* SPDX-License-Identifier: Apache-2.0 */
/*
 * byte_sink: the output side of the encoders.
 *
 * Bytes go to the new file either from memory or copied from a byte source
 * (the old model, a spill file) with copy_file_range, so an encoder streams
 * a model of any size through a 1 MiB buffer.  A running CRC-32 can be kept
 * (the .ckpt trailer); then copies go through memory so the CRC sees them.
 * So do they when the file is wrapped (encrypted or compressed): what the
 * encoder writes is then the plaintext, handed to a wrap writer.
 *
 * Two hints serve a wrap writer that cuts frames (zstd): ck_sink_payload
 * says, before a tensor's content, that the next N bytes are a payload
 * readers skip by its length (the .ckpt writer for every record, the
 * ONNX/MindIR writer for a re-encoded TensorProto's data), so frames can
 * be cut around it; ck_sink_copy says "these bytes are unchanged", and
 * into a wrap writer with a copy operation the range is handed over by
 * name instead of being read.  The bytes copied and the pieces written
 * are both added to the progress the sink carries, in 16 MiB steps.
 */
#ifndef CK_BYTE_SINK_H
#define CK_BYTE_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "../core/byte_source.h"
#include "../core/ck_error.h"
#include "../envelope.h"
#include "../core/progress.h"
#include "wrap_writer.h"

#define CK_SINK_BUF (1u << 20)

typedef struct ck_sink {
    int fd;
    const char *path;           /* the file written (its target), for messages */
    bool crc_on;
    uLong crc;
    unsigned char *buf;         /* CK_SINK_BUF bytes, the caller's */
    ck_error *err;
    ck_wrap_writer *wrap;       /* NULL: plaintext goes to fd as it is */
    ck_progress *progress;      /* counts the pieces' bytes (NULL: none) */
} ck_sink;

/* Part of a tensor's bytes: len bytes from src at off, or from mem. */
typedef struct ck_piece {
    ck_source *src;
    const void *mem;
    uint64_t off, len;
} ck_piece;

/* Wrap what is written from now on in env's envelope (NULL or none:
 * plain); ck_sink_end finishes the wrapping (the last block, the seek
 * table) and frees it, ck_sink_drop only frees it (on failure). */
int ck_sink_wrap(ck_sink *s, const ck_envelope *env);
int ck_sink_end(ck_sink *s);
void ck_sink_drop(ck_sink *s);

int ck_sink_write(ck_sink *s, const void *data, size_t len);
/* Copy bytes [off, off + len) of src; in-kernel when nothing needs to see
 * them.  Into a wrap writer that copies (zstd), src's bytes are named, not
 * read: compressed frames they cover whole are copied as they are.  This
 * is how an encoder says "unchanged": it copies from the model's source. */
int ck_sink_copy(ck_sink *s, ck_source *src, uint64_t off, uint64_t len);
/* The next len bytes written are one payload that readers skip by its
 * length (a tensor's content); a hint for the wrap writer's frames. */
int ck_sink_payload(ck_sink *s, uint64_t len);
/* Bytes [off, off + len) of a piece: tensor content, counted in the
 * progress, in steps that let the bar move during a large tensor. */
int ck_sink_piece(ck_sink *s, const ck_piece *p, uint64_t off, uint64_t len);

size_t ck_varint_len(uint64_t v);
size_t ck_put_varint(unsigned char *p, uint64_t v);

#endif
