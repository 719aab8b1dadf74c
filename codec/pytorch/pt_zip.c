/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pt_zip: torch.save's ZIP archive, its central directory and its records'
 * data offsets (pt_zip.h).  The layout is PKWARE's APPNOTE (4.3.6 local
 * header, 4.3.12 central directory header, 4.3.14-16 the ZIP64 and classic
 * end records, 4.5.3 the ZIP64 extra field).
 */
#define _GNU_SOURCE
#include "pt_zip.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dir_name.h"
#include "../core/le_bytes.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define LOCAL_LEN 30u
#define CENTRAL_LEN 46u
#define END_LEN 22u
#define END64_LEN 56u
#define LOCATOR64_LEN 20u
#define MAX_COMMENT 65535u
/* Each record takes a central header of 46 bytes and its name: a directory
 * bigger than this would index more records than ckptfs keeps tensors. */
#define MAX_CD_BYTES (1ull << 30)

static int bad(const char *file, uint64_t off, ck_error *err, const char *what)
{
    return ck_fail(err, EINVAL, "%s: offset %llu: %s", file, (unsigned long long)off, what);
}

/* A record's fault, naming it as the central directory does. */
static int bad_record(const char *file, uint64_t off, const char *name, size_t len,
                      ck_error *err, const char *what)
{
    char q[CK_QUOTE_BUF];
    return ck_fail(err, EINVAL, "%s: offset %llu: ZIP record '%s': %s", file,
                   (unsigned long long)off, ck_quote(q, name, len), what);
}

int ck_zip_magic(const unsigned char *b, size_t n)
{
    return n >= 4 && ck_le32(b) == SIG_LOCAL;
}

/* ---- the end records ----------------------------------------------------- */

typedef struct end_info {
    uint64_t n, cd_size, cd_off;
    uint64_t at;                /* where the end records begin: the directory ends there */
} end_info;

/* The ZIP64 end record, which the locator just before the classic one
 * points to: it holds the counts and offsets that did not fit. */
static int read_end64(ck_source *src, const char *file, uint64_t end_at, end_info *e,
                      ck_error *err)
{
    unsigned char loc[LOCATOR64_LEN], rec[END64_LEN];
    if (end_at < LOCATOR64_LEN)
        return bad(file, end_at, err, "a ZIP64 archive without its end locator");
    uint64_t at = end_at - LOCATOR64_LEN;
    if (ck_source_read(src, loc, sizeof loc, at, err) < 0)
        return -1;
    if (ck_le32(loc) != SIG_LOCATOR64 || ck_le32(loc + 4) != 0 || ck_le32(loc + 16) > 1)
        return bad(file, at, err, "a ZIP64 archive without its end locator");
    uint64_t off = ck_le64(loc + 8);
    if (off > at || at - off < END64_LEN)
        return bad(file, at, err, "the ZIP64 end record lies outside the file");
    if (ck_source_read(src, rec, sizeof rec, off, err) < 0)
        return -1;
    if (ck_le32(rec) != SIG_END64 || ck_le32(rec + 16) != 0 || ck_le32(rec + 20) != 0)
        return bad(file, off, err, "not a ZIP64 end record of a one-part archive");
    e->n = ck_le64(rec + 32);
    e->cd_size = ck_le64(rec + 40);
    e->cd_off = ck_le64(rec + 48);
    e->at = off;
    return 0;
}

/* The classic end record at b + p (the buffer b read at file offset base),
 * and the ZIP64 one when it stands for it. */
static int end_record(ck_source *src, const char *file, const unsigned char *b, size_t p,
                      uint64_t base, end_info *e, ck_error *err)
{
    const unsigned char *r = b + p;
    e->at = base + p;
    e->n = ck_le16(r + 10);
    e->cd_size = ck_le32(r + 12);
    e->cd_off = ck_le32(r + 16);
    if (ck_le16(r + 4) != 0 || ck_le16(r + 6) != 0 || ck_le16(r + 8) != ck_le16(r + 10))
        return bad(file, e->at, err, "a ZIP archive split in parts");
    /* PyTorch's writer (miniz) may add the ZIP64 records even when the
     * classic one's fields hold the values: a locator before it says. */
    bool locator = p >= LOCATOR64_LEN && ck_le32(r - LOCATOR64_LEN) == SIG_LOCATOR64;
    if (locator || e->n == 0xffff || e->cd_size == 0xffffffffu || e->cd_off == 0xffffffffu)
        return read_end64(src, file, e->at, e, err);
    return 0;
}

/* The classic end record: the last "PK\5\6" whose comment ends the file.
 * torch.save writes no comment, so the file's last bytes are tried first
 * (with the ZIP64 locator before them): the 64 KiB a comment may take
 * would be tensor bytes read for nothing. */
static int read_end(ck_source *src, const char *file, end_info *e, ck_error *err)
{
    uint64_t size = src->size;
    if (size < END_LEN)
        return bad(file, 0, err, "not a ZIP archive (too short for its end record)");
    size_t tail = size < END_LEN + LOCATOR64_LEN ? (size_t)size : END_LEN + LOCATOR64_LEN;
    unsigned char last[END_LEN + LOCATOR64_LEN];
    if (ck_source_read(src, last, tail, size - tail, err) < 0)
        return -1;
    if (ck_le32(last + tail - END_LEN) == SIG_END && ck_le16(last + tail - 2) == 0)
        return end_record(src, file, last, tail - END_LEN, size - tail, e, err);
    tail = size < END_LEN + MAX_COMMENT ? (size_t)size : END_LEN + MAX_COMMENT;
    unsigned char *b = malloc(tail);
    if (b == NULL)
        return ck_nomem(err, file);
    int rc = ck_source_read(src, b, tail, size - tail, err);
    size_t p = tail - END_LEN + 1;
    bool found = false;
    while (rc == 0 && !found && p-- > 0)
        found = ck_le32(b + p) == SIG_END && p + END_LEN + ck_le16(b + p + 20) == tail;
    if (rc == 0 && !found)
        rc = bad(file, size, err, "not a ZIP archive (no end of central directory record)");
    if (rc == 0)
        rc = end_record(src, file, b, p, size - tail, e, err);
    free(b);
    return rc;
}

/* ---- the central directory ----------------------------------------------- */

/* The ZIP64 extra field's values, in the order of the fields they
 * replace: only those whose 32-bit field is all ones are there. */
static int zip64_extra(const unsigned char *x, size_t len, uint64_t *usize, uint64_t *csize,
                       uint64_t *off)
{
    while (len >= 4) {
        unsigned id = ck_le16(x), n = ck_le16(x + 2);
        if (n > len - 4)
            return -1;
        if (id == 0x0001) {
            uint64_t *want[3] = {usize, csize, off};
            const unsigned char *v = x + 4;
            for (int i = 0; i < 3; i++) {
                if (*want[i] != 0xffffffffu)
                    continue;
                if (v + 8 > x + 4 + n)
                    return -1;
                *want[i] = ck_le64(v);
                v += 8;
            }
            return 0;
        }
        x += 4 + n;
        len -= 4 + n;
    }
    return 0;
}

/* The top directory: "<top>/" begins every name. */
static int top_dir(ck_zip *z, const char *name, size_t len)
{
    const char *slash = memchr(name, '/', len);
    if (slash == NULL || slash == name)
        return -1;
    z->top = name;
    z->top_len = (uint32_t)(slash - name);
    return 0;
}

static int one_entry(ck_zip *z, const char *file, size_t at, size_t *next, ck_error *err)
{
    const unsigned char *h = z->cd + at;
    uint64_t pos = z->cd_off + at;
    size_t left = (size_t)(*next - at);
    if (left < CENTRAL_LEN || ck_le32(h) != SIG_CENTRAL)
        return bad(file, pos, err, "not a central directory header");
    unsigned flags = ck_le16(h + 8), method = ck_le16(h + 10);
    size_t nl = ck_le16(h + 28), xl = ck_le16(h + 30), cl = ck_le16(h + 32);
    if (nl + xl + cl > left - CENTRAL_LEN)
        return bad(file, pos, err, "a central directory header runs past the directory");
    const char *name = (const char *)h + CENTRAL_LEN;
    if (flags & 0x41)
        return bad_record(file, pos, name, nl, err, "encrypted");
    if (method != 0)
        return bad_record(file, pos, name, nl, err, "compressed (torch.save stores every "
                          "record; ckptfs reads stored ones only)");
    uint64_t usize = ck_le32(h + 24), csize = ck_le32(h + 20), off = ck_le32(h + 42);
    if (zip64_extra(h + CENTRAL_LEN + nl, xl, &usize, &csize, &off) < 0)
        return bad_record(file, pos, name, nl, err, "a malformed ZIP64 extra field");
    if (usize != csize)
        return bad_record(file, pos, name, nl, err, "stored, but its two sizes differ");
    if (z->n == 0 && top_dir(z, name, nl) < 0)
        return bad(file, pos, err, "a record outside a top directory (torch.save puts all "
                   "under one)");
    if (nl <= z->top_len + 1u || memcmp(name, z->top, z->top_len) != 0 ||
        name[z->top_len] != '/' || memchr(name, '\0', nl) != NULL)
        return bad(file, pos, err, "a record outside the archive's top directory");
    if (off >= z->cd_off || usize > z->cd_off - off)
        return bad_record(file, pos, name, nl, err, "it lies outside the file's records");
    z->v[z->n++] = (ck_zip_entry){.name = name + z->top_len + 1,
                                  .name_len = (uint32_t)(nl - z->top_len - 1),
                                  .crc = ck_le32(h + CK_ZIP_CENTRAL_CRC), .flags = (uint16_t)flags,
                                  .size = usize, .header_off = off, .central_off = pos};
    *next = at + CENTRAL_LEN + nl + xl + cl;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    const ck_zip_entry *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c != 0 ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

static int no_twice(const ck_zip *z, const char *file, ck_error *err)
{
    for (size_t i = 1; i < z->n; i++) {
        if (by_name(&z->v[i - 1], &z->v[i]) != 0)
            continue;
        char q[CK_QUOTE_BUF];
        return ck_fail(err, EINVAL, "%s: the ZIP record '%s' is there twice", file,
                       ck_quote(q, z->v[i].name, z->v[i].name_len));
    }
    return 0;
}

int ck_zip_read(ck_source *src, const char *file, ck_zip *z, ck_error *err)
{
    *z = (ck_zip){0};
    end_info e = {0};
    if (read_end(src, file, &e, err) < 0)
        return -1;
    if (e.cd_off > e.at || e.cd_size != e.at - e.cd_off)
        return bad(file, e.at, err, "the central directory does not end where the end "
                   "record begins");
    if (e.cd_size > MAX_CD_BYTES || e.n > e.cd_size / CENTRAL_LEN)
        return bad(file, e.at, err, "more ZIP records than ckptfs reads, or than the "
                   "directory holds");
    z->cd_off = e.cd_off;
    z->cd = malloc(e.cd_size ? e.cd_size : 1);
    z->v = calloc(e.n ? e.n : 1, sizeof *z->v);
    if (z->cd == NULL || z->v == NULL)
        return ck_nomem(err, file);
    if (ck_source_read(src, z->cd, e.cd_size, e.cd_off, err) < 0)
        return -1;
    size_t at = 0;
    for (uint64_t i = 0; i < e.n; i++) {
        size_t next = (size_t)e.cd_size;
        if (one_entry(z, file, at, &next, err) < 0)
            return -1;
        at = next;
    }
    if (at != e.cd_size)
        return bad(file, e.cd_off + at, err, "bytes after the last central directory header");
    qsort(z->v, z->n, sizeof *z->v, by_name);
    return no_twice(z, file, err);
}

void ck_zip_free(ck_zip *z)
{
    free(z->cd);
    free(z->v);
    *z = (ck_zip){0};
}

const ck_zip_entry *ck_zip_find(const ck_zip *z, const char *name, size_t len)
{
    ck_zip_entry key = {.name = name, .name_len = (uint32_t)len};
    return len > UINT32_MAX ? NULL : bsearch(&key, z->v, z->n, sizeof *z->v, by_name);
}

/* Entry e's local header (h, nl bytes of name after it), read and checked. */
static int local_header(ck_source *src, const char *file, const ck_zip *z,
                        const ck_zip_entry *e, unsigned char *h, size_t nl, uint64_t *off,
                        ck_error *err)
{
    if (ck_source_read(src, h, LOCAL_LEN + nl, e->header_off, err) < 0)
        return -1;
    const char *full = e->name - z->top_len - 1;
    if (ck_le32(h) != SIG_LOCAL || ck_le16(h + 26) != nl || memcmp(h + LOCAL_LEN, full, nl) != 0)
        return bad_record(file, e->header_off, full, nl, err, "its local header is not its "
                          "central directory entry's");
    if (ck_le16(h + 8) != 0 || (ck_le16(h + 6) & 0x41))
        return bad_record(file, e->header_off, full, nl, err, "compressed or encrypted in "
                          "its local header");
    uint64_t at = e->header_off + LOCAL_LEN + nl + ck_le16(h + 28);
    if (at > z->cd_off || e->size > z->cd_off - at)
        return bad_record(file, e->header_off, full, nl, err, "it runs into the central "
                          "directory");
    *off = at;
    return 0;
}

int ck_zip_data(ck_source *src, const char *file, const ck_zip *z, const ck_zip_entry *e,
                uint64_t *off, ck_error *err)
{
    /* The local header and its name, compared with the central header's
     * (the top directory before e->name) in the same read. */
    size_t nl = z->top_len + 1u + e->name_len; /* a central name: at most 0xffff */
    unsigned char *h = malloc(LOCAL_LEN + nl);
    if (h == NULL)
        return ck_nomem(err, file);
    int rc = local_header(src, file, z, e, h, nl, off, err);
    free(h);
    return rc;
}

int ck_zip_extent(ck_source *src, const char *file, const ck_zip *z, const ck_zip_entry *e,
                  uint64_t data, uint64_t *end, uint64_t *desc_crc, ck_error *err)
{
    uint64_t after = data + e->size; /* local_header: at most z->cd_off */
    *end = after;
    *desc_crc = UINT64_MAX;
    if (!(e->flags & CK_ZIP_DESCRIPTOR) || after > z->cd_off)
        return 0;
    /* 16 bytes first (the classic descriptor, signed, or unsigned with
     * room to spare), 24 only when ZIP64's might be there: no byte past a
     * descriptor is read for nothing. */
    static const struct { unsigned sig, wide; } form[] = {{4, 4}, {0, 4}, {4, 8}, {0, 8}};
    unsigned char b[24] = {0};
    uint64_t room = z->cd_off - after;
    size_t have = 0;
    for (size_t f = 0; f < sizeof form / sizeof *form; f++) {
        size_t s = form[f].sig, w = form[f].wide, len = s + 4 + 2 * w;
        size_t want = len <= 16 ? 16 : 24;
        if (want > room)
            want = (size_t)room;
        if (len > want)
            continue;
        if (want > have) {
            if (ck_source_read(src, b + have, want - have, after + have, err) < 0)
                return -1;
            have = want;
        }
        if ((s && ck_le32(b) != CK_ZIP_DESCRIPTOR_SIG) || ck_le32(b + s) != e->crc)
            continue;
        uint64_t cs = w == 8 ? ck_le64(b + s + 4) : ck_le32(b + s + 4);
        uint64_t us = w == 8 ? ck_le64(b + s + 4 + w) : ck_le32(b + s + 4 + w);
        if (cs != e->size || us != e->size)
            continue;
        *end = after + len;
        *desc_crc = after + s;
        return 0;
    }
    (void)file;
    return 0;
}

int ck_zip_check_byteorder(const unsigned char *b, size_t n, const char *file, ck_error *err)
{
    if (b == NULL || (n == 6 && memcmp(b, "little", 6) == 0))
        return 0;
    return ck_fail(err, ENOTSUP, "%s: byteorder is not \"little\": ckptfs reads "
                   "little-endian PyTorch archives only", file);
}
