/*
 * lua_call.c - client:call(...), client:calls_fd(), client:calls_drain() and the call userdata:
 * thin over call.c (the contract is in call.h).
 *
 *   local call = client:call("GET", "/api/v1/namespaces/default/configmaps/x")
 *   while not call:done() do core.wait({ client:calls_fd() }, 1); client:calls_drain() end
 *   local status, body, retry_after, content_type = call:result()  -- or nil, err, code
 *
 * A call userdata holds the C call, which holds a reference on its client: the call outlives a
 * collected client userdata, and its __gc cancels it if it is still in flight, then frees it.
 * Results are read on the thread that owns the Lua state; the I/O thread never touches it.
 */
#include "call.h"
#include "lua_client.h"
#include "lua_kinf.h"

#define CALL_MT "kinformer.call"

typedef struct lcall {
    kinf_call *call;
    kinf_client *client; /* the call's own reference keeps it: for the Warning log */
} lcall;

/* client:call(method, path_query [, body, content_type [, timeout [, max_response_bytes
 *             [, accept]]]]) -> call | nil, err, code
 * The arguments and their checks are client:request's. */
int kl_client_call(lua_State *L)
{
    kinf_client *client = kl_check_client(L);
    kinf_request req;
    kinf_err err;
    char msg[512];
    lcall *lk;

    kl_check_request(L, &req);
    lk = lua_newuserdata(L, sizeof(*lk)); /* before the call: no C memory to lose if it raises */
    lk->call = NULL;
    lk->client = client;
    luaL_setmetatable(L, CALL_MT);
    lk->call = kinf_call_start(client, &req, &err, msg, sizeof(msg));
    if (lk->call == NULL) {
        if (err == KINF_EINVAL)
            return luaL_error(L, "kinformer: %s", msg);
        return kl_fail(L, err, msg);
    }
    return 1;
}

/* client:calls_fd() -> fd | nil, err, code */
int kl_client_calls_fd(lua_State *L)
{
    kinf_err err;
    char msg[256];
    int fd = kinf_calls_fd(kl_check_client(L), &err, msg, sizeof(msg));
    if (fd < 0)
        return kl_fail(L, err, msg);
    lua_pushinteger(L, fd);
    return 1;
}

/* client:calls_drain() -> number of calls that ended since the last drain */
int kl_client_calls_drain(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)kinf_calls_drain(kl_check_client(L)));
    return 1;
}

static lcall *check_call(lua_State *L)
{
    lcall *lk = luaL_checkudata(L, 1, CALL_MT);
    if (lk->call == NULL)
        luaL_error(L, "kinformer: call is freed");
    return lk;
}

/* call:result() -> false while in flight; then status, body, retry_after (or nil),
 * content_type (client:request's results), or nil, err, code ("EIO", "ETOOBIG", "ENOMEM",
 * "ECANCELED"). New Warning texts are logged first. */
static int k_result(lua_State *L)
{
    lcall *lk = check_call(L);
    const kinf_response *resp;
    const char *msg;
    kinf_err err;

    if (!kinf_call_result(lk->call, &err, &resp, &msg)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    kl_drain_warnings(L, lk->client); /* before the pushes: the logger may run Lua code */
    if (err != KINF_OK)
        return kl_fail(L, err, msg);
    return kl_push_response(L, resp); /* the call's memory: nothing to free if it raises */
}

static int k_done(lua_State *L)
{
    lua_pushboolean(L, kinf_call_done(check_call(L)->call));
    return 1;
}

static int k_cancel(lua_State *L)
{
    kinf_call_cancel(check_call(L)->call);
    return 0;
}

static int k_gc(lua_State *L)
{
    lcall *lk = luaL_checkudata(L, 1, CALL_MT);
    kinf_call_free(lk->call); /* may drop the client's last reference */
    lk->call = NULL;
    lk->client = NULL;
    return 0;
}

static const luaL_Reg CALL_METHODS[] = {
    {"result", k_result},
    {"done", k_done},
    {"cancel", k_cancel},
    {NULL, NULL},
};

static const luaL_Reg CALL_META[] = {
    {"__gc", k_gc},
    {NULL, NULL},
};

void kl_open_call(lua_State *L)
{
    kl_new_class(L, CALL_MT, CALL_METHODS, CALL_META);
}
