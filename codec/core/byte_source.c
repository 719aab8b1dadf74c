/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* O_TMPFILE, memfd_create */
#include "byte_source.h"
#include "model_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int file_read_at(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = pread(src->fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ck_fail_errno(err, errno, "%s: offset %llu: read failed", src->path,
                                 (unsigned long long)off);
        }
        if (n == 0)
            return ck_fail(err, EIO, "%s: offset %llu: unexpected end of file (file changed?)",
                           src->path, (unsigned long long)off);
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

static void file_destroy(ck_source *src)
{
    if (src->fd >= 0)
        close(src->fd);
}

static const struct ck_source_ops file_ops = {
    .read_at = file_read_at,
    .destroy = file_destroy,
};

static void wrapped_destroy(ck_source *src)
{
    (void)src; /* the fd belongs to the caller */
}

static const struct ck_source_ops wrapped_ops = {
    .read_at = file_read_at,
    .destroy = wrapped_destroy,
};

ck_source *ck_source_wrap_fd(int fd, uint64_t size, const char *name, ck_error *err)
{
    ck_source *src = calloc(1, sizeof *src);
    char *copy = strdup(name);
    if (src == NULL || copy == NULL) {
        free(src);
        free(copy);
        ck_nomem(err, name);
        return NULL;
    }
    *src = (ck_source){.ops = &wrapped_ops, .path = copy, .size = size, .fd = fd, .wd = -1};
    return src;
}

static int zeros_read_at(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err)
{
    if (off > src->size || len > src->size - off)
        return ck_fail(err, EIO, "%s: offset %llu: past its %llu bytes", src->path,
                       (unsigned long long)off, (unsigned long long)src->size);
    memset(buf, 0, len);
    return 0;
}

static const struct ck_source_ops zeros_ops = {
    .read_at = zeros_read_at,
    .destroy = wrapped_destroy,
};

ck_source *ck_source_zeros(uint64_t size, const char *name, ck_error *err)
{
    ck_source *src = ck_source_wrap_fd(-1, size, name, err);
    if (src != NULL) {
        src->ops = &zeros_ops;
        src->computed = true;
    }
    return src;
}

/* A view reads through the source it stands for, with that source's lock:
 * the source, and its page cache, stay its model's. */
static int view_read_at(ck_source *src, void *buf, size_t len, uint64_t off, ck_error *err)
{
    return ck_source_read(src->inner, buf, len, src->inner_off + off, err);
}

static int view_read_some(ck_source *src, void *buf, size_t len, uint64_t off, size_t *got,
                          ck_error *err)
{
    return ck_source_read_some(src->inner, buf, len, src->inner_off + off, got, err);
}

static void view_destroy(ck_source *src)
{
    (void)src; /* the inner source is its model's to close */
}

static const struct ck_source_ops view_ops = {
    .read_at = view_read_at,
    .read_some = view_read_some,
    .destroy = view_destroy,
};

ck_source *ck_source_view(ck_source *inner, ck_error *err)
{
    ck_source *src = calloc(1, sizeof *src);
    char *copy = strdup(inner->path);
    if (src == NULL || copy == NULL) {
        free(src);
        free(copy);
        ck_nomem(err, inner->path);
        return NULL;
    }
    *src = *inner;
    src->ops = &view_ops;
    src->path = copy;
    src->serial = NULL; /* the inner source's own is taken by its reads */
    src->inner = inner;
    src->inner_off = 0;
    return src;
}

ck_source *ck_source_slice(ck_source *inner, uint64_t off, uint64_t len, const char *name,
                           ck_error *err)
{
    if (off > inner->size || len > inner->size - off) {
        ck_fail(err, EINVAL, "%s: offset %" PRIu64 ": %" PRIu64 " bytes, past its end (%" PRIu64
                " bytes)", inner->path, off, len, inner->size);
        return NULL;
    }
    ck_source *src = ck_source_view(inner, err);
    char *copy = src == NULL ? NULL : strdup(name);
    if (copy == NULL) {
        ck_source_close(src);
        ck_nomem(err, inner->path);
        return NULL;
    }
    free(src->path);
    src->path = copy;
    src->inner_off = off;
    src->size = len;
    src->fd = -1; /* its offsets are not the file's: nothing may splice from it */
    src->watch = NULL;
    return src;
}

ck_source *ck_source_open_file(const char *path, ck_error *err)
{
    struct stat st;
    int fd = ck_open_regular(AT_FDCWD, path, O_RDONLY, 0, &st);
    if (fd < 0 && st.st_mode != 0) {
        ck_fail(err, EINVAL, "%s: not a regular file", path);
        return NULL;
    }
    if (fd < 0) {
        ck_fail_errno(err, errno, "%s: cannot open", path);
        return NULL;
    }
    return ck_source_adopt_fd(fd, path, err);
}

ck_source *ck_source_adopt_fd(int fd, const char *path, ck_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        ck_fail_errno(err, errno, "%s: cannot stat", path);
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        ck_fail(err, EINVAL, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    ck_source *src = calloc(1, sizeof *src);
    char *copy = strdup(path);
    if (src == NULL || copy == NULL) {
        free(src);
        free(copy);
        close(fd);
        ck_nomem(err, path);
        return NULL;
    }
    src->ops = &file_ops;
    src->path = copy;
    src->size = (uint64_t)st.st_size;
    src->dev = st.st_dev;
    src->ino = st.st_ino;
    src->file_size = (uint64_t)st.st_size;
    src->mtime = st.st_mtim;
    src->fd = fd;
    src->wd = -1;
    return src;
}

int ck_source_check_fd(ck_source *src, uint64_t end, ck_error *err)
{
    struct stat st;
    if (fstat(src->fd, &st) < 0)
        return ck_fail_errno(err, errno, "%s: cannot stat", src->path);
    if ((uint64_t)st.st_size < end)
        return ck_fail(err, EIO, "%s: truncated to %lld bytes since it was mounted; the bytes "
                       "up to offset %llu are gone (remount)", src->path,
                       (long long)st.st_size, (unsigned long long)end);
    if ((uint64_t)st.st_size != src->file_size)
        return ck_fail(err, EIO, "%s: rewritten in place since it was mounted (its size "
                       "changed); its bytes are no longer the ones indexed (remount)", src->path);
    if (ck_source_written(src, &st.st_mtim))
        return ck_fail(err, EIO, "%s: rewritten in place since it was mounted (it was written "
                       "to); its bytes are no longer the ones indexed (remount)", src->path);
    return 0;
}

bool ck_source_written(ck_source *src, const struct timespec *mtime)
{
    if (mtime->tv_sec == src->mtime.tv_sec && mtime->tv_nsec == src->mtime.tv_nsec)
        return false;
    if (ck_watch_written(src->watch, src->wd))
        return true;
    src->mtime = *mtime; /* touched, not written */
    return false;
}

void ck_source_close(ck_source *src)
{
    if (src == NULL)
        return;
    src->ops->destroy(src);
    free(src->path);
    free(src);
}

int ck_scratch_fd(bool in_memory, const char *model, const char *what, ck_error *err)
{
    if (in_memory) {
        int fd = memfd_create("ckptfs-scratch", MFD_CLOEXEC);
        if (fd < 0)
            ck_fail_errno(err, errno, "%s: cannot create a memory file for %s", model, what);
        return fd;
    }
    const char *dir = getenv("TMPDIR");
    if (dir == NULL || *dir == '\0')
        dir = "/tmp";
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        ck_fail_errno(err, errno, "%s: cannot create a temporary file in %s for %s", model, dir,
                      what);
    return fd;
}
