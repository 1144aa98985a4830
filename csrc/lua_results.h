/*
 * lua_results.h - the arrays the store hands out, cached while their content is unchanged
 * (lua_results.c). Used by lua_store.c (by_index, index_keys) and lua_store_query.c (list and
 * list_keys, whole or by namespace). Runs on the thread that owns the Lua state.
 */
#ifndef KINF_LUA_RESULTS_H
#define KINF_LUA_RESULTS_H

#include <stdint.h>

#include "compat.h"

struct kinf_store;

/* Pushes a new, empty cache table (the store keeps it in its uservalue). */
void kl_results_new(lua_State *L);

/*
 * Pushes what by_index (keys: index_keys) returns for the index name and value at the stack
 * indexes `index` and `value` (strings), from the cache table at `cache` when its content has not
 * changed, else read from s (the store behind the userdata at `store`) and cached. An unknown
 * index raises an argument error naming fname. Returns 1.
 */
int kl_results_indexed(lua_State *L, struct kinf_store *s, int store, int cache, int index,
                       int value, int keys, const char *fname);

/* Pushes list() (keys: list_keys()) of the whole store, likewise. Returns 1. */
int kl_results_all(lua_State *L, struct kinf_store *s, int store, int cache, int keys);

/* The pieces, for other caches of the same kind (the shared store's, lua_shared.c): a new table
 * with weak values; whether the cached array on top (or nil) is still valid (its first version
 * equal to sv, or, when has_bv, its second equal to bv: the first is then set to sv), with its
 * length unchanged; and sealing the array on top read-only, valid at sv / bv. */
void kl_results_push_weak_table(lua_State *L);
int kl_results_valid(lua_State *L, uint64_t sv, int has_bv, uint64_t bv);
void kl_results_seal(lua_State *L, uint64_t sv, uint64_t bv);

#endif
