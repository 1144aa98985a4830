/*
 * index.c - one index of the store: value -> bucket of keys, and the value sets index functions
 * return (contract in index.h).
 */
#include "index.h"

#include <stdlib.h>
#include <string.h>

/* ---- values ---- */

kinf_values *kinf_values_new(const kinf_str *vals, size_t n)
{
    size_t bytes = 0;
    kinf_values *out;
    char *cur;

    for (size_t i = 0; i < n; i++)
        bytes += vals[i].len + 1;
    out = malloc(sizeof(*out) + n * sizeof(kinf_str) + bytes);
    if (out == NULL)
        return NULL;
    out->n = n;
    cur = (char *)&out->v[n];
    for (size_t i = 0; i < n; i++) {
        if (vals[i].len)
            memcpy(cur, vals[i].ptr, vals[i].len);
        cur[vals[i].len] = '\0';
        out->v[i].ptr = cur;
        out->v[i].len = vals[i].len;
        cur += vals[i].len + 1;
    }
    return out;
}

void kinf_values_free(kinf_values *vals)
{
    free(vals);
}

/* ---- indexers ---- */

void kinf_indexer_buckets_free(kinf_map *buckets)
{
    kinf_map_slot *sl;
    for (size_t i = 0; (sl = kinf_map_next(buckets, &i)) != NULL;) {
        kinf_bucket *b = sl->value;
        kinf_map_free(&b->keys);
        free(b);
    }
    kinf_map_free(buckets);
}

kinf_indexer *kinf_indexer_new(const kinf_indexer_def *def)
{
    size_t len = strlen(def->name);
    kinf_indexer *ix = malloc(sizeof(*ix) + len + 1);
    if (ix == NULL)
        return NULL;
    memcpy(ix->name, def->name, len + 1);
    ix->fn = def->fn;
    ix->ud = def->ud;
    ix->builtin_ns = def->fn == NULL;
    kinf_map_init(&ix->buckets);
    return ix;
}

void kinf_indexer_free(kinf_indexer *ix)
{
    if (ix == NULL)
        return;
    kinf_indexer_buckets_free(&ix->buckets);
    free(ix);
}

kinf_err kinf_indexer_compute(kinf_indexer *ix, kinf_index_fn fn, void *ud, kinf_object *obj,
                              kinf_values **out, int *failed, char *errbuf, size_t errlen)
{
    char msg[200];
    kinf_err e;

    *out = NULL;
    if (ix->builtin_ns) {
        kinf_str v = {obj->namespace_, strlen(obj->namespace_)};
        *out = kinf_values_new(&v, 1);
        return *out ? KINF_OK : KINF_ENOMEM;
    }
    if (fn == NULL)
        return KINF_OK;
    msg[0] = '\0';
    e = fn(ud, obj, out, msg, sizeof(msg));
    if (e == KINF_OK)
        return KINF_OK;
    *out = NULL;
    if (e == KINF_ENOMEM)
        return e;
    if (!*failed)
        kinf_errmsg(errbuf, errlen, "index '%s' failed for %s: %s", ix->name, obj->key,
                    msg[0] ? msg : kinf_strerror(e));
    (*failed)++;
    return KINF_OK;
}

kinf_err kinf_indexer_prepare_locked(kinf_indexer *ix, const kinf_values *vals)
{
    if (vals == NULL)
        return KINF_OK;
    for (size_t i = 0; i < vals->n; i++) {
        kinf_bucket *b = kinf_map_get(&ix->buckets, vals->v[i].ptr, vals->v[i].len);
        if (b == NULL) {
            b = malloc(sizeof(*b) + vals->v[i].len + 1);
            if (b == NULL)
                return KINF_ENOMEM;
            memcpy(b->value, vals->v[i].ptr, vals->v[i].len + 1);
            b->len = vals->v[i].len;
            b->version = 0; /* stamped by the commit that puts its first key */
            kinf_map_init(&b->keys);
            if (kinf_map_put(&ix->buckets, b->value, b->len, b) != KINF_OK) {
                free(b);
                return KINF_ENOMEM;
            }
        }
        if (kinf_map_reserve(&b->keys, b->keys.count + 1) != KINF_OK)
            return KINF_ENOMEM;
    }
    return KINF_OK;
}

static void drop_key_locked(kinf_indexer *ix, const kinf_str *value, const char *key,
                            size_t key_len, uint32_t hash, uint64_t version)
{
    kinf_bucket *b = kinf_map_get(&ix->buckets, value->ptr, value->len);
    if (b == NULL)
        return;
    kinf_map_remove_h(&b->keys, key, key_len, hash);
    b->version = version;
    if (b->keys.count == 0) {
        kinf_map_remove(&ix->buckets, b->value, b->len);
        kinf_map_free(&b->keys);
        free(b);
    }
}

void kinf_indexer_sweep_locked(kinf_indexer *ix, const kinf_values *vals)
{
    if (vals == NULL)
        return;
    for (size_t i = 0; i < vals->n; i++) {
        kinf_bucket *b = kinf_map_get(&ix->buckets, vals->v[i].ptr, vals->v[i].len);
        if (b != NULL && b->keys.count == 0) {
            kinf_map_remove(&ix->buckets, b->value, b->len);
            kinf_map_free(&b->keys);
            free(b);
        }
    }
}

void kinf_indexer_commit_locked(kinf_indexer *ix, const char *key, size_t key_len, uint32_t hash,
                                void *item, const kinf_values *old, const kinf_values *new_,
                                uint64_t version)
{
    if (old != NULL) {
        for (size_t i = 0; i < old->n; i++) {
            if (!kinf_values_have(new_, &old->v[i]))
                drop_key_locked(ix, &old->v[i], key, key_len, hash, version);
        }
    }
    if (new_ != NULL) {
        for (size_t i = 0; i < new_->n; i++) {
            kinf_bucket *b = kinf_map_get(&ix->buckets, new_->v[i].ptr, new_->v[i].len);
            /* Room was reserved by prepare: put cannot fail here. */
            (void)kinf_map_put_h(&b->keys, key, key_len, hash, item);
            b->version = version;
        }
    }
}

void kinf_indexer_touch_locked(kinf_indexer *ix, const kinf_values *vals, uint64_t version)
{
    for (size_t i = 0; vals != NULL && i < vals->n; i++) {
        kinf_bucket *b = kinf_map_get(&ix->buckets, vals->v[i].ptr, vals->v[i].len);
        if (b != NULL)
            b->version = version;
    }
}

const kinf_map *kinf_indexer_keys_locked(const kinf_indexer *ix, const char *value, size_t len)
{
    const kinf_bucket *b = kinf_map_get(&ix->buckets, value, len);
    return b ? &b->keys : NULL;
}

uint64_t kinf_indexer_version_locked(const kinf_indexer *ix, const char *value, size_t len)
{
    const kinf_bucket *b = kinf_map_get(&ix->buckets, value, len);
    return b ? b->version : 0;
}

kinf_err kinf_indexer_values_locked(const kinf_indexer *ix, kinf_values **out)
{
    kinf_str *list;
    kinf_map_slot *sl;
    size_t k = 0;

    *out = NULL;
    if (ix->buckets.count == 0)
        return KINF_OK;
    list = malloc(ix->buckets.count * sizeof(*list));
    if (list == NULL)
        return KINF_ENOMEM;
    for (size_t i = 0; (sl = kinf_map_next(&ix->buckets, &i)) != NULL;) {
        const kinf_bucket *b = sl->value;
        list[k].ptr = b->value;
        list[k].len = b->len;
        k++;
    }
    *out = kinf_values_new(list, k);
    free(list);
    return *out ? KINF_OK : KINF_ENOMEM;
}
