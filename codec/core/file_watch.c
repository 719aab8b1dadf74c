/* SPDX-License-Identifier: Apache-2.0 */
#include "file_watch.h"

#include "storage.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

/* The watches of one mount: its model and data files, again after each
 * save (new inodes).  Past this many written files, every file counts as
 * written: the set stays bounded. */
#define WRITTEN_MAX 8192

struct ck_file_watch {
    /* One per mount, shared by the model being served and the one a save
     * opens on its own thread. */
    pthread_mutex_t lock;
    int refs;               /* the directories sharing it (a merged checkpoint's ranks) */
    int fd;                 /* inotify, non-blocking */
    int *written;           /* watch descriptors seen with IN_MODIFY */
    size_t n_written, cap;
    bool all_written;       /* an event was lost: assume the worst */
};

ck_file_watch *ck_watch_new(void)
{
    ck_file_watch *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    w->refs = 1;
    return w;
}

ck_file_watch *ck_watch_ref(ck_file_watch *w)
{
    if (w != NULL)
        __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
    return w;
}

void ck_watch_free(ck_file_watch *w)
{
    if (w == NULL || __atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    close(w->fd);
    pthread_mutex_destroy(&w->lock);
    free(w->written);
    free(w);
}

int ck_watch_add(ck_file_watch *w, int fd)
{
    char proc[64];
    /* No watch where it cannot see every writer (an IN_MODIFY watch sees
     * this machine's writes only, and another client's same-size rewrite,
     * an S3 PUT, would pass for a touch: tested with s3fs, whose save then
     * replaced that client's object).  A changed mtime then counts as a
     * write (ck_watch_written), so a `touch` there refuses the next save
     * as a change: the safe side. */
    if (w == NULL || ck_storage_shared(fd))
        return -1;
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    return inotify_add_watch(w->fd, proc, IN_MODIFY);
}

static void mark(ck_file_watch *w, int wd)
{
    if (w->all_written)
        return;
    for (size_t i = 0; i < w->n_written; i++)
        if (w->written[i] == wd)
            return;
    if (w->n_written == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        int *more = cap <= WRITTEN_MAX ? realloc(w->written, cap * sizeof *more) : NULL;
        if (more == NULL) {
            w->all_written = true;
            return;
        }
        w->written = more;
        w->cap = cap;
    }
    w->written[w->n_written++] = wd;
}

/* Read every queued event into the written set. */
static void drain(ck_file_watch *w)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            w->all_written = true; /* cannot tell any more */
        if (n <= 0)
            return;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            if (ev->mask & IN_Q_OVERFLOW)
                w->all_written = true;
            else if (ev->mask & IN_MODIFY)
                mark(w, ev->wd);
            p += sizeof *ev + ev->len;
        }
    }
}

void ck_watch_mark(ck_file_watch *w, int wd)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    mark(w, wd);
    pthread_mutex_unlock(&w->lock);
}

bool ck_watch_written(ck_file_watch *w, int wd)
{
    if (w == NULL || wd < 0)
        return true;
    pthread_mutex_lock(&w->lock);
    drain(w);
    bool written = w->all_written;
    for (size_t i = 0; i < w->n_written && !written; i++)
        written = w->written[i] == wd;
    pthread_mutex_unlock(&w->lock);
    return written;
}
