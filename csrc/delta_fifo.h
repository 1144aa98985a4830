/*
 * delta_fifo.h - the DeltaFIFO (client-go tools/cache DeltaFIFO), docs/semantics.md, section 3.
 *
 * A thread-safe queue of keys; each queued key maps to its Deltas (oldest first, never empty).
 * A key is in the queue exactly when it has deltas; a key already queued keeps its place.
 * Producers (the reflector's I/O thread, or Lua) call add/update/delete/replace/resync; one or
 * more consumers call pop, which blocks until a key is queued or the FIFO is closed and drained.
 *
 * Known objects: an optional store (the informer's indexer) consulted by delete, replace and
 * resync, read under the FIFO lock (lock order: FIFO -> store).
 *
 * Locking: one mutex guards everything (error-checking: a FIFO call made from inside pop's
 * process callback, on the same thread, returns KINF_EBUSY instead of deadlocking). pop runs the
 * process callback with the lock held, as client-go does, so process must be short and must not
 * call back into this FIFO.
 *
 * Ownership: enqueueing takes a new reference on the object (the caller keeps its own). A
 * kinf_deltas handed out (pop, get_by_key) belongs to the caller: release it with
 * kinf_deltas_clear. add_if_not_present copies the references it needs.
 *
 * Wake-up for event loops: an optional notify callback runs (with the lock held; keep it to a
 * write() on an eventfd/pipe) whenever the queue goes from empty to non-empty or is closed.
 */
#ifndef KINF_DELTA_FIFO_H
#define KINF_DELTA_FIFO_H

#include <stddef.h>

#include "kinf.h"
#include "object.h"
#include "store.h"

typedef enum kinf_delta_type {
    KINF_DELTA_ADDED,
    KINF_DELTA_UPDATED,
    KINF_DELTA_DELETED,
    KINF_DELTA_REPLACED,
    KINF_DELTA_SYNC
} kinf_delta_type;

const char *kinf_delta_type_name(kinf_delta_type t); /* "Added", "Updated", ... */

typedef struct kinf_delta {
    kinf_delta_type type;
    kinf_object *obj; /* one reference */
} kinf_delta;

typedef struct kinf_deltas {
    kinf_delta *v; /* oldest first */
    size_t n, cap;
} kinf_deltas;

/* Releases every reference and the array; leaves d empty. */
void kinf_deltas_clear(kinf_deltas *d);
/* The newest delta's object (NULL when empty). */
kinf_object *kinf_deltas_newest(const kinf_deltas *d);

typedef struct kinf_fifo kinf_fifo;

#define KINF_FIFO_EMIT_REPLACED 0x1u

/* known: may be NULL; the FIFO takes its own reference. Returns one reference. */
kinf_fifo *kinf_fifo_new(kinf_store *known, unsigned flags, kinf_err *err);
/* The FIFO is shared (Lua binding, reflector thread): each holder owns a reference. The last
 * unref frees it; by then no thread can be inside a call, since every caller holds a reference. */
kinf_fifo *kinf_fifo_ref(kinf_fifo *f);
void kinf_fifo_unref(kinf_fifo *f);

void kinf_fifo_set_notify(kinf_fifo *f, void (*notify)(void *ud), void *ud);

kinf_err kinf_fifo_add(kinf_fifo *f, kinf_object *obj);
kinf_err kinf_fifo_update(kinf_fifo *f, kinf_object *obj);
/* obj may be a tombstone (its key is used). */
kinf_err kinf_fifo_delete(kinf_fifo *f, kinf_object *obj);
/* Enqueues Replaced (EMIT_REPLACED) or Sync for each object, then the deletions described in
 * docs/semantics.md, section 3. rv is informational (kept for status). Tombstones in objs: KINF_EINVAL, nothing enqueued. */
kinf_err kinf_fifo_replace(kinf_fifo *f, kinf_object *const *objs, size_t n, const char *rv);
/* The known store given to kinf_fifo_new (borrowed; NULL if none). */
kinf_store *kinf_fifo_known(kinf_fifo *f);

/* Sync for every known object with no queued deltas; a no-op without known objects. */
kinf_err kinf_fifo_resync(kinf_fifo *f);

/*
 * process: called with the lock held and the popped key already removed; returns KINF_OK, or
 * KINF_FIFO_REQUEUE to put the deltas back at the tail if the key is not queued again (otherwise
 * they are dropped, as client-go's addIfNotPresent), or any other value, which pop returns after
 * handing over the deltas.
 */
#define KINF_FIFO_REQUEUE (-1)
typedef int (*kinf_fifo_process_fn)(void *ud, const kinf_deltas *deltas, int is_in_initial_list);

/*
 * Blocks up to timeout seconds (< 0: forever) for a key. On success *out receives the deltas
 * (caller owns them; even after a requeue they are the caller's copy) and *is_initial whether
 * the item belongs to the initial list. Returns KINF_ECLOSED when closed and empty,
 * KINF_ETIMEDOUT when the wait ran out, KINF_EBUSY on re-entry, or process's own error code
 * (cast to kinf_err) with *out filled.
 */
kinf_err kinf_fifo_pop(kinf_fifo *f, double timeout, kinf_fifo_process_fn process, void *ud,
                       kinf_deltas *out, int *is_initial);

/* Queues deltas (a copy) under their newest object's key unless that key is already queued. */
kinf_err kinf_fifo_add_if_not_present(kinf_fifo *f, const kinf_deltas *deltas);

/* The newest object of each queued key, in queue order (new references). */
kinf_err kinf_fifo_list(kinf_fifo *f, kinf_object ***out, size_t *n);
/* A copy of a key's deltas; KINF_ENOTFOUND when the key is not queued. */
kinf_err kinf_fifo_get_by_key(kinf_fifo *f, const char *key, size_t len, kinf_deltas *out);
size_t kinf_fifo_len(kinf_fifo *f);

/* What the queue holds (memory grows with it while nobody pops: every delta is kept, as in
 * client-go, so it is bounded by the events received, not by the number of keys). */
typedef struct kinf_fifo_stats {
    size_t keys;   /* queued keys (kinf_fifo_len) */
    size_t deltas; /* deltas over all queued keys */
    size_t bytes;  /* kinf_object_size of every queued delta's record (a record queued twice
                    * counts twice; a tombstone counts without its last known object) */
} kinf_fifo_stats;
void kinf_fifo_get_stats(kinf_fifo *f, kinf_fifo_stats *out);
int kinf_fifo_has_synced(kinf_fifo *f);
void kinf_fifo_close(kinf_fifo *f);
int kinf_fifo_is_closed(kinf_fifo *f);

#endif
