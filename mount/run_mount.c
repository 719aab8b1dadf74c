/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_mount: a training run's directory as one tree of snapshots
 * (run_mount.h says what is shown and why).
 *
 * Slots.  Every checkpoint the mount has listed has a slot, numbered from
 * 1 in the order they were found, for the life of the mount: slot s owns
 * the inode numbers s << CKFS_INO_BITS and up, its checkpoint's directory
 * being (s << CKFS_INO_BITS) | INO_ROOT.  A checkpoint deleted or replaced
 * keeps its slot, marked gone, so that no inode the kernel still holds
 * ever names another file's tensors; a file replaced under the same name
 * gets a new slot.
 *
 * Writable (-o rw).  A checkpoint is opened as a writable model mount,
 * holding its file's write claim (save/write_claim.h: the writer lock, and
 * a save a crash cut short finished), whenever the lock can be had and its
 * format is saved (else it is shown read-only, said once); its saver's
 * thread starts with its first edit.  A checkpoint with unsaved edits, a
 * save running or a file open for writing is never closed before the
 * unmount, which saves it.  Its own saves must not look like another
 * program's: the saver tells the run when a save begins and ends
 * (slot_saves); meanwhile the listing keeps the slot as it was, and
 * after a commit the slot is the new file, complete as it is.  A
 * listing scanned across a save's start or end is scanned again
 * (save_gen).  A checkpoint another program deletes or replaces while
 * it has unsaved edits stays listed, its edits readable, its saves
 * refused (tree_save_run says why) until the unmount.
 *
 * Locking.  r->mu guards the slots and the listing; the watcher holds it
 * only to swap in a new listing.  A slot's open mount (slot->fs) is
 * opened, used and closed by the request thread alone, so a request uses
 * it without r->mu; the watcher marks a slot gone and the request thread
 * closes it, at once when the watcher asks (wake_fd, between two
 * requests), else at the next request into a checkpoint.  Order: r->mu,
 * then a checkpoint's lock; its saver takes r->mu holding nothing
 * (slot_saves), so that a checkpoint is closed under r->mu only when it
 * has nothing to save.
 *
 * The bound.  The open checkpoints are charged their tree's footprint
 * (the index arena's chunks, not the bytes used in them), their ckfs and,
 * when encrypted or compressed, their page cache's budget, against
 * -o index_cache, and may hold at most half the descriptors the file
 * limit leaves (fuse/main.c, fd_budget).  Only a closable checkpoint is
 * closed; a failure to open for want of descriptors or memory is tried
 * once more after closing every idle one (transient).
 *
 * Watching.  Every subdirectory is watched, not only rank_<id>/ and
 * iteration_<N>/ (a DCP directory has no name of its own and becomes one
 * only when .metadata appears), from when it appears (files written
 * before the watch are judged by settle time alone); events on a
 * collection's marker are taken though dot files' are not.  Whether a
 * file is still open for writing cannot be asked of the kernel (short of
 * every process's /proc/PID/fd), so the events are the evidence, and
 * where they are missing the settle time is: after IN_Q_OVERFLOW, every
 * file changed until then and not listed already.  On shared storage
 * (codec/core/storage.h; -o watch= forces either way) the run is also
 * listed every -o poll seconds and every file not listed yet is doubtful
 * (doubt_of); inotify stays on for this machine's writes.  An
 * iteration_<N>/ that mindformers' tracker names is complete at once: the
 * tracker is written after every rank has finished.  Polling lists names
 * and attributes only (on s3fs, a LIST and the HEADs its stat cache
 * misses); no file is read but the tracker.  -o threads is refused: a
 * slot's open mount is the request thread's alone (Locking, above).
 *
 * Seal: ckptfs-umount's user.ckptfs.unmount=1 on the root makes every
 * open writable checkpoint save and seal (ckfs_seal; one waiter each,
 * counted down in a seal_join), checkpoints opened later start sealed,
 * and the request is answered when all have ended; a failure puts that
 * checkpoint's reason in the root's user.ckptfs.last_error and has the
 * request thread unseal every checkpoint (unseal_all).  Pinned
 * checkpoints are closed, and saved, at unmount (ckrun_close_all, after
 * the session); the daemon exits non-zero when one of those saves fails.
 */
#define _GNU_SOURCE
#include "run_mount.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <unistd.h>

#include "../codec/core/model_dir.h"
#include "../codec/core/page_cache.h"
#include "../codec/core/storage.h"
#include "../codec/run_dir.h"
#include "../codec/io/commit_group.h"
#include "../save/encoder.h"
#include "../save/write_claim.h"
#include "inode_map.h"
#include "invalidate.h"
#include "model_ops.h"
#include "nodes.h"

#define RUN_INO_ROOT 1u
#define RUN_INO_LATEST 2u
/* How the run is followed, on its root: "poll every 2 s and inotify
 * (fuse.s3fs)". */
#define XATTR_WATCH "user.ckptfs.watch"

/* Files being written, as the events tell (take_event): the watcher's
 * own; bounded, past which a file is judged by its mode and settle time
 * alone. */
#define WRITING_MAX 4096
/* How long a file that appeared (IN_CREATE) waits for the IN_OPEN that
 * follows when open(2) created it, and does not when link(2) did: both
 * events are queued by the one system call, so this only has to cover
 * its creator being descheduled between the two. */
#define CREATE_GRACE 1.0
/* Subdirectories watched; past this, or when inotify
 * gives no more watches, the run is listed again every second and their
 * files are judged as without inotify. */
#define SUBDIRS_MAX 1024

/* What a writable checkpoint costs beyond a read-only one: its saver's
 * thread (stack pages) and its share of a spill file. */
#define WRITABLE_COST (64u << 10)
#define WRITABLE_FDS 3          /* the writer lock and its directory, the spill file */
/* Times a listing is scanned again when saves keep starting and ending
 * under it: then it is taken as it is (a saving slot is kept anyway). */
#define RESCANS_MAX 100

/* What the events told of one file being written.  It is, whatever its
 * mode says (cp of a read-only file creates it read-only, then writes
 * it), while modified (until IN_CLOSE_WRITE) or open since it was created
 * (an open that has not written yet), or created a moment ago.  A file
 * that only appeared, by link(2) (ln, cp -l, linkat of an O_TMPFILE), has
 * an IN_CREATE and no open: it is judged as any other file. */
typedef struct run_writing {
    char *name;                 /* beneath the run directory: "x.EXT", "rank_0/x.EXT" */
    double created;             /* when its IN_CREATE was read (CLOCK_REALTIME), 0: not seen */
    unsigned opens;             /* IN_OPEN since then, less IN_CLOSE_NOWRITE */
    bool modified;              /* IN_MODIFY seen, no IN_CLOSE_WRITE since */
} run_writing;

/* A subdirectory of the run (a rank_<id>/, a collection's directory
 * such as iteration_<N>/, or one that may become one) watched as the run
 * directory is.  Its files written before its watch was in place are
 * judged by their settle time alone (judged_complete). */
typedef struct run_subdir {
    int wd;
    char *name;
    double doubt_until;         /* files changed before this are doubtful */
} run_subdir;

typedef struct run_slot {
    char *name;                 /* shown in the root */
    char *file;                 /* in the run directory */
    /* The file as listed; it must still be so when opened. */
    struct timespec mtime;
    uint64_t size;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    ino_t file_ino;             /* once opened, 0 before: a copy is not the file */
    const ck_collection *collection; /* a directory of files, not a file: its
                                      * collection (run_dir.h), read-only */
    bool listed;                /* in the root now */
    bool gone;                  /* deleted or replaced: ESTALE from now on */
    bool failed;                /* did not open: EIO, not tried again (the file is as it was) */
    bool opens;                 /* opened once (or its check did): may be `latest` */
    bool check_failed;          /* latest_opens could not open it: not `latest`, yet
                                 * an access opens it as any other (in a writable run
                                 * that open finishes a save cut short first) */
    char *error;                /* failed or check_failed: why, the reader's message
                                 * (user.ckptfs.error) */
    bool said_transient;        /* a transient failure to open was said (open_failed) */
    bool read_only;             /* -o rw, but this one could not be written when last opened */
    bool said;                  /* why it is read-only, or kept though gone: said once */
    bool saving;                /* a save of ours is writing its file (slot_saves) */
    bool ours;                  /* the file is one our save wrote: complete as it is */
    ck_write_claim *claim;      /* held while open writable */
    ckfs *fs;                   /* the open checkpoint, or NULL */
    size_t cost;                /* its memory when opened (open_slot) */
    unsigned fds;               /* and its descriptors */
    uint64_t used;              /* when last used: the least recently used is closed first */
} run_slot;

struct ckrun {
    ckfs_front front;
    ckfs proto;
    char *path;                 /* for messages */
    int dir_fd;                 /* the run directory (O_PATH): every access goes
                                 * through it, no name is resolved again */
    char *mountpoint;
    double settle;
    /* Listed again every poll seconds, whatever the events say, and every
     * file not listed yet judged by its settle time alone: the directory
     * is on storage other machines write without an event here (or -o
     * watch=poll).  storage names it in messages. */
    bool polled;
    double poll;
    ck_storage storage;
    size_t budget;
    ck_open_opts open_opts;
    struct fuse_session *se;
    bool writable;              /* -o rw */
    size_t spill_max;           /* -o spill_max (0: the tree's default) */
    char *where;                /* the mount point, as writer locks name it */
    ck_file_watch *file_watch;  /* writable checkpoints' files, for other writers */
    /* The seal of ckptfs-umount (atomics): no edit taken from then on, in
     * checkpoints opened later too; failed: take edits again (on the next
     * request, which holds no checkpoint's lock). */
    bool sealed, seal_failed;
    pthread_mutex_t error_mu;   /* guards last_error, taken last (under r->mu at most) */
    char last_error[CKFS_LAST_ERROR_MAX]; /* the last failed seal's, or checkpoint that did
                                           * not open (root's xattr) */

    pthread_mutex_t mu;         /* guards what follows */
    run_slot *slots;            /* slot s is slots[s - 1] */
    size_t n_slots, cap_slots;
    uint32_t *listed;           /* listed slot indices, by name */
    size_t n_listed;
    long latest;                /* slot index of the newest, or -1 */
    struct stat dir_st;         /* the run directory's, at the last listing */
    size_t n_gone_open;         /* gone slots still open: closed by the next request */
    size_t open_cost;           /* of the open slots */
    unsigned open_fds, max_fds;
    uint64_t clock;
    uint64_t save_gen;          /* counts our saves' starts and ends: see relist */

    /* The watcher: inotify (or -1: listing again every second), an eventfd
     * that stops it, and when a writable file settles next (0: none). */
    int inotify_fd, stop_fd, relist_fd; /* relist_fd: list again now (a save ended,
                                         * `latest` did not open) */
    pthread_t watcher;
    bool watching;
    double next_settle;
    ck_error scan_err;          /* the last listing's failure, said once */
    /* What the events told: the watcher's own (and ckrun_new's before
     * it starts); apply_listing reads them on the watcher's thread. */
    run_writing writing[WRITING_MAX];
    size_t n_writing;
    int top_wd;                 /* the run directory's watch */
    double doubt_until;         /* its files changed before this are doubtful */
    run_subdir *subdirs;        /* its subdirectories watched (watched_name) */
    size_t n_subdirs;
    bool unwatched;             /* one of them is not: list again every second */
    bool said_unwatched;
    int wake_fd;                /* asks the request thread to close gone slots */
};

static uint64_t slot_of_ino(ckfs_ino ino)
{
    return (uint64_t)ino >> CKFS_INO_BITS;
}

static ckfs_ino slot_ino(size_t index, ckfs_ino inner)
{
    return ((ckfs_ino)(index + 1) << CKFS_INO_BITS) | inner;
}

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the listing ---- */

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

/* Whether entry e is a directory of files (a collection's), read-only. */
static bool entry_is_dir(const ck_run_entry *e)
{
    return e->collection != NULL;
}

/* Whether slot s is a directory of files (a collection's): a writer lock
 * is one file's, so it has none, and is read-only whatever -o rw says. */
static bool slot_is_dir(const run_slot *s)
{
    return s->collection != NULL;
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
static double doubt_of(const ckrun *r, const ck_run_entry *e)
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
    bool writing = false;
    for (size_t i = 0; i < r->n_writing && !writing; i++)
        writing = writing_of(&r->writing[i], e) && still_writing(&r->writing[i], now, &due);
    if (writing) {
        if (due > 0)
            due_at(r, due);
        return false;
    }
    if (e->committed)
        return true; /* its tracker, written last, names it: the commit point */
    double mtime = seconds(&e->mtime);
    bool doubtful = !listed && mtime <= doubt_of(r, e);
    if ((doubtful || !e->complete) && now - mtime < r->settle) {
        due_at(r, mtime + r->settle);
        return false;
    }
    return e->complete; /* read-only, settled, or named by the tracker */
}

/* The listed slot named name, or -1.  Under r->mu. */
static long listed_slot(const ckrun *r, const char *name)
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

/* What a new listing changed, for the kernel: names to forget in the
 * root, whether the root's listing and `latest` changed. */
typedef struct run_change {
    const char **dropped;       /* names of slots no longer listed (theirs: stable) */
    size_t n_dropped;
    bool listing, latest;
    bool gone_open;             /* a slot dropped is open: the request thread closes it */
} run_change;

/* Whether slot s must stay as it is whatever the directory shows: a save
 * of ours is writing its file, or it holds edits not saved yet.  Under
 * r->mu (which keeps s->fs open). */
static bool pinned(const run_slot *s)
{
    return s->saving || (s->fs != NULL && ckfs_busy(s->fs));
}

static bool transient(int errnum);

/* The root's user.ckptfs.last_error becomes why checkpoint name does not
 * open (the reader's message, naming the file and offset), as a model
 * mount's says a refusal: when, the path refused, why. */
static void set_last_error(ckrun *r, const char *name, const char *why)
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
    long s = listed_slot(r, e->name);
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
    set_last_error(r, e->name, err.msg);
    return -1;
}

/* Take listing l: slots for new checkpoints, gone for the rest.  Under
 * r->mu; fails only for memory, leaving what was listed. */
static int apply_listing(ckrun *r, ck_run_list *l, run_change *ch)
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
        long s = listed_slot(r, e->name);
        bool same = s >= 0 && same_file(&r->slots[s], e);
        e->complete = (s >= 0 && (r->slots[s].saving || (!same && pinned(&r->slots[s])) ||
                                  (same && r->slots[s].ours))) ||
                      judged_complete(r, e, same, now);
    }
    ck_run_list_pick_opening(l, latest_opens, r);
    for (size_t i = 0; i < l->n; i++) {
        const ck_run_entry *e = &l->e[i];
        long s = listed_slot(r, e->name);
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

static void watch_subdirs(ckrun *r, double doubt_until);
static void writing_forget(ckrun *r, double now);

/* List the directory again and tell the kernel what changed.  On the
 * watcher's thread (or before the mount): never under a request. */
static void relist(ckrun *r)
{
    ck_run_list l;
    ck_error err = {0};
    struct timespec now;
    double t = now_real();
    writing_forget(r, t);
    watch_subdirs(r, t); /* before the scan: nothing written in between is missed */
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
    int rc = apply_listing(r, &l, &ch);
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

/* ---- the watcher ---- */

/* How the run is followed, for XATTR_WATCH. */
static void ckrun_describe_watch(const ckrun *r, char *out, size_t size)
{
    double every = r->polled ? r->poll : r->inotify_fd < 0 ? 1.0 : 0.0;
    char poll[48] = "";
    if (every > 0)
        snprintf(poll, sizeof poll, "poll every %g s%s", every,
                 r->inotify_fd >= 0 ? " and " : "");
    snprintf(out, size, "%s%s (%s)", poll, r->inotify_fd >= 0 ? "inotify" : "", r->storage.name);
}

#define WATCH_EVENTS                                                                       \
    (IN_CREATE | IN_OPEN | IN_MODIFY | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_ATTRIB |     \
     IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

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
static void writing_forget(ckrun *r, double now)
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
static void watch_subdirs(ckrun *r, double doubt_until)
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
    writing_forget(r, 0);
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
static bool take_events(ckrun *r)
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

static void *watch_main(void *arg)
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
            changed |= take_events(r);
        if (changed)
            relist(r);
    }
    return NULL;
}

/* ---- the checkpoints' mounts ---- */

/* Release a slot's claim (NULL: none). */
static void drop_claim(ck_write_claim *c)
{
    if (c != NULL)
        ck_write_claim_release(c);
    free(c);
}

/* Let slot s's checkpoint go, its saver stopped.  Under r->mu. */
static void release_slot(ckrun *r, run_slot *s)
{
    ckfs *fs = s->fs;
    ckfs_detach(fs);
    free((char *)fs->mountpoint);
    free(fs);
    s->fs = NULL;
    drop_claim(s->claim); /* after its last save */
    s->claim = NULL;
    r->open_cost -= s->cost;
    r->open_fds -= s->fds;
    s->cost = 0;
    s->fds = 0;
    if (s->gone)
        r->n_gone_open--;
}

/* Close slot s's checkpoint, which has nothing to save (its saver's last
 * save then writes nothing, and so tells the run nothing).  Under r->mu. */
static void close_slot(ckrun *r, run_slot *s)
{
    if (s->fs == NULL)
        return;
    ckfs_saver_stop(s->fs);
    release_slot(r, s);
}

/* Whether slot s's open checkpoint may be closed, to be opened again on
 * the next request: not pinned, and numbered as its file would number it
 * afresh.  A checkpoint whose tensors this mount has removed, added or
 * had a save reorder keeps its tree open until the unmount: opened again,
 * its numbers would name other tensors, under the names the kernel has
 * cached and in the NFS file handles it has given out.  Under r->mu. */
static bool closable(const run_slot *s)
{
    return !pinned(s) && ckfs_numbered_as_file(s->fs);
}

/* Close the least recently used checkpoints, not keep, while the open
 * ones hold more memory or descriptors than they may.  One with
 * something to save stays: the bound is exceeded rather than an edit
 * lost. */
static void evict(ckrun *r, const run_slot *keep)
{
    while (r->open_cost > r->budget || r->open_fds > r->max_fds) {
        run_slot *victim = NULL;
        for (size_t i = 0; i < r->n_slots; i++) {
            run_slot *s = &r->slots[i];
            if (s->fs != NULL && s != keep && (victim == NULL || s->used < victim->used) &&
                closable(s))
                victim = s;
        }
        if (victim == NULL)
            return;
        close_slot(r, victim);
    }
}

/* Whether a failure to open is the process's state rather than the
 * file's: out of descriptors or memory, which closing others may cure. */
static bool transient(int errnum)
{
    return errnum == EMFILE || errnum == ENFILE || errnum == ENOMEM;
}

/* Ask the watcher to list the run again (not from here, a request: see
 * relist). */
static void relist_soon(ckrun *r)
{
    uint64_t one = 1;
    if (write(r->relist_fd, &one, sizeof one) != sizeof one) {
        /* the watcher lists again at the next event */
    }
}

/* Why a checkpoint did not open, with the reader's reason: said once.  A
 * transient failure is this request's alone (its errno); any other is the
 * file's, EIO from now on (the file is as it was). */
static int open_failed(ckrun *r, run_slot *s, const ck_error *err, int *errnum)
{
    /* latest_opens said it already, when it could not open it either */
    bool said = s->check_failed && s->error != NULL && strcmp(s->error, err->msg) == 0;
    if (!said && (!transient(err->errnum) || !s->said_transient))
        ckfs_log(&r->proto, LOG_ERR, "%s%s", err->msg,
                 transient(err->errnum) ? " (tried again on the next request)" : "");
    if (transient(err->errnum)) {
        s->said_transient = true;
        *errnum = err->errnum;
        return -1;
    }
    s->failed = true;
    free(s->error);
    s->error = strdup(err->msg);
    set_last_error(r, s->name, err->msg);
    /* `latest` is the newest that opens: when it was this one, the
     * watcher lists again and moves it, telling the kernel (not from
     * here, a request: see relist). */
    if (r->latest == s - r->slots)
        relist_soon(r);
    *errnum = EIO;
    return -1;
}

static bool file_is_slots(const run_slot *s, const struct stat *st)
{
    return (uint64_t)st->st_size == s->size && st->st_mtim.tv_sec == s->mtime.tv_sec &&
           st->st_mtim.tv_nsec == s->mtime.tv_nsec &&
           (s->file_ino == 0 || st->st_ino == s->file_ino);
}

/* Slot s's checkpoint as a model: its file, or its collection's
 * directory (beneath the run directory, no link followed, opened by the
 * collection's own open_at).  claim: the file's, which recovered what a
 * crash cut short; the file is then watched for other programs'
 * writes. */
static ck_model *open_checkpoint(ckrun *r, const run_slot *s, const char *path,
                                 const ck_write_claim *claim, ck_error *err)
{
    if (s->collection != NULL)
        return ck_run_dir_open(r->dir_fd, s->collection, s->file, path, &r->open_opts, err);
    if (claim != NULL) {
        ck_dir_share_watch(claim->dir, r->file_watch);
        return ck_model_open_at(claim->dir, path, &r->open_opts, err);
    }
    ck_model_dir *dir = ck_dir_in(r->dir_fd, r->path, s->file, err);
    ck_model *model = dir != NULL ? ck_model_open_at(dir, path, &r->open_opts, err) : NULL;
    ck_dir_unref(dir); /* the model holds it */
    return model;
}

/* Why slot s is read-only in a writable run: said once a slot. */
static void say_read_only(ckrun *r, run_slot *s, const char *why)
{
    if (!s->said)
        ckfs_log(&r->proto, LOG_WARNING, "%s; %s/%s is shown read-only", why, r->mountpoint,
                 s->name);
    s->said = true;
    s->read_only = true;
}

/* Slot s's file claimed for writing (save/write_claim.h), or NULL: when
 * another writer holds its lock or the lock cannot be made, said, and
 * the slot is then read-only; when what a crash cut short cannot be
 * finished, *failed set with err, and the slot does not open. */
static ck_write_claim *take_slot_claim(ckrun *r, run_slot *s, bool *failed, ck_error *err)
{
    ck_write_claim *c = malloc(sizeof *c);
    if (c == NULL)
        ck_fail(err, ENOMEM, "%s/%s: out of memory", r->path, s->file);
    else if (ck_write_claim_take_at(c, r->dir_fd, r->path, s->file, r->where, err) == 0)
        return c;
    *failed = c != NULL && c->unrecovered;
    free(c);
    if (!*failed)
        say_read_only(r, s, err->msg);
    return NULL;
}


/* A model ckptfs reads but cannot save is shown read-only. */
static bool savable(ckrun *r, run_slot *s, const ck_model *model)
{
    ck_error err = {0};
    if (ck_model_may_save(model, &err) == 0)
        return true;
    say_read_only(r, s, err.msg);
    return false;
}

/* Slot s is the file of attributes st, written by this mount (a save, or
 * one a crash cut short that its claim finished).  Under r->mu. */
static void slot_is_now(run_slot *s, const struct stat *st)
{
    s->size = (uint64_t)st->st_size;
    s->mtime = st->st_mtim;
    s->file_ino = st->st_ino;
    s->ours = true;
}

/* The saver of slot fs tells the run of its save (ckfs.on_save): while it
 * writes, the listing keeps the slot as it is; once committed, the slot
 * is the new file, which is listed again at once.  Holding no lock. */
static void slot_saves(ckfs *fs, bool begins, bool committed)
{
    ckrun *r = fs->owner;
    pthread_mutex_lock(&r->mu);
    run_slot *s = &r->slots[slot_of_ino(fs->ino_base) - 1];
    r->save_gen++;
    s->saving = begins;
    if (committed) /* tr.model is switched by this very thread */
        slot_is_now(s, ckfs_file_stat(fs));
    pthread_mutex_unlock(&r->mu);
    if (!begins)
        relist_soon(r);
}

/* Open slot s's checkpoint as a model mount: writable when the run is
 * and the checkpoint can be.  Under r->mu. */
static int open_slot(ckrun *r, size_t index, int *errnum)
{
    run_slot *s = &r->slots[index];
    ck_error err = {0};
    char *path = NULL, *shown = NULL;
    if (asprintf(&path, "%s/%s", r->path, s->file) < 0) {
        *errnum = ENOMEM;
        return -1;
    }
    s->read_only = false;
    bool unrecovered = false;
    ck_write_claim *claim =
        r->writable && !slot_is_dir(s) ? take_slot_claim(r, s, &unrecovered, &err) : NULL;
    ck_model *model = unrecovered ? NULL : open_checkpoint(r, s, path, claim, &err);
    free(path);
    if (model != NULL && claim != NULL && claim->finished) {
        slot_is_now(s, &model->st); /* the listing saw the file before */
        relist_soon(r);
    }
    if (model != NULL && !file_is_slots(s, &model->st)) { /* replaced since it was listed */
        ck_model_close(model);
        model = NULL;
        err.errnum = ENOENT;
    }
    if (model != NULL && claim != NULL && !savable(r, s, model)) {
        drop_claim(claim);
        claim = NULL;
    }
    ckfs *fs = model ? calloc(1, sizeof *fs) : NULL;
    if (fs == NULL || asprintf(&shown, "%s/%s", r->mountpoint, s->name) < 0) {
        free(fs);
        ck_model_close(model);
        drop_claim(claim);
        if (model != NULL) {
            *errnum = ENOMEM;
            return -1;
        }
        if (err.errnum != ENOENT)
            return open_failed(r, s, &err, errnum);
        *errnum = ESTALE; /* gone since it was listed: the watcher will say so */
        return -1;
    }
    *fs = r->proto;
    ckfs_front_rebind(fs); /* its own front, not the prototype's */
    fs->mountpoint = shown;
    fs->ino_base = slot_ino(index, 0);
    if (ckfs_attach(fs, model, &r->open_opts, claim != NULL, claim != NULL ? r->spill_max : 0,
                    &err) < 0) {
        ck_model_close(model);
        drop_claim(claim);
        free(shown);
        free(fs);
        return open_failed(r, s, &err, errnum);
    }
    fs->owner = r;
    fs->on_save = claim != NULL ? slot_saves : NULL;
    ckfs_start_sealed(fs, __atomic_load_n(&r->sealed, __ATOMIC_ACQUIRE));
    s->said_transient = false;
    s->opens = true;
    if (s->check_failed) { /* it opens after all: it may be `latest` (see relist) */
        s->check_failed = false;
        free(s->error);
        s->error = NULL;
        relist_soon(r);
    }
    ckfs_saver_init(fs); /* its thread starts with the first edit */
    s->file_ino = model->st.st_ino;
    s->fs = fs;
    s->claim = claim;
    /* The index, the mount around it, a guess at the allocator's and the
     * kernel's share, and what the pages of a wrapped one may hold; its
     * files and directory, and the run's, kept again when that is below
     * it (rank_<id>/, a collection's directory). */
    s->cost = ckfs_footprint(fs) + sizeof *fs + 4096 +
              (ck_envelope_is_wrapped(&model->env) ? ck_page_cache_budget(model->cache) : 0) +
              (claim != NULL ? WRITABLE_COST : 0);
    s->fds = model->n_sources + 1 + (model->dir->root != NULL) +
             (claim != NULL ? WRITABLE_FDS : 0);
    r->open_cost += s->cost;
    r->open_fds += s->fds;
    if (s->read_only && r->se != NULL) /* its directory loses its w bits */
        ckfs_tell_inval_inode(r->se, slot_ino(index, INO_ROOT), -1, 0);
    evict(r, s);
    return 0;
}

/* Close every open checkpoint but keep that has nothing to save: how
 * many were. */
static size_t close_idle(ckrun *r, const run_slot *keep)
{
    size_t closed = 0;
    for (size_t i = 0; i < r->n_slots; i++) {
        run_slot *s = &r->slots[i];
        if (s->fs != NULL && s != keep && closable(s)) {
            close_slot(r, s);
            closed++;
        }
    }
    return closed;
}

/* Open slot index's checkpoint; out of descriptors or memory (another
 * large one open, a low `ulimit -n`), once more after closing the idle
 * ones, which the next request into them opens again.  Under r->mu. */
static int open_slot_or_make_room(ckrun *r, size_t index, int *errnum)
{
    if (open_slot(r, index, errnum) == 0)
        return 0;
    if (!transient(*errnum) || close_idle(r, &r->slots[index]) == 0)
        return -1;
    return open_slot(r, index, errnum);
}

/* Let the files of deleted or replaced checkpoints go.  One an edit
 * reached while the watcher looked stays, for the unmount to say so.
 * Under r->mu, on the request thread. */
static void close_gone(ckrun *r)
{
    for (size_t i = 0; r->n_gone_open > 0 && i < r->n_slots; i++)
        if (r->slots[i].gone && r->slots[i].fs != NULL && !pinned(&r->slots[i]))
            close_slot(r, &r->slots[i]);
}

/* The watcher dropped open slots from the listing: between requests, on
 * the request thread. */
static void close_gone_now(void *arg)
{
    ckrun *r = arg;
    pthread_mutex_lock(&r->mu);
    close_gone(r);
    pthread_mutex_unlock(&r->mu);
}

void ckrun_idle_work(ckrun *r, ckfs_idle_work *work)
{
    *work = (ckfs_idle_work){.fd = r->wake_fd, .run = close_gone_now, .arg = r};
}

/* A failed seal: every open checkpoint takes edits again.  Under r->mu,
 * on the request thread (which holds no checkpoint's lock here). */
static void unseal_all(ckrun *r)
{
    __atomic_store_n(&r->sealed, false, __ATOMIC_RELEASE);
    for (size_t i = 0; i < r->n_slots; i++)
        if (r->slots[i].fs != NULL && ckfs_writable(r->slots[i].fs))
            ckfs_unseal(r->slots[i].fs);
}

/* The checkpoint mount serving *ino, opened if it must be, *ino made its
 * own number; NULL with *errnum when there is none now.  On the request
 * thread. */
static ckfs *slot_mount(ckrun *r, ckfs_ino *ino, int *errnum)
{
    uint64_t s = slot_of_ino(*ino);
    ckfs *fs = NULL;
    pthread_mutex_lock(&r->mu);
    if (__atomic_exchange_n(&r->seal_failed, false, __ATOMIC_ACQ_REL))
        unseal_all(r);
    close_gone(r); /* the watcher asked for it too: this may come first */
    run_slot *slot = s >= 1 && s <= r->n_slots ? &r->slots[s - 1] : NULL;
    if (slot == NULL || slot->gone) {
        *errnum = ESTALE;
    } else if (slot->failed) {
        *errnum = EIO; /* and why, each time: a user looks after the EIO */
        set_last_error(r, slot->name, slot->error != NULL ? slot->error : "does not open");
    } else if (slot->fs != NULL || open_slot_or_make_room(r, (size_t)(s - 1), errnum) == 0) {
        slot->used = ++r->clock;
        fs = slot->fs;
    }
    pthread_mutex_unlock(&r->mu);
    if (fs != NULL)
        *ino &= CKFS_INO_MASK;
    return fs;
}

/* ---- the root, `latest` and the checkpoints' directories ---- */

/* A directory's mode for a file's: r and w as the file has them, no w
 * when read-only, the owner's w when writable (as a model mount shows its
 * root), x wherever r. */
static mode_t dir_mode(mode_t file_mode, bool writable)
{
    mode_t m = file_mode & 0666;
    m = writable ? m | S_IWUSR : m & ~(mode_t)0222;
    return S_IFDIR | m | (m & 0444) >> 2;
}

/* Whether slot s's checkpoint is edited: in a writable run, a file that
 * could be written when last opened (guessed so before). */
static bool slot_writable(const ckrun *r, const run_slot *s)
{
    return r->writable && !slot_is_dir(s) && !s->read_only;
}

static void times_of(struct stat *st, const struct timespec *t)
{
    st->st_atim = *t;
    st->st_mtim = *t;
    st->st_ctim = *t;
}

/* Attributes of a run-level node (root, latest) or of a checkpoint's
 * directory, from the listing: nothing is opened.  Under r->mu. */
static int run_attr(ckrun *r, ckfs_ino ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_blksize = 65536;
    st->st_uid = r->dir_st.st_uid;
    st->st_gid = r->dir_st.st_gid;
    times_of(st, &r->dir_st.st_mtim);
    if (ino == RUN_INO_ROOT) {
        st->st_mode = dir_mode(r->dir_st.st_mode, false);
        st->st_nlink = 2 + r->n_listed;
        return 0;
    }
    if (ino == RUN_INO_LATEST) {
        if (r->latest < 0)
            return -1;
        st->st_mode = S_IFLNK | 0777;
        st->st_nlink = 1;
        st->st_size = (off_t)strlen(r->slots[r->latest].name);
        return 0;
    }
    uint64_t s = slot_of_ino(ino);
    if ((ino & CKFS_INO_MASK) != INO_ROOT || s < 1 || s > r->n_slots || r->slots[s - 1].gone)
        return -1;
    const run_slot *slot = &r->slots[s - 1];
    st->st_mode = dir_mode(slot->mode, slot_writable(r, slot));
    st->st_nlink = 1; /* not counted: that would open it (find takes 1 as "unknown") */
    st->st_uid = slot->uid;
    st->st_gid = slot->gid;
    times_of(st, &slot->mtime);
    return 0;
}

/* `latest` changes with the run: never cached.  The rest until the
 * watcher says otherwise. */
static double run_timeout(const ckrun *r, ckfs_ino ino)
{
    return ino == RUN_INO_LATEST ? 0.0 : r->proto.timeout;
}

static int run_entry(ckrun *r, ckfs_ino ino, ckfs_entry_out *e)
{
    memset(e, 0, sizeof *e);
    if (run_attr(r, ino, &e->attr) < 0)
        return -1;
    e->ino = ino;
    e->generation = ckfs_generation_of(&r->proto, ino); /* slots are never reused */
    e->attr_timeout = run_timeout(r, ino);
    e->entry_timeout = run_timeout(r, ino);
    return 0;
}

static bool is_run_node(ckfs_ino ino)
{
    return slot_of_ino(ino) == 0;
}

/* A checkpoint's own directory: its attributes come from the listing. */
static bool is_checkpoint_dir(ckfs_ino ino)
{
    return !is_run_node(ino) && (ino & CKFS_INO_MASK) == INO_ROOT;
}

/* ".." of a directory inside a checkpoint: its tensor directories' parent
 * is the checkpoint's directory, a run node (attributes from the listing),
 * once the checkpoint says the directory is still there. */
static int run_lookup_parent(ckrun *r, ckfs_ino parent, ckfs_entry_out *out)
{
    ckfs_ino ino = parent;
    int errnum = ESTALE;
    ckfs *fs = slot_mount(r, &ino, &errnum);
    if (fs == NULL)
        return -errnum;
    node_kind k = ckfs_kind_of(fs, ino);
    int rc = -1;
    if (k == NODE_TENSOR_DIR) {
        pthread_mutex_lock(&r->mu);
        rc = run_entry(r, (parent & ~CKFS_INO_MASK) | INO_ROOT, out);
        pthread_mutex_unlock(&r->mu);
    }
    if (rc == 0)
        return 0;
    return k == NODE_NONE || k == NODE_TENSOR_DIR ? -ESTALE : -ENOTDIR;
}

/* The checkpoint front serving *ino, *ino made its own number; NULL with
 * *errnum when there is none now.  The one way a request reaches a
 * checkpoint: through that checkpoint's own front. */
static ckfs_front *inside(ckrun *r, ckfs_ino *ino, int *errnum)
{
    ckfs *fs = slot_mount(r, ino, errnum);
    return fs != NULL ? &fs->front : NULL;
}

/* "." and ".." of the run's nodes and the checkpoints' directories (see
 * lookup_dots in mount/model_ops.c: NFS file handles), their ".." the run's
 * root; a node gone since is ESTALE.  Inside a checkpoint, "." is its
 * model mount's, ".." run_lookup_parent's. */
static int run_lookup_dots(ckrun *r, const ckfs_caller *c, ckfs_ino parent, const char *name,
                           ckfs_entry_out *out, ckfs_hold *h)
{
    bool dot = name[1] == '\0';
    if (!is_run_node(parent) && !is_checkpoint_dir(parent)) {
        if (!dot)
            return run_lookup_parent(r, parent, out);
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &parent, &errnum);
        return in != NULL ? in->ops->lookup(in, c, parent, name, out, h) : -errnum;
    }
    pthread_mutex_lock(&r->mu);
    int rc = run_entry(r, parent, out); /* whether parent is still there */
    if (rc == 0 && !dot && parent == RUN_INO_LATEST)
        rc = 1; /* a link has no ".." */
    else if (rc == 0 && !dot)
        rc = run_entry(r, RUN_INO_ROOT, out);
    pthread_mutex_unlock(&r->mu);
    if (rc == 0)
        return 0;
    return rc > 0 ? -ENOTDIR : -ESTALE;
}

static ckrun *run_of(ckfs_front *f)
{
    return (ckrun *)f;
}

static int r_lookup(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_entry_out *out, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
        return run_lookup_dots(r, c, parent, name, out, h);
    if (!is_run_node(parent)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &parent, &errnum);
        return in != NULL ? in->ops->lookup(in, c, parent, name, out, h) : -errnum;
    }
    int rc = -1;
    pthread_mutex_lock(&r->mu);
    if (parent == RUN_INO_ROOT && strcmp(name, "latest") == 0) {
        rc = run_entry(r, RUN_INO_LATEST, out);
    } else if (parent == RUN_INO_ROOT) {
        long s = listed_slot(r, name);
        rc = s < 0 ? -1 : run_entry(r, slot_ino((size_t)s, INO_ROOT), out);
    }
    pthread_mutex_unlock(&r->mu);
    if (rc < 0)
        return parent == RUN_INO_ROOT ? -ENOENT : -ENOTDIR;
    return 0;
}

static int r_getattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_attr_out *out,
                     ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (!is_run_node(ino) && !is_checkpoint_dir(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->getattr(in, c, ino, out, h) : -errnum;
    }
    pthread_mutex_lock(&r->mu);
    int rc = run_attr(r, ino, &out->st);
    pthread_mutex_unlock(&r->mu);
    if (rc < 0)
        return is_run_node(ino) ? -ENOENT : -ESTALE;
    out->timeout = run_timeout(r, ino);
    return 0;
}

static int r_readlink(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, char *target,
                      size_t cap, ckfs_hold *h)
{
    (void)c, (void)h;
    ckrun *r = run_of(f);
    if (ino != RUN_INO_LATEST)
        return -EINVAL;
    target[0] = '\0';
    pthread_mutex_lock(&r->mu);
    if (r->latest >= 0)
        snprintf(target, cap, "%s", r->slots[r->latest].name);
    pthread_mutex_unlock(&r->mu);
    return target[0] == '\0' ? -ENOENT : 0;
}

/* Root listing positions: ".", "..", "latest", then the checkpoints by
 * name.  A checkpoint added between two reads of a listing may shift the
 * ones after it, as on any directory that changes while it is read. */
static int run_readdir_root(ckrun *r, off_t off, bool plus, ckfs_dir_add add, void *ctx)
{
    pthread_mutex_lock(&r->mu);
    for (off_t pos = off; pos >= 0; pos++) {
        const char *name;
        ckfs_ino ino;
        if (pos < 2) {
            name = pos == 0 ? "." : "..";
            ino = RUN_INO_ROOT;
        } else if (pos == 2) {
            if (r->latest < 0)
                continue;
            name = "latest";
            ino = RUN_INO_LATEST;
        } else if ((size_t)(pos - 3) < r->n_listed) {
            size_t s = r->listed[pos - 3];
            name = r->slots[s].name;
            ino = slot_ino(s, INO_ROOT);
        } else {
            break;
        }
        ckfs_entry_out e;
        run_entry(r, ino, &e);
        if (plus && pos < 2)
            e.ino = 0; /* "." and ".." carry no lookup reference */
        if (!add(ctx, name, &e, pos + 1))
            break;
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int r_readdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, off_t off, bool plus,
                     ckfs_dir_add add, void *ctx, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (ino == RUN_INO_ROOT)
        return run_readdir_root(r, off, plus, add, ctx);
    int errnum = ESTALE;
    ckfs_front *in = inside(r, &ino, &errnum);
    return in != NULL ? in->ops->readdir(in, c, ino, off, plus, add, ctx, h) : -errnum;
}

/* A checkpoint's directory's user.ckptfs.error: why it does not open,
 * where `ls` of it says only EIO.  It is opened to tell (once: a
 * failure is kept); one that opens has none. */
static int run_error_xattr(ckrun *r, ckfs_ino ino, ckfs_xattr_out *out)
{
    ckfs_ino inner = ino;
    int errnum = ESTALE;
    if (slot_mount(r, &inner, &errnum) != NULL)
        return -ENODATA;
    char why[CKFS_LAST_ERROR_MAX] = "";
    uint64_t s = slot_of_ino(ino);
    pthread_mutex_lock(&r->mu);
    if (s >= 1 && s <= r->n_slots && r->slots[s - 1].error != NULL)
        snprintf(why, sizeof why, "%s", r->slots[s - 1].error);
    pthread_mutex_unlock(&r->mu);
    if (why[0] == '\0')
        return -errnum;
    return ckfs_xattr_text(out, why);
}

static int run_last_error_xattr(ckrun *r, ckfs_xattr_out *out)
{
    char why[CKFS_LAST_ERROR_MAX];
    pthread_mutex_lock(&r->error_mu);
    memcpy(why, r->last_error, sizeof why);
    pthread_mutex_unlock(&r->error_mu);
    if (why[0] == '\0')
        return -ENODATA;
    return ckfs_xattr_text(out, why);
}

/* The root has the pid (for ckptfs-umount); a checkpoint's directory has
 * its model's xattrs, which opening it gives, except the names ckptfs
 * never serves: `ls -l` of the root asks for those and must not open
 * every checkpoint to hear "not supported".  And user.ckptfs.error (above). */
static int r_getxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                      ckfs_xattr_out *out, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (is_checkpoint_dir(ino) && strcmp(name, XATTR_ERROR) == 0)
        return run_error_xattr(r, ino, out);
    if (!is_run_node(ino) && !(is_checkpoint_dir(ino) && ckfs_unserved_xattr(name))) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->getxattr(in, c, ino, name, out, h) : -errnum;
    }
    if (ckfs_unserved_xattr(name))
        return -EOPNOTSUPP;
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_PID) == 0)
        return ckfs_xattr_pid(out);
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_WATCH) == 0) {
        char how[128];
        ckrun_describe_watch(r, how, sizeof how);
        return ckfs_xattr_text(out, how);
    }
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_LAST_ERROR) == 0)
        return run_last_error_xattr(r, out);
    return -ENODATA;
}

static int r_listxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_xattr_out *out,
                       ckfs_hold *h)
{
    static const char names[] = XATTR_PID "\0" XATTR_WATCH "\0" XATTR_LAST_ERROR;
    ckrun *r = run_of(f);
    if (!is_run_node(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->listxattr(in, c, ino, out, h) : -errnum;
    }
    out->value = "";
    out->len = 0;
    if (ino != RUN_INO_ROOT)
        return 0;
    pthread_mutex_lock(&r->error_mu);
    bool failed = r->last_error[0] != '\0';
    pthread_mutex_unlock(&r->error_mu);
    out->value = names;
    out->len = failed ? sizeof names : sizeof XATTR_PID + sizeof XATTR_WATCH;
    return 0;
}

/* ---- the seal (ckptfs-umount) ---- */

/* One user.ckptfs.unmount=1, answered once every open writable
 * checkpoint has saved (and sealed) or one has failed. */
typedef struct seal_join {
    pthread_mutex_t mu;         /* guards what follows */
    ckrun *r;
    void *req;                  /* answered through answer (the caller's answer_later) */
    void (*answer)(void *req, int errnum);
    unsigned left;              /* saves still running, plus one while they are asked for */
    int errnum;                 /* the first failure's */
} seal_join;

/* One of the join's saves has ended (why: its checkpoint's last error).
 * On the saver's thread under that checkpoint's lock, or the request
 * thread's: takes no lock of the run's but error_mu. */
static void seal_join_end(seal_join *j, int errnum, const char *why)
{
    ckrun *r = j->r;
    pthread_mutex_lock(&j->mu);
    if (errnum != 0 && j->errnum == 0) {
        j->errnum = errnum;
        pthread_mutex_lock(&r->error_mu);
        snprintf(r->last_error, sizeof r->last_error, "%s", why);
        pthread_mutex_unlock(&r->error_mu);
    }
    bool last = --j->left == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last)
        return;
    if (j->errnum != 0) /* the request thread unseals every checkpoint */
        __atomic_store_n(&r->seal_failed, true, __ATOMIC_RELEASE);
    j->answer(j->req, j->errnum);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void seal_saved(ckfs_waiter *w, int errnum, const char *why)
{
    seal_join_end(w->arg, errnum, why);
}

/* user.ckptfs.unmount=1: save every open writable checkpoint and take no
 * more edits (those opened later too); =0: take them again.  The request
 * is answered once they have (CKFS_ANSWERED_LATER). */
static int run_seal(const ckfs_caller *c, ckrun *r, const char *value, size_t size)
{
    if (size != 1 || (value[0] != '0' && value[0] != '1'))
        return -EINVAL;
    seal_join *j = value[0] == '1' ? calloc(1, sizeof *j) : NULL;
    if (value[0] == '1' && j == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&r->mu);
    if (j == NULL) {
        unseal_all(r);
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->r = r;
    j->req = c->req;
    j->answer = c->answer_later;
    j->left = 1;
    __atomic_store_n(&r->sealed, true, __ATOMIC_RELEASE);
    for (size_t i = 0; i < r->n_slots; i++) {
        ckfs *fs = r->slots[i].fs;
        if (fs == NULL || !ckfs_writable(fs))
            continue;
        ckfs_waiter *w = calloc(1, sizeof *w);
        pthread_mutex_lock(&j->mu);
        j->left++;
        pthread_mutex_unlock(&j->mu);
        if (w == NULL) {
            seal_join_end(j, ENOMEM, "out of memory");
            break;
        }
        *w = (ckfs_waiter){.done = seal_saved, .arg = j};
        ckfs_seal(fs, w);
    }
    pthread_mutex_unlock(&r->mu);
    seal_join_end(j, 0, NULL); /* all asked */
    return CKFS_ANSWERED_LATER;
}

/* ckptfs-umount seals before it unmounts: a read-only run has nothing to
 * save. */
static int r_setxattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *name,
                      const char *value, size_t size, ckfs_defer *d, ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (!is_run_node(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->setxattr(in, c, ino, name, value, size, d, h) : -errnum;
    }
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_UNMOUNT) == 0 && r->writable)
        return run_seal(c, r, value, size);
    if (ino == RUN_INO_ROOT && strcmp(name, XATTR_UNMOUNT) == 0)
        return size == 1 && (value[0] == '0' || value[0] == '1') ? 0 : -EINVAL;
    return -EROFS;
}

static int r_statfs(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, struct statvfs *sv,
                    ckfs_hold *h)
{
    ckrun *r = run_of(f);
    if (!is_run_node(ino)) {
        int errnum = ESTALE;
        ckfs_front *in = inside(r, &ino, &errnum);
        return in != NULL ? in->ops->statfs(in, c, ino, sv, h) : -errnum;
    }
    if (fstatvfs(r->dir_fd, sv) < 0)
        memset(sv, 0, sizeof *sv);
    sv->f_namemax = 255;
    sv->f_flag = r->writable ? 0 : ST_RDONLY;
    return 0;
}

/* Changes at the run level: the run is read-only.  Inside a checkpoint,
 * its own front decides. */
static int r_mknod(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   mode_t mode, ckfs_entry_out *e, ckfs_defer *d, ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->mknod(in, c, parent, name, mode, e, d, h) : -errnum;
}

static int r_mkdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   mode_t mode, ckfs_entry_out *e, ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->mkdir(in, c, parent, name, mode, e, h) : -errnum;
}

static int r_unlink(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->unlink(in, c, parent, name, h) : -errnum;
}

static int r_rmdir(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                   ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->rmdir(in, c, parent, name, h) : -errnum;
}

/* Both directories must be in one checkpoint: one cannot take another's
 * files. */
static int r_rename(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    ckfs_ino newparent, const char *newname, unsigned flags, ckfs_defer *d,
                    ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent) || is_run_node(newparent))
        return -EROFS;
    if ((parent & ~CKFS_INO_MASK) != (newparent & ~CKFS_INO_MASK))
        return -EXDEV;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->rename(in, c, parent, name, newparent & CKFS_INO_MASK, newname,
                                        flags, d, h)
                      : -errnum;
}

/* Links: none in the run's root; a model mount makes none either. */
static int r_symlink(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, ckfs_hold *h)
{
    (void)f, (void)c, (void)h;
    return is_run_node(parent) ? -EROFS : -ENOSYS;
}

static int r_link(ckfs_front *f, const ckfs_caller *c, ckfs_ino newparent, ckfs_hold *h)
{
    (void)f, (void)c, (void)h;
    return is_run_node(newparent) ? -EROFS : -ENOSYS;
}

static int r_create(ckfs_front *f, const ckfs_caller *c, ckfs_ino parent, const char *name,
                    mode_t mode, int flags, ckfs_entry_out *e, ckfs_open_out *out, ckfs_defer *d,
                    ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(parent))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &parent, &errnum);
    return in != NULL ? in->ops->create(in, c, parent, name, mode, flags, e, out, d, h)
                      : -errnum;
}

static int r_setattr(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const struct stat *attr,
                     int to_set, ckfs_attr_out *out, ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(ino) || is_checkpoint_dir(ino))
        return -EROFS;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->setattr(in, c, ino, attr, to_set, out, h) : -errnum;
}

/* No handles for directories, as in a model mount: ENOSYS stops OPENDIR
 * for the whole connection. */
static int r_opendir(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_hold *h)
{
    (void)f, (void)c, (void)ino, (void)h;
    return -ENOSYS;
}

static int r_fsync(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, ckfs_defer *d,
                   ckfs_hold *h)
{
    int errnum = ESTALE;
    if (is_run_node(ino))
        return 0; /* nothing to save */
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->fsync(in, c, ino, d, h) : -errnum;
}

/* Files are all inside checkpoints. */
static int r_open(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, int flags,
                  ckfs_open_out *out, ckfs_defer *d, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->open(in, c, ino, flags, out, d, h) : -errnum;
}

static int r_read(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, size_t size, off_t off,
                  ckfs_read_plan *plan, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->read(in, c, ino, size, off, plan, h) : -errnum;
}

static int r_write(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, const char *buf,
                   size_t size, off_t off, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->write(in, c, ino, buf, size, off, h) : -errnum;
}

static int r_flush(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh,
                   ckfs_defer *d, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->flush(in, c, ino, fh, d, h) : -errnum;
}

static int r_release(ckfs_front *f, const ckfs_caller *c, ckfs_ino ino, uint64_t fh,
                     bool *save_handle, ckfs_hold *h)
{
    int errnum = ESTALE;
    ckfs_front *in = inside(run_of(f), &ino, &errnum);
    return in != NULL ? in->ops->release(in, c, ino, fh, save_handle, h) : -errnum;
}

static const ckfs_front_ops run_ops = {
    .lookup = r_lookup,
    .getattr = r_getattr,
    .setattr = r_setattr,
    .readlink = r_readlink,
    .opendir = r_opendir,
    .readdir = r_readdir,
    .open = r_open,
    .read = r_read,
    .write = r_write,
    .flush = r_flush,
    .release = r_release,
    .fsync = r_fsync,
    .create = r_create,
    .mknod = r_mknod,
    .mkdir = r_mkdir,
    .unlink = r_unlink,
    .rmdir = r_rmdir,
    .rename = r_rename,
    .symlink = r_symlink,
    .link = r_link,
    .getxattr = r_getxattr,
    .listxattr = r_listxattr,
    .setxattr = r_setxattr,
    .statfs = r_statfs,
    .destroy = NULL, /* nothing to save: the checkpoints' last saves come after the session
                      * (ckrun_close_all) */
};

/* ---- life ---- */

ckrun *ckrun_new(const ckrun_opts *o, ck_error *err)
{
    ckrun *r = calloc(1, sizeof *r);
    if (r == NULL) {
        ck_nomem(err, o->path);
        return NULL;
    }
    r->dir_fd = r->inotify_fd = r->stop_fd = r->relist_fd = r->top_wd = r->wake_fd = -1;
    r->latest = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->error_mu, NULL);
    if ((r->path = strdup(o->path)) == NULL || (r->mountpoint = strdup(o->mountpoint)) == NULL ||
        (r->where = strdup(o->where ? o->where : o->mountpoint)) == NULL) {
        ckrun_free(r);
        ck_nomem(err, o->path);
        return NULL;
    }
    r->front = (ckfs_front){.ops = &run_ops, .splice = &r->proto.splice,
                            .max_read = &r->proto.max_read};
    r->proto = *o->proto;
    r->settle = o->settle;
    r->budget = o->index_cache;
    r->max_fds = o->max_fds;
    r->open_opts = o->open_opts;
    r->writable = o->writable;
    r->spill_max = o->spill_max;
    if (r->writable)
        r->file_watch = ck_watch_new(); /* NULL: any new mtime counts as a write */
    r->dir_fd = open(r->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (r->dir_fd >= 0 && ck_storage_of(r->dir_fd, &r->storage) < 0)
        snprintf(r->storage.name, sizeof r->storage.name, "unknown"); /* as local storage */
    r->poll = o->poll;
    r->polled = o->watch == CKRUN_WATCH_POLL ||
                (o->watch == CKRUN_WATCH_AUTO && r->storage.shared);
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->wake_fd < 0) {
        ck_fail_errno(err, errno, "%s: cannot make an eventfd", r->path);
        ckrun_free(r);
        return NULL;
    }
    if (r->dir_fd < 0 || fstat(r->dir_fd, &r->dir_st) < 0) {
        ck_fail_errno(err, errno, "%s: cannot read the run directory", r->path);
        ckrun_free(r);
        return NULL;
    }
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
    watch_subdirs(r, 0);
    ck_run_list l;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int rc = ck_run_dir_scan_at(r->dir_fd, r->path, r->settle, &now, &l, err);
    run_change ch = {0};
    if (rc == 0 && apply_listing(r, &l, &ch) < 0)
        rc = ck_nomem(err, r->path);
    free(ch.dropped);
    ck_run_list_free(&l);
    if (rc < 0) {
        ckrun_free(r);
        return NULL;
    }
    return r;
}

ckfs_front *ckrun_front(ckrun *r)
{
    return &r->front;
}

int ckrun_start(ckrun *r, struct fuse_session *se, bool use_syslog)
{
    r->se = se;
    r->proto.se = se;
    r->proto.use_syslog = use_syslog;
    r->stop_fd = eventfd(0, EFD_CLOEXEC);
    r->relist_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = r->stop_fd < 0 || r->relist_fd < 0 ? errno
                                                : pthread_create(&r->watcher, NULL, watch_main, r);
    if (rc != 0) {
        ckfs_log(&r->proto, LOG_ERR, "%s: cannot start watching the run: %s", r->path,
                 strerror(rc));
        return -1;
    }
    r->watching = true;
    return 0;
}

void ckrun_stop(ckrun *r)
{
    uint64_t one = 1;
    if (r->watching && write(r->stop_fd, &one, sizeof one) == sizeof one)
        pthread_join(r->watcher, NULL);
    r->watching = false;
    pthread_mutex_lock(&r->mu); /* unmounting: nothing left to invalidate */
    r->se = NULL;
    r->proto.se = NULL;
    for (size_t i = 0; i < r->n_slots; i++) {
        ckfs *fs = r->slots[i].fs;
        if (fs == NULL)
            continue;
        ckfs_leave_session(fs);
    }
    pthread_mutex_unlock(&r->mu);
}

int ckrun_close_all(ckrun *r)
{
    int rc = 0;
    for (size_t i = 0; i < r->n_slots; i++) {
        run_slot *s = &r->slots[i];
        pthread_mutex_lock(&r->mu);
        ckfs *fs = s->fs;
        pthread_mutex_unlock(&r->mu);
        if (fs == NULL)
            continue;
        /* Its last save tells the run (slot_saves): not under r->mu. */
        if (ckfs_saver_stop(fs) < 0)
            rc = -1;
        pthread_mutex_lock(&r->mu);
        release_slot(r, s);
        pthread_mutex_unlock(&r->mu);
    }
    return rc;
}

void ckrun_free(ckrun *r)
{
    if (r == NULL)
        return;
    ckrun_stop(r);
    ckrun_close_all(r); /* after a failed start: nothing to save */
    if (r->stop_fd >= 0)
        close(r->stop_fd);
    if (r->relist_fd >= 0)
        close(r->relist_fd);
    if (r->inotify_fd >= 0)
        close(r->inotify_fd);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    if (r->dir_fd >= 0)
        close(r->dir_fd); /* after the writer locks, which are beneath it */
    for (size_t i = 0; i < r->n_writing; i++)
        free(r->writing[i].name);
    for (size_t i = 0; i < r->n_subdirs; i++)
        free(r->subdirs[i].name);
    free(r->subdirs);
    for (size_t i = 0; i < r->n_slots; i++) {
        free(r->slots[i].name);
        free(r->slots[i].file);
        free(r->slots[i].error);
    }
    ck_watch_free(r->file_watch);
    free(r->slots);
    free(r->listed);
    free(r->path);
    free(r->mountpoint);
    free(r->where);
    pthread_mutex_destroy(&r->error_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
