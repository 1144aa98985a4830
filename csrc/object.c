/* object.c - reference-counted object records and keys (contract in object.h). */
#include "object.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grow_ahead.h"
#include "map.h"

/* Appends s (len bytes) plus a NUL at *cur and returns where it starts. */
static const char *put(char **cur, const char *s, size_t len)
{
    char *start = *cur;
    if (len)
        memcpy(start, s, len);
    start[len] = '\0';
    *cur = start + len + 1;
    return start;
}

/* Copies the metadata strings and the key (namespace/name) to cur, in that order. */
static void put_meta(kinf_object *obj, char *cur, const kinf_meta *meta, size_t key_len)
{
    const kinf_str *ns = &meta->namespace_;
    obj->namespace_ = put(&cur, ns->ptr, ns->len);
    obj->name = put(&cur, meta->name.ptr, meta->name.len);
    obj->uid = put(&cur, meta->uid.ptr, meta->uid.len);
    obj->resource_version = put(&cur, meta->resource_version.ptr, meta->resource_version.len);
    obj->key = cur;
    if (ns->len) {
        memcpy(cur, ns->ptr, ns->len);
        cur[ns->len] = '/';
        cur += ns->len + 1;
    }
    memcpy(cur, meta->name.ptr, meta->name.len);
    cur[meta->name.len] = '\0';
    obj->key_len = (uint32_t)key_len; /* bounded by kinf_object_new */
    obj->hash = kinf_key_hash(obj->key, key_len);
}

kinf_object *kinf_object_new(const char *json, size_t json_len, const kinf_meta *meta,
                             kinf_err *err)
{
    const kinf_str *ns = &meta->namespace_;
    size_t key_len, size;
    kinf_object *obj;
    char *cur;

    if (meta->name.len == 0 || (json == NULL && json_len > 0)) {
        *err = KINF_ENOKEY;
        return NULL;
    }
    key_len = (ns->len ? ns->len + 1 : 0) + meta->name.len;
    if (key_len > UINT32_MAX) {
        *err = KINF_ETOOBIG;
        return NULL;
    }
    /* Every piece is bounded by the buffers it was copied from; only their
     * sum can overflow, and only on absurd inputs: check it anyway. */
    size = sizeof(*obj) + json_len + 1 + ns->len + 1 + meta->name.len + 1 + meta->uid.len + 1 +
           meta->resource_version.len + 1 + key_len + 1;
    if (size < json_len) {
        *err = KINF_ETOOBIG;
        return NULL;
    }
    kinf_grow_ahead(size);
    obj = malloc(size);
    if (obj == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    atomic_init(&obj->refs, 1);
    obj->flags = 0;
    atomic_init(&obj->labels_at, 0);
    obj->inner = NULL;
    cur = (char *)(obj + 1);
    obj->json = put(&cur, json, json_len);
    obj->json_len = json_len;
    put_meta(obj, cur, meta, key_len);
    *err = KINF_OK;
    return obj;
}

/* A borrowed record's allocation: the record, then what to call when it goes. */
typedef struct borrowed {
    kinf_object obj;
    void (*release)(void *ud, const kinf_object *obj);
    void *ud;
} borrowed;

/* Whether the span is followed by a NUL (a C string of its own length). */
static int nul_ended(const kinf_str *s)
{
    return s->ptr != NULL && s->ptr[s->len] == '\0';
}

kinf_object *kinf_object_borrow(const kinf_str *json, const kinf_str *key, const kinf_meta *meta,
                                void (*release)(void *ud, const kinf_object *obj), void *ud,
                                kinf_err *err)
{
    borrowed *b;
    kinf_object *obj;

    if (meta->name.len == 0) {
        *err = KINF_ENOKEY;
        return NULL;
    }
    if (key->len > UINT32_MAX) {
        *err = KINF_ETOOBIG;
        return NULL;
    }
    if (release == NULL || !nul_ended(json) || !nul_ended(key) || !nul_ended(&meta->namespace_) ||
        !nul_ended(&meta->name) || !nul_ended(&meta->uid) || !nul_ended(&meta->resource_version)) {
        *err = KINF_EINVAL;
        return NULL;
    }
    b = malloc(sizeof(*b));
    if (b == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    b->release = release;
    b->ud = ud;
    obj = &b->obj;
    atomic_init(&obj->refs, 1);
    obj->flags = KINF_OBJ_BORROWED;
    atomic_init(&obj->labels_at, 0);
    obj->inner = NULL;
    obj->json = json->ptr;
    obj->json_len = json->len;
    obj->namespace_ = meta->namespace_.ptr;
    obj->name = meta->name.ptr;
    obj->uid = meta->uid.ptr;
    obj->resource_version = meta->resource_version.ptr;
    obj->key = key->ptr;
    obj->key_len = (uint32_t)key->len;
    obj->hash = kinf_key_hash(key->ptr, key->len);
    *err = KINF_OK;
    return obj;
}

kinf_object *kinf_tombstone_new(const char *key, size_t key_len, kinf_object *inner,
                                kinf_err *err)
{
    kinf_object *obj;
    char *cur;

    if (key == NULL) {
        *err = KINF_ENOKEY;
        return NULL;
    }
    if (key_len > UINT32_MAX) {
        *err = KINF_ETOOBIG;
        return NULL;
    }
    if (inner != NULL && kinf_object_is_tombstone(inner))
        inner = inner->inner;
    obj = malloc(sizeof(*obj) + key_len + 1);
    if (obj == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    atomic_init(&obj->refs, 1);
    obj->flags = KINF_OBJ_TOMBSTONE;
    atomic_init(&obj->labels_at, 1);
    obj->json = NULL;
    obj->json_len = 0;
    obj->namespace_ = obj->name = obj->uid = obj->resource_version = "";
    cur = (char *)(obj + 1);
    obj->key = put(&cur, key, key_len);
    obj->key_len = (uint32_t)key_len;
    obj->hash = kinf_key_hash(key, key_len);
    obj->inner = kinf_object_ref(inner);
    *err = KINF_OK;
    return obj;
}

size_t kinf_object_size(const kinf_object *obj)
{
    if (obj->flags & KINF_OBJ_BORROWED)
        return sizeof(borrowed);
    /* A record's key is the last of its strings (kinf_object_new, kinf_tombstone_new). */
    return (size_t)(obj->key - (const char *)obj) + obj->key_len + 1;
}

kinf_object *kinf_object_ref(kinf_object *obj)
{
    if (obj != NULL)
        atomic_fetch_add_explicit(&obj->refs, 1, memory_order_relaxed);
    return obj;
}

void kinf_object_unref(kinf_object *obj)
{
    /* Tombstones hold one inner reference and never nest, so no recursion. */
    while (obj != NULL) {
        kinf_object *inner;
        if (atomic_fetch_sub_explicit(&obj->refs, 1, memory_order_acq_rel) != 1)
            return;
        inner = obj->inner;
        if (obj->flags & KINF_OBJ_BORROWED) {
            borrowed *b = (borrowed *)obj; /* obj is b's first member */
            b->release(b->ud, obj);
        }
        free(obj);
        obj = inner;
    }
}

kinf_err kinf_split_key(const char *key, size_t len, kinf_str *ns, kinf_str *name)
{
    const char *slash = memchr(key, '/', len);

    if (slash == NULL) {
        ns->ptr = key;
        ns->len = 0;
        name->ptr = key;
        name->len = len;
        return KINF_OK;
    }
    if (memchr(slash + 1, '/', len - (size_t)(slash + 1 - key)) != NULL)
        return KINF_ENOKEY;
    ns->ptr = key;
    ns->len = (size_t)(slash - key);
    name->ptr = slash + 1;
    name->len = len - ns->len - 1;
    return KINF_OK;
}
