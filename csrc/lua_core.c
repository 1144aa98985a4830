/*
 * lua_core.c - the kinformer.core module: luaopen_kinformer_core, the key functions (key_of,
 * split_key), the logger (set_logger, log, kl_log), how failures and argument errors reach Lua
 * (kl_fail: nil, message, code; kl_argerror: raises at the caller's line), error values as text
 * (kl_error_text) and the REQUEUE
 * sentinel. Objects and tombstones live in lua_object.c, guards in lua_guard.c; each binding
 * file registers its own classes and functions (kl_open_*), called from luaopen below.
 * Threads: everything here runs on the thread that owns the Lua state.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lua_kinf.h"
#include "lua_shared.h"

/* Registry keys: the addresses are unique; the bytes never change. */
static const char LOGGER_KEY = 0;    /* the logger function, if set */
static const char REQUEUE_KEY = 0;   /* the REQUEUE sentinel */

/* luaL_where for an error of the running C function: its caller's position, or, when that caller
 * is one of kinformer's Lua hit paths (chunk "=kinformer.store", lua_store.c), the position of
 * the caller of that, the code that called the method. */
static void where(lua_State *L)
{
    lua_Debug ar;
    int level = 1;
    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "S", &ar) &&
        strcmp(ar.source, "=kinformer.store") == 0)
        level = 2;
    luaL_where(L, level);
}

int kl_error(lua_State *L, const char *fmt, ...)
{
    va_list ap;
    where(L);
    va_start(ap, fmt);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

int kl_argerror(lua_State *L, int argn, const char *fname, const char *fmt, ...)
{
    va_list ap;
    const char *reason;
    va_start(ap, fmt);
    reason = lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    return kl_error(L, "bad argument #%d to '%s' (%s)", argn, fname, reason);
}

const char *kl_check_lstring(lua_State *L, int idx, int argn, const char *fname, size_t *len)
{
    const char *s = lua_tolstring(L, idx, len);
    if (s == NULL)
        kl_argerror(L, argn, fname, "string expected, got %s", luaL_typename(L, idx));
    return s;
}

void kl_check_type(lua_State *L, int idx, int argn, const char *fname, int type)
{
    if (lua_type(L, idx) != type)
        kl_argerror(L, argn, fname, "%s expected, got %s", lua_typename(L, type),
                    luaL_typename(L, idx));
}

void *kl_check_self(lua_State *L, const char *tname, const char *fname)
{
    void *p = luaL_testudata(L, 1, tname);
    if (p == NULL)
        kl_error(L, "calling '%s' on bad self (%s expected, got %s)", fname, tname,
                   luaL_typename(L, 1));
    return p;
}

int kl_fail(lua_State *L, kinf_err err, const char *msg)
{
    lua_pushnil(L);
    lua_pushstring(L, msg && msg[0] ? msg : kinf_strerror(err));
    lua_pushstring(L, kinf_errname(err));
    return 3;
}

const char *kl_error_text(lua_State *L, int idx)
{
    int t;
    idx = kl_absindex(L, idx);
    t = lua_type(L, idx);
    if (t == LUA_TSTRING || t == LUA_TNUMBER) {
        lua_pushvalue(L, idx);
        return lua_tostring(L, -1); /* converts the copy, never the caller's value */
    }
    if (luaL_getmetafield(L, idx, "__tostring")) {
        lua_pushvalue(L, idx);
        if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING)
            return lua_tostring(L, -1);
        lua_pop(L, 1);
        return lua_pushfstring(L, "(error object of type %s: its __tostring failed)",
                               lua_typename(L, t));
    }
    return lua_pushfstring(L, "(error object of type %s)", lua_typename(L, t));
}

void kl_log(lua_State *L, const char *level, const char *msg)
{
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 4)) {
        fprintf(stderr, "kinformer [%s] %s\n", level, msg);
        return;
    }
    kl_rawgetp(L, LUA_REGISTRYINDEX, &LOGGER_KEY);
    if (lua_isfunction(L, -1)) {
        lua_pushstring(L, level);
        lua_pushstring(L, msg);
        if (lua_pcall(L, 2, 0, 0) != LUA_OK)
            fprintf(stderr, "kinformer [%s] %s (logger failed: %s)\n", level, msg,
                    kl_error_text(L, -1));
    } else {
        fprintf(stderr, "kinformer [%s] %s\n", level, msg);
    }
    lua_settop(L, top);
}

void kl_new_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta)
{
    luaL_newmetatable(L, name);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    luaL_setfuncs(L, meta, 0);
    lua_pop(L, 1);
}

void kl_push_requeue(lua_State *L)
{
    kl_rawgetp(L, LUA_REGISTRYINDEX, &REQUEUE_KEY);
}

/* ---- module functions ---- */

static int l_key_of(lua_State *L)
{
    char err[128];
    if (kl_push_key(L, 1, 1, "key_of", err, sizeof(err)))
        return 1;
    return kl_fail(L, KINF_ENOKEY, err);
}

static int l_split_key(lua_State *L)
{
    size_t len;
    const char *key = luaL_checklstring(L, 1, &len);
    kinf_str ns, name;
    if (kinf_split_key(key, len, &ns, &name) != KINF_OK)
        return kl_fail(L, KINF_ENOKEY, lua_pushfstring(L, "unexpected key format: %s", key));
    lua_pushlstring(L, ns.ptr, ns.len);
    lua_pushlstring(L, name.ptr, name.len);
    return 2;
}

static int l_set_logger(lua_State *L)
{
    if (!lua_isnoneornil(L, 1))
        luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    kl_rawsetp(L, LUA_REGISTRYINDEX, &LOGGER_KEY);
    return 0;
}

static int l_log(lua_State *L)
{
    kl_log(L, luaL_checkstring(L, 1), luaL_checkstring(L, 2));
    return 0;
}

/* file_type(path) -> "file" | "directory" | "fifo" | "socket" | "device" | "other" | nil, err, code.
 * stat() never blocks on a FIFO, where opening one for reading waits for a writer: the config
 * modules ask before they open a file they were pointed at. */
static int l_file_type(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    const char *t;
    if (stat(path, &st) != 0)
        return kl_fail(L, errno == ENOENT ? KINF_ENOTFOUND : KINF_EIO,
                       lua_pushfstring(L, "%s: %s", path, strerror(errno)));
    t = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory"
        : S_ISFIFO(st.st_mode) ? "fifo" : S_ISSOCK(st.st_mode) ? "socket"
        : (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) ? "device" : "other";
    lua_pushstring(L, t);
    return 1;
}

static const luaL_Reg FUNCS[] = {
    {"file_type", l_file_type},
    {"store", kl_new_store},
    {"shm", kl_new_shm},
    {"shm_named", kl_shm_named},
    {"shm_flags", kl_shm_flags},
    {"shm_named_private", kl_shm_named_private},
    {"delta_fifo", kl_new_fifo},
    {"client", kl_new_client},
    {"processor", kl_new_processor},
    {"ring", kl_new_ring},
    {"key_of", l_key_of},
    {"split_key", l_split_key},
    {"set_logger", l_set_logger},
    {"log", l_log},
    {NULL, NULL},
};

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int luaopen_kinformer_core(lua_State *L);

int luaopen_kinformer_core(lua_State *L)
{
    lua_createtable(L, 0, 1);
    lua_pushstring(L, "REQUEUE");
    lua_setfield(L, -2, "name");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &REQUEUE_KEY);

    kl_open_guard(L);
    kl_open_store(L);
    kl_open_fifo(L);
    kl_open_client(L);
    kl_open_call(L);
    kl_open_ring(L);
    kl_open_informer(L);
    kl_open_shared(L);

    luaL_newlib(L, FUNCS);
    kl_open_object(L);
    kl_open_loop(L);
    kl_push_requeue(L);
    lua_setfield(L, -2, "REQUEUE");
    lua_pushstring(L, "0.1.0");
    lua_setfield(L, -2, "_VERSION");
    return 1;
}
