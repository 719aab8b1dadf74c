#define _GNU_SOURCE /* mkostemp */
#include "atomic_writer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int split_path(const char *target, char *dir, char *base, ck_error *err)
{
    char a[PATH_MAX], b[PATH_MAX];
    if (strlen(target) >= PATH_MAX)
        return ck_fail(err, ENAMETOOLONG, "%s: path too long", target);
    strcpy(a, target);
    strcpy(b, target);
    strcpy(dir, dirname(a));
    strcpy(base, basename(b));
    return 0;
}

int ck_atomic_begin(ck_atomic_file *f, const char *target, ck_error *err)
{
    char dir[PATH_MAX], base[PATH_MAX];
    f->fd = -1;
    f->tmp[0] = '\0';
    if (split_path(target, dir, base, err) < 0)
        return -1;
    strcpy(f->target, target);
    int n = snprintf(f->tmp, sizeof f->tmp, "%s/.%s.ckptfs-XXXXXX", dir, base);
    if (n < 0 || (size_t)n >= sizeof f->tmp)
        return ck_fail(err, ENAMETOOLONG, "%s: path too long", target);
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        f->tmp[0] = '\0';
        return ck_fail_errno(err, errno, "%s: cannot create a temporary file in %s", target, dir);
    }
    /* Keep the old file's mode and owner; a new file gets 0644 less umask. */
    struct stat st;
    if (stat(target, &st) == 0) {
        if (fchmod(f->fd, st.st_mode & 07777) < 0 ||
            (fchown(f->fd, st.st_uid, st.st_gid) < 0 && errno != EPERM)) {
            ck_fail_errno(err, errno, "%s: cannot copy mode and owner", target);
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

int ck_fsync_parent(const char *target, ck_error *err)
{
    char dir[PATH_MAX], base[PATH_MAX];
    if (split_path(target, dir, base, err) < 0)
        return -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ck_fail_errno(err, errno, "%s: cannot open its directory", target);
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    if (rc < 0)
        return ck_fail_errno(err, saved, "%s: fsync of its directory failed", target);
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

int ck_atomic_commit(ck_atomic_file *f, ck_error *err)
{
    if (ck_atomic_sync(f, err) < 0)
        return -1;
    if (rename(f->tmp, f->target) < 0) {
        ck_fail_errno(err, errno, "%s: rename of the new version failed", f->target);
        ck_atomic_abort(f);
        return -1;
    }
    f->tmp[0] = '\0';
    return ck_fsync_parent(f->target, err);
}

void ck_atomic_abort(ck_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->tmp[0] != '\0')
        unlink(f->tmp);
    f->tmp[0] = '\0';
}

int ck_atomic_cleanup(const char *target)
{
    char dir[PATH_MAX], base[PATH_MAX], prefix[PATH_MAX + 16];
    if (split_path(target, dir, base, NULL) < 0)
        return 0;
    int plen = snprintf(prefix, sizeof prefix, ".%s.ckptfs-", base);
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        /* mkostemp's six characters follow the prefix. */
        if (strncmp(de->d_name, prefix, (size_t)plen) != 0 || strlen(de->d_name) != (size_t)plen + 6)
            continue;
        removed += unlinkat(dirfd(d), de->d_name, 0) == 0;
    }
    closedir(d);
    return removed;
}
