/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run_ops: a run mount's front (run_ops.c): the run's own nodes from the
 * listing, the rest through each checkpoint's front.
 */
#ifndef CKPTFS_RUN_OPS_H
#define CKPTFS_RUN_OPS_H

#include "run_types.h"

/* The ops of ckrun.front: f is the run (its first member). */
extern const ckfs_front_ops ckrun_front_ops;

#endif
