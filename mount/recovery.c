/* SPDX-License-Identifier: Apache-2.0 */
/*
 * recovery: a failed last save's edits kept in a directory, and applied
 * again (mount/recovery.h says what the directory holds).  Only the tree's
 * own calls edit a tree here, so an edit applied again is checked as the
 * user's was.
 */
#define _GNU_SOURCE
#include "recovery.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../codec/core/byte_buf.h"
#include "../codec/core/dir_name.h"
#include "../codec/core/model_dir.h"
#include "../codec/envelope.h"

#define EDITS "edits"
#define TENSORS "tensors"
#define FORMAT_LINE "ckptfs-recovery 1"
/* An escaped name is at most 4 bytes a byte of a 255-byte directory name;
 * a line holds a verb and two of them, a reason at most a message. */
#define LINE_MAX_LEN (16 + 2 * 4 * 1024)
#define COPY_CHUNK (1u << 20)

/* ---- names in `edits` ---- */

static bool needs_escape(unsigned char c)
{
    return c <= 0x20 || c == 0x7f || c == '\\';
}

/* words: spaces separate words too (names); a reason keeps its own. */
static void put_text(FILE *f, const char *s, size_t len, bool words)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (needs_escape(c) && (words || c != ' '))
            fprintf(f, "\\x%02x", c);
        else
            putc(c, f);
    }
}

static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* One escaped word of in (up to a space or the end) into out[cap],
 * NUL-terminated; *in moves past it and one space.  Its length, or -1. */
static long take_word(const char **in, char *out, size_t cap)
{
    const char *p = *in;
    size_t n = 0;
    for (; *p != '\0' && *p != ' '; p++) {
        int c = (unsigned char)*p;
        if (c == '\\') {
            int hi = p[1] == 'x' ? hex(p[2]) : -1, lo = hi >= 0 ? hex(p[3]) : -1;
            if (lo < 0)
                return -1;
            c = hi << 4 | lo;
            p += 3;
        } else if (needs_escape((unsigned char)c)) {
            return -1;
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    *in = *p == ' ' ? p + 1 : p;
    return (long)n;
}

/* ---- keeping ---- */

typedef struct keeper {
    const tree *tr;
    int dfd;            /* the recovery directory */
    int tensors;        /* its tensors/, or -1 until needed */
    const char *path;   /* for messages */
    FILE *edits;
    ck_error *err;
} keeper;

/* The out bytes of an edited entry, from the spill file, into fd. */
static int copy_overlay(const tree *tr, const spill_area *a, int fd)
{
    uint64_t done = 0;
    char *buf = NULL;
    while (done < a->size) {
        size_t want = a->size - done > COPY_CHUNK ? COPY_CHUNK : (size_t)(a->size - done);
        loff_t in = (loff_t)(a->base + done);
        ssize_t n = buf == NULL ? copy_file_range(tr->spill_fd, &in, fd, NULL, want, 0) : -1;
        if (n < 0 && buf == NULL && errno != EINTR) { /* a memfd, another filesystem */
            buf = malloc(COPY_CHUNK);
            if (buf == NULL)
                return -1;
        }
        if (buf != NULL) {
            n = pread(tr->spill_fd, buf, want, (off_t)(a->base + done));
            if (n > 0 && ck_write_all(fd, buf, (size_t)n) < 0)
                n = -1;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* past the spill file's end: bytes never written read 0 */
            if (n < 0 || ftruncate(fd, (off_t)a->size) < 0)
                break;
            done = a->size;
            break;
        }
        done += (uint64_t)n;
    }
    free(buf);
    return done == a->size ? 0 : -1;
}

static int tensors_dir(keeper *k)
{
    if (k->tensors >= 0)
        return k->tensors;
    if (mkdirat(k->dfd, TENSORS, 0700) < 0)
        return -1;
    k->tensors = openat(k->dfd, TENSORS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return k->tensors;
}

/* tensors/DIR/NAME, made new (0600), written by fill. */
static int keep_file(keeper *k, const entry *e, const char *name)
{
    const char *dir = entry_dir_name(k->tr, e);
    int tfd = tensors_dir(k), dfd = -1, fd = -1, rc = -1;
    if (tfd < 0)
        goto out;
    if (mkdirat(tfd, dir, 0700) < 0 && errno != EEXIST)
        goto out;
    dfd = openat(tfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        goto out;
    fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        goto out;
    if (strcmp(name, "meta") == 0) {
        char meta[TREE_META_MAX];
        size_t n = entry_meta_text(k->tr, e, meta, sizeof meta);
        rc = ck_write_all(fd, meta, n);
    } else {
        rc = copy_overlay(k->tr, &e->edit->overlay, fd);
    }
    if (rc == 0)
        rc = fsync(fd);
    if (rc == 0)
        rc = fsync(dfd);
out:
    if (rc < 0)
        ck_fail_errno(k->err, errno, "%s: cannot keep %s/%s", k->path, dir, name);
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    return rc;
}

static void put_escaped(FILE *f, const char *s, size_t len)
{
    put_text(f, s, len, true);
}

static void line1(keeper *k, const char *verb, const char *a)
{
    fprintf(k->edits, "%s ", verb);
    put_escaped(k->edits, a, strlen(a));
    putc('\n', k->edits);
}

/* The lines (and files) of one entry. */
static int keep_entry(keeper *k, const entry *e)
{
    const ck_tensor *t = entry_tensor(k->tr, e);
    const edit *ed = e->edit;
    const char *dir = entry_dir_name(k->tr, e);
    if (e->deleted) {
        if (t != NULL)
            line1(k, "remove", t->dir_name);
        return 0;
    }
    if (t == NULL) {
        line1(k, "new", dir);
    } else if (strcmp(t->dir_name, dir) != 0) {
        fprintf(k->edits, "rename ");
        put_escaped(k->edits, t->dir_name, strlen(t->dir_name));
        putc(' ', k->edits);
        put_escaped(k->edits, dir, strlen(dir));
        putc('\n', k->edits);
    }
    if (ed == NULL)
        return 0;
    if (ed->no_meta)
        line1(k, "no-meta", dir);
    if (ed->no_out)
        line1(k, "no-out", dir);
    if (!ed->no_meta && (t == NULL || ed->meta_changed)) {
        if (keep_file(k, e, "meta") < 0)
            return -1;
        line1(k, "meta", dir);
    }
    if (!ed->no_out && ed->overlay.used) {
        if (keep_file(k, e, "out") < 0)
            return -1;
        line1(k, "out", dir);
    }
    return 0;
}

/* The lines in the order that applies them: removals, renames and new
 * tensors first (recovery_apply passes over the file once a kind), so
 * any order of entries will do. */
static int keep_all(keeper *k, const char *reason)
{
    const tree *tr = k->tr;
    fprintf(k->edits, FORMAT_LINE "\nmodel ");
    put_escaped(k->edits, tr->model->path, strlen(tr->model->path));
    fprintf(k->edits, "\nfile %" PRIu64 " %" PRId64 "\nreason ", (uint64_t)tr->file_st.st_size,
            (int64_t)tr->file_st.st_mtim.tv_sec * 1000000000 + tr->file_st.st_mtim.tv_nsec);
    put_text(k->edits, reason, strlen(reason), false);
    putc('\n', k->edits);
    for (size_t i = 0; i < tr->n_entries; i++)
        if (tr->entries[i].counted && keep_entry(k, &tr->entries[i]) < 0)
            return -1;
    fprintf(k->edits, "end\n");
    if (fflush(k->edits) != 0 || ferror(k->edits) || fsync(fileno(k->edits)) < 0 ||
        fsync(k->dfd) < 0)
        return ck_fail_errno(k->err, errno, "%s: cannot write %s", k->path, EDITS);
    return 0;
}

/* A new directory named NAME.recovery-<time>-<6 random hex>, in dfd. */
static int make_dir(int dfd, const char *base, char *name, size_t cap)
{
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    for (int tries = 0; tries < 16; tries++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
            r = (uint32_t)getpid() * 2654435761u + (uint32_t)tries;
        if ((size_t)snprintf(name, cap, "%s.recovery-%s-%06x", base, when, r & 0xffffff) >= cap)
            return (errno = ENAMETOOLONG), -1;
        if (mkdirat(dfd, name, 0700) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

/* Remove what a failed keep made (it holds files only two levels deep). */
static void remove_partial(int dfd, const char *name)
{
    int rd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rd >= 0) {
        int td = openat(rd, TENSORS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (td >= 0) {
            int dup_td = dup(td);
            DIR *d = dup_td >= 0 ? fdopendir(dup_td) : NULL;
            struct dirent *de;
            while (d != NULL && (de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.' && (de->d_name[1] == '\0' ||
                                             (de->d_name[1] == '.' && de->d_name[2] == '\0')))
                    continue;
                int sd = openat(td, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sd >= 0) {
                    unlinkat(sd, "meta", 0);
                    unlinkat(sd, "out", 0);
                    close(sd);
                }
                unlinkat(td, de->d_name, AT_REMOVEDIR);
            }
            if (d != NULL)
                closedir(d);
            close(td);
            unlinkat(rd, TENSORS, AT_REMOVEDIR);
        }
        unlinkat(rd, EDITS, 0);
        close(rd);
    }
    unlinkat(dfd, name, AT_REMOVEDIR);
}

int recovery_keep(const tree *tr, const char *parent, const char *reason, char *path,
                  size_t cap, ck_error *err)
{
    const ck_model_dir *md = tr->model->dir;
    if (parent == NULL && ck_envelope_is_secret(&tr->model->env))
        return ck_fail(err, EPERM, "%s: the edits are not kept: the model is %s and its "
                       "plaintext is never written beside it (-o recovery_dir=DIR keeps them "
                       "in DIR)", tr->model->path, tr->model->env.kind->adjective);
    int pfd = parent != NULL ? open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : md->fd;
    const char *where = parent != NULL ? parent : md->path;
    char name[512];
    if (pfd < 0)
        return ck_fail_errno(err, errno, "%s: cannot keep the edits in %s", tr->model->path,
                             parent);
    const char *base = strrchr(tr->model->path, '/');
    base = base != NULL ? base + 1 : tr->model->path;
    int rc = -1;
    if (make_dir(pfd, base, name, sizeof name) < 0) {
        ck_fail_errno(err, errno, "%s: cannot make a recovery directory in %s",
                      tr->model->path, where);
        goto out;
    }
    snprintf(path, cap, "%s/%s", where, name);
    keeper k = {.tr = tr, .tensors = -1, .path = path, .err = err};
    k.dfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int efd = k.dfd < 0 ? -1 : openat(k.dfd, EDITS, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                                      O_CLOEXEC, 0600);
    k.edits = efd < 0 ? NULL : fdopen(efd, "w");
    if (k.edits == NULL)
        ck_fail_errno(err, errno, "%s: cannot write %s", path, EDITS);
    else
        rc = keep_all(&k, reason);
    if (k.edits != NULL && fclose(k.edits) != 0 && rc == 0)
        rc = ck_fail_errno(err, errno, "%s: cannot write %s", path, EDITS);
    else if (k.edits == NULL && efd >= 0)
        close(efd);
    if (k.tensors >= 0)
        close(k.tensors);
    if (k.dfd >= 0)
        close(k.dfd);
    if (rc < 0)
        remove_partial(pfd, name);
out:
    if (parent != NULL)
        close(pfd);
    return rc;
}

/* ---- applying ---- */

typedef struct applier {
    tree *tr;
    const char *dir;    /* the recovery directory, for messages */
    int dfd;
    FILE *edits;
    long lineno;
    char line[LINE_MAX_LEN];
    ck_error *err;
    uint32_t *moved;    /* the renamed entries, in the order of their lines */
    size_t n_moved;
    size_t n_moved_back; /* of those, renamed to their new names */
} applier;

static int bad_line(applier *a, const char *why)
{
    return ck_fail(a->err, EINVAL, "%s/%s: line %ld: %s", a->dir, EDITS, a->lineno, why);
}

/* The next line into a->line, without its newline: 1, 0 at the end, -1. */
static int next_line(applier *a)
{
    if (fgets(a->line, sizeof a->line, a->edits) == NULL)
        return ferror(a->edits) ? ck_fail_errno(a->err, EIO, "%s/%s", a->dir, EDITS) : 0;
    a->lineno++;
    size_t n = strlen(a->line);
    if (n == 0 || a->line[n - 1] != '\n')
        return bad_line(a, "too long, or not ended");
    a->line[n - 1] = '\0';
    return 1;
}

static int rewind_edits(applier *a)
{
    a->lineno = 0;
    if (fseek(a->edits, 0, SEEK_SET) != 0)
        return ck_fail_errno(a->err, errno, "%s/%s", a->dir, EDITS);
    return 0;
}

/* The header names the model as it is now; the last line is "end"; every
 * verb is known. */
static int check_header(applier *a)
{
    static const char *const verbs[] = {"remove ", "rename ", "new ", "no-meta ", "no-out ",
                                        "meta ", "out ", "model ", "reason "};
    const struct stat *st = &a->tr->file_st;
    char want[64];
    bool ended = false;
    int rc;
    snprintf(want, sizeof want, "file %" PRIu64 " %" PRId64, (uint64_t)st->st_size,
             (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec);
    if (next_line(a) != 1 || strcmp(a->line, FORMAT_LINE) != 0)
        return ck_fail(a->err, EINVAL, "%s: not a ckptfs recovery directory (its %s does not "
                       "begin with \"" FORMAT_LINE "\")", a->dir, EDITS);
    while ((rc = next_line(a)) == 1) {
        if (ended)
            return bad_line(a, "after \"end\"");
        if (strcmp(a->line, "end") == 0) {
            ended = true;
        } else if (strncmp(a->line, "file ", 5) == 0) {
            if (strcmp(a->line, want) != 0)
                return ck_fail(a->err, ESTALE, "%s: made from %s as it was before (%s), not as "
                               "it is now (%s): not applied; copy its tensors/ by hand",
                               a->dir, a->tr->model->path, a->line, want);
        } else {
            size_t i = 0;
            while (i < sizeof verbs / sizeof verbs[0] &&
                   strncmp(a->line, verbs[i], strlen(verbs[i])) != 0)
                i++;
            if (i == sizeof verbs / sizeof verbs[0])
                return bad_line(a, "not an edit ckptfs writes");
        }
    }
    if (rc < 0)
        return -1;
    if (!ended)
        return ck_fail(a->err, EINVAL, "%s: incomplete (its %s has no \"end\"): not applied",
                       a->dir, EDITS);
    return rewind_edits(a);
}

/* The entry of directory dir, or NULL and err. */
static entry *entry_named(applier *a, const char *dir)
{
    int64_t pos = tree_lookup(a->tr, dir);
    if (pos >= 0)
        return &a->tr->entries[pos];
    char q[CK_QUOTE_BUF];
    ck_fail(a->err, ENOENT, "%s/%s: line %ld: no tensor directory '%s' in %s", a->dir, EDITS,
            a->lineno, ck_quote(q, dir, strlen(dir)), a->tr->model->path);
    return NULL;
}

static int op_remove(applier *a, const char *dir, const char *unused)
{
    (void)unused;
    entry *e = entry_named(a, dir);
    if (e == NULL)
        return -1;
    if ((entry_has_meta(e) && entry_unlink(a->tr, e, true, a->err) < 0) ||
        (entry_has_out(e) && entry_unlink(a->tr, e, false, a->err) < 0))
        return -1;
    return tree_rmdir(a->tr, e, a->err);
}

/* A rename in two steps, every tensor first to a name of its own and then
 * to its new one, so that swaps and cycles of names apply. */
static int op_rename_away(applier *a, const char *old, const char *unused)
{
    (void)unused;
    entry *e = entry_named(a, old);
    if (e == NULL)
        return -1;
    if (a->n_moved >= a->tr->n_entries)
        return bad_line(a, "more renames than tensors");
    char name[64], dir[CK_DIR_NAME_MAX + 1];
    for (unsigned n = (unsigned)a->n_moved;; n++) {
        int len = snprintf(name, sizeof name, ".ckptfs-recovery-%u", n);
        ck_dir_name(name, (size_t)len, NULL, dir);
        if (tree_lookup(a->tr, dir) < 0)
            break;
    }
    if (tree_rename(a->tr, e, dir, a->err) < 0)
        return -1;
    a->moved[a->n_moved++] = (uint32_t)(e - a->tr->entries);
    return 0;
}

static int op_rename_to(applier *a, const char *old, const char *new_dir)
{
    (void)old;
    return tree_rename(a->tr, &a->tr->entries[a->moved[a->n_moved_back++]], new_dir, a->err);
}

static int op_new(applier *a, const char *dir, const char *unused)
{
    (void)unused;
    return tree_mkdir(a->tr, dir, a->err) < 0 ? -1 : 0;
}

static int op_no_file(applier *a, const char *dir, bool meta)
{
    entry *e = entry_named(a, dir);
    if (e == NULL)
        return -1;
    if ((meta ? entry_has_meta(e) : entry_has_out(e)) == false)
        return 0;
    return entry_unlink(a->tr, e, meta, a->err);
}

static int op_no_meta(applier *a, const char *dir, const char *unused)
{
    (void)unused;
    return op_no_file(a, dir, true);
}

static int op_no_out(applier *a, const char *dir, const char *unused)
{
    (void)unused;
    return op_no_file(a, dir, false);
}

/* tensors/DIR/NAME, a regular file reached with no link followed. */
static int open_kept(applier *a, const char *dir, const char *name, struct stat *st)
{
    int td = openat(a->dfd, TENSORS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int sd = td < 0 ? -1 : openat(td, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = sd < 0 ? -1 : ck_open_regular(sd, name, O_RDONLY | O_NOFOLLOW, 0, st);
    int saved = errno;
    if (sd >= 0)
        close(sd);
    if (td >= 0)
        close(td);
    if (fd < 0) {
        char q[CK_QUOTE_BUF];
        return ck_fail_errno(a->err, saved, "%s/%s/%s/%s", a->dir, TENSORS,
                             ck_quote(q, dir, strlen(dir)), name);
    }
    return fd;
}

static int op_meta(applier *a, const char *dir, const char *unused)
{
    (void)unused;
    struct stat st;
    entry *e = entry_named(a, dir);
    int fd = e == NULL ? -1 : open_kept(a, dir, "meta", &st);
    if (fd < 0)
        return -1;
    char *buf = st.st_size <= TREE_META_MAX ? malloc(TREE_META_MAX) : NULL;
    ssize_t n = buf != NULL ? pread(fd, buf, TREE_META_MAX, 0) : -1;
    close(fd);
    int rc = -1;
    if (n < 0)
        ck_fail(a->err, EINVAL, "%s/%s/%s/meta: not a meta (%s)", a->dir, TENSORS, dir,
                buf == NULL && st.st_size <= TREE_META_MAX ? "out of memory" : "too long");
    else if ((entry_has_meta(e) ? entry_meta_begin(a->tr, e, true, a->err)
                                : entry_create(a->tr, e, true, a->err)) == 0 &&
             entry_meta_write(e, buf, (size_t)n, 0, a->err) == 0)
        rc = entry_meta_finish(a->tr, e, a->err);
    free(buf);
    return rc;
}

static int op_out(applier *a, const char *dir, const char *unused)
{
    (void)unused;
    struct stat st;
    entry *e = entry_named(a, dir);
    int fd = e == NULL ? -1 : open_kept(a, dir, "out", &st);
    if (fd < 0)
        return -1;
    char *buf = malloc(COPY_CHUNK);
    int rc = buf == NULL ? ck_nomem(a->err, a->dir)
             : entry_has_out(e) ? entry_out_truncate(a->tr, e, 0, a->err)
                                : entry_create(a->tr, e, false, a->err);
    uint64_t at = 0;
    while (rc == 0) {
        ssize_t n = pread(fd, buf, COPY_CHUNK, (off_t)at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = ck_fail_errno(a->err, errno, "%s/%s/%s/out", a->dir, TENSORS, dir);
        if (n <= 0)
            break;
        rc = entry_out_write(a->tr, e, buf, (size_t)n, at, a->err);
        at += (uint64_t)n;
    }
    free(buf);
    close(fd);
    return rc;
}

typedef int (*apply_op)(applier *a, const char *arg1, const char *arg2);

/* One pass over `edits`, applying each line of verb with op. */
static int pass(applier *a, const char *verb, apply_op op)
{
    size_t vlen = strlen(verb);
    char one[CK_DIR_NAME_MAX + 1], two[CK_DIR_NAME_MAX + 1];
    int rc;
    if (rewind_edits(a) < 0)
        return -1;
    while ((rc = next_line(a)) == 1) {
        if (strncmp(a->line, verb, vlen) != 0 || a->line[vlen] != ' ')
            continue;
        const char *p = a->line + vlen + 1;
        bool two_names = strcmp(verb, "rename") == 0;
        if (take_word(&p, one, sizeof one) <= 0 ||
            (two_names && take_word(&p, two, sizeof two) <= 0) || *p != '\0')
            return bad_line(a, "not a tensor directory name");
        if (op(a, one, two_names ? two : NULL) < 0)
            return -1;
    }
    return rc;
}

int recovery_apply(tree *tr, const char *dir, ck_error *err)
{
    applier a = {.tr = tr, .dir = dir, .err = err};
    if (!tr->writable)
        return ck_fail(err, EROFS, "%s: -o recover needs a writable mount (-o rw)", dir);
    a.dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (a.dfd < 0)
        return ck_fail_errno(err, errno, "%s", dir);
    struct stat st;
    int efd = ck_open_regular(a.dfd, EDITS, O_RDONLY | O_NOFOLLOW, 0, &st);
    a.edits = efd < 0 ? NULL : fdopen(efd, "r");
    a.moved = calloc(tr->n_entries + 1, sizeof *a.moved);
    int rc = -1;
    if (a.edits == NULL)
        ck_fail_errno(err, errno, "%s/%s", dir, EDITS);
    else if (a.moved == NULL)
        ck_nomem(err, dir);
    else if (check_header(&a) == 0 && pass(&a, "remove", op_remove) == 0 &&
             pass(&a, "rename", op_rename_away) == 0 && pass(&a, "rename", op_rename_to) == 0 &&
             pass(&a, "new", op_new) == 0 && pass(&a, "no-meta", op_no_meta) == 0 &&
             pass(&a, "no-out", op_no_out) == 0 && pass(&a, "meta", op_meta) == 0 &&
             pass(&a, "out", op_out) == 0)
        rc = 0;
    if (a.edits != NULL)
        fclose(a.edits);
    else if (efd >= 0)
        close(efd);
    free(a.moved);
    close(a.dfd);
    return rc;
}
