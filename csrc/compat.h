/*
 * compat.h - every Lua 5.4 / LuaJIT 2.1 (Lua 5.1 API) difference the binding needs, in one
 * place. Only lua_*.c include it. LuaJIT 2.1 already provides luaL_setfuncs, luaL_testudata,
 * luaL_setmetatable, luaL_traceback and luaL_newlib.
 */
#ifndef KINF_COMPAT_H
#define KINF_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM < 502
#define kl_rawlen(L, i) lua_objlen((L), (i))

static inline int kl_absindex(lua_State *L, int idx)
{
    return (idx > 0 || idx <= LUA_REGISTRYINDEX) ? idx : lua_gettop(L) + idx + 1;
}

static inline void kl_rawgetp(lua_State *L, int idx, const void *p)
{
    idx = kl_absindex(L, idx);
    lua_pushlightuserdata(L, (void *)p);
    lua_rawget(L, idx);
}

/* t[p] = value on top (popped). */
static inline void kl_rawsetp(lua_State *L, int idx, const void *p)
{
    idx = kl_absindex(L, idx);
    lua_pushlightuserdata(L, (void *)p);
    lua_insert(L, -2);
    lua_rawset(L, idx);
}

/* A userdata's one Lua value slot: LuaJIT keeps it as the userdata's environment table. */
static inline void kl_setuservalue(lua_State *L, int idx)
{
    lua_setfenv(L, idx);
}

static inline void kl_getuservalue(lua_State *L, int idx)
{
    lua_getfenv(L, idx);
}

static inline void *kl_newuserdata(lua_State *L, size_t size)
{
    return lua_newuserdata(L, size);
}

/* Lua 5.1 numbers are all floats (doubles): there is no integer subtype to push. */
#define kl_isinteger(L, i) 0
#define KL_HAS_INTEGERS 0
#else
#define kl_rawlen(L, i) lua_rawlen((L), (i))
#define kl_absindex(L, i) lua_absindex((L), (i))
#define kl_rawgetp(L, i, p) ((void)lua_rawgetp((L), (i), (p)))
#define kl_rawsetp(L, i, p) lua_rawsetp((L), (i), (p))
#define kl_setuservalue(L, i) ((void)lua_setiuservalue((L), (i), 1))
#define kl_getuservalue(L, i) ((void)lua_getiuservalue((L), (i), 1))
#define kl_newuserdata(L, size) lua_newuserdatauv((L), (size), 1)
#define kl_isinteger(L, i) lua_isinteger((L), (i))
#define KL_HAS_INTEGERS 1
#endif

#endif
