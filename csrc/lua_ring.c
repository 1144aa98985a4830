/*
 * lua_ring.c - kinformer.core.ring{ "member", ... } -> ring: rendezvous hashing (ring.h) for a
 * sharded manager. ring:owner(key) -> the member that owns key (nil for a ring without members);
 * ring:size() -> the number of members. The members' names are copied: the ring keeps nothing
 * of the table it was made from.
 */
#include <stdlib.h>
#include <string.h>

#include "lua_kinf.h"
#include "ring.h"

#define RING_MT "kinformer.ring"

typedef struct lring {
    size_t n;
    uint64_t *seeds; /* n */
    int names;       /* registry ref of a table { [i] = name } */
} lring;

static lring *check_ring(lua_State *L)
{
    return luaL_checkudata(L, 1, RING_MT);
}

static int ring_owner(lua_State *L)
{
    lring *r = check_ring(L);
    size_t len;
    const char *key = luaL_checklstring(L, 2, &len);
    size_t i = kinf_ring_owner(r->seeds, r->n, key, len);
    if (i == (size_t)-1) {
        lua_pushnil(L);
        return 1;
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->names);
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    return 1;
}

static int ring_size(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)check_ring(L)->n);
    return 1;
}

static int ring_gc(lua_State *L)
{
    lring *r = check_ring(L);
    free(r->seeds);
    r->seeds = NULL;
    r->n = 0;
    if (r->names != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, r->names);
        r->names = LUA_NOREF;
    }
    return 0;
}

int kl_new_ring(lua_State *L)
{
    size_t n;
    lring *r;
    luaL_checktype(L, 1, LUA_TTABLE);
    n = (size_t)kl_rawlen(L, 1);
    r = lua_newuserdata(L, sizeof(*r));
    r->n = 0;
    r->seeds = NULL;
    r->names = LUA_NOREF;
    luaL_setmetatable(L, RING_MT);
    if (n > 0 && (r->seeds = malloc(n * sizeof(*r->seeds))) == NULL)
        return luaL_error(L, "kinformer: out of memory");
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *name;
        lua_rawgeti(L, 1, (lua_Integer)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_argerror(L, 1, "members must be strings");
        name = lua_tolstring(L, -1, &len);
        r->seeds[i] = kinf_ring_member_seed(name, len);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    r->names = luaL_ref(L, LUA_REGISTRYINDEX);
    r->n = n;
    return 1;
}

static const luaL_Reg RING_METHODS[] = {
    {"owner", ring_owner},
    {"size", ring_size},
    {NULL, NULL},
};

static const luaL_Reg RING_META[] = {
    {"__gc", ring_gc},
    {NULL, NULL},
};

void kl_open_ring(lua_State *L)
{
    kl_new_class(L, RING_MT, RING_METHODS, RING_META);
}
