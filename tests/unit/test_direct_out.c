/* SPDX-License-Identifier: Apache-2.0 */
/*
 * direct_out: streams of writes and copies of every awkward length (none,
 * one byte, around the 4 KiB block and the buffer's size, many buffers)
 * give a file that is exactly their concatenation, built independently in
 * memory, with the descriptor's own flags back at the end; and a failed
 * write (a descriptor opened read-only) is reported, naming the offset.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../codec/core/byte_source.h"
#include "../../codec/io/direct_out.h"
#include "unit.h"

#define BUF ((size_t)CK_DIRECT_BUF)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    return unit_xorshift(&rng);
}

/* One length from the awkward ones, or any up to three buffers. */
static size_t some_len(void)
{
    static const size_t edge[] = {0, 1, 2, 511, 512, 4095, 4096, 4097, 8191, 65536,
                                  BUF - 1, BUF, BUF + 1, 2 * BUF - 4096, 2 * BUF + 7};
    size_t n = sizeof edge / sizeof edge[0];
    uint64_t r = rnd();
    return r % 3 ? edge[r / 3 % n] : (size_t)(r / 3 % (3 * BUF));
}

static int read_file(const char *path, unsigned char *buf, size_t len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    unsigned char extra;
    int more = pread(fd, &extra, 1, (off_t)len) != 0;
    close(fd);
    return got == len && !more ? 0 : -1;
}

/* A stream of steps, each a write from memory or a copy from src (whose
 * bytes are src_bytes), against its concatenation. */
static int one_stream(const char *path, ck_source *src, const unsigned char *src_bytes,
                      unsigned char *want, size_t want_cap, int steps, size_t *total)
{
    ck_error err = {0};
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int flags = fcntl(fd, F_GETFL);
    ck_direct_out *o = ck_direct_out_new(fd, path, &err);
    size_t len = 0;
    int ok = o != NULL;
    for (int s = 0; ok && s < steps; s++) {
        size_t n = some_len();
        if (n > want_cap - len)
            break;
        size_t off = (size_t)(rnd() % (src->size - n + 1));
        if (rnd() % 2)
            ok = ck_direct_out_write(o, src_bytes + off, n, &err) == 0;
        else
            ok = ck_direct_out_copy(o, src, off, n, &err) == 0;
        memcpy(want + len, src_bytes + off, n);
        len += n;
        ok = ok && ck_direct_out_len(o) == len;
    }
    ok = ok && ck_direct_out_finish(o, &err) == 0;
    ok = ok && fcntl(fd, F_GETFL) == flags;
    ck_direct_out_free(o);
    close(fd);
    if (!ok)
        fprintf(stderr, "# direct_out: %s\n", err.msg);
    *total = len;
    return ok ? 0 : -1;
}

void test_direct_out(void)
{
    char path[512], src_path[512];
    snprintf(path, sizeof path, "%s/direct.out", tmpdir);
    snprintf(src_path, sizeof src_path, "%s/direct.src", tmpdir);
    size_t src_len = 3 * BUF + 4096 + 17;
    unsigned char *src_bytes = malloc(src_len), *want = malloc(8 * BUF),
                  *got = malloc(8 * BUF);
    for (size_t i = 0; i < src_len; i++)
        src_bytes[i] = (unsigned char)rnd();
    FILE *f = fopen(src_path, "wb");
    fwrite(src_bytes, 1, src_len, f);
    fclose(f);
    ck_error err = {0};
    int sfd = open(src_path, O_RDONLY | O_CLOEXEC);
    ck_source *src = ck_source_adopt_fd(sfd, src_path, &err);

    int good = 0, tries = 40;
    for (int t = 0; t < tries && src != NULL; t++) {
        size_t len;
        if (one_stream(path, src, src_bytes, want, 8 * BUF, 1 + (int)(rnd() % 8), &len) < 0 ||
            read_file(path, got, len) < 0 || memcmp(got, want, len) != 0) {
            fprintf(stderr, "# direct_out: stream %d (%zu bytes) does not read back\n", t, len);
            break;
        }
        good++;
    }
    check(good == tries, "direct_out: %d random streams of writes and copies (lengths 0 to "
          "3 buffers, around 4 KiB and the buffer) read back as their concatenation, the "
          "descriptor's flags given back", good);

    /* A descriptor that refuses writes: the failure names the offset. */
    int ro = open(src_path, O_RDONLY | O_CLOEXEC);
    ck_direct_out *o = ck_direct_out_new(ro, "model.zst", &err);
    int rc = o == NULL ? 0 : ck_direct_out_write(o, src_bytes, 2 * BUF, &err);
    if (o != NULL && rc == 0)
        rc = ck_direct_out_finish(o, &err);
    check(o != NULL && rc < 0 && err.errnum == EBADF &&
          strstr(err.msg, "model.zst: writing the new version failed at offset 0") != NULL,
          "direct_out: a write that fails is reported with the file and offset (%s)", err.msg);
    ck_direct_out_free(o);
    close(ro);
    ck_source_close(src);
    free(src_bytes);
    free(want);
    free(got);
}
