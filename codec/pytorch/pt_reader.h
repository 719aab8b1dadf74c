/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_reader: PyTorch's torch.save files (.pt, .pth, .bin), the ZIP layout
 * PyTorch writes since 1.6.
 *
 * The archive's records (pt_zip.h) are `<top>/data.pkl`, the pickled state
 * dict (pt_pickle.h), and `<top>/data/<key>`, one storage each, in the
 * byte order `<top>/byteorder` names.  Each tensor is a view of a storage:
 * a contiguous one is one extent of its record; any other (a transpose, a
 * Fortran-ordered array, every other column) is a strided gather of it
 * (tensor_index.h), shown row-major without a copy.  Several tensors may
 * view one storage (tied weights): they share its bytes.  Python ints,
 * floats and bools saved beside the tensors are shown as read-only 0-d
 * tensors (int64, float64, bool); strings and other values are counted in
 * the notes, not shown.
 *
 * Refused with one line: files from before PyTorch 1.6 (a sequence of
 * pickles, its magic number pickled first), a byteorder other than
 * "little", a tensor without a name (a bare torch.save(t)).  At open the
 * reader also keeps, for saves, the zip's directory, each record's data
 * offset, each tensor's record and whether the tensor is its storage
 * alone; and it reads every record's local header and, for a record
 * flagged as followed by a data descriptor, looks for the descriptor (with
 * or without its signature, 4- or 8-byte sizes, agreeing with the central
 * directory; one that is not there leaves the CRC to the local header),
 * so that a save, which copies or patches those records, cannot fail on
 * one.  Saves (pt_writer.h) patch edited values in place or lay
 * the file out again.
 */
#ifndef CK_PT_READER_H
#define CK_PT_READER_H

#include "../core/model.h"
#include "../format.h"
#include "pt_zip.h"

extern const ck_format ck_format_pytorch;

/* What the reader keeps for saves (ck_model.state). */
typedef struct ck_pt_info {
    ck_zip z;                   /* the archive's central directory */
    uint64_t *data_off;         /* each record's bytes in the file (UINT64_MAX: unread) */
    uint64_t *desc_crc;         /* each record's data descriptor's CRC-32 field, or
                                 * UINT64_MAX: none (its CRC is its local header's) */
    bool overlap;               /* two records' bytes overlap (pt_reader.c, check_extents):
                                 * a save never patches the file in place */
    uint32_t *record;           /* tensor id -> its storage's record in z.v (UINT32_MAX:
                                 * a number) */
    uint8_t *alone;             /* tensor id -> 1: it is its storage, whole and row-major,
                                 * and no other tensor views it */
    char notes[CK_QUOTE_BUF + 96]; /* what ckptfs-dump adds: the values not shown */
} ck_pt_info;

/* The format's type names (format.h): PyTorch's ("torch.float32"), a
 * number's ("int"); a DCP checkpoint's too. */
const char *ck_pt_model_type_name(const ck_model *m, const ck_tensor *t, const ck_dtype *dt);

static inline const ck_pt_info *ck_pt_info_of(const ck_model *m)
{
    return m->state;
}

#endif
