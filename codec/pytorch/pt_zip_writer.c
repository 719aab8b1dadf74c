/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_zip_writer: torch.save's ZIP layout, written forward (pt_zip_writer.h;
 * the structures are APPNOTE's, as pt_zip.c reads them).
 */
#define _GNU_SOURCE
#include "pt_zip_writer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../core/le_bytes.h"

#define ALIGN 64u               /* PyTorch's kFieldAlignment */
#define FLAGS 0x0808u           /* a data descriptor; UTF-8 names */
#define BIG 0xffffffffull       /* a 32-bit field past which ZIP64 holds the value */

static void le16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static int put(ck_zip_out *z, const void *b, size_t n)
{
    if (ck_sink_write(z->s, b, n) < 0)
        return -1;
    z->pos += n;
    return 0;
}

int ck_zip_out_begin(ck_zip_out *z, const char *name, size_t len, uint64_t size)
{
    size_t tl = strlen(z->top), nl = tl + 1 + len;
    if (z->n == z->cap) {
        size_t cap = z->cap ? 2 * z->cap : 16;
        ck_zip_central *v = reallocarray(z->v, cap, sizeof *v);
        if (v == NULL)
            return ck_nomem(z->s->err, z->s->path);
        z->v = v;
        z->cap = cap;
    }
    char *full = malloc(nl + 1);
    if (full == NULL || nl > 0xffff) {
        free(full);
        return ck_fail(z->s->err, full == NULL ? ENOMEM : EINVAL, "%s: record '%.*s': %s",
                       z->s->path, (int)len, name,
                       full == NULL ? "out of memory" : "a name too long for a ZIP record");
    }
    memcpy(full, z->top, tl);
    full[tl] = '/';
    memcpy(full + tl + 1, name, len);
    full[nl] = '\0';
    z->v[z->n++] = (ck_zip_central){.name = full, .offset = z->pos};
    /* ZIP64 extra (sizes in the descriptor) when it is big; then "FB"
     * padding so that the bytes start on the boundary. */
    size_t x64 = size >= BIG ? 20 : 0;
    uint64_t at = z->pos + 30 + nl + x64 + 4;
    size_t pad = (size_t)((ALIGN - at % ALIGN) % ALIGN);
    unsigned char h[30 + 20 + 4 + ALIGN] = {0};
    ck_put_le32(h, 0x04034b50u);
    le16(h + 6, FLAGS);
    le16(h + 26, (unsigned)nl);
    le16(h + 28, (unsigned)(x64 + 4 + pad));
    if (put(z, h, 30) < 0 || put(z, full, nl) < 0)
        return -1;
    unsigned char *x = h + 30;
    size_t xn = 0;
    if (x64) {
        le16(x, 0x0001);
        le16(x + 2, 16);
        memset(x + 4, 0, 16);
        xn = 20;
    }
    x[xn] = 'F';
    x[xn + 1] = 'B';
    le16(x + xn + 2, (unsigned)pad);
    memset(x + xn + 4, 0, pad);
    if (put(z, x, xn + 4 + pad) < 0)
        return -1;
    z->data_at = z->pos;
    return 0;
}

int ck_zip_out_copy(ck_zip_out *z, ck_source *src, uint64_t off, uint64_t len)
{
    if (ck_sink_copy(z->s, src, off, len) < 0)
        return -1;
    z->pos += len;
    return 0;
}

int ck_zip_out_piece(ck_zip_out *z, const ck_piece *p)
{
    if (ck_sink_piece(z->s, p, 0, p->len) < 0)
        return -1;
    z->pos += p->len;
    return 0;
}

int ck_zip_out_end(ck_zip_out *z, uint32_t crc, uint64_t size)
{
    ck_zip_central *c = &z->v[z->n - 1];
    unsigned char d[24];
    c->crc = crc;
    c->size = size;
    ck_put_le32(d, 0x08074b50u);
    ck_put_le32(d + 4, crc);
    if (size >= BIG) {
        ck_put_le64(d + 8, size);
        ck_put_le64(d + 16, size);
        return put(z, d, 24);
    }
    ck_put_le32(d + 8, (uint32_t)size);
    ck_put_le32(d + 12, (uint32_t)size);
    return put(z, d, 16);
}

int ck_zip_out_record(ck_zip_out *z, const char *name, const void *data, size_t len)
{
    uint32_t crc = (uint32_t)crc32(crc32(0, Z_NULL, 0), data, (uInt)len);
    if (ck_zip_out_begin(z, name, strlen(name), len) < 0 || put(z, data, len) < 0)
        return -1;
    return ck_zip_out_end(z, crc, len);
}

/* One central directory header, ZIP64 extra for what passes 32 bits. */
static int central(ck_zip_out *z, const ck_zip_central *c)
{
    unsigned char h[46] = {0}, x[28];
    size_t nl = strlen(c->name), xn = 4;
    bool big = c->size >= BIG, far = c->offset >= BIG;
    if (big) {
        ck_put_le64(x + xn, c->size);
        ck_put_le64(x + xn + 8, c->size);
        xn += 16;
    }
    if (far) {
        ck_put_le64(x + xn, c->offset);
        xn += 8;
    }
    le16(x, 0x0001);
    le16(x + 2, (unsigned)(xn - 4));
    if (xn == 4)
        xn = 0;
    ck_put_le32(h, 0x02014b50u);
    le16(h + 8, FLAGS);
    ck_put_le32(h + 16, c->crc);
    ck_put_le32(h + 20, big ? (uint32_t)BIG : (uint32_t)c->size);
    ck_put_le32(h + 24, big ? (uint32_t)BIG : (uint32_t)c->size);
    le16(h + 28, (unsigned)nl);
    le16(h + 30, (unsigned)xn);
    ck_put_le32(h + 42, far ? (uint32_t)BIG : (uint32_t)c->offset);
    if (put(z, h, 46) < 0 || put(z, c->name, nl) < 0)
        return -1;
    return xn ? put(z, x, xn) : 0;
}

int ck_zip_out_finish(ck_zip_out *z)
{
    uint64_t cd_off = z->pos;
    for (size_t i = 0; i < z->n; i++)
        if (central(z, &z->v[i]) < 0)
            return -1;
    uint64_t cd_size = z->pos - cd_off, end64 = z->pos;
    unsigned char e[56 + 20 + 22] = {0};
    unsigned char *r = e, *loc = e + 56, *end = e + 76;
    ck_put_le32(r, 0x06064b50u); /* ZIP64 end record */
    ck_put_le64(r + 4, 44);
    le16(r + 12, 0x031e);
    le16(r + 14, 45);
    ck_put_le64(r + 24, z->n);
    ck_put_le64(r + 32, z->n);
    ck_put_le64(r + 40, cd_size);
    ck_put_le64(r + 48, cd_off);
    ck_put_le32(loc, 0x07064b50u); /* its locator */
    ck_put_le64(loc + 8, end64);
    ck_put_le32(loc + 16, 1);
    ck_put_le32(end, 0x06054b50u); /* the classic end record */
    le16(end + 8, z->n < 0xffff ? (unsigned)z->n : 0xffff);
    le16(end + 10, z->n < 0xffff ? (unsigned)z->n : 0xffff);
    ck_put_le32(end + 12, cd_size < BIG ? (uint32_t)cd_size : (uint32_t)BIG);
    ck_put_le32(end + 16, cd_off < BIG ? (uint32_t)cd_off : (uint32_t)BIG);
    return put(z, e, sizeof e);
}

void ck_zip_out_free(ck_zip_out *z)
{
    for (size_t i = 0; i < z->n; i++)
        free(z->v[i].name);
    free(z->v);
    z->v = NULL;
    z->n = z->cap = 0;
}
