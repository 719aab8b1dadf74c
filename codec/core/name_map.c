/* SPDX-License-Identifier: Apache-2.0 */
#include "name_map.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

uint64_t ck_fnv1a64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void ck_name_map_init(ck_name_map *m)
{
    m->slots = NULL;
    m->cap = 0;
    m->count = 0;
}

void ck_name_map_free(ck_name_map *m)
{
    free(m->slots);
    ck_name_map_init(m);
}

static ck_name_map_slot *find_slot(ck_name_map_slot *slots, size_t cap, const char *key,
                                   size_t len, uint64_t hash)
{
    size_t i = (size_t)hash & (cap - 1);
    for (;;) {
        ck_name_map_slot *s = &slots[i];
        if (s->value == CK_NAME_MAP_NONE)
            return s;
        if (s->len == len && memcmp(s->key, key, len) == 0)
            return s;
        i = (i + 1) & (cap - 1);
    }
}

static int grow(ck_name_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    ck_name_map_slot *slots = malloc(cap * sizeof *slots);
    if (slots == NULL)
        return -1;
    for (size_t i = 0; i < cap; i++)
        slots[i].value = CK_NAME_MAP_NONE;
    for (size_t i = 0; i < m->cap; i++) {
        ck_name_map_slot *old = &m->slots[i];
        if (old->value != CK_NAME_MAP_NONE)
            *find_slot(slots, cap, old->key, old->len, ck_fnv1a64(old->key, old->len)) = *old;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

uint32_t ck_name_map_get(const ck_name_map *m, const char *key, size_t len)
{
    if (m->count == 0)
        return CK_NAME_MAP_NONE;
    return find_slot(m->slots, m->cap, key, len, ck_fnv1a64(key, len))->value;
}

int64_t ck_name_map_put(ck_name_map *m, const char *key, size_t len, uint32_t value)
{
    /* Keep the load factor under 1/2 so probes stay short. */
    if ((m->count + 1) * 2 > m->cap && grow(m) < 0)
        return -1;
    uint64_t hash = ck_fnv1a64(key, len);
    ck_name_map_slot *s = find_slot(m->slots, m->cap, key, len, hash);
    uint32_t previous = s->value;
    if (previous == CK_NAME_MAP_NONE)
        m->count++;
    s->key = key;
    s->len = (uint32_t)len;
    s->value = value;
    return previous;
}

uint32_t ck_name_map_del(ck_name_map *m, const char *key, size_t len)
{
    if (m->count == 0)
        return CK_NAME_MAP_NONE;
    ck_name_map_slot *s = find_slot(m->slots, m->cap, key, len, ck_fnv1a64(key, len));
    uint32_t value = s->value;
    if (value == CK_NAME_MAP_NONE)
        return value;
    /* Linear probing: move later members of the run back into the hole so
     * every key stays reachable from its home slot. */
    size_t hole = (size_t)(s - m->slots), mask = m->cap - 1;
    for (size_t i = (hole + 1) & mask; m->slots[i].value != CK_NAME_MAP_NONE; i = (i + 1) & mask) {
        size_t home = (size_t)ck_fnv1a64(m->slots[i].key, m->slots[i].len) & mask;
        /* i may move to hole unless its home lies cyclically in (hole, i]. */
        bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!stays) {
            m->slots[hole] = m->slots[i];
            hole = i;
        }
    }
    m->slots[hole].value = CK_NAME_MAP_NONE;
    m->count--;
    return value;
}
