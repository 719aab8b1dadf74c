/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_override: open a model with some of its files replaced by open
 * descriptors.
 *
 * A save reads its new files back before they are renamed over the model
 * and its data files (save/verify.c).  Those files are temporaries with
 * other names, so the opens of codec/ (the model file, external data
 * files, legacy variables files) pass each descriptor they get through
 * ck_override_fd: a file that an override stands for is swapped for a
 * duplicate of the override's descriptor.  A file is recognised by its
 * identity (device and inode) when the target exists, so "w.bin" and
 * "./w.bin" both match; a target the save creates is recognised by its
 * path, as is one whose name is now a symbolic link (the save replaces
 * the link).  Nothing else in codec/ knows about it.
 */
#ifndef CK_FILE_OVERRIDE_H
#define CK_FILE_OVERRIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "model_dir.h"

typedef struct ck_file_override {
    const char *path;       /* the file as the readers name it */
    int fd;                 /* what to read instead; the caller keeps it */
    bool exists;            /* the target exists: match by identity */
    dev_t dev;
    ino_t ino;
} ck_file_override;

/* Fill o for path, which is rel beneath d (stat'ed through d's
 * descriptor: the model's directory may be covered by the mount), and fd. */
void ck_override_init(ck_file_override *o, const ck_model_dir *d, const char *rel,
                      const char *path, int fd);

/* fd was just opened for path (or is -1 with errno set).  Returns a
 * duplicate of the descriptor of the override standing for that file (fd
 * is then closed), or fd itself; -1 with errno set on failure. */
int ck_override_fd(const ck_file_override *ov, size_t n, const char *path, int fd);

#endif
