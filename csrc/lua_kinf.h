/*
 * lua_kinf.h - what the binding files (lua_*.c) share: turning object records into Lua tables
 * and back (lua_object.c; the lazily decoded tables: lua_lazy.c), guards for C memory while Lua
 * code may raise (lua_guard.c), failures, argument errors and logging (lua_core.c), and each
 * file's registration function.
 *
 * Objects and tables (one Lua state; all of this runs on the thread that owns it):
 * - A record is decoded (kl_decode) at most once while its table lives: `decoded` maps the
 *   record's address to its table (weak values). `records` maps a table to a "record box"
 *   userdata that holds a reference on the record (weak keys), so a record cannot be freed,
 *   and its address reused, while its decoded entry exists.
 * - Every record is handed out as a table kinformer made (lazily decoded, lua_lazy.c), also one a
 *   user table was encoded into: the user's table is never linked to its record. Those tables are
 *   read-only (assigning a member they do not hold raises) and are never re-encoded: handing one
 *   back (e.g. a popped object into a store) reuses its record. Tables a user built are encoded
 *   on every write, so editing and re-adding one does what it says.
 * - Tombstones are tables {key = ..., obj = ...} whose metatable is the tombstone metatable.
 *
 * Errors at the Lua boundary: misuse (a wrong argument) raises at the caller's line; a runtime
 * failure returns nil, message, code (kl_fail), code being kinf_errname's stable name.
 *
 * Memory discipline : C-owned references are held by a guard userdata on the Lua
 * stack before any call that may raise, so a Lua error never leaks them.
 *
 * Re-entry: Lua code that a method runs may close the method's own object (free the C object
 * behind it). Lua code runs wherever a method reads an argument's fields (lua_getfield and
 * lua_gettable call __index; kl_to_object and kl_push_key read metadata that way), calls an index
 * function, a transform, a handler or the logger (kl_log). So every method that touches a C
 * object:
 * - reads its arguments first, raw where it can (lua_rawget, lua_next: options tables), and takes
 *   or re-checks the C pointer from its userdata after the last argument read that can run Lua
 *   (the store re-checks it is open and raises "... is closed" otherwise);
 * - around a callback that runs while the C object is in use (an index function inside a store
 *   write, pop's process function under the queue lock, dispatch's sink, poll's handler): either
 *   refuses a close from inside it (store:close from its index functions, fifo:close from pop's
 *   process function, processor:close from dispatch: a clear error) or re-reads the pointer from
 *   the userdata after the callback and stops when the object was closed (a shared reader's
 *   poll, a reflector's drain_log);
 * - otherwise keeps no C pointer in a local across Lua code, unless it holds a reference of its
 *   own on that object (the processor and a DeltaFIFO on their store, the reflector on its
 *   client). __gc cannot run during a method (the userdata is on the method's stack).
 * Limit: a __gc metamethod of another object may run at any allocation; closing a kinformer
 * object from one is not supported.
 */
#ifndef KINF_LUA_KINF_H
#define KINF_LUA_KINF_H

#include "compat.h"
#include "delta_fifo.h"
#include "object.h"

/* Pushes obj's table (nil for NULL). May raise (memory). */
void kl_push_object(lua_State *L, kinf_object *obj);

/* Pushes the table kl_push_object made for obj if it still lives, else nil: never makes one. */
void kl_push_made(lua_State *L, kinf_object *obj);

/*
 * Decodes JSON that is valid already (a record's bytes, or a span of them) into the value
 * lua-cjson's decode would make, faster (lua_decode.c), but for kinformer's number rule: on
 * Lua 5.4 a number without a fraction and an exponent that fits in 64 bits is an integer, any
 * other a float. Returns 1 with the value pushed, or 0 with the stack unchanged when it could
 * not (then decode with lua-cjson, which reports why). Raises only on memory errors.
 */
int kl_decode(lua_State *L, const char *json, size_t len);

/*
 * Encodes the value at idx as JSON (lua_encode.c): as lua-cjson's encode, but numbers are written
 * so that they read back exactly, and tables kinformer made from records are their record's
 * bytes. KINF_OK with the string pushed; else nothing pushed, errbuf says what could not be
 * encoded and where, and the code is KINF_EINVAL (a function, userdata, NaN, a cycle, nesting
 * too deep, an excessively sparse array, a bad key) or KINF_ENOMEM. Never calls Lua code; raises
 * only on memory errors.
 */
kinf_err kl_encode(lua_State *L, int idx, char *errbuf, size_t errlen);

/* Pushes a fresh, fully decoded, mutable table of a plain record (not cached). May raise. */
void kl_push_decoded(lua_State *L, kinf_object *obj);

/*
 * The record for the table (or tombstone) at idx. Raises when the value is not a table (naming
 * argument argn of function fname). On success pushes one value (the box that keeps the record
 * alive until the caller's frame ends) and returns the record, borrowed. On a data problem pushes
 * nothing, returns NULL, writes errbuf and sets *code: KINF_ENOKEY (no metadata.name, metadata
 * fields that are not strings), KINF_EINVAL (a value JSON cannot hold), KINF_ENOMEM.
 */
kinf_object *kl_to_object(lua_State *L, int idx, int argn, const char *fname, kinf_err *code,
                          char *errbuf, size_t errlen);

/* The record of the table at idx when kinformer made it (an object or tombstone it handed out),
 * borrowed: the table keeps it alive. NULL for any other value (tables a user built among them:
 * they are not linked to the records made from them). Never raises (but on memory errors). */
kinf_object *kl_record_of(lua_State *L, int idx);

/* Pushes the key of the table/tombstone at idx (without encoding it); 0 + errbuf on failure. */
int kl_push_key(lua_State *L, int idx, int argn, const char *fname, char *errbuf, size_t errlen);

/* Guards: a userdata owning C memory until released or collected. */
typedef struct kl_guard {
    kinf_object **objs; /* references, freed with the array (unless objs == one) */
    size_t n;
    kinf_object *one[1];
    kinf_deltas deltas;
    void *mem;          /* any malloc'd block */
} kl_guard;
kl_guard *kl_push_guard(lua_State *L);
void kl_guard_release(kl_guard *g);

/* Whether the value at idx is a tombstone table. */
int kl_is_tombstone(lua_State *L, int idx);

/* A runtime failure: pushes nil, a message for err (msg when given, else kinf_strerror) and
 * err's stable name (kinf_errname: what callers match on); returns 3. */
int kl_fail(lua_State *L, kinf_err err, const char *msg);

/* Pushes the error value at idx as text and returns it (valid while it stays on the stack): a
 * string or number as such, else what its __tostring returns when that is a string, else
 * "(error object of type T)". __tostring is called protected: never raises (but on memory
 * errors), so a handler raising an odd value cannot make its error report fail. */
const char *kl_error_text(lua_State *L, int idx);

/* Logs through the function set with set_logger (default: stderr). Never raises. */
void kl_log(lua_State *L, const char *level, const char *msg);

/* Raises "bad argument #argn to 'fname' (...)" with a formatted reason. */
/* luaL_error, but an error raised under a Lua hit path of lua_store.c points at its caller. */
int kl_error(lua_State *L, const char *fmt, ...);
int kl_argerror(lua_State *L, int argn, const char *fname, const char *fmt, ...);

/*
 * Argument checks that name the function themselves: luaL_check* take the name from the call's
 * debug information, which a call through pcall or in tail position lacks ("bad argument #2 to
 * '?'"). argn is the number the caller sees (a method's first argument after self is #1).
 * kl_check_lstring accepts strings and numbers (converted in place, as luaL_checklstring); len may
 * be NULL. kl_check_self raises "calling 'fname' on bad self (tname expected, got ...)" unless
 * the value at 1 is a userdata of metatable tname, and returns it.
 */
const char *kl_check_lstring(lua_State *L, int idx, int argn, const char *fname, size_t *len);
void kl_check_type(lua_State *L, int idx, int argn, const char *fname, int type);
void *kl_check_self(lua_State *L, const char *tname, const char *fname);

/* Registers metatable `name`: methods become its __index table, meta its metamethods. */
void kl_new_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta);

/* The unique REQUEUE sentinel. */
void kl_push_requeue(lua_State *L);

/* Registration: each binding file's classes (metatables) and module functions. kl_open_object
 * and kl_open_loop add their functions to the module table on top of the stack. */
void kl_open_guard(lua_State *L);
void kl_open_object(lua_State *L);
void kl_open_encode(lua_State *L, int cjson); /* cjson: the index of the lua-cjson module */
void kl_open_store(lua_State *L);
void kl_open_fifo(lua_State *L);
void kl_open_client(lua_State *L);
void kl_open_call(lua_State *L);
void kl_open_ring(lua_State *L);
void kl_open_informer(lua_State *L);
void kl_open_loop(lua_State *L); /* now(), catch_signals(on), wait(fds, timeout) */

/* Constructors: core.store, core.delta_fifo, core.client, core.processor. */
int kl_new_store(lua_State *L);
int kl_new_fifo(lua_State *L);
int kl_new_client(lua_State *L);
int kl_new_processor(lua_State *L);
int kl_new_ring(lua_State *L); /* core.ring{ "member", ... } (lua_ring.c) */

/* The C FIFO behind the delta_fifo userdata at idx, or NULL if it is not one. */
kinf_fifo *kl_test_fifo(lua_State *L, int idx);

#endif
