/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_watch: whether another program wrote a model's files since they
 * were opened, as opposed to touching or chmod'ing them.
 *
 * Metadata cannot tell `touch` from a same-size rewrite in place: both
 * give a new mtime and keep the inode and the size.  inotify can: write(2),
 * truncate and copy_file_range into the file raise IN_MODIFY, while touch,
 * chmod and chown raise only IN_ATTRIB.  So each file of a model is
 * watched for IN_MODIFY from the moment it is opened, and a changed mtime
 * counts as a change only when the file was written (or when an event may
 * have been lost, or there is no watch).  Writes through a shared mmap
 * raise no event: such a rewrite of the same size is taken for a touch.
 *
 * One inotify descriptor per mount (ck_dir_watch_files: one-shot opens
 * such as ckptfs-dump do without), shared by the directories of a merged
 * checkpoint's ranks; a watch is added through /proc/self/fd, never a
 * name.
 */
#ifndef CK_FILE_WATCH_H
#define CK_FILE_WATCH_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ck_file_watch ck_file_watch;

/* NULL when inotify cannot be had (the per-user limit): every mtime
 * change then counts as a write. */
ck_file_watch *ck_watch_new(void);
/* One more holder of w (NULL: none); ck_watch_free drops one, the last
 * frees it. */
ck_file_watch *ck_watch_ref(ck_file_watch *w);
void ck_watch_free(ck_file_watch *w);

/* Watch the file open as fd for writes; the watch descriptor, or -1 (also
 * on shared storage, NFS or any FUSE filesystem among them, where inotify
 * cannot see other clients' writes: every mtime change then counts). */
int ck_watch_add(ck_file_watch *w, int fd);

/* Whether the file of wd was written since its watch was added.  Any
 * doubt (no watch, a lost event) says yes. */
bool ck_watch_written(ck_file_watch *w, int wd);

/* Count wd's file as written (it changed before its watch was in place). */
void ck_watch_mark(ck_file_watch *w, int wd);

#endif
