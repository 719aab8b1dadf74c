/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree_spill: the mount's spill file and its areas (tree_spill.h).
 *
 * One spill file per mount, made on the first write, holds every area: a
 * new area starts at spill_end, the area at the end grows in place, and an
 * area that must grow past its reservation elsewhere moves to the end
 * (copied; its old range is given back).  Bytes past an area's size read
 * as zeros, like a file's: ranges are zeroed when given back or cut off.
 * Freed ranges are punched out of the file, and once a save leaves no
 * area in use the file is emptied.
 */
#define _GNU_SOURCE /* O_TMPFILE, fallocate, memfd_create */
#include "tree_spill.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../codec/core/byte_source.h"
#include "../codec/core/model_dir.h"
#include "../codec/envelope.h"

/* Edits of a model whose envelope is secret hold its plaintext: they are
 * kept in memory (memfd), never in a file on disk, and capped at
 * spill_max so a big copy fails with ENOSPC instead of exhausting
 * memory. */
static bool spill_in_memory(const tree *tr)
{
    return ck_envelope_is_secret(&tr->model->env);
}

static uint64_t spill_in_use(const tree *tr)
{
    uint64_t n = 0;
    for (size_t i = 0; i < tr->n_entries; i++) {
        const edit *ed = tr->entries[i].edit;
        if (ed != NULL && ed->overlay.used)
            n += ed->overlay.size;
    }
    for (size_t i = 0; i < tr->n_extras; i++)
        if (tr->extras[i].area.used)
            n += tr->extras[i].area.size;
    return n;
}

/* Room for a spill file to grow from old to new bytes. */
int spill_room(const tree *tr, uint64_t old, uint64_t new, ck_error *err)
{
    if (!spill_in_memory(tr) || new <= old)
        return 0;
    uint64_t used = spill_in_use(tr);
    if (new - old > tr->spill_max || used > tr->spill_max - (new - old))
        return ck_fail(err, ENOSPC, "%s: edits of an %s model are held in memory, not on "
                       "disk, and would pass -o spill_max=%lluM; save them (touch "
                       "snapshot_done) or mount with a larger spill_max", tr->model->path,
                       tr->model->env.kind->adjective,
                       (unsigned long long)(tr->spill_max >> 20));
    return 0;
}

/* A nameless file beside the model (same filesystem, so the commit can
 * copy_file_range from it), or in $TMPDIR when that directory refuses;
 * in memory for a secret envelope's.  Beside the model means through the
 * directory's descriptor, never its name, which may lead into the mount
 * itself. */
static int spill_file(const tree *tr, ck_error *err)
{
    int fd;
    if (spill_in_memory(tr)) {
        fd = memfd_create("ckptfs-spill", MFD_CLOEXEC);
    } else {
        fd = ck_dir_openat(tr->model->dir, ".", O_TMPFILE | O_RDWR, 0600);
        if (fd < 0 && errno != EMFILE && errno != ENFILE) {
            ck_error ignored;
            fd = ck_scratch_fd(false, tr->model->path, "edits", &ignored);
        }
    }
    if (fd < 0 && (errno == EMFILE || errno == ENFILE))
        return ck_fail(err, errno, "%s: too many edited files at once (the open-file limit); "
                       "save with touch snapshot_done to release them", tr->model->path);
    if (fd < 0)
        return ck_fail_errno(err, errno, "%s: cannot create a spill file", tr->model->path);
    return fd;
}

static int write_at(int fd, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int spill_fd(tree *tr, ck_error *err)
{
    if (tr->spill_fd < 0)
        tr->spill_fd = spill_file(tr, err);
    return tr->spill_fd;
}

/* Give the space of bytes [off, off + len) of the spill file back, where
 * the filesystem can (tmpfs, memfd, ext4, xfs, btrfs); they read as zeros
 * then.  0 when done. */
static int punch(int fd, uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
}

/* Bytes [off, off + len) of the spill file read as zeros again: punched,
 * or else zeros written. */
static int zero_range(int fd, uint64_t off, uint64_t len)
{
    static const char zeros[65536];
    if (punch(fd, off, len) == 0)
        return 0;
    for (uint64_t at = 0; at < len;) {
        size_t n = len - at < sizeof zeros ? (size_t)(len - at) : sizeof zeros;
        if (write_at(fd, zeros, n, off + at) < 0)
            return -1;
        at += n;
    }
    return 0;
}

/* Give a range up: punched now, or when the save that reads it ends.
 * Only space: a range is never reused (new areas start at spill_end). */
static void release_range(tree *tr, uint64_t base, uint64_t len, bool frozen)
{
    if (!frozen || !tr->saving) {
        punch(tr->spill_fd, base, len);
        return;
    }
    if (tr->n_freed == tr->cap_freed) {
        size_t cap = tr->cap_freed ? 2 * tr->cap_freed : 16;
        spill_range *more = realloc(tr->freed, cap * sizeof *more);
        if (more == NULL)
            return; /* its space comes back when the file is emptied */
        tr->freed = more;
        tr->cap_freed = cap;
    }
    tr->freed[tr->n_freed++] = (spill_range){base, len};
}

void spill_area_free(tree *tr, spill_area *a)
{
    if (a->used && tr->spill_fd >= 0)
        release_range(tr, a->base, a->cap, a->frozen);
    *a = (spill_area){0};
}

void spill_area_new(tree *tr, spill_area *a)
{
    *a = (spill_area){.used = true, .base = tr->spill_end};
}

/* Copy len bytes of the spill file from one offset to another. */
static int spill_copy(int fd, uint64_t from, uint64_t to, uint64_t len)
{
    char buf[65536];
    for (uint64_t at = 0; at < len;) {
        size_t n = len - at < sizeof buf ? (size_t)(len - at) : sizeof buf;
        ssize_t r = pread(fd, buf, n, (off_t)(from + at));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || write_at(fd, buf, (size_t)r, to + at) < 0) {
            if (r == 0)
                errno = EIO;
            return -1;
        }
        at += (uint64_t)r;
    }
    return 0;
}

/* The spill file ends at end or later: reads (spliced) up to an area's
 * size must not stop short at the end of the file. */
static int spill_extend(tree *tr, uint64_t end, ck_error *err)
{
    if (ftruncate(tr->spill_fd, (off_t)end) < 0)
        return ck_fail_errno(err, errno, "%s: growing the spill file failed", tr->model->path);
    tr->spill_end = end;
    return 0;
}

/* Make the area hold at least need bytes, and be free to change: in
 * place at the end of the spill file, else moved there.  A frozen area
 * (a running save reads it) always moves, its old range kept until the
 * save ends: this is how an edit made during a save leaves the saved
 * bytes alone. */
int spill_area_reserve(tree *tr, spill_area *a, uint64_t need, ck_error *err)
{
    if (need <= a->cap && !a->frozen)
        return 0;
    if (need < a->cap)
        need = a->cap;
    if (spill_fd(tr, err) < 0)
        return -1;
    if (need > (uint64_t)INT64_MAX - tr->spill_end)
        return ck_fail(err, EFBIG, "%s: the spill file would pass 2^63 bytes", tr->model->path);
    if (!a->frozen && a->base + a->cap == tr->spill_end) {
        if (spill_extend(tr, a->base + need, err) < 0)
            return -1;
        a->cap = need;
        return 0;
    }
    uint64_t from = a->base, to = tr->spill_end;
    if (spill_extend(tr, to + need, err) < 0)
        return -1;
    if (spill_copy(tr->spill_fd, from, to, a->size) < 0)
        return ck_fail_errno(err, errno, "%s: moving bytes in the spill file failed",
                             tr->model->path);
    release_range(tr, from, a->cap, a->frozen);
    a->base = to;
    a->cap = need;
    a->frozen = false;
    return 0;
}

int spill_area_write(tree *tr, spill_area *a, const void *buf, size_t size, uint64_t off,
                     ck_error *err)
{
    if (off > (uint64_t)INT64_MAX - size)
        return ck_fail(err, EFBIG, "%s: write past 2^63 bytes", tr->model->path);
    if (spill_area_reserve(tr, a, off + size, err) < 0)
        return -1;
    if (write_at(tr->spill_fd, buf, size, a->base + off) < 0)
        return ck_fail_errno(err, errno, "%s: writing the spill file failed", tr->model->path);
    if (off + size > a->size)
        a->size = off + size;
    return 0;
}

int spill_area_truncate(tree *tr, spill_area *a, uint64_t size, ck_error *err)
{
    if (size > (uint64_t)INT64_MAX)
        return ck_fail(err, EFBIG, "%s: truncate past 2^63 bytes", tr->model->path);
    if (spill_area_reserve(tr, a, size, err) < 0)
        return -1;
    if (size < a->size && zero_range(tr->spill_fd, a->base + size, a->size - size) < 0)
        return ck_fail_errno(err, errno, "%s: truncating in the spill file failed",
                             tr->model->path);
    a->size = size;
    return 0;
}

/* After a save: with no area left in use, the spill file is emptied. */
void spill_reclaim(tree *tr)
{
    if (tr->spill_fd < 0)
        return;
    for (size_t i = 0; i < tr->n_extras; i++)
        if (tr->extras[i].area.used)
            return;
    for (size_t i = 0; i < tr->n_entries; i++)
        if (tr->entries[i].edit != NULL && tr->entries[i].edit->overlay.used)
            return;
    if (ftruncate(tr->spill_fd, 0) == 0)
        tr->spill_end = 0;
}

void spill_punch_freed(tree *tr)
{
    for (size_t i = 0; i < tr->n_freed; i++)
        punch(tr->spill_fd, tr->freed[i].base, tr->freed[i].len);
    tr->n_freed = 0;
}
