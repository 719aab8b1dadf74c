/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fhandle: a file's NFS-style handle, taken and used as the kernel's NFS
 * server does (name_to_handle_at, open_by_handle_at), for
 * tests/bats/nfs_export.bats.  This machine has no NFS client; these two
 * calls are the path an NFS server takes through a FUSE mount's export
 * operations, and after the kernel has dropped its caches they make it
 * ask the daemon for "." and "..".
 *
 *   fhandle save PATH HANDLE    write PATH's handle to the file HANDLE
 *   fhandle open MOUNT HANDLE   open the handle beneath MOUNT (any path in
 *                               the same filesystem): a file's bytes, or a
 *                               directory's names one a line, to stdout
 *   fhandle ino MOUNT HANDLE    the inode number it opens
 *
 * open_by_handle_at needs CAP_DAC_READ_SEARCH (root).  A failure prints
 * "fhandle: CALL: strerror" and exits 1.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *call)
{
    fprintf(stderr, "fhandle: %s: %s\n", call, strerror(errno));
    return 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: fhandle save PATH HANDLE | open MOUNT HANDLE | ino MOUNT HANDLE\n");
    return 2;
}

/* The handle as the file holds it: struct file_handle, then its bytes. */
static int save(const char *path, const char *out)
{
    struct file_handle *fh = malloc(sizeof *fh + MAX_HANDLE_SZ);
    int mount_id;
    if (fh == NULL)
        return fail("malloc");
    fh->handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(AT_FDCWD, path, fh, &mount_id, 0) < 0)
        return fail("name_to_handle_at");
    FILE *f = fopen(out, "wb");
    if (f == NULL)
        return fail("fopen");
    size_t n = sizeof *fh + fh->handle_bytes;
    if (fwrite(fh, 1, n, f) != n || fclose(f) != 0)
        return fail("write");
    free(fh);
    return 0;
}

static struct file_handle *load(const char *path)
{
    struct file_handle *fh = calloc(1, sizeof *fh + MAX_HANDLE_SZ);
    FILE *f = fopen(path, "rb");
    if (fh == NULL || f == NULL) {
        free(fh);
        return NULL;
    }
    size_t n = fread(fh, 1, sizeof *fh + MAX_HANDLE_SZ, f);
    fclose(f);
    if (n < sizeof *fh || fh->handle_bytes > MAX_HANDLE_SZ ||
        n != sizeof *fh + fh->handle_bytes) {
        free(fh);
        errno = EINVAL;
        return NULL;
    }
    return fh;
}

static int copy_out(int fd)
{
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
            return fail("write");
    return n < 0 ? fail("read") : 0;
}

static int list_dir(int fd)
{
    DIR *d = fdopendir(fd);
    if (d == NULL)
        return fail("fdopendir");
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            printf("%s\n", de->d_name);
    int rc = errno != 0 ? fail("readdir") : 0;
    closedir(d);
    return rc;
}

static int open_handle(const char *mount, const char *handle, bool ino_only)
{
    struct file_handle *fh = load(handle);
    if (fh == NULL)
        return fail(handle);
    int mfd = open(mount, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (mfd < 0)
        return fail("open");
    int fd = open_by_handle_at(mfd, fh, O_RDONLY | O_CLOEXEC);
    free(fh);
    close(mfd);
    if (fd < 0)
        return fail("open_by_handle_at");
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fail("fstat");
    if (ino_only) {
        printf("%llu\n", (unsigned long long)st.st_ino);
        close(fd);
        return 0;
    }
    if (S_ISDIR(st.st_mode))
        return list_dir(fd); /* closes fd */
    int rc = copy_out(fd);
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return usage();
    if (strcmp(argv[1], "save") == 0)
        return save(argv[2], argv[3]);
    if (strcmp(argv[1], "open") == 0)
        return open_handle(argv[2], argv[3], false);
    if (strcmp(argv[1], "ino") == 0)
        return open_handle(argv[2], argv[3], true);
    return usage();
}
