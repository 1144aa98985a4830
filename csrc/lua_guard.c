/*
 * lua_guard.c - guards: a userdata that owns C memory (record references, a deltas list, one
 * malloc'd block) while Lua code that may raise runs, so a Lua error never leaks it (luaL_error
 * longjmps past the C frame). The owner releases the guard when done; __gc releases whatever
 * the owner did not. Release is idempotent. Threads: the thread that owns the Lua state only.
 */
#include <stdlib.h>
#include <string.h>

#include "lua_kinf.h"

#define GUARD_MT "kinformer.guard"

void kl_guard_release(kl_guard *g)
{
    if (g->objs == g->one) {
        for (size_t i = 0; i < g->n; i++)
            kinf_object_unref(g->one[i]);
    } else {
        kinf_objects_free(g->objs, g->n);
    }
    g->objs = NULL;
    g->n = 0;
    kinf_deltas_clear(&g->deltas);
    free(g->mem);
    g->mem = NULL;
}

static int guard_gc(lua_State *L)
{
    kl_guard_release(luaL_checkudata(L, 1, GUARD_MT));
    return 0;
}

kl_guard *kl_push_guard(lua_State *L)
{
    kl_guard *g = lua_newuserdata(L, sizeof(*g));
    memset(g, 0, sizeof(*g));
    luaL_setmetatable(L, GUARD_MT);
    return g;
}

void kl_open_guard(lua_State *L)
{
    luaL_newmetatable(L, GUARD_MT);
    lua_pushcfunction(L, guard_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}
