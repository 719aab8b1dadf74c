/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include "atomic_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

const char *ck_base_name(const char *rel)
{
    const char *slash = strrchr(rel, '/');
    return slash ? slash + 1 : rel;
}

/* mkostemp's six characters, but relative to a directory descriptor:
 * O_CREAT | O_EXCL, never through a link. */
static int create_tmp(ck_atomic_file *f)
{
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char *x = f->tmp + strlen(f->tmp) - 6;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char r[6];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
            return -1;
        for (int i = 0; i < 6; i++)
            x[i] = chars[r[i] % (sizeof chars - 1)];
        int fd = openat(f->dir_fd, ck_base_name(f->tmp),
                        O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

int ck_atomic_begin(ck_atomic_file *f, const ck_model_dir *d, const char *rel, ck_error *err)
{
    f->fd = -1;
    f->tmp[0] = '\0';
    ck_dir_join(d, rel, f->target, sizeof f->target);
    const char *base = ck_base_name(rel);
    int n = snprintf(f->rel, sizeof f->rel, "%s", rel);
    int m = snprintf(f->tmp, sizeof f->tmp, "%.*s.%s.ckptfs-XXXXXX", (int)(base - rel), rel,
                     base);
    if (n < 0 || (size_t)n >= sizeof f->rel || m < 0 || (size_t)m >= sizeof f->tmp) {
        f->tmp[0] = '\0';
        f->dir_fd = -1;
        return ck_fail(err, ENAMETOOLONG, "%s: path too long", f->target);
    }
    const char *name;
    f->dir_fd = ck_dir_parent(d, rel, O_PATH, &name);
    if (f->dir_fd < 0) {
        f->tmp[0] = '\0';
        return ck_fail_errno(err, errno, "%s: cannot open its directory beneath %s "
                             "(without following a link)", f->target, d->path);
    }
    f->fd = create_tmp(f);
    if (f->fd < 0) {
        f->tmp[0] = '\0';
        ck_fail_errno(err, errno, "%s: cannot create a temporary file beside it", f->target);
        ck_atomic_abort(f);
        return -1;
    }
    /* Keep the old file's mode and owner; a new file gets 0644 less umask. */
    struct stat st;
    if (fstatat(f->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (fchmod(f->fd, st.st_mode & 07777) < 0 ||
            (fchown(f->fd, st.st_uid, st.st_gid) < 0 && errno != EPERM)) {
            ck_fail_errno(err, errno, "%s: cannot copy mode and owner", f->target);
            ck_atomic_abort(f);
            return -1;
        }
    } else {
        mode_t mask = umask(0);
        umask(mask);
        fchmod(f->fd, 0644 & ~mask);
    }
    return 0;
}

static int fsync_dir(const ck_atomic_file *f, ck_error *err)
{
    int fd = openat(f->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ck_fail_errno(err, errno, "%s: cannot open its directory", f->target);
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc < 0)
        return ck_fail_errno(err, saved, "%s: fsync of its directory failed", f->target);
    return 0;
}

int ck_atomic_sync(ck_atomic_file *f, ck_error *err)
{
    if (fsync(f->fd) < 0) {
        ck_fail_errno(err, errno, "%s: fsync of the new version failed", f->target);
        ck_atomic_abort(f);
        return -1;
    }
    if (close(f->fd) < 0) {
        f->fd = -1;
        ck_fail_errno(err, errno, "%s: close of the new version failed", f->target);
        ck_atomic_abort(f);
        return -1;
    }
    f->fd = -1;
    return 0;
}

int ck_atomic_rename(ck_atomic_file *f, ck_error *err)
{
    if (renameat(f->dir_fd, ck_base_name(f->tmp), f->dir_fd, ck_base_name(f->rel)) < 0)
        return ck_fail_errno(err, errno, "%s: rename of the new version failed", f->target);
    f->tmp[0] = '\0';
    return fsync_dir(f, err);
}

int ck_atomic_commit(ck_atomic_file *f, ck_error *err)
{
    if (ck_atomic_sync(f, err) < 0)
        return -1;
    int rc = ck_atomic_rename(f, err);
    ck_atomic_abort(f); /* closes; the temporary file is gone unless the rename failed */
    return rc;
}

void ck_atomic_abort(ck_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp[0] != '\0' && f->dir_fd >= 0)
        unlinkat(f->dir_fd, ck_base_name(f->tmp), 0);
    f->tmp[0] = '\0';
    if (f->dir_fd >= 0)
        close(f->dir_fd);
    f->dir_fd = -1;
}

int ck_atomic_cleanup(const ck_model_dir *d, const char *rel, uid_t owner)
{
    char prefix[PATH_MAX + 16];
    const char *name;
    int dfd = ck_dir_parent(d, rel, O_RDONLY, &name);
    if (dfd < 0)
        return 0;
    int plen = snprintf(prefix, sizeof prefix, ".%s.ckptfs-", name);
    DIR *dir = fdopendir(dfd);
    if (dir == NULL) {
        close(dfd);
        return 0;
    }
    int removed = 0;
    struct dirent *de;
    struct stat st;
    while ((de = readdir(dir)) != NULL) {
        /* mkostemp's six characters follow the prefix. */
        if (strncmp(de->d_name, prefix, (size_t)plen) != 0 ||
            strlen(de->d_name) != (size_t)plen + 6)
            continue;
        /* Only what the model's owner could have made: nobody else's file
         * is removed, whatever its name. */
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != owner)
            continue;
        removed += unlinkat(dfd, de->d_name, 0) == 0;
    }
    closedir(dir);
    return removed;
}

/* n bytes as a person reads them: 1.5 GiB, 340 MiB, 12 KiB, 900 bytes. */
static void human(uint64_t n, char *buf, size_t cap)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n < 1024) {
        snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
        return;
    }
    double v = (double)n / 1024;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof unit / sizeof unit[0])
        v /= 1024, u++;
    snprintf(buf, cap, v < 10 ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

uint64_t ck_atomic_free_space(const ck_model_dir *d)
{
    struct statvfs sv;
    return fstatvfs(d->fd, &sv) < 0 ? UINT64_MAX : (uint64_t)sv.f_bavail * sv.f_frsize;
}

void ck_atomic_space_note(const ck_model_dir *d, uint64_t need, uint64_t free_before,
                          ck_error *err)
{
    if (err->errnum != ENOSPC || free_before == UINT64_MAX)
        return;
    char needs[32], had[32], said[CK_ERROR_MSG_MAX];
    human(need, needs, sizeof needs);
    human(free_before, had, sizeof had);
    memcpy(said, err->msg, sizeof said);
    ck_fail(err, ENOSPC, "%s; the new version needs about %s in %s, where %s was free", said,
            needs, d->path, had);
}
