/*
 * map.h - a string-keyed hash map (open addressing, linear probing, backward-shift deletion).
 *
 * Contract: the map stores a pointer to each key and never copies it: the caller keeps the key
 * bytes alive and unchanged while the entry exists (store items and FIFO entries own their key
 * and point the map at it). Values are opaque pointers. Not thread-safe: the owner's lock guards
 * it. Each map has its own hash seed (from its address and the clock), so keys chosen by a
 * server cannot be tuned to collide in every client. Iteration order is unspecified; any
 * insertion or removal invalidates an iteration in progress.
 */
#ifndef KINF_MAP_H
#define KINF_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "kinf.h"

typedef struct kinf_map_slot {
    const char *key; /* NULL: free slot */
    size_t len;
    uint64_t hash;
    void *value;
} kinf_map_slot;

typedef struct kinf_map {
    kinf_map_slot *slots;
    size_t cap; /* 0 or a power of two */
    size_t count;
    uint64_t seed;
} kinf_map;

/* The maps' seeded hash of len bytes at p (also used by the shared maps, shm_map.c). */
uint64_t kinf_hash_bytes(uint64_t seed, const char *p, size_t len);

/* An empty map that allocates on first insertion. Never fails. */
void kinf_map_init(kinf_map *m);
/* Frees the slot array (not keys or values). Accepts a zeroed map. */
void kinf_map_free(kinf_map *m);

void *kinf_map_get(const kinf_map *m, const char *key, size_t len);
/* The slot for key or NULL; lets callers update key/value in place without a second probe. */
kinf_map_slot *kinf_map_find(const kinf_map *m, const char *key, size_t len);
/* Inserts, or replaces the key pointer and value of an existing entry. KINF_ENOMEM leaves the
 * map unchanged. */
kinf_err kinf_map_put(kinf_map *m, const char *key, size_t len, void *value);
/* Removes the entry; returns its value (NULL when absent). */
void *kinf_map_remove(kinf_map *m, const char *key, size_t len);
/* Makes room for n entries in all; KINF_ENOMEM leaves the map unchanged. */
kinf_err kinf_map_reserve(kinf_map *m, size_t n);

/* Iteration: for (size_t i = 0; (s = kinf_map_next(m, &i)) != NULL;) ... */
static inline kinf_map_slot *kinf_map_next(const kinf_map *m, size_t *i)
{
    while (*i < m->cap) {
        kinf_map_slot *s = &m->slots[(*i)++];
        if (s->key != NULL)
            return s;
    }
    return NULL;
}

#endif
