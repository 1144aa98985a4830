/*
 * map.h - a string-keyed hash map (open addressing, linear probing, backward-shift deletion).
 *
 * Contract: the map stores a pointer to each key and never copies it: the caller keeps the key
 * bytes alive and unchanged while the entry exists (store items and FIFO entries own their key
 * and point the map at it). Values are opaque pointers. Not thread-safe: the owner's lock guards
 * it. Iteration order is unspecified; any insertion or removal invalidates an iteration in
 * progress.
 *
 * Hashes: every map hashes a key the same way, kinf_key_hash, with a seed drawn at random once
 * per process, so keys chosen by a server cannot be tuned to collide in every client. Because
 * the hash does not depend on the map, a record computes its key's hash once (kinf_object.hash,
 * while the scanner has the key in cache) and each map it passes through takes that hash (the
 * _h functions) instead of reading the key again; kinf_map_prefetch lets a loop ask for the slot
 * of a key it will come to, so the cache misses of a big map overlap instead of queueing.
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
} kinf_map;

/* A seeded hash of len bytes at p (the maps' hash, and the shared maps', shm_map.c). */
uint64_t kinf_hash_bytes(uint64_t seed, const char *p, size_t len);
/* The hash every map gives key: kinf_hash_bytes with the process's seed, cut to 32 bits. */
uint32_t kinf_key_hash(const char *key, size_t len);

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

/* The same, for a caller that has the key's hash h = kinf_key_hash(key, len). */
kinf_map_slot *kinf_map_find_h(const kinf_map *m, const char *key, size_t len, uint32_t h);
void *kinf_map_get_h(const kinf_map *m, const char *key, size_t len, uint32_t h);
kinf_err kinf_map_put_h(kinf_map *m, const char *key, size_t len, uint32_t h, void *value);
void *kinf_map_remove_h(kinf_map *m, const char *key, size_t len, uint32_t h);

/* Asks the cache for the slot where a key of hash h starts its probe (a hint, nothing else). */
static inline void kinf_map_prefetch(const kinf_map *m, uint32_t h)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[h & (m->cap - 1)]);
}

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
