/*
 * object.h - immutable, reference-counted Kubernetes object records.
 *
 * A record is what flows through the DeltaFIFO and lives in the store: the
 * object's JSON bytes (already transformed, e.g. without managedFields) plus
 * the parsed metadata the core needs (namespace, name, uid, resourceVersion)
 * and the object's key ("ns/name", or "name" when the namespace is empty).
 * Everything lives in ONE allocation; nothing in a record changes after
 * kinf_object_new returns, so any thread may read it without a lock. The one exception is a
 * cache: labels_at, where label selectors (labelselector.c) remember where metadata.labels
 * starts; it is derived from the JSON, written atomically, and any thread may fill it.
 *
 * A tombstone ("DeletedFinalStateUnknown", DFSU) is a record too: flag
 * KINF_OBJ_TOMBSTONE, no JSON, its key, and optionally the last known object
 * (`inner`, a counted reference owned by the tombstone).
 *
 * Ownership: kinf_object_new / kinf_tombstone_new return a record holding one
 * reference, owned by the caller. kinf_object_ref adds one; kinf_object_unref
 * drops one and frees the record (and its inner reference) at zero. Both are
 * thread-safe (atomic counter) and accept NULL. Whoever stores a pointer holds
 * a reference: FIFO deltas, store items and tombstones each hold their own.
 */
#ifndef KINF_OBJECT_H
#define KINF_OBJECT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kinf.h"

#define KINF_OBJ_TOMBSTONE 0x1u
#define KINF_OBJ_BORROWED 0x2u /* the JSON lives elsewhere (kinf_object_borrow) */

typedef struct kinf_object kinf_object;
struct kinf_object {
    atomic_long refs;
    unsigned flags;
    atomic_uint labels_at;        /* offset of metadata.labels' '{' in json; 0: not looked up
                                     yet, 1: none. Read and written only by labelselector.c */
    const char *json;             /* NUL-terminated; NULL for a tombstone */
    size_t json_len;
    const char *namespace_;       /* "" when cluster-scoped */
    const char *name;             /* never NULL for a plain object */
    const char *uid;              /* "" when absent */
    const char *resource_version; /* "" when absent */
    const char *key;              /* "ns/name" or "name"; tombstone: its key */
    uint32_t key_len;
    uint32_t hash;                /* kinf_key_hash(key, key_len), for the maps (map.h) */
    kinf_object *inner;           /* tombstone only: last known object or NULL */
};

/* A string that need not be NUL-terminated (a span of a buffer). */
typedef struct kinf_str {
    const char *ptr;
    size_t len;
} kinf_str;

typedef struct kinf_meta {
    kinf_str namespace_, name, uid, resource_version;
} kinf_meta;

/*
 * Copies json and the metadata into a new record. An empty name gives
 * KINF_ENOKEY (an object without metadata.name has no key). The JSON is taken
 * as it is (callers validated it). Returns NULL with *err set on failure.
 */
kinf_object *kinf_object_new(const char *json, size_t json_len, const kinf_meta *meta,
                             kinf_err *err);

/*
 * A tombstone for key, holding `inner` (may be NULL). If inner is itself a
 * tombstone its inner object is used instead (tombstones never nest). Takes a
 * new reference on the inner object; the caller keeps its own.
 */
kinf_object *kinf_tombstone_new(const char *key, size_t key_len, kinf_object *inner,
                                kinf_err *err);

/*
 * A record that copies nothing: its JSON, key and metadata strings point into memory the caller
 * keeps valid and unchanged until release(ud, record) is called, once, when the record's last
 * reference goes (on whichever thread drops it; the record is freed after it returns). Every span must be followed by a NUL (KINF_EINVAL
 * otherwise) and key must be the key of meta's namespace and name. For the records of a shared
 * segment (shm_store.h), whose reader holds them meanwhile: the record is a header only.
 */
kinf_object *kinf_object_borrow(const kinf_str *json, const kinf_str *key, const kinf_meta *meta,
                                void (*release)(void *ud, const kinf_object *obj), void *ud,
                                kinf_err *err);

kinf_object *kinf_object_ref(kinf_object *obj);
/* Bytes of the record's one allocation (header, JSON, metadata strings, key). A tombstone counts
 * its own allocation only, not the last known object it refers to; a borrowed record its header
 * only. */
size_t kinf_object_size(const kinf_object *obj);
void kinf_object_unref(kinf_object *obj);

static inline int kinf_object_is_tombstone(const kinf_object *obj)
{
    return (obj->flags & KINF_OBJ_TOMBSTONE) != 0;
}

/*
 * Key helpers (MetaNamespaceKeyFunc / SplitMetaNamespaceKey).
 * kinf_split_key: "a/b" -> ns "a", name "b"; "b" -> ns "", name "b";
 * two or more slashes -> KINF_ENOKEY (as client-go, "a/" splits to "a", "").
 * Outputs point into key.
 */
kinf_err kinf_split_key(const char *key, size_t len, kinf_str *ns, kinf_str *name);

#endif
