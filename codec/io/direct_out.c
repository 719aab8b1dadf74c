/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* O_DIRECT */
#include "direct_out.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Direct writes start at multiples of this and are multiples of it long,
 * from buffers aligned to it: the page size, which the logical block of
 * every common device divides.  A device with larger blocks refuses the
 * first write with EINVAL, and the stream goes on plainly. */
#define ALIGN 4096u

struct ck_direct_out {
    int fd;
    const char *path;
    int flags;                  /* fd's own, given back at the end */
    bool direct;                /* O_DIRECT is set on fd */
    unsigned char *buf[2];
    int cur;                    /* the buffer being filled */
    size_t fill;
    uint64_t base;              /* the file offset of buf[cur][0] */
    /* The thread that writes a full buffer while the other fills.  What
     * it shares with the filling side is under mu: the buffer handed over
     * (w_*) and the first failure; direct may change in it, and is read
     * by the filling side only once the thread is idle. */
    bool threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy, stop;
    const unsigned char *w_buf;
    size_t w_len;
    uint64_t w_off;
    int w_errno;                /* the first failed write: its errno and offset */
    uint64_t w_err_off;
};

/* Back to fd's own flags: plain writes through the page cache. */
static int go_plain(ck_direct_out *o)
{
    if (!o->direct)
        return 0;
    if (fcntl(o->fd, F_SETFL, o->flags) < 0)
        return errno;
    o->direct = false;
    return 0;
}

/* All of [p, p + len) at off: 0 or an errno.  A direct write refused as
 * such (EINVAL) is done again plainly, and so is everything after it. */
static int write_all(ck_direct_out *o, const unsigned char *p, size_t len, uint64_t off)
{
    while (len > 0) {
        ssize_t n = pwrite(o->fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EINVAL && o->direct) {
            int e = go_plain(o);
            if (e != 0)
                return e;
            continue;
        }
        if (n <= 0)
            return n < 0 ? errno : EIO;
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

static void *writer_main(void *arg)
{
    ck_direct_out *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->busy && !o->stop)
            pthread_cond_wait(&o->cv, &o->mu);
        if (!o->busy)
            break;
        const unsigned char *p = o->w_buf;
        size_t len = o->w_len;
        uint64_t off = o->w_off;
        bool failed = o->w_errno != 0;  /* the file is lost anyway: write no more */
        pthread_mutex_unlock(&o->mu);
        int e = failed ? 0 : write_all(o, p, len, off);
        pthread_mutex_lock(&o->mu);
        if (e != 0) {
            o->w_errno = e;
            o->w_err_off = off;
        }
        o->busy = false;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static int write_failed(ck_direct_out *o, int e, uint64_t off, ck_error *err)
{
    return ck_fail_errno(err, e, "%s: writing the new version failed at offset %llu",
                         o->path, (unsigned long long)off);
}

/* Wait until the thread has written what it was handed; its failure, if
 * any, is this call's. */
static int wait_idle(ck_direct_out *o, ck_error *err)
{
    if (!o->threaded)
        return 0;
    pthread_mutex_lock(&o->mu);
    while (o->busy)
        pthread_cond_wait(&o->cv, &o->mu);
    int e = o->w_errno;
    uint64_t off = o->w_err_off;
    pthread_mutex_unlock(&o->mu);
    return e != 0 ? write_failed(o, e, off, err) : 0;
}

/* The full buffer goes to the thread (or is written here, without one),
 * and the other is filled next. */
static int submit(ck_direct_out *o, ck_error *err)
{
    if (!o->threaded) {
        int e = write_all(o, o->buf[o->cur], o->fill, o->base);
        if (e != 0)
            return write_failed(o, e, o->base, err);
    } else {
        if (wait_idle(o, err) < 0)
            return -1;
        pthread_mutex_lock(&o->mu);
        o->w_buf = o->buf[o->cur];
        o->w_len = o->fill;
        o->w_off = o->base;
        o->busy = true;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        o->cur ^= 1;
    }
    o->base += o->fill;
    o->fill = 0;
    return 0;
}

/* How many of want more bytes go into the buffer now (at least 1: a full
 * buffer was handed over as it filled). */
static size_t room_for(const ck_direct_out *o, uint64_t want)
{
    size_t room = CK_DIRECT_BUF - o->fill;
    return want < room ? (size_t)want : room;
}

/* n more bytes are in the buffer; a full one goes to be written. */
static int filled(ck_direct_out *o, size_t n, ck_error *err)
{
    o->fill += n;
    return o->fill == CK_DIRECT_BUF ? submit(o, err) : 0;
}

int ck_direct_out_write(ck_direct_out *o, const void *p, size_t len, ck_error *err)
{
    const unsigned char *q = p;
    while (len > 0) {
        size_t n = room_for(o, len);
        memcpy(o->buf[o->cur] + o->fill, q, n);
        if (filled(o, n, err) < 0)
            return -1;
        q += n;
        len -= n;
    }
    return 0;
}

int ck_direct_out_copy(ck_direct_out *o, ck_source *src, uint64_t off, uint64_t len,
                       ck_error *err)
{
    while (len > 0) {
        size_t n = room_for(o, len);
        if (ck_source_read(src, o->buf[o->cur] + o->fill, n, off, err) < 0 ||
            filled(o, n, err) < 0)
            return -1;
        off += n;
        len -= n;
    }
    return 0;
}

uint64_t ck_direct_out_len(const ck_direct_out *o)
{
    return o->base + o->fill;
}

int ck_direct_out_finish(ck_direct_out *o, ck_error *err)
{
    if (wait_idle(o, err) < 0)
        return -1;
    /* Every buffer written so far was full, so base is aligned: the
     * aligned part of the rest goes as the others did, its last few
     * bytes plainly (a direct write cannot end mid-block). */
    size_t head = o->direct ? o->fill & ~(size_t)(ALIGN - 1) : o->fill;
    int e = write_all(o, o->buf[o->cur], head, o->base);
    uint64_t at = o->base;
    if (e == 0) {
        at += head;
        e = go_plain(o);
    }
    if (e == 0)
        e = write_all(o, o->buf[o->cur] + head, o->fill - head, at);
    if (e != 0)
        return write_failed(o, e, at, err);
    o->base += o->fill;
    o->fill = 0;
    return 0;
}

void ck_direct_out_free(ck_direct_out *o)
{
    if (o == NULL)
        return;
    if (o->threaded) {
        pthread_mutex_lock(&o->mu);
        o->stop = true;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    go_plain(o);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o->buf[0]);
    free(o->buf[1]);
    free(o);
}

ck_direct_out *ck_direct_out_new(int fd, const char *path, ck_error *err)
{
    ck_direct_out *o = calloc(1, sizeof *o);
    if (o == NULL) {
        ck_fail(err, ENOMEM, "%s: out of memory for the output buffers", path);
        return NULL;
    }
    o->fd = fd;
    o->path = path;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    void *a = NULL, *b = NULL;
    if (posix_memalign(&a, ALIGN, CK_DIRECT_BUF) != 0 ||
        posix_memalign(&b, ALIGN, CK_DIRECT_BUF) != 0) {
        free(a);
        ck_direct_out_free(o);
        ck_fail(err, ENOMEM, "%s: out of memory for the output buffers", path);
        return NULL;
    }
    o->buf[0] = a;
    o->buf[1] = b;
    o->flags = fcntl(fd, F_GETFL);
    if (o->flags < 0) {
        ck_fail_errno(err, errno, "%s: the new version's descriptor", path);
        ck_direct_out_free(o);
        return NULL;
    }
    /* Refused where the filesystem has no direct I/O: plain writes then. */
    o->direct = fcntl(fd, F_SETFL, o->flags | O_DIRECT) == 0;
    /* Without a thread the buffers are written in turn, as they fill. */
    o->threaded = pthread_create(&o->thread, NULL, writer_main, o) == 0;
    return o;
}
