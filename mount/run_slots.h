/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_slots: the checkpoints' own mounts, opened on the first request
 * inside them and closed within the bound (run_slots.c).
 */
#ifndef CKPTFS_RUN_SLOTS_H
#define CKPTFS_RUN_SLOTS_H

#include "run_types.h"

/* The checkpoint mount serving *ino, opened if it must be, *ino made its
 * own number; NULL with *errnum when there is none now.  On the request
 * thread. */
ckfs *ckrun_slot_mount(ckrun *r, ckfs_ino *ino, int *errnum);
/* A failed seal: every open checkpoint takes edits again.  Under r->mu,
 * on the request thread. */
void ckrun_unseal_all(ckrun *r);
/* Let slot s's checkpoint go, its saver stopped.  Under r->mu. */
void ckrun_release_slot(ckrun *r, run_slot *s);

/* The watcher dropped open slots from the listing (arg: the run): close
 * them, between requests, on the request thread (ckrun_idle_work). */
void ckrun_close_gone_now(void *arg);

#endif
