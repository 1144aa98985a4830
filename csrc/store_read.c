/*
 * store_read.c - the store's reads (contract in store.h): get, list, reads by index, the values
 * of an index and of an item, the version counters and the index errors. Each takes the data
 * lock for reading (kinf_store_item_values also write_mu, as it reads item values), copies what
 * it returns (references to records, fresh arrays and values) and never blocks a reader.
 * Filtered reads (namespace, indexes, label selectors) are in store_select.c.
 */
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "map.h"
#include "store_impl.h"

kinf_object *kinf_store_get(kinf_store *s, const char *key, size_t len)
{
    kinf_object *obj = NULL;
    item *it;
    pthread_rwlock_rdlock(&s->lock);
    it = kinf_map_get(&s->items, key, len);
    if (it != NULL)
        obj = kinf_object_ref(it->obj);
    pthread_rwlock_unlock(&s->lock);
    return obj;
}

uint64_t kinf_store_version(kinf_store *s)
{
    return atomic_load_explicit(&s->version, memory_order_acquire);
}

kinf_err kinf_store_index_version(kinf_store *s, const char *index, const char *value, size_t len,
                                  uint64_t *out)
{
    kinf_indexer *ix;
    pthread_rwlock_rdlock(&s->lock);
    ix = kinf_store_find_indexer_locked(s, index);
    *out = ix ? kinf_indexer_version_locked(ix, value, len) : 0;
    pthread_rwlock_unlock(&s->lock);
    return ix ? KINF_OK : KINF_ENOTFOUND;
}

size_t kinf_store_len(kinf_store *s)
{
    size_t n;
    pthread_rwlock_rdlock(&s->lock);
    n = s->items.count;
    pthread_rwlock_unlock(&s->lock);
    return n;
}

/* Copies the objects of a key -> item map into a new array of references. */
static kinf_err collect_locked(const kinf_map *m, kinf_object ***out, size_t *n)
{
    kinf_map_slot *sl;
    size_t k = 0;
    kinf_object **arr = malloc((m->count ? m->count : 1) * sizeof(*arr));
    if (arr == NULL)
        return KINF_ENOMEM;
    /* Stops at the last entry: a map reserved for a list is mostly empty slots before it fills. */
    for (size_t i = 0; k < m->count && (sl = kinf_map_next(m, &i)) != NULL;)
        arr[k++] = kinf_object_ref(((item *)sl->value)->obj);
    *out = arr;
    *n = k;
    return KINF_OK;
}

kinf_err kinf_store_list(kinf_store *s, kinf_object ***out, size_t *n)
{
    kinf_err e;
    pthread_rwlock_rdlock(&s->lock);
    e = collect_locked(&s->items, out, n);
    pthread_rwlock_unlock(&s->lock);
    return e;
}

kinf_indexer *kinf_store_find_indexer_locked(kinf_store *s, const char *name)
{
    for (size_t i = 0; i < s->nindexers; i++) {
        if (strcmp(s->indexers[i]->name, name) == 0)
            return s->indexers[i];
    }
    return NULL;
}

int kinf_store_has_index(kinf_store *s, const char *index)
{
    int has;
    pthread_rwlock_rdlock(&s->lock);
    has = kinf_store_find_indexer_locked(s, index) != NULL;
    pthread_rwlock_unlock(&s->lock);
    return has;
}

kinf_err kinf_store_by_index(kinf_store *s, const char *index, const char *value, size_t len,
                             kinf_object ***out, size_t *n)
{
    static const kinf_map empty;
    const kinf_map *keys;
    kinf_indexer *ix;
    kinf_err e;

    pthread_rwlock_rdlock(&s->lock);
    ix = kinf_store_find_indexer_locked(s, index);
    if (ix == NULL) {
        pthread_rwlock_unlock(&s->lock);
        return KINF_ENOTFOUND;
    }
    keys = kinf_indexer_keys_locked(ix, value, len);
    e = collect_locked(keys ? keys : &empty, out, n);
    pthread_rwlock_unlock(&s->lock);
    return e;
}

static int by_key(const void *a, const void *b)
{
    const kinf_object *x = *(kinf_object *const *)a, *y = *(kinf_object *const *)b;
    return strcmp(x->key, y->key);
}

kinf_err kinf_store_index_keys(kinf_store *s, const char *index, const char *value, size_t len,
                               kinf_object ***out, size_t *n)
{
    kinf_err e = kinf_store_by_index(s, index, value, len, out, n);
    if (e == KINF_OK && *n > 1)
        qsort(*out, *n, sizeof(**out), by_key);
    return e;
}

kinf_err kinf_store_index(kinf_store *s, const char *index, kinf_object *obj, kinf_object ***out,
                          size_t *n, char *errbuf, size_t errlen)
{
    kinf_values *vals = NULL;
    kinf_index_fn fn;
    void *ud;
    kinf_indexer *ix;
    int failed = 0;
    kinf_map seen;
    kinf_object **arr = NULL;
    size_t k = 0, cap = 0;
    kinf_err e;

    pthread_rwlock_rdlock(&s->lock);
    ix = kinf_store_find_indexer_locked(s, index);
    fn = ix ? ix->fn : NULL;
    ud = ix ? ix->ud : NULL;
    pthread_rwlock_unlock(&s->lock);
    if (ix == NULL)
        return KINF_ENOTFOUND;
    if (obj == NULL || kinf_object_is_tombstone(obj))
        return KINF_EINVAL;
    /* Indexers are never freed before the store, so ix stays valid unlocked. */
    e = kinf_indexer_compute(ix, fn, ud, obj, &vals, &failed, errbuf, errlen);
    if (e != KINF_OK)
        return e;
    if (failed)
        return KINF_EINDEX;
    kinf_map_init(&seen);
    pthread_rwlock_rdlock(&s->lock);
    for (size_t i = 0; vals != NULL && i < vals->n && e == KINF_OK; i++) {
        const kinf_map *keys = kinf_indexer_keys_locked(ix, vals->v[i].ptr, vals->v[i].len);
        kinf_map_slot *sl;
        if (keys == NULL)
            continue;
        for (size_t j = 0; (sl = kinf_map_next(keys, &j)) != NULL;) {
            item *it = sl->value;
            if (kinf_map_get(&seen, it->key, it->key_len) != NULL)
                continue;
            if (k == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                kinf_object **grown = realloc(arr, ncap * sizeof(*grown));
                if (grown == NULL) {
                    e = KINF_ENOMEM;
                    break;
                }
                arr = grown;
                cap = ncap;
            }
            if (kinf_map_put(&seen, it->key, it->key_len, it) != KINF_OK) {
                e = KINF_ENOMEM;
                break;
            }
            arr[k++] = kinf_object_ref(it->obj);
        }
    }
    pthread_rwlock_unlock(&s->lock);
    kinf_map_free(&seen);
    kinf_values_free(vals);
    if (e != KINF_OK) {
        kinf_objects_free(arr, k);
        return e;
    }
    if (arr == NULL && (arr = malloc(sizeof(*arr))) == NULL)
        return KINF_ENOMEM;
    *out = arr;
    *n = k;
    return KINF_OK;
}

kinf_err kinf_store_index_values(kinf_store *s, const char *index, kinf_values **out)
{
    kinf_indexer *ix;
    kinf_err e = KINF_OK;

    *out = NULL;
    pthread_rwlock_rdlock(&s->lock);
    ix = kinf_store_find_indexer_locked(s, index);
    if (ix != NULL) /* an unknown index has no values (client-go's ListIndexFuncValues) */
        e = kinf_indexer_values_locked(ix, out);
    pthread_rwlock_unlock(&s->lock);
    return e;
}

size_t kinf_store_index_count(kinf_store *s)
{
    size_t n;
    pthread_rwlock_rdlock(&s->lock);
    n = s->nindexers;
    pthread_rwlock_unlock(&s->lock);
    return n;
}

const char *kinf_store_index_name(kinf_store *s, size_t i)
{
    const char *name = NULL;
    pthread_rwlock_rdlock(&s->lock);
    if (i < s->nindexers)
        name = s->indexers[i]->name; /* indexers live as long as the store */
    pthread_rwlock_unlock(&s->lock);
    return name;
}

kinf_err kinf_store_item_values(kinf_store *s, const char *key, size_t len, kinf_values **out,
                                size_t n)
{
    kinf_err e = KINF_OK;
    item *it;

    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    /* item->values are written under write_mu; the writer is the caller's thread or waits. */
    if (pthread_mutex_lock(&s->write_mu) != 0)
        return KINF_EBUSY;
    pthread_rwlock_rdlock(&s->lock);
    it = kinf_map_get(&s->items, key, len);
    if (it == NULL)
        e = KINF_ENOTFOUND;
    for (size_t i = 0; it != NULL && i < n && i < s->nindexers && e == KINF_OK; i++) {
        kinf_values_view view;
        const kinf_values *v = kinf_item_values(s, it, i, &view);
        if (v != NULL && (out[i] = kinf_values_new(v->v, v->n)) == NULL)
            e = KINF_ENOMEM;
    }
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_unlock(&s->write_mu);
    if (e != KINF_OK) {
        for (size_t i = 0; i < n; i++) {
            kinf_values_free(out[i]);
            out[i] = NULL;
        }
    }
    return e;
}

unsigned long kinf_store_index_errors(kinf_store *s, char *buf, size_t len)
{
    unsigned long n;
    pthread_rwlock_rdlock(&s->lock);
    n = s->index_errors;
    kinf_errmsg(buf, len, "%s", s->last_index_error);
    pthread_rwlock_unlock(&s->lock);
    return n;
}
