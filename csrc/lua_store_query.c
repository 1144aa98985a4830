/*
 * lua_store_query.c - store:list(opts) and store:list_keys(opts): reading the cache like
 * controller-runtime's client, thin over kinf_store_select (store_select.c) and the label
 * selector (labelselector.c). Options:
 *   namespace = "ns"                  only that namespace ("" or nil: every namespace)
 *   label_selector = "app=web,tier"   kubectl's -l syntax, matched in C against each record
 *   index = { name = "value", ... }   objects whose index `name` holds `value` (all of them)
 *
 * Options are read raw (lua_next, lua_rawget): no metamethod of theirs runs, so no Lua code can
 * close the store between the check and the read.
 * Every check runs before the store is read: a wrong type, an unknown option or index and a bad
 * selector raise at the caller's line (a selector with apimachinery's message and the byte
 * position, 1-based). The selector is parsed once per call; candidates come from the
 * narrowest index set and only those that match are pushed, from the store's table cache
 * (lua_store.c), so what does not match is never decoded.
 */
#include <string.h>

#include "labelselector.h"
#include "lua_kinf.h"
#include "lua_store.h"
#include "store.h"

#define SELECTOR_EXCERPT 120 /* bytes of a bad selector quoted in the error */

static int match_labels(void *ud, const kinf_object *obj)
{
    return kinf_labelselector_matches(ud, obj);
}

/* Raises "bad argument #1 to 'fname' (label_selector "..." at position N: message)". */
static int selector_error(lua_State *L, const char *fname, const char *sel, size_t len,
                          size_t pos, const char *msg)
{
    int cut = len > SELECTOR_EXCERPT;
    lua_pushlstring(L, sel, cut ? SELECTOR_EXCERPT - 3 : len);
    return kl_argerror(L, 1, fname, "label_selector \"%s%s\" at position %d: %s",
                       lua_tostring(L, -1), cut ? "..." : "", (int)pos + 1, msg);
}

void kl_read_list_options(lua_State *L, const char *fname,
                          int (*has_index)(void *ud, const char *name), void *ud,
                          kinf_store_query *q, const char **selector, size_t *selector_len)
{
    size_t nmatches = 0, k = 0;
    kinf_index_match *m;

    for (lua_pushnil(L); lua_next(L, 2); lua_pop(L, 1)) {
        const char *opt = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (opt != NULL && strcmp(opt, "namespace") == 0) {
            if (lua_type(L, -1) != LUA_TSTRING)
                kl_argerror(L, 1, fname, "option 'namespace' must be a string, got %s",
                            luaL_typename(L, -1));
            q->namespace_.ptr = lua_tolstring(L, -1, &q->namespace_.len);
        } else if (opt != NULL && strcmp(opt, "label_selector") == 0) {
            if (lua_type(L, -1) != LUA_TSTRING)
                kl_argerror(L, 1, fname, "option 'label_selector' must be a string, got %s",
                            luaL_typename(L, -1));
            *selector = lua_tolstring(L, -1, selector_len);
        } else if (opt != NULL && strcmp(opt, "index") == 0) {
            if (!lua_istable(L, -1))
                kl_argerror(L, 1, fname, "option 'index' must be a table { name = value }, got %s",
                            luaL_typename(L, -1));
        } else if (opt != NULL) {
            kl_argerror(L, 1, fname, "unknown option '%s'", opt);
        } else {
            kl_argerror(L, 1, fname, "option names must be strings, got %s",
                        luaL_typename(L, -2));
        }
    }
    lua_pushliteral(L, "index");
    lua_rawget(L, 2); /* 3; raw, as the loop above: an __index never runs */
    if (!lua_istable(L, 3))
        return;
    for (lua_pushnil(L); lua_next(L, 3); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            kl_argerror(L, 1, fname, "option 'index': index names must be strings, got %s",
                        luaL_typename(L, -2));
        if (lua_type(L, -1) != LUA_TSTRING)
            kl_argerror(L, 1, fname, "option 'index': the value for '%s' must be a string, got %s",
                        lua_tostring(L, -2), luaL_typename(L, -1));
        if (!has_index(ud, lua_tostring(L, -2)))
            kl_argerror(L, 1, fname, "index '%s' does not exist", lua_tostring(L, -2));
        nmatches++;
    }
    if (nmatches == 0)
        return;
    m = lua_newuserdata(L, nmatches * sizeof(*m)); /* 4: collected with the call */
    for (lua_pushnil(L); lua_next(L, 3) && k < nmatches; lua_pop(L, 1)) {
        m[k].index = lua_tostring(L, -2);
        m[k].value.ptr = lua_tolstring(L, -1, &m[k].value.len);
        k++;
    }
    lua_settop(L, 4);
    q->matches = m;
    q->nmatches = k;
}

static int store_has_index(void *ud, const char *name)
{
    return kinf_store_has_index(ud, name);
}

int kl_check_list_args(lua_State *L, const char *fname)
{
    for (int i = lua_gettop(L); i > 2; i--) {
        if (!lua_isnil(L, i))
            kl_argerror(L, i - 1, fname, "no more arguments expected, got %s",
                        luaL_typename(L, i));
    }
    lua_settop(L, 2);
    if (!lua_isnil(L, 2) && !lua_istable(L, 2))
        kl_argerror(L, 1, fname, "options table expected, got %s", luaL_typename(L, 2));
    return !lua_isnil(L, 2);
}

kinf_err kl_parse_selector(lua_State *L, const char *fname, const char *selector, size_t len,
                           kl_guard *g, kinf_labelselector **out)
{
    kinf_labelselector *sel = NULL;
    size_t errpos;
    char msg[1024];
    kinf_err err = kinf_labelselector_parse(selector, len, &sel, &errpos, msg, sizeof(msg));
    *out = NULL;
    if (err == KINF_EINVAL)
        selector_error(L, fname, selector, len, errpos, msg);
    if (err != KINF_OK)
        return err;
    g->mem = sel;
    if (kinf_labelselector_len(sel) > 0)
        *out = sel;
    return KINF_OK;
}

static int list_common(lua_State *L, const char *fname, int keys_only)
{
    kinf_store *s = kl_check_store(L, fname);
    kinf_store_query q;
    const char *selector = NULL;
    size_t selector_len = 0;
    kl_guard *g;
    kinf_err err;

    memset(&q, 0, sizeof(q));
    if (kl_check_list_args(L, fname))
        kl_read_list_options(L, fname, store_has_index, s, &q, &selector, &selector_len);
    /* Everything, or one namespace: the arrays the store keeps until they change. */
    if (selector == NULL && q.nmatches == 0) {
        if (q.namespace_.len == 0)
            return kl_store_push_listed(L, 1, 0, keys_only);
        if (kinf_store_has_index(s, KINF_NAMESPACE_INDEX)) {
            lua_pushliteral(L, "namespace");
            lua_rawget(L, 2);
            return kl_store_push_listed(L, 1, -1, keys_only);
        }
    }
    g = kl_push_guard(L); /* owns the parsed selector and the results from here on */
    if (selector != NULL) {
        kinf_labelselector *sel;
        err = kl_parse_selector(L, fname, selector, selector_len, g, &sel);
        if (err != KINF_OK)
            return kl_fail(L, err, NULL);
        if (sel != NULL) {
            q.filter = match_labels;
            q.ud = sel;
        }
    }
    err = kinf_store_select(s, &q, &g->objs, &g->n, NULL);
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    return kl_store_push_objects(L, 1, g, keys_only);
}

int kl_store_list(lua_State *L)
{
    return list_common(L, "list", 0);
}

int kl_store_list_keys(lua_State *L)
{
    return list_common(L, "list_keys", 1);
}
