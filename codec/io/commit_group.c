/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE
#include "commit_group.h"

#include "../core/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOURNAL_MAGIC "ckptfs-journal 1\n"
#define JOURNAL_END "end\n"
#define JOURNAL_MAX ((size_t)CK_GROUP_MAX * 2 * PATH_MAX)

/* The journal's name in the model's directory, and its full path. */
static int journal_names(const ck_model_dir *d, char name[PATH_MAX], char full[PATH_MAX],
                         ck_error *err)
{
    int n = snprintf(name, PATH_MAX, ".%s.ckptfs-journal", d->base);
    if (n < 0 || n >= PATH_MAX)
        return ck_fail(err, ENAMETOOLONG, "%s/%s: path too long", d->path, d->base);
    ck_dir_join(d, name, full, PATH_MAX);
    return 0;
}

int ck_group_begin(ck_commit_group *g, const ck_model_dir *dir, ck_error *err)
{
    char model[PATH_MAX];
    *g = (ck_commit_group){.dir = dir};
    ck_dir_join(dir, dir->base, model, sizeof model);
    if (ck_storage_may_replace(dir->fd, model, err) < 0)
        return -1;
    return ck_group_add(g, model, err) < 0 ? -1 : 0;
}

int ck_group_add(ck_commit_group *g, const char *target, ck_error *err)
{
    if (g->n == CK_GROUP_MAX)
        return ck_fail(err, EMFILE, "%s: too many files in one save", target);
    const char *rel = ck_dir_rel(g->dir, target);
    if (rel == NULL)
        return ck_fail(err, EINVAL, "%s: not inside the model's directory %s", target,
                       g->dir->path);
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 4;
        ck_atomic_file *f = realloc(g->files, cap * sizeof *f);
        if (f == NULL)
            return ck_nomem(err, target);
        g->files = f;
        g->cap = cap;
    }
    ck_atomic_file *f = &g->files[g->n];
    if (ck_atomic_begin(f, g->dir, rel, err) < 0)
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

static int put(int fd, const void *p, size_t n)
{
    return write(fd, p, n) == (ssize_t)n ? 0 : -1;
}

/* Write the journal through a temporary file and rename it into place:
 * the commit point. */
static int write_journal(const ck_commit_group *g, const char *name, const char *journal,
                         ck_error *err)
{
    const char *model = g->files[0].target;
    /* Named as a temporary file of the model, so that a crash before the
     * journal is in place leaves a file the next mount removes. */
    ck_atomic_file j;
    if (ck_atomic_begin(&j, g->dir, g->dir->base, err) < 0)
        return -1;
    snprintf(j.rel, sizeof j.rel, "%s", name);
    snprintf(j.target, sizeof j.target, "%s", journal);
    int rc = put(j.fd, JOURNAL_MAGIC, strlen(JOURNAL_MAGIC));
    for (size_t k = 1; k <= g->n && rc == 0; k++) {
        const ck_atomic_file *f = &g->files[k % g->n]; /* the model last */
        rc = put(j.fd, f->tmp, strlen(f->tmp) + 1) | put(j.fd, f->rel, strlen(f->rel) + 1);
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

int ck_group_commit_point(ck_commit_group *g, ck_error *err)
{
    /* One file is renamed as any atomic write, but on shared storage a
     * rename may not be one step: s3fs copies and deletes, and first moves
     * aside a target that is open (libfuse's .fuse_hiddenN, NFS's
     * .nfsXXXX), so a crash of the storage's client between the two leaves
     * no model.  There the journal makes the next writable open finish
     * the rename. */
    if (g->n == 1 && !ck_storage_shared(g->dir->fd))
        return ck_atomic_commit(&g->files[0], err);
    for (size_t i = 0; i < g->n; i++)
        if (ck_atomic_sync(&g->files[i], err) < 0)
            return -1;
    char name[PATH_MAX], journal[PATH_MAX];
    if (journal_names(g->dir, name, journal, err) < 0 ||
        write_journal(g, name, journal, err) < 0)
        return -1;
    /* Committed: from here on, a failure leaves the journal for the next
     * mount to finish. */
    g->committed = true;
    return 0;
}

int ck_group_finish(ck_commit_group *g, ck_error *err)
{
    if (!g->committed)
        return 0; /* renamed at the commit point */
    char name[PATH_MAX], journal[PATH_MAX];
    const char *model = g->files[0].target;
    if (journal_names(g->dir, name, journal, err) < 0)
        return -1;
    for (size_t k = 1; k <= g->n; k++) {
        ck_atomic_file *f = &g->files[k % g->n];
        if (f->tmp[0] != '\0' && ck_atomic_rename(f, err) < 0) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            return ck_fail(err, err->errnum, "%s; the next mount completes the save", why);
        }
    }
    g->committed = false; /* nothing left for a recovery: the files are in place */
    if (unlinkat(g->dir->fd, name, 0) < 0)
        return ck_fail_errno(err, errno, "%s: cannot remove the journal %s", model, journal);
    if (ck_dir_fsync(g->dir, name) < 0)
        return ck_fail_errno(err, errno, "%s: fsync of its directory failed", model);
    return 0;
}

int ck_group_commit(ck_commit_group *g, ck_error *err)
{
    return ck_group_commit_point(g, err) < 0 ? -1 : ck_group_finish(g, err);
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

static char *read_journal(const ck_model_dir *d, const char *name, size_t *len,
                          const char *journal, uid_t owner, ck_error *err)
{
    struct stat st;
    int fd = ck_dir_open_regular(d, name, NULL, &st, err);
    if (fd < 0)
        return NULL;
    char *buf = NULL;
    if (st.st_uid != owner) {
        ck_fail(err, EPERM, "%s: the journal is owned by uid %u, not by the model's owner "
                "(uid %u); not used", journal, (unsigned)st.st_uid, (unsigned)owner);
    } else if ((uint64_t)st.st_size > JOURNAL_MAX) {
        ck_fail(err, EINVAL, "%s: not a ckptfs journal", journal);
    } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        ck_nomem(err, journal);
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

/* Whether name in the directory pfd may take part in a recovery: absent
 * (0), or a regular file of the model's owner (1), with no other name
 * when it is to be renamed. */
static int check_owned(int pfd, const char *name, uid_t owner, bool one_name,
                       const char *journal, const char *rel, ck_error *err)
{
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : ck_fail_errno(err, errno, "%s: cannot stat %s", journal,
                                                   rel);
    if (!S_ISREG(st.st_mode) || st.st_uid != owner || (one_name && st.st_nlink != 1))
        return ck_fail(err, EPERM, "%s: %s is not a regular file of the model's owner "
                       "(uid %u)%s; the journal is not used", journal, rel, (unsigned)owner,
                       one_name ? " with one name" : "");
    return 1;
}

/* Check (rename false) or do (rename true) the journal's renames.  Each
 * happens in the target's own directory, opened beneath the model's
 * without following a link. */
static int roll_forward(const ck_model_dir *d, const char *buf, size_t len,
                        const char *journal, uid_t owner, bool rename, ck_error *err)
{
    size_t at = strlen(JOURNAL_MAGIC), end = len - strlen(JOURNAL_END);
    const char *target = NULL;
    while (at < end) {
        const char *tmp = buf + at, *name;
        target = tmp + strlen(tmp) + 1;
        at += strlen(tmp) + 1 + strlen(target) + 1;
        int pfd = ck_dir_parent(d, target, O_RDONLY, &name);
        if (pfd < 0)
            return ck_fail_errno(err, errno, "%s: cannot open the directory of %s beneath "
                                 "the model's (without following a link)", journal, target);
        const char *tname = ck_base_name(tmp);
        int rc = 0;
        if (!rename) {
            if ((rc = check_owned(pfd, tname, owner, true, journal, tmp, err)) > 0)
                rc = check_owned(pfd, name, owner, false, journal, target, err);
        } else if (renameat(pfd, tname, pfd, name) < 0) {
            if (errno != ENOENT) /* ENOENT: renamed before the interruption */
                rc = ck_fail_errno(err, errno, "%s: cannot complete the interrupted save: "
                                   "rename %s", journal, tmp);
        } else if (fsync(pfd) < 0) {
            rc = ck_fail_errno(err, errno, "%s: fsync after renaming %s", journal, tmp);
        }
        close(pfd);
        if (rc < 0)
            return -1;
    }
    /* The model is renamed last: a journal that ends elsewhere is not
     * this model's. */
    if (target == NULL || strcmp(target, d->base) != 0)
        return ck_fail(err, EINVAL, "%s: the journal does not end with the model %s; not used",
                       journal, d->base);
    return 0;
}

int ck_group_recover(const ck_model_dir *d, bool read_only, ck_error *err)
{
    char name[PATH_MAX], journal[PATH_MAX], model[PATH_MAX];
    if (journal_names(d, name, journal, err) < 0)
        return -1;
    ck_dir_join(d, d->base, model, sizeof model);
    struct stat st;
    if (ck_dir_stat(d, name, &st) < 0)
        return errno == ENOENT ? 0 : ck_fail_errno(err, errno, "%s: cannot stat", journal);
    if (read_only)
        return ck_fail(err, EROFS, "%s: a save was interrupted (journal %s); mount it "
                       "writable once (-o rw) to finish it", model, journal);
    /* The save is the model owner's.  A first save of a model with its
     * data file (ckptfs-convert --into OUT) may be interrupted before the
     * model's own rename: then the journal must be the caller's. */
    struct stat ms;
    int model_st = ck_dir_stat(d, d->base, &ms);
    bool absent = model_st < 0 && errno == ENOENT;
    if (!absent && (model_st < 0 || !S_ISREG(ms.st_mode)))
        return ck_fail(err, ENOENT, "%s: a journal %s is there, but the model is not a "
                       "regular file; not used", model, journal);
    uid_t owner = absent ? geteuid() : ms.st_uid;
    size_t len = 0;
    char *buf = read_journal(d, name, &len, journal, owner, err);
    if (buf == NULL)
        return -1;
    int rc = 1;
    if (parse_journal(buf, len, journal, err) < 0 ||
        roll_forward(d, buf, len, journal, owner, false, err) < 0 ||
        roll_forward(d, buf, len, journal, owner, true, err) < 0)
        rc = -1;
    else if (unlinkat(d->fd, name, 0) < 0 || ck_dir_fsync(d, name) < 0)
        rc = ck_fail_errno(err, errno, "%s: cannot remove the journal", journal);
    free(buf);
    return rc;
}
