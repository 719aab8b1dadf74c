/* SPDX-License-Identifier: Apache-2.0 */
/* storage: which storage a descriptor lives on (storage.h). */
#define _GNU_SOURCE
#include "storage.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

/* Filesystems that other machines (or another side of a FUSE daemon) may
 * change without this kernel seeing it.  From linux/magic.h and the
 * filesystems' own sources where that has none (Lustre, GPFS, BeeGFS). */
static const struct {
    unsigned long type;
    const char *name;
} SHARED[] = {
    {0x6969, "nfs"},           {0x517B, "smb"},           {0xFE534D42, "smb2"},
    {0xFF534D42, "cifs"},      {0x65735546, "fuse"},      {0x0BD00BD0, "lustre"},
    {0x47504653, "gpfs"},      {0x00C36400, "ceph"},      {0x01021997, "9p"},
    {0x6B414653, "afs"},       {0x5346414F, "afs"},       {0x7461636F, "ocfs2"},
    {0x01161970, "gfs2"},      {0x73757245, "coda"},      {0x19830326, "beegfs"},
    {0x20030528, "orangefs"},
};

/* FUSE clients that have no rename, by the name they mount under (their
 * fsname, or subtype): mountpoint-s3 refuses rename on general-purpose
 * buckets and writes new objects only, sequentially (its SEMANTICS.md). */
static const char *const NO_RENAME[] = {"mountpoint-s3"};

/* The mount's filesystem type and source as /proc/self/mountinfo gives
 * them ("fuse.s3fs" "s3fs"; mountpoint-s3's: "fuse" "mountpoint-s3"): the
 * line whose mount ID fdinfo gives fd.  Whether found. */
static bool mountinfo_of(int fd, char type[64], char source[64])
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    char *line = NULL;
    size_t cap = 0;
    long mnt_id = -1;
    while (mnt_id < 0 && getline(&line, &cap, f) > 0)
        if (sscanf(line, "mnt_id: %ld", &mnt_id) != 1)
            mnt_id = -1;
    fclose(f);
    bool found = false;
    f = mnt_id < 0 ? NULL : fopen("/proc/self/mountinfo", "re");
    while (f != NULL && !found && getline(&line, &cap, f) > 0) {
        /* "ID PARENT MAJ:MIN ROOT POINT OPTIONS [TAGS...] - TYPE SOURCE SUPER" */
        char *sep = strstr(line, " - ");
        if (strtol(line, NULL, 10) != mnt_id || sep == NULL ||
            sscanf(sep + 3, "%63s %63s", type, source) < 1)
            continue;
        found = true;
    }
    if (f != NULL)
        fclose(f);
    free(line);
    return found;
}

/* Whether a FUSE mount of this type and source is a client with no rename. */
static bool renames_not(const char *type, const char *source)
{
    const char *sub = strncmp(type, "fuse.", 5) == 0 ? type + 5 : NULL;
    for (size_t i = 0; i < sizeof NO_RENAME / sizeof *NO_RENAME; i++)
        if ((sub != NULL && strcmp(sub, NO_RENAME[i]) == 0) ||
            (strcmp(type, "fuse") == 0 && strcmp(source, NO_RENAME[i]) == 0))
            return true;
    return false;
}

/* The name of a shared filesystem's magic, or NULL. */
static const char *shared_name(unsigned long type)
{
    for (size_t i = 0; i < sizeof SHARED / sizeof *SHARED; i++)
        if (SHARED[i].type == type)
            return SHARED[i].name;
    return NULL;
}

int ck_storage_of(int fd, ck_storage *out)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0)
        return -1;
    memset(out, 0, sizeof *out);
    out->type = (unsigned long)(uint32_t)sf.f_type;
    const char *magic_name = shared_name(out->type);
    out->shared = magic_name != NULL;
    char type[64] = "", source[64] = "";
    if (!mountinfo_of(fd, type, source)) {
        if (magic_name != NULL)
            snprintf(out->name, sizeof out->name, "%s", magic_name);
        else
            snprintf(out->name, sizeof out->name, "0x%lx", out->type);
    } else if (renames_not(type, source)) {
        out->no_rename = true;
        snprintf(out->name, sizeof out->name, "%s", strcmp(type, "fuse") == 0 ? source : type);
    } else {
        snprintf(out->name, sizeof out->name, "%s", type);
    }
    return 0;
}

bool ck_storage_shared(int fd)
{
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && shared_name((unsigned long)(uint32_t)sf.f_type) != NULL;
}

int ck_storage_may_replace(int dir_fd, const char *what, ck_error *err)
{
    ck_storage st;
    if (ck_storage_of(dir_fd, &st) < 0 || !st.no_rename)
        return 0;
    return ck_fail(err, ENOTSUP, "%s: on %s, which cannot rename, no save can replace it "
                   "(each ends in a rename); nothing was written (save elsewhere, then cp "
                   "the file in)", what, st.name);
}
