/*
 * lua_results.c - the arrays that store:by_index, index_keys, list and list_keys hand out,
 * kept and handed out again while what they hold is unchanged.
 *
 * Contract (docs/informer.md, "Reading the cache"):
 * - A result is cached per store under what it answers: (objects or keys, index, value), or the
 *   whole store. It is handed out again, the same table, until a write changes its content: the
 *   version of its index value (kinf_store_index_version) or, for the whole store, the store's
 *   version (kinf_store_version). A write elsewhere in the store costs a hit one locked version
 *   read; a quiet store costs one atomic load.
 * - Arrays are read-only by contract and shared by every caller. Each carries its own protected
 *   metatable: adding an element raises, and one whose length changed all the same (rawset,
 *   table.remove) is rebuilt instead of handed out.
 * - Cached arrays are held weakly: an array nobody holds goes at the next garbage collection, so
 *   values that are never asked for again (a pod IP that went away) cost nothing for long.
 *
 * Layout: the cache table (in the store's uservalue, made by kl_results_new) holds [OBJS] and
 * [KEYS], each index name -> weak table value -> array, and [ALL], a weak table with [OBJS] and
 * [KEYS] for the whole store. An array's metatable holds [SV] the store version and [BV] the
 * value version it is valid at and [LEN] its length.
 * Versions are kept as Lua numbers: exact up to 2^53 writes on LuaJIT too.
 */
#include "lua_results.h"

#include "lua_kinf.h"
#include "lua_store.h"
#include "store.h"

enum { OBJS = 1, KEYS = 2, ALL = 3 };
enum { SV = 1, BV = 2, LEN = 3 };

static const char WEAK_KEY = 'w';

static int readonly_newindex(lua_State *L)
{
    return luaL_error(L, "kinformer: this array is shared by every caller of the store until the "
                         "store changes: it is read-only (copy it to change it)");
}

/* Pushes the shared { __mode = "v" } metatable. */
static void push_weak_mt(lua_State *L)
{
    kl_rawgetp(L, LUA_REGISTRYINDEX, &WEAK_KEY);
    if (!lua_isnil(L, -1))
        return;
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "__mode");
    lua_pushvalue(L, -1);
    kl_rawsetp(L, LUA_REGISTRYINDEX, &WEAK_KEY);
}

void kl_results_push_weak_table(lua_State *L)
{
    lua_newtable(L);
    push_weak_mt(L);
    lua_setmetatable(L, -2);
}

void kl_results_new(lua_State *L)
{
    lua_createtable(L, 3, 0);
    lua_newtable(L);
    lua_rawseti(L, -2, OBJS);
    lua_newtable(L);
    lua_rawseti(L, -2, KEYS);
    kl_results_push_weak_table(L);
    lua_rawseti(L, -2, ALL);
}

static uint64_t mt_version(lua_State *L, int mt, int slot)
{
    uint64_t v;
    lua_rawgeti(L, mt, slot);
    v = (uint64_t)lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static void mt_set_version(lua_State *L, int mt, int slot, uint64_t v)
{
    lua_pushnumber(L, (lua_Number)v);
    lua_rawseti(L, mt, slot);
}

/* With the cached array (or nil) on top: whether it is still handed out as it is. A store
 * version match is enough; otherwise the value version (bv, read by the caller when has_bv)
 * must match, and then the array is valid at sv too. */
int kl_results_valid(lua_State *L, uint64_t sv, int has_bv, uint64_t bv)
{
    int arr = lua_gettop(L), mt, ok;
    if (!lua_istable(L, arr) || !lua_getmetatable(L, arr))
        return 0;
    mt = lua_gettop(L);
    ok = (size_t)mt_version(L, mt, LEN) == kl_rawlen(L, arr);
    if (ok && mt_version(L, mt, SV) != sv) {
        ok = has_bv && mt_version(L, mt, BV) == bv;
        if (ok)
            mt_set_version(L, mt, SV, sv);
    }
    lua_pop(L, 1);
    return ok;
}

/* Gives the array on top its read-only metatable, valid at versions sv / bv. */
void kl_results_seal(lua_State *L, uint64_t sv, uint64_t bv)
{
    int arr = lua_gettop(L), mt;
    lua_createtable(L, 3, 2);
    mt = lua_gettop(L);
    mt_set_version(L, mt, SV, sv);
    mt_set_version(L, mt, BV, bv);
    lua_pushnumber(L, (lua_Number)kl_rawlen(L, arr));
    lua_rawseti(L, mt, LEN);
    lua_pushcfunction(L, readonly_newindex);
    lua_setfield(L, mt, "__newindex");
    lua_pushliteral(L, "kinformer: read-only");
    lua_setfield(L, mt, "__metatable");
    lua_setmetatable(L, arr);
}

int kl_results_indexed(lua_State *L, kinf_store *s, int store, int cache, int index, int value,
                       int keys, const char *fname)
{
    const char *ix = lua_tostring(L, index);
    size_t len;
    const char *val = lua_tolstring(L, value, &len);
    uint64_t sv = kinf_store_version(s), bv = 0;
    int sub, bv_read = 0;
    kl_guard *g;
    kinf_err err;

    store = kl_absindex(L, store);
    cache = kl_absindex(L, cache);
    index = kl_absindex(L, index);
    value = kl_absindex(L, value);
    lua_rawgeti(L, cache, keys ? KEYS : OBJS);
    lua_pushvalue(L, index);
    lua_rawget(L, -2);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        kl_results_push_weak_table(L);
        lua_pushvalue(L, index);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    sub = lua_gettop(L);
    lua_pushvalue(L, value);
    lua_rawget(L, sub);
    if (lua_istable(L, -1)) {
        if (kl_results_valid(L, sv, 0, 0))
            return 1;
        bv_read = 1;
        if (kinf_store_index_version(s, ix, val, len, &bv) == KINF_ENOTFOUND)
            return kl_argerror(L, 1, fname, "index '%s' does not exist", ix);
        if (kl_results_valid(L, sv, 1, bv))
            return 1;
    }
    lua_pop(L, 1);
    if (!bv_read && kinf_store_index_version(s, ix, val, len, &bv) == KINF_ENOTFOUND)
        return kl_argerror(L, 1, fname, "index '%s' does not exist", ix);
    g = kl_push_guard(L);
    err = keys ? kinf_store_index_keys(s, ix, val, len, &g->objs, &g->n)
               : kinf_store_by_index(s, ix, val, len, &g->objs, &g->n);
    if (err == KINF_ENOTFOUND) /* the index went away: it cannot, but say so rather than crash */
        return kl_argerror(L, 1, fname, "index '%s' does not exist", ix);
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    kl_store_push_objects(L, store, g, keys);
    kl_results_seal(L, sv, bv);
    lua_pushvalue(L, value);
    lua_pushvalue(L, -2);
    lua_rawset(L, sub);
    return 1;
}

int kl_results_all(lua_State *L, kinf_store *s, int store, int cache, int keys)
{
    uint64_t sv = kinf_store_version(s);
    int all;
    kl_guard *g;
    kinf_err err;

    store = kl_absindex(L, store);
    lua_rawgeti(L, cache, ALL);
    all = lua_gettop(L);
    lua_rawgeti(L, all, keys ? KEYS : OBJS);
    if (kl_results_valid(L, sv, 0, 0))
        return 1;
    lua_pop(L, 1);
    g = kl_push_guard(L);
    err = kinf_store_list(s, &g->objs, &g->n);
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    kl_store_push_objects(L, store, g, keys);
    kl_results_seal(L, sv, sv);
    lua_pushvalue(L, -1);
    lua_rawseti(L, all, keys ? KEYS : OBJS);
    return 1;
}
