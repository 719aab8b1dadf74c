/* SPDX-License-Identifier: Apache-2.0 */
/*
 * arena: a chunked bump allocator for things that live as long as a mounted
 * model (names, dims).  Pointers stay valid until ck_arena_free, and one
 * free releases everything, so the index has no per-name ownership to track.
 */
#ifndef CK_ARENA_H
#define CK_ARENA_H

#include <stddef.h>

typedef struct ck_arena_chunk ck_arena_chunk;

typedef struct ck_arena {
    ck_arena_chunk *head;
    size_t used_bytes;   /* total bytes handed out, for memory accounting */
    size_t chunk_bytes;  /* total bytes allocated for them (a bound on the memory held) */
} ck_arena;

void ck_arena_init(ck_arena *a);
void ck_arena_free(ck_arena *a);
/* 8-byte aligned; NULL when out of memory. */
void *ck_arena_alloc(ck_arena *a, size_t n);
/* Copy len bytes and add a NUL. */
char *ck_arena_strndup(ck_arena *a, const char *s, size_t len);

#endif
