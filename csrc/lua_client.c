/*
 * lua_client.c - kinformer.core.client{...} and client:reflector{...}: thin over client.c and
 * reflector.c. Resource names are resolved to paths in Lua (lua/kinformer/init.lua); this file
 * takes the path as given.
 *
 * core.client(opts [, from_config]): wrong argument types, unknown option names and (by default)
 * bad option values raise at the caller's line; with from_config, bad values are data (they came
 * from a kubeconfig) and come back as nil, message, "EINVAL". Other failures: nil, message, code.
 *
 * A reflector userdata keeps its client and FIFO userdata alive through its uservalue. Its
 * __gc stops it (joining the I/O thread's detach), so a forgotten reflector never keeps
 * watching; the client's I/O thread ends with the last reference to the client.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "lua_client.h"
#include "lua_kinf.h"
#include "reflector.h"
#include "request.h"

#define CLIENT_MT "kinformer.client"
#define REFLECTOR_MT "kinformer.reflector"
/* Whether lists ask for gzip when the option is not given (docs/reflector.md says why; the
 * figures behind it are in bench/README.md). */
#define KL_GZIP_DEFAULT 0

typedef struct lclient {
    kinf_client *client;
} lclient;

typedef struct lreflector {
    kinf_reflector *r;
    kinf_client *client; /* a reference of our own: its warnings are logged with r's lines */
} lreflector;

/*
 * Options. Every reader takes the options table and what a bad value does: as arguments (the
 * default) it raises "bad argument #1 to 'fname' (...)" at the caller's line; as data
 * (core.client(opts, true): values a kubeconfig supplied) it raises the bare reason, which
 * l_client catches and returns as nil, reason, "EINVAL". An unknown option name is the calling
 * code's mistake either way and always raises as an argument error.
 */
typedef struct opts {
    int t;             /* stack index of the options table */
    const char *fname; /* the Lua function, for messages */
    int as_data;
} opts;

static int bad_value(lua_State *L, const opts *o, const char *fmt, ...)
{
    va_list ap;
    const char *reason;
    va_start(ap, fmt);
    reason = lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    if (o->as_data)
        return lua_error(L);
    return kl_argerror(L, 1, o->fname, "%s", reason);
}

static const char *opt_string(lua_State *L, const opts *o, const char *key)
{
    const char *s;
    lua_getfield(L, o->t, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        bad_value(L, o, "option '%s' must be a string, got %s", key, luaL_typename(L, -1));
    s = lua_tostring(L, -1);
    lua_pop(L, 1); /* still referenced by the options table */
    return s;
}

/* A number >= 0 (every numeric option is a size, a count or seconds). */
static double opt_number(lua_State *L, const opts *o, const char *key)
{
    double v;
    lua_getfield(L, o->t, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    if (lua_type(L, -1) != LUA_TNUMBER)
        bad_value(L, o, "option '%s' must be a number, got %s", key, luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
    if (!(v >= 0))
        bad_value(L, o, "option '%s' must be >= 0", key);
    lua_pop(L, 1);
    return v;
}

static int opt_bool(lua_State *L, const opts *o, const char *key, int dflt)
{
    int v = dflt;
    lua_getfield(L, o->t, key);
    if (!lua_isnil(L, -1)) {
        if (!lua_isboolean(L, -1))
            bad_value(L, o, "option '%s' must be a boolean, got %s", key, luaL_typename(L, -1));
        v = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* Raises for an option not in `known` (NULL-terminated); `what` names the table ("", "exec "). */
static void check_known(lua_State *L, const opts *o, const char *const *known, const char *what)
{
    for (lua_pushnil(L); lua_next(L, o->t); lua_pop(L, 1)) {
        int ok = 0;
        if (lua_type(L, -2) == LUA_TSTRING) {
            for (const char *const *k = known; *k; k++)
                ok |= strcmp(*k, lua_tostring(L, -2)) == 0;
        }
        if (!ok)
            kl_argerror(L, 1, o->fname, "unknown %soption '%s'", what,
                        lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?");
    }
}

/* A NULL-terminated array of the strings in the array at t[key] (NULL when absent), living in
 * a userdata left on the stack (so a later raise frees it); the strings stay referenced by the
 * options table. A bad value for a non-array or a non-string element. */
static const char *const *opt_string_array(lua_State *L, const opts *o, const char *key)
{
    const char **v;
    size_t n;
    lua_getfield(L, o->t, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushnil(L); /* keep the stack shape: one slot per call */
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TTABLE)
        bad_value(L, o, "option '%s' must be an array of strings, got %s", key,
                  luaL_typename(L, -1));
    n = (size_t)kl_rawlen(L, -1);
    v = lua_newuserdata(L, (n + 1) * sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -2, (int)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            bad_value(L, o, "option '%s' must be an array of strings (item %d is %s)", key,
                      (int)i + 1, luaL_typename(L, -1));
        v[i] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    v[n] = NULL;
    lua_remove(L, -2); /* the table stays referenced by the options table */
    return v;
}

/* The exec option: { command =, args = {...}, env = {"NAME=VALUE", ...}, api_version =,
 * install_hint =, timeout = }. Leaves the exec table and two array userdata (or nils) on the
 * stack. Unknown names in it were refused by l_client. */
static const char *const EXEC_KNOWN[] = {"command", "args", "env", "api_version",
                                         "install_hint", "timeout", NULL};

static const kinf_exec_config *opt_exec(lua_State *L, const opts *o, kinf_exec_config *x)
{
    opts e = *o;
    lua_getfield(L, o->t, "exec");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TTABLE)
        bad_value(L, o, "option 'exec' must be a table, got %s", luaL_typename(L, -1));
    e.t = lua_gettop(L); /* its names were checked by l_client */
    memset(x, 0, sizeof(*x));
    x->command = opt_string(L, &e, "command");
    if (x->command == NULL)
        bad_value(L, o, "exec option 'command' is required");
    x->api_version = opt_string(L, &e, "api_version");
    if (x->api_version == NULL)
        x->api_version = KINF_EXEC_API_V1;
    x->install_hint = opt_string(L, &e, "install_hint");
    x->timeout = opt_number(L, &e, "timeout");
    x->args = opt_string_array(L, &e, "args");
    x->env = opt_string_array(L, &e, "env");
    return x;
}

/* The client for the options table at index 1 (known names checked already): the userdata, or
 * nil, message, code. Bad values raise as o->as_data says. */
static int client_from_options(lua_State *L, const opts *o)
{
    kinf_client_config cfg;
    kinf_exec_config exec;
    char msg[512];
    kinf_err err;
    lclient *lc;

    memset(&cfg, 0, sizeof(cfg));
    cfg.server = opt_string(L, o, "server");
    if (cfg.server == NULL)
        bad_value(L, o, "option 'server' is required");
    cfg.token = opt_string(L, o, "token");
    cfg.token_file = opt_string(L, o, "token_file");
    cfg.username = opt_string(L, o, "username");
    cfg.password = opt_string(L, o, "password");
    cfg.ca_file = opt_string(L, o, "ca_file");
    cfg.ca_data = opt_string(L, o, "ca_data");
    cfg.client_cert_file = opt_string(L, o, "client_cert_file");
    cfg.client_cert_data = opt_string(L, o, "client_cert_data");
    cfg.client_key_file = opt_string(L, o, "client_key_file");
    cfg.client_key_data = opt_string(L, o, "client_key_data");
    cfg.tls_server_name = opt_string(L, o, "tls_server_name");
    cfg.proxy = opt_string(L, o, "proxy");
    cfg.user_agent = opt_string(L, o, "user_agent");
    cfg.insecure_skip_tls_verify = opt_bool(L, o, "insecure_skip_tls_verify", 0);
    cfg.connect_timeout = opt_number(L, o, "connect_timeout");
    cfg.impersonate_user = opt_string(L, o, "impersonate_user");
    cfg.impersonate_uid = opt_string(L, o, "impersonate_uid");
    cfg.impersonate_groups = opt_string_array(L, o, "impersonate_groups"); /* on the stack */
    cfg.impersonate_extra = opt_string_array(L, o, "impersonate_extra");
    if (cfg.impersonate_extra != NULL) {
        size_t n = 0;
        while (cfg.impersonate_extra[n] != NULL)
            n++;
        if (n % 2 != 0)
            bad_value(L, o, "option 'impersonate_extra' must hold key, value pairs");
    }
    cfg.exec = opt_exec(L, o, &exec); /* its arrays stay on the stack until we return */
    lc = lua_newuserdata(L, sizeof(*lc));
    lc->client = NULL;
    luaL_setmetatable(L, CLIENT_MT);
    lc->client = kinf_client_new(&cfg, &err, msg, sizeof(msg));
    if (lc->client == NULL) {
        if (err == KINF_EINVAL)
            return bad_value(L, o, "%s", msg);
        return kl_fail(L, err, msg);
    }
    return 1;
}

/* Protected half of client(opts, true): options at 1, as data. */
static int client_from_data(lua_State *L)
{
    opts o = {1, "client", 1};
    return client_from_options(L, &o);
}

/* core.client(opts [, from_config]) -> client | nil, message, code */
static int l_client(lua_State *L)
{
    static const char *const known[] = {
        "server", "token", "token_file", "username", "password", "exec", "ca_file", "ca_data",
        "client_cert_file", "client_cert_data", "client_key_file", "client_key_data",
        "tls_server_name", "insecure_skip_tls_verify", "proxy", "connect_timeout", "user_agent",
        "impersonate_user", "impersonate_uid", "impersonate_groups", "impersonate_extra", NULL};
    opts o = {1, "client", 0};
    int rc;

    luaL_checktype(L, 1, LUA_TTABLE);
    o.as_data = lua_toboolean(L, 2);
    lua_settop(L, 1);
    check_known(L, &o, known, "");
    lua_getfield(L, 1, "exec");
    if (lua_istable(L, 2)) {
        opts e = {2, "client", 0};
        check_known(L, &e, EXEC_KNOWN, "exec ");
    }
    lua_settop(L, 1);
    if (!o.as_data)
        return client_from_options(L, &o);
    lua_pushcfunction(L, client_from_data);
    lua_pushvalue(L, 1);
    rc = lua_pcall(L, 1, LUA_MULTRET, 0);
    if (rc == LUA_ERRMEM)
        return lua_error(L);
    if (rc != LUA_OK)
        return kl_fail(L, KINF_EINVAL, kl_error_text(L, -1));
    return lua_gettop(L) - 1;
}

kinf_client *kl_check_client(lua_State *L)
{
    lclient *lc = luaL_checkudata(L, 1, CLIENT_MT);
    if (lc->client == NULL)
        luaL_error(L, "kinformer: client is closed");
    return lc->client;
}

static int c_gc(lua_State *L)
{
    lclient *lc = luaL_checkudata(L, 1, CLIENT_MT);
    kinf_client_unref(lc->client);
    lc->client = NULL;
    return 0;
}

/* On this thread: client-go's warning handler with deduplication. */
void kl_drain_warnings(lua_State *L, kinf_client *c)
{
    char text[KINF_WARNING_MAX], line[KINF_WARNING_MAX + 32];
    while (kinf_warnings_next(kinf_client_warnings(c), text, sizeof(text))) {
        snprintf(line, sizeof(line), "API server warning: %s", text);
        kl_log(L, "warn", line);
    }
}

/* client:status() -> { warnings = n, warnings_distinct = n, warnings_dropped = n }; logs the
 * new warnings first. */
static int c_status(lua_State *L)
{
    kinf_client *c = kl_check_client(L);
    kinf_warnings_counts wc;
    kl_drain_warnings(L, c);
    kinf_warnings_get_counts(kinf_client_warnings(c), &wc);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)wc.total);
    lua_setfield(L, -2, "warnings");
    lua_pushinteger(L, (lua_Integer)wc.distinct);
    lua_setfield(L, -2, "warnings_distinct");
    lua_pushinteger(L, (lua_Integer)wc.dropped);
    lua_setfield(L, -2, "warnings_dropped");
    return 1;
}

static int c_server(lua_State *L)
{
    lua_pushstring(L, kinf_client_server(kl_check_client(L)));
    return 1;
}

void kl_check_request(lua_State *L, kinf_request *req)
{
    memset(req, 0, sizeof(*req));
    req->method = luaL_checkstring(L, 2);
    req->path_query = luaL_checkstring(L, 3);
    if (!lua_isnoneornil(L, 4)) {
        req->body = luaL_checklstring(L, 4, &req->body_len);
        req->content_type = luaL_checkstring(L, 5);
    }
    req->timeout = luaL_optnumber(L, 6, 0);
    if (!(req->timeout >= 0)) /* NaN too */
        luaL_argerror(L, 6, "timeout must be >= 0");
    if (!lua_isnoneornil(L, 7)) {
        lua_Number max = luaL_checknumber(L, 7);
        if (!(max >= 1))
            luaL_argerror(L, 7, "max_response_bytes must be >= 1");
        req->max_response_bytes = max >= 9.0e18 ? (size_t)-1 : (size_t)max;
    }
    req->accept = luaL_optstring(L, 8, NULL);
    if (req->path_query[0] != '/')
        luaL_argerror(L, 3, "path must start with '/'");
}

int kl_push_response(lua_State *L, const kinf_response *resp)
{
    lua_pushinteger(L, (lua_Integer)resp->status);
    lua_pushlstring(L, resp->body, resp->len);
    if (resp->retry_after >= 0)
        lua_pushnumber(L, resp->retry_after);
    else
        lua_pushnil(L);
    lua_pushstring(L, resp->content_type);
    return 4;
}

/* client:request(method, path_query [, body, content_type [, timeout [, max_response_bytes
 *                [, accept]]]])
 * -> status, body, retry_after (or nil), content_type | nil, err, code ("EIO", "ETOOBIG",
 * "ENOMEM": kinf_errname).
 * Blocks this thread until the answer (request.h). New Warning texts are logged before it
 * returns. */
static int c_request(lua_State *L)
{
    kinf_client *client = kl_check_client(L);
    kinf_request req;
    kinf_response resp;
    kinf_err err;
    char msg[512];

    kl_check_request(L, &req);
    err = kinf_request_do(client, &req, &resp, msg, sizeof(msg));
    if (err == KINF_EINVAL)
        return luaL_error(L, "kinformer: %s", msg);
    if (err != KINF_OK) {
        return kl_fail(L, err, msg);
    }
    kl_push_response(L, &resp);
    kinf_response_free(&resp);
    kl_drain_warnings(L, client); /* after the body is freed: logging may raise (memory) */
    return 4;
}

static int c_reflector(lua_State *L)
{
    static const char *const known[] = {
        "path", "fifo", "label_selector", "field_selector", "watch_list", "strip_managed_fields",
        "page_size", "idle_timeout", "watch_timeout", "backoff_initial", "backoff_max",
        "max_object_bytes", "reuse_known", "metadata_only", "gzip", NULL};
    kinf_client *client = kl_check_client(L);
    opts o = {2, "reflector", 0};
    kinf_reflector_config cfg;
    kinf_fifo *fifo;
    lreflector *lr;
    char msg[256];
    kinf_err err;

    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    check_known(L, &o, known, "");
    memset(&cfg, 0, sizeof(cfg));
    cfg.path = opt_string(L, &o, "path");
    if (cfg.path == NULL || cfg.path[0] != '/')
        kl_argerror(L, 1, "reflector", "option 'path' must be an API path starting with /");
    lua_getfield(L, 2, "fifo"); /* 3 */
    fifo = kl_test_fifo(L, 3);
    if (fifo == NULL)
        kl_argerror(L, 1, "reflector", "option 'fifo' must be a kinformer.delta_fifo");
    cfg.label_selector = opt_string(L, &o, "label_selector");
    cfg.field_selector = opt_string(L, &o, "field_selector");
    cfg.watch_list = opt_bool(L, &o, "watch_list", 0);
    cfg.strip_managed_fields = opt_bool(L, &o, "strip_managed_fields", 1);
    cfg.page_size = (size_t)opt_number(L, &o, "page_size");
    cfg.idle_timeout = opt_number(L, &o, "idle_timeout");
    cfg.watch_timeout = opt_number(L, &o, "watch_timeout");
    cfg.backoff_initial = opt_number(L, &o, "backoff_initial");
    cfg.backoff_max = opt_number(L, &o, "backoff_max");
    cfg.max_object_bytes = (size_t)opt_number(L, &o, "max_object_bytes");
    cfg.reuse_known = opt_bool(L, &o, "reuse_known", 0);
    cfg.metadata_only = opt_bool(L, &o, "metadata_only", 0);
    cfg.gzip = opt_bool(L, &o, "gzip", KL_GZIP_DEFAULT);

    lr = kl_newuserdata(L, sizeof(*lr)); /* 4 */
    lr->r = NULL;
    lr->client = NULL;
    luaL_setmetatable(L, REFLECTOR_MT);
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, 1);
    lua_setfield(L, -2, "client");
    lua_pushvalue(L, 3);
    lua_setfield(L, -2, "fifo");
    kl_setuservalue(L, 4);
    {
        kinf_transport tr = kinf_client_transport(client);
        lr->r = kinf_reflector_new(&tr, fifo, &cfg, &err, msg, sizeof(msg));
    }
    if (lr->r == NULL)
        return kl_fail(L, err, msg);
    lr->client = kinf_client_ref(client);
    return 1;
}

static kinf_reflector *check_reflector(lua_State *L)
{
    lreflector *lr = luaL_checkudata(L, 1, REFLECTOR_MT);
    if (lr->r == NULL)
        luaL_error(L, "kinformer: reflector is closed");
    return lr->r;
}

static int r_start(lua_State *L)
{
    kinf_err err = kinf_reflector_start(check_reflector(L));
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

static int r_stop(lua_State *L)
{
    lreflector *lr = luaL_checkudata(L, 1, REFLECTOR_MT);
    if (lr->r != NULL)
        kinf_reflector_stop(lr->r);
    return 0;
}

static int r_gc(lua_State *L)
{
    lreflector *lr = luaL_checkudata(L, 1, REFLECTOR_MT);
    kinf_reflector_free(lr->r);
    lr->r = NULL;
    kinf_client_unref(lr->client); /* after the reflector, which holds the client too */
    lr->client = NULL;
    return 0;
}

static void set_int(lua_State *L, const char *k, double v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

/* Logs (kl_log) the lines the reflector at 1 queued for a log (reflector.h), on this thread.
 * The logger is Lua code and may close the reflector: its pointer is read again after every
 * line, and the draining stops once it is gone. */
static void drain_log(lua_State *L)
{
    lreflector *lr = luaL_checkudata(L, 1, REFLECTOR_MT);
    const char *level;
    char line[KINF_REFLECTOR_LOG_MAX];
    while (lr->r != NULL && kinf_reflector_log_next(lr->r, &level, line, sizeof(line)))
        kl_log(L, level, line);
}

static int r_drain_log(lua_State *L)
{
    lreflector *lr;
    check_reflector(L);
    drain_log(L);
    lr = luaL_checkudata(L, 1, REFLECTOR_MT);
    /* The Warning headers of its lists and watches, too. lr->client is NULL when the logger
     * closed the reflector; a close during drain_warnings leaves the client alive (the client
     * userdata, in the reflector's uservalue, holds a reference of its own). */
    if (lr->client != NULL)
        kl_drain_warnings(L, lr->client);
    return 0;
}

static int r_status(lua_State *L)
{
    kinf_reflector_status st;
    double now = kinf_now();
    check_reflector(L);
    drain_log(L);
    kinf_reflector_status_get(check_reflector(L), &st); /* raises if the logger closed it */
    lua_createtable(L, 0, 16);
    lua_pushboolean(L, st.running);
    lua_setfield(L, -2, "running");
    lua_pushboolean(L, st.listed);
    lua_setfield(L, -2, "listed");
    lua_pushstring(L, st.phase);
    lua_setfield(L, -2, "phase");
    lua_pushstring(L, st.resource_version);
    lua_setfield(L, -2, "resource_version");
    if (st.last_error[0]) {
        lua_pushstring(L, st.last_error);
        lua_setfield(L, -2, "last_error");
        set_int(L, "last_error_code", st.last_error_code);
        if (st.last_error_reason[0]) {
            lua_pushstring(L, st.last_error_reason);
            lua_setfield(L, -2, "last_error_reason");
        }
        set_num(L, "last_error_age", now - st.last_error_time);
    }
    if (st.last_event_time > 0)
        set_num(L, "last_event_age", now - st.last_event_time);
    set_int(L, "lists", (double)st.lists);
    set_int(L, "relists", (double)st.relists);
    set_int(L, "watches", (double)st.watches);
    set_int(L, "watch_restarts", (double)st.watch_restarts);
    set_int(L, "events", (double)st.events);
    set_int(L, "errors", (double)st.errors);
    set_int(L, "bytes", (double)st.bytes);
    return 1;
}

static int r_last_sync_resource_version(lua_State *L)
{
    kinf_reflector_status st;
    kinf_reflector_status_get(check_reflector(L), &st);
    lua_pushstring(L, st.resource_version);
    return 1;
}

static const luaL_Reg CLIENT_METHODS[] = {
    {"call", kl_client_call},
    {"calls_drain", kl_client_calls_drain},
    {"calls_fd", kl_client_calls_fd},
    {"reflector", c_reflector},
    {"request", c_request},
    {"server", c_server},
    {"status", c_status},
    {NULL, NULL},
};

static const luaL_Reg REFLECTOR_METHODS[] = {
    {"start", r_start},
    {"stop", r_stop},
    {"close", r_gc},
    {"status", r_status},
    {"drain_log", r_drain_log},
    {"last_sync_resource_version", r_last_sync_resource_version},
    {NULL, NULL},
};

static const luaL_Reg CLIENT_META[] = {
    {"__gc", c_gc},
    {NULL, NULL},
};

static const luaL_Reg REFLECTOR_META[] = {
    {"__gc", r_gc},
    {NULL, NULL},
};

void kl_open_client(lua_State *L)
{
    kl_new_class(L, CLIENT_MT, CLIENT_METHODS, CLIENT_META);
    kl_new_class(L, REFLECTOR_MT, REFLECTOR_METHODS, REFLECTOR_META);
}

int kl_new_client(lua_State *L)
{
    return l_client(L);
}
