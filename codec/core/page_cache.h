/* SPDX-License-Identifier: Apache-2.0 */
/*
 * page_cache: a bounded cache of decoded bytes, shared by the sources whose
 * plaintext is not the file (decrypted AES pieces, decompressed zstd frames).
 *
 * A page is the unit a source decodes at once, named by (owner, unit): the
 * source and its own page number.  Pages are kept least recently used first
 * and evicted while the total passes the budget, so the memory of a mount
 * is the budget plus one page, whatever the model's size.  The page being
 * filled is never evicted, even when it alone is over the budget.
 *
 * Sources that hold decrypted plaintext ask for a secret cache: its buffers
 * are wiped before they are freed (a buffer reused for another page is
 * overwritten whole).  At most CK_CACHE_MAX_PAGES pages are kept, whatever
 * the budget: 256 MiB of 1 MiB decrypted pages, 512 MiB of 2 MiB frames.
 * The budget is -o cache_size, 16 MiB by default (CK_CACHE_SIZE_DEFAULT,
 * model.h).  A source checks its file's size and mtime before it fills a
 * page on a miss (its own business: the cipher and zstd sources), so that
 * no page of a file changed since the open is served.
 */
#ifndef CK_PAGE_CACHE_H
#define CK_PAGE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck_error.h"

#define CK_CACHE_MAX_PAGES 256

typedef struct ck_page_cache ck_page_cache;

ck_page_cache *ck_page_cache_new(size_t budget, bool secret, ck_error *err);
void ck_page_cache_free(ck_page_cache *c);
/* The most its pages may hold, in bytes. */
size_t ck_page_cache_budget(const ck_page_cache *c);

/* The bytes of (owner, unit), or NULL; *len is their count.  The page
 * becomes the most recently used. */
const unsigned char *ck_page_cache_get(ck_page_cache *c, const void *owner, uint64_t unit,
                                       size_t *len);

/* A buffer of len bytes for (owner, unit), which the caller fills and then
 * publishes with ck_page_cache_commit (or gives back with _abandon when the
 * fill fails).  Evicts least recently used pages first.  NULL on ENOMEM. */
unsigned char *ck_page_cache_reserve(ck_page_cache *c, const void *owner, uint64_t unit,
                                     size_t len, ck_error *err);
void ck_page_cache_commit(ck_page_cache *c);
void ck_page_cache_abandon(ck_page_cache *c);

/* Forget every page of owner (a source being closed). */
void ck_page_cache_drop(ck_page_cache *c, const void *owner);

#endif
