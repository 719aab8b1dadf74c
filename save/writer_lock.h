/* SPDX-License-Identifier: Apache-2.0 */
/*
 * writer_lock: one writer per model.
 *
 * A writable mount (and every tool that writes a model: write_claim.h)
 * holds an exclusive flock(2) on ".<model>.ckptfs-lock" beside the model,
 * a file of the model's own like the save's journal.  Not on the model
 * itself: every save renames a new inode over it.  flock, not fcntl: the
 * lock belongs to the open file, so it survives fuse_daemonize's fork and
 * goes away with the last process holding it, kill -9 included; a POSIX
 * lock would be lost in the fork and dropped by any close of the file.
 *
 * The file holds the holder's pid and where it is mounted, "PID WHERE",
 * and its host, "host NAME", for the refusal message.  A clean exit
 * removes it; one left behind by a killed holder is unlocked and simply
 * taken over.
 *
 * Its name is made in one place (take_in) from the model file's own
 * directory, as ck_dir_open or ck_dir_in opens it, and its base name, so
 * every path to one file (a link, a run's rank_<id>/, a tool's OUT) leads
 * to one lock.  Taking it: open it O_CREAT|O_NOFOLLOW as a regular file
 * only (a FIFO or device another user put there is refused: "remove it"),
 * flock without blocking, then check that the path still names the locked
 * inode, else retry: a holder that exits removes the file while still
 * holding it.  A stale file of another user, which cannot be rewritten, is
 * removed once locked and made anew.
 *
 * A mount takes it with its write claim (write_claim.h), before recovery
 * and the leftover cleanup, when it will write (-o rw, an owner-writable
 * file, -o create of a missing one); it drops it if the model turns out
 * read-only (the 1.3-1.6 cipher layout) and removes it once the final
 * save is done; a read-only mount takes and creates nothing.  As
 * fusermount3 -u returns before the daemon's final save, a lock held by a
 * daemon whose mount point is gone from /proc/self/mounts is waited for
 * (up to a minute), so `fusermount3 -u M; ckptfs model M` reads the saved
 * file; a run directory's checkpoints never wait (the request thread
 * cannot).  A lock file that cannot be created (EROFS, EACCES) means no
 * save could create its temporary file there either: a mount writable
 * only by default falls back to read-only with a note, while -o rw and
 * -o create are refused with the reason (fuse/main.c, take_claim).
 *
 * What it cannot do: keep off a writer on another machine where the
 * storage keeps locks per machine (any FUSE filesystem: s3fs, sshfs...;
 * NFS, SMB and Lustre by how they are mounted).  There a lock file that
 * another host wrote is refused as held, since no flock here tells
 * whether that writer is alive (its host, or a person, removes it); two
 * machines mounting at once, before either has written its file, are
 * not kept apart.  What still holds then: every save checks that the
 * model is the one it opened (ck_model_check_unchanged) just before its
 * commit, and refuses when another writer changed it; there any new mtime
 * counts, since inotify sees no other machine's writes
 * (codec/core/file_watch.h).
 */
#ifndef CK_WRITER_LOCK_H
#define CK_WRITER_LOCK_H

#include <limits.h>
#include <sys/types.h>

#include "../codec/core/ck_error.h"

typedef struct ck_writer_lock {
    int fd;                     /* -1: not held */
    int dir_fd;                 /* the model's directory, the lock's own; path is in it */
    char path[PATH_MAX];
} ck_writer_lock;

/* Take model's lock, recording pid and where (a mount point, or a word
 * such as "ckptfs-reencode").  The lock is beside the file model names
 * (a symbolic link's target: ck_dir_open), so that every path to one file
 * leads to one lock.  When another process holds it: -1 with
 * EBUSY and "MODEL: mounted writable by pid N at WHERE; ...". */
int ck_writer_lock_take(ck_writer_lock *l, const char *model, const char *where,
                        ck_error *err);
/* The same for the file name in the directory open as dir_fd (dir_path
 * names it in messages), maybe in a subdirectory of it ("rank_0/m.ckpt",
 * whose lock is rank_0/.m.ckpt.ckptfs-lock, as ck_dir_in places it), without waiting
 * for a holder that is finishing its last save: a run directory takes
 * its checkpoints' locks on its request thread. */
int ck_writer_lock_take_at(ck_writer_lock *l, int dir_fd, const char *dir_path,
                           const char *name, const char *where, ck_error *err);
/* Record another holder pid (the daemon's, after fuse_daemonize forked). */
void ck_writer_lock_note(ck_writer_lock *l, pid_t pid, const char *where);
/* Remove the lock file and drop the lock (nothing if not held, or NULL). */
void ck_writer_lock_release(ck_writer_lock *l);

#endif
