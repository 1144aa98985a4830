/*
 * lua_fifo.c - kinformer.delta_fifo{ known_objects = store, emit_replaced = bool, transform = fn }:
 * the DeltaFIFO, thin over delta_fifo.c.
 *
 * The userdata's uservalue table keeps the known-objects store userdata alive (its Lua index
 * functions must outlive the FIFO's use of the store) and the transform function.
 *
 * transform(obj) -> obj runs here, on the Lua thread, for every object a Lua caller enqueues
 * (add, update, delete of a non-tombstone, replace items), never for tombstones or resync's
 * Sync deltas (client-go's rule). pop(process, timeout) runs process under the FIFO lock inside
 * lua_pcall; a FIFO method called from process is refused with an error (it would deadlock).
 */
#include <stdlib.h>
#include <string.h>

#include "lua_kinf.h"
#include "lua_store.h"

#define KL_FIFO_MT "kinformer.delta_fifo"

typedef struct lfifo {
    kinf_fifo *fifo; /* one reference; NULL after __gc */
    int in_process;  /* pop's process function is running (Lua thread only) */
} lfifo;

kinf_fifo *kl_test_fifo(lua_State *L, int idx)
{
    lfifo *lf = luaL_testudata(L, idx, KL_FIFO_MT);
    return lf ? lf->fifo : NULL;
}

static kinf_fifo *check_fifo(lua_State *L)
{
    lfifo *lf = luaL_checkudata(L, 1, KL_FIFO_MT);
    if (lf->fifo == NULL)
        luaL_error(L, "kinformer: delta_fifo is freed");
    return lf->fifo;
}

static int busy(lua_State *L, const char *fname)
{
    return luaL_error(L, "kinformer: fifo:%s called from inside pop's process function", fname);
}

/* For methods whose core call cannot report re-entry (it returns a value, or does nothing
 * without known objects): refuse them while pop's process function runs. */
static kinf_fifo *check_idle(lua_State *L, const char *fname)
{
    kinf_fifo *f = check_fifo(L);
    if (((lfifo *)lua_touserdata(L, 1))->in_process)
        busy(L, fname);
    return f;
}

/* Replaces the value at idx with transform(value) when a transform is set. 0 + message pushed
 * on failure. */
static int apply_transform(lua_State *L, int idx)
{
    idx = kl_absindex(L, idx);
    kl_getuservalue(L, 1);
    lua_getfield(L, -1, "transform");
    lua_remove(L, -2);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 1;
    }
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        char what[256];
        kl_error_text(L, -1, what, sizeof(what));
        lua_pushfstring(L, "transform failed: %s", what);
        return 0;
    }
    if (!lua_istable(L, -1)) {
        lua_pushfstring(L, "transform returned a %s, expected an object", luaL_typename(L, -1));
        return 0;
    }
    lua_replace(L, idx);
    return 1;
}

static int enqueue(lua_State *L, const char *fname, kinf_err (*op)(kinf_fifo *, kinf_object *))
{
    kinf_fifo *f = check_fifo(L);
    char msg[320];
    kinf_object *obj;
    kinf_err err;

    lua_settop(L, 2);
    if (!lua_istable(L, 2))
        return kl_argerror(L, 1, fname, "object expected, got %s", luaL_typename(L, 2));
    if (!kl_is_tombstone(L, 2) && !apply_transform(L, 2))
        return kl_fail(L, KINF_EINVAL, lua_tostring(L, -1));
    obj = kl_to_object(L, 2, 1, fname, msg, sizeof(msg));
    if (obj == NULL)
        return kl_fail(L, KINF_ENOKEY, msg);
    err = op(f, obj);
    if (err == KINF_EBUSY)
        return busy(L, fname);
    if (err == KINF_EINVAL)
        return kl_argerror(L, 1, fname, "a tombstone can only be deleted");
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

static int f_add(lua_State *L)
{
    return enqueue(L, "add", kinf_fifo_add);
}

static int f_update(lua_State *L)
{
    return enqueue(L, "update", kinf_fifo_update);
}

static int f_delete(lua_State *L)
{
    return enqueue(L, "delete", kinf_fifo_delete);
}

static int f_replace(lua_State *L)
{
    kinf_fifo *f = check_fifo(L);
    char msg[320];
    const char *rv;
    kl_guard *g;
    size_t n;
    kinf_err err;

    luaL_checktype(L, 2, LUA_TTABLE);
    rv = luaL_optstring(L, 3, "");
    lua_settop(L, 3);
    n = kl_rawlen(L, 2);
    g = kl_push_guard(L); /* 4 */
    g->objs = calloc(n ? n : 1, sizeof(*g->objs));
    if (g->objs == NULL)
        return kl_fail(L, KINF_ENOMEM, NULL);
    for (size_t i = 0; i < n; i++) {
        kinf_object *obj;
        lua_rawgeti(L, 2, (int)i + 1);
        if (!lua_istable(L, -1) || kl_is_tombstone(L, -1))
            return kl_argerror(L, 1, "replace", "item #%d is a %s, expected an object",
                               (int)i + 1, kl_is_tombstone(L, -1) ? "tombstone"
                                                                   : luaL_typename(L, -1));
        if (!apply_transform(L, -1))
            return kl_fail(L, KINF_EINVAL, lua_tostring(L, -1));
        obj = kl_to_object(L, -1, 1, "replace", msg, sizeof(msg));
        if (obj == NULL)
            return kl_fail(L, KINF_ENOKEY, lua_pushfstring(L, "item #%d: %s", (int)i + 1, msg));
        g->objs[g->n++] = kinf_object_ref(obj);
        lua_pop(L, 2);
    }
    err = kinf_fifo_replace(f, g->objs, g->n, rv);
    kl_guard_release(g);
    if (err == KINF_EBUSY)
        return busy(L, "replace");
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

static int f_resync(lua_State *L)
{
    kinf_err err = kinf_fifo_resync(check_idle(L, "resync"));
    if (err == KINF_EBUSY)
        return busy(L, "resync");
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- deltas as Lua tables ---- */

static const char *const DELTA_NAMES[] = {"Added", "Updated", "Deleted", "Replaced", "Sync"};

/* Parses a type name ("Added", ...); -1 when unknown. */
static int delta_type(const char *name)
{
    for (int i = 0; i < 5; i++) {
        if (strcmp(name, DELTA_NAMES[i]) == 0)
            return i;
    }
    return -1;
}

/* Pushes the deltas as { {type = "Added", object = obj}, ... }. */
static void push_deltas(lua_State *L, const kinf_deltas *d)
{
    luaL_checkstack(L, 4, "kinformer: pushing deltas");
    lua_createtable(L, (int)d->n, 0);
    for (size_t i = 0; i < d->n; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, kinf_delta_type_name(d->v[i].type));
        lua_setfield(L, -2, "type");
        kl_push_object(L, d->v[i].obj);
        lua_setfield(L, -2, "object");
        lua_rawseti(L, -2, (int)i + 1);
    }
}

/* ---- pop ---- */

typedef struct pop_ctx {
    lua_State *L;
    lfifo *lf;
    int process;         /* stack index of the process function */
    int raised;          /* process raised: its error is on the stack */
    const kinf_deltas *deltas;
    int is_initial;
} pop_ctx;

/* Protected: builds the deltas table and calls process(deltas, is_initial). Returns the table
 * and process's first result. */
static int pop_protected(lua_State *L)
{
    pop_ctx *c = lua_touserdata(L, 1);
    push_deltas(L, c->deltas); /* 3 */
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_pushboolean(L, c->is_initial);
    lua_call(L, 2, 1); /* 4 */
    return 2;
}

static int pop_process(void *ud, const kinf_deltas *deltas, int is_initial)
{
    pop_ctx *c = ud;
    lua_State *L = c->L;
    int requeue, rc;

    c->deltas = deltas;
    c->is_initial = is_initial;
    lua_pushcfunction(L, pop_protected);
    lua_pushlightuserdata(L, c);
    lua_pushvalue(L, c->process);
    c->lf->in_process = 1;
    rc = lua_pcall(L, 2, 2, 0);
    c->lf->in_process = 0;
    if (rc != LUA_OK) {
        c->raised = 1;
        return KINF_EINVAL;
    }
    kl_push_requeue(L);
    requeue = lua_rawequal(L, -1, -2);
    lua_pop(L, 2); /* leaves the deltas table */
    return requeue ? KINF_FIFO_REQUEUE : KINF_OK;
}

static int f_pop(lua_State *L)
{
    kinf_fifo *f = check_fifo(L);
    pop_ctx c = {L, lua_touserdata(L, 1), 2, 0, NULL, 0};
    double timeout = -1;
    int has_process = !lua_isnoneornil(L, 2);
    kl_guard *g;
    kinf_err err;
    int initial = 0;

    if (has_process)
        luaL_checktype(L, 2, LUA_TFUNCTION);
    if (!lua_isnoneornil(L, 3)) {
        timeout = luaL_checknumber(L, 3);
        if (timeout < 0)
            kl_argerror(L, 2, "pop", "timeout must be >= 0 seconds, got %f", timeout);
    }
    lua_settop(L, 3);
    luaL_checkstack(L, 10, "kinformer: pop");
    g = kl_push_guard(L); /* 4 */
    err = kinf_fifo_pop(f, timeout, has_process ? pop_process : NULL, &c, &g->deltas, &initial);
    if (c.raised) {
        kl_guard_release(g);
        return lua_error(L);
    }
    switch (err) {
    case KINF_OK:
        break;
    case KINF_ECLOSED:
        return kl_fail(L, err, "closed");
    case KINF_ETIMEDOUT:
        return kl_fail(L, err, "timeout");
    case KINF_EBUSY:
        return busy(L, "pop");
    default:
        kl_guard_release(g);
        return kl_fail(L, err, NULL);
    }
    if (!has_process)
        push_deltas(L, &g->deltas); /* else process's table is on top already */
    kl_guard_release(g);
    lua_pushboolean(L, initial);
    return 2;
}

/* ---- the rest ---- */

static int f_add_if_not_present(lua_State *L)
{
    kinf_fifo *f = check_fifo(L);
    char msg[320];
    kl_guard *g;
    size_t n;
    kinf_err err;

    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    n = kl_rawlen(L, 2);
    if (n == 0)
        return kl_argerror(L, 1, "add_if_not_present", "deltas must not be empty");
    g = kl_push_guard(L); /* 3 */
    g->deltas.v = calloc(n, sizeof(kinf_delta));
    if (g->deltas.v == NULL)
        return kl_fail(L, KINF_ENOMEM, NULL);
    g->deltas.cap = n;
    for (size_t i = 0; i < n; i++) {
        kinf_object *obj;
        int type;
        lua_rawgeti(L, 2, (int)i + 1);
        if (!lua_istable(L, -1))
            return kl_argerror(L, 1, "add_if_not_present", "delta #%d is not a table", (int)i + 1);
        lua_getfield(L, -1, "type");
        type = lua_type(L, -1) == LUA_TSTRING ? delta_type(lua_tostring(L, -1)) : -1;
        if (type < 0)
            return kl_argerror(L, 1, "add_if_not_present", "delta #%d has no valid type",
                               (int)i + 1);
        lua_getfield(L, -2, "object");
        obj = kl_to_object(L, -1, 1, "add_if_not_present", msg, sizeof(msg));
        if (obj == NULL)
            return kl_fail(L, KINF_ENOKEY, msg);
        g->deltas.v[g->deltas.n].type = (kinf_delta_type)type;
        g->deltas.v[g->deltas.n].obj = kinf_object_ref(obj);
        g->deltas.n++;
        lua_settop(L, 3);
    }
    err = kinf_fifo_add_if_not_present(f, &g->deltas);
    kl_guard_release(g);
    if (err == KINF_EBUSY)
        return busy(L, "add_if_not_present");
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

static int list_common(lua_State *L, int keys_only)
{
    kinf_fifo *f = check_fifo(L);
    kl_guard *g;
    kinf_err err;

    lua_settop(L, 1);
    g = kl_push_guard(L);
    err = kinf_fifo_list(f, &g->objs, &g->n);
    if (err == KINF_EBUSY)
        return busy(L, keys_only ? "list_keys" : "list");
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    lua_createtable(L, (int)g->n, 0);
    for (size_t i = 0; i < g->n; i++) {
        if (keys_only)
            lua_pushlstring(L, g->objs[i]->key, g->objs[i]->key_len);
        else
            kl_push_object(L, g->objs[i]);
        lua_rawseti(L, -2, (int)i + 1);
    }
    kl_guard_release(g);
    return 1;
}

static int f_list(lua_State *L)
{
    return list_common(L, 0);
}

static int f_list_keys(lua_State *L)
{
    return list_common(L, 1);
}

static int f_get_by_key(lua_State *L)
{
    kinf_fifo *f = check_fifo(L);
    size_t len;
    const char *key = luaL_checklstring(L, 2, &len);
    kl_guard *g;
    kinf_err err;

    lua_settop(L, 2);
    g = kl_push_guard(L);
    err = kinf_fifo_get_by_key(f, key, len, &g->deltas);
    if (err == KINF_ENOTFOUND) {
        lua_pushnil(L);
        return 1;
    }
    if (err == KINF_EBUSY)
        return busy(L, "get_by_key");
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    push_deltas(L, &g->deltas);
    kl_guard_release(g);
    return 1;
}

static int f_get(lua_State *L)
{
    char msg[160];
    check_fifo(L);
    lua_settop(L, 2);
    if (!kl_push_key(L, 2, 1, "get", msg, sizeof(msg)))
        return kl_fail(L, KINF_ENOKEY, msg);
    lua_replace(L, 2);
    return f_get_by_key(L);
}

static int f_has_synced(lua_State *L)
{
    lua_pushboolean(L, kinf_fifo_has_synced(check_idle(L, "has_synced")));
    return 1;
}

static int f_close(lua_State *L)
{
    kinf_fifo_close(check_idle(L, "close"));
    return 0;
}

static int f_is_closed(lua_State *L)
{
    lua_pushboolean(L, kinf_fifo_is_closed(check_idle(L, "is_closed")));
    return 1;
}

static int f_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)kinf_fifo_len(check_idle(L, "len")));
    return 1;
}

static int f_gc(lua_State *L)
{
    lfifo *lf = luaL_checkudata(L, 1, KL_FIFO_MT);
    kinf_fifo_unref(lf->fifo);
    lf->fifo = NULL;
    return 0;
}

int kl_new_fifo(lua_State *L)
{
    kinf_store *known = NULL;
    unsigned flags = 0;
    lfifo *lf;
    kinf_err err;

    lua_settop(L, 1);
    lua_createtable(L, 0, 2); /* 2: the uservalue */
    if (!lua_isnil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        for (lua_pushnil(L); lua_next(L, 1); lua_pop(L, 1)) {
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
            if (strcmp(k, "known_objects") == 0) {
                known = kl_test_store(L, -1);
                if (known == NULL)
                    kl_argerror(L, 1, "delta_fifo",
                                "option 'known_objects' must be an open kinformer.store");
                lua_pushvalue(L, -1);
                lua_setfield(L, 2, "known");
            } else if (strcmp(k, "emit_replaced") == 0) {
                if (!lua_isboolean(L, -1))
                    kl_argerror(L, 1, "delta_fifo", "option 'emit_replaced' must be a boolean");
                flags |= lua_toboolean(L, -1) ? KINF_FIFO_EMIT_REPLACED : 0;
            } else if (strcmp(k, "transform") == 0) {
                if (!lua_isfunction(L, -1))
                    kl_argerror(L, 1, "delta_fifo", "option 'transform' must be a function");
                lua_pushvalue(L, -1);
                lua_setfield(L, 2, "transform");
            } else {
                kl_argerror(L, 1, "delta_fifo", "unknown option '%s'", k);
            }
        }
    }
    lf = kl_newuserdata(L, sizeof(*lf)); /* 3 */
    lf->fifo = NULL;
    lf->in_process = 0;
    luaL_setmetatable(L, KL_FIFO_MT);
    lua_pushvalue(L, 2);
    kl_setuservalue(L, 3);
    lf->fifo = kinf_fifo_new(known, flags, &err);
    if (lf->fifo == NULL)
        return kl_fail(L, err, NULL);
    return 1;
}

static const luaL_Reg METHODS[] = {
    {"add", f_add},
    {"update", f_update},
    {"delete", f_delete},
    {"replace", f_replace},
    {"resync", f_resync},
    {"pop", f_pop},
    {"add_if_not_present", f_add_if_not_present},
    {"list", f_list},
    {"list_keys", f_list_keys},
    {"get", f_get},
    {"get_by_key", f_get_by_key},
    {"has_synced", f_has_synced},
    {"close", f_close},
    {"is_closed", f_is_closed},
    {"len", f_len},
    {NULL, NULL},
};

static const luaL_Reg META[] = {
    {"__gc", f_gc},
    {"__len", f_len},
    {NULL, NULL},
};

void kl_open_fifo(lua_State *L)
{
    kl_new_class(L, KL_FIFO_MT, METHODS, META);
}
