/*
 * store.c - thread-safe indexed store (contract in store.h).
 *
 * Layout (store_impl.h): `items` maps key -> item; each indexer (index.c) maps value -> bucket,
 * a bucket maps key -> item. This file has the writes; the reads are in store_read.c, filtered
 * reads in store_select.c.
 * An item owns its key bytes (the maps point at them) and remembers, per indexer, the values it
 * was indexed under, so an update never has to call an index function on the old object (the
 * namespace index's value is read from the item's record instead: the key fixes it).
 *
 * Every write runs in two steps under the data lock: prepare (all allocations: new buckets, room
 * in maps) and commit (pointer moves that cannot fail). A failed prepare sweeps away the empty
 * buckets it created, so readers never see a half-applied write. Readers skip nothing: empty
 * buckets never survive a write.
 */
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "map.h"
#include "store_impl.h"

/* ---- object arrays ---- */

void kinf_objects_free(kinf_object **objs, size_t n)
{
    if (objs == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        kinf_object_unref(objs[i]);
    free(objs);
}

/* ---- lifecycle ---- */

static void item_free(item *it)
{
    if (it == NULL)
        return;
    for (size_t i = 0; i < it->nvalues; i++)
        kinf_values_free(it->values[i]);
    free(it->values);
    kinf_object_unref(it->obj);
    free(it);
}

static void items_free(kinf_map *items)
{
    kinf_map_slot *sl;
    for (size_t i = 0; (sl = kinf_map_next(items, &i)) != NULL;)
        item_free(sl->value);
    kinf_map_free(items);
}

kinf_store *kinf_store_new(int with_namespace_index, kinf_err *err)
{
    pthread_mutexattr_t attr;
    kinf_store *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    if (pthread_mutexattr_init(&attr) != 0) {
        free(s);
        *err = KINF_ENOMEM;
        return NULL;
    }
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    if (pthread_mutex_init(&s->write_mu, &attr) != 0) {
        pthread_mutexattr_destroy(&attr);
        free(s);
        *err = KINF_ENOMEM;
        return NULL;
    }
    pthread_mutexattr_destroy(&attr);
    if (pthread_rwlock_init(&s->lock, NULL) != 0) {
        pthread_mutex_destroy(&s->write_mu);
        free(s);
        *err = KINF_ENOMEM;
        return NULL;
    }
    atomic_init(&s->refs, 1);
    kinf_map_init(&s->items);
    if (with_namespace_index) {
        kinf_indexer_def def = {KINF_NAMESPACE_INDEX, NULL, NULL};
        kinf_err e = kinf_store_add_indexers(s, &def, 1, NULL, 0);
        if (e != KINF_OK) {
            kinf_store_unref(s);
            *err = e;
            return NULL;
        }
    }
    *err = KINF_OK;
    return s;
}

kinf_store *kinf_store_ref(kinf_store *s)
{
    if (s != NULL)
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void kinf_store_unref(kinf_store *s)
{
    if (s == NULL || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    items_free(&s->items);
    for (size_t i = 0; i < s->nindexers; i++)
        kinf_indexer_free(s->indexers[i]);
    free(s->indexers);
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->write_mu);
    free(s);
}

/* ---- locking ---- */

static kinf_err write_begin(kinf_store *s)
{
    int rc = pthread_mutex_lock(&s->write_mu);
    if (rc == EDEADLK)
        return KINF_EBUSY;
    return rc == 0 ? KINF_OK : KINF_EINVAL;
}

static void write_end(kinf_store *s)
{
    pthread_mutex_unlock(&s->write_mu);
}

/* The version the write in progress stamps its changes with (write_mu held: only we change it). */
static uint64_t next_version(kinf_store *s)
{
    return atomic_load_explicit(&s->version, memory_order_relaxed) + 1;
}

/* Publishes version v; caller holds write_mu and the data lock for writing. */
static void publish_version_locked(kinf_store *s, uint64_t v)
{
    atomic_store_explicit(&s->version, v, memory_order_release);
}

/* ---- index values ---- */

/* Computes obj's values for indexers [from, to). vals must hold to - from pointers. */
static kinf_err compute_all(kinf_store *s, size_t from, size_t to, kinf_object *obj,
                            kinf_values **vals, int *failed, char *errbuf, size_t errlen)
{
    for (size_t i = from; i < to; i++) {
        kinf_indexer *ix = s->indexers[i];
        kinf_err e = kinf_indexer_compute(ix, ix->fn, ix->ud, obj, &vals[i - from], failed, errbuf, errlen);
        if (e != KINF_OK) {
            for (size_t j = from; j < i; j++)
                kinf_values_free(vals[j - from]);
            return e;
        }
    }
    return KINF_OK;
}

/* How many values an item keeps for indexers [0, n): up to the last one that is not the
 * namespace index (0 when there is none). */
static size_t values_len(const kinf_store *s, size_t n)
{
    while (n > 0 && s->indexers[n - 1]->builtin_ns)
        n--;
    return n;
}

static void note_index_failure_locked(kinf_store *s, int failed, const char *msg)
{
    if (!failed)
        return;
    s->index_errors += (unsigned long)failed;
    kinf_errmsg(s->last_index_error, sizeof(s->last_index_error), "%s", msg);
}

/* ---- writes ---- */

kinf_err kinf_store_add(kinf_store *s, kinf_object *obj, kinf_object **old_out, char *errbuf,
                        size_t errlen)
{
    kinf_values *stack_vals[8], **vals = stack_vals;
    kinf_values **item_vals = NULL;
    item *it, *fresh = NULL;
    char msg[256] = "";
    int failed = 0;
    uint64_t version;
    size_t n, nv;
    kinf_err e;

    if (old_out)
        *old_out = NULL;
    if (obj == NULL || kinf_object_is_tombstone(obj))
        return KINF_EINVAL;
    e = write_begin(s);
    if (e != KINF_OK)
        return e;
    n = s->nindexers;
    nv = values_len(s, n);
    if (n > 8 && (vals = calloc(n, sizeof(*vals))) == NULL) {
        write_end(s);
        return KINF_ENOMEM;
    }
    e = compute_all(s, 0, n, obj, vals, &failed, msg, sizeof(msg));
    if (e != KINF_OK)
        goto out_nolock;

    /* stable: we are the only writer */
    it = kinf_map_get_h(&s->items, obj->key, obj->key_len, obj->hash);
    if (nv > 0 && (it == NULL || it->nvalues < nv)) {
        /* A new item, or one indexed before some indexers existed: size its values array. */
        item_vals = calloc(nv, sizeof(*item_vals));
        if (item_vals == NULL) {
            e = KINF_ENOMEM;
            goto out_free_vals;
        }
    }
    if (it == NULL) {
        fresh = malloc(sizeof(*fresh) + obj->key_len + 1);
        if (fresh == NULL) {
            e = KINF_ENOMEM;
            goto out_free_vals;
        }
        memcpy(fresh->key, obj->key, obj->key_len + 1);
        fresh->key_len = obj->key_len;
        fresh->hash = obj->hash;
        fresh->obj = NULL;
        fresh->values = item_vals;
        fresh->nvalues = item_vals != NULL ? nv : 0;
        item_vals = NULL;
    }

    pthread_rwlock_wrlock(&s->lock);
    if (fresh != NULL && kinf_map_reserve(&s->items, s->items.count + 1) != KINF_OK) {
        e = KINF_ENOMEM;
    } else {
        size_t i;
        for (i = 0; i < n; i++) {
            kinf_values_view view;
            const kinf_values *old = kinf_item_values(s, it, i, &view);
            if (kinf_values_equal(old, vals[i]))
                continue;
            if (kinf_indexer_prepare_locked(s->indexers[i], vals[i]) != KINF_OK)
                break;
        }
        if (i < n) {
            for (size_t j = 0; j <= i; j++)
                kinf_indexer_sweep_locked(s->indexers[j], vals[j]);
            e = KINF_ENOMEM;
        }
    }
    if (e != KINF_OK) {
        pthread_rwlock_unlock(&s->lock);
        free(fresh ? fresh->values : NULL);
        free(fresh);
        goto out_free_vals;
    }
    /* Commit: nothing below allocates. */
    version = next_version(s);
    if (fresh != NULL) {
        it = fresh;
        (void)kinf_map_put_h(&s->items, it->key, it->key_len, it->hash, it);
    } else if (item_vals != NULL) {
        if (it->nvalues > 0)
            memcpy(item_vals, it->values, it->nvalues * sizeof(*item_vals));
        free(it->values);
        it->values = item_vals;
        it->nvalues = nv;
        item_vals = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        kinf_values_view view;
        /* it->obj is still the old record here */
        const kinf_values *old = kinf_item_values(s, it, i, &view);
        if (kinf_values_equal(old, vals[i])) {
            /* Same values: the key stays where it is, only its object changes. */
            kinf_indexer_touch_locked(s->indexers[i], old, version);
            kinf_values_free(vals[i]);
            continue;
        }
        kinf_indexer_commit_locked(s->indexers[i], it->key, it->key_len, it->hash, it, old,
                                   vals[i], version);
        if (s->indexers[i]->builtin_ns) {
            kinf_values_free(vals[i]); /* read from the record from now on */
        } else {
            kinf_values_free(it->values[i]);
            it->values[i] = vals[i];
        }
    }
    if (old_out)
        *old_out = it->obj;
    else
        kinf_object_unref(it->obj);
    it->obj = kinf_object_ref(obj);
    publish_version_locked(s, version);
    note_index_failure_locked(s, failed, msg);
    pthread_rwlock_unlock(&s->lock);
    write_end(s);
    if (vals != stack_vals)
        free(vals);
    if (failed) {
        kinf_errmsg(errbuf, errlen, "%s", msg);
        return KINF_EINDEX;
    }
    return KINF_OK;

out_free_vals:
    for (size_t i = 0; i < n; i++)
        kinf_values_free(vals[i]);
out_nolock:
    free(item_vals);
    if (vals != stack_vals)
        free(vals);
    write_end(s);
    return e;
}

void kinf_store_prefetch(kinf_store *s, const uint32_t *hashes, size_t n)
{
    pthread_rwlock_rdlock(&s->lock);
    for (size_t i = 0; i < n; i++)
        kinf_map_prefetch(&s->items, hashes[i]);
    pthread_rwlock_unlock(&s->lock);
}

kinf_err kinf_store_reserve(kinf_store *s, size_t n)
{
    kinf_err e = write_begin(s);
    if (e != KINF_OK)
        return e;
    pthread_rwlock_wrlock(&s->lock);
    e = kinf_map_reserve(&s->items, n);
    pthread_rwlock_unlock(&s->lock);
    write_end(s);
    return e;
}

kinf_err kinf_store_delete(kinf_store *s, const char *key, size_t len, kinf_object **old_out)
{
    kinf_err e = write_begin(s);
    item *it;

    if (old_out)
        *old_out = NULL;
    if (e != KINF_OK)
        return e;
    pthread_rwlock_wrlock(&s->lock);
    it = kinf_map_remove(&s->items, key, len);
    if (it != NULL) {
        uint64_t version = next_version(s);
        for (size_t i = 0; i < s->nindexers; i++) {
            kinf_values_view view;
            kinf_indexer_commit_locked(s->indexers[i], it->key, it->key_len, it->hash, it,
                                       kinf_item_values(s, it, i, &view), NULL, version);
        }
        publish_version_locked(s, version);
    }
    pthread_rwlock_unlock(&s->lock);
    write_end(s);
    if (it != NULL) {
        if (old_out) {
            *old_out = it->obj;
            it->obj = NULL;
        }
        item_free(it);
    }
    return KINF_OK;
}

/* Builds, with no lock held, complete items and bucket maps for objs; on success the caller
 * swaps them in. Index values come from the store's indexers (write_mu held). */
static kinf_err build_content(kinf_store *s, kinf_object *const *objs, size_t n, kinf_map *items,
                              kinf_map *buckets, uint64_t version, int *failed, char *msg,
                              size_t msglen)
{
    size_t nix = s->nindexers, nv = values_len(s, nix);
    kinf_map_slot *sl;
    kinf_err e;

    kinf_map_init(items);
    for (size_t i = 0; i < nix; i++)
        kinf_map_init(&buckets[i]);
    if ((e = kinf_map_reserve(items, n)) != KINF_OK)
        return e;
    for (size_t k = 0; k < n; k++) {
        kinf_object *obj = objs[k];
        item *it, *prev;

        if (obj == NULL || kinf_object_is_tombstone(obj))
            return KINF_EINVAL;
        it = malloc(sizeof(*it) + obj->key_len + 1);
        if (it == NULL)
            return KINF_ENOMEM;
        memcpy(it->key, obj->key, obj->key_len + 1);
        it->key_len = obj->key_len;
        it->hash = obj->hash;
        it->obj = kinf_object_ref(obj);
        it->nvalues = 0;
        it->values = NULL;
        if (nv > 0) { /* the namespace index's values are read from the record */
            if ((it->values = calloc(nv, sizeof(*it->values))) == NULL) {
                item_free(it);
                return KINF_ENOMEM;
            }
            it->nvalues = nv;
            for (size_t i = 0; i < nv; i++) {
                kinf_indexer *ix = s->indexers[i];
                if (ix->builtin_ns)
                    continue;
                e = kinf_indexer_compute(ix, ix->fn, ix->ud, obj, &it->values[i], failed, msg,
                                         msglen);
                if (e != KINF_OK) {
                    item_free(it);
                    return e;
                }
            }
        }
        prev = kinf_map_get_h(items, it->key, it->key_len, it->hash);
        (void)kinf_map_put_h(items, it->key, it->key_len, it->hash, it); /* reserved above */
        item_free(prev);                                     /* a later duplicate wins */
    }
    for (size_t i = 0; i < nix; i++) {
        kinf_indexer tmp = *s->indexers[i];
        tmp.buckets = buckets[i];
        for (size_t j = 0; (sl = kinf_map_next(items, &j)) != NULL;) {
            item *it = sl->value;
            kinf_values_view view;
            const kinf_values *vals = kinf_item_values(s, it, i, &view);
            if ((e = kinf_indexer_prepare_locked(&tmp, vals)) != KINF_OK) {
                buckets[i] = tmp.buckets;
                return e;
            }
            kinf_indexer_commit_locked(&tmp, it->key, it->key_len, it->hash, it, NULL, vals,
                                       version);
        }
        buckets[i] = tmp.buckets;
    }
    return KINF_OK;
}

kinf_err kinf_store_replace(kinf_store *s, kinf_object *const *objs, size_t n, char *errbuf,
                            size_t errlen)
{
    kinf_map items, *buckets;
    char msg[256] = "";
    int failed = 0;
    size_t nix;
    kinf_err e = write_begin(s);

    if (e != KINF_OK)
        return e;
    nix = s->nindexers;
    buckets = calloc(nix ? nix : 1, sizeof(*buckets));
    if (buckets == NULL) {
        write_end(s);
        return KINF_ENOMEM;
    }
    e = build_content(s, objs, n, &items, buckets, next_version(s), &failed, msg, sizeof(msg));
    if (e == KINF_OK) {
        /* Swap: the old content ends up in items/buckets and is freed below, unlocked. */
        kinf_map tmp;
        pthread_rwlock_wrlock(&s->lock);
        tmp = s->items;
        s->items = items;
        items = tmp;
        for (size_t i = 0; i < nix; i++) {
            tmp = s->indexers[i]->buckets;
            s->indexers[i]->buckets = buckets[i];
            buckets[i] = tmp;
        }
        publish_version_locked(s, next_version(s));
        note_index_failure_locked(s, failed, msg);
        pthread_rwlock_unlock(&s->lock);
    }
    write_end(s);
    items_free(&items);
    for (size_t i = 0; i < nix; i++)
        kinf_indexer_buckets_free(&buckets[i]);
    free(buckets);
    if (e == KINF_OK && failed) {
        kinf_errmsg(errbuf, errlen, "%s", msg);
        return KINF_EINDEX;
    }
    return e;
}

kinf_err kinf_store_add_indexers(kinf_store *s, const kinf_indexer_def *defs, size_t n,
                                 char *errbuf, size_t errlen)
{
    kinf_indexer **fresh = NULL;
    size_t n_owned = 0;         /* fresh[0..n_owned) were handed to the store */
    kinf_values ***vals = NULL; /* vals[item#][new indexer#] */
    item **items = NULL;
    size_t nitems = 0, old_n;
    char msg[256] = "";
    int failed = 0;
    kinf_map_slot *sl;
    kinf_err e = write_begin(s);

    if (e != KINF_OK)
        return e;
    old_n = s->nindexers;
    for (size_t i = 0; i < n; i++) {
        int clash = 0;
        if (defs[i].name == NULL) {
            write_end(s);
            return KINF_EINVAL;
        }
        for (size_t j = 0; j < old_n; j++)
            clash |= strcmp(s->indexers[j]->name, defs[i].name) == 0;
        for (size_t j = 0; j < i; j++)
            clash |= strcmp(defs[j].name, defs[i].name) == 0;
        if (clash) {
            kinf_errmsg(errbuf, errlen, "indexer conflict: %s", defs[i].name);
            write_end(s);
            return KINF_EEXIST;
        }
    }
    if (n == 0) {
        write_end(s);
        return KINF_OK;
    }
    e = KINF_ENOMEM;
    fresh = calloc(n, sizeof(*fresh));
    items = calloc(s->items.count ? s->items.count : 1, sizeof(*items));
    vals = calloc(s->items.count ? s->items.count : 1, sizeof(*vals));
    if (fresh == NULL || items == NULL || vals == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if ((fresh[i] = kinf_indexer_new(&defs[i])) == NULL)
            goto out;
    }
    /* Only writers change items, and we are the writer: iterating without the data lock is safe. */
    for (size_t j = 0; (sl = kinf_map_next(&s->items, &j)) != NULL;) {
        item *it = sl->value;
        items[nitems] = it;
        if ((vals[nitems] = calloc(n, sizeof(**vals))) == NULL)
            goto out;
        nitems++;
        for (size_t i = 0; i < n; i++) {
            e = kinf_indexer_compute(fresh[i], fresh[i]->fn, fresh[i]->ud, it->obj, &vals[nitems - 1][i],
                               &failed, msg, sizeof(msg));
            if (e != KINF_OK)
                goto out;
        }
        e = KINF_ENOMEM;
    }
    /* Build the new indexers' buckets (not yet visible) and grow every item's values array. */
    for (size_t k = 0; k < nitems; k++) {
        item *it = items[k];
        kinf_values **grown;
        for (size_t i = 0; i < n; i++) {
            if (kinf_indexer_prepare_locked(fresh[i], vals[k][i]) != KINF_OK)
                goto out;
            kinf_indexer_commit_locked(fresh[i], it->key, it->key_len, it->hash, it, NULL,
                                       vals[k][i], next_version(s));
        }
        grown = realloc(it->values, (old_n + n) * sizeof(*grown));
        if (grown == NULL)
            goto out;
        for (size_t i = it->nvalues; i < old_n; i++)
            grown[i] = NULL;
        it->values = grown;
        if (it->nvalues < old_n)
            it->nvalues = old_n; /* the slots in between are NULL: "no values" */
    }
    if (old_n + n > s->cap_indexers) {
        kinf_indexer **arr = realloc(s->indexers, (old_n + n) * sizeof(*arr));
        if (arr == NULL)
            goto out;
        s->indexers = arr; /* readers index with nindexers, which has not changed yet */
        s->cap_indexers = old_n + n;
    }
    pthread_rwlock_wrlock(&s->lock);
    for (size_t i = 0; i < n; i++)
        s->indexers[old_n + i] = fresh[i];
    s->nindexers = old_n + n;
    publish_version_locked(s, next_version(s));
    for (size_t k = 0; k < nitems; k++) {
        for (size_t i = 0; i < n; i++) {
            if (fresh[i]->builtin_ns) { /* read from the record */
                kinf_values_free(vals[k][i]);
                vals[k][i] = NULL;
            }
            items[k]->values[old_n + i] = vals[k][i];
        }
        items[k]->nvalues = old_n + n;
        free(vals[k]);
        vals[k] = NULL;
    }
    note_index_failure_locked(s, failed, msg);
    pthread_rwlock_unlock(&s->lock);
    n_owned = n; /* the indexers belong to the store now; only the array is ours */
    e = failed ? KINF_EINDEX : KINF_OK;
    if (failed)
        kinf_errmsg(errbuf, errlen, "%s", msg);
out:
    if (vals != NULL) {
        for (size_t k = 0; k < nitems; k++) {
            if (vals[k] == NULL)
                continue;
            for (size_t i = 0; i < n; i++)
                kinf_values_free(vals[k][i]);
            free(vals[k]);
        }
    }
    if (fresh != NULL) {
        for (size_t i = n_owned; i < n; i++)
            kinf_indexer_free(fresh[i]);
    }
    free(fresh);
    free(vals);
    free(items);
    write_end(s);
    return e;
}

void kinf_store_detach_index_functions(kinf_store *s)
{
    /* Taking write_mu waits for a write in progress, whose index function may be running. */
    int rc = pthread_mutex_lock(&s->write_mu);
    for (size_t i = 0; i < s->nindexers; i++) {
        s->indexers[i]->fn = NULL;
        s->indexers[i]->ud = NULL;
    }
    if (rc == 0)
        pthread_mutex_unlock(&s->write_mu);
}

/* ---- a record swapped for an equal one ---- */

kinf_err kinf_store_swap_record(kinf_store *s, kinf_object *obj, kinf_object **old_out)
{
    kinf_err e = write_begin(s);
    item *it;

    *old_out = NULL;
    if (e != KINF_OK)
        return e;
    pthread_rwlock_wrlock(&s->lock);
    it = kinf_map_get_h(&s->items, obj->key, obj->key_len, obj->hash);
    if (it == NULL || strcmp(it->obj->resource_version, obj->resource_version) != 0) {
        e = KINF_ENOTFOUND;
    } else {
        *old_out = it->obj;
        it->obj = kinf_object_ref(obj);
        /* The same object: what readers cached for the key stays right, no version moves. */
    }
    pthread_rwlock_unlock(&s->lock);
    write_end(s);
    return e;
}
