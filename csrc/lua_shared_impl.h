/*
 * lua_shared_impl.h - what the shared cache's binding files share: lua_shared.c (segments,
 * reader handles), lua_shared_poll.c (their poll), lua_shared_reader.c (a process's slot, holds
 * and borrowed records) and lua_mirror.c (the writer's mirror): the reference-counted segment
 * handle, a reader's state and its holds, the borrowing of records, and a reader handle's
 * caches. Nothing else includes it; the binding's contract is lua_shared.h.
 *
 * Ownership: segref and rstate are reference counted (atomic: a borrowed record may go on any
 * thread). A segref reference keeps the mapping; an rstate holds one on its segref; every
 * borrowed record holds one on its rstate; rstate.mu guards the holds map and its counts, and
 * is taken before segref.mu (the process's slot and its holds).
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
    /* This process's reader slot, shared by all its reader states (lua_shared_reader.c). */
    pthread_mutex_t mu; /* guards pid, slot, users and holds */
    int pid;            /* the process slot, users and holds are of (a forked child: not it) */
    int slot;           /* -1: none */
    long users;         /* reader states of pid on slot */
    kinf_map holds;     /* record offset -> the process's count of holds, where it is 2 or more */
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
    int pid;            /* the process that opened it: the only one that may use it */
    int slot;           /* this process's reader slot, -1 when none could be had (yet) */
    int slot_logged;    /* running out of slots was logged */
    int corrupt_logged; /* a corrupt segment was logged (once per reader) */
    kinf_err attach_err; /* why st is still NULL: KINF_ENOTFOUND, or KINF_ECORRUPT */
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

/* getpid(), without a system call once known in this process. */
int kl_self_pid(void);
/* A new segment handle's reference count (1), mirrors and reader bookkeeping. */
void kl_seg_init(segref *s);
void kl_seg_unref(segref *s);
/* A reader's state on seg for the store at root, with this process's reader slot (shared with
 * its other reader states; -1 when none is free); NULL when out of memory. Its store handle
 * (st) is attached by the caller. */
rstate *kl_rstate_new(segref *seg, int root);
/* rs's slot, claimed now if it had none (a slot freed since); -1 when none is free, or when rs
 * was opened in another process. */
int kl_rstate_slot(rstate *rs);
void kl_rstate_unref(rstate *rs);
/* Empties rs->seen, freeing its keys. */
void kl_seen_clear(rstate *rs);
/* A borrowed record (kinf_object_borrow) for the record at v, read inside a read section of
 * rs's slot: holds it for this process until the record's last reference goes. */
kinf_object *kl_borrow(rstate *rs, const kinf_shm_view *v, kinf_err *err);
/* As kl_borrow for a reader that keeps no table cache (the writer's own store): one process
 * hold per call, with no entry in rs's holds map. */
kinf_object *kl_borrow_sole(rstate *rs, const kinf_shm_view *v, kinf_err *err);
/* The core.shm userdata at idx (raises when it is not one). */
lseg *kl_check_seg(lua_State *L, int idx);
/* Pushes the segment's stats as a table. */
void kl_push_shm_stats(lua_State *L, kinf_shm *shm);
/* t[k] = v in the table on top of the stack. */
void kl_set_int(lua_State *L, const char *k, lua_Integer v);

/* ---- reader handles (lua_shared.c), shared with their poll (lua_shared_poll.c) ---- */

#define KL_SHARED_MT "kinformer.shared_store"
/* A reader handle's uservalue: the segment, its table caches (TABLES: key -> table, OFFS: key
 * -> the record offset, negated once poll handed that table to its handler, FAST: key -> table
 * for one write count), RESULTS (by_index arrays), PENDING (a snapshot's changes not handed). */
enum { UV_SEG = 1, UV_TABLES = 2, UV_OFFS = 3, UV_FAST = 4, UV_RESULTS = 5, UV_PENDING = 6 };

/* The handle at 1, open and of this process (raises otherwise). */
lshared *kl_sh_check(lua_State *L);
/* rs's slot, or -1 after logging once (error) that every slot is taken. */
int kl_sh_need_slot(lua_State *L, rstate *rs);
/* The reader's store once the writer created it, else NULL (attach_err says why). */
kinf_shm_store *kl_sh_attached(rstate *rs);
/* nil, msg, code for err (a corrupt segment also logged, once per reader); returns 3. */
int kl_sh_fail(lua_State *L, rstate *rs, kinf_err err);
/* Pushes the table of the record at v (inside a read section), cached per key and version. */
kinf_err kl_sh_push_record(lua_State *L, rstate *rs, int uv, const kinf_shm_view *v);
/* Starts the uservalue's table caches over. */
void kl_sh_reset_caches(lua_State *L, int uv);
/* Marks key's cached table at record offset off as handed to poll's handler. */
void kl_sh_mark_handed(lua_State *L, int uv, const char *key, size_t len, kinf_shm_off off);
/* Forgets key's cached tables (its record was replaced or deleted). */
void kl_sh_forget(lua_State *L, int uv, const char *key, size_t len);
/* reader:poll(max [, fn]) (lua_shared_poll.c). */
int kl_sh_poll(lua_State *L);

#define NO_SLOT_MSG "kinformer: shared store: no free reader slot (every one of the segment's " \
                    "64 is another process's)"

#define NOT_ATTACHED(L, rs)                                                              \
    ((rs)->attach_err == KINF_ECORRUPT                                                   \
         ? kl_sh_fail(L, rs, KINF_ECORRUPT)                                                    \
         : kl_fail(L, KINF_ENOTFOUND, "kinformer: shared store: not created yet"))

/* The start of a reader method: s_, rs, st and uv, or the method returns nil, err, code. */
#define READER_PROLOGUE()                                                            \
    lshared *s_ = kl_sh_check(L);                                                   \
    rstate *rs = s_->rs;                                                             \
    kinf_shm_store *st;                                                              \
    int uv;                                                                          \
    if (kl_sh_need_slot(L, rs) < 0)                                                        \
        return kl_fail(L, KINF_EBUSY, NO_SLOT_MSG);                                  \
    if ((st = kl_sh_attached(rs)) == NULL)                                                 \
        return NOT_ATTACHED(L, rs);                                                  \
    kl_getuservalue(L, 1);                                                           \
    uv = lua_gettop(L)

#endif
