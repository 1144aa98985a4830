/*
 * delta_fifo.c - DeltaFIFO (contract in delta_fifo.h).
 *
 * `items` maps key -> entry; `ring` holds the queued entries in order. An entry lives exactly as
 * long as its key is queued: created by the first delta for the key, freed by pop. Popping
 * frees a ring slot and a map slot, so a requeue from inside pop never allocates for the queue.
 * A pop that empties a queue which had grown big (a list) frees the map's and the ring's
 * arrays: an informer's queue is empty most of its life, and at 100k keys they hold 9 MB.
 *
 * Allocation failures: a single enqueue either happens completely or returns KINF_ENOMEM with
 * nothing changed. replace and resync enqueue many keys; a failure part way returns KINF_ENOMEM
 * with the keys before it enqueued (the reflector answers any replace error with a relist, which
 * converges).
 */
#include "delta_fifo.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grow_ahead.h"
#include "map.h"

typedef struct entry {
    kinf_deltas deltas;
    size_t bytes;       /* kinf_object_size of every delta's record */
    uint32_t key_len;
    uint32_t hash;      /* kinf_key_hash of key */
    char key[];
} entry;

struct kinf_fifo {
    atomic_long refs;
    pthread_mutex_t mu; /* error-checking, see the header */
    pthread_cond_t cond;
    kinf_map items;     /* [mu] key -> entry */
    entry **ring;       /* [mu] queue order: ring[(head + i) % cap] */
    size_t head, count, cap;
    size_t ndeltas;     /* [mu] deltas over all queued keys */
    size_t bytes;       /* [mu] sum of the entries' bytes */
    kinf_store *known;  /* immutable after new */
    unsigned flags;     /* immutable after new */
    int populated;      /* [mu] */
    size_t initial_count; /* [mu] */
    int closed;         /* [mu] */
    void (*notify)(void *ud); /* [mu] */
    void *notify_ud;
};

const char *kinf_delta_type_name(kinf_delta_type t)
{
    switch (t) {
    case KINF_DELTA_ADDED:    return "Added";
    case KINF_DELTA_UPDATED:  return "Updated";
    case KINF_DELTA_DELETED:  return "Deleted";
    case KINF_DELTA_REPLACED: return "Replaced";
    case KINF_DELTA_SYNC:     return "Sync";
    }
    return "Unknown";
}

void kinf_deltas_clear(kinf_deltas *d)
{
    for (size_t i = 0; i < d->n; i++)
        kinf_object_unref(d->v[i].obj);
    free(d->v);
    d->v = NULL;
    d->n = d->cap = 0;
}

kinf_object *kinf_deltas_newest(const kinf_deltas *d)
{
    return d->n ? d->v[d->n - 1].obj : NULL;
}

static kinf_err deltas_copy(const kinf_deltas *src, kinf_deltas *dst)
{
    dst->v = malloc((src->n ? src->n : 1) * sizeof(*dst->v));
    if (dst->v == NULL) {
        dst->n = dst->cap = 0;
        return KINF_ENOMEM;
    }
    for (size_t i = 0; i < src->n; i++) {
        dst->v[i].type = src->v[i].type;
        dst->v[i].obj = kinf_object_ref(src->v[i].obj);
    }
    dst->n = src->n;
    dst->cap = src->n ? src->n : 1;
    return KINF_OK;
}

kinf_store *kinf_fifo_known(kinf_fifo *f)
{
    return f->known;
}

kinf_fifo *kinf_fifo_new(kinf_store *known, unsigned flags, kinf_err *err)
{
    pthread_mutexattr_t mattr;
    pthread_condattr_t cattr;
    kinf_fifo *f = calloc(1, sizeof(*f));

    if (f == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    if (pthread_mutexattr_init(&mattr) != 0)
        goto fail;
    pthread_mutexattr_settype(&mattr, PTHREAD_MUTEX_ERRORCHECK);
    if (pthread_mutex_init(&f->mu, &mattr) != 0) {
        pthread_mutexattr_destroy(&mattr);
        goto fail;
    }
    pthread_mutexattr_destroy(&mattr);
    /* Timed pops measure against the monotonic clock: wall-clock jumps must not wake them. */
    if (pthread_condattr_init(&cattr) != 0)
        goto fail_mu;
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    if (pthread_cond_init(&f->cond, &cattr) != 0) {
        pthread_condattr_destroy(&cattr);
        goto fail_mu;
    }
    pthread_condattr_destroy(&cattr);
    atomic_init(&f->refs, 1);
    kinf_map_init(&f->items);
    f->known = kinf_store_ref(known);
    f->flags = flags;
    *err = KINF_OK;
    return f;
fail_mu:
    pthread_mutex_destroy(&f->mu);
fail:
    free(f);
    *err = KINF_ENOMEM;
    return NULL;
}

kinf_fifo *kinf_fifo_ref(kinf_fifo *f)
{
    if (f != NULL)
        atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
    return f;
}

void kinf_fifo_unref(kinf_fifo *f)
{
    if (f == NULL || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < f->count; i++) {
        entry *e = f->ring[(f->head + i) % f->cap];
        kinf_deltas_clear(&e->deltas);
        free(e);
    }
    free(f->ring);
    kinf_map_free(&f->items);
    kinf_store_unref(f->known);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static kinf_err lock(kinf_fifo *f)
{
    int rc = pthread_mutex_lock(&f->mu);
    if (rc == EDEADLK)
        return KINF_EBUSY;
    return rc == 0 ? KINF_OK : KINF_EINVAL;
}

static void unlock(kinf_fifo *f)
{
    pthread_mutex_unlock(&f->mu);
}

void kinf_fifo_set_notify(kinf_fifo *f, void (*notify)(void *ud), void *ud)
{
    if (lock(f) != KINF_OK)
        return;
    f->notify = notify;
    f->notify_ud = ud;
    unlock(f);
}

static void wake_locked(kinf_fifo *f)
{
    pthread_cond_broadcast(&f->cond);
    if (f->notify != NULL)
        f->notify(f->notify_ud);
}

static kinf_err ring_reserve_locked(kinf_fifo *f, size_t n)
{
    entry **ring;
    size_t cap;

    if (n <= f->cap)
        return KINF_OK;
    cap = f->cap ? f->cap * 2 : 16;
    while (cap < n)
        cap *= 2;
    ring = malloc(cap * sizeof(*ring));
    if (ring == NULL)
        return KINF_ENOMEM;
    for (size_t i = 0; i < f->count; i++)
        ring[i] = f->ring[(f->head + i) % f->cap];
    free(f->ring);
    f->ring = ring;
    f->cap = cap;
    f->head = 0;
    return KINF_OK;
}

/* Appends e at the tail; room must have been reserved. */
static void ring_push_locked(kinf_fifo *f, entry *e)
{
    f->ring[(f->head + f->count) % f->cap] = e;
    f->count++;
}

/* Merges the last two deltas when both are deletions (dedupDeltas / isDeletionDup): keep the
 * older one unless it carries a tombstone, then keep the newer one. Returns the size of the
 * record dropped (0: nothing merged). */
static size_t dedup_tail(kinf_deltas *d)
{
    kinf_delta *older, *newer;
    size_t dropped;
    if (d->n < 2)
        return 0;
    older = &d->v[d->n - 2];
    newer = &d->v[d->n - 1];
    if (older->type != KINF_DELTA_DELETED || newer->type != KINF_DELTA_DELETED)
        return 0;
    if (kinf_object_is_tombstone(older->obj)) {
        dropped = kinf_object_size(older->obj);
        kinf_object_unref(older->obj);
        *older = *newer;
    } else {
        dropped = kinf_object_size(newer->obj);
        kinf_object_unref(newer->obj);
    }
    d->n--;
    return dropped;
}

/* Counts e (just queued) in the FIFO's totals, or takes it out of them (just popped). */
static void count_in_locked(kinf_fifo *f, const entry *e)
{
    f->ndeltas += e->deltas.n;
    f->bytes += e->bytes;
}

static void count_out_locked(kinf_fifo *f, const entry *e)
{
    f->ndeltas -= e->deltas.n;
    f->bytes -= e->bytes;
}

/* queueActionLocked: appends {type, obj} to obj's key, queueing the key if it is new. */
static kinf_err queue_action_locked(kinf_fifo *f, kinf_delta_type type, kinf_object *obj)
{
    entry *e = kinf_map_get_h(&f->items, obj->key, obj->key_len, obj->hash);
    kinf_deltas *d;
    size_t size;

    if (e == NULL) {
        if (ring_reserve_locked(f, f->count + 1) != KINF_OK)
            return KINF_ENOMEM;
        /* A list queues its keys in a row, and they stay until the dispatch pops them. */
        kinf_grow_ahead(sizeof(*e) + obj->key_len + 1 + 2 * sizeof(kinf_delta));
        e = malloc(sizeof(*e) + obj->key_len + 1);
        if (e == NULL)
            return KINF_ENOMEM;
        memcpy(e->key, obj->key, obj->key_len + 1);
        e->key_len = obj->key_len;
        e->hash = obj->hash;
        e->deltas.v = malloc(2 * sizeof(kinf_delta));
        e->deltas.n = 0;
        e->deltas.cap = 2;
        e->bytes = 0;
        if (e->deltas.v == NULL ||
            kinf_map_put_h(&f->items, e->key, e->key_len, e->hash, e) != KINF_OK) {
            free(e->deltas.v);
            free(e);
            return KINF_ENOMEM;
        }
        ring_push_locked(f, e);
        if (f->count == 1)
            wake_locked(f);
        else
            pthread_cond_broadcast(&f->cond);
    }
    d = &e->deltas;
    if (d->n == d->cap) {
        kinf_delta *v = realloc(d->v, d->cap * 2 * sizeof(*v));
        if (v == NULL)
            return KINF_ENOMEM; /* an existing entry is left as it was */
        d->v = v;
        d->cap *= 2;
    }
    d->v[d->n].type = type;
    d->v[d->n].obj = kinf_object_ref(obj);
    d->n++;
    size = kinf_object_size(obj);
    e->bytes += size;
    f->bytes += size;
    f->ndeltas++;
    if ((size = dedup_tail(d)) > 0) {
        e->bytes -= size;
        f->bytes -= size;
        f->ndeltas--;
    }
    return KINF_OK;
}

static kinf_err enqueue(kinf_fifo *f, kinf_delta_type type, kinf_object *obj)
{
    kinf_err err;
    if (obj == NULL || kinf_object_is_tombstone(obj))
        return KINF_EINVAL;
    if ((err = lock(f)) != KINF_OK)
        return err;
    f->populated = 1;
    err = queue_action_locked(f, type, obj);
    unlock(f);
    return err;
}

kinf_err kinf_fifo_add(kinf_fifo *f, kinf_object *obj)
{
    return enqueue(f, KINF_DELTA_ADDED, obj);
}

kinf_err kinf_fifo_update(kinf_fifo *f, kinf_object *obj)
{
    return enqueue(f, KINF_DELTA_UPDATED, obj);
}

kinf_err kinf_fifo_delete(kinf_fifo *f, kinf_object *obj)
{
    kinf_err err;
    int queued;

    if (obj == NULL)
        return KINF_EINVAL;
    if ((err = lock(f)) != KINF_OK)
        return err;
    f->populated = 1;
    queued = kinf_map_get(&f->items, obj->key, obj->key_len) != NULL;
    if (!queued) {
        /* Without known objects a delete for an unqueued key was already reported (by a
         * relist); with them, only when the known objects do not have it either. */
        kinf_object *known = f->known ? kinf_store_get(f->known, obj->key, obj->key_len) : NULL;
        int skip = known == NULL;
        kinf_object_unref(known);
        if (skip) {
            unlock(f);
            return KINF_OK;
        }
    }
    err = queue_action_locked(f, KINF_DELTA_DELETED, obj);
    unlock(f);
    return err;
}

/* Enqueues Deleted(tombstone{key, last}) for key. */
static kinf_err queue_tombstone_locked(kinf_fifo *f, const char *key, size_t len,
                                       kinf_object *last)
{
    kinf_err err;
    kinf_object *tomb = kinf_tombstone_new(key, len, last, &err);
    if (tomb == NULL)
        return err;
    err = queue_action_locked(f, KINF_DELTA_DELETED, tomb);
    kinf_object_unref(tomb);
    return err;
}

/* How many keys ahead a loop over many keys asks the cache for their slots (prefetch). */
#define AHEAD 8

/* The listed keys as a set, for deletion detection against what was queued before. */
static kinf_err listed_keys(kinf_map *keys, kinf_object *const *objs, size_t n)
{
    if (kinf_map_reserve(keys, n) != KINF_OK)
        return KINF_ENOMEM;
    for (size_t i = 0; i < n; i++)
        (void)kinf_map_put_h(keys, objs[i]->key, objs[i]->key_len, objs[i]->hash, objs[i]);
    return KINF_OK;
}

kinf_err kinf_fifo_replace(kinf_fifo *f, kinf_object *const *objs, size_t n, const char *rv)
{
    kinf_delta_type action = (f->flags & KINF_FIFO_EMIT_REPLACED) ? KINF_DELTA_REPLACED
                                                                   : KINF_DELTA_SYNC;
    kinf_object **known = NULL, **queued = NULL;
    size_t nknown = 0, nqueued = 0, deletions = 0, listed;
    int have_keys = 0;
    kinf_map keys;
    kinf_err err;

    (void)rv;
    for (size_t i = 0; i < n; i++) {
        if (objs[i] == NULL || kinf_object_is_tombstone(objs[i]))
            return KINF_EINVAL;
    }
    /* The known objects will take these keys one pop at a time: room for all of them now
     * saves their map the doublings (a rehash each, into fresh pages) on the way. Best effort:
     * without it, the adds grow the map as they go. Not under our lock (the order is FIFO lock
     * -> store), so a pop in progress is not held up by it. */
    if (f->known != NULL)
        (void)kinf_store_reserve(f->known, n);
    kinf_map_init(&keys);
    if ((err = lock(f)) != KINF_OK)
        return err;
    /* With nothing queued (an informer's first list, and any relist its dispatch kept up
     * with), the queue's own map holds exactly the listed keys once they are queued, so no set
     * of them is built: that was half of the time of a 100k-object replace. Otherwise the set
     * is built without the lock, and everything below is decided again under it. */
    if (f->count > 0) {
        unlock(f);
        if ((err = listed_keys(&keys, objs, n)) != KINF_OK) {
            kinf_map_free(&keys);
            return err;
        }
        have_keys = 1;
        if ((err = lock(f)) != KINF_OK) {
            kinf_map_free(&keys);
            return err;
        }
    }
    /* Deletion detection against the queue: keys queued but not listed. Only entries queued
     * before this replace can be such keys, so they are collected first (the enqueues below
     * may also grow the ring and would disturb a walk over it); their tombstones are queued
     * after the listed objects, as before. */
    queued = malloc((f->count ? f->count : 1) * sizeof(*queued));
    if (queued == NULL) {
        err = KINF_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < f->count; i++) {
        entry *e = f->ring[(f->head + i) % f->cap];
        if (kinf_map_get_h(&keys, e->key, e->key_len, e->hash) == NULL)
            queued[nqueued++] = kinf_object_ref(kinf_deltas_newest(&e->deltas));
    }
    /* Room for every listed key at once, rather than doubling (and rehashing) on the way. */
    if ((err = kinf_map_reserve(&f->items, n)) != KINF_OK)
        goto out;
    for (size_t i = 0; i < n && err == KINF_OK; i++) {
        /* A list's records were made on another thread and a big map's slots are cache misses:
         * fetch the record of the key 2 * AHEAD on and the slot of the one AHEAD on, so the
         * misses of several keys overlap. */
        if (i + 2 * AHEAD < n)
            __builtin_prefetch(objs[i + 2 * AHEAD]);
        if (i + AHEAD < n)
            kinf_map_prefetch(&f->items, objs[i + AHEAD]->hash);
        err = queue_action_locked(f, action, objs[i]);
    }
    if (err != KINF_OK)
        goto out;
    listed = have_keys ? keys.count : f->count; /* distinct listed keys */
    for (size_t i = 0; i < nqueued && err == KINF_OK; i++) {
        kinf_object *last = queued[i];
        /* A tombstone's key is the entry's key; its inner object is what was last known. */
        err = queue_tombstone_locked(f, last->key, last->key_len,
                                     kinf_object_is_tombstone(last) ? last->inner : last);
        deletions++;
    }
    if (err != KINF_OK)
        goto out;

    /* Deletion detection against known objects: known, not listed, nothing queued (every
     * listed key is queued now, so the queue's map answers both). */
    if (f->known != NULL) {
        if ((err = kinf_store_list(f->known, &known, &nknown)) != KINF_OK)
            goto out;
        for (size_t i = 0; i < nknown && err == KINF_OK; i++) {
            kinf_object *k = known[i];
            if (kinf_map_get(&f->items, k->key, k->key_len) != NULL)
                continue;
            err = queue_tombstone_locked(f, k->key, k->key_len, k);
            deletions++;
        }
        if (err != KINF_OK)
            goto out;
    }
    if (!f->populated) {
        f->populated = 1;
        f->initial_count = listed + deletions;
    }
out:
    unlock(f);
    kinf_objects_free(queued, nqueued);
    kinf_objects_free(known, nknown);
    kinf_map_free(&keys);
    return err;
}

kinf_err kinf_fifo_resync(kinf_fifo *f)
{
    kinf_object **known = NULL;
    size_t nknown = 0;
    kinf_err err;

    if (f->known == NULL)
        return KINF_OK;
    if ((err = lock(f)) != KINF_OK)
        return err;
    err = kinf_store_list(f->known, &known, &nknown);
    for (size_t i = 0; i < nknown && err == KINF_OK; i++) {
        /* Skip keys with queued deltas: a Sync would carry an older state than they do. */
        if (kinf_map_get(&f->items, known[i]->key, known[i]->key_len) == NULL)
            err = queue_action_locked(f, KINF_DELTA_SYNC, known[i]);
    }
    unlock(f);
    kinf_objects_free(known, nknown);
    return err;
}

static int has_synced_locked(const kinf_fifo *f)
{
    return f->populated && f->initial_count == 0;
}

/* An empty queue gives back the arrays a big one grew (the next push allocates small ones). */
static void release_idle_locked(kinf_fifo *f)
{
    if (f->items.cap <= 1024)
        return;
    kinf_map_free(&f->items);
    kinf_map_init(&f->items);
    free(f->ring);
    f->ring = NULL;
    f->head = f->cap = 0;
}

/* Puts a popped entry back at the tail; cannot allocate (pop freed a ring and a map slot). */
static void requeue_locked(kinf_fifo *f, entry *e)
{
    (void)kinf_map_put_h(&f->items, e->key, e->key_len, e->hash, e);
    ring_push_locked(f, e);
    count_in_locked(f, e);
    if (f->count == 1)
        wake_locked(f);
}

static kinf_err wait_locked(kinf_fifo *f, double timeout)
{
    struct timespec deadline;

    if (timeout < 0) {
        while (f->count == 0 && !f->closed)
            pthread_cond_wait(&f->cond, &f->mu);
        return KINF_OK;
    }
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (timeout > 1e9)
        timeout = 1e9;
    deadline.tv_sec += (time_t)timeout;
    deadline.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    while (f->count == 0 && !f->closed) {
        if (pthread_cond_timedwait(&f->cond, &f->mu, &deadline) == ETIMEDOUT)
            return f->count ? KINF_OK : KINF_ETIMEDOUT;
    }
    return KINF_OK;
}

/* Every AHEAD pops of a long queue: asks the cache for the entries 2 * AHEAD on, and for the
 * slots (ours and the known store's) of the AHEAD keys after the next AHEAD, whose entries the
 * previous call fetched. Pops of a list's keys then find them in the cache. */
static void look_ahead_locked(kinf_fifo *f)
{
    uint32_t hashes[AHEAD];

    for (size_t k = 2 * AHEAD; k < 3 * AHEAD; k++)
        __builtin_prefetch(f->ring[(f->head + k) % f->cap]);
    for (size_t k = 0; k < AHEAD; k++) {
        hashes[k] = f->ring[(f->head + AHEAD + k) % f->cap]->hash;
        kinf_map_prefetch(&f->items, hashes[k]);
    }
    if (f->known != NULL)
        kinf_store_prefetch(f->known, hashes, AHEAD);
}

kinf_err kinf_fifo_pop(kinf_fifo *f, double timeout, kinf_fifo_process_fn process, void *ud,
                       kinf_deltas *out, int *is_initial)
{
    kinf_err err;
    entry *e;
    int initial, rc = KINF_OK;

    out->v = NULL;
    out->n = out->cap = 0;
    if ((err = lock(f)) != KINF_OK)
        return err;
    if ((err = wait_locked(f, timeout)) != KINF_OK) {
        unlock(f);
        return err;
    }
    if (f->count == 0) { /* closed and drained */
        unlock(f);
        return KINF_ECLOSED;
    }
    initial = !has_synced_locked(f);
    if (f->count > 3 * AHEAD && f->head % AHEAD == 0)
        look_ahead_locked(f);
    e = f->ring[f->head];
    f->head = (f->head + 1) % f->cap;
    f->count--;
    if (f->initial_count > 0)
        f->initial_count--;
    kinf_map_remove_h(&f->items, e->key, e->key_len, e->hash);
    count_out_locked(f, e);
    if (process != NULL)
        rc = process(ud, &e->deltas, initial);
    if (rc == KINF_FIFO_REQUEUE) {
        rc = KINF_OK;
        if (kinf_map_get_h(&f->items, e->key, e->key_len, e->hash) == NULL) {
            /* The queue keeps the entry; the caller gets a copy. */
            if (deltas_copy(&e->deltas, out) != KINF_OK)
                rc = KINF_ENOMEM;
            requeue_locked(f, e);
            e = NULL;
        }
    }
    if (e != NULL && f->count == 0)
        release_idle_locked(f);
    unlock(f);
    if (e != NULL) {
        *out = e->deltas;
        free(e);
    }
    if (is_initial)
        *is_initial = initial;
    return (kinf_err)rc;
}

kinf_err kinf_fifo_add_if_not_present(kinf_fifo *f, const kinf_deltas *deltas)
{
    kinf_object *newest = kinf_deltas_newest(deltas);
    kinf_err err;
    entry *e;

    if (newest == NULL)
        return KINF_EINVAL;
    if ((err = lock(f)) != KINF_OK)
        return err;
    f->populated = 1;
    if (kinf_map_get_h(&f->items, newest->key, newest->key_len, newest->hash) != NULL)
        goto out;
    err = KINF_ENOMEM;
    if (ring_reserve_locked(f, f->count + 1) != KINF_OK)
        goto out;
    e = malloc(sizeof(*e) + newest->key_len + 1);
    if (e == NULL)
        goto out;
    memcpy(e->key, newest->key, newest->key_len + 1);
    e->key_len = newest->key_len;
    e->hash = newest->hash;
    if (deltas_copy(deltas, &e->deltas) != KINF_OK) {
        free(e);
        goto out;
    }
    e->bytes = 0;
    for (size_t i = 0; i < e->deltas.n; i++)
        e->bytes += kinf_object_size(e->deltas.v[i].obj);
    if (kinf_map_put_h(&f->items, e->key, e->key_len, e->hash, e) != KINF_OK) {
        kinf_deltas_clear(&e->deltas);
        free(e);
        goto out;
    }
    ring_push_locked(f, e);
    count_in_locked(f, e);
    if (f->count == 1)
        wake_locked(f);
    else
        pthread_cond_broadcast(&f->cond);
    err = KINF_OK;
out:
    unlock(f);
    return err;
}

kinf_err kinf_fifo_list(kinf_fifo *f, kinf_object ***out, size_t *n)
{
    kinf_object **arr;
    kinf_err err;

    if ((err = lock(f)) != KINF_OK)
        return err;
    arr = malloc((f->count ? f->count : 1) * sizeof(*arr));
    if (arr == NULL) {
        unlock(f);
        return KINF_ENOMEM;
    }
    for (size_t i = 0; i < f->count; i++)
        arr[i] = kinf_object_ref(kinf_deltas_newest(&f->ring[(f->head + i) % f->cap]->deltas));
    *n = f->count;
    *out = arr;
    unlock(f);
    return KINF_OK;
}

kinf_err kinf_fifo_get_by_key(kinf_fifo *f, const char *key, size_t len, kinf_deltas *out)
{
    kinf_err err;
    entry *e;

    out->v = NULL;
    out->n = out->cap = 0;
    if ((err = lock(f)) != KINF_OK)
        return err;
    e = kinf_map_get(&f->items, key, len);
    err = e ? deltas_copy(&e->deltas, out) : KINF_ENOTFOUND;
    unlock(f);
    return err;
}

size_t kinf_fifo_len(kinf_fifo *f)
{
    size_t n = 0;
    if (lock(f) == KINF_OK) {
        n = f->count;
        unlock(f);
    }
    return n;
}

void kinf_fifo_get_stats(kinf_fifo *f, kinf_fifo_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (lock(f) == KINF_OK) {
        out->keys = f->count;
        out->deltas = f->ndeltas;
        out->bytes = f->bytes;
        unlock(f);
    }
}

int kinf_fifo_has_synced(kinf_fifo *f)
{
    int synced = 0;
    if (lock(f) == KINF_OK) {
        synced = has_synced_locked(f);
        unlock(f);
    }
    return synced;
}

void kinf_fifo_close(kinf_fifo *f)
{
    if (lock(f) != KINF_OK)
        return;
    f->closed = 1;
    wake_locked(f);
    unlock(f);
}

int kinf_fifo_is_closed(kinf_fifo *f)
{
    int closed = 0;
    if (lock(f) == KINF_OK) {
        closed = f->closed;
        unlock(f);
    }
    return closed;
}
