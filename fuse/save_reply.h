/* SPDX-License-Identifier: Apache-2.0 */
/*
 * save_reply: the replies to requests that wait for a save.
 *
 * A request that asks for a save (touch, mknod or a rename of
 * snapshot_done, `: > snapshot_done`, fsync, ckptfs-umount's seal) is
 * queued with the saver (mount/saver.c), which tells the request's waiter
 * (its done) when the save has ended.  How each such request is answered,
 * the handle of a created snapshot_done that its close waits on, and the
 * seal are here: the FUSE operations (mount/model_ops.c) ask, this file asks the
 * saver with a waiter whose done answers, and so the saver needs nothing
 * of the operations nor of this file.
 *
 * Why a create of snapshot_done is answered at once (save_reply.c): the
 * kernel takes the root's i_rwsem exclusively for a whole create
 * (open_last_lookups -> lookup_open -> fuse_atomic_open), and every
 * lookup of an uncached name takes it shared (lookup_slow); answered once
 * the save was durable, the create held a stat and a 4 KiB read in the
 * root back for 2.3 s of a 2.8 s save of 1 GiB.  A mknod has no close
 * and is still answered by the saver; the seal's setxattr holds the
 * root's lock itself and waits the same way; fsync and an open of an
 * existing snapshot_done hold no directory lock.
 */
#ifndef CKPTFS_SAVE_REPLY_H
#define CKPTFS_SAVE_REPLY_H

#include "reply.h"

/* How a waiter is answered (ckfs_waiter.reply, enum reply) and the
 * handle of an open file that holds the automatic save back (FH_WRITER:
 * the handle itself says so, because by its release the file may have
 * become another) are mount/ops.h's. */

/* The handle of a created snapshot_done (fuse/save_reply.c). */
typedef struct save_handle save_handle;

/* Ask for a save, through node ino, answered as `reply` says; fi is the
 * open's or create's.  Under the mount's lock, exclusive. */
void ckfs_ask_save(fuse_req_t req, ckfs *fs, fuse_ino_t ino, enum reply reply,
                   const struct fuse_file_info *fi);

/* The save handle behind fi, or NULL for any other handle. */
save_handle *ckfs_save_handle_of(const struct fuse_file_info *fi);
/* The kernel will send nothing more for handle h. */
void ckfs_save_handle_release(save_handle *h);
/* Free the handles whose release never came, once the session is gone. */
void ckfs_save_handles_free(void);
/* Create snapshot_done: ask for a save, answer now, with a save handle. */
void ckfs_create_snapshot_done(fuse_req_t req, ckfs *fs, struct fuse_file_info *fi);
/* The close of a created snapshot_done: answered when its save has ended. */
void ckfs_flush_snapshot_done(fuse_req_t req, ckfs *fs, fuse_ino_t ino, save_handle *h);

/* setxattr user.ckptfs.unmount=1 (seal: save, then take no edit) or =0
 * (take edits again) on the root, value of size bytes. */
void ckfs_seal_request(fuse_req_t req, ckfs *fs, const char *value, size_t size);

#endif
