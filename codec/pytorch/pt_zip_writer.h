/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_zip_writer: a ZIP archive written as PyTorch's writer (miniz, in
 * caffe2/serialize/inline_container.cc) writes torch.save files: every
 * record stored under "<top>/", its bytes on a 64-byte boundary (the local
 * header's extra field padded, an "FB" block), its CRC-32 and sizes in a
 * data descriptor after them (flags 0x0808: descriptor, UTF-8 names), and
 * the ZIP64 end records before the classic one; ZIP64 fields where a size
 * or offset passes 32 bits.  Written forward through a byte sink: nothing
 * is sought back to.
 */
#ifndef CK_PT_ZIP_WRITER_H
#define CK_PT_ZIP_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "../io/byte_sink.h"

typedef struct ck_zip_central {
    char *name;                 /* "<top>/<record>" */
    uint32_t crc;
    uint64_t size, offset;
} ck_zip_central;

typedef struct ck_zip_out {
    ck_sink *s;
    const char *top;
    uint64_t pos;               /* bytes written */
    ck_zip_central *v;
    size_t n, cap;
    uint64_t data_at;           /* the open record's first byte */
} ck_zip_out;

/* Start record "<top>/name" (its local header and padding). */
int ck_zip_out_begin(ck_zip_out *z, const char *name, size_t len, uint64_t size);
/* Bytes of the open record: copied from src, or a tensor's piece. */
int ck_zip_out_copy(ck_zip_out *z, ck_source *src, uint64_t off, uint64_t len);
int ck_zip_out_piece(ck_zip_out *z, const ck_piece *p);
/* Its bytes were written (size of them, their CRC-32 crc): the descriptor. */
int ck_zip_out_end(ck_zip_out *z, uint32_t crc, uint64_t size);
/* A whole record from memory. */
int ck_zip_out_record(ck_zip_out *z, const char *name, const void *data, size_t len);
/* The central directory and the end records; frees z's list. */
int ck_zip_out_finish(ck_zip_out *z);
void ck_zip_out_free(ck_zip_out *z);

#endif
