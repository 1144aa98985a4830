/*
 * lua_store_index.c - a store's Lua index functions and the methods that add and use them:
 * store:add_indexers (and the store constructor's indexers), store:index and
 * store:list_index_func_values.
 *
 * Index functions are called by the core during writes (and store:index) on this thread; each
 * call runs inside lua_pcall, so a raising index function can never unwind through the core
 * while it holds its writer lock. Its failure is logged, counted in status(), and returned as
 * the write's second result; the object is stored without that index. A function reads the
 * record's own table (kl_push_object), the one get hands out, never the table written.
 * Ownership: each lindex is owned by its store (ls->indexes), its function by the store's FNS
 * table; the core holds the lindex as the index function's ud.
 */
#include <stdlib.h>
#include <string.h>

#include "lua_store_impl.h"

typedef struct index_call {
    lindex *ix;
    kinf_object *obj;
    kinf_values *out;
    char *errbuf;
    size_t errlen;
} index_call;

/* Protected: fn(obj) -> list of strings, copied into call->out. */
static int index_call_protected(lua_State *L)
{
    index_call *c = lua_touserdata(L, 1);
    lstore *ls = c->ix->owner;
    kinf_str stack_vals[8], *vals = stack_vals;
    size_t n;

    lua_rawgeti(L, LUA_REGISTRYINDEX, ls->fns_ref);
    lua_rawgeti(L, -1, c->ix->slot);
    kl_push_object(L, c->obj);
    lua_call(L, 1, 1);
    if (lua_isnil(L, -1))
        return 0;
    if (!lua_istable(L, -1)) {
        kinf_errmsg(c->errbuf, c->errlen, "returned a %s, expected a list of strings%s",
                    luaL_typename(L, -1),
                    lua_type(L, -1) == LUA_TSTRING ? " (wrap it: { value })" : "");
        return 0;
    }
    n = kl_rawlen(L, -1);
    if (n > 8) {
        vals = lua_newuserdata(L, n * sizeof(*vals)); /* collected with the call's stack */
        lua_insert(L, -2);
    }
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (int)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING) {
            kinf_errmsg(c->errbuf, c->errlen, "value #%d is a %s, expected a string",
                        (int)i + 1, luaL_typename(L, -1));
            return 0;
        }
        vals[i].ptr = lua_tolstring(L, -1, &vals[i].len);
        lua_pop(L, 1); /* the string stays alive in the result table */
    }
    c->out = kinf_values_new(vals, n);
    if (c->out == NULL)
        kinf_errmsg(c->errbuf, c->errlen, "out of memory");
    return 0;
}

static kinf_err lua_index_fn(void *ud, kinf_object *obj, kinf_values **out, char *errbuf,
                             size_t errlen)
{
    lindex *ix = ud;
    lstore *ls = ix->owner; /* lives: close is refused while in_index_fn */
    lua_State *L = ls->L;
    index_call c = {ix, obj, NULL, errbuf, errlen};
    int top = lua_gettop(L), rc;

    *out = NULL;
    errbuf[0] = '\0';
    if (!lua_checkstack(L, 8)) {
        kinf_errmsg(errbuf, errlen, "Lua stack overflow");
        return KINF_EINDEX;
    }
    lua_pushcfunction(L, index_call_protected);
    lua_pushlightuserdata(L, &c);
    ls->in_index_fn++;
    rc = lua_pcall(L, 1, 0, 0);
    ls->in_index_fn--;
    if (rc != LUA_OK) {
        kinf_errmsg(errbuf, errlen, "raised: %s", kl_error_text(L, -1));
        lua_settop(L, top);
        return KINF_EINDEX;
    }
    lua_settop(L, top);
    if (errbuf[0]) {
        kinf_values_free(c.out);
        return KINF_EINDEX;
    }
    *out = c.out;
    return KINF_OK;
}

int kl_store_index(lua_State *L)
{
    kinf_err code;
    lstore *ls = kl_store_self(L, "index");
    const char *index = kl_check_lstring(L, 2, 1, "index", NULL);
    char msg[320] = "";
    kinf_object *obj;
    kl_guard *g;
    kinf_err err;
    int uv;

    lua_settop(L, 3);
    uv = kl_store_begin(L); /* 4 */
    if (!kinf_store_has_index(ls->store, index))
        return kl_argerror(L, 1, "index", "index '%s' does not exist", index);
    obj = kl_to_object(L, 3, 2, "index", &code, msg, sizeof(msg)); /* 5: box; may run Lua code */
    if (obj == NULL)
        return kl_fail(L, code, msg);
    kl_store_check_open(L, ls);
    g = kl_push_guard(L);
    WITH_STATE(ls, L,
               err = kinf_store_index(ls->store, index, obj, &g->objs, &g->n, msg, sizeof(msg)));
    if (err == KINF_ENOTFOUND)
        return kl_argerror(L, 1, "index", "index '%s' does not exist", index);
    if (err == KINF_EINDEX)
        return kl_fail(L, err, lua_pushfstring(L, "index '%s' failed: %s", index, msg));
    if (err != KINF_OK)
        return kl_fail(L, err, msg);
    return kl_store_push_guarded(L, uv, g, 0);
}

int kl_store_list_index_func_values(lua_State *L)
{
    lstore *ls = kl_store_self(L, "list_index_func_values");
    const char *index = kl_check_lstring(L, 2, 1, "list_index_func_values", NULL);
    kl_guard *g = kl_push_guard(L);
    kinf_values *vals = NULL;
    kinf_err err = kinf_store_index_values(ls->store, index, &vals);

    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    g->mem = vals;
    lua_createtable(L, vals ? (int)vals->n : 0, 0);
    for (size_t i = 0; vals != NULL && i < vals->n; i++) {
        lua_pushlstring(L, vals->v[i].ptr, vals->v[i].len);
        lua_rawseti(L, -2, (int)i + 1);
    }
    kl_guard_release(g);
    return 1;
}

/*
 * Adds the indexers of the table at t ({ name = fn }) on behalf of Lua function fname: true,
 * or the write's failure. Bad names and values raise naming fname's argument #1; a name taken
 * already is nil, msg, "EEXIST" (add_indexers) or an argument error (the store constructor,
 * conflict_raises: its indexers can only clash with its own namespace index).
 */
int kl_store_add_indexer_table(lua_State *L, lstore *ls, int t, const char *fname,
                               int conflict_raises)
{
    kinf_indexer_def *defs;
    lindex **grown;
    char msg[320] = "";
    size_t n = 0, k = 0;
    int fns;
    kinf_err err;

    t = kl_absindex(L, t);
    for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            return kl_argerror(L, 1, fname, "indexer names must be strings, got %s",
                               luaL_typename(L, -2));
        if (!lua_isfunction(L, -1))
            return kl_argerror(L, 1, fname, "indexer '%s' must be a function, got %s",
                               lua_tostring(L, -2), luaL_typename(L, -1));
        if (kinf_store_has_index(ls->store, lua_tostring(L, -2))) {
            const char *what = lua_pushfstring(L, "indexer conflict: %s", lua_tostring(L, -2));
            if (conflict_raises)
                return kl_argerror(L, 1, fname, "%s", what);
            return kl_fail(L, KINF_EEXIST, what);
        }
        n++;
    }
    if (n == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    /* Userdata-backed scratch: collected if anything below raises. */
    defs = lua_newuserdata(L, n * sizeof(*defs));
    grown = realloc(ls->indexes, (ls->nindexes + n) * sizeof(*grown));
    if (grown == NULL)
        return kl_fail(L, KINF_ENOMEM, NULL);
    ls->indexes = grown;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ls->fns_ref);
    fns = lua_gettop(L);
    for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) {
        lindex *ix = malloc(sizeof(*ix));
        if (ix == NULL)
            break;
        ix->owner = ls;
        ix->slot = ++ls->next_slot;
        ls->indexes[ls->nindexes + k] = ix;
        defs[k].name = lua_tostring(L, -2); /* alive: a key of the argument table */
        defs[k].fn = lua_index_fn;
        defs[k].ud = ix;
        lua_pushvalue(L, -1);
        lua_rawseti(L, fns, ix->slot);
        k++;
    }
    if (k == n) {
        WITH_STATE(ls, L, err = kinf_store_add_indexers(ls->store, defs, n, msg, sizeof(msg)));
    } else {
        lua_settop(L, fns);
        err = KINF_ENOMEM;
    }
    if (err == KINF_OK || err == KINF_EINDEX) {
        ls->nindexes += n;
    } else {
        for (size_t i = 0; i < k; i++) {
            lua_pushnil(L);
            lua_rawseti(L, fns, ls->indexes[ls->nindexes + i]->slot);
            free(ls->indexes[ls->nindexes + i]);
        }
        if (err == KINF_EEXIST && conflict_raises)
            return kl_argerror(L, 1, fname, "%s", msg);
    }
    return kl_store_write_result(L, fname, err, msg);
}

int kl_store_add_indexers(lua_State *L)
{
    lstore *ls = kl_store_self(L, "add_indexers");
    kl_check_type(L, 2, 1, "add_indexers", LUA_TTABLE);
    lua_settop(L, 2);
    return kl_store_add_indexer_table(L, ls, 2, "add_indexers", 0);
}
