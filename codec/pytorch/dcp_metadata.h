/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dcp_metadata: the `.metadata` file of a PyTorch Distributed Checkpoint
 * (torch.distributed.checkpoint), read as data.
 *
 * It is a pickle (protocol 4) of the dataclass Metadata: its
 * state_dict_metadata maps each name (fqn) to a TensorStorageMetadata
 * (TensorProperties with the dtype, the full size, and the chunks, each
 * an offsets and a sizes) or to a BytesStorageMetadata (a value saved as
 * torch.save bytes); its storage_data maps MetadataIndex(fqn, chunk
 * offsets) to _StorageInfo(relative_path, offset, length): where in the
 * data files each chunk (or byte value) is.  The symbolic pickle machine
 * (pickle/pickle_vm.h) reads it with exactly the globals these
 * dataclasses pickle (under their module paths of PyTorch 2.0 to today),
 * torch.Size and the dtypes; nothing is imported or executed.
 *
 * Besides the dataclasses (also under
 * torch.distributed._shard.sharded_tensor.metadata, PyTorch 2.0 to 2.2)
 * the allow-list holds the layout (torch.serialization._get_layout,
 * torch.strided), builtins.getattr (how Python 3.11+ pickles an enum
 * member: TensorProperties' memory format) and pathlib.PosixPath (a
 * checkpoint_id); none is ever called.  At most 256 MiB of it is read.
 *
 * What comes out is checked: chunk offsets and sizes inside the tensor
 * (overflow-checked), the tensor's bytes bounded, every chunk found in
 * storage_data (sorted, each chunk found by binary search), data file
 * names that are one plain name in the checkpoint's directory (no '/',
 * not ".", "..", or ".metadata"), offset + length not overflowing.  An
 * item saved through transforms (transform_descriptors) is refused
 * (ENOTSUP).  Whether the chunks tile the tensor is the assembler's to
 * check (dcp_dir.c).
 */
#ifndef CK_DCP_METADATA_H
#define CK_DCP_METADATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/arena.h"
#include "../core/ck_error.h"
#include "../core/dtype.h"

/* .metadata bigger than this is refused: a chunk takes ~300 bytes. */
#define CK_DCP_METADATA_MAX_BYTES (256u << 20)
/* A tensor cut into more chunks than this is refused: one chunk a rank is
 * the most a save makes, and assembling holds a piece each. */
#define CK_DCP_MAX_CHUNKS 65536u

/* Where one item's bytes are: a torch.save archive (a chunk), or the
 * bytes torch.save wrote of a value. */
typedef struct ck_dcp_item {
    const char *file;           /* relative_path: one name in the directory */
    uint64_t off, len;
} ck_dcp_item;

typedef struct ck_dcp_chunk {
    const uint64_t *offsets;    /* ndim each, inside the tensor */
    const uint64_t *sizes;
    ck_dcp_item item;
} ck_dcp_chunk;

typedef struct ck_dcp_entry {
    const char *fqn;            /* NUL-ended, UTF-8, no NUL inside */
    size_t fqn_len;
    bool bytes;                 /* a BytesStorageMetadata: item is its value */
    ck_dcp_item item;
    /* A tensor: */
    const ck_dtype *dtype;
    const char *type_name;      /* "torch.float32" */
    uint32_t ndim;
    const int64_t *size;
    ck_dcp_chunk *chunks;
    uint32_t n_chunks;
    size_t off;                 /* its opcode in .metadata, for messages */
} ck_dcp_entry;

typedef struct ck_dcp_meta {
    ck_arena arena;             /* everything below */
    ck_dcp_entry *v;            /* in state_dict_metadata's order */
    size_t n;
} ck_dcp_meta;

/* Read buf (len bytes of .metadata; file names it in messages) into out:
 * 0, or -1 with err naming the file, the offset and the fqn.  Free out
 * with ck_dcp_meta_free, after a failure too. */
int ck_dcp_meta_parse(const void *buf, size_t len, const char *file, ck_dcp_meta *out,
                      ck_error *err);
void ck_dcp_meta_free(ck_dcp_meta *m);

#endif
