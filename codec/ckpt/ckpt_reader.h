/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt_reader: MindSpore `.ckpt` files (checkpoint.proto, every version).
 *
 * A .ckpt is a sequence of `Checkpoint.value` records (field 1) — one
 * message per value or one big message, the same bytes — optionally followed
 * by the >= 2.3 CRC trailer ("crc_num" + 10-byte big-endian CRC-32).  The
 * reader streams the records, reads only names, dims and type strings, and
 * records each tensor's content as an extent of the file (a str value's, as
 * one of its decoded text: see ck_ckpt_read).  It applies
 * MindSpore's loader rules: adjacent records with the same tag are slices of
 * one tensor (concatenated, dims and type from the last), a later non-adjacent
 * repeat replaces the earlier tensor, unknown fields are skipped, dims [] or
 * dims [0] with one element are 0-d.
 *
 * Hand-written, not protobuf-c: its unpack needs the whole message in
 * memory, and one record holds up to 512 MiB of tensor content; streaming
 * (pb_wire.h) is the only way to index without reading tensor bytes.  A
 * CRC trailer is verified at open, as MindSpore does with crc_check=True:
 * one read of the whole file in 1 MiB pieces (-o nocrc skips it).  A map
 * parameter becomes three tensors shown as NAME%map.key, %map.value and
 * %map.status ("%m" never comes out of escaping, dir_name.h, so these
 * cannot collide with a tensor's name).
 */
#ifndef CK_CKPT_READER_H
#define CK_CKPT_READER_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/byte_source.h"
#include "../core/ck_error.h"
#include "../format.h"
#include "../core/tensor_index.h"

/* Longest tag and type string accepted; real ones are far shorter. */
#define CK_CKPT_MAX_TAG 4096
#define CK_CKPT_MAX_TYPE 64
/* `str` values are decoded at mount time; they are metadata-sized. */
#define CK_CKPT_MAX_STR (1u << 20)
/* The source the extents of decoded str values name until the caller has
 * made info->str_fd a source of the model. */
#define CK_CKPT_STR_SRC UINT32_MAX

typedef struct ck_ckpt_info {
    bool has_crc;            /* the file ends with a CRC trailer */
    bool crc_verified;       /* ... and it was checked */
    uint64_t records_end;    /* end of the protobuf part */
    uint64_t n_records;      /* Checkpoint.value records */
    uint64_t n_unknown;      /* other top-level fields, skipped */
    int str_fd;              /* the decoded str values, or -1 (see below) */
} ck_ckpt_info;

/* Index the checkpoint in src (source number src_id) into ix, which the
 * caller then finalizes.  verify_crc: check the trailer's CRC-32 (reads the
 * whole file once; a mismatch is an error).
 *
 * `str` values (UTF-32 in the file) are shown as UTF-8, which is decoded
 * once, here, into a nameless file: in $TMPDIR, or in memory (memfd) when
 * str_in_memory (an encrypted model: no plaintext on disk).  Memory thus
 * stays bounded however many there are.  Their extents name source
 * CK_CKPT_STR_SRC; on success the caller owns info->str_fd (-1 when there
 * is no str value), makes it a source and points them at it. */
int ck_ckpt_read(ck_source *src, uint32_t src_id, bool verify_crc, bool str_in_memory,
                 ck_index *ix, ck_ckpt_info *info, ck_error *err);

/* The format (format.h): its open runs ck_ckpt_read on the model's
 * content, verifying the CRC unless told not to, and makes the decoded str
 * values a source of the model. */
extern const ck_format ck_format_ckpt;

/* What the reader found in m, a checkpoint; all zero for a model created
 * empty (-o create), which has neither records nor a trailer yet. */
const ck_ckpt_info *ck_ckpt_info_of(const struct ck_model *m);

#endif
