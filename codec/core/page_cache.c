/* SPDX-License-Identifier: Apache-2.0 */
#include "page_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Pages are found by a scan: a mount reads a handful of pages at a time,
 * and the count is capped (page_cache.h) so that tiny pages (a file of
 * 1-byte zstd frames) cannot make the scan long. */

typedef struct page {
    const void *owner;          /* NULL: a free slot */
    uint64_t unit;
    unsigned char *buf;
    size_t len;
    uint64_t used;              /* the clock at the last use: LRU order */
} page;

struct ck_page_cache {
    size_t budget, total;
    bool secret;
    uint64_t clock;
    page pages[CK_CACHE_MAX_PAGES];
    page *pending;              /* reserved, not yet committed */
};

size_t ck_page_cache_budget(const ck_page_cache *c)
{
    return c->budget;
}

ck_page_cache *ck_page_cache_new(size_t budget, bool secret, ck_error *err)
{
    ck_page_cache *c = calloc(1, sizeof *c);
    if (c == NULL) {
        ck_fail(err, ENOMEM, "out of memory for the page cache");
        return NULL;
    }
    c->budget = budget;
    c->secret = secret;
    return c;
}

static void evict(ck_page_cache *c, page *p)
{
    if (c->secret)
        explicit_bzero(p->buf, p->len);
    free(p->buf);
    c->total -= p->len;
    *p = (page){0};
}

void ck_page_cache_free(ck_page_cache *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < CK_CACHE_MAX_PAGES; i++)
        if (c->pages[i].owner != NULL)
            evict(c, &c->pages[i]);
    free(c);
}

const unsigned char *ck_page_cache_get(ck_page_cache *c, const void *owner, uint64_t unit,
                                       size_t *len)
{
    for (size_t i = 0; i < CK_CACHE_MAX_PAGES; i++) {
        page *p = &c->pages[i];
        if (p->owner == owner && p->unit == unit && p != c->pending) {
            p->used = ++c->clock;
            *len = p->len;
            return p->buf;
        }
    }
    return NULL;
}

/* The least recently used page other than the pending one, or NULL. */
static page *oldest(ck_page_cache *c)
{
    page *old = NULL;
    for (size_t i = 0; i < CK_CACHE_MAX_PAGES; i++) {
        page *p = &c->pages[i];
        if (p->owner != NULL && p != c->pending && (old == NULL || p->used < old->used))
            old = p;
    }
    return old;
}

static page *free_slot(ck_page_cache *c)
{
    for (size_t i = 0; i < CK_CACHE_MAX_PAGES; i++)
        if (c->pages[i].owner == NULL)
            return &c->pages[i];
    return NULL;
}

unsigned char *ck_page_cache_reserve(ck_page_cache *c, const void *owner, uint64_t unit,
                                     size_t len, ck_error *err)
{
    if (c->pending != NULL)
        ck_page_cache_abandon(c);
    page *p, *victim;
    unsigned char *buf = NULL;
    while (c->total + len > c->budget && (victim = oldest(c)) != NULL) {
        /* A page of the same size is taken over as it is: the new bytes
         * overwrite all of it, so it needs neither a wipe nor a free
         * (sequential reads evict one 1 MiB page per page read). */
        if (buf == NULL && victim->len == len) {
            buf = victim->buf;
            c->total -= victim->len;
            *victim = (page){0};
        } else {
            evict(c, victim);
        }
    }
    if ((p = free_slot(c)) == NULL) {
        p = oldest(c);
        evict(c, p);
    }
    if (buf == NULL && (buf = malloc(len ? len : 1)) == NULL) {
        ck_fail(err, ENOMEM, "out of memory for a %zu-byte cache page", len);
        return NULL;
    }
    *p = (page){.owner = owner, .unit = unit, .buf = buf, .len = len, .used = ++c->clock};
    c->total += len;
    c->pending = p;
    return buf;
}

void ck_page_cache_commit(ck_page_cache *c)
{
    c->pending = NULL;
}

void ck_page_cache_abandon(ck_page_cache *c)
{
    if (c->pending != NULL)
        evict(c, c->pending);
    c->pending = NULL;
}

void ck_page_cache_drop(ck_page_cache *c, const void *owner)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < CK_CACHE_MAX_PAGES; i++)
        if (c->pages[i].owner == owner) {
            if (&c->pages[i] == c->pending)
                c->pending = NULL;
            evict(c, &c->pages[i]);
        }
}
