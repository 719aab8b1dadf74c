/* SPDX-License-Identifier: Apache-2.0 */
#include "file_override.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ck_override_init(ck_file_override *o, const ck_model_dir *d, const char *rel,
                      const char *path, int fd)
{
    struct stat st;
    *o = (ck_file_override){.path = path, .fd = fd};
    if (ck_dir_stat(d, rel, &st) == 0) {
        o->exists = true;
        o->dev = st.st_dev;
        o->ino = st.st_ino;
    }
}

/* "./a/b" and "a/b" name the same file: readers build data file paths
 * as "<model's directory>/<location>", with "." for a bare model name. */
static const char *plain(const char *p)
{
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    return p;
}

static int dup_of(const ck_file_override *o, int fd)
{
    int d = fcntl(o->fd, F_DUPFD_CLOEXEC, 0);
    int e = errno;
    if (fd >= 0)
        close(fd);
    errno = e;
    return d;
}

int ck_override_fd(const ck_file_override *ov, size_t n, const char *path, int fd)
{
    if (n == 0)
        return fd;
    if (fd < 0) {
        /* Absent, or a symbolic link (never followed), which the save
         * replaces: the new file is found by its name. */
        int e = errno;
        if (e != ENOENT && e != ELOOP)
            return -1;
        for (size_t i = 0; i < n; i++)
            if ((!ov[i].exists || e == ELOOP) && strcmp(plain(ov[i].path), plain(path)) == 0)
                return dup_of(&ov[i], -1);
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fd; /* the caller's own fstat reports it */
    for (size_t i = 0; i < n; i++)
        if (ov[i].exists && ov[i].dev == st.st_dev && ov[i].ino == st.st_ino)
            return dup_of(&ov[i], fd);
    return fd;
}
