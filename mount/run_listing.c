/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_listing: which checkpoints the run's root shows, and the watcher's
 * thread that keeps it so.  Which files are checkpoints, their names and
 * `latest` are codec/run_dir's rules; whether a file is complete is
 * judged here, from what the events told (run_events) and the settle
 * time.  On shared storage (codec/core/storage.h; -o watch= forces either
 * way) the run is also listed every -o poll seconds and every file not
 * listed yet is doubtful (ckrun_doubt_of); inotify stays on for this
 * machine's writes.  An iteration_<N>/ that mindformers' tracker names is
 * complete at once: the tracker is written after every rank has finished.
 * Polling lists names and attributes only (on s3fs, a LIST and the HEADs
 * its stat cache misses); no file is read but the tracker.
 *
 * A new listing is swapped in under r->mu, and the kernel told what
 * changed from the watcher's thread (relist), never from a request's.
 */
#define _GNU_SOURCE
#include "run_listing.h"

#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "invalidate.h"
#include "run_events.h"

/* Times a listing is scanned again when saves keep starting and ending
 * under it: then it is taken as it is (a saving slot is kept anyway). */
#define RESCANS_MAX 100

static double seconds(const struct timespec *t)
{
    return (double)t->tv_sec + (double)t->tv_nsec / 1e9;
}

static void due_at(ckrun *r, double due)
{
    if (r->next_settle == 0 || due < r->next_settle)
        r->next_settle = due;
}

/* Whether entry e is complete: not being written as far as the events
 * tell; if changed before the events could tell (doubtful), unchanged for
 * settle seconds whatever its mode; and as run_dir judged it (read-only,
 * settled, or a directory its collection's tracker names).  A file listed
 * already and unchanged since (listed) is not doubtful: it stays, and so
 * do the inodes the kernel holds.  When that may change without an event is
 * noted in r->next_settle.  On the watcher's thread (or ckrun_new's). */
static bool judged_complete(ckrun *r, const ck_run_entry *e, bool listed, double now)
{
    double due = 0;
    if (ckrun_being_written(r, e, now, &due)) {
        if (due > 0)
            due_at(r, due);
        return false;
    }
    if (e->committed)
        return true; /* its tracker, written last, names it: the commit point */
    double mtime = seconds(&e->mtime);
    bool doubtful = !listed && mtime <= ckrun_doubt_of(r, e);
    if ((doubtful || !e->complete) && now - mtime < r->settle) {
        due_at(r, mtime + r->settle);
        return false;
    }
    return e->complete; /* read-only, settled, or named by the tracker */
}

/* The listed slot named name, or -1.  Under r->mu. */
long ckrun_listed_slot(const ckrun *r, const char *name)
{
    size_t lo = 0, hi = r->n_listed;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, r->slots[r->listed[mid]].name);
        if (c == 0)
            return r->listed[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

static int cmp_listed(const void *a, const void *b, void *arg)
{
    const ckrun *r = arg;
    return strcmp(r->slots[*(const uint32_t *)a].name, r->slots[*(const uint32_t *)b].name);
}

static bool same_file(const run_slot *s, const ck_run_entry *e)
{
    return s->size == e->size && s->mtime.tv_sec == e->mtime.tv_sec &&
           s->mtime.tv_nsec == e->mtime.tv_nsec && strcmp(s->file, e->file) == 0;
}

/* A new listed slot for e; its index, or -1 when out of memory. */
static long add_slot(ckrun *r, const ck_run_entry *e)
{
    if (r->n_slots >= (1u << (64 - CKFS_INO_BITS)) - 1)
        return -1; /* no inode numbers left (4 million checkpoints) */
    if (r->n_slots == r->cap_slots) {
        size_t cap = r->cap_slots ? r->cap_slots * 2 : 64;
        run_slot *more = realloc(r->slots, cap * sizeof *more);
        if (more == NULL)
            return -1;
        r->slots = more;
        r->cap_slots = cap;
    }
    run_slot *s = &r->slots[r->n_slots];
    *s = (run_slot){.name = strdup(e->name), .file = strdup(e->file), .mtime = e->mtime,
                    .size = e->size, .mode = e->mode, .uid = e->uid, .gid = e->gid,
                    .collection = e->collection, .listed = true,
                    .check_failed = e->error != NULL, .opens = e->opens,
                    .error = e->error ? strdup(e->error) : NULL};
    if (s->name == NULL || s->file == NULL || (e->error != NULL && s->error == NULL)) {
        free(s->name);
        free(s->file);
        free(s->error);
        return -1;
    }
    return (long)r->n_slots++;
}

static void mark_gone(ckrun *r, run_slot *s)
{
    s->listed = false;
    s->gone = true;
    if (s->fs != NULL)
        r->n_gone_open++;
}

/* The root's user.ckptfs.last_error becomes why checkpoint name does not
 * open (the reader's message, naming the file and offset), as a model
 * mount's says a refusal: when, the path refused, why. */
void ckrun_set_last_error(ckrun *r, const char *name, const char *why)
{
    char when[32];
    ckfs_iso_time(when, sizeof when);
    pthread_mutex_lock(&r->error_mu);
    snprintf(r->last_error, sizeof r->last_error, "%s %s/%s: %s", when, r->mountpoint, name,
             why);
    pthread_mutex_unlock(&r->error_mu);
}

/* Whether e, the newest complete checkpoint, opens, for
 * ck_run_list_pick_opening: `latest` is never one that does not.  A slot
 * for the same file knows already; else it is opened and closed (its
 * index read, not its data: for a .ckpt each record's framing, which is
 * how a truncated one is told), once a file, since the verdict is kept
 * in its slot.  A failure that is the process's (descriptors, memory) or
 * a file gone since the listing judges nothing: the pick stands.  Under
 * r->mu, on the watcher's thread (or ckrun_new's). */
static int latest_opens(void *arg, ck_run_entry *e)
{
    ckrun *r = arg;
    long s = ckrun_listed_slot(r, e->name);
    if (s >= 0 && same_file(&r->slots[s], e)) {
        const run_slot *slot = &r->slots[s];
        if (slot->failed || slot->check_failed) {
            e->error = strdup(slot->error != NULL ? slot->error : "does not open");
            return -1;
        }
        if (slot->opens || slot->fs != NULL || slot->ours)
            return 0;
    }
    ck_error err = {0};
    if (ck_run_entry_check(r->dir_fd, r->path, e, &r->open_opts, &err) == 0)
        return 0;
    if (transient(err.errnum) || err.errnum == ENOENT) {
        free(e->error);
        e->error = NULL;
        return 0;
    }
    ckfs_log(&r->proto, LOG_ERR, "%s (%s/%s does not open; latest is not it)", err.msg,
             r->mountpoint, e->name);
    ckrun_set_last_error(r, e->name, err.msg);
    return -1;
}

/* Take listing l: slots for new checkpoints, gone for the rest.  Under
 * r->mu; fails only for memory, leaving what was listed. */
int ckrun_apply_listing(ckrun *r, ck_run_list *l, run_change *ch)
{
    uint32_t *listed = malloc((l->n + r->n_listed + 1) * sizeof *listed);
    bool *kept = calloc(r->n_slots + l->n + 1, sizeof *kept);
    ch->dropped = malloc((r->n_listed + 1) * sizeof *ch->dropped);
    if (listed == NULL || kept == NULL || ch->dropped == NULL) {
        free(listed);
        free(kept);
        free(ch->dropped);
        ch->dropped = NULL;
        return -1;
    }
    size_t n = 0;
    long latest = -1;
    r->next_settle = 0;
    /* Which are complete, before the newest is picked among them: one
     * being written is not, whatever its mode, and `latest` stays on the
     * newest that is.  A slot kept as it was, or whose file our own save
     * wrote, is shown. */
    double now = now_real();
    for (size_t i = 0; i < l->n; i++) {
        ck_run_entry *e = &l->e[i];
        long s = ckrun_listed_slot(r, e->name);
        bool same = s >= 0 && same_file(&r->slots[s], e);
        e->complete = (s >= 0 && (r->slots[s].saving || (!same && pinned(&r->slots[s])) ||
                                  (same && r->slots[s].ours))) ||
                      judged_complete(r, e, same, now);
    }
    ck_run_list_pick_opening(l, latest_opens, r);
    for (size_t i = 0; i < l->n; i++) {
        const ck_run_entry *e = &l->e[i];
        long s = ckrun_listed_slot(r, e->name);
        bool same = s >= 0 && same_file(&r->slots[s], e);
        if (s >= 0 && (r->slots[s].saving || (!same && pinned(&r->slots[s])))) {
            kept[s] = true; /* as it was: ours is being saved, or holds edits */
            listed[n++] = (uint32_t)s;
            latest = (long)i == l->latest ? s : latest;
            continue;
        }
        if (!e->complete)
            continue; /* an event or its settle time lists it again */
        if (!same)
            s = -1; /* new, or replaced: the old slot is dropped below, as not kept */
        if (s < 0) {
            s = add_slot(r, e);
            if (s < 0)
                continue; /* out of memory: shown next time */
            ch->listing = true;
        }
        run_slot *slot = &r->slots[s];
        slot->opens |= e->opens; /* what latest_opens found of a slot listed before */
        if (e->error != NULL && !slot->failed && !slot->check_failed && slot->fs == NULL) {
            free(slot->error);
            slot->error = strdup(e->error);
            slot->check_failed = true;
        }
        slot->mode = e->mode; /* a chmod or chown shows at once */
        slot->uid = e->uid;
        slot->gid = e->gid;
        kept[s] = true;
        listed[n++] = (uint32_t)s;
        if ((long)i == l->latest)
            latest = s;
    }
    for (size_t i = 0; i < r->n_listed; i++) {
        run_slot *s = &r->slots[r->listed[i]];
        if (kept[r->listed[i]])
            continue;
        if (pinned(s)) { /* deleted under its edits: they stay readable */
            if (!s->saving && !s->said)
                ckfs_log(&r->proto, LOG_ERR, "%s/%s: removed by another program while %s/%s "
                         "has unsaved edits: they are kept there to be copied out, and are not "
                         "saved", r->path, s->file, r->mountpoint, s->name);
            s->said |= !s->saving;
            listed[n++] = r->listed[i];
            continue;
        }
        ch->dropped[ch->n_dropped++] = s->name;
        ch->gone_open |= s->fs != NULL;
        mark_gone(r, s);
        ch->listing = true;
    }
    qsort_r(listed, n, sizeof *listed, cmp_listed, r);
    free(r->listed);
    free(kept);
    r->listed = listed;
    r->n_listed = n;
    ch->latest = latest != r->latest;
    r->latest = latest;
    return 0;
}

/* List the directory again and tell the kernel what changed.  On the
 * watcher's thread (or before the mount): never under a request. */
static void relist(ckrun *r)
{
    ck_run_list l;
    ck_error err = {0};
    struct timespec now;
    double t = now_real();
    ckrun_writing_forget(r, t);
    ckrun_watch_subdirs(r, t); /* before the scan: nothing written in between is missed */
    pthread_mutex_lock(&r->mu);
    for (int scans = 0;; scans++) {
        /* A scan that a save of ours began or ended under may show the file
         * that save replaced beside a slot that is already the new one: it
         * would look replaced.  Scan again. */
        uint64_t gen = r->save_gen;
        pthread_mutex_unlock(&r->mu);
        clock_gettime(CLOCK_REALTIME, &now);
        if (ck_run_dir_scan_at(r->dir_fd, r->path, r->settle, &now, &l, &err) < 0) {
            if (strcmp(err.msg, r->scan_err.msg) != 0)
                ckfs_log(&r->proto, LOG_ERR, "%s (the listing is kept as it was)", err.msg);
            r->scan_err = err;
            ck_run_list_free(&l);
            return;
        }
        pthread_mutex_lock(&r->mu);
        if (gen == r->save_gen || scans == RESCANS_MAX)
            break;
        ck_run_list_free(&l);
    }
    r->scan_err.msg[0] = '\0';
    struct stat dst;
    run_change ch = {0};
    if (fstat(r->dir_fd, &dst) == 0)
        r->dir_st = dst;
    int rc = ckrun_apply_listing(r, &l, &ch);
    pthread_mutex_unlock(&r->mu);
    ck_run_list_free(&l);
    if (rc < 0) {
        ckfs_log(&r->proto, LOG_ERR, "%s: out of memory listing the run", r->path);
        return;
    }
    /* From this thread, not a request's: invalidating a name takes the
     * directory's lock, which a request waiting for its answer may hold. */
    for (size_t i = 0; r->se != NULL && i < ch.n_dropped; i++)
        ckfs_tell_inval_entry(r->se, RUN_INO_ROOT, ch.dropped[i], strlen(ch.dropped[i]));
    if (r->se != NULL && ch.latest)
        ckfs_tell_inval_entry(r->se, RUN_INO_ROOT, "latest", 6);
    if (r->se != NULL && (ch.listing || ch.latest)) /* its listing, nlink and times */
        ckfs_tell_inval_inode(r->se, RUN_INO_ROOT, 0, 0);
    free(ch.dropped);
    /* A deleted file's descriptors are let go now, not at the next request
     * into a checkpoint: its space is held meanwhile. */
    uint64_t one = 1;
    if (ch.gone_open && write(r->wake_fd, &one, sizeof one) != sizeof one) {
        /* the eventfd is full of wake-ups already */
    }
}

/* Ask the watcher to list the run again (not from here, a request: see
 * relist). */
void ckrun_relist_soon(ckrun *r)
{
    uint64_t one = 1;
    if (write(r->relist_fd, &one, sizeof one) != sizeof one) {
        /* the watcher lists again at the next event */
    }
}

/* How long to sleep: until the next writable file settles, at most; a
 * second when there is no inotify, or a directory is not watched; the
 * poll interval on shared storage. */
static int watch_timeout_ms(ckrun *r)
{
    pthread_mutex_lock(&r->mu);
    double due = r->next_settle;
    pthread_mutex_unlock(&r->mu);
    int ms = r->inotify_fd < 0 || r->unwatched ? 1000 : -1;
    if (r->polled && (ms < 0 || r->poll * 1000.0 < ms))
        ms = (int)(r->poll * 1000.0);
    if (due > 0) {
        double wait = (due - now_real()) * 1000.0 + 20.0; /* past the second it settles in */
        int w = wait < 0 ? 0 : wait > 3.6e6 ? 3600000 : (int)wait;
        if (ms < 0 || w < ms)
            ms = w;
    }
    return ms;
}

void *ckrun_watch_main(void *arg)
{
    ckrun *r = arg;
    relist(r); /* what changed while the mount came up */
    for (;;) {
        struct pollfd p[3] = {{.fd = r->stop_fd, .events = POLLIN},
                              {.fd = r->relist_fd, .events = POLLIN},
                              {.fd = r->inotify_fd, .events = POLLIN}};
        int n = poll(p, r->inotify_fd < 0 ? 2 : 3, watch_timeout_ms(r));
        if (n < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            break;
        bool changed = n <= 0; /* a file settles now, or no inotify */
        uint64_t count;
        if (n > 0 && (p[1].revents & POLLIN))
            changed |= read(r->relist_fd, &count, sizeof count) == sizeof count;
        if (n > 0 && (p[2].revents & POLLIN))
            changed |= ckrun_take_events(r);
        if (changed)
            relist(r);
    }
    return NULL;
}
