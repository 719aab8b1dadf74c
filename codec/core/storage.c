/* SPDX-License-Identifier: Apache-2.0 */
/* storage: which storage a descriptor lives on (storage.h). */
#define _GNU_SOURCE
#include "storage.h"

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

/* The mount's filesystem type as /proc/self/mountinfo gives it ("fuse.s3fs"):
 * the line whose mount ID fdinfo gives fd.  Whether found. */
static bool mountinfo_type(int fd, char *out, size_t size)
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
        char type[64];
        if (strtol(line, NULL, 10) != mnt_id || sep == NULL || sscanf(sep + 3, "%63s", type) != 1)
            continue;
        snprintf(out, size, "%s", type);
        found = true;
    }
    if (f != NULL)
        fclose(f);
    free(line);
    return found;
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
    if (!mountinfo_type(fd, out->name, sizeof out->name)) {
        if (magic_name != NULL)
            snprintf(out->name, sizeof out->name, "%s", magic_name);
        else
            snprintf(out->name, sizeof out->name, "0x%lx", out->type);
    }
    return 0;
}

bool ck_storage_shared(int fd)
{
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && shared_name((unsigned long)(uint32_t)sf.f_type) != NULL;
}
