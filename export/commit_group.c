#define _GNU_SOURCE
#include "commit_group.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOURNAL_MAGIC "ckptfs-journal 1\n"
#define JOURNAL_END "end\n"
#define JOURNAL_MAX ((size_t)CK_GROUP_MAX * 2 * PATH_MAX)

/* The model's directory (dir) and the journal's path beside it. */
static int model_paths(const char *model, char dir[PATH_MAX], char journal[PATH_MAX],
                       ck_error *err)
{
    char a[PATH_MAX], b[PATH_MAX];
    if (strlen(model) >= PATH_MAX)
        return ck_fail(err, ENAMETOOLONG, "%s: path too long", model);
    strcpy(a, model);
    strcpy(b, model);
    strcpy(dir, dirname(a));
    int n = snprintf(journal, PATH_MAX, "%s/.%s.ckptfs-journal", dir, basename(b));
    if (n < 0 || n >= PATH_MAX)
        return ck_fail(err, ENAMETOOLONG, "%s: path too long", model);
    return 0;
}

int ck_group_begin(ck_commit_group *g, const char *model, ck_error *err)
{
    *g = (ck_commit_group){0};
    return ck_group_add(g, model, err) < 0 ? -1 : 0;
}

int ck_group_add(ck_commit_group *g, const char *target, ck_error *err)
{
    if (g->n == CK_GROUP_MAX)
        return ck_fail(err, EMFILE, "%s: too many files in one save", target);
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 4;
        ck_atomic_file *f = realloc(g->files, cap * sizeof *f);
        if (f == NULL)
            return ck_fail(err, ENOMEM, "%s: out of memory", target);
        g->files = f;
        g->cap = cap;
    }
    ck_atomic_file *f = &g->files[g->n];
    if (ck_atomic_begin(f, target, err) < 0)
        return -1;
    g->n++;
    return f->fd;
}

void ck_group_abort(ck_commit_group *g)
{
    for (size_t i = 0; i < g->n; i++) {
        if (g->committed)
            g->files[i].tmp[0] = '\0'; /* the next mount renames it */
        ck_atomic_abort(&g->files[i]);
    }
    free(g->files);
    *g = (ck_commit_group){0};
}

/* p relative to dir ("dir/x/y" -> "x/y"). */
static const char *relative(const char *dir, const char *p)
{
    size_t n = strlen(dir);
    if (strncmp(p, dir, n) != 0 || p[n] != '/')
        return NULL;
    return p + n + 1;
}

static int put(int fd, const void *p, size_t n)
{
    return write(fd, p, n) == (ssize_t)n ? 0 : -1;
}

/* Write the journal through a temporary file and rename it into place:
 * the commit point. */
static int write_journal(const ck_commit_group *g, const char *dir, const char *journal,
                         ck_error *err)
{
    const char *model = g->files[0].target;
    ck_atomic_file j;
    if (ck_atomic_begin(&j, model, err) < 0)
        return -1;
    strcpy(j.target, journal);
    int rc = put(j.fd, JOURNAL_MAGIC, strlen(JOURNAL_MAGIC));
    for (size_t k = 1; k <= g->n && rc == 0; k++) {
        const ck_atomic_file *f = &g->files[k % g->n]; /* the model last */
        const char *tmp = relative(dir, f->tmp), *target = relative(dir, f->target);
        if (tmp == NULL || target == NULL) {
            ck_atomic_abort(&j);
            return ck_fail(err, EINVAL, "%s: %s is not inside the model's directory", model,
                           f->target);
        }
        rc = put(j.fd, tmp, strlen(tmp) + 1) | put(j.fd, target, strlen(target) + 1);
    }
    if (rc == 0)
        rc = put(j.fd, JOURNAL_END, strlen(JOURNAL_END));
    if (rc < 0) {
        ck_fail_errno(err, errno, "%s: cannot write the save's journal %s", model, journal);
        ck_atomic_abort(&j);
        return -1;
    }
    return ck_atomic_commit(&j, err);
}

int ck_group_commit(ck_commit_group *g, ck_error *err)
{
    if (g->n == 1)
        return ck_atomic_commit(&g->files[0], err);
    for (size_t i = 0; i < g->n; i++)
        if (ck_atomic_sync(&g->files[i], err) < 0)
            return -1;
    char dir[PATH_MAX], journal[PATH_MAX];
    const char *model = g->files[0].target;
    if (model_paths(model, dir, journal, err) < 0 || write_journal(g, dir, journal, err) < 0)
        return -1;
    /* Committed: from here on, a failure leaves the journal for the next
     * mount to finish. */
    g->committed = true;
    for (size_t k = 1; k <= g->n; k++) {
        ck_atomic_file *f = &g->files[k % g->n];
        if (rename(f->tmp, f->target) < 0)
            return ck_fail_errno(err, errno, "%s: rename of the new %s failed; the next mount "
                                 "completes the save", model, f->target);
        f->tmp[0] = '\0';
        if (ck_fsync_parent(f->target, err) < 0)
            return -1;
    }
    if (unlink(journal) < 0)
        return ck_fail_errno(err, errno, "%s: cannot remove the journal %s", model, journal);
    return ck_fsync_parent(journal, err);
}

/* ---- recovery ---- */

/* A journal path: relative, no "..", not empty. */
static bool safe_relative(const char *p)
{
    if (p[0] == '\0' || p[0] == '/')
        return false;
    for (const char *c = p; *c; c = strchr(c, '/') ? strchr(c, '/') + 1 : c + strlen(c))
        if (strncmp(c, "..", 2) == 0 && (c[2] == '/' || c[2] == '\0'))
            return false;
    return true;
}

/* tmp must be the temporary file atomic_writer makes for target. */
static bool is_tmp_of(const char *tmp, const char *target)
{
    const char *ts = strrchr(tmp, '/'), *gs = strrchr(target, '/');
    size_t tdir = ts ? (size_t)(ts - tmp) : 0, gdir = gs ? (size_t)(gs - target) : 0;
    if (tdir != gdir || strncmp(tmp, target, tdir) != 0)
        return false;
    const char *tb = ts ? ts + 1 : tmp, *gb = gs ? gs + 1 : target;
    size_t gl = strlen(gb);
    return tb[0] == '.' && strncmp(tb + 1, gb, gl) == 0 &&
           strncmp(tb + 1 + gl, ".ckptfs-", 8) == 0 && strlen(tb + 1 + gl + 8) == 6;
}

static int fsync_dir_of(int dfd, const char *rel)
{
    char d[PATH_MAX];
    const char *slash = strrchr(rel, '/');
    if (slash == NULL)
        return fsync(dfd);
    snprintf(d, sizeof d, "%.*s", (int)(slash - rel), rel);
    int fd = openat(dfd, d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static char *read_journal(int dfd, const char *name, size_t *len, const char *journal,
                          ck_error *err)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno != ENOENT)
            ck_fail_errno(err, errno, "%s: cannot open the journal", journal);
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > JOURNAL_MAX) {
        ck_fail(err, EINVAL, "%s: not a ckptfs journal", journal);
    } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        ck_fail(err, ENOMEM, "%s: out of memory", journal);
    } else if (pread(fd, buf, (size_t)st.st_size, 0) != st.st_size) {
        ck_fail_errno(err, errno ? errno : EIO, "%s: cannot read the journal", journal);
        free(buf);
        buf = NULL;
    } else {
        buf[st.st_size] = '\0';
        *len = (size_t)st.st_size;
    }
    close(fd);
    return buf;
}

/* Check the whole journal before renaming anything. */
static int parse_journal(const char *buf, size_t len, const char *journal, ck_error *err)
{
    size_t m = strlen(JOURNAL_MAGIC), e = strlen(JOURNAL_END);
    if (len < m + e || memcmp(buf, JOURNAL_MAGIC, m) != 0 ||
        memcmp(buf + len - e, JOURNAL_END, e) != 0)
        return ck_fail(err, EINVAL, "%s: not a complete ckptfs journal", journal);
    size_t pairs = 0;
    for (size_t at = m; at < len - e; pairs++) {
        const char *tmp = buf + at;
        size_t tl = strnlen(tmp, len - e - at);
        if (at + tl + 1 >= len - e)
            return ck_fail(err, EINVAL, "%s: offset %zu: truncated entry", journal, at);
        const char *target = tmp + tl + 1;
        size_t gl = strnlen(target, len - e - (at + tl + 1));
        if (at + tl + 1 + gl + 1 > len - e || tl >= PATH_MAX || gl >= PATH_MAX)
            return ck_fail(err, EINVAL, "%s: offset %zu: truncated entry", journal, at);
        if (!safe_relative(target) || !is_tmp_of(tmp, target))
            return ck_fail(err, EINVAL, "%s: offset %zu: '%s' is not a temporary file of a "
                           "file beside the model", journal, at, tmp);
        at += tl + 1 + gl + 1;
    }
    return pairs == 0 ? ck_fail(err, EINVAL, "%s: empty journal", journal) : 0;
}

static int roll_forward(int dfd, const char *buf, size_t len, const char *journal,
                        ck_error *err)
{
    size_t at = strlen(JOURNAL_MAGIC), end = len - strlen(JOURNAL_END);
    while (at < end) {
        const char *tmp = buf + at, *target = tmp + strlen(tmp) + 1;
        at += strlen(tmp) + 1 + strlen(target) + 1;
        if (renameat(dfd, tmp, dfd, target) < 0) {
            if (errno == ENOENT)
                continue; /* renamed before the interruption */
            return ck_fail_errno(err, errno, "%s: cannot complete the interrupted save: "
                                 "rename %s", journal, tmp);
        }
        if (fsync_dir_of(dfd, target) < 0)
            return ck_fail_errno(err, errno, "%s: fsync after renaming %s", journal, tmp);
    }
    return 0;
}

int ck_group_recover(const char *model, ck_error *err)
{
    char dir[PATH_MAX], journal[PATH_MAX];
    if (model_paths(model, dir, journal, err) < 0)
        return -1;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return 0; /* opening the model will say what is wrong */
    const char *name = journal + strlen(dir) + 1;
    size_t len = 0;
    err->msg[0] = '\0';
    char *buf = read_journal(dfd, name, &len, journal, err);
    int rc = 0;
    if (buf == NULL) {
        rc = err->msg[0] ? -1 : 0;
    } else if (parse_journal(buf, len, journal, err) < 0 ||
               roll_forward(dfd, buf, len, journal, err) < 0) {
        rc = -1;
    } else if (unlinkat(dfd, name, 0) < 0 || fsync(dfd) < 0) {
        rc = ck_fail_errno(err, errno, "%s: cannot remove the journal", journal);
    } else {
        rc = 1;
    }
    free(buf);
    close(dfd);
    return rc;
}
