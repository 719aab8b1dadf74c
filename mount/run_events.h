/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_events: what inotify tells of a run directory's files being written
 * (run_events.c says how).  On the watcher's thread, or ckrun_new's
 * before it starts.
 */
#ifndef CKPTFS_RUN_EVENTS_H
#define CKPTFS_RUN_EVENTS_H

#include "run_types.h"

/* Watch the run directory (the one open, whatever its name leads to
 * now) and its subdirectories, before the first listing: nothing written
 * in between is missed.  Without inotify (said), the run is listed
 * again every second. */
void ckrun_events_open(ckrun *r);
/* Watch every subdirectory not watched yet: their files changed before
 * doubt_until are judged by settle time alone. */
void ckrun_watch_subdirs(ckrun *r, double doubt_until);
/* Read every pending event.  Whether to list again. */
bool ckrun_take_events(ckrun *r);
/* Forget the files no longer being written; with now 0 every one. */
void ckrun_writing_forget(ckrun *r, double now);
/* Whether the events say entry e's file (or a file in its directory) is
 * being written; when that may change without an event into *due (left
 * alone when it may not). */
bool ckrun_being_written(const ckrun *r, const ck_run_entry *e, double now, double *due);
/* Until when e's files, changed before, are doubtful. */
double ckrun_doubt_of(const ckrun *r, const ck_run_entry *e);
/* How the run is followed, for the root's user.ckptfs.watch: "poll every
 * 2 s and inotify (fuse.s3fs)". */
void ckrun_describe_watch(const ckrun *r, char *out, size_t size);

#endif
