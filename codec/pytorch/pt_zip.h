/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_zip: the ZIP archive torch.save writes since PyTorch 1.6, read
 * without inflating anything (PyTorch's writer stores every record).
 *
 * The central directory is read whole (it is small: a few dozen bytes per
 * record) and checked: every entry stored, unencrypted, inside the file,
 * under one top directory, named once.  A record's bytes start after its
 * local header, whose extra field PyTorch pads so that they fall on a
 * 64-byte boundary; that header is read only for the records the reader
 * asks for (ck_zip_data), one small read each, and its name must be the
 * central entry's.  ZIP64 (files or records of 4 GiB and more) is read as
 * PyTorch writes it.
 *
 * The end record is first looked for in the file's last 42 bytes (PyTorch
 * writes no comment; the 64 KiB scan a comment allows is the fallback,
 * since those bytes would be tensor bytes read for nothing), then the
 * ZIP64 end record when a locator precedes it (PyTorch's miniz writes one
 * even for small files) or a field is saturated.  The central directory is
 * bounded by 1 GiB and by the end record's place; every entry has equal
 * sizes and lies inside the bytes before the directory; entries are sorted
 * and looked up by binary search.  So a mount reads the end records, the
 * directory, the local headers of the records used (data.pkl, byteorder,
 * each storage a tensor names), byteorder and data.pkl: never a storage's
 * bytes (tests/bats/pytorch.bats measures it).
 */
#ifndef CK_PT_ZIP_H
#define CK_PT_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "../core/byte_source.h"
#include "../core/ck_error.h"

typedef struct ck_zip_entry {
    const char *name;           /* after the top directory's "<dir>/"; in the zip's
                                 * central directory buffer, not NUL-ended */
    uint32_t name_len;
    uint32_t crc;
    uint16_t flags;             /* bit 3: a data descriptor follows the bytes */
    uint64_t size;
    uint64_t header_off;        /* its local header */
    uint64_t central_off;       /* its central directory header */
} ck_zip_entry;

typedef struct ck_zip {
    unsigned char *cd;          /* the central directory */
    ck_zip_entry *v;            /* sorted by name */
    size_t n;
    const char *top;            /* the top directory, without its '/' (in cd) */
    uint32_t top_len;
    uint64_t cd_off;            /* where the central directory starts */
} ck_zip;

/* A record's flags bit 3: its CRC and sizes follow its bytes in a data
 * descriptor (as PyTorch's writer puts them), not in its local header. */
#define CK_ZIP_DESCRIPTOR 0x0008u
/* Where the CRC-32 field is in a local and in a central directory header. */
#define CK_ZIP_LOCAL_CRC 14u
#define CK_ZIP_CENTRAL_CRC 16u
#define CK_ZIP_DESCRIPTOR_SIG 0x08074b50u

/* Whether the first bytes of a file (n of them) are a ZIP local header. */
int ck_zip_magic(const unsigned char *b, size_t n);

/* Read src's central directory into z; file names it in messages.  0, or
 * -1 with the reason and the offset.  Free z with ck_zip_free, after a
 * failure too. */
int ck_zip_read(ck_source *src, const char *file, ck_zip *z, ck_error *err);
void ck_zip_free(ck_zip *z);

/* The entry "<top>/name", or NULL. */
const ck_zip_entry *ck_zip_find(const ck_zip *z, const char *name, size_t len);

/* Where entry e's bytes start in src (after its local header), checked
 * against the central directory and the file. */
int ck_zip_data(ck_source *src, const char *file, const ck_zip *z, const ck_zip_entry *e,
                uint64_t *off, ck_error *err);

/* Where record e (its bytes at data, as ck_zip_data found them) ends, and
 * where the CRC-32 of a data descriptor after its bytes is.  A record
 * flagged (bit 3) as followed by a descriptor is checked for one: with or
 * without its signature (APPNOTE 4.3.9.3), CRC-32 and sizes of 4 or 8
 * bytes each (4.3.9.2, ZIP64), agreeing with the central directory.  None
 * there (or no flag): *end is the end of its bytes and *desc_crc
 * UINT64_MAX, the CRC-32 is its local header's alone. */
int ck_zip_extent(ck_source *src, const char *file, const ck_zip *z, const ck_zip_entry *e,
                  uint64_t data, uint64_t *end, uint64_t *desc_crc, ck_error *err);

/* A torch.save archive's byteorder record (n bytes at b; NULL: absent,
 * as in files before PyTorch 1.10) says "little": 0, else -1 with ENOTSUP
 * naming file. */
int ck_zip_check_byteorder(const unsigned char *b, size_t n, const char *file, ck_error *err);

#endif
