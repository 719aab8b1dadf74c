/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops: a read plan, the pieces a read is answered with (mount/ops.h), built
 * by the operations and replied by the adapter.
 */
#include "ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ckfs_plan_init(ckfs_read_plan *p)
{
    memset(p, 0, sizeof *p);
}

void ckfs_plan_free(ckfs_read_plan *p)
{
    free(p->pieces);
    free(p->owned);
    memset(p, 0, sizeof *p);
}

static int plan_room(ckfs_read_plan *p)
{
    if (p->n < p->cap)
        return 0;
    size_t cap = p->cap ? 2 * p->cap : 4;
    ckfs_piece *grown = realloc(p->pieces, cap * sizeof *grown);
    if (grown == NULL)
        return -ENOMEM;
    p->pieces = grown;
    p->cap = cap;
    return 0;
}

int ckfs_plan_fd(ckfs_read_plan *p, int fd, uint64_t off, size_t len)
{
    if (plan_room(p) < 0)
        return -ENOMEM;
    p->pieces[p->n++] = (ckfs_piece){.fd = fd, .off = off, .len = len};
    p->bytes += len;
    return 0;
}

/* Consecutive copies are one piece, so that a plan of copies never takes
 * more pieces than the reads it was made of. */
int ckfs_plan_mem(ckfs_read_plan *p, const void *mem, size_t len)
{
    ckfs_piece *last = p->n > 0 ? &p->pieces[p->n - 1] : NULL;
    if (last != NULL && last->mem != NULL && (const char *)last->mem + last->len == mem) {
        last->len += len;
        p->bytes += len;
        return 0;
    }
    if (plan_room(p) < 0)
        return -ENOMEM;
    p->pieces[p->n++] = (ckfs_piece){.mem = mem, .fd = -1, .len = len};
    p->bytes += len;
    return 0;
}

/* One buffer per plan: a read copies at most its own size. */
char *ckfs_plan_buffer(ckfs_read_plan *p, size_t len)
{
    if (p->owned != NULL)
        return NULL;
    p->owned = malloc(len);
    return p->owned;
}
