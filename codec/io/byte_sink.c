/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* copy_file_range */
#include "byte_sink.h"

#include <errno.h>
#include <unistd.h>

int ck_sink_wrap(ck_sink *s, const ck_envelope *env)
{
    s->wrap = ck_wrap_writer_new(env, s->fd, s->path, s->err);
    return s->wrap == NULL && s->err->errnum != 0 ? -1 : 0;
}

int ck_sink_end(ck_sink *s)
{
    int rc = s->wrap ? ck_wrap_writer_finish(s->wrap, s->err) : 0;
    ck_sink_drop(s);
    return rc;
}

void ck_sink_drop(ck_sink *s)
{
    ck_wrap_writer_free(s->wrap);
    s->wrap = NULL;
}

int ck_sink_write(ck_sink *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    if (s->crc_on)
        s->crc = crc32(s->crc, p, (uInt)len);
    if (s->wrap != NULL)
        return ck_wrap_writer_write(s->wrap, data, len, s->err);
    while (len > 0) {
        ssize_t n = write(s->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ck_fail_errno(s->err, errno, "%s: writing the new version failed", s->path);
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int copy_through_memory(ck_sink *s, ck_source *src, uint64_t off, uint64_t len)
{
    while (len > 0) {
        size_t n = len < CK_SINK_BUF ? (size_t)len : CK_SINK_BUF;
        if (ck_source_read(src, s->buf, n, off, s->err) < 0 || ck_sink_write(s, s->buf, n) < 0)
            return -1;
        off += n;
        len -= n;
    }
    return 0;
}

/* The CRC of bytes that go to the wrap writer by name (ck_sink_copy). */
static int crc_through_memory(ck_sink *s, ck_source *src, uint64_t off, uint64_t len)
{
    while (len > 0) {
        size_t n = len < CK_SINK_BUF ? (size_t)len : CK_SINK_BUF;
        if (ck_source_read(src, s->buf, n, off, s->err) < 0)
            return -1;
        s->crc = crc32(s->crc, s->buf, (uInt)n);
        off += n;
        len -= n;
    }
    return 0;
}

int ck_sink_payload(ck_sink *s, uint64_t len)
{
    if (s->wrap == NULL || s->wrap->ops->payload == NULL)
        return 0;
    return s->wrap->ops->payload(s->wrap, len, s->err);
}

static int copy_range(ck_sink *s, ck_source *src, uint64_t off, uint64_t len)
{
    if (s->wrap != NULL && s->wrap->ops->copy != NULL) {
        if (s->crc_on && crc_through_memory(s, src, off, len) < 0)
            return -1;
        return s->wrap->ops->copy(s->wrap, src, off, len, s->err);
    }
    while (len > 0 && !s->crc_on && s->wrap == NULL && src->fd >= 0) {
        loff_t in = (loff_t)off;
        size_t want = len > (1u << 30) ? (1u << 30) : (size_t)len;
        ssize_t n = copy_file_range(src->fd, &in, s->fd, NULL, want, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* EXDEV, ENOSYS, EINVAL...: fall back to read/write */
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return copy_through_memory(s, src, off, len);
}

#define PROGRESS_STEP (16ull << 20)

/* Copies are what a progress counts: a tensor's new bytes (pieces) and
 * the unchanged ones copied from the old file alike, so that a save that
 * only renames shows its progress too.  In steps, so the count moves
 * during a copy of gigabytes. */
int ck_sink_copy(ck_sink *s, ck_source *src, uint64_t off, uint64_t len)
{
    if (s->progress == NULL || !s->progress->on)
        return copy_range(s, src, off, len);
    while (len > 0) {
        uint64_t n = len < PROGRESS_STEP ? len : PROGRESS_STEP;
        if (copy_range(s, src, off, n) < 0)
            return -1;
        ck_progress_add(s->progress, n);
        off += n;
        len -= n;
    }
    return 0;
}

int ck_sink_piece(ck_sink *s, const ck_piece *p, uint64_t off, uint64_t len)
{
    if (p->mem == NULL)
        return ck_sink_copy(s, p->src, p->off + off, len); /* counted there */
    const unsigned char *mem = (const unsigned char *)p->mem + off;
    if (s->progress == NULL || !s->progress->on)
        return ck_sink_write(s, mem, (size_t)len);
    while (len > 0) {
        uint64_t n = len < PROGRESS_STEP ? len : PROGRESS_STEP;
        if (ck_sink_write(s, mem, (size_t)n) < 0)
            return -1;
        ck_progress_add(s->progress, n);
        mem += n;
        len -= n;
    }
    return 0;
}


size_t ck_varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

size_t ck_put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}
