/*
 * store_impl.h - the store's layout, shared by store.c (writes), store_read.c (reads) and
 * store_select.c (filtered reads). Nothing else includes it; the contract is store.h.
 * Field annotations name the lock that guards each field (`lock` = the data rwlock).
 */
#ifndef KINF_STORE_IMPL_H
#define KINF_STORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "index.h"
#include "map.h"
#include "store.h"

typedef struct item {
    kinf_object *obj;      /* [lock] one reference */
    /* [write_mu] the values each indexer filed it under (NULL = none), nvalues of them (fewer
     * than the indexers when later ones came since; none while no indexer needs them). The
     * namespace index keeps none here: its value is the record's namespace, which the key fixes. */
    kinf_values **values;
    size_t nvalues;        /* [write_mu] */
    uint32_t key_len;
    uint32_t hash;         /* kinf_key_hash of key */
    char key[];
} item;

struct kinf_store {
    atomic_long refs;
    pthread_mutex_t write_mu; /* error-checking: a re-entrant lock reports EDEADLK */
    pthread_rwlock_t lock;
    _Atomic uint64_t version;   /* written under write_mu + lock; read with neither */
    kinf_map items;             /* [lock] */
    kinf_indexer **indexers;    /* [lock]; changed only with write_mu held too */
    size_t nindexers, cap_indexers;
    unsigned long index_errors; /* [lock] */
    char last_index_error[256]; /* [lock] */
};

/* Room for a one-value kinf_values on the caller's stack. */
typedef union kinf_values_view {
    kinf_values vals;
    unsigned char room[sizeof(kinf_values) + sizeof(kinf_str)];
} kinf_values_view;

/* The values indexer i filed it under (NULL: none, or no item). The namespace index's are not
 * stored: they are read from the item's record into view. Caller holds write_mu. */
static inline const kinf_values *kinf_item_values(const kinf_store *s, const item *it,
                                                  size_t i, kinf_values_view *view)
{
    if (it == NULL)
        return NULL;
    if (s->indexers[i]->builtin_ns) {
        if (it->obj == NULL)
            return NULL; /* a new item, not filed yet */
        view->vals.n = 1;
        view->vals.v[0].ptr = it->obj->namespace_;
        view->vals.v[0].len = strlen(it->obj->namespace_);
        return &view->vals;
    }
    return i < it->nvalues ? it->values[i] : NULL;
}

/* The indexer called name, or NULL. Caller holds the data lock. */
kinf_indexer *kinf_store_find_indexer_locked(kinf_store *s, const char *name);

#endif
