/*
 * lua_shared.h - the shared cache's binding (lua_shared.c) as the other binding files see it:
 * lua_core.c registers core.shm, and the informer's processor (lua_informer.c) mirrors its
 * store into a segment through a kl_mirror. Everything runs on the thread that owns the state.
 */
#ifndef KINF_LUA_SHARED_H
#define KINF_LUA_SHARED_H

#include "compat.h"
#include "informer.h"
#include "shm.h"
#include "store.h"

/* core.shm(size) and the classes. */
int kl_new_shm(lua_State *L);
/* core.shm_named(name, size): lua_shm_named.c */
int kl_shm_named(lua_State *L);
/* core.shm_named_private(): lua_shm_named.c */
int kl_shm_named_private(lua_State *L);
/* core.shm_flags(seg [, bits]): lua_shm_named.c */
int kl_shm_flags(lua_State *L);
void kl_open_shared(lua_State *L);

/* The segment behind the core.shm userdata at idx (raises when it is not one). */
kinf_shm *kl_check_shm(lua_State *L, int idx);

/*
 * A writer's mirror of a local store (the informer's) into the store at root slot `root` of the
 * segment at seg_idx: it claims the segment's writer role for this process and creates the
 * shared store with the local store's indexes, or attaches to the one a previous writer left
 * (then kl_mirror_retain, once the informer synced, drops what that writer had and the new list
 * does not). NULL with *err and a message in msg: KINF_EBUSY (another live process writes),
 * KINF_EINVAL (the store there has other indexes), KINF_ENOMEM.
 */
typedef struct kl_mirror kl_mirror;
kl_mirror *kl_mirror_open(lua_State *L, int seg_idx, int root, kinf_store *local, kinf_err *err,
                          char *msg, size_t msglen);
/* Mirrors one notification of the processor (the local store already holds its result), then
 * swaps the local store's record for one borrowed from the segment (the same object, without a
 * second copy). Returns the record swapped out (a reference for the caller, who drops its
 * pinned table first), or NULL. */
kinf_object *kl_mirror_note(kl_mirror *m, const kinf_notification *note);
/* After each dispatch (wrote: it popped something): frees what readers can no longer reach,
 * hands the memory of swapped local records back to the system, reaps dead readers. */
void kl_mirror_flush(kl_mirror *m, int wrote);
/* After a dispatch that popped something: logs failed writes (a full segment), the first at once
 * and then at most one line a minute, and one line when a dispatch's writes all succeed after a
 * logged failure. */
void kl_mirror_report(lua_State *L, kl_mirror *m);
kinf_err kl_mirror_retain(kl_mirror *m);
/* Sets the mirror's fields in the status table on top of the stack. */
void kl_mirror_status(lua_State *L, kl_mirror *m);
void kl_mirror_close(kl_mirror *m);

#endif
