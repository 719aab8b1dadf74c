/* SPDX-License-Identifier: Apache-2.0 */
/*
 * session_loop: the single-threaded request loop, which polls the FUSE
 * device for a moment before it sleeps.
 *
 * Why: a walk (find, ls -lR, a framework opening every tensor) is a
 * chain of round trips, each sent only when the one before is answered.
 * Each costs two cross-CPU wakeups, the daemon's for the request and the
 * client's for the reply, and on a virtual machine each wakeup is an
 * interprocessor interrupt that exits to the hypervisor: on the 2-core
 * test machine they were most of a walk's time (docs/benchmarks.md).
 * After a request the loop keeps asking the device, opened O_NONBLOCK,
 * for the next one for up to busy_poll microseconds, and sleeps in poll()
 * only when none came: during a walk the daemon is awake when the next
 * request arrives, and only the client's wakeup is left.  The name and the
 * idea are the kernel's net.core.busy_poll.
 *
 * The cost is bounded: at most busy_poll microseconds of CPU after the
 * last request of a burst, nothing while idle.  Between tries the thread
 * yields, so that the clients' own threads (readers copying what was just
 * read, on as many cores as there are) run first when they are runnable.
 *
 * Another thread may ask this one for work between requests
 * (ckfs_idle_work): its eventfd is polled with the device.
 *
 * -o busy_poll defaults to 100 microseconds; polling halves walks on the
 * test machine (docs/benchmarks.md, "Busy polling").
 */
#include "session_loop.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Do the work asked for, if it was. */
static void idle_work(const ckfs_idle_work *work)
{
    uint64_t asked;
    if (work != NULL && read(work->fd, &asked, sizeof asked) == sizeof asked)
        work->run(work->arg);
}

/* Wait for the next request: poll the device until busy_poll_us have
 * passed since idle_since, then sleep until it is readable, doing the
 * work asked for meanwhile.  Asked for during a burst, the work is done
 * at its first pause, so that requests that never stop for long enough
 * to sleep cannot put it off. */
static void wait_for_request(int fd, uint64_t *idle_since, unsigned busy_poll_us,
                             const ckfs_idle_work *work)
{
    uint64_t t = now_us();
    if (*idle_since == 0) {
        *idle_since = t;
        idle_work(work);
    }
    if (t - *idle_since < busy_poll_us) {
        sched_yield();
        return;
    }
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
                          {.fd = work ? work->fd : -1, .events = POLLIN}};
    poll(p, 2, -1); /* EINTR (a signal ending the mount) is looked at by the caller */
    if (p[1].revents & POLLIN)
        idle_work(work);
    *idle_since = 0;
}

int ckfs_session_loop(struct fuse_session *se, unsigned busy_poll_us,
                      const ckfs_idle_work *work)
{
    if (busy_poll_us == 0 && work == NULL)
        return fuse_session_loop(se);
    int fd = fuse_session_fd(se);
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return fuse_session_loop(se); /* a blocking loop still serves (the work waits) */

    struct fuse_buf buf = {0};
    uint64_t idle_since = 0;
    int res = 0;
    while (!fuse_session_exited(se)) {
        res = fuse_session_receive_buf(se, &buf);
        if (res == -EAGAIN) {
            wait_for_request(fd, &idle_since, busy_poll_us, work);
            continue;
        }
        idle_since = 0;
        if (res == -EINTR)
            continue;
        if (res <= 0) /* 0: unmounted; < 0: the device failed */
            break;
        fuse_session_process_buf(se, &buf);
    }
    free(buf.mem);
    fuse_session_reset(se);
    return res < 0 && res != -EAGAIN && res != -EINTR ? res : 0;
}
