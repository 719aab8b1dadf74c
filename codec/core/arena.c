/* SPDX-License-Identifier: Apache-2.0 */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_SIZE (64 * 1024)

struct ck_arena_chunk {
    ck_arena_chunk *next;
    size_t cap;
    size_t used;
    _Alignas(8) unsigned char data[];
};

void ck_arena_init(ck_arena *a)
{
    a->head = NULL;
    a->used_bytes = 0;
    a->chunk_bytes = 0;
}

void ck_arena_free(ck_arena *a)
{
    ck_arena_chunk *c = a->head;
    while (c != NULL) {
        ck_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    ck_arena_init(a);
}

void *ck_arena_alloc(ck_arena *a, size_t n)
{
    if (n > SIZE_MAX - 8)
        return NULL;
    n = (n + 7) & ~(size_t)7;
    ck_arena_chunk *c = a->head;
    if (c == NULL || c->cap - c->used < n) {
        size_t cap = n > CHUNK_SIZE ? n : CHUNK_SIZE;
        c = malloc(sizeof *c + cap);
        if (c == NULL)
            return NULL;
        c->cap = cap;
        c->used = 0;
        a->chunk_bytes += sizeof *c + cap;
        /* A big one-off block goes behind the head so the head's free space
         * is not wasted. */
        if (cap > CHUNK_SIZE && a->head != NULL) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used_bytes += n;
    return p;
}

char *ck_arena_strndup(ck_arena *a, const char *s, size_t len)
{
    char *p = ck_arena_alloc(a, len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
