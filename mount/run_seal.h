/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_seal: a run's part of ckptfs-umount (run_seal.c).
 */
#ifndef CKPTFS_RUN_SEAL_H
#define CKPTFS_RUN_SEAL_H

#include "run_types.h"

/* user.ckptfs.unmount=1 (value, size) on the root of writable run r:
 * save every open writable checkpoint and take no more edits (those
 * opened later too), answered through c once they have
 * (CKFS_ANSWERED_LATER); =0: take them again. */
int ckrun_seal(const ckfs_caller *c, ckrun *r, const char *value, size_t size);

#endif
