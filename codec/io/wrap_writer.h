/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wrap_writer: the output side of an envelope (codec/envelope.h).  The
 * encoders produce a model's plaintext in order; a wrap writer turns it
 * into the file's bytes as it comes: MindSpore's encrypted blocks (fresh
 * random IVs, 64 MiB of plaintext per block) or seekable zstd (independent
 * frames and a seek table).  Memory is bounded by one block or frame's
 * working buffers, whatever the model's size.
 *
 * A wrap writer owns the rest of the file from its creation: nothing else
 * writes to fd until ck_wrap_writer_finish has returned.  Each envelope's
 * folder defines its writer (codec/cipher/cipher_writer.c,
 * codec/zstd/zstd_writer.c) and makes it through its kind's new_writer
 * (codec/envelope_kind.h); this interface names none of them.
 */
#ifndef CK_WRAP_WRITER_H
#define CK_WRAP_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/ck_error.h"
#include "../envelope.h"

typedef struct ck_wrap_writer ck_wrap_writer;

struct ck_wrap_writer_ops {
    int (*write)(ck_wrap_writer *w, const void *data, size_t len, ck_error *err);
    /* Optional: the plaintext bytes [off, off + len) of src come next, as
     * they are.  The zstd writer copies the compressed frames of a seekable
     * source that these bytes cover whole, instead of compressing them
     * again.  NULL: the sink reads them and calls write. */
    int (*copy)(ck_wrap_writer *w, ck_source *src, uint64_t off, uint64_t len, ck_error *err);
    /* Optional: the next len bytes are one payload that readers skip by
     * its length (a tensor's content).  The zstd writer starts a frame
     * there, and another after it, when the payload is large, so that the
     * record headers between payloads sit in small frames of their own. */
    int (*payload)(ck_wrap_writer *w, uint64_t len, ck_error *err);
    /* Flush the last block or frame and write what ends the file. */
    int (*finish)(ck_wrap_writer *w, ck_error *err);
    void (*destroy)(ck_wrap_writer *w);
};

struct ck_wrap_writer {
    const struct ck_wrap_writer_ops *ops;
    int fd;
    const char *path;           /* the file written (its target), for messages */
    uint64_t out_off;           /* bytes written to fd so far */
};

/* The writer for env, over fd (which stays the caller's); NULL with err
 * cleared (errnum 0) when env wraps nothing.  Its kind refuses envelopes
 * that are read-only (the legacy cipher layout). */
ck_wrap_writer *ck_wrap_writer_new(const ck_envelope *env, int fd, const char *path,
                                   ck_error *err);

static inline int ck_wrap_writer_write(ck_wrap_writer *w, const void *data, size_t len,
                                       ck_error *err)
{
    return w->ops->write(w, data, len, err);
}
static inline int ck_wrap_writer_finish(ck_wrap_writer *w, ck_error *err)
{
    return w->ops->finish(w, err);
}
void ck_wrap_writer_free(ck_wrap_writer *w);

/* Write all of buf at fd's offset off (for the writers). */
int ck_wrap_pwrite(ck_wrap_writer *w, const void *buf, size_t len, uint64_t off, ck_error *err);

#endif
