/*
 * lua_shared_impl.h - what lua_shared.c (segments, readers) and lua_mirror.c (the writer's
 * mirror) share: the reference-counted segment handle, a reader's state and its holds, and the
 * borrowing of records. Nothing else includes it; the binding's contract is lua_shared.h.
 *
 * Ownership: segref and rstate are reference counted (atomic: a borrowed record may go on any
 * thread). A segref reference keeps the mapping; an rstate holds one on its segref; every
 * borrowed record holds one on its rstate; rstate.mu guards the holds map and its counts.
 */
#ifndef KINF_LUA_SHARED_IMPL_H
#define KINF_LUA_SHARED_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "compat.h"
#include "map.h"
#include "shm_store.h"

typedef struct segref {
    kinf_shm *shm;
    atomic_long refs;
    atomic_uint mirrored; /* bit i: a mirror of this process writes the store at root i */
} segref;

typedef struct hold {
    uint64_t off; /* the map's key bytes */
    long count;   /* borrowed records of this process on it */
    struct rstate *rs;
} hold;

typedef struct rstate {
    atomic_long refs;   /* the handle, each borrowed record (released on any thread) */
    pthread_mutex_t mu; /* guards holds and the holds' counts */
    segref *seg;
    kinf_shm_store *st; /* NULL until the writer created the store */
    int root;
    int slot;           /* this process's reader slot, -1 when none could be had */
    kinf_map holds;     /* record offset (8 bytes) -> hold */
    uint64_t cursor;    /* the next log seq to deliver; 0: never polled */
    uint64_t catchup;   /* after a snapshot: events up to this seq may repeat it */
    kinf_map seen;      /* during catch-up: key -> the seq the handlers have (uintptr_t) */
    unsigned long resyncs, events;
    uint64_t fast_writes; /* the store's write count FAST is valid for */
} rstate;

typedef struct lseg {
    segref *seg;
} lseg;

typedef struct lshared {
    rstate *rs;
    int polling; /* inside poll: a nested poll or a close is refused */
} lshared;

void kl_seg_unref(segref *s);
/* A reader's state on seg for the store at root, with a reader slot of this process (-1 when
 * none is free); NULL when out of memory. Its store handle (st) is attached by the caller. */
rstate *kl_rstate_new(segref *seg, int root);
void kl_rstate_unref(rstate *rs);
/* A borrowed record (kinf_object_borrow) for the record at v, read inside a read section of
 * rs's slot: holds it for this process until the record's last reference goes. */
kinf_object *kl_borrow(rstate *rs, const kinf_shm_view *v, kinf_err *err);
/* As kl_borrow for a reader that borrows each record at most once at a time (the writer's own
 * store): the slot's bit is the hold, with no count and no entry in the holds map. KINF_EBUSY
 * when the slot holds the record already. */
kinf_object *kl_borrow_sole(rstate *rs, const kinf_shm_view *v, kinf_err *err);
/* The core.shm userdata at idx (raises when it is not one). */
lseg *kl_check_seg(lua_State *L, int idx);
/* Pushes the segment's stats as a table. */
void kl_push_shm_stats(lua_State *L, kinf_shm *shm);
/* t[k] = v in the table on top of the stack. */
void kl_set_int(lua_State *L, const char *k, lua_Integer v);

#endif
