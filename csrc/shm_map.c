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

#define CORRUPT (-2)

/* The entry at off when it checks (a block holding its header and its key), else NULL. */
static const kinf_shm_entry *entry_checked(const kinf_shm *shm, kinf_shm_off off)
{
    uint64_t span = kinf_shm_span(shm, off);
    const kinf_shm_entry *e = entry_at(shm, off);
    if (span < sizeof(kinf_shm_entry) || (uint64_t)e->key_at + e->key_len > span ||
        e->key_at < sizeof(kinf_shm_entry))
        return NULL;
    return e;
}

int kinf_shm_entry_ok(const kinf_shm *shm, kinf_shm_off off)
{
    return entry_checked(shm, off) != NULL;
}

/* 1: off is key's entry, 0: another's, CORRUPT: off does not check. */
static int entry_is(const kinf_shm *shm, kinf_shm_off off, uint64_t hash, const char *key,
                    size_t len)
{
    const kinf_shm_entry *e = entry_checked(shm, off);
    if (e == NULL)
        return CORRUPT;
    return e->hash == hash && e->key_len == len &&
           memcmp((const char *)e + e->key_at, key, len) == 0;
}

static shm_table *table_at(const kinf_shm *shm, kinf_shm_off off)
{
    return off ? kinf_shm_ptr(shm, off) : NULL;
}

/* The capacity of the table at off when it checks (a power of two whose slots fit its block),
 * else 0. */
static uint64_t table_cap(const kinf_shm *shm, kinf_shm_off off)
{
    uint64_t span = kinf_shm_span(shm, off), cap;
    if (span < sizeof(shm_table))
        return 0;
    cap = table_at(shm, off)->cap;
    if (cap == 0 || (cap & (cap - 1)) != 0 || cap > (span - sizeof(shm_table)) / 8)
        return 0;
    return cap;
}

/* The slot of key's entry in t (of capacity cap, checked), or of the empty slot ending its probe
 * (-1: none, t full of tombstones, which the writer never lets happen; CORRUPT: an entry met
 * did not check). *found gets the entry's offset as loaded during the probe (0 when the key is
 * absent): a reader must use that value, never load the slot again, since the writer may have
 * filled it with another key since. *first_free gets the first tombstone or empty slot of the
 * probe. */
static int64_t probe(const kinf_shm *shm, const shm_table *t, uint64_t cap, uint64_t hash,
                     const char *key, size_t len, uint64_t *found, int64_t *first_free)
{
    uint64_t mask = cap - 1;
    uint64_t i = hash & mask;
    *found = 0;
    *first_free = -1;
    for (uint64_t n = 0; n < cap; n++, i = (i + 1) & mask) {
        uint64_t v = atomic_load_explicit(&((shm_table *)t)->slots[i], memory_order_acquire);
        int is;
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
        if ((is = entry_is(shm, v, hash, key, len)) == CORRUPT)
            return CORRUPT;
        if (is) {
            *found = v;
            return (int64_t)i;
        }
    }
    return -1;
}

kinf_err kinf_shm_map_find(const kinf_shm *shm, _Atomic uint64_t *root, const char *key,
                           size_t len, kinf_shm_off *out)
{
    kinf_shm_off toff = atomic_load_explicit(root, memory_order_acquire);
    uint64_t cap;
    int64_t free_slot;
    *out = 0;
    if (toff == 0)
        return KINF_OK;
    if ((cap = table_cap(shm, toff)) == 0)
        return KINF_ECORRUPT;
    if (probe(shm, table_at(shm, toff), cap, kinf_shm_map_hash(shm, key, len), key, len, out,
              &free_slot) == CORRUPT)
        return KINF_ECORRUPT;
    return KINF_OK;
}

kinf_shm_off kinf_shm_map_get(const kinf_shm *shm, _Atomic uint64_t *root, const char *key,
                              size_t len)
{
    kinf_shm_off off;
    return kinf_shm_map_find(shm, root, key, len, &off) == KINF_OK ? off : 0;
}

size_t kinf_shm_map_count(const kinf_shm *shm, _Atomic uint64_t *root)
{
    kinf_shm_off toff = atomic_load_explicit(root, memory_order_acquire);
    uint64_t cap = toff ? table_cap(shm, toff) : 0, n;
    if (cap == 0)
        return 0;
    n = atomic_load_explicit(&table_at(shm, toff)->count, memory_order_relaxed);
    return n <= cap ? (size_t)n : 0;
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
        if (v <= TOMBSTONE || entry_checked(shm, v) == NULL)
            continue; /* an entry that does not check is left behind (shm.h, Corruption) */
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
    uint64_t cap = t ? table_cap(shm, toff) : MIN_CAP;
    uint64_t live = t ? atomic_load_explicit(&t->count, memory_order_relaxed) : 0;

    if (cap == 0 || live > cap)
        return KINF_ECORRUPT;
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
    uint64_t found, cap;
    int was_empty;
    kinf_err err;

    *replaced = 0;
    if (t != NULL) {
        if ((cap = table_cap(shm, toff)) == 0)
            return KINF_ECORRUPT;
        if ((i = probe(shm, t, cap, e->hash, key, e->key_len, &found, &free_slot)) == CORRUPT)
            return KINF_ECORRUPT;
        if (found != 0) { /* the key is there: replace in place */
            atomic_store_explicit(&t->slots[i], entry, memory_order_release);
            KINF_SHM_STEP();
            *replaced = found;
            return KINF_OK;
        }
    }
    if ((err = make_room(shm, root, 1)) != KINF_OK)
        return err;
    t = table_at(shm, atomic_load_explicit(root, memory_order_relaxed));
    if (probe(shm, t, t->cap, e->hash, key, e->key_len, &found, &free_slot) == CORRUPT ||
        free_slot < 0)
        return KINF_ECORRUPT;
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
    kinf_shm_off toff = atomic_load_explicit(root, memory_order_relaxed);
    shm_table *t = table_at(shm, toff);
    int64_t i, free_slot;
    uint64_t found, cap;

    *removed = 0;
    if (t == NULL || (cap = table_cap(shm, toff)) == 0)
        return;
    i = probe(shm, t, cap, kinf_shm_map_hash(shm, key, len), key, len, &found, &free_slot);
    if (i < 0 || found == 0)
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
    kinf_shm_off toff = atomic_load_explicit(root, memory_order_relaxed);
    shm_table *t = table_at(shm, toff);
    uint64_t live = 0, used = 0, cap = toff ? table_cap(shm, toff) : 0;
    if (cap == 0)
        return;
    for (uint64_t i = 0; i < cap; i++) {
        uint64_t v = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
        live += v > TOMBSTONE;
        used += v != EMPTY;
    }
    t->used = used;
    atomic_store_explicit(&t->count, live, memory_order_relaxed);
}

void kinf_shm_map_iter_init(const kinf_shm *shm, _Atomic uint64_t *root, kinf_shm_map_iter *it)
{
    it->table = atomic_load_explicit(root, memory_order_acquire);
    it->i = 0;
    it->cap = it->table ? table_cap(shm, it->table) : 0;
    it->corrupt = it->table != 0 && it->cap == 0;
}

kinf_shm_off kinf_shm_map_next(const kinf_shm *shm, kinf_shm_map_iter *it)
{
    shm_table *t = table_at(shm, it->table);
    while (t != NULL && !it->corrupt && it->i < it->cap) {
        uint64_t v = atomic_load_explicit(&t->slots[it->i++], memory_order_acquire);
        if (v <= TOMBSTONE)
            continue;
        if (entry_checked(shm, v) == NULL) {
            it->corrupt = 1;
            return 0;
        }
        return v;
    }
    return 0;
}
