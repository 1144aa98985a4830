/*
 * index.h - one index of the store (client-go index.go: an IndexFunc and its Index): a map from
 * value to the bucket of keys whose object yields that value. Internal to store.c, which owns
 * every indexer and decides the locking; nothing here takes a lock.
 *
 * Contract:
 * - A bucket exists only while it holds a key: commit and sweep remove a bucket that empties, so
 *   readers never see an empty one.
 * - Writes to an index come in two steps: kinf_indexer_prepare_locked makes every allocation a
 *   later kinf_indexer_commit_locked needs (buckets, room in their key maps), so commit cannot
 *   fail; kinf_indexer_sweep_locked undoes a prepare that is not followed by a commit.
 * - Functions ending in _locked expect the caller to hold the store's data lock for writing
 *   (reading, for the read-only ones); kinf_indexer_compute runs the index function with no data
 *   lock held (the store holds its writer lock, or the caller is a reader computing values).
 * Ownership: an indexer owns its name, its buckets and their key maps; it never owns the items
 * its buckets point at (the store does). kinf_values are single allocations (kinf_values_free).
 */
#ifndef KINF_INDEX_H
#define KINF_INDEX_H

#include <stdint.h>
#include <string.h>

#include "map.h"
#include "store.h"

typedef struct kinf_indexer {
    kinf_index_fn fn; /* [store write_mu] NULL with builtin_ns == 0: detached, yields no values */
    void *ud;
    int builtin_ns;   /* the namespace index: values are {metadata.namespace} */
    kinf_map buckets; /* [store data lock] value -> bucket */
    char name[];
} kinf_indexer;

typedef struct kinf_bucket {
    kinf_map keys;    /* item key -> the store's item */
    uint64_t version; /* the store version of the last write that changed its keys or objects */
    size_t len;
    char value[];
} kinf_bucket;

/* A copy of def (its name copied, its function and ud borrowed); NULL when out of memory. */
kinf_indexer *kinf_indexer_new(const kinf_indexer_def *def);
/* Frees ix, its buckets and their key maps (not the items). Accepts NULL. */
void kinf_indexer_free(kinf_indexer *ix);
/* Frees a value -> bucket map (an indexer's, or one built for a replace), not the items. */
void kinf_indexer_buckets_free(kinf_map *buckets);

/* Computes obj's values for ix with index function fn/ud (read under the writer lock by the
 * caller). A failing function gives "no values": *failed is incremented and, for the first
 * failure, errbuf says which index and object; only KINF_ENOMEM is returned as an error. */
kinf_err kinf_indexer_compute(kinf_indexer *ix, kinf_index_fn fn, void *ud, kinf_object *obj,
                              kinf_values **out, int *failed, char *errbuf, size_t errlen);

/* Ensures a bucket with room for one more key exists for each value (KINF_ENOMEM otherwise). */
kinf_err kinf_indexer_prepare_locked(kinf_indexer *ix, const kinf_values *vals);
/* Undoes a failed prepare: removes the empty buckets it may have created. */
void kinf_indexer_sweep_locked(kinf_indexer *ix, const kinf_values *vals);
/* Moves key (of hash kinf_key_hash(key), whose entry value is item) from the old values' buckets to the new ones' and stamps
 * every bucket it touches (those that keep the key too) with version. Cannot fail after
 * kinf_indexer_prepare_locked(ix, new_). */
void kinf_indexer_commit_locked(kinf_indexer *ix, const char *key, size_t key_len, uint32_t hash,
                                void *item, const kinf_values *old, const kinf_values *new_,
                                uint64_t version);
/* Stamps the buckets of vals with version: their keys stay, an object of theirs changed. */
void kinf_indexer_touch_locked(kinf_indexer *ix, const kinf_values *vals, uint64_t version);

/* The keys (key -> item) under value, or NULL when no key has it. */
const kinf_map *kinf_indexer_keys_locked(const kinf_indexer *ix, const char *value, size_t len);
/* The version of value's bucket; 0 when no key has the value. */
uint64_t kinf_indexer_version_locked(const kinf_indexer *ix, const char *value, size_t len);
/* Every value present in ix as one kinf_values (NULL when there are none). */
kinf_err kinf_indexer_values_locked(const kinf_indexer *ix, kinf_values **out);

/* Whether vals holds v. NULL holds nothing. */
static inline int kinf_values_have(const kinf_values *vals, const kinf_str *v)
{
    if (vals == NULL)
        return 0;
    for (size_t i = 0; i < vals->n; i++) {
        if (vals->v[i].len == v->len && memcmp(vals->v[i].ptr, v->ptr, v->len) == 0)
            return 1;
    }
    return 0;
}

/* Whether a and b hold the same values (as sets; NULL is the empty set). */
static inline int kinf_values_equal(const kinf_values *a, const kinf_values *b)
{
    size_t na = a ? a->n : 0, nb = b ? b->n : 0;
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++) {
        if (!kinf_values_have(b, &a->v[i]) || !kinf_values_have(a, &b->v[i]))
            return 0;
    }
    return 1;
}

#endif
