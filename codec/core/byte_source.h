/* SPDX-License-Identifier: Apache-2.0 */
/*
 * byte_source: where a model's bytes come from.
 *
 * Readers and the read path never touch a file descriptor directly; they ask
 * a byte source for "len bytes at plaintext offset off".  A plain file is the
 * identity source.  Encrypted (AES blocks) and zstd-compressed models plug in
 * later as further sources whose plaintext offsets differ from file offsets;
 * the index built by a reader stores plaintext offsets, so nothing above this
 * layer changes.
 *
 * When plaintext offsets are file offsets, `fd` is the open file and the FUSE
 * front-end may hand extents to the kernel zero-copy (splice).  Otherwise
 * `fd` is -1 and bytes must go through read_at().
 */
#ifndef CK_BYTE_SOURCE_H
#define CK_BYTE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "ck_error.h"
#include "file_watch.h"

typedef struct ck_source ck_source;

struct ck_source_ops {
    /* Read exactly len bytes at plaintext offset off; -1 and err on failure
     * (including a short read, which means the file shrank under us). */
    int (*read_at)(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err);
    /* Optional: read between 1 and len bytes at off, *got of them, as many
     * as come cheaply (a zstd source stops at the end of a frame).  NULL:
     * read_at of all len. */
    int (*read_some)(ck_source *src, void *buf, size_t len, uint64_t off, size_t *got,
                     ck_error *err);
    void (*destroy)(ck_source *src);
};

struct ck_source {
    const struct ck_source_ops *ops;
    char *path;         /* for messages */
    uint64_t size;      /* plaintext size */
    int fd;             /* backing file when offsets are file offsets, else -1 */
    dev_t dev;          /* the file's identity, when it is one (fd >= 0) */
    ino_t ino;
    /* The file as it was opened (a wrapper copies its file's): another
     * program's truncation or rewrite changes the size or the mtime;
     * chmod and chown change only the ctime, which is not compared. */
    uint64_t file_size;
    struct timespec mtime;
    /* Tells a write from a touch when the mtime changed (file_watch.h);
     * NULL: every mtime change counts as a write. */
    ck_file_watch *watch;
    int wd;
    /* Held around read_at when set: a source that decodes (decrypts,
     * decompresses) keeps state, its page cache and codec context, which
     * the request loop and a save running beside it both use.  A plain
     * file's reads are positional and need none. */
    pthread_mutex_t *serial;
    ck_source *inner;   /* a view's source (ck_source_view), else NULL */
    uint64_t inner_off; /* a slice's first byte in it (ck_source_slice) */
    /* The directory its file was opened in, its model's (a view's is its
     * inner source's): who may read it is checked along the way to it
     * (ck_model_may_read).  Not a reference: a source ends with its model. */
    const struct ck_model_dir *dir;
    /* Its bytes are computed, no file's (ck_source_zeros): nothing to
     * watch, check on disk or check another user's access to. */
    bool computed;
};

/* Open a regular file read-only as an identity source. */
ck_source *ck_source_open_file(const char *path, ck_error *err);
/* The same over an open descriptor, which the source then owns (closed on
 * failure too); path is for messages. */
ck_source *ck_source_adopt_fd(int fd, const char *path, ck_error *err);

/* A nameless scratch file for bytes decoded at open (str values, typed
 * fields, a decompressed model): an O_TMPFILE in $TMPDIR, or a memfd when
 * in_memory (decrypted bytes never reach the disk in clear).  what says
 * what it holds, for the message naming model. */
int ck_scratch_fd(bool in_memory, const char *model, const char *what, ck_error *err);

static inline int ck_source_read(ck_source *src, void *buf, size_t len, uint64_t off,
                                 ck_error *err)
{
    if (src->serial == NULL)
        return src->ops->read_at(src, buf, len, off, err);
    pthread_mutex_lock(src->serial);
    int rc = src->ops->read_at(src, buf, len, off, err);
    pthread_mutex_unlock(src->serial);
    return rc;
}

/* For a window over the source (pb_wire): 1 to len bytes at off, *got of
 * them; len > 0. */
static inline int ck_source_read_some(ck_source *src, void *buf, size_t len, uint64_t off,
                                      size_t *got, ck_error *err)
{
    if (src->ops->read_some == NULL) {
        *got = len;
        return ck_source_read(src, buf, len, off, err);
    }
    if (src->serial != NULL)
        pthread_mutex_lock(src->serial);
    int rc = src->ops->read_some(src, buf, len, off, got, err);
    if (src->serial != NULL)
        pthread_mutex_unlock(src->serial);
    return rc;
}

/* A source that reads through inner, another model's source, which must
 * outlive it: a merged distributed checkpoint reads its ranks' files so.
 * The same descriptor and identity, so plain files still splice. */
ck_source *ck_source_view(ck_source *inner, ck_error *err);

/* Bytes [off, off + len) of inner, which must outlive it, as a source of
 * their own (its offset 0 is inner's off): an archive stored inside a
 * bigger file (a DCP data file's items) parsed as if alone.  Its fd is -1,
 * so that nothing splices from it with the wrong offsets.  name is for
 * messages.  NULL with err when the range is not inside inner. */
ck_source *ck_source_slice(ck_source *inner, uint64_t off, uint64_t len, const char *name,
                           ck_error *err);
/* size bytes of zeros, no file's (computed): the tensors a map adds
 * (codec/map/map_model.h).  name is for messages. */
ck_source *ck_source_zeros(uint64_t size, const char *name, ck_error *err);
/* A source over an fd the caller keeps owning (a spill file, say). */
ck_source *ck_source_wrap_fd(int fd, uint64_t size, const char *name, ck_error *err);

void ck_source_close(ck_source *src);

/* A plain file source (fd >= 0) that no longer holds what it held when it
 * was opened: shorter than end (the end of the bytes about to be read), or
 * resized or written since (the size differs, or the mtime does and the
 * watch saw a write).  -1 with EIO and the reason; one fstat.  A new mtime
 * without a write (touch) becomes the source's. */
int ck_source_check_fd(ck_source *src, uint64_t end, ck_error *err);

/* The mtime of src's file is now mtime: true when that is a write (the
 * watch saw one, or there is none); a touch instead becomes src's mtime. */
bool ck_source_written(ck_source *src, const struct timespec *mtime);

#endif
