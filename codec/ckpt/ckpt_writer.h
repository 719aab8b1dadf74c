/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_writer: encode a tree back into a MindSpore `.ckpt`.
 *
 * The writer walks the original file in order.  A tensor that is unchanged
 * (same name, type, shape and bytes) is copied as its original records, byte
 * for byte, and so are the bytes between records (unknown fields) and the
 * earlier records a later one replaced (unless that one changed, or the
 * replaced record would end up next to another of its name: the reader
 * joins adjacent records of one name as slices, so [v, w, v] with w
 * deleted writes the last v alone; the dropped record was invisible
 * anyway, and two neighbouring groups of the original never join, so an
 * unchanged tree keeps every record).  A tree equal to the file therefore
 * re-encodes to an identical file (the fuzz target checks it for every
 * input the reader accepts).  A changed tensor is written where its
 * last record was, the way MindSpore >= 2.3 writes: one Checkpoint message
 * per value, content over 512 MiB cut into slices that each repeat the full
 * dims, `str` as UTF-32LE.  New tensors follow the original ones.  If the
 * file had a CRC trailer, a new one is computed.  A map parameter can be
 * kept or deleted as a whole, not edited.
 *
 * Content is streamed from byte sources (the model itself, spill files) or
 * memory, with copy_file_range when no CRC is needed, so memory stays small
 * whatever the model size.
 */
#ifndef CK_CKPT_WRITER_H
#define CK_CKPT_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/model.h"
#include "../io/target.h"
#include "../io/writer.h"

#define CK_CKPT_SLICE_BYTES (512ull << 20)

typedef struct ck_write_opts {
    uint64_t slice_bytes;       /* 0: CK_CKPT_SLICE_BYTES */
    ck_progress *progress;      /* counts the tensors' bytes (NULL: none) */
    const char *out;            /* the file written, for messages (NULL: m->path) */
} ck_write_opts;

/* Write the tree (every original tensor that is not in `tensors` is
 * deleted) to out_fd, from its current position.  Errors name the tensor. */
int ck_ckpt_write(const ck_model *m, const ck_write_tensor *tensors, size_t n,
                  const ck_write_opts *opts, int out_fd, ck_error *err);

/* The writer (writer.h): ck_ckpt_write into the group's first file. */
extern const ck_writer ck_ckpt_writer;
/* A checkpoint as ckptfs-convert's OUT (codec/io/target.h). */
extern const ck_target ck_ckpt_target;

#endif
