/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pb_wire: a defensive, streaming protobuf wire-format reader.
 *
 * Model files can be many gigabytes, so messages are never unpacked whole:
 * a reader walks fields with a cursor over a byte source, reads the small
 * fields it needs (names, dims, type strings) through an 8 KiB window
 * (PB_WINDOW), so small fields cost no system call each.  The window is
 * filled with ck_source_read_some, so a seekable zstd source may give less
 * of it (up to the end of the frame holding the offset) rather than
 * decompress a frame the reader will skip, and it is refilled as the
 * reader goes.  Payloads are skipped by their length prefix.  Every length
 * is checked against the end of the enclosing message (the caller's
 * `limit`, itself checked against the file size) before it is used,
 * varints are capped at 10 bytes, groups (wire types 3 and 4) are refused,
 * and nothing is allocated by a length read from the file.
 */
#ifndef CK_PB_WIRE_H
#define CK_PB_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/byte_source.h"
#include "../core/ck_error.h"

enum {
    PB_WT_VARINT = 0,
    PB_WT_I64 = 1,
    PB_WT_LEN = 2,
    PB_WT_SGROUP = 3,
    PB_WT_EGROUP = 4,
    PB_WT_I32 = 5,
};

#define PB_WINDOW 8192

typedef struct pb_reader {
    ck_source *src;
    uint64_t pos;               /* absolute offset of the next byte */
    uint64_t win_off;           /* absolute offset of win[0] */
    size_t win_len;             /* valid bytes in win */
    unsigned char win[PB_WINDOW];
} pb_reader;

void pb_reader_init(pb_reader *r, ck_source *src, uint64_t pos);

/* Each function returns 0 on success, -1 with err filled on failure; no
 * read ever goes at or past `limit`. */
int pb_read_varint(pb_reader *r, uint64_t limit, uint64_t *out, ck_error *err);
int pb_read_key(pb_reader *r, uint64_t limit, uint32_t *field, int *wire_type, ck_error *err);

/* The field under the cursor, as pb_next_field reads it. */
typedef struct pb_field {
    uint64_t key_off;   /* offset of the field's key, for messages */
    uint32_t num;
    int wire_type;
} pb_field;

/* Walk the fields of a message ending at end: 1 and the next key, 0 at the
 * end of the message, -1 on error.  The caller reads or skips each value. */
int pb_next_field(pb_reader *r, uint64_t end, pb_field *f, ck_error *err);
/* Read a LEN prefix and check that the payload fits before limit; errors
 * name field_off, the offset of the field's key. */
int pb_read_len(pb_reader *r, uint64_t limit, uint64_t field_off, uint64_t *len, ck_error *err);
int pb_read_bytes(pb_reader *r, uint64_t limit, void *buf, size_t len, ck_error *err);
/* Skip the value of the field whose key is at field_off (groups are
 * refused). */
int pb_skip(pb_reader *r, uint64_t limit, uint64_t field_off, int wire_type, ck_error *err);
/* Move the cursor; target must be <= limit (checked by the caller). */
void pb_seek(pb_reader *r, uint64_t pos);

const char *pb_wire_type_name(int wire_type);

#endif
