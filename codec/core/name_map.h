/* SPDX-License-Identifier: Apache-2.0 */
/*
 * name_map: an open-addressing hash map from byte strings to uint32 ids.
 *
 * Keys are not copied: the map stores the caller's pointer and length, so
 * keys must outlive the map (the tensor index keeps them in its arena).  Used
 * for the "a later repeat of a tag replaces the earlier one" rule while
 * parsing and for directory-name lookups in the FUSE front-end.
 */
#ifndef CK_NAME_MAP_H
#define CK_NAME_MAP_H

#include <stddef.h>
#include <stdint.h>

#define CK_NAME_MAP_NONE UINT32_MAX

typedef struct ck_name_map_slot {
    const char *key;
    uint32_t len;
    uint32_t value;     /* CK_NAME_MAP_NONE marks an empty slot */
} ck_name_map_slot;

typedef struct ck_name_map {
    ck_name_map_slot *slots;
    size_t cap;         /* power of two */
    size_t count;
} ck_name_map;

void ck_name_map_init(ck_name_map *m);
void ck_name_map_free(ck_name_map *m);

/* Value stored for key, or CK_NAME_MAP_NONE. */
uint32_t ck_name_map_get(const ck_name_map *m, const char *key, size_t len);

/* Insert or replace.  Returns the previous value (CK_NAME_MAP_NONE if the
 * key was new), or -1 cast to int64 on allocation failure. */
int64_t ck_name_map_put(ck_name_map *m, const char *key, size_t len, uint32_t value);

/* Remove key if present; returns its value or CK_NAME_MAP_NONE. */
uint32_t ck_name_map_del(ck_name_map *m, const char *key, size_t len);

/* 64-bit FNV-1a: also the documented hash of over-long directory names. */
uint64_t ck_fnv1a64(const void *data, size_t len);

#endif
