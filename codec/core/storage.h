/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage: what kind of storage a file or directory lives on, as far as it
 * changes what ckptfs may rely on.
 *
 * inotify reports only the changes made through this machine's kernel.
 * On storage that other machines write too (NFS, SMB, Lustre, GPFS,
 * CephFS, 9p, and any FUSE filesystem: s3fs, mountpoint-s3, sshfs,
 * rclone, JuiceFS...), another writer's files appear without an event, so
 * a run directory there is listed again every few seconds (run_mount.c)
 * and its files are judged by their settle time alone.  statfs(2)'s f_type
 * tells these apart; /proc/self/mountinfo names the FUSE filesystem
 * ("fuse.s3fs") for messages.
 */
#ifndef CK_STORAGE_H
#define CK_STORAGE_H

#include <stdbool.h>

typedef struct ck_storage {
    unsigned long type;         /* statfs f_type */
    bool shared;                /* other machines may write it: inotify is blind to them */
    char name[64];              /* "nfs", "fuse.s3fs", "ext4": mountinfo's, else the
                                 * magic's, else "0x..." */
} ck_storage;

/* What fd (any descriptor, O_PATH will do) lives on; -1 with errno when
 * fstatfs fails. */
int ck_storage_of(int fd, ck_storage *out);
/* Only whether it is shared (one fstatfs; false when that fails). */
bool ck_storage_shared(int fd);

#endif
