/*
 * store_impl.h - the store's layout, shared by store.c (writes and plain reads) and
 * store_select.c (filtered reads). Nothing else includes it; the contract is store.h.
 * Field annotations name the lock that guards each field (`lock` = the data rwlock).
 */
#ifndef KINF_STORE_IMPL_H
#define KINF_STORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

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
    size_t key_len;
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

/* The indexer called name, or NULL. Caller holds the data lock. */
kinf_indexer *kinf_store_find_indexer_locked(kinf_store *s, const char *name);

#endif
