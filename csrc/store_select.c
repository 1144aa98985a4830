/*
 * store_select.c - filtered reads of the store (contract in store.h, kinf_store_select; the
 * layout in store_impl.h).
 *
 * Narrowing intersects key sets the indexes already hold: every index bucket maps key -> item,
 * like the store's own item map, so checking a candidate against another set is one hash lookup
 * and the walk is as long as the smallest set. Everything runs under the read lock, which
 * writers wait for; the caller's filter decides how long that is (label matching: well under a
 * microsecond per candidate).
 */
#include <stdlib.h>
#include <string.h>

#include "store_impl.h"

#define STACK_SETS 8

/* Candidates are scattered allocations (an item, then its record), so a walk that reads each
 * record is bound by cache misses, not by the filter. Two iterators run ahead of it: the
 * farther one prefetches items, the nearer one (whose items have arrived) their records: the
 * header and the first lines of JSON, where metadata sits. */
#define AHEAD_ITEM 16
#define AHEAD_RECORD 8
#define RECORD_LINES 4

static void prefetch_item(const kinf_map *m, size_t *i)
{
    kinf_map_slot *sl = kinf_map_next(m, i);
    if (sl != NULL)
        __builtin_prefetch(sl->value);
}

static void prefetch_record(const kinf_map *m, size_t *i)
{
    kinf_map_slot *sl = kinf_map_next(m, i);
    if (sl != NULL) {
        const char *rec = (const char *)((const item *)sl->value)->obj;
        for (int l = 0; l < RECORD_LINES; l++)
            __builtin_prefetch(rec + 64 * l);
    }
}

/* Whether obj is in namespace ns (ns.len > 0). */
static int in_namespace(const kinf_object *obj, const kinf_str *ns)
{
    return strlen(obj->namespace_) == ns->len && memcmp(obj->namespace_, ns->ptr, ns->len) == 0;
}

kinf_err kinf_store_select(kinf_store *s, const kinf_store_query *q, kinf_object ***out,
                           size_t *n, size_t *bad_match)
{
    static const kinf_map empty;
    const kinf_map *stack_sets[STACK_SETS], **sets = stack_sets, *walk;
    size_t nsets = 0, pick = 0, k = 0, item_ahead = 0, record_ahead = 0;
    int by_namespace = q->namespace_.ptr != NULL && q->namespace_.len > 0;
    int ns_by_record = 0;
    kinf_object **arr;
    kinf_map_slot *sl;

    *out = NULL;
    *n = 0;
    if (q->nmatches + 1 > STACK_SETS &&
        (sets = malloc((q->nmatches + 1) * sizeof(*sets))) == NULL)
        return KINF_ENOMEM;
    pthread_rwlock_rdlock(&s->lock);
    for (size_t i = 0; i < q->nmatches; i++) {
        const kinf_index_match *m = &q->matches[i];
        kinf_indexer *ix = kinf_store_find_indexer_locked(s, m->index);
        const kinf_map *keys;
        if (ix == NULL) {
            pthread_rwlock_unlock(&s->lock);
            if (sets != stack_sets)
                free(sets);
            if (bad_match != NULL)
                *bad_match = i;
            return KINF_ENOTFOUND;
        }
        keys = kinf_indexer_keys_locked(ix, m->value.ptr, m->value.len);
        sets[nsets++] = keys ? keys : &empty;
    }
    if (by_namespace) {
        kinf_indexer *ix = kinf_store_find_indexer_locked(s, KINF_NAMESPACE_INDEX);
        if (ix != NULL && ix->builtin_ns) {
            const kinf_map *keys = kinf_indexer_keys_locked(ix, q->namespace_.ptr, q->namespace_.len);
            sets[nsets++] = keys ? keys : &empty;
        } else {
            ns_by_record = 1; /* no built-in index (or a user's own "namespace" index) */
        }
    }
    for (size_t i = 1; i < nsets; i++) {
        if (sets[i]->count < sets[pick]->count)
            pick = i;
    }
    walk = nsets ? sets[pick] : &s->items;
    arr = malloc((walk->count ? walk->count : 1) * sizeof(*arr));
    if (arr == NULL) {
        pthread_rwlock_unlock(&s->lock);
        if (sets != stack_sets)
            free(sets);
        return KINF_ENOMEM;
    }
    if (q->filter != NULL) {
        for (int d = 0; d < AHEAD_ITEM; d++)
            prefetch_item(walk, &item_ahead);
        for (int d = 0; d < AHEAD_RECORD; d++)
            prefetch_record(walk, &record_ahead);
    }
    for (size_t i = 0; (sl = kinf_map_next(walk, &i)) != NULL;) {
        const item *it = sl->value;
        size_t j;
        if (q->filter != NULL) {
            prefetch_item(walk, &item_ahead);
            prefetch_record(walk, &record_ahead);
        }
        for (j = 0; j < nsets; j++) {
            if (j != pick && kinf_map_get(sets[j], it->key, it->key_len) == NULL)
                break;
        }
        if (j < nsets || (ns_by_record && !in_namespace(it->obj, &q->namespace_)) ||
            (q->filter != NULL && !q->filter(q->ud, it->obj)))
            continue;
        arr[k++] = kinf_object_ref(it->obj);
    }
    pthread_rwlock_unlock(&s->lock);
    if (sets != stack_sets)
        free(sets);
    *out = arr;
    *n = k;
    return KINF_OK;
}
