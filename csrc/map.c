/* map.c - string-keyed hash map (contract in map.h). */
#include "map.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "grow_ahead.h"

/* Load factor at most 3/4: probe sequences stay short with linear probing. */
#define MAP_MIN_CAP 16
/* Slot arrays from this size on are faulted in at once (glibc serves them with mmap). */
#define POPULATE_MIN (128u * 1024u)

static uint64_t mix(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}

/* Word-at-a-time multiply-mix hash; keys are short (namespace/name, label values). */
uint64_t kinf_hash_bytes(uint64_t seed, const char *p, size_t len)
{
    uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ULL);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ mix(w)) * 0x9e3779b97f4a7c15ULL;
        p += 8;
        len -= 8;
    }
    if (len) {
        uint64_t w = 0;
        memcpy(&w, p, len);
        h = (h ^ mix(w)) * 0x9e3779b97f4a7c15ULL;
    }
    return mix(h);
}

uint32_t kinf_key_hash(const char *key, size_t len)
{
    static _Atomic uint64_t process_seed;
    uint64_t seed = atomic_load_explicit(&process_seed, memory_order_relaxed);
    if (seed == 0) {
        uint64_t expected = 0, drawn = (uint64_t)kinf_random_seed(); /* never 0 */
        /* The first thread to draw wins; a loser takes the winner's seed. */
        if (atomic_compare_exchange_strong(&process_seed, &expected, drawn))
            seed = drawn;
        else
            seed = expected;
    }
    return (uint32_t)kinf_hash_bytes(seed, key, len);
}

void kinf_map_init(kinf_map *m)
{
    m->slots = NULL;
    m->cap = 0;
    m->count = 0;
}

void kinf_map_free(kinf_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static kinf_map_slot *probe(const kinf_map *m, const char *key, size_t len, uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        kinf_map_slot *s = &m->slots[i];
        if (s->key == NULL)
            return s;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)
            return s;
    }
}

kinf_map_slot *kinf_map_find_h(const kinf_map *m, const char *key, size_t len, uint32_t h)
{
    kinf_map_slot *s;
    if (m->count == 0)
        return NULL;
    s = probe(m, key, len, h);
    return s->key ? s : NULL;
}

kinf_map_slot *kinf_map_find(const kinf_map *m, const char *key, size_t len)
{
    return m->count ? kinf_map_find_h(m, key, len, kinf_key_hash(key, len)) : NULL;
}

void *kinf_map_get_h(const kinf_map *m, const char *key, size_t len, uint32_t h)
{
    kinf_map_slot *s = kinf_map_find_h(m, key, len, h);
    return s ? s->value : NULL;
}

void *kinf_map_get(const kinf_map *m, const char *key, size_t len)
{
    kinf_map_slot *s = kinf_map_find(m, key, len);
    return s ? s->value : NULL;
}

static kinf_err grow_to(kinf_map *m, size_t cap)
{
    kinf_map_slot *old = m->slots, *slots;
    size_t old_cap = m->cap;

    slots = calloc(cap, sizeof(*slots));
    if (slots == NULL)
        return KINF_ENOMEM;
    /* A big calloc is fresh pages that probes would first read (mapping the shared zero page)
     * and then write (a second fault per page): fault them in, written, at once. (A memset
     * would not do: compilers turn malloc + memset into calloc.) */
    if (cap * sizeof(*slots) >= POPULATE_MIN)
        kinf_populate(slots, cap * sizeof(*slots));
    m->slots = slots;
    m->cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key != NULL)
            *probe(m, old[i].key, old[i].len, old[i].hash) = old[i];
    }
    free(old);
    return KINF_OK;
}

kinf_err kinf_map_reserve(kinf_map *m, size_t n)
{
    size_t cap = m->cap ? m->cap : MAP_MIN_CAP;
    if (n > SIZE_MAX / 8)
        return KINF_ENOMEM;
    while (n * 4 > cap * 3)
        cap *= 2;
    return cap == m->cap ? KINF_OK : grow_to(m, cap);
}

kinf_err kinf_map_put_h(kinf_map *m, const char *key, size_t len, uint32_t h, void *value)
{
    kinf_map_slot *s;

    if (m->cap) {
        s = probe(m, key, len, h);
        if (s->key != NULL) {
            s->key = key;
            s->value = value;
            return KINF_OK;
        }
    }
    if (kinf_map_reserve(m, m->count + 1) != KINF_OK)
        return KINF_ENOMEM;
    s = probe(m, key, len, h);
    s->key = key;
    s->len = len;
    s->hash = h;
    s->value = value;
    m->count++;
    return KINF_OK;
}

kinf_err kinf_map_put(kinf_map *m, const char *key, size_t len, void *value)
{
    return kinf_map_put_h(m, key, len, kinf_key_hash(key, len), value);
}

void *kinf_map_remove_h(kinf_map *m, const char *key, size_t len, uint32_t h)
{
    kinf_map_slot *s = kinf_map_find_h(m, key, len, h);
    size_t mask, i, j;
    void *value;

    if (s == NULL)
        return NULL;
    value = s->value;
    mask = m->cap - 1;
    i = (size_t)(s - m->slots);
    /* Backward-shift: move later members of the probe run into the hole so no tombstones are
     * needed and lookups stay correct. */
    for (j = (i + 1) & mask; m->slots[j].key != NULL; j = (j + 1) & mask) {
        size_t home = (size_t)m->slots[j].hash & mask;
        /* Move slot j into the hole at i when its home is not in (i, j] cyclically. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = NULL;
    m->slots[i].value = NULL;
    m->count--;
    return value;
}

void *kinf_map_remove(kinf_map *m, const char *key, size_t len)
{
    return m->count ? kinf_map_remove_h(m, key, len, kinf_key_hash(key, len)) : NULL;
}
