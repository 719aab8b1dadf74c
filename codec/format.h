/* SPDX-License-Identifier: Apache-2.0 */
/*
 * format: what a format's reader is, for the rest of ckptfs.
 *
 * A format is a reader and the answers it gives about its models: how a
 * file is recognised, how it is indexed, and what the rest of ckptfs asks
 * without knowing the format (the type names xattrs show, whether a tensor
 * may be removed, which of the model's sources are data files).  What a
 * reader keeps about a model beyond the tensor index (a .ckpt's CRC
 * trailer, an ONNX graph's layout) is its own: ck_model.state, opaque to
 * everyone else.  Its writer is a ck_writer (codec/io/writer.h); the two
 * are one entry of the registry (registry.h), which looks formats up.
 *
 * The front-end (mount/, fuse/) asks a model only format-free questions,
 * such as ck_model_type_name, ck_model_may_remove, ck_model_metadata,
 * ck_encode_cleanup, ck_writer_of, ck_model_may_save, ck_model_may_read,
 * ck_copied_names_file, ck_envelope_is_secret, ck_envelope_is_wrapped,
 * ck_envelope_option, ck_envelope_args_ready and the views of
 * codec/view.h.  `grep -niE 'oneflow|pickle|cipher|encrypt|zstd|compress|
 * safetensors|mindir|onnx|mindspore'` over mount/ and fuse/ finds
 * only comments, the help text and option table of fuse/main.c (-o
 * key_file, enc_mode, zstd_level, handed on as envelope options) and the open
 * options' key_if_encrypted.  A format without a writer, or a model in
 * an envelope ckptfs only reads, mounts read-only; -o rw of one is
 * refused in one line (ck_model_may_save), for a model mount and a run's
 * checkpoints alike.
 */
#ifndef CK_FORMAT_H
#define CK_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ck_error.h"
#include "core/dtype.h"
#include "core/tensor_index.h"

struct ck_model;
struct ck_open_opts;

typedef struct ck_format {
    const char *name;           /* "ckpt": -o format=, ckptfs-dump */
    const char *title;          /* in messages: "checkpoint", "ONNX" */
    const char *extension;      /* what its files are called, before an envelope's
                                 * (NULL: a directory's format, opened by its
                                 * collection, codec/collection.h) */
    const char *const *also;    /* other names its files have (NULL-ended), or NULL */
    /* Whether a run directory's file with one of those names is one of its
     * models (NULL: every one); a name others use too (.bin) may be one
     * only in a form of its own. */
    bool (*in_run)(const char *file);
    bool creatable;             /* -o create may start an empty model of it */
    bool encryptable;           /* a plain model may be encrypted on save (MindSpore's
                                 * loader decrypts it) */
    bool data_files_encrypted;  /* an encrypted model's data files are too */

    /* Index m->sources[0] (the content, unwrapped) into m->index and
     * m->state, adding the sources it needs; the caller finalizes the
     * index.  m->state is freed with free_state even when this fails. */
    int (*open)(struct ck_model *m, const struct ck_open_opts *o, ck_error *err);
    void (*free_state)(void *state);
    /* The format's name of a type: t's spelling in the file when t is
     * given, else what its writer would write for dt. */
    const char *(*type_name)(const struct ck_model *m, const ck_tensor *t, const ck_dtype *dt);
    /* Whether tensor id may be deleted or renamed (NULL: always); the
     * reason in err, naming it as shown, when not. */
    int (*may_remove)(struct ck_model *m, uint32_t id, const char *shown, ck_error *err);
    /* Whether source i > 0 is a data file of the model (shown to users,
     * watched, written by saves) rather than decoded values of its own. */
    bool (*is_data_file)(const struct ck_model *m, uint32_t i);
    /* The file of the model's directory holding byte off of tensor t's
     * extents, relative to the directory, with off's place in that file
     * in *in; NULL (the hook, or its answer): the extent's source's own
     * file.  For a source that stands for several files (a OneFlow
     * snapshot's `out` files, one after another). */
    const char *(*extent_file)(const struct ck_model *m, const ck_tensor *t, uint64_t off,
                               uint64_t *in);
    /* The source whose bytes hold tensor id's record (NULL: the model file). */
    uint32_t (*record_source)(const struct ck_model *m, uint32_t id);
    /* What ckptfs-dump adds to its summary line (NULL: nothing). */
    const char *(*notes)(const struct ck_model *m);
    /* The model's own metadata as text (safetensors' "__metadata__"), shown
     * as the root's user.ckptfs.metadata; NULL: none. */
    const char *(*metadata)(const struct ck_model *m);
    /* A saved index (core/saved_index.h), which lets a later open skip
     * open: m->state as bytes, in *out (malloc'd, *len of them): 0, or 1
     * when this model's is not to be kept.  And back, into m->state (freed
     * with free_state, even on failure), for an open with options o, once
     * the saved index's tensors are in m->index: 0, or -1 with the reason
     * when the bytes are unusable, do not fit those tensors, or o asks
     * what the saved read did not do (a .ckpt's CRC trailer verified).
     * check_state, if set, runs before every save of a model so loaded
     * (ck_saved_index_check_all): whether the file still has the layout
     * the state describes, beyond the tensors' own records, which the
     * saved index checks itself.  save_state and load_state NULL: the
     * format's models are read in full each time. */
    int (*save_state)(const struct ck_model *m, unsigned char **out, size_t *len);
    int (*load_state)(struct ck_model *m, const struct ck_open_opts *o, const unsigned char *in,
                      size_t len, ck_error *err);
    int (*check_state)(const struct ck_model *m, ck_error *err);
} ck_format;

#endif
