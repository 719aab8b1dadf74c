/* SPDX-License-Identifier: Apache-2.0 */
/*
 * recovery: the edits a failed last save would lose, kept on disk, and
 * applied again to a later mount of the same model.
 *
 * When the save at unmount (fusermount3 -u, SIGTERM, SIGINT) fails, the
 * kernel has already let go of the mount, so the edits cannot stay
 * where the user made them.  Like an editor's swap file, they are
 * written to a recovery directory, named on the daemon's stderr (or
 * syslog), and `-o rw,recover=DIR` applies them to the tree of a new
 * mount before it serves, as if the user had made them again.
 *
 * The directory (DIR = MODEL.recovery-YYYYmmdd-HHMMSS-XXXXXX beside the
 * model, or in -o recovery_dir):
 *   tensors/<dir>/meta, tensors/<dir>/out   each changed or new tensor's
 *                                           files, as the mount showed
 *                                           them (so cp -r of tensors/.
 *                                           into a mount also works)
 *   edits                                   what else changed, in the
 *                                           order that applies it
 * `edits` is text, one operation a line, its words separated by one
 * space, each name escaped as \xHH for every byte up to 0x20, 0x7f and
 * the backslash (a directory name may hold any of them):
 *   ckptfs-recovery 1
 *   model PATH                  the model it was made from
 *   file SIZE MTIME_NS          that file as it was; applying checks it
 *   reason TEXT                 why the save failed
 *   remove DIR                  a tensor of the file, removed
 *   rename OLD NEW              a tensor of the file, now named NEW
 *   new DIR                     a tensor made in the mount
 *   no-meta DIR / no-out DIR    the file removed (and not made again)
 *   meta DIR / out DIR          tensors/DIR/meta (out) is the tensor's
 *   end                         written last: the directory is complete
 * The files are written 0600 in a directory made 0700, and fsynced
 * before `edits` is; the directory is made through the model's
 * directory descriptor, never its path (which may lead into the mount).
 * A model whose envelope is secret gets one only in -o recovery_dir:
 * plaintext is never written beside an encrypted model.
 *
 * -o recover=DIR replays renames in two steps (every tensor to a name of
 * its own, then to its new one) so that swaps apply, and is refused
 * unless the model's size and mtime are those it was made from.
 */
#ifndef CKPTFS_RECOVERY_H
#define CKPTFS_RECOVERY_H

#include <stddef.h>

#include "tree.h"

/* Keep tr's edits: in parent (a directory path), or beside the model
 * when parent is NULL.  reason: why the save failed.  path[cap]: the
 * directory made.  0, or -1 and err (nothing is left behind then). */
int recovery_keep(const tree *tr, const char *parent, const char *reason, char *path,
                  size_t cap, ck_error *err);

/* Apply the recovery directory dir to tr, a writable tree just opened
 * from the model it was made from.  0, or -1 and err; on failure the
 * tree may hold part of the edits (the caller does not serve it). */
int recovery_apply(tree *tr, const char *dir, ck_error *err);

#endif
