/*
 * lua_store.c - kinformer.store{ indexers = {...} }: the indexed store, thin over store.c.
 *
 * The userdata's uservalue table holds [PINNED] record address -> table for every stored record
 * whose table was handed out, or handed in if kinformer made it (never one a user built), so
 * repeated gets return the same table without decoding; [FNS] slot -> Lua index function;
 * [RESULTS] the arrays by_index, index_keys, list and list_keys hand out until their content
 * changes (lua_results.c); and [KEYS] key -> the pinned table for every key get has handed out.
 * Pinned tables and keys lose a record's entry in the write that replaces or removes it (unpin),
 * before the record's last reference can go away; replace starts both anew.
 *
 * get and get_by_key are Lua functions (GET_CHUNK) whose hit path reads the KEYS table straight
 * from Lua: it is found by the store in CACHES, a weak-keyed table of open stores only (close
 * drops the entry), so a hit makes no C call at all, which LuaJIT compiles into the caller's
 * trace; any other case (a miss, a key not a string, a bad self, a closed store) calls the C get.
 *
 * Index functions and the methods that add and use them are in lua_store_index.c. store:close
 * from inside one raises (the write in progress still uses the store and the index's ud),
 * failing the index.
 * Methods read their arguments (__index may close the store) first and check it is open after.
 */
#include <stdlib.h>
#include <string.h>

#include "lua_results.h"
#include "lua_store.h"
#include "lua_store_impl.h"

/* Registry key of CACHES: store userdata -> its KEYS table, weak keys, open stores only. */
static const char CACHES_KEY = 0;

/* CACHES[the store at ud] = the value at keys (nil: the store is closed). */
static void set_cache(lua_State *L, int ud, int keys)
{
    ud = kl_absindex(L, ud);
    keys = kl_absindex(L, keys);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &CACHES_KEY);
    lua_pushvalue(L, ud);
    lua_pushvalue(L, keys);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/* Raises unless the store is open (again after reading an argument that may run Lua code). */
lstore *kl_store_check_open(lua_State *L, lstore *ls)
{
    if (ls->store == NULL)
        kl_error(L, "kinformer: store is closed");
    return ls;
}

/* The open store at 1, self of method fname. */
lstore *kl_store_self(lua_State *L, const char *fname)
{
    return kl_store_check_open(L, kl_check_self(L, KL_STORE_MT, fname));
}

static lstore *check_writable(lua_State *L, const char *fname)
{
    lstore *ls = kl_store_self(L, fname);
    if (ls->readonly)
        luaL_error(L, "kinformer: store:%s: this store is an informer's cache; only the informer "
                      "writes it", fname);
    return ls;
}

lua_State *kl_store_set_state(lua_State *L, int idx, lua_State *to)
{
    lstore *ls = luaL_checkudata(L, idx, KL_STORE_MT);
    lua_State *was = ls->L;
    ls->L = to;
    return was;
}

void kl_store_set_readonly(lua_State *L, int idx)
{
    ((lstore *)luaL_checkudata(L, idx, KL_STORE_MT))->readonly = 1;
}

kinf_store *kl_test_store(lua_State *L, int idx)
{
    lstore *ls = luaL_testudata(L, idx, KL_STORE_MT);
    return ls ? ls->store : NULL;
}

kinf_store *kl_check_store(lua_State *L, const char *fname)
{
    return kl_store_self(L, fname)->store;
}

/* Pushes the uservalue table of the store at index 1 and returns its stack index. */
int kl_store_begin(lua_State *L)
{
    kl_getuservalue(L, 1);
    return lua_gettop(L);
}

/* ---- results ---- */

/* Pushes obj's table, pinning it so later reads return the same table. */
static void push_pinned(lua_State *L, int uv, kinf_object *obj)
{
    lua_rawgeti(L, uv, PINNED);
    kl_rawgetp(L, -1, obj);
    if (!lua_isnil(L, -1)) {
        lua_remove(L, -2);
        return;
    }
    lua_pop(L, 1);
    kl_push_object(L, obj);
    lua_pushvalue(L, -1);
    kl_rawsetp(L, -3, obj);
    lua_remove(L, -2);
}

/* Forgets obj's pinned table and its key; 1 if it had one (it was handed out). */
static int unpin(lua_State *L, int uv, kinf_object *obj)
{
    if (obj == NULL)
        return 0;
    lua_rawgeti(L, uv, PINNED);
    kl_rawgetp(L, -1, obj);
    if (lua_isnil(L, -1)) {
        /* Never handed out: nothing pinned, and only keys of pinned records are cached. */
        lua_pop(L, 2);
        return 0;
    }
    lua_pop(L, 1);
    lua_pushnil(L);
    kl_rawsetp(L, -2, obj);
    lua_rawgeti(L, uv, KEYS);
    lua_pushlstring(L, obj->key, obj->key_len);
    lua_pushnil(L);
    lua_rawset(L, -3);
    lua_pop(L, 2);
    return 1;
}

/*
 * obj replaced old (a write). old's table goes; when it had been handed out, the key is likely
 * read again, so the table made for obj during the write (by an index function), if any, is
 * pinned in its place: the next read hands it out instead of making another one, and the write
 * leaves one table of garbage instead of two. A record nobody read gets no table pinned.
 */
static void replaced(lua_State *L, int uv, kinf_object *old, kinf_object *obj)
{
    if (old == obj || !unpin(L, uv, old) || obj == NULL)
        return;
    lua_rawgeti(L, uv, PINNED);
    kl_push_made(L, obj);
    if (lua_isnil(L, -1))
        lua_pop(L, 2);
    else {
        kl_rawsetp(L, -2, obj);
        lua_pop(L, 1);
    }
}

void kl_store_unpin(lua_State *L, int idx, kinf_object *obj)
{
    kl_getuservalue(L, idx);
    unpin(L, lua_gettop(L), obj);
    lua_pop(L, 1);
}

void kl_store_replaced(lua_State *L, int idx, kinf_object *old, kinf_object *obj)
{
    kl_getuservalue(L, idx);
    replaced(L, lua_gettop(L), old, obj);
    lua_pop(L, 1);
}

/* Pushes an array of the guarded objects' tables (keys when keys_only) and frees them. */
int kl_store_push_guarded(lua_State *L, int uv, kl_guard *g, int keys_only)
{
    lua_createtable(L, (int)g->n, 0);
    for (size_t i = 0; i < g->n; i++) {
        if (keys_only)
            lua_pushlstring(L, g->objs[i]->key, g->objs[i]->key_len);
        else
            push_pinned(L, uv, g->objs[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    kl_guard_release(g);
    return 1;
}

int kl_store_push_objects(lua_State *L, int idx, kl_guard *g, int keys_only)
{
    int uv;
    kl_getuservalue(L, idx);
    uv = lua_gettop(L);
    kl_store_push_guarded(L, uv, g, keys_only);
    lua_remove(L, uv);
    return 1;
}

/* Reports a write's outcome: true; or true, message, "EINDEX" when an index function failed
 * (the write went through); or nil, message, code. */
int kl_store_write_result(lua_State *L, const char *fname, kinf_err err, const char *msg)
{
    switch (err) {
    case KINF_OK:
        lua_pushboolean(L, 1);
        return 1;
    case KINF_EINDEX:
        kl_log(L, "error", msg);
        lua_pushboolean(L, 1);
        lua_pushstring(L, msg);
        lua_pushstring(L, kinf_errname(err));
        return 3;
    case KINF_EBUSY:
        return luaL_error(L, "kinformer: store:%s called from inside an index function", fname);
    default:
        return kl_fail(L, err, msg);
    }
}

/* ---- methods ---- */

static int add_common(lua_State *L, const char *fname)
{
    kinf_err code;
    lstore *ls = check_writable(L, fname);
    char msg[320] = "";
    kinf_object *obj, *old = NULL;
    kinf_err err;
    int uv;

    lua_settop(L, 2);
    uv = kl_store_begin(L); /* 3 */
    obj = kl_to_object(L, 2, 1, fname, &code, msg, sizeof(msg)); /* may run Lua code */
    if (obj == NULL)
        return kl_fail(L, code, msg);
    kl_store_check_open(L, ls);
    WITH_STATE(ls, L, err = kinf_store_add(ls->store, obj, &old, msg, sizeof(msg)));
    if (err == KINF_OK || err == KINF_EINDEX) {
        /* Unpin the replaced record (repinning, see replaced) before dropping our reference to it. Neither step can
         * raise short of memory exhaustion; `old` is then leaked, never double-freed. */
        replaced(L, uv, old, obj);
        kinf_object_unref(old);
        if (kl_record_of(L, 2) == obj) { /* kinformer's table: get hands it out again */
            lua_rawgeti(L, uv, PINNED);
            lua_pushvalue(L, 2);
            kl_rawsetp(L, -2, obj);
        }
    }
    return kl_store_write_result(L, fname, err, msg);
}

static int s_add(lua_State *L)
{
    return add_common(L, "add");
}

static int s_update(lua_State *L)
{
    return add_common(L, "update");
}

static int s_delete(lua_State *L)
{
    lstore *ls = check_writable(L, "delete");
    char msg[160];
    kinf_object *old = NULL;
    size_t len;
    const char *key;
    kinf_err err;
    int uv;

    lua_settop(L, 2);
    uv = kl_store_begin(L);
    if (!kl_push_key(L, 2, 1, "delete", msg, sizeof(msg)))
        return kl_fail(L, KINF_ENOKEY, msg);
    key = lua_tolstring(L, -1, &len);
    kl_store_check_open(L, ls);
    err = kinf_store_delete(ls->store, key, len, &old);
    unpin(L, uv, old);
    kinf_object_unref(old);
    return kl_store_write_result(L, "delete", err, NULL);
}

static int s_replace(lua_State *L)
{
    kinf_err code;
    lstore *ls = check_writable(L, "replace");
    char msg[320] = "";
    size_t n;
    kl_guard *g;
    kinf_err err;

    kl_check_type(L, 2, 1, "replace", LUA_TTABLE);
    if (!lua_isnoneornil(L, 3) && lua_type(L, 3) != LUA_TSTRING)
        kl_argerror(L, 2, "replace", "resource version string expected, got %s",
                    luaL_typename(L, 3));
    lua_settop(L, 2);
    kl_store_begin(L); /* 3 */
    n = kl_rawlen(L, 2);
    g = kl_push_guard(L); /* 4 */
    g->objs = calloc(n ? n : 1, sizeof(*g->objs));
    if (g->objs == NULL)
        return kl_fail(L, KINF_ENOMEM, NULL);
    lua_createtable(L, 0, (int)n); /* 5: the new pinned table */
    for (size_t i = 0; i < n; i++) {
        kinf_object *obj;
        lua_rawgeti(L, 2, (int)i + 1);
        if (!lua_istable(L, -1))
            return kl_argerror(L, 1, "replace", "item #%d is a %s, expected an object",
                               (int)i + 1, luaL_typename(L, -1));
        obj = kl_to_object(L, -1, 1, "replace", &code, msg, sizeof(msg));
        if (obj == NULL)
            return kl_fail(L, code, lua_pushfstring(L, "item #%d: %s", (int)i + 1, msg));
        g->objs[g->n++] = kinf_object_ref(obj);
        lua_pop(L, 1); /* the box: the guard holds a reference now */
        if (kl_record_of(L, -1) == obj)
            kl_rawsetp(L, 5, obj); /* new_pinned[obj] = item, a table kinformer made */
        else
            lua_pop(L, 1);
    }
    kl_store_check_open(L, ls);
    WITH_STATE(ls, L, err = kinf_store_replace(ls->store, g->objs, g->n, msg, sizeof(msg)));
    kl_guard_release(g);
    if (err == KINF_OK || err == KINF_EINDEX) {
        /* A new uservalue table: the new pinned tables, no key handed out yet. */
        lua_createtable(L, 4, 0);
        lua_pushvalue(L, 5);
        lua_rawseti(L, -2, PINNED);
        lua_rawgeti(L, 3, FNS);
        lua_rawseti(L, -2, FNS);
        lua_rawgeti(L, 3, RESULTS);
        lua_rawseti(L, -2, RESULTS);
        lua_newtable(L);
        set_cache(L, 1, -1);
        lua_rawseti(L, -2, KEYS);
        kl_setuservalue(L, 1);
    }
    return kl_store_write_result(L, "replace", err, msg);
}

/* get's slow path: stack 1 store, 2 key (a string), 3 uservalue table, 4 its KEYS table. */
static int get_slow(lua_State *L, lstore *ls)
{
    size_t len;
    const char *key = lua_tolstring(L, 2, &len);
    kl_guard *g = kl_push_guard(L); /* 5; before taking a reference: pushing can raise */

    g->objs = g->one;
    g->objs[0] = kinf_store_get(ls->store, key, len);
    if (g->objs[0] == NULL) {
        g->objs = NULL;
        lua_pushnil(L);
        return 1;
    }
    g->n = 1;
    push_pinned(L, 3, g->objs[0]);
    kl_guard_release(g);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -2);
    lua_rawset(L, 4); /* keys[key] = table */
    return 1;
}

/* Looks key (a string at 2) up: the table handed out for it before, kept until a write replaces
 * its record, or the record read from the core. */
static int get_key(lua_State *L, lstore *ls)
{
    lua_settop(L, 2);
    kl_getuservalue(L, 1); /* 3 */
    lua_rawgeti(L, 3, KEYS); /* 4 */
    lua_pushvalue(L, 2);
    lua_rawget(L, 4); /* 5 */
    if (!lua_isnil(L, 5))
        return 1;
    lua_settop(L, 4);
    return get_slow(L, ls);
}

static int s_get_by_key(lua_State *L)
{
    lstore *ls = kl_store_self(L, "get_by_key");
    kl_check_lstring(L, 2, 1, "get_by_key", NULL); /* a number becomes its string, in place */
    return get_key(L, ls);
}

/* get's argument check, the hottest in the store: the metatable against the one kept as the
 * function's upvalue instead of luaL_checkudata's registry lookup by name. */
static lstore *check_store_fast(lua_State *L)
{
    lstore *ls = lua_touserdata(L, 1);
    if (ls != NULL && lua_getmetatable(L, 1)) {
        int same = lua_rawequal(L, -1, lua_upvalueindex(1));
        lua_pop(L, 1);
        if (same && ls->store != NULL)
            return ls;
    }
    return kl_store_self(L, "get"); /* raises: not a store, or closed */
}

static int s_get(lua_State *L)
{
    char msg[160];
    lstore *ls = check_store_fast(L);
    if (lua_type(L, 2) == LUA_TSTRING)
        return get_key(L, ls); /* get(key) */
    lua_settop(L, 2);
    if (!kl_push_key(L, 2, 1, "get", msg, sizeof(msg))) /* may run the argument's Lua code */
        return kl_fail(L, KINF_ENOKEY, msg);
    lua_replace(L, 2);
    return get_key(L, kl_store_check_open(L, ls));
}

static int by_index_common(lua_State *L, const char *fname, int sorted_keys)
{
    lstore *ls = kl_store_self(L, fname);
    int uv;

    kl_check_lstring(L, 2, 1, fname, NULL);
    kl_check_lstring(L, 3, 2, fname, NULL);
    lua_settop(L, 3);
    uv = kl_store_begin(L); /* 4 */
    lua_rawgeti(L, uv, RESULTS); /* 5 */
    return kl_results_indexed(L, ls->store, 1, 5, 2, 3, sorted_keys, fname);
}

int kl_store_push_listed(lua_State *L, int idx, int namespace_idx, int keys_only)
{
    kinf_store *s = kl_store_check_open(L, luaL_checkudata(L, idx, KL_STORE_MT))->store;
    int cache;
    idx = kl_absindex(L, idx);
    namespace_idx = namespace_idx ? kl_absindex(L, namespace_idx) : 0;
    kl_getuservalue(L, idx);
    lua_rawgeti(L, -1, RESULTS);
    cache = lua_gettop(L);
    if (namespace_idx == 0)
        return kl_results_all(L, s, idx, cache, keys_only);
    lua_pushliteral(L, KINF_NAMESPACE_INDEX);
    return kl_results_indexed(L, s, idx, cache, lua_gettop(L), namespace_idx, keys_only,
                              keys_only ? "list_keys" : "list");
}

static int s_by_index(lua_State *L)
{
    return by_index_common(L, "by_index", 0);
}

static int s_index_keys(lua_State *L)
{
    return by_index_common(L, "index_keys", 1);
}

static int s_len(lua_State *L)
{
    lstore *ls = kl_store_self(L, "len");
    lua_pushinteger(L, (lua_Integer)kinf_store_len(ls->store));
    return 1;
}

static int s_status(lua_State *L)
{
    lstore *ls = kl_store_self(L, "status");
    char last[256];
    unsigned long errors = kinf_store_index_errors(ls->store, last, sizeof(last));
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)kinf_store_len(ls->store));
    lua_setfield(L, -2, "items");
    lua_pushinteger(L, (lua_Integer)errors);
    lua_setfield(L, -2, "index_errors");
    if (errors) {
        lua_pushstring(L, last);
        lua_setfield(L, -2, "last_index_error");
    }
    return 1;
}

static void store_close(lua_State *L, lstore *ls)
{
    if (ls->store == NULL)
        return;
    luaL_unref(L, LUA_REGISTRYINDEX, ls->fns_ref);
    ls->fns_ref = LUA_NOREF;
    /* A FIFO may keep the C store alive: its index functions must not outlive us. */
    kinf_store_detach_index_functions(ls->store);
    kinf_store_unref(ls->store);
    ls->store = NULL;
    for (size_t i = 0; i < ls->nindexes; i++)
        free(ls->indexes[i]);
    free(ls->indexes);
    ls->indexes = NULL;
    ls->nindexes = 0;
}

static int s_close(lua_State *L)
{
    lstore *ls = kl_check_self(L, KL_STORE_MT, "close");
    if (ls->in_index_fn > 0)
        return luaL_error(L, "kinformer: store:close called from inside one of its index functions "
                             "(the call in progress uses the store: close it once that call returned)");
    store_close(L, ls);
    lua_pushnil(L);
    set_cache(L, 1, -1);
    return 0;
}

static int s_tostring(lua_State *L)
{
    lstore *ls = luaL_checkudata(L, 1, KL_STORE_MT);
    if (ls->store == NULL)
        lua_pushstring(L, "kinformer.store (closed)");
    else
        lua_pushfstring(L, "kinformer.store (%d items)", (int)kinf_store_len(ls->store));
    return 1;
}

int kl_new_store(lua_State *L)
{
    int with_ns = 1;
    lstore *ls;
    kinf_err err;

    if (!lua_isnoneornil(L, 1)) {
        kl_check_type(L, 1, 1, "store", LUA_TTABLE);
        for (lua_pushnil(L); lua_next(L, 1); lua_pop(L, 1)) {
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
            if (strcmp(k, "indexers") == 0) {
                if (!lua_istable(L, -1))
                    kl_argerror(L, 1, "store", "option 'indexers' must be a table");
            } else if (strcmp(k, "namespace_index") == 0) {
                if (!lua_isboolean(L, -1))
                    kl_argerror(L, 1, "store", "option 'namespace_index' must be a boolean");
                with_ns = lua_toboolean(L, -1);
            } else {
                kl_argerror(L, 1, "store", "unknown option '%s'", k);
            }
        }
    }
    lua_settop(L, 1);
    ls = kl_newuserdata(L, sizeof(*ls)); /* 2 */
    memset(ls, 0, sizeof(*ls));
    luaL_setmetatable(L, KL_STORE_MT);
    ls->fns_ref = LUA_NOREF;
    lua_createtable(L, 4, 0);
    lua_newtable(L);
    lua_rawseti(L, -2, PINNED);
    kl_results_new(L);
    lua_rawseti(L, -2, RESULTS);
    lua_newtable(L);
    lua_rawseti(L, -2, KEYS);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    ls->fns_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_rawseti(L, -2, FNS);
    kl_setuservalue(L, 2);
    ls->store = kinf_store_new(with_ns, &err);
    if (ls->store == NULL)
        return kl_fail(L, err, NULL);
    kl_getuservalue(L, 2);
    lua_rawgeti(L, -1, KEYS);
    set_cache(L, 2, -1);
    lua_pop(L, 2);
    if (lua_istable(L, 1)) {
        lua_pushliteral(L, "indexers");
        lua_rawget(L, 1); /* raw, as the options were checked */
        if (lua_istable(L, -1)) {
            int rc = kl_store_add_indexer_table(L, ls, -1, "store", 1);
            if (!lua_toboolean(L, -rc))
                return rc;
        }
        lua_settop(L, 2);
    }
    return 1;
}

static int s_gc(lua_State *L)
{
    store_close(L, luaL_checkudata(L, 1, KL_STORE_MT));
    lua_pushnil(L);
    set_cache(L, 1, -1);
    return 0;
}

static const luaL_Reg METHODS[] = {
    {"add", s_add},
    {"update", s_update},
    {"delete", s_delete},
    {"replace", s_replace},
    {"get", s_get},
    {"get_by_key", s_get_by_key},
    {"list", kl_store_list},
    {"list_keys", kl_store_list_keys},
    {"by_index", s_by_index},
    {"index_keys", s_index_keys},
    {"index", kl_store_index},
    {"list_index_func_values", kl_store_list_index_func_values},
    {"add_indexers", kl_store_add_indexers},
    {"len", s_len},
    {"status", s_status},
    {"close", s_close},
    {NULL, NULL},
};

static const luaL_Reg META[] = {
    {"__gc", s_gc},
    {"__len", s_len},
    {"__tostring", s_tostring},
    {NULL, NULL},
};

/* get and get_by_key: the hit path in Lua, the C function for everything else. */
static const char GET_CHUNK[] =
    "local caches, cget = ...\n"
    "return function(self, key)\n"
    "  local keys = caches[self]\n"
    "  if keys then\n"
    "    local obj = keys[key]\n"
    "    if obj ~= nil then return obj end\n"
    "  end\n"
    "  return cget(self, key)\n"
    "end\n";

/* Pushes GET_CHUNK's function over the C function at the top, which it pops. */
static void push_lua_get(lua_State *L)
{
    if (luaL_loadbuffer(L, GET_CHUNK, sizeof(GET_CHUNK) - 1, "=kinformer.store") != 0)
        lua_error(L);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &CACHES_KEY);
    lua_pushvalue(L, -3);
    lua_call(L, 2, 1);
    lua_remove(L, -2);
}

void kl_open_store(lua_State *L)
{
    kl_new_class(L, KL_STORE_MT, METHODS, META);
    /* CACHES, weak-keyed: an entry never keeps its store alive. */
    kl_rawgetp(L, LUA_REGISTRYINDEX, &CACHES_KEY);
    if (lua_isnil(L, -1)) {
        lua_newtable(L);
        lua_createtable(L, 0, 1);
        lua_pushliteral(L, "k");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        kl_rawsetp(L, LUA_REGISTRYINDEX, &CACHES_KEY);
    }
    lua_pop(L, 1);
    /* get with the metatable as its upvalue (check_store_fast), and get_by_key, each under its
     * Lua hit path. */
    luaL_getmetatable(L, KL_STORE_MT);
    lua_getfield(L, -1, "__index");
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, s_get, 1);
    push_lua_get(L);
    lua_setfield(L, -2, "get");
    lua_pushcfunction(L, s_get_by_key);
    push_lua_get(L);
    lua_setfield(L, -2, "get_by_key");
    lua_pop(L, 2);
}
