/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_events: what inotify tells of a run directory.  Every subdirectory
 * is watched, not only rank_<id>/ and iteration_<N>/ (a DCP directory has
 * no name of its own and becomes one only when .metadata appears), from
 * when it appears (files written before the watch are judged by settle
 * time alone); events on a collection's marker are taken though dot
 * files' are not.  Whether a file is still open for writing cannot be
 * asked of the kernel (short of every process's /proc/PID/fd), so the
 * events are the evidence, and where they are missing the settle time is:
 * after IN_Q_OVERFLOW, every file changed until then and not listed
 * already; on shared storage, every file not listed yet (ckrun_doubt_of).
 *
 * All of it is the watcher's thread's own (and ckrun_new's before it
 * starts): nothing here takes r->mu.
 */
#define _GNU_SOURCE
#include "run_events.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <syslog.h>
#include <unistd.h>

#include "../codec/core/model_dir.h"

/* How long a file that appeared (IN_CREATE) waits for the IN_OPEN that
 * follows when open(2) created it, and does not when link(2) did: both
 * events are queued by the one system call, so this only has to cover
 * its creator being descheduled between the two. */
#define CREATE_GRACE 1.0
/* Subdirectories watched; past this, or when inotify
 * gives no more watches, the run is listed again every second and their
 * files are judged as without inotify. */
#define SUBDIRS_MAX 1024

#define WATCH_EVENTS                                                                       \
    (IN_CREATE | IN_OPEN | IN_MODIFY | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_ATTRIB |     \
     IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

static long writing_find(const ckrun *r, const char *name)
{
    for (size_t i = 0; i < r->n_writing; i++)
        if (strcmp(r->writing[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* Whether w's file is still being written (see run_writing); when that
 * may change without an event into *due. */
static bool still_writing(const run_writing *w, double now, double *due)
{
    if (w->modified || w->opens > 0)
        return true;
    if (w->created + CREATE_GRACE <= now)
        return false;
    *due = w->created + CREATE_GRACE;
    return true;
}

/* Whether what the events told of w matters to entry e's file: its own,
 * or one in its collection's directory. */
static bool writing_of(const run_writing *w, const ck_run_entry *e)
{
    size_t n = strlen(e->file);
    return entry_is_dir(e) ? strncmp(w->name, e->file, n) == 0 && w->name[n] == '/'
                        : strcmp(w->name, e->file) == 0;
}

/* The watched subdirectory named name, or NULL. */
static run_subdir *subdir_named(const ckrun *r, const char *name, size_t len)
{
    for (size_t i = 0; i < r->n_subdirs; i++)
        if (strlen(r->subdirs[i].name) == len && memcmp(r->subdirs[i].name, name, len) == 0)
            return &r->subdirs[i];
    return NULL;
}

/* Until when e's files, changed before, are doubtful: written before its
 * directory's watch was in place, or while events were lost. */
double ckrun_doubt_of(const ckrun *r, const ck_run_entry *e)
{
    if (r->polled)
        return INFINITY; /* another machine's writes give no event */
    const char *slash = strchr(e->file, '/');
    if (slash == NULL && !entry_is_dir(e))
        return r->doubt_until;
    const run_subdir *d = subdir_named(r, e->file, slash ? (size_t)(slash - e->file)
                                                         : strlen(e->file));
    return d != NULL ? d->doubt_until : 0; /* unwatched: as without inotify */
}

bool ckrun_being_written(const ckrun *r, const ck_run_entry *e, double now, double *due)
{
    for (size_t i = 0; i < r->n_writing; i++)
        if (writing_of(&r->writing[i], e) && still_writing(&r->writing[i], now, due))
            return true;
    return false;
}


/* How the run is followed, for XATTR_WATCH. */
void ckrun_describe_watch(const ckrun *r, char *out, size_t size)
{
    double every = r->polled ? r->poll : r->inotify_fd < 0 ? 1.0 : 0.0;
    char poll[48] = "";
    if (every > 0)
        snprintf(poll, sizeof poll, "poll every %g s%s", every,
                 r->inotify_fd >= 0 ? " and " : "");
    snprintf(out, size, "%s%s (%s)", poll, r->inotify_fd >= 0 ? "inotify" : "", r->storage.name);
}

/* What the events told of name, noted from now on (NULL: the list is
 * full, or out of memory). */
static run_writing *writing_note(ckrun *r, const char *name)
{
    long i = writing_find(r, name);
    if (i >= 0)
        return &r->writing[i];
    char *copy = r->n_writing < WRITING_MAX ? strdup(name) : NULL;
    if (copy == NULL)
        return NULL;
    r->writing[r->n_writing] = (run_writing){.name = copy};
    return &r->writing[r->n_writing++];
}

static void writing_drop(ckrun *r, size_t i)
{
    free(r->writing[i].name);
    r->writing[i] = r->writing[--r->n_writing];
}

static void writing_remove(ckrun *r, const char *name)
{
    long i = writing_find(r, name);
    if (i >= 0)
        writing_drop(r, (size_t)i);
}

/* Forget the files no longer being written (a link past its grace), and
 * with now 0 every one: the events can no longer tell. */
void ckrun_writing_forget(ckrun *r, double now)
{
    double due;
    for (size_t i = r->n_writing; i-- > 0;)
        if (now == 0 || !still_writing(&r->writing[i], now, &due))
            writing_drop(r, i);
}

/* Forget the files beneath the subdirectory name (its watch is gone). */
static void writing_forget_in(ckrun *r, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = r->n_writing; i-- > 0;)
        if (strncmp(r->writing[i].name, name, n) == 0 && r->writing[i].name[n] == '/')
            writing_drop(r, i);
}

/* Whether the subdirectory name is watched: any not starting with '.'.
 * A collection's directory may have no name of its own (a DCP one,
 * torchtitan's step-<N>/), and become one only when its marker is
 * written, last (.metadata): watched from the start, that write is
 * seen.  Past SUBDIRS_MAX the run is listed every second instead. */
static bool watched_name(const char *name)
{
    return name[0] != '.';
}

/* Watch the subdirectory name of the run directory (opened beneath it, no
 * link followed; the watch through /proc/self/fd, as the run's own).
 * Whether it is watched now. */
static bool subdir_watch(ckrun *r, const char *name, double doubt_until)
{
    if (subdir_named(r, name, strlen(name)) != NULL)
        return true;
    int fd = openat(r->dir_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return true; /* not a directory, or gone: nothing to watch */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    run_subdir *more = r->n_subdirs < SUBDIRS_MAX
                           ? realloc(r->subdirs, (r->n_subdirs + 1) * sizeof *more)
                           : NULL;
    if (more != NULL)
        r->subdirs = more;
    int wd = more != NULL ? inotify_add_watch(r->inotify_fd, self, WATCH_EVENTS) : -1;
    int e = more != NULL ? errno : ENOSPC;
    close(fd);
    char *copy = wd >= 0 ? strdup(name) : NULL;
    if (copy == NULL) {
        if (wd >= 0)
            inotify_rm_watch(r->inotify_fd, wd);
        if (!r->said_unwatched)
            ckfs_log(&r->proto, LOG_WARNING, "%s/%s: cannot watch the directory (%s): the run "
                     "is listed again every second", r->path, name,
                     wd >= 0 ? strerror(ENOMEM) : strerror(e));
        r->said_unwatched = true;
        return false;
    }
    /* The same directory watched again under a new name: one watch. */
    for (size_t i = 0; i < r->n_subdirs; i++)
        if (r->subdirs[i].wd == wd) {
            free(r->subdirs[i].name);
            r->subdirs[i].name = copy;
            return true;
        }
    r->subdirs[r->n_subdirs++] = (run_subdir){.wd = wd, .name = copy,
                                              .doubt_until = doubt_until};
    return true;
}

/* Stop following subdirectory i (deleted, or renamed away). */
static void subdir_forget(ckrun *r, size_t i, bool rm_watch)
{
    if (rm_watch)
        inotify_rm_watch(r->inotify_fd, r->subdirs[i].wd);
    writing_forget_in(r, r->subdirs[i].name);
    free(r->subdirs[i].name);
    r->subdirs[i] = r->subdirs[--r->n_subdirs];
}

/* Watch every subdirectory of the run not watched yet (watched_name):
 * their files changed before doubt_until are judged by settle time alone
 * (0 for the directories there when the mount began, judged as the run
 * directory's own files then).  One not watched has the run listed every
 * second. */
void ckrun_watch_subdirs(ckrun *r, double doubt_until)
{
    if (r->inotify_fd < 0)
        return;
    DIR *d = ck_list_dir(r->dir_fd);
    if (d == NULL)
        return; /* the scan says why */
    bool unwatched = false;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (watched_name(de->d_name) && (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN))
            unwatched |= !subdir_watch(r, de->d_name, doubt_until);
    closedir(d);
    r->unwatched = unwatched;
}

/* Events were lost: what they said of files being written can no longer
 * be told from what they did not say.  Every file changed until now is
 * judged by its settle time alone, in every directory watched. */
static void overflowed(ckrun *r, double now)
{
    ckrun_writing_forget(r, 0);
    r->doubt_until = now;
    for (size_t i = 0; i < r->n_subdirs; i++)
        r->subdirs[i].doubt_until = now;
}

/* One event on the run directory (or a subdirectory's, named sub): note
 * what it says of files being written.  Whether to list again: not for
 * opens and closes that change nothing (our own listing opens the
 * directories), nor one more write to a file known to be written. */
static bool take_event(ckrun *r, const struct inotify_event *ev, const char *sub, double now)
{
    const uint32_t m = ev->mask;
    if (ev->len == 0) /* the directory itself: moved, deleted, chmod'ed */
        return (m & (IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)) == 0;
    if (ev->name[0] == '.' && (sub == NULL || !ck_run_marker(ev->name)))
        return false; /* never a checkpoint: our own locks and saves' temporary files;
                       * but a collection's marker (DCP's .metadata), written last,
                       * makes its directory one */
    if (m & IN_ISDIR) {
        if (sub != NULL || (m & (IN_OPEN | IN_CLOSE_NOWRITE)))
            return false; /* nothing deeper is listed; our own listing */
        if ((m & (IN_CREATE | IN_MOVED_TO)) && watched_name(ev->name) &&
            !subdir_watch(r, ev->name, now))
            r->unwatched = true;
        run_subdir *d = subdir_named(r, ev->name, strlen(ev->name));
        if ((m & (IN_DELETE | IN_MOVED_FROM)) && d != NULL)
            subdir_forget(r, (size_t)(d - r->subdirs), true);
        return true;
    }
    char name[2 * NAME_MAX + 2];
    snprintf(name, sizeof name, "%s%s%s", sub ? sub : "", sub ? "/" : "", ev->name);
    long i = writing_find(r, name);
    run_writing *w = i >= 0 ? &r->writing[i] : NULL;
    double due;
    if (m & IN_CREATE) {
        if ((w = writing_note(r, name)) != NULL)
            *w = (run_writing){.name = w->name, .created = now};
        return true; /* its grace ends: list again then */
    }
    if (m & IN_OPEN) {
        if (w != NULL)
            w->opens++;
        return false;
    }
    if (m & IN_MODIFY) {
        bool known = w != NULL && still_writing(w, now, &due);
        if ((w = writing_note(r, name)) != NULL)
            w->modified = true;
        return !known;
    }
    if (m & IN_CLOSE_NOWRITE) {
        if (w == NULL || w->opens == 0)
            return false;
        w->opens--;
        return !still_writing(w, now, &due);
    }
    if (m & (IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO))
        writing_remove(r, name);
    return true; /* closed, gone, arrived, or a chmod: perhaps complete now */
}

/* Read every pending event.  Whether to list again. */
bool ckrun_take_events(ckrun *r)
{
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool changed = false;
    ssize_t n;
    while ((n = read(r->inotify_fd, buf, sizeof buf)) > 0) {
        double now = now_real();
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof *ev + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                overflowed(r, now);
                changed = true;
                continue;
            }
            const char *sub = NULL;
            if (ev->wd != r->top_wd) {
                size_t i = 0;
                while (i < r->n_subdirs && r->subdirs[i].wd != ev->wd)
                    i++;
                if (i == r->n_subdirs)
                    continue; /* a watch removed since */
                if (ev->mask & IN_IGNORED) { /* the directory is gone */
                    subdir_forget(r, i, false);
                    changed = true;
                    continue;
                }
                sub = r->subdirs[i].name;
            }
            changed |= take_event(r, ev, sub, now);
        }
    }
    return changed;
}

void ckrun_events_open(ckrun *r)
{
    /* Watch before listing: nothing written in between is missed.  The
     * directory watched is the one open, whatever its name leads to now. */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", r->dir_fd);
    r->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (r->inotify_fd >= 0 &&
        (r->top_wd = inotify_add_watch(r->inotify_fd, self, WATCH_EVENTS)) < 0) {
        int e = errno;
        close(r->inotify_fd);
        r->inotify_fd = -1;
        errno = e;
    }
    if (r->inotify_fd < 0)
        fprintf(stderr, "ckptfs: %s: cannot watch the directory (%s): it is listed again "
                "every second\n", r->path, strerror(errno));
    ckrun_watch_subdirs(r, 0);
}
