/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log: what the front-end says, and where.
 *
 * A line goes to stderr in the foreground, to syslog once daemonized, and,
 * with the time, to the -o log=PATH file.  A refused operation is said so
 * with the path in the tree it concerns, and kept, with the time, as the
 * root's user.ckptfs.last_error, which a successful save clears.  The
 * operations, the replies to saves and the saver all refuse and log alike,
 * so this is apart from each of them.
 *
 * A line of the -o log file (opened by fuse/main.c before daemonizing,
 * open_log) is "TIME ckptfs[PID]: message", the ISO-8601 UTC time first;
 * the root keeps "TIME PATH: reason" as user.ckptfs.last_error, the path
 * rebuilt from the inode and name under the mount point (mount/nodes.h).
 */
#include "ckptfs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

void ckfs_iso_time(char *buf, size_t cap)
{
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* One line appended to the -o log file, in a single write so that lines of
 * several daemons sharing the file do not interleave. */
static void log_to_file(const ckfs *fs, const char *msg)
{
    char line[CKFS_LAST_ERROR_MAX + 64], when[32];
    ckfs_iso_time(when, sizeof when);
    int n = snprintf(line, sizeof line, "%s ckptfs[%ld]: %s\n", when, (long)getpid(), msg);
    if (n >= (int)sizeof line) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    if (n > 0 && write(fs->log_fd, line, (size_t)n) < 0) {
        /* Nowhere left to say it. */
    }
}

void ckfs_log(const ckfs *fs, int priority, const char *fmt, ...)
{
    char msg[CKFS_LAST_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (fs->use_syslog)
        syslog(priority, "%s", msg);
    else
        fprintf(stderr, "ckptfs: %s\n", msg);
    if (fs->log_fd >= 0)
        log_to_file(fs, msg);
}

void ckfs_refused(ckfs *fs, const char *path, const ck_error *err)
{
    char when[32];
    const char *why = err->msg[0] ? err->msg : strerror(err->errnum ? err->errnum : EIO);
    ckfs_log(fs, LOG_ERR, "%s: %s", path, why);
    ckfs_iso_time(when, sizeof when);
    snprintf(fs->last_error, sizeof fs->last_error, "%s %s: %s", when, path, why);
}
