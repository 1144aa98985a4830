/*
 * lua_store.h - the store userdata (lua_store.c) as the other binding files see it: the informer
 * (lua_informer.c) writes the C store behind a store userdata directly, from C, and a DeltaFIFO
 * (lua_fifo.c) takes a store as its known objects, and list / list_keys with their options live in
 * lua_store_query.c. Nothing else of lua_store.c is shared.
 * Every function takes the Lua state and the stack index of the store userdata, and runs on the
 * thread that owns the state.
 */
#ifndef KINF_LUA_STORE_H
#define KINF_LUA_STORE_H

#include "compat.h"
#include "object.h"

struct kinf_store;
struct kl_guard;

/* The C store behind the store userdata at idx (borrowed), or NULL if the value is not one or
 * the store is closed. */
struct kinf_store *kl_test_store(lua_State *L, int idx);

/* The C store behind the store userdata at 1, self of method fname (borrowed); raises when the
 * value is not one or the store is closed. */
struct kinf_store *kl_check_store(lua_State *L, const char *fname);

/* Pushes one array: the tables of the guarded objects (as the store hands them out, decoded once
 * and cached by the store userdata at idx), or their keys when keys_only; releases the guard.
 * Returns 1. */
int kl_store_push_objects(lua_State *L, int idx, struct kl_guard *g, int keys_only);

/* Pushes what list() / list_keys() return for the whole store (namespace_idx 0) or for the
 * namespace string at namespace_idx (through the built-in namespace index, which the store must
 * have): the store's cached array while its content is unchanged (lua_results.c). Returns 1. */
int kl_store_push_listed(lua_State *L, int idx, int namespace_idx, int keys_only);

/* list / list_keys options, for every store that reads like this one (lua_store_query.c; the
 * shared store, lua_shared.c). kl_check_list_args checks the arguments after the store (one
 * options table or nil at 2) and returns whether options were given; kl_read_list_options
 * reads namespace, label_selector and index into q (has_index(ud, name) tells which indexes
 * exist), raising on misuse, and leaves what keeps q's strings alive on the stack; it reads the
 * tables raw (no metamethod runs: no Lua code can close the store it reads for);
 * kl_parse_selector parses a selector into *out (NULL when it matches everything), owned by the
 * guard g, raising on a bad one. */
struct kinf_store_query;
struct kinf_labelselector;
int kl_check_list_args(lua_State *L, const char *fname);
void kl_read_list_options(lua_State *L, const char *fname,
                          int (*has_index)(void *ud, const char *name), void *ud,
                          struct kinf_store_query *q, const char **selector, size_t *selector_len);
kinf_err kl_parse_selector(lua_State *L, const char *fname, const char *selector, size_t len,
                           struct kl_guard *g, struct kinf_labelselector **out);

/* store:list(opts) and store:list_keys(opts) (lua_store_query.c). */
int kl_store_list(lua_State *L);
int kl_store_list_keys(lua_State *L);

/* Makes the store at idx an informer's cache: from now on only the informer writes it; its
 * own write methods raise. */
void kl_store_set_readonly(lua_State *L, int idx);

/* Sets the Lua state that the store's Lua index functions run in during writes made from C
 * (the dispatching state); returns the previous one, to be restored when the write is done. */
lua_State *kl_store_set_state(lua_State *L, int idx, lua_State *to);

/* Forgets the table handed out for obj, a record the informer just replaced or removed from the
 * store, so later reads decode its successor. Call before dropping the last reference to obj. */
void kl_store_unpin(lua_State *L, int idx, kinf_object *obj);
/* The same after a write in which obj replaced old: a table of obj made during the write (by an
 * index function) is pinned in place of old's when old's had been handed out. */
void kl_store_replaced(lua_State *L, int idx, kinf_object *old, kinf_object *obj);

#endif
