/* SPDX-License-Identifier: Apache-2.0 */
/*
 * session_loop: the request loop of a session (fuse/session_loop.c).
 */
#ifndef CKPTFS_SESSION_LOOP_H
#define CKPTFS_SESSION_LOOP_H

#include "reply.h"

/* Answer requests on this thread until the mount ends,
 * looking for the next request for busy_poll_us microseconds before
 * sleeping (0 and no work: libfuse's own loop), and doing work (NULL:
 * none) when asked.  0, or a negative errno. */
int ckfs_session_loop(struct fuse_session *se, unsigned busy_poll_us,
                      const ckfs_idle_work *work);

#endif
