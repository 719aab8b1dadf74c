/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_listing: the checkpoints a run's root shows, and the watcher's
 * thread that lists the run again when the events or the clock say
 * (run_listing.c).
 */
#ifndef CKPTFS_RUN_LISTING_H
#define CKPTFS_RUN_LISTING_H

#include "run_types.h"

/* What a new listing changed, for the kernel: names to forget in the
 * root, whether the root's listing and `latest` changed. */
typedef struct run_change {
    const char **dropped;       /* names of slots no longer listed (theirs: stable) */
    size_t n_dropped;
    bool listing, latest;
    bool gone_open;             /* a slot dropped is open: the request thread closes it */
} run_change;

/* Take listing l: slots for new checkpoints, gone for the rest.  Under
 * r->mu; fails only for memory, leaving what was listed. */
int ckrun_apply_listing(ckrun *r, ck_run_list *l, run_change *ch);
/* The listed slot named name, or -1.  Under r->mu. */
long ckrun_listed_slot(const ckrun *r, const char *name);
/* The root's user.ckptfs.last_error becomes why checkpoint name does not
 * open.  Takes error_mu. */
void ckrun_set_last_error(ckrun *r, const char *name, const char *why);
/* Ask the watcher to list the run again (from a request, or a saver:
 * they never tell the kernel themselves). */
void ckrun_relist_soon(ckrun *r);
/* The watcher's thread (pthread_create's start, its argument the run):
 * until r->stop_fd is written. */
void *ckrun_watch_main(void *arg);

#endif
