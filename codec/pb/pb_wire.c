/* SPDX-License-Identifier: Apache-2.0 */
#include "pb_wire.h"

#include <errno.h>
#include <string.h>

void pb_reader_init(pb_reader *r, ck_source *src, uint64_t pos)
{
    r->src = src;
    r->pos = pos;
    r->win_off = 0;
    r->win_len = 0;
}

void pb_seek(pb_reader *r, uint64_t pos)
{
    r->pos = pos;
}

static int truncated(pb_reader *r, uint64_t limit, ck_error *err)
{
    if (limit >= r->src->size)
        return ck_fail(err, EINVAL, "%s: offset %llu: truncated record (file ends at %llu)",
                       r->src->path, (unsigned long long)r->pos,
                       (unsigned long long)r->src->size);
    return ck_fail(err, EINVAL, "%s: offset %llu: field runs past the end of its message "
                   "(which ends at %llu)", r->src->path, (unsigned long long)r->pos,
                   (unsigned long long)limit);
}

/* Make win cover r->pos, reading at most up to limit. */
static int fill(pb_reader *r, uint64_t limit, ck_error *err)
{
    if (r->pos >= r->win_off && r->pos < r->win_off + r->win_len)
        return 0;
    if (r->pos >= limit)
        return truncated(r, limit, err);
    uint64_t want = limit - r->pos;
    if (want > PB_WINDOW)
        want = PB_WINDOW;
    /* The window may come back shorter (a zstd frame's end): each use of
     * it refills as it goes. */
    size_t got = 0;
    if (ck_source_read_some(r->src, r->win, (size_t)want, r->pos, &got, err) < 0)
        return -1;
    if (got == 0 || got > want)
        return ck_fail(err, EIO, "%s: offset %llu: internal error: short window read",
                       r->src->path, (unsigned long long)r->pos);
    r->win_off = r->pos;
    r->win_len = got;
    return 0;
}

static int next_byte(pb_reader *r, uint64_t limit, unsigned char *b, ck_error *err)
{
    if (r->pos >= limit)
        return truncated(r, limit, err);
    if (fill(r, limit, err) < 0)
        return -1;
    *b = r->win[r->pos - r->win_off];
    r->pos++;
    return 0;
}

int pb_read_varint(pb_reader *r, uint64_t limit, uint64_t *out, ck_error *err)
{
    uint64_t start = r->pos;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        unsigned char b = 0;
        if (next_byte(r, limit, &b, err) < 0)
            return -1;
        /* The 10th byte may only contribute the top bit of a 64-bit value. */
        if (i == 9 && (b & 0x7e) != 0)
            return ck_fail(err, EINVAL, "%s: offset %llu: varint overflows 64 bits",
                           r->src->path, (unsigned long long)start);
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            *out = v;
            return 0;
        }
    }
    return ck_fail(err, EINVAL, "%s: offset %llu: varint longer than 10 bytes",
                   r->src->path, (unsigned long long)start);
}

int pb_read_key(pb_reader *r, uint64_t limit, uint32_t *field, int *wire_type, ck_error *err)
{
    uint64_t start = r->pos;
    uint64_t key;
    if (pb_read_varint(r, limit, &key, err) < 0)
        return -1;
    uint64_t num = key >> 3;
    if (num == 0 || num > 536870911u)
        return ck_fail(err, EINVAL, "%s: offset %llu: invalid field number %llu",
                       r->src->path, (unsigned long long)start, (unsigned long long)num);
    *field = (uint32_t)num;
    *wire_type = (int)(key & 7);
    return 0;
}

int pb_next_field(pb_reader *r, uint64_t end, pb_field *f, ck_error *err)
{
    if (r->pos >= end)
        return 0;
    f->key_off = r->pos;
    return pb_read_key(r, end, &f->num, &f->wire_type, err) < 0 ? -1 : 1;
}

int pb_read_len(pb_reader *r, uint64_t limit, uint64_t field_off, uint64_t *len, ck_error *err)
{
    uint64_t start = field_off;
    if (pb_read_varint(r, limit, len, err) < 0)
        return -1;
    if (*len > limit - r->pos) {
        if (limit >= r->src->size)
            return ck_fail(err, EINVAL, "%s: offset %llu: length %llu runs past the end of "
                           "the file (%llu bytes left)", r->src->path,
                           (unsigned long long)start, (unsigned long long)*len,
                           (unsigned long long)(limit - r->pos));
        return ck_fail(err, EINVAL, "%s: offset %llu: length %llu runs past the end of its "
                       "message (%llu bytes left)", r->src->path, (unsigned long long)start,
                       (unsigned long long)*len, (unsigned long long)(limit - r->pos));
    }
    return 0;
}

int pb_read_bytes(pb_reader *r, uint64_t limit, void *buf, size_t len, ck_error *err)
{
    if (len > limit - r->pos)
        return truncated(r, limit, err);
    unsigned char *dst = buf;
    while (len > 0) {
        if (fill(r, limit, err) < 0)
            return -1;
        size_t avail = (size_t)(r->win_off + r->win_len - r->pos);
        size_t n = len < avail ? len : avail;
        memcpy(dst, r->win + (r->pos - r->win_off), n);
        dst += n;
        len -= n;
        r->pos += n;
    }
    return 0;
}

int pb_skip(pb_reader *r, uint64_t limit, uint64_t field_off, int wire_type, ck_error *err)
{
    uint64_t v;
    switch (wire_type) {
    case PB_WT_VARINT:
        return pb_read_varint(r, limit, &v, err);
    case PB_WT_I64:
    case PB_WT_I32: {
        uint64_t n = wire_type == PB_WT_I64 ? 8 : 4;
        if (n > limit - r->pos) {
            r->pos = field_off;
            return truncated(r, limit, err);
        }
        r->pos += n;
        return 0;
    }
    case PB_WT_LEN:
        if (pb_read_len(r, limit, field_off, &v, err) < 0)
            return -1;
        r->pos += v;
        return 0;
    default:
        return ck_fail(err, EINVAL, "%s: offset %llu: unsupported wire type %d (%s)",
                       r->src->path, (unsigned long long)field_off, wire_type,
                       pb_wire_type_name(wire_type));
    }
}

const char *pb_wire_type_name(int wire_type)
{
    static const char *const names[] = {"varint", "64-bit", "length-delimited",
                                        "start-group", "end-group", "32-bit",
                                        "invalid", "invalid"};
    return names[wire_type & 7];
}
