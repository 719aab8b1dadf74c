/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include "model_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int dir_fail(ck_error *err, int e, const char *fmt, const char *a, const char *b)
{
    if (err == NULL)
        return -1;
    return ck_fail_errno(err, e, fmt, a, b);
}

/* Split path into its directory (as spelled; "." for a bare name) and its
 * last component, and open the directory. */
static ck_model_dir *dir_open_split(const char *path, ck_error *err)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        ck_fail(err, EISDIR, "%s: not a file name", path);
        return NULL;
    }
    ck_model_dir *d = calloc(1, sizeof *d);
    if (d != NULL) {
        d->path = slash == NULL ? strdup(".")
                  : slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
        d->base = strdup(base);
    }
    if (d == NULL || d->path == NULL || d->base == NULL) {
        if (d != NULL) {
            free(d->path);
            free(d->base);
        }
        free(d);
        ck_nomem(err, path);
        return NULL;
    }
    d->refs = 1;
    d->fd = open(d->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d->fd < 0) {
        dir_fail(err, errno, "%s: cannot open its directory %s", path, d->path);
        d->refs = 0;
        ck_watch_free(d->watch);
        free(d->path);
        free(d->base);
        free(d);
        return NULL;
    }
    return d;
}

ck_model_dir *ck_dir_open(const char *model_path, ck_error *err)
{
    ck_model_dir *d = dir_open_split(model_path, err);
    struct stat st;
    if (d == NULL || fstatat(d->fd, d->base, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISLNK(st.st_mode))
        return d;
    /* A model named through a symbolic link is taken where the link
     * points, once: from here on no link is followed. */
    char *real = realpath(model_path, NULL);
    if (real == NULL)
        return d; /* a dangling link: opening the model says so */
    ck_dir_unref(d);
    d = dir_open_split(real, err);
    free(real);
    return d;
}

static void dir_free(ck_model_dir *d)
{
    if (d->fd >= 0)
        close(d->fd);
    ck_dir_unref(d->root);
    ck_watch_free(d->watch);
    free(d->path);
    free(d->base);
    free(d->below);
    free(d);
}

static int openat2_beneath(int dfd, const char *rel, int flags, mode_t mode);

ck_model_dir *ck_dir_in(int dir_fd, const char *dir_path, const char *name, ck_error *err)
{
    /* name's directory part, if any: the model's directory is that. */
    const char *slash = strrchr(name, '/');
    ck_model_dir *d = calloc(1, sizeof *d);
    if (d != NULL) {
        d->fd = -1;
        d->base = strdup(slash ? slash + 1 : name);
        d->below = slash ? strndup(name, (size_t)(slash - name)) : NULL;
        if (slash == NULL)
            d->path = strdup(dir_path);
        else if (asprintf(&d->path, "%s/%s", dir_path, d->below) < 0)
            d->path = NULL;
    }
    if (d == NULL || d->path == NULL || d->base == NULL || (slash && d->below == NULL)) {
        if (d != NULL)
            dir_free(d);
        ck_fail(err, ENOMEM, "%s/%s: out of memory", dir_path, name);
        return NULL;
    }
    d->refs = 1;
    d->fd = slash ? openat2_beneath(dir_fd, d->below, O_PATH | O_DIRECTORY, 0)
                  : openat(dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d->fd < 0) {
        ck_fail_errno(err, errno, "%s: cannot open the directory", d->path);
        dir_free(d);
        return NULL;
    }
    if (slash && (d->root = ck_dir_in(dir_fd, dir_path, ".", err)) == NULL) {
        dir_free(d);
        return NULL;
    }
    return d;
}

char *ck_path_trimmed(const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    return strndup(path, len);
}

ck_model_dir *ck_dir_itself(const char *path, struct stat *st, ck_error *err)
{
    int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fstat(dfd, st) < 0) {
        ck_fail_errno(err, errno, "%s: cannot open the directory", path);
        if (dfd >= 0)
            close(dfd);
        return NULL;
    }
    ck_model_dir *d = ck_dir_in(dfd, path, ".", err);
    close(dfd);
    return d;
}

int ck_dir_set_root(ck_model_dir *d, ck_model_dir *root, const char *below, ck_error *err)
{
    char *copy = strdup(below);
    if (copy == NULL)
        return ck_nomem(err, d->path);
    ck_dir_unref(d->root);
    free(d->below);
    d->root = ck_dir_ref(root);
    d->below = copy;
    return 0;
}

ck_model_dir *ck_dir_beneath(int root_fd, const char *below, const char *path, ck_error *err)
{
    /* The root first, then the directory beneath it: who may read its
     * files is checked from the root (ck_dir_may_read). */
    if (strchr(below, '/') != NULL) { /* openat would follow a link on the way */
        ck_fail(err, EINVAL, "%s: not a single directory name beneath the run", path);
        return NULL;
    }
    ck_model_dir *root = ck_dir_in(root_fd, path, ".", err);
    int dfd = root == NULL ? -1
                           : openat(root_fd, below, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root != NULL && dfd < 0)
        ck_fail_errno(err, errno, "%s: cannot open the directory", path);
    ck_model_dir *d = dfd < 0 ? NULL : ck_dir_in(dfd, path, ".", err);
    if (dfd >= 0)
        close(dfd);
    if (d != NULL && ck_dir_set_root(d, root, below, err) < 0) {
        ck_dir_unref(d);
        d = NULL;
    }
    ck_dir_unref(root);
    return d;
}

static bool in_groups(const ck_cred *who, gid_t g)
{
    if (who->gid == g)
        return true;
    for (size_t i = 0; i < who->n_groups; i++)
        if (who->groups[i] == g)
            return true;
    return false;
}

/* The kernel's rule without ACLs: the owner's bits for the owner, else
 * the group's for a member, else the others'. */
static bool grants(const struct stat *st, const ck_cred *who, mode_t want)
{
    mode_t bits = st->st_uid == who->uid ? st->st_mode >> 6
                  : in_groups(who, st->st_gid) ? st->st_mode >> 3
                                               : st->st_mode;
    return (bits & want) == want;
}

int ck_dir_may_read(const ck_model_dir *d, const char *rel, const ck_cred *who)
{
    char way[PATH_MAX];
    int n = d->below ? snprintf(way, sizeof way, "%s/%s", d->below, rel)
                     : snprintf(way, sizeof way, "%s", rel);
    if (n < 0 || (size_t)n >= sizeof way) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int root = d->root ? d->root->fd : d->fd;
    struct stat st;
    /* Each directory on the way, then the file: as a path walk on disk. */
    for (char *c = way; (c = strchr(c, '/')) != NULL; *c++ = '/') {
        *c = '\0';
        if (fstatat(root, way, &st, AT_SYMLINK_NOFOLLOW) < 0)
            return -1;
        if (!S_ISDIR(st.st_mode) || !grants(&st, who, S_IXOTH)) {
            errno = EACCES;
            return -1;
        }
    }
    if (fstatat(root, way, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    if (!grants(&st, who, S_IROTH)) {
        errno = EACCES;
        return -1;
    }
    return 0;
}

void ck_dir_watch_files(ck_model_dir *d)
{
    if (d->watch == NULL)
        d->watch = ck_watch_new();
}

void ck_dir_share_watch(ck_model_dir *d, ck_file_watch *w)
{
    if (d->watch == NULL)
        d->watch = ck_watch_ref(w);
}

ck_model_dir *ck_dir_ref(ck_model_dir *d)
{
    if (d != NULL) /* a save opens models on its own thread */
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
    return d;
}

void ck_dir_unref(ck_model_dir *d)
{
    if (d == NULL || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    dir_free(d);
}

static int openat2_beneath(int dfd, const char *rel, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
        .mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    long fd;
    do
        fd = syscall(SYS_openat2, dfd, rel, &how, sizeof how);
    while (fd < 0 && errno == EINTR);
    return (int)fd;
}

int ck_dir_openat(const ck_model_dir *d, const char *rel, int flags, mode_t mode)
{
    return openat2_beneath(d->fd, rel, flags, mode);
}

const char *ck_file_kind(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    }
    return "not a regular file";
}

int ck_keep_regular(int fd, struct stat *st)
{
    st->st_mode = 0;
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        int e = st->st_mode != 0 ? EINVAL : errno;
        close(fd);
        errno = e;
        return -1;
    }
    /* Back to blocking I/O, which splice and copy_file_range expect. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        st->st_mode = 0;
        errno = e;
        return -1;
    }
    return fd;
}

int ck_open_regular(int dfd, const char *path, int flags, mode_t mode, struct stat *st)
{
    int fd = ck_keep_regular(openat(dfd, path, flags | O_NONBLOCK | O_CLOEXEC, mode), st);
    /* A FIFO opened for writing alone with no reader fails with ENXIO
     * before fstat can say what it is. */
    if (fd < 0 && errno == ENXIO) {
        struct stat s;
        if (fstatat(dfd, path, &s, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(s.st_mode)) {
            *st = s;
            errno = EINVAL;
            return -1;
        }
        errno = ENXIO;
    }
    return fd;
}

int ck_dir_open_regular(const ck_model_dir *d, const char *rel, const char *shown,
                        struct stat *st, ck_error *err)
{
    char joined[PATH_MAX];
    const char *full = shown ? shown : ck_dir_join(d, rel, joined, sizeof joined);
    int fd = ck_keep_regular(ck_dir_openat(d, rel, O_RDONLY | O_NONBLOCK, 0), st);
    if (fd >= 0)
        return fd;
    int e = errno;
    if (st->st_mode != 0)
        return ck_fail(err, EINVAL, "%s: is %s, not a regular file", full,
                       ck_file_kind(st->st_mode));
    if (e == ELOOP)
        return ck_fail(err, ELOOP, "%s: a symbolic link (or beneath one); ckptfs follows "
                       "no link in the model's directory", full);
    if (e == EXDEV)
        return ck_fail(err, EPERM, "%s: leads out of the model's directory", full);
    return ck_fail_errno(err, e, "%s: cannot open", full);
}

int ck_dir_parent(const ck_model_dir *d, const char *rel, int flags, const char **name)
{
    const char *slash = strrchr(rel, '/');
    *name = slash ? slash + 1 : rel;
    if (**name == '\0' || strcmp(*name, ".") == 0 || strcmp(*name, "..") == 0) {
        errno = EINVAL;
        return -1;
    }
    if (slash == NULL)
        return ck_dir_openat(d, ".", flags | O_DIRECTORY, 0);
    char sub[PATH_MAX];
    if ((size_t)(slash - rel) >= sizeof sub) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sub, rel, (size_t)(slash - rel));
    sub[slash - rel] = '\0';
    return ck_dir_openat(d, sub, flags | O_DIRECTORY, 0);
}

int ck_dir_stat(const ck_model_dir *d, const char *rel, struct stat *st)
{
    const char *name;
    int pfd = ck_dir_parent(d, rel, O_PATH, &name);
    if (pfd < 0)
        return -1;
    int rc = fstatat(pfd, name, st, AT_SYMLINK_NOFOLLOW);
    int e = errno;
    close(pfd);
    errno = e;
    return rc;
}

int ck_dir_fsync(const ck_model_dir *d, const char *rel)
{
    const char *name;
    int pfd = ck_dir_parent(d, rel, O_RDONLY, &name);
    if (pfd < 0)
        return -1;
    int rc = fsync(pfd);
    int e = errno;
    close(pfd);
    errno = e;
    return rc;
}

const char *ck_dir_join(const ck_model_dir *d, const char *rel, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", strcmp(d->path, "/") == 0 ? "" : d->path, rel);
    return buf;
}

const char *ck_dir_rel(const ck_model_dir *d, const char *path)
{
    size_t n = strcmp(d->path, "/") == 0 ? 0 : strlen(d->path);
    if (strncmp(path, d->path, n) != 0 || path[n] != '/' || path[n + 1] == '\0')
        return NULL;
    return path + n + 1;
}

DIR *ck_list_dir(int dfd)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (d == NULL && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}
