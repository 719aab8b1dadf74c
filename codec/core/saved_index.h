/* SPDX-License-Identifier: Apache-2.0 */
/*
 * saved_index: a model's finalized tensor index kept in a file, so that a
 * later open of the same model skips its format's reader.
 *
 * Indexing a .ckpt reads every record header (they interleave with the
 * data): on object storage (s3fs) that is about half the file in transfer,
 * every mount; an ONNX or MindIR model with inline weights costs a walk of
 * the whole message, all of it.  After a full read the index is written
 * to DIR/<sha256 of the model's real path>.ckidx; the next open loads it
 * instead, reading only the model's first 4 KiB.
 *
 * Through the format table: a format joins with save_state/load_state
 * (format.h), its reader's state beyond the index as bytes (the .ckpt
 * reader's ck_ckpt_info; the ONNX/MindIR layout, onnx_mindir_state.c), so
 * that the writer re-encodes a loaded model byte for byte and the tools
 * report it exactly as after a full read.  load_state runs after the
 * tensors are decoded, so that the state is checked against them; the
 * .ckpt's refuses an index whose CRC trailer was not verified when the
 * open asks for verification (a -o nocrc index cannot stand for a
 * verified read).  check_state runs with the records' check before every
 * save.  The model (ck_model_open_file) calls the load before the
 * format's open and the store after a full read, through ck_index_hooks;
 * neither names a format.
 *
 * Trust.  An index is used only when it describes this very file: the
 * same real path (the directory descriptor's /proc/self/fd link and the
 * name), size, mtime (ns), ckptfs version and format, and the same first
 * 4 KiB.  Not st_dev/st_ino, which change between mounts of network
 * storage, nor the ctime (synthetic on s3fs; a chmod would invalidate).
 * Only the head is sampled: on s3fs each small read fetches a ~25 MiB
 * range, so a tail sample would double a second mount's cost, and the
 * per-tensor check below covers what a sample cannot.  A file replaced by
 * one that matches all of that (a forged mtime; storage whose mtimes are
 * coarse) still never gives a wrong byte: each tensor carries the CRC-32
 * of its record's bytes that are not data (the record header, which
 * travels in the same range as the data), checked the first time its
 * bytes are read (ck_saved_index_check) and, for every tensor, before a
 * save re-encodes the model (ck_saved_index_check_all, from
 * ck_model_check_unchanged and ck_encode: a save copies kept records
 * raw from the file, so each must be the one the index describes).  The
 * first check is once per tensor (an atomic flag), from
 * ck_model_check_extents, which fs/ calls before every read, and from
 * ck_model_read, which the tools use.  For a map parameter the CRC covers
 * the three parts' shared record less all three parts' data.  A mismatch
 * fails that read with EIO, names the file, the tensor and the index, and
 * deletes the index so that the next open rebuilds it.  A replaced file
 * whose headers all match has the index's layout: the bytes served are
 * its own.
 *
 * The file is parsed like any other input: a magic, a version, its length
 * and a SHA-256 of all its bytes are checked before anything else; every
 * count and length is bounded.  It is read only when it and its directory
 * belong to the effective user and nobody else may write them, opened
 * without following a link; written atomically (a temporary file, fsync,
 * rename), mode 0600, in a directory made 0700; anything else found there
 * is ignored and replaced by rename.  Failing to write one is a warning
 * (once per store), never a failed open.  The directory is kept to
 * CK_SAVED_MAX_FILES files and CK_SAVED_MAX_TOTAL bytes, the least
 * recently used removed after each write (a load marks an index used by
 * its mtime); an index over CK_SAVED_INDEX_MAX is not written.
 *
 * Which models: those of a format with save_state/load_state hooks
 * (format.h; .ckpt, ONNX and MindIR) whose tensors are all plain extents
 * of the model file itself: no envelope (encryption, zstd), no data files,
 * no decoded values (a .ckpt's `str` tensors, ONNX typed fields), no
 * gathered slices.  Others are simply read in full each time.
 *
 * Who: the mount (-o noindex, -o index_dir), its run directories'
 * checkpoints, and the tools through tools/cli_open.c (--no-index,
 * -o index_dir).  Not a collection's members (dist_merge.c and
 * iteration_dir.c clear it): their bytes are read through the
 * collection's model, which would skip the per-tensor check.  Nor an open
 * with file overrides (a save's read-back): a mount keeps that model as
 * the new one and stores its index once the files are in place; its .ckpt
 * CRC trailer was not re-read, so that index does not stand for a
 * verified read, and a model with a trailer gets its index from the next
 * full read.
 *
 * Tested by tests/unit/test_saved_index.c (the loaded index against the
 * reader's, field by field and frame by frame; truncations, bit flips and
 * mutated re-signed copies) and fuzzed (tests/fuzz/run.sh, format
 * saved-index: each input framed by ck_saved_index_frame and decoded
 * against the identity it claims, ck_saved_index_claimed).
 */
#ifndef CK_SAVED_INDEX_H
#define CK_SAVED_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck_error.h"
#include "model.h"

/* Indexes larger than this are not written (about 300 000 tensors). */
#define CK_SAVED_INDEX_MAX (64u << 20)
/* The directory's bounds: files, and bytes in all. */
#define CK_SAVED_MAX_FILES 256
#define CK_SAVED_MAX_TOTAL (1ull << 30)
/* The sample of the model's own bytes compared at open: its first bytes. */
#define CK_SAVED_SAMPLE 4096

/* Where saved indexes are kept, and how a failure to keep one is said. */
typedef struct ck_index_store {
    const char *dir;
    /* One line (no newline); NULL: not said.  Called at most once per
     * store for a failure to write (a run of many checkpoints with an
     * unwritable directory says it once). */
    void (*warn)(const char *msg);
    bool warned;                /* (atomic) it was */
} ck_index_store;

/* $XDG_CACHE_HOME/ckptfs, else $HOME/.cache/ckptfs, into buf: 0, or -1
 * when neither is set to an absolute path (no default then). */
int ck_saved_index_default_dir(char *buf, size_t cap);

/* During ck_model_open_file (ck_index_hooks.load), after the model
 * file's source is added: 1 when s holds a usable index of m (m->index
 * filled and finalized, m->state filled, m->saved set), 0 when there is
 * none or it cannot be trusted, finalize refusing it included (m
 * untouched: read the model).  Never fails the open. */
int ck_saved_index_load(ck_model *m, const ck_open_opts *o);

/* After a full read of m, finalized: write its index into o->index->dir
 * when m qualifies (see above).  A failure is warned about, once. */
void ck_saved_index_store(const ck_model *m, const ck_open_opts *o);

/* Before tensor t's bytes are first read: its record header still has the
 * CRC the index holds, else EIO (and the index removed).  0 for a model
 * not loaded from an index, and after a tensor's first check. */
int ck_saved_index_check(const ck_model *m, const ck_tensor *t, ck_error *err);
/* The same for every tensor not yet checked (before a save re-encodes). */
int ck_saved_index_check_all(const ck_model *m, ck_error *err);

void ck_saved_index_free(struct ck_saved_index *s);

/* The five above, as the model asks them (core/model.h, ck_index_hooks):
 * the registry's open hands them to ck_model_open_file, and a model an
 * index is loaded into keeps them (ck_model.ix), so that the model never
 * calls this file, which is above it. */
extern const ck_index_hooks ck_saved_index_hooks;

/* ---- the file's bytes, apart from any file system (the unit tests and
 * the fuzzer drive these) ---- */

/* What ties an index to its model file. */
typedef struct ck_saved_identity {
    const char *real_path;
    uint64_t size;
    int64_t mtime_sec;
    uint32_t mtime_nsec;
    unsigned char sample[32];   /* SHA-256 of the first CK_SAVED_SAMPLE bytes */
} ck_saved_identity;

/* The index of m (qualifying, finalized) as the file's bytes, in a
 * malloc'd *out of *len bytes: 0, 1 when m does not qualify (with the
 * reason in err), -1 on failure. */
int ck_saved_index_encode(const ck_model *m, const ck_saved_identity *id, unsigned char **out,
                          size_t *len, ck_error *err);
/* Parse buf (an index file's len bytes) into m (its sources[0] added,
 * index empty), requiring it to describe id: 0 with m->index, m->state and
 * m->saved filled (unfinalized), or -1 with the reason in err and m's
 * index and state emptied again. */
int ck_saved_index_decode(ck_model *m, const ck_open_opts *o, const ck_saved_identity *id,
                          const unsigned char *buf, size_t len, ck_error *err);

/* An index file's bytes around body (what follows the header, up to the
 * checksum), framed as the encoder frames its own: the header with the
 * whole file's length, and the SHA-256 trailer; in a malloc'd *out of *len
 * bytes: 0, or -1 (out of memory, or over CK_SAVED_INDEX_MAX).  The fuzzer
 * frames its inputs so that they reach the parser behind the checksum. */
int ck_saved_index_frame(const unsigned char *body, size_t n, unsigned char **out,
                         size_t *len);
/* The identity index file buf claims to describe, nothing else checked: 0
 * with id filled, its real_path copied into path (cap bytes), or -1 when
 * buf is too short or the path too long.  The fuzzer decodes an index
 * against what it claims, so that mutations go past the identity check. */
int ck_saved_index_claimed(const unsigned char *buf, size_t len, ck_saved_identity *id,
                           char *path, size_t cap);

#endif
