/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zstd: the seekable writer against the real `zstd` command, the seekable
 * source against the plaintext (reads across frame boundaries, small and
 * large cache), the temporary-file path on files made by `zstd` and
 * `pzstd`, and damaged files, which must be refused or fail the read with
 * a message naming the file, never crash.
 *
 * The seek-table checksums (XXH64, written by hand in zstd_source.c) are
 * checked against zstd itself: a frame made with ZSTD_c_checksumFlag ends
 * with the low 32 bits of the XXH64 of its content, which is what a seek
 * table entry holds, so files whose table carries those bytes must read
 * back, and a wrong one must fail.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "../../codec/zstd/zstd_source.h"
#include "../../codec/zstd/zstd_writer.h"
#include "unit.h"

#define F ((size_t)CK_ZSTD_FRAME)

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    return unit_xorshift(&rng);
}

/* Compressible, but not so much that frames are trivial. */
static unsigned char *plaintext(size_t len)
{
    unsigned char *p = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i % 251) ^ (rnd() % 8 == 0 ? (unsigned char)rnd() : 0);
    return p;
}

static const char *tmp_path(char *buf, const char *name)
{
    snprintf(buf, 512, "%s/%s", tmpdir, name);
    return buf;
}

static void put_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

static unsigned char *get_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        *len = 0;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(p, 1, (size_t)n, f);
    fclose(f);
    return p;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static uint32_t rd32(const unsigned char *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* ---- writing ---- */

/* data through the seekable writer into path, in pieces of varied sizes
 * (1 byte, under a frame, whole frames, several frames and a bit). */
static int write_zst(const char *path, const unsigned char *data, size_t len, int level,
                     ck_error *err)
{
    static const size_t pieces[] = {1, 4095, 2 << 20, (6 << 20) + 7, 100000};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ck_fail_errno(err, errno, "%s: cannot create", path);
    ck_wrap_writer *w = ck_zstd_writer_new(fd, path, level, false, err);
    int rc = w == NULL ? -1 : 0;
    for (size_t off = 0, i = 0; rc == 0 && off < len; i++) {
        size_t k = pieces[i % 5] < len - off ? pieces[i % 5] : len - off;
        rc = ck_wrap_writer_write(w, data + off, k, err);
        off += k;
    }
    if (rc == 0)
        rc = ck_wrap_writer_finish(w, err);
    ck_wrap_writer_free(w);
    close(fd);
    return rc;
}

/* ---- reading ---- */

static ck_source *open_zst(const char *path, ck_page_cache *cache, bool *seekable, ck_error *err)
{
    ck_source *file = ck_source_open_file(path, err);
    return file ? ck_zstd_source_open(file, cache, 0, NULL, seekable, err) : NULL;
}

/* Random reads (many across frame boundaries), reads at each boundary,
 * and the whole plaintext at once, all compared with data.  NULL when
 * they all match, else what failed. */
static const char *reads_match(ck_source *src, const unsigned char *data, size_t len, int n,
                               ck_error *err)
{
    static char why[700];
    unsigned char *buf = malloc(len ? len : 1);
    const char *res = NULL;
    if (ck_source_read(src, buf, len, 0, err) < 0 || memcmp(buf, data, len) != 0) {
        res = "the whole plaintext";
        goto out;
    }
    for (size_t b = F; b < len; b += F) {
        size_t off = b - 3, k = len - off < 7 ? len - off : 7;
        if (ck_source_read(src, buf, k, off, err) < 0 || memcmp(buf, data + off, k) != 0) {
            snprintf(why, sizeof why, "%zu bytes at %zu: %s", k, off, err->msg);
            res = why;
            goto out;
        }
    }
    for (int i = 0; i < n && len > 0; i++) {
        size_t off = rnd() % len, max = len - off < 3 * F ? len - off : 3 * F;
        size_t k = rnd() % 4 == 0 ? rnd() % (max + 1) : rnd() % (max < 64 ? max + 1 : 64);
        if (ck_source_read(src, buf, k, off, err) < 0 || memcmp(buf, data + off, k) != 0) {
            snprintf(why, sizeof why, "%zu bytes at %zu: %s", k, off, err->msg);
            res = why;
            goto out;
        }
    }
out:
    free(buf);
    return res;
}

/* ---- building seekable files by hand ---- */

typedef struct chunk {
    size_t len;                 /* plaintext bytes */
    bool skippable;             /* a skippable frame of len bytes instead, plaintext 0 */
} chunk;

/* The chunks of data (consecutive), each its own frame with zstd's content
 * checksum, then a seek table with (sums) or without those checksums. */
static unsigned char *build_seekable(const unsigned char *data, const chunk *c, size_t n,
                                     bool sums, size_t *out_len)
{
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    size_t cap = 1 << 20, len = 0, esize = sums ? 12 : 8;
    unsigned char *out = malloc(cap);
    unsigned char *table = malloc(n * esize + 17);
    size_t tl = 8;
    for (size_t i = 0; i < n; i++) {
        size_t bound = c[i].skippable ? c[i].len + 8 : ZSTD_compressBound(c[i].len);
        while (cap - len < bound) {
            cap *= 2;
            out = realloc(out, cap);
        }
        size_t k, dlen = c[i].skippable ? 0 : c[i].len;
        if (c[i].skippable) {
            wr32(out + len, 0x184D2A53u);
            wr32(out + len + 4, (uint32_t)c[i].len);
            memset(out + len + 8, 0xAB, c[i].len);
            k = c[i].len + 8;
        } else {
            k = ZSTD_compress2(cctx, out + len, cap - len, data, c[i].len);
        }
        wr32(table + tl, (uint32_t)k);
        wr32(table + tl + 4, (uint32_t)dlen);
        if (sums)   /* zstd's content checksum: XXH64's low 32 bits */
            memcpy(table + tl + 8, c[i].skippable ? (const unsigned char *)"\x99\xe9\xd8\x51"
                                                  : out + len + k - 4, 4);
        tl += esize;
        len += k;
        data += dlen;
    }
    wr32(table, 0x184D2A5Eu);
    wr32(table + 4, (uint32_t)(tl - 8 + 9));
    wr32(table + tl, (uint32_t)n);
    table[tl + 4] = sums ? 0x80 : 0;
    wr32(table + tl + 5, 0x8F92EAB1u);
    tl += 9;
    out = realloc(out, len + tl);
    memcpy(out + len, table, tl);
    *out_len = len + tl;
    free(table);
    ZSTD_freeCCtx(cctx);
    return out;
}

/* ---- the tests ---- */

static void test_writer_sizes(ck_page_cache *small, ck_page_cache *large)
{
    const size_t sizes[] = {0, 1, F - 1, F, F + 1, 5 * F + 123};
    unsigned char *data = plaintext(5 * F + 123);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t len = sizes[s], zlen, dlen;
        char path[512], name[64];
        snprintf(name, sizeof name, "w%zu.zst", len);
        tmp_path(path, name);
        ck_error err = {0};
        int rc = write_zst(path, data, len, 3, &err);
        check(rc == 0, "zstd writer: %zu bytes written (%s)", len, rc ? err.msg : "ok");
        unsigned char *z = get_file(path, &zlen);
        size_t frames = (len + F - 1) / F;
        check(zlen >= 17 && rd32(z + zlen - 4) == 0x8F92EAB1u && rd32(z + zlen - 9) == frames &&
              z[zlen - 5] == 0 && rd32(z + zlen - 17 - 8 * frames) == 0x184D2A5Eu,
              "zstd writer: %zu bytes give %zu frames and a seek table", len, frames);
        free(z);
        rc = run("zstd -d -q -c '%s' > '%s.out'", path, path);
        char out[600];
        snprintf(out, sizeof out, "%s.out", path);
        unsigned char *back = get_file(out, &dlen);
        check(rc == 0 && back != NULL && dlen == len && memcmp(back, data, len) == 0,
              "zstd -d gives back the %zu bytes written", len);
        free(back);
        for (int c = 0; c < 2; c++) {
            bool seekable = false;
            ck_source *src = open_zst(path, c ? large : small, &seekable, &err);
            struct stat st;
            stat(path, &st);
            check(src != NULL && seekable && src->size == len && src->fd == -1 &&
                      src->dev == st.st_dev && src->ino == st.st_ino &&
                      strcmp(src->path, path) == 0,
                  "seekable source over %zu bytes (%s cache) (%s)", len, c ? "large" : "1-frame",
                  src ? "opened" : err.msg);
            if (src == NULL)
                continue;
            const char *why = reads_match(src, data, len, 300, &err);
            check(why == NULL, "seekable source, %zu bytes, %s cache: every read matches (%s)",
                  len, c ? "large" : "1-frame", why ? why : "ok");
            unsigned char b;
            check(ck_source_read(src, &b, 1, len, &err) < 0 && strstr(err.msg, path) != NULL,
                  "a read past the end fails with a message (%s)", err.msg);
            ck_source_close(src);
        }
    }
    free(data);
}

/* Two sources on one cache, read in turns: pages are kept per owner. */
static void test_shared_cache(ck_page_cache *small)
{
    size_t len = 3 * F + 5;
    unsigned char *a = plaintext(len), *b = plaintext(len);
    char pa[512], pb[512];
    ck_error err = {0};
    write_zst(tmp_path(pa, "shared-a.zst"), a, len, 1, &err);
    write_zst(tmp_path(pb, "shared-b.zst"), b, len, 1, &err);
    bool s1, s2;
    ck_source *x = open_zst(pa, small, &s1, &err), *y = open_zst(pb, small, &s2, &err);
    int ok = x && y;
    unsigned char buf[1000];
    for (int i = 0; ok && i < 400; i++) {
        size_t off = rnd() % (len - sizeof buf);
        ck_source *s = i % 2 ? x : y;
        const unsigned char *want = i % 2 ? a : b;
        ok = ck_source_read(s, buf, sizeof buf, off, &err) == 0 &&
             memcmp(buf, want + off, sizeof buf) == 0;
    }
    check(ok, "two seekable sources on one 1-frame cache read their own bytes (%s)",
          ok ? "ok" : err.msg);
    ck_source_close(x);
    ck_source_close(y);
    free(a);
    free(b);
}

static void test_writer_refusals(void)
{
    char path[512];
    ck_error err = {0};
    tmp_path(path, "refused.zst");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_wrap_writer *w = ck_zstd_writer_new(fd, path, 1000, false, &err);
    check(w == NULL && err.errnum == EINVAL && strstr(err.msg, "level 1000"),
          "zstd writer refuses level 1000 (%s)", err.msg);
    close(fd);

    fd = open(path, O_RDONLY | O_CLOEXEC);
    w = ck_zstd_writer_new(fd, path, 1, false, &err);
    unsigned char *data = plaintext(F + 10);
    int rc = w ? ck_wrap_writer_write(w, data, F + 10, &err) : 0;
    if (w && rc == 0) /* the output is buffered (direct_out.h): finish writes it */
        rc = ck_wrap_writer_finish(w, &err);
    check(w && rc < 0 && strstr(err.msg, path) && strstr(err.msg, "at offset 0"),
          "a failed frame write is reported, by finish at the latest (%s)", err.msg);
    rc = w ? ck_wrap_writer_write(w, data, 10, &err) : 0;
    check(w && rc < 0 && strstr(err.msg, "earlier"), "a writer refuses to go on after a "
          "failure (%s)", err.msg);
    ck_wrap_writer_free(w);
    close(fd);
    free(data);
}

/* Frames of every length from 0 to 70 (XXH64's short paths), one of 4000,
 * empty and skippable frames, with checksums in the seek table. */
static void test_checksums(ck_page_cache *cache)
{
    chunk c[80];
    size_t n = 0, total = 0;
    for (size_t i = 0; i <= 70; i++) {
        c[n++] = (chunk){.len = i};
        total += i;
    }
    c[n++] = (chunk){.len = 4000};
    c[n++] = (chunk){.len = 13, .skippable = true};
    c[n++] = (chunk){.len = 0};
    c[n++] = (chunk){.len = 33};
    total += 4033;
    unsigned char *data = plaintext(total);
    size_t zlen;
    unsigned char *z = build_seekable(data, c, n, true, &zlen);
    char path[512];
    put_file(tmp_path(path, "sums.zst"), z, zlen);
    ck_error err = {0};
    bool seekable;
    ck_source *src = open_zst(path, cache, &seekable, &err);
    const char *why = src ? reads_match(src, data, total, 300, &err) : err.msg;
    check(src && seekable && src->size == total && why == NULL,
          "seek-table checksums (XXH64 by hand) agree with zstd's for frames of 0..70 and "
          "4000 bytes (%s)", why ? why : "ok");
    ck_source_close(src);

    /* A wrong checksum: frame 71 (4000 bytes) fails, the others still read. */
    size_t e71 = zlen - 9 - 12 * n + 71 * 12 + 8;
    z[e71] ^= 1;
    put_file(path, z, zlen);
    src = open_zst(path, cache, &seekable, &err);
    size_t off71 = 70 * 71 / 2;
    unsigned char buf[4000];
    int rc = src ? ck_source_read(src, buf, 10, off71 + 5, &err) : 0;
    check(src && rc < 0 && err.errnum == EIO && strstr(err.msg, "zstd frame 71: checksum") &&
              strstr(err.msg, path),
          "a wrong seek-table checksum fails the read, naming the frame (%s)", err.msg);
    rc = src ? ck_source_read(src, buf, 70, off71 - 70, &err) : -1;
    check(rc == 0 && memcmp(buf, data + off71 - 70, 70) == 0,
          "the frames around it still read (%s)", rc ? err.msg : "ok");
    ck_source_close(src);
    free(z);
    free(data);
}

/* A frame over CK_ZSTD_MAX_FRAME: the file is streamed to a temporary
 * file instead, and still checked against its seek table's total. */
static void test_big_frame(ck_page_cache *cache)
{
    size_t big = CK_ZSTD_MAX_FRAME + 1;
    unsigned char *data = calloc(1, big + 10);
    memcpy(data + big - 3, "end plus 10", 11);
    chunk c[] = {{.len = big}, {.len = 10}};
    size_t zlen;
    unsigned char *z = build_seekable(data, c, 2, false, &zlen);
    char path[512];
    put_file(tmp_path(path, "big.zst"), z, zlen);
    ck_error err = {0};
    bool seekable = true;
    ck_source *src = open_zst(path, cache, &seekable, &err);
    const char *why = src ? reads_match(src, data, big + 10, 50, &err) : err.msg;
    check(src && !seekable && src->fd >= 0 && strcmp(src->path, path) == 0 && why == NULL,
          "a seekable file with a frame over %u bytes goes the temporary-file way (%s)",
          CK_ZSTD_MAX_FRAME, why ? why : "ok");
    ck_source_close(src);

    /* Its seek table claims one byte less in the last frame. */
    wr32(z + zlen - 9 - 8 + 4, 9);
    put_file(path, z, zlen);
    src = open_zst(path, cache, &seekable, &err);
    check(src == NULL && err.errnum == EINVAL && strstr(err.msg, "the seek table says"),
          "and is refused when it does not decompress to the seek table's total (%s)", err.msg);
    ck_source_close(src);
    free(z);
    free(data);
}

static void test_zstd_command(ck_page_cache *cache)
{
    size_t len = 5 * F + 123, half = 2 * F + 1000;
    unsigned char *data = plaintext(len);
    char in[512], a[512], b[512];
    put_file(tmp_path(in, "plain.bin"), data, len);
    put_file(tmp_path(a, "half-a.bin"), data, half);
    put_file(tmp_path(b, "half-b.bin"), data + half, len - half);
    const struct {
        const char *name, *cmd;
    } files[] = {
        {"plain.zst", "zstd -q -f '%1$s/plain.bin' -o '%1$s/plain.zst'"},
        {"long.zst", "zstd -q -f -T2 --long '%1$s/plain.bin' -o '%1$s/long.zst'"},
        {"stdin.zst", "zstd -q -c < '%1$s/plain.bin' > '%1$s/stdin.zst'"},
        {"cat.zst", "zstd -q -c '%1$s/half-a.bin' > '%1$s/a.zst' && zstd -q -c -19 "
                    "'%1$s/half-b.bin' > '%1$s/b.zst' && cat '%1$s/a.zst' '%1$s/b.zst' > "
                    "'%1$s/cat.zst'"},
        {"pzstd.zst", "pzstd -q -f -p 2 '%1$s/plain.bin' -o '%1$s/pzstd.zst'"},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[512];
        tmp_path(path, files[i].name);
        if (strncmp(files[i].cmd, "pzstd", 5) == 0 && run("command -v pzstd >/dev/null") != 0) {
            check(1, "# SKIP pzstd not installed");
            continue;
        }
        int rc = run(files[i].cmd, tmpdir);
        ck_error err = {0};
        bool seekable = true;
        ck_source *src = rc == 0 ? open_zst(path, cache, &seekable, &err) : NULL;
        const char *why = src ? reads_match(src, data, len, 200, &err) : err.msg;
        check(rc == 0 && src && !seekable && src->fd >= 0 && src->size == len &&
                  strcmp(src->path, path) == 0 && why == NULL,
              "%s (made by the zstd command) reads back through a temporary file (%s)",
              files[i].name, rc ? "command failed" : why ? why : "ok");
        ck_source_close(src);
    }

    /* A window over zstd's default limit (2^27) is refused, as zstd -d does. */
    char path[512];
    tmp_path(path, "window28.zst");
    int rc = run("zstd -q --long=28 -c < '%s' > '%s'", in, path);
    ck_error err = {0};
    bool seekable;
    ck_source *src = rc == 0 ? open_zst(path, cache, &seekable, &err) : NULL;
    check(rc == 0 && src == NULL && err.errnum == ENOTSUP && strstr(err.msg, path) &&
              strstr(err.msg, "window over 128 MiB"),
          "a frame needing a 256 MiB window is refused (%s)", err.msg);
    ck_source_close(src);

    /* Damaged streams: a flipped byte, a cut. */
    size_t zlen;
    unsigned char *z = get_file(tmp_path(path, "plain.zst"), &zlen);
    z[zlen / 2] ^= 0x40;
    put_file(tmp_path(path, "flipped.zst"), z, zlen);
    src = open_zst(path, cache, &seekable, &err);
    check(src == NULL && err.errnum == EINVAL && strstr(err.msg, path) &&
              strstr(err.msg, "zstd stream corrupt"),
          "a flipped byte in a plain zstd file is refused (%s)", err.msg);
    ck_source_close(src);
    z[zlen / 2] ^= 0x40;
    put_file(tmp_path(path, "cut.zst"), z, zlen / 2);
    src = open_zst(path, cache, &seekable, &err);
    check(src == NULL && err.errnum == EINVAL && strstr(err.msg, path) &&
              strstr(err.msg, "truncated"),
          "a cut plain zstd file is refused (%s)", err.msg);
    ck_source_close(src);
    put_file(path, z, zlen - 1);
    src = open_zst(path, cache, &seekable, &err);
    check(src == NULL && strstr(err.msg, path),
          "a plain zstd file missing its last byte is refused (%s)", err.msg);
    ck_source_close(src);
    memcpy(z + zlen - 4, "\xb1\xea\x92\x8f", 4);    /* a seekable magic by chance */
    put_file(path, z, zlen);
    src = open_zst(path, cache, &seekable, &err);
    check(src == NULL && strstr(err.msg, "zstd seek table"),
          "a plain file ending in the seekable magic is refused as a bad seek table (%s)",
          err.msg);
    ck_source_close(src);
    free(z);
    free(data);
}

/* Open path, expect a refusal mentioning needle. */
static void expect_refused(const char *name, const unsigned char *z, size_t len,
                           const char *needle, const char *what, ck_page_cache *cache)
{
    char path[512];
    put_file(tmp_path(path, name), z, len);
    ck_error err = {0};
    bool seekable;
    ck_source *src = open_zst(path, cache, &seekable, &err);
    check(src == NULL && err.errnum != 0 && strstr(err.msg, path) && strstr(err.msg, needle),
          "%s is refused (%s)", what, src ? "opened" : err.msg);
    ck_source_close(src);
}

/* Damaged seekable files. */
static void test_bad_seek_tables(ck_page_cache *cache)
{
    size_t len = 3 * F + 77, zlen;
    unsigned char *data = plaintext(len);
    char path[512];
    ck_error err = {0};
    write_zst(tmp_path(path, "good.zst"), data, len, 1, &err);
    unsigned char *z = get_file(path, &zlen), *c = malloc(zlen + 64);
    size_t n = 4, table = zlen - 17 - 8 * n, entries = table + 8;

    /* A seek table missing an entry (the footer still says 4 frames). */
    memcpy(c, z, zlen);
    memmove(c + entries + 8, c + entries + 16, zlen - entries - 16);
    expect_refused("short-table.zst", c, zlen - 8, "expected a skippable frame header",
                   "a seek table with an entry cut out", cache);
    expect_refused("tail.zst", z + table + 3, zlen - table - 3, "need a",
                   "a seek table longer than the file", cache);

    memcpy(c, z, zlen);
    wr32(c + entries + 8 * 3, rd32(c + entries + 8 * 3) - 1);
    expect_refused("sum-short.zst", c, zlen, "add up to",
                   "frame sizes summing short of the seek table", cache);
    memcpy(c, z, zlen);
    wr32(c + entries + 8, rd32(c + entries + 8) + 1);
    expect_refused("sum-long.zst", c, zlen, "runs past the seek table",
                   "frame sizes running past the seek table", cache);
    memcpy(c, z, zlen);
    wr32(c + entries, 0xFFFFFFFFu);
    wr32(c + entries + 8, 0xFFFFFFFFu);
    expect_refused("sum-huge.zst", c, zlen, "runs past", "huge compressed sizes", cache);

    /* An empty entry added (Frame_Size and Number_Of_Frames to match). */
    memcpy(c, z, table + 8 + 8 * n);
    memset(c + table + 8 + 8 * n, 0, 8);
    memcpy(c + table + 16 + 8 * n, z + zlen - 9, 9);
    wr32(c + table + 4, rd32(z + table + 4) + 8);
    wr32(c + zlen + 8 - 9, 5);
    expect_refused("empty-entry.zst", c, zlen + 8, "entry 4: Compressed_Size 0",
                   "a seek table entry of 0 bytes", cache);

    memcpy(c, z, zlen);
    wr32(c + zlen - 9, 0xFFFFFFFFu);
    expect_refused("n-huge.zst", c, zlen, "more than the format's",
                   "Number_Of_Frames 0xFFFFFFFF", cache);
    wr32(c + zlen - 9, 0x7FFFFFFu);
    expect_refused("n-big.zst", c, zlen, "need a", "Number_Of_Frames 2^27-1", cache);
    wr32(c + zlen - 9, 5);
    expect_refused("n-5.zst", c, zlen, "expected a skippable frame header",
                   "Number_Of_Frames one too many", cache);

    memcpy(c, z, zlen);
    c[zlen - 5] = 0x04;
    expect_refused("reserved.zst", c, zlen, "reserved bits", "descriptor bit 2 (reserved)",
                   cache);
    c[zlen - 5] = 0x40;
    expect_refused("reserved6.zst", c, zlen, "reserved bits", "descriptor bit 6 (reserved)",
                   cache);
    c[zlen - 5] = 0x03;     /* the "unused" bits must not be interpreted */
    put_file(tmp_path(path, "unused.zst"), c, zlen);
    bool seekable;
    ck_source *src = open_zst(path, cache, &seekable, &err);
    check(src && seekable, "descriptor bits 1-0 (unused) are ignored (%s)",
          src ? "ok" : err.msg);
    ck_source_close(src);

    memcpy(c, z, zlen);
    wr32(c + table, 0x184D2A5Du);
    expect_refused("magic.zst", c, zlen, "expected a skippable frame header",
                   "a seek table with another skippable magic", cache);

    /* A flipped byte inside frame 2: the open succeeds, that frame's reads
     * fail with its number and offset, the others read. */
    memcpy(c, z, zlen);
    uint64_t f2 = (uint64_t)rd32(z + entries) + rd32(z + entries + 8);
    c[f2 + rd32(z + entries + 16) / 2] ^= 0x10;
    put_file(tmp_path(path, "flip.zst"), c, zlen);
    src = open_zst(path, cache, &seekable, &err);
    unsigned char buf[100];
    char want[80];
    snprintf(want, sizeof want, "offset %llu: zstd frame 2", (unsigned long long)f2);
    int rc = src ? ck_source_read(src, buf, 100, 2 * F + 50, &err) : 0;
    check(src && rc < 0 && err.errnum == EIO && strstr(err.msg, want) && strstr(err.msg, path),
          "a flipped byte in frame 2 fails its reads, naming frame and offset (%s)", err.msg);
    rc = src ? ck_source_read(src, buf, 100, 2 * F - 100, &err) : -1;
    check(rc == 0 && memcmp(buf, data + 2 * F - 100, 100) == 0,
          "the frame before it still reads (%s)", rc ? err.msg : "ok");
    ck_source_close(src);

    /* Frame 1 and 2 swapped in the seek table: 1 decompresses to the wrong
     * size (zstd knows its content size). */
    memcpy(c, z, zlen);
    wr32(c + entries + 8 + 4, 77);
    wr32(c + entries + 24 + 4, (uint32_t)F);
    put_file(tmp_path(path, "dsize.zst"), c, zlen);
    src = open_zst(path, cache, &seekable, &err);
    rc = src ? ck_source_read(src, buf, 10, F + 5, &err) : 0;
    check(src && rc < 0 && strstr(err.msg, "zstd frame 1"),
          "a frame whose decompressed size is not its entry's fails the read (%s)", err.msg);
    ck_source_close(src);

    /* Every byte of the seek table flipped, and cuts of the file: a refusal
     * or a source whose reads succeed or fail, never a crash. */
    int survived = 1;
    for (size_t i = table; i < zlen; i++) {
        memcpy(c, z, zlen);
        c[i] ^= 0xFF;
        put_file(tmp_path(path, "fuzz.zst"), c, zlen);
        src = open_zst(path, cache, &seekable, &err);
        if (src != NULL) {
            unsigned char *all = malloc(src->size ? src->size : 1);
            if (src->size <= 16 * F)
                ck_source_read(src, all, src->size, 0, &err);
            free(all);
        } else {
            survived &= err.msg[0] != '\0' && strstr(err.msg, path) != NULL;
        }
        ck_source_close(src);
    }
    for (size_t cut = 0; cut < zlen; cut += cut < 16 || zlen - cut < 64 ? 1 : zlen / 40) {
        put_file(tmp_path(path, "fuzz.zst"), z, cut);
        err.msg[0] = '\0';
        src = open_zst(path, cache, &seekable, &err);
        survived &= src != NULL || strstr(err.msg, path) != NULL;
        ck_source_close(src);
    }
    check(survived, "flipped seek-table bytes and cut files: refused with a message or read");
    free(c);
    free(z);
    free(data);
}

/* The writer's copies: random sequences of copies from a seekable file
 * (its frames of varied sizes, an empty one and a skippable one among
 * them), writes and payload hints.  Every result decompresses to the
 * bytes named, reads back through the seekable source (seek-table
 * checksums included), and a copy of the whole file is the file itself,
 * byte for byte. */
static void test_writer_copies(ck_page_cache *cache)
{
    const size_t L = F + 300000;
    const chunk chunks[] = {{1000, false}, {70000, false}, {1, false}, {0, false},
                            {500000, false}, {64, true}, {F - 571001, false},
                            {300000, false}};
    unsigned char *data = plaintext(L), *fresh = plaintext(L);
    unsigned char *want = malloc(4 * L), *got = malloc(4 * L + 1);
    int bad = 0, identical = 0, trials = 0;
    for (int osums = 0; osums < 2; osums++) {
        size_t zlen;
        char opath[512], npath[512];
        tmp_path(opath, osums ? "copy-old-sums.zst" : "copy-old.zst");
        tmp_path(npath, "copy-new.zst");
        unsigned char *z = build_seekable(data, chunks, sizeof chunks / sizeof *chunks, osums,
                                          &zlen);
        put_file(opath, z, zlen);
        ck_error err = {0};
        bool seekable = false;
        ck_source *old = open_zst(opath, cache, &seekable, &err);
        check(old != NULL && seekable && old->size == L, "copies: the old file opens (%s)",
              old ? "ok" : err.msg);
        if (old == NULL) {
            free(z);
            continue;
        }
        for (int t = 0; t < 40; t++, trials++) {
            bool nsums = t % 4 == 3 ? !osums : osums;
            int fd = open(npath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            ck_wrap_writer *w = ck_zstd_writer_new(fd, npath, 1, nsums, &err);
            size_t n = 0;
            int rc = w ? 0 : -1;
            uint64_t prev_end = 0;
            for (int op = 0; rc == 0 && (t == 0 ? op < 1 : op < 1 + (int)(rnd() % 8)); op++) {
                unsigned kind = t == 0 ? 0 : rnd() % 4;
                if (kind <= 1) {            /* a copy, often continuing the last one */
                    uint64_t off = t == 0 ? 0 : rnd() % 2 ? prev_end : rnd() % L;
                    if (off > L)
                        off = L;
                    uint64_t len = t == 0 ? L : rnd() % (L - off + 1);
                    if (n + len > 4 * L)
                        len = 4 * L - n;
                    rc = w->ops->copy(w, old, off, len, &err);
                    memcpy(want + n, data + off, len);
                    n += len;
                    prev_end = off + len;
                } else if (kind == 2) {
                    size_t len = rnd() % 3 ? rnd() % 5000 : rnd() % (F + 1000);
                    if (n + len > 4 * L)
                        len = 4 * L - n;
                    rc = ck_wrap_writer_write(w, fresh, len, &err);
                    memcpy(want + n, fresh, len);
                    n += len;
                } else {
                    rc = w->ops->payload(w, rnd() % 2 ? rnd() % 300000 : rnd() % 100, &err);
                }
            }
            if (rc == 0)
                rc = ck_wrap_writer_finish(w, &err);
            ck_wrap_writer_free(w);
            close(fd);
            size_t nlen;
            unsigned char *nz = get_file(npath, &nlen);
            size_t d = rc == 0 ? ZSTD_decompress(got, 4 * L + 1, nz, nlen) : 0;
            bool ok = rc == 0 && !ZSTD_isError(d) && d == n && memcmp(got, want, n) == 0;
            if (t == 0)
                identical += ok && nlen == zlen && memcmp(nz, z, zlen) == 0;
            free(nz);
            ck_source *src = ok ? open_zst(npath, cache, &seekable, &err) : NULL;
            const char *why = src ? reads_match(src, want, n, 20, &err) : "open";
            ok = ok && src != NULL && seekable && src->size == n && why == NULL;
            if (!ok && bad++ < 3)
                check(false, "copies: trial %d (old sums %d, new sums %d): %s", t, osums, nsums,
                      rc ? err.msg : why ? why : "zstd -d differs");
            ck_source_close(src);
        }
        ck_source_close(old);
        free(z);
    }
    check(bad == 0, "copies: %d random sequences of copies, writes and payloads give the "
          "bytes named, and read back", trials);
    check(identical == 2, "copies: a copy of a whole seekable file (with and without "
          "checksums) is that file, byte for byte");
    free(data);
    free(fresh);
    free(want);
    free(got);
}

void test_zstd(void)
{
    ck_error err = {0};
    ck_page_cache *small = ck_page_cache_new(F, false, &err);
    ck_page_cache *large = ck_page_cache_new(64u << 20, false, &err);
    test_writer_sizes(small, large);
    test_shared_cache(small);
    test_writer_refusals();
    test_checksums(small);
    test_big_frame(large);
    test_zstd_command(small);
    test_bad_seek_tables(small);
    test_writer_copies(small);
    ck_page_cache_free(small);
    ck_page_cache_free(large);
}
