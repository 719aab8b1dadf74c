/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage: what kind of storage a file or directory lives on, as far as it
 * changes what ckptfs may rely on.
 *
 * inotify reports only the changes made through this machine's kernel.
 * On storage that other machines write too (NFS, SMB, Lustre, GPFS,
 * CephFS, 9p, and any FUSE filesystem: s3fs, mountpoint-s3, sshfs,
 * rclone, JuiceFS...), another writer's files appear without an event, so
 * a run directory there is listed again every few seconds (mount/run_listing.c)
 * and its files are judged by their settle time alone.  statfs(2)'s f_type
 * tells these apart; /proc/self/mountinfo names the FUSE filesystem
 * ("fuse.s3fs") for messages, and tells mountpoint-s3, which cannot
 * rename, so that saves there are refused before they write anything.
 */
#ifndef CK_STORAGE_H
#define CK_STORAGE_H

#include <stdbool.h>

#include "ck_error.h"

typedef struct ck_storage {
    unsigned long type;         /* statfs f_type */
    bool shared;                /* other machines may write it: inotify is blind to them */
    bool no_rename;             /* a FUSE client with no rename (mountpoint-s3) */
    char name[64];              /* "nfs", "fuse.s3fs", "ext4": mountinfo's, else the
                                 * magic's, else "0x..." */
} ck_storage;

/* What fd (any descriptor, O_PATH will do) lives on; -1 with errno when
 * fstatfs fails. */
int ck_storage_of(int fd, ck_storage *out);
/* Only whether it is shared (one fstatfs; false when that fails). */
bool ck_storage_shared(int fd);
/* Whether a save may replace what (a file, named in the message) in the
 * directory dir_fd: 0, or -1 (ENOTSUP) on storage with no rename, where a
 * save could only fail at its end; then nothing should be written. */
int ck_storage_may_replace(int dir_fd, const char *what, ck_error *err);

#endif
