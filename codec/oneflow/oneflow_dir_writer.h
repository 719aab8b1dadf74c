/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oneflow_dir_writer: a model written out as a OneFlow snapshot directory.
 *
 * The layout is the legacy one that every OneFlow >= 0.5 loads with
 * flow.load (and 0.3/0.4 with flow.checkpoint.get): one directory per
 * tensor, named as the mount shows it (dir_name.h), holding `meta` (the
 * VariableMetaInfo text, oneflow_meta.h) and `out` (the raw little-endian
 * elements), and an empty `snapshot_done` at the root.  A `pickled_data`
 * only when the tensors are not in their names' byte order, the order a
 * legacy snapshot is read in: it lists them in theirs, each at its
 * directory, and OneFlow >= 0.6 (and ckptfs) then read that order.
 *
 * A str, bfloat16 and kUInt16/32/64 are refused: OneFlow's DataType has
 * the last ones since 0.5 / 0.6, but no release loads them from a
 * snapshot.
 *
 * Atomic: the tree is written into a temporary directory beside OUT,
 * ".<OUT>.ckptfs-XXXXXX", made durable by one syncfs (an fsync per file
 * was a journal commit each, seconds for a few hundred tensors), read back
 * and checked against the tensors (names, meta, sizes, bytes), and only
 * then renamed into place (RENAME_NOREPLACE, or RENAME_EXCHANGE with an
 * existing OUT, which is removed after).  A crash leaves OUT absent, or
 * old, or new and complete; the temporary directories it leaves are
 * removed by the next write to the same OUT.  An existing OUT is only
 * replaced with force, and only when it is a OneFlow snapshot or empty:
 * nothing else is ever removed.  It takes no lock: its caller holds OUT's
 * write claim (save/, above the formats).
 */
#ifndef CK_ONEFLOW_DIR_WRITER_H
#define CK_ONEFLOW_DIR_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/model.h"
#include "../io/target.h"
#include "../io/writer.h"

/* A OneFlow snapshot as ckptfs-convert's OUT (codec/io/target.h): its
 * write_dir writes the n tensors (each new bytes, as given to an encoder)
 * to a->out, whose tensors are a->m's live ones in order; errors name OUT
 * and the tensor. */
extern const ck_target ck_oneflow_target;

#endif
