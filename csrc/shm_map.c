/*
 * shm_map.c - the shared hash map (contract in shm_map.h).
 *
 * A table is one block: its capacity (a power of two), the writer's counts and the slots. A
 * slot is one atomic word: 0 empty, 1 a tombstone (a removed entry: probes go on past it), or
 * an entry's offset. Only the writer stores slots and roots; readers load them with acquire.
 */
#include "shm_map.h"

#include <stdatomic.h>
#include <string.h>

#include "map.h"

#define EMPTY 0
#define TOMBSTONE 1
#define MIN_CAP 16

typedef struct shm_table {
    uint64_t cap;   /* a power of two */
    _Atomic uint64_t count; /* written by the writer, read by anyone (relaxed) */
    uint64_t used;  /* [writer] live entries + tombstones */
    _Atomic uint64_t slots[];
} shm_table;

uint64_t kinf_shm_map_hash(const kinf_shm *shm, const char *key, size_t len)
{
    /* Never 0 or 1, so a hash can never be mistaken for a slot marker where one is kept. */
    return kinf_hash_bytes(kinf_shm_seed(shm), key, len) | 2;
}

static const kinf_shm_entry *entry_at(const kinf_shm *shm, kinf_shm_off off)
{
    return kinf_shm_ptr(shm, off);
}

static int entry_is(const kinf_shm *shm, kinf_shm_off off, uint64_t hash, const char *key,
                    size_t len)
{
    const kinf_shm_entry *e = entry_at(shm, off);
    return e->hash == hash && e->key_len == len &&
           memcmp((const char *)e + e->key_at, key, len) == 0;
}

static shm_table *table_at(const kinf_shm *shm, kinf_shm_off off)
{
    return off ? kinf_shm_ptr(shm, off) : NULL;
}

/* The slot of key's entry in t, or of the empty slot ending its probe (-1: none, t full of
 * tombstones, which the writer never lets happen). *found gets the entry's offset as loaded
 * during the probe (0 when the key is absent): a reader must use that value, never load the
 * slot again, since the writer may have filled it with another key since. *first_free gets the
 * first tombstone or empty slot of the probe. */
static int64_t probe(const kinf_shm *shm, const shm_table *t, uint64_t hash, const char *key,
                     size_t len, uint64_t *found, int64_t *first_free)
{
    uint64_t mask = t->cap - 1;
    uint64_t i = hash & mask;
    *found = 0;
    *first_free = -1;
    for (uint64_t n = 0; n < t->cap; n++, i = (i + 1) & mask) {
        uint64_t v = atomic_load_explicit(&((shm_table *)t)->slots[i], memory_order_acquire);
        if (v == EMPTY) {
            if (*first_free < 0)
                *first_free = (int64_t)i;
            return (int64_t)i;
        }
        if (v == TOMBSTONE) {
            if (*first_free < 0)
                *first_free = (int64_t)i;
            continue;
        }
        if (entry_is(shm, v, hash, key, len)) {
            *found = v;
            return (int64_t)i;
        }
    }
    return -1;
}

kinf_shm_off kinf_shm_map_get(const kinf_shm *shm, _Atomic uint64_t *root, const char *key,
                              size_t len)
{
    const shm_table *t = table_at(shm, atomic_load_explicit(root, memory_order_acquire));
    int64_t free_slot;
    uint64_t found;
    if (t == NULL)
        return 0;
    (void)probe(shm, t, kinf_shm_map_hash(shm, key, len), key, len, &found, &free_slot);
    return found;
}

size_t kinf_shm_map_count(const kinf_shm *shm, _Atomic uint64_t *root)
{
    const shm_table *t = table_at(shm, atomic_load_explicit(root, memory_order_acquire));
    return t ? (size_t)atomic_load_explicit(&((shm_table *)t)->count, memory_order_relaxed) : 0;
}

/* A new table of cap slots holding t's live entries (t may be NULL); 0 when out of memory. */
static kinf_shm_off rebuild(kinf_shm *shm, const shm_table *t, uint64_t cap)
{
    kinf_shm_off off = kinf_shm_alloc(shm, sizeof(shm_table) + cap * sizeof(uint64_t));
    shm_table *n;
    if (off == 0)
        return 0;
    n = kinf_shm_ptr(shm, off);
    n->cap = cap;
    n->used = 0;
    atomic_init(&n->count, 0);
    for (uint64_t i = 0; i < cap; i++)
        atomic_init(&n->slots[i], EMPTY);
    for (uint64_t i = 0; t != NULL && i < t->cap; i++) {
        uint64_t v = atomic_load_explicit(&((shm_table *)t)->slots[i], memory_order_relaxed);
        uint64_t j;
        if (v <= TOMBSTONE)
            continue;
        for (j = entry_at(shm, v)->hash & (cap - 1); atomic_load_explicit(&n->slots[j],
                                                                          memory_order_relaxed);
             j = (j + 1) & (cap - 1))
            ;
        atomic_init(&n->slots[j], v);
        atomic_init(&n->count, atomic_load_explicit(&n->count, memory_order_relaxed) + 1);
        n->used++;
    }
    return off;
}

/* Rebuilds the table of root so that `extra` more entries fit within 3/4 of the slots. */
static kinf_err make_room(kinf_shm *shm, _Atomic uint64_t *root, uint64_t extra)
{
    kinf_shm_off toff = atomic_load_explicit(root, memory_order_relaxed), noff;
    shm_table *t = table_at(shm, toff);
    uint64_t cap = t ? t->cap : MIN_CAP;
    uint64_t live = t ? atomic_load_explicit(&t->count, memory_order_relaxed) : 0;

    if (t != NULL && (t->used + extra) * 4 <= t->cap * 3)
        return KINF_OK;
    while ((live + extra) * 2 > cap)
        cap *= 2; /* live entries at most half: room until the next rebuild */
    noff = rebuild(shm, t, cap);
    if (noff == 0)
        return KINF_ENOMEM;
    if (toff != 0 && kinf_shm_retire(shm, toff) != KINF_OK) {
        kinf_shm_free(shm, noff);
        return KINF_ENOMEM;
    }
    atomic_store_explicit(root, noff, memory_order_release);
    KINF_SHM_STEP();
    return KINF_OK;
}

kinf_err kinf_shm_map_reserve(kinf_shm *shm, _Atomic uint64_t *root, size_t extra)
{
    return make_room(shm, root, extra);
}

kinf_err kinf_shm_map_put(kinf_shm *shm, _Atomic uint64_t *root, kinf_shm_off entry,
                          kinf_shm_off *replaced)
{
    const kinf_shm_entry *e = entry_at(shm, entry);
    const char *key = (const char *)e + e->key_at;
    kinf_shm_off toff = atomic_load_explicit(root, memory_order_relaxed);
    shm_table *t = table_at(shm, toff);
    int64_t i, free_slot;
    uint64_t found;
    int was_empty;

    *replaced = 0;
    if (t != NULL) {
        i = probe(shm, t, e->hash, key, e->key_len, &found, &free_slot);
        if (found != 0) { /* the key is there: replace in place */
            atomic_store_explicit(&t->slots[i], entry, memory_order_release);
            KINF_SHM_STEP();
            *replaced = found;
            return KINF_OK;
        }
    }
    if (make_room(shm, root, 1) != KINF_OK)
        return KINF_ENOMEM;
    t = table_at(shm, atomic_load_explicit(root, memory_order_relaxed));
    (void)probe(shm, t, e->hash, key, e->key_len, &found, &free_slot);
    was_empty = atomic_load_explicit(&t->slots[free_slot], memory_order_relaxed) == EMPTY;
    atomic_store_explicit(&t->slots[free_slot], entry, memory_order_release);
    KINF_SHM_STEP();
    t->used += was_empty;
    atomic_fetch_add_explicit(&t->count, 1, memory_order_relaxed);
    return KINF_OK;
}

void kinf_shm_map_remove(kinf_shm *shm, _Atomic uint64_t *root, const char *key, size_t len,
                         kinf_shm_off *removed)
{
    shm_table *t = table_at(shm, atomic_load_explicit(root, memory_order_relaxed));
    int64_t i, free_slot;
    uint64_t found;

    *removed = 0;
    if (t == NULL)
        return;
    i = probe(shm, t, kinf_shm_map_hash(shm, key, len), key, len, &found, &free_slot);
    if (found == 0)
        return;
    atomic_store_explicit(&t->slots[i], TOMBSTONE, memory_order_release);
    KINF_SHM_STEP();
    atomic_fetch_sub_explicit(&t->count, 1, memory_order_relaxed);
    *removed = found;
}

void kinf_shm_map_clear(kinf_shm *shm, _Atomic uint64_t *root)
{
    kinf_shm_off toff = atomic_load_explicit(root, memory_order_relaxed);
    if (toff == 0)
        return;
    atomic_store_explicit(root, 0, memory_order_release);
    if (kinf_shm_retire(shm, toff) != KINF_OK)
        return; /* leaked: the map is empty all the same */
}

void kinf_shm_map_recount(kinf_shm *shm, _Atomic uint64_t *root)
{
    shm_table *t = table_at(shm, atomic_load_explicit(root, memory_order_relaxed));
    uint64_t live = 0, used = 0;
    if (t == NULL)
        return;
    for (uint64_t i = 0; i < t->cap; i++) {
        uint64_t v = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
        live += v > TOMBSTONE;
        used += v != EMPTY;
    }
    t->used = used;
    atomic_store_explicit(&t->count, live, memory_order_relaxed);
}

void kinf_shm_map_iter_init(const kinf_shm *shm, _Atomic uint64_t *root, kinf_shm_map_iter *it)
{
    (void)shm;
    it->table = atomic_load_explicit(root, memory_order_acquire);
    it->i = 0;
}

kinf_shm_off kinf_shm_map_next(const kinf_shm *shm, kinf_shm_map_iter *it)
{
    shm_table *t = table_at(shm, it->table);
    while (t != NULL && it->i < t->cap) {
        uint64_t v = atomic_load_explicit(&t->slots[it->i++], memory_order_acquire);
        if (v > TOMBSTONE)
            return v;
    }
    return 0;
}
