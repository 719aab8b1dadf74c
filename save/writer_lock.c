/* SPDX-License-Identifier: Apache-2.0 */
/*
 * writer_lock: the flock'd ".<model>.ckptfs-lock" that makes a model's
 * writer the only one (see writer_lock.h), beside the model file in its
 * own directory (take_in), whatever path named it.
 */
#define _GNU_SOURCE
#include "writer_lock.h"

#include "../codec/core/model_dir.h"
#include "../codec/core/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tries at taking a lock file that its holder removes as we open it. */
#define LOCK_TRIES 100
/* How long a mount waits for an unmounted daemon's last save. */
#define UNMOUNT_WAIT_MS 60000

/* The lock file's text: "PID WHERE\nhost HOST\n" (the second line since
 * issue 28; older ones wrote the first alone). */
#define LOCK_TEXT_MAX (PATH_MAX + 32 + HOST_NAME_MAX + 8)

/* The holder, from the lines it wrote; where and host point into text
 * (host "" when not written).  Returns the pid, or 0 when the first line
 * is not one. */
static long holder(int fd, char text[LOCK_TEXT_MAX], char **where, char **host)
{
    ssize_t n = pread(fd, text, LOCK_TEXT_MAX - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    char *end = text + strcspn(text, "\n");
    *host = end; /* "" */
    if (*end == '\n') {
        char *second = end + 1;
        second[strcspn(second, "\n")] = '\0';
        if (strncmp(second, "host ", 5) == 0)
            *host = second + 5;
    }
    *end = '\0';
    /* Any process may have written it: each line stays one line. */
    for (char *c = text; c < end; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    for (char *c = *host; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    long pid = strtol(text, where, 10);
    *where += **where == ' ';
    return pid > 0 ? pid : 0;
}

/* This machine's name, as lock files record it. */
static void this_host(char out[HOST_NAME_MAX + 1])
{
    if (gethostname(out, HOST_NAME_MAX + 1) < 0)
        out[0] = '\0';
    out[HOST_NAME_MAX] = '\0';
}

/* Whether path is a mount point now: /proc/self/mounts, whose second
 * field escapes space, tab, newline and backslash in octal. */
static bool mounted(const char *path)
{
    FILE *f = fopen("/proc/self/mounts", "re");
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (f != NULL && !found && getline(&line, &cap, f) > 0) {
        char *p = strchr(line, ' '), *q, *out;
        if (p == NULL)
            continue;
        for (q = out = ++p; *q != '\0' && *q != ' ';) {
            if (q[0] == '\\' && q[1] >= '0' && q[1] <= '3' && q[2] >= '0' && q[2] <= '7' &&
                q[3] >= '0' && q[3] <= '7') {
                *out++ = (char)((q[1] - '0') << 6 | (q[2] - '0') << 3 | (q[3] - '0'));
                q += 4;
            } else {
                *out++ = *q++;
            }
        }
        *out = '\0';
        found = strcmp(p, path) == 0;
    }
    free(line);
    if (f != NULL)
        fclose(f);
    return found;
}

/* A holder whose mount point is gone is a daemon finishing its last save
 * after an unmount: a new mount waits for it (and then reads the saved
 * file) instead of being refused.  True once the lock is ours. */
static bool waited_for_unmounting_holder(int fd)
{
    char text[LOCK_TEXT_MAX], *where, *host;
    if (holder(fd, text, &where, &host) == 0 || where[0] != '/' || mounted(where)) {
        errno = EWOULDBLOCK;
        return false;
    }
    for (int i = 0; i < UNMOUNT_WAIT_MS / 20; i++) {
        usleep(20000);
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return true;
        if (errno != EWOULDBLOCK)
            return false;
    }
    errno = EWOULDBLOCK;
    return false;
}

/* The refusal, naming the holder. */
static int refuse(const char *model, const char *lock, int fd, ck_error *err)
{
    char text[LOCK_TEXT_MAX], *where, *host;
    long pid = holder(fd, text, &where, &host);
    if (pid <= 0)
        return ck_fail(err, EBUSY, "%s: mounted writable by another ckptfs (it holds %s); "
                       "mount it -o ro, or unmount that first", model, lock);
    if (where[0] == '/')
        return ck_fail(err, EBUSY, "%s: mounted writable by pid %ld at %s; mount it -o ro, "
                       "or unmount that first", model, pid, where);
    return ck_fail(err, EBUSY, "%s: being written by pid %ld%s%s%s; mount it -o ro, or wait "
                   "for it to finish", model, pid, *where ? " (" : "", where, *where ? ")" : "");
}

/* On storage other machines share, flock keeps off only this machine's
 * writers: a FUSE filesystem's locks stay in this kernel, and NFS, SMB
 * and Lustre forward them or not by how they are mounted.  A lock file
 * that another host wrote, and did not remove, may then be a live
 * writer's there, which our flock cannot see: refused, for that host or
 * a person to remove.  0 when fd (locked by us) is no such file. */
static int other_host(int dir_fd, int fd, const char *model, const char *lock, ck_error *err)
{
    char text[LOCK_TEXT_MAX], *where, *host, here[HOST_NAME_MAX + 1];
    ck_storage storage;
    long pid = holder(fd, text, &where, &host);
    this_host(here);
    if (pid == 0 || host[0] == '\0' || strcmp(host, here) == 0 ||
        ck_storage_of(dir_fd, &storage) < 0 || !storage.shared)
        return 0;
    return ck_fail(err, EBUSY, "%s: mounted writable on host %s by pid %ld%s%s, as %s says; "
                   "locks on %s do not reach other machines, so this one cannot tell whether "
                   "that writer is still there: unmount it there, or remove %s if it is gone",
                   model, host, pid, *where ? " at " : "", where, lock, storage.name, lock);
}

/* Whether fd is still the lock file: a holder that released the lock
 * removed the file first, and a new one may be there now. */
static bool still_there(int fd, const ck_writer_lock *l)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(l->dir_fd, l->path, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino && S_ISREG(a.st_mode);
}

/* Take l->path (relative to l->dir_fd; shown as shown) for model. */
static int take(ck_writer_lock *l, const char *model, const char *shown, const char *where,
                bool wait, ck_error *err)
{
    for (int tries = 0; tries < LOCK_TRIES; tries++) {
        bool mine = true;
        struct stat st;
        /* Not ours until we created it: another user may have put a FIFO
         * (or a device) there, whose open would wait for ever. */
        int fd = ck_open_regular(l->dir_fd, l->path, O_RDWR | O_CREAT | O_NOFOLLOW, 0644, &st);
        int open_errno = errno;
        if (fd < 0 && errno == EACCES) {
            /* Left by another user: flock needs no write access. */
            fd = ck_open_regular(l->dir_fd, l->path, O_RDONLY | O_NOFOLLOW, 0, &st);
            mine = false;
        }
        if (fd < 0 && st.st_mode != 0)
            return ck_fail(err, EINVAL, "%s: the lock file %s is %s, not a regular file "
                           "(not one ckptfs made); remove it", model, shown,
                           ck_file_kind(st.st_mode));
        if (fd < 0)
            return ck_fail_errno(err, open_errno, "%s: cannot create the lock file %s (a writable "
                                 "mount writes in the model's directory; mount it -o ro)",
                                 model, shown);
        if (flock(fd, LOCK_EX | LOCK_NB) < 0 &&
            !(errno == EWOULDBLOCK && wait && waited_for_unmounting_holder(fd))) {
            int e = errno;
            if (e == EWOULDBLOCK)
                refuse(model, shown, fd, err);
            else
                ck_fail_errno(err, e, "%s: cannot lock %s", model, shown);
            close(fd);
            return -1;
        }
        if (still_there(fd, l)) {
            if (other_host(l->dir_fd, fd, model, shown, err) < 0) {
                close(fd);
                return -1;
            }
            if (mine) {
                l->fd = fd;
                ck_writer_lock_note(l, getpid(), where);
                return 0;
            }
            /* A stale one we cannot rewrite: locked, so no one else
             * uses it; replace it with our own. */
            if (unlinkat(l->dir_fd, l->path, 0) < 0) {
                ck_fail_errno(err, errno, "%s: cannot replace the stale lock file %s", model,
                              shown);
                close(fd);
                return -1;
            }
        }
        close(fd);
    }
    return ck_fail(err, EAGAIN, "%s: the lock file %s keeps being replaced", model, shown);
}

/* The lock of the model file d->base, beside it in d: one name for the
 * file however it was reached (a single-model mount of
 * run/rank_0/m.safetensors, the run's mount of its rank_0, a link to it),
 * so every writer of one file contends for one lock. */
static int take_in(ck_writer_lock *l, const ck_model_dir *d, const char *model,
                   const char *where, bool wait, ck_error *err)
{
    char shown[PATH_MAX];
    l->fd = -1;
    l->dir_fd = -1;
    /* A writer there could never save: refused before its lock file is
     * made (which that storage could not remove either). */
    if (ck_storage_may_replace(d->fd, model, err) < 0)
        return -1;
    int n = snprintf(l->path, sizeof l->path, ".%s.ckptfs-lock", d->base);
    if (n < 0 || (size_t)n >= sizeof l->path)
        return ck_fail(err, ENAMETOOLONG, "%s: path too long", model);
    /* The lock's own descriptor of the directory: the model's may go first. */
    if ((l->dir_fd = fcntl(d->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return ck_fail_errno(err, errno, "%s: cannot open its directory", model);
    if (take(l, model, ck_dir_join(d, l->path, shown, sizeof shown), where, wait, err) == 0)
        return 0;
    close(l->dir_fd);
    l->dir_fd = -1;
    return -1;
}

int ck_writer_lock_take(ck_writer_lock *l, const char *model, const char *where,
                        ck_error *err)
{
    l->fd = -1;
    l->dir_fd = -1;
    ck_model_dir *d = ck_dir_open(model, err);
    int rc = d == NULL ? -1 : take_in(l, d, model, where, true, err);
    ck_dir_unref(d);
    return rc;
}

int ck_writer_lock_take_at(ck_writer_lock *l, int dir_fd, const char *dir_path,
                           const char *name, const char *where, ck_error *err)
{
    char model[PATH_MAX];
    l->fd = -1;
    l->dir_fd = -1;
    int n = snprintf(model, sizeof model, "%s/%s", dir_path, name);
    if (n < 0 || (size_t)n >= sizeof model)
        return ck_fail(err, ENAMETOOLONG, "%s/%s: path too long", dir_path, name);
    ck_model_dir *d = ck_dir_in(dir_fd, dir_path, name, err);
    int rc = d == NULL ? -1 : take_in(l, d, model, where, false, err);
    ck_dir_unref(d);
    return rc;
}

void ck_writer_lock_note(ck_writer_lock *l, pid_t pid, const char *where)
{
    char line[LOCK_TEXT_MAX], host[HOST_NAME_MAX + 1];
    if (l->fd < 0)
        return;
    this_host(host);
    int n = snprintf(line, sizeof line, "%ld %s\nhost %s\n", (long)pid, where ? where : "",
                     host);
    if (n < 0 || (size_t)n >= sizeof line)
        n = snprintf(line, sizeof line, "%ld\nhost %s\n", (long)pid, host);
    /* Write, then cut: a reader never sees an empty file between.  A
     * failure only leaves another mount's refusal without the pid. */
    if (pwrite(l->fd, line, (size_t)n, 0) != n || ftruncate(l->fd, n) < 0)
        return;
}

void ck_writer_lock_release(ck_writer_lock *l)
{
    if (l == NULL || l->fd < 0)
        return;
    /* Removed while still held: whoever opened it meanwhile finds it gone
     * once it gets the lock, and makes a new one. */
    unlinkat(l->dir_fd, l->path, 0);
    close(l->fd);
    close(l->dir_fd);
    l->fd = -1;
    l->dir_fd = -1;
}
