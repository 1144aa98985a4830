/*
 * lua_client.h - what the client binding (lua_client.c) shares with the calls' binding
 * (lua_call.c): the client userdata, the arguments of client:request and client:call, their
 * results, and the log of the client's Warning headers. Runs on the thread that owns the Lua
 * state.
 */
#ifndef KINF_LUA_CLIENT_H
#define KINF_LUA_CLIENT_H

#include "client.h"
#include "compat.h"
#include "request.h"

/* The client behind the userdata at 1; raises when it is not one or was freed. */
kinf_client *kl_check_client(lua_State *L);

/* Reads (method, path_query [, body, content_type [, timeout [, max_response_bytes
 * [, accept]]]]) at 2..8 into req: its strings stay on the stack. Raises on a bad argument. */
void kl_check_request(lua_State *L, kinf_request *req);

/* Pushes status, body, retry_after (or nil), content_type; returns 4. May raise (memory). */
int kl_push_response(lua_State *L, const kinf_response *resp);

/* Logs (kl_log, level warn) the Warning texts the client received for the first time
 * (warning.h). May run the logger (Lua code). */
void kl_drain_warnings(lua_State *L, kinf_client *c);

/* client:call(...), client:calls_fd(), client:calls_drain() (lua_call.c). */
int kl_client_call(lua_State *L);
int kl_client_calls_fd(lua_State *L);
int kl_client_calls_drain(lua_State *L);

#endif
