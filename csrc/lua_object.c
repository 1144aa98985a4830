/*
 * lua_object.c - object records <-> Lua tables, decoded once (the contract of kl_push_object,
 * kl_to_object, kl_push_key and kl_push_decoded in lua_kinf.h), tombstones, and the module
 * functions about objects: tombstone, is_tombstone, encode, to_table, decode.
 *
 * Guarantees:
 * - A record is decoded at most once while its table lives: `decoded` maps the record's address
 *   to its table (weak values); `records` maps a table to a "record box" userdata that holds one
 *   reference on the record (weak keys), so a record cannot be freed, and its address reused,
 *   while its decoded entry exists.
 * - Every record is handed out as a table kinformer made, whoever wrote it: a user table written
 *   to a store or a queue (or returned by a transform) is encoded into a record and never linked
 *   to it, so reading the record back gives kinformer's table, not the user's. Tables kinformer
 *   made are read-only (assigning a member they do not hold raises; tombstones too) and are never
 *   re-encoded: handing one back reuses its record. Tables a user built are encoded on every
 *   write. to_table and decode make plain, mutable tables.
 * - Object tables decode lazily, member by member, on every runtime (lua_lazy.c): the same
 *   tables, metatables and behaviour on Lua 5.4 and LuaJIT. Numbers follow kl_decode's rule
 *   (lua_decode.c): integers where the JSON has them, on Lua 5.4.
 * Ownership: a box owns one record reference and its member index; both go in box_gc.
 * Threads: the thread that owns the Lua state only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lua_object_impl.h"

/* Registry keys: the addresses are unique; the bytes never change. */
static const char DECODED_KEY = 0;   /* record address -> table (weak values) */
const char kl_records_key = 0;       /* table -> record box (weak keys) */
static const char TOMBSTONE_KEY = 0; /* the metatable of tombstones a user made */
static const char CACHED_TOMBSTONE_KEY = 0; /* ... and of those kinformer made: read-only */
static const char DECODE_KEY = 0;    /* cjson decode: what kl_decode leaves to it */

/* ---- record boxes ---- */

static int box_gc(lua_State *L)
{
    box *b = luaL_checkudata(L, 1, BOX_MT);
    kinf_object_unref(b->obj);
    b->obj = NULL;
    free(b->members);
    b->members = NULL;
    return 0;
}

box *kl_push_box(lua_State *L)
{
    box *b = lua_newuserdata(L, sizeof(*b));
    b->obj = NULL;
    b->json = NULL;
    b->json_len = 0;
    b->nmembers = MEMBERS_UNINDEXED;
    b->complete = 0;
    b->members = NULL;
    luaL_setmetatable(L, BOX_MT);
    return b;
}

/* Links table t (at ti) and box (at bi): records[t] = box, decoded[box.obj] = t. */
static void link_table(lua_State *L, int ti, int bi)
{
    box *b = lua_touserdata(L, bi);
    ti = kl_absindex(L, ti);
    bi = kl_absindex(L, bi);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &kl_records_key);
    lua_pushvalue(L, ti);
    lua_pushvalue(L, bi);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODED_KEY);
    lua_pushvalue(L, ti);
    kl_rawsetp(L, -2, b->obj);
    lua_pop(L, 1);
}

/* ---- records -> tables ---- */

void kl_decode_or_raise(lua_State *L, const char *json, size_t len, const char *what,
                            const char *key)
{
    if (kl_decode(L, json, len))
        return;
    /* Not reached for valid records on Lua 5.4 (lua_decode.c): lua-cjson's numbers are floats. */
    kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODE_KEY);
    lua_pushlstring(L, json, len);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK)
        luaL_error(L, "kinformer: cannot decode %s of %s: %s", what, key, lua_tostring(L, -1));
}

/* Pushes the whole record decoded. */
static void decode_record(lua_State *L, kinf_object *obj)
{
    kl_decode_or_raise(L, obj->json, obj->json_len, "the record", obj->key);
}

void kl_push_decoded(lua_State *L, kinf_object *obj)
{
    decode_record(L, obj);
}

kinf_object *kl_record_of(lua_State *L, int idx)
{
    box *b;
    idx = kl_absindex(L, idx);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &kl_records_key);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    lua_pop(L, 2);
    return b != NULL ? b->obj : NULL; /* the box lives as long as the table */
}

void kl_push_made(lua_State *L, kinf_object *obj)
{
    kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODED_KEY);
    kl_rawgetp(L, -1, obj);
    lua_remove(L, -2);
}

void kl_push_object(lua_State *L, kinf_object *obj)
{
    int top;
    box *b;

    if (obj == NULL) {
        lua_pushnil(L);
        return;
    }
    luaL_checkstack(L, 8, "kinformer: pushing an object");
    kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODED_KEY);
    kl_rawgetp(L, -1, obj);
    if (!lua_isnil(L, -1)) {
        lua_remove(L, -2);
        return;
    }
    lua_pop(L, 2);
    top = lua_gettop(L);
    if (kinf_object_is_tombstone(obj)) {
        lua_createtable(L, 0, 2);
        lua_pushlstring(L, obj->key, obj->key_len);
        lua_setfield(L, -2, "key");
        kl_push_object(L, obj->inner);
        lua_setfield(L, -2, "obj");
        kl_rawgetp(L, LUA_REGISTRYINDEX, &CACHED_TOMBSTONE_KEY);
        lua_setmetatable(L, -2);
    } else {
        /* Members are decoded on first access (lua_lazy.c). */
        lua_createtable(L, 0, 5);
        kl_rawgetp(L, LUA_REGISTRYINDEX, &kl_lazy_key);
        lua_setmetatable(L, -2);
    }
    b = kl_push_box(L);
    b->obj = kinf_object_ref(obj);
    if (!kinf_object_is_tombstone(obj)) {
        b->json = obj->json;
        b->json_len = obj->json_len;
    }
    link_table(L, top + 1, top + 2);
    lua_settop(L, top + 1);
}

/* ---- tables -> records ---- */

/* Reads t.metadata[field] (metadata table at mi) as an optional string. */
static int meta_string(lua_State *L, int mi, const char *field, kinf_str *out, char *errbuf,
                       size_t errlen)
{
    lua_getfield(L, mi, field);
    out->ptr = "";
    out->len = 0;
    if (lua_type(L, -1) == LUA_TSTRING) {
        out->ptr = lua_tolstring(L, -1, &out->len);
    } else if (!lua_isnil(L, -1)) {
        kinf_errmsg(errbuf, errlen, "metadata.%s must be a string, got %s", field,
                    luaL_typename(L, -1));
        return 0;
    }
    /* The string stays alive in the metadata table, which stays on the stack. */
    lua_pop(L, 1);
    return 1;
}

static int push_metadata(lua_State *L, int ti, char *errbuf, size_t errlen)
{
    lua_getfield(L, ti, "metadata");
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        kinf_errmsg(errbuf, errlen, "object has no metadata");
        return 0;
    }
    return 1;
}

kinf_object *kl_to_object(lua_State *L, int idx, int argn, const char *fname, kinf_err *code,
                          char *errbuf, size_t errlen)
{
    int top = lua_gettop(L);
    kinf_meta meta;
    kinf_err err;
    box *b;

    idx = kl_absindex(L, idx);
    if (!lua_istable(L, idx))
        kl_argerror(L, argn, fname, "object expected, got %s", luaL_typename(L, idx));
    luaL_checkstack(L, 10, "kinformer: converting an object");
    *code = KINF_ENOKEY; /* what the failures below are, but for the marked ones */
    kl_rawgetp(L, LUA_REGISTRYINDEX, &kl_records_key);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    if (b != NULL && b->obj != NULL) {
        lua_remove(L, -2);
        return b->obj; /* a table kinformer made: its record, as it is */
    }
    lua_settop(L, top);

    /* A table the user built: a new record, encoded now, that no table is linked to (reading
     * it back gives kinformer's read-only table); the box on the stack keeps it alive. */
    if (kl_is_tombstone(L, idx)) {
        kinf_object *inner = NULL;
        const char *key;
        size_t len;
        lua_settop(L, top);
        lua_getfield(L, idx, "key");
        if (lua_type(L, -1) != LUA_TSTRING) {
            lua_settop(L, top);
            kinf_errmsg(errbuf, errlen, "tombstone has no string key");
            return NULL;
        }
        key = lua_tolstring(L, -1, &len);
        lua_getfield(L, idx, "obj");
        if (!lua_isnil(L, -1)) {
            inner = kl_to_object(L, -1, argn, fname, code, errbuf, errlen);
            if (inner == NULL) {
                lua_settop(L, top);
                return NULL;
            }
        }
        b = kl_push_box(L);
        b->obj = kinf_tombstone_new(key, len, inner, &err);
        if (b->obj == NULL) {
            lua_settop(L, top);
            *code = err;
            kinf_errmsg(errbuf, errlen, "%s", kinf_strerror(err));
            return NULL;
        }
        lua_replace(L, top + 1);
        lua_settop(L, top + 1);
        return b->obj;
    }
    lua_settop(L, top);

    if (!push_metadata(L, idx, errbuf, errlen))
        return NULL;
    if (!meta_string(L, top + 1, "name", &meta.name, errbuf, errlen) ||
        !meta_string(L, top + 1, "namespace", &meta.namespace_, errbuf, errlen) ||
        !meta_string(L, top + 1, "uid", &meta.uid, errbuf, errlen) ||
        !meta_string(L, top + 1, "resourceVersion", &meta.resource_version, errbuf, errlen)) {
        lua_settop(L, top);
        return NULL;
    }
    if (meta.name.len == 0) {
        lua_settop(L, top);
        kinf_errmsg(errbuf, errlen, "object has no metadata.name");
        return NULL;
    }
    err = kl_encode(L, idx, errbuf, errlen); /* top + 2 */
    if (err != KINF_OK) {
        lua_settop(L, top);
        *code = err;
        return NULL;
    }
    b = kl_push_box(L); /* top + 3 */
    {
        size_t len;
        const char *json = lua_tolstring(L, top + 2, &len);
        b->obj = kinf_object_new(json, len, &meta, &err);
    }
    if (b->obj == NULL) {
        lua_settop(L, top);
        *code = err;
        kinf_errmsg(errbuf, errlen, "%s", kinf_strerror(err));
        return NULL;
    }
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
    return b->obj;
}

int kl_push_key(lua_State *L, int idx, int argn, const char *fname, char *errbuf, size_t errlen)
{
    int top = lua_gettop(L);
    kinf_str ns, name;
    box *b;

    idx = kl_absindex(L, idx);
    if (!lua_istable(L, idx))
        kl_argerror(L, argn, fname, "object expected, got %s", luaL_typename(L, idx));
    kl_rawgetp(L, LUA_REGISTRYINDEX, &kl_records_key);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    if (b != NULL && b->obj != NULL) {
        lua_settop(L, top);
        lua_pushlstring(L, b->obj->key, b->obj->key_len);
        return 1;
    }
    lua_settop(L, top);
    if (kl_is_tombstone(L, idx)) {
        lua_getfield(L, idx, "key");
        if (lua_type(L, -1) == LUA_TSTRING)
            return 1;
        lua_settop(L, top);
        kinf_errmsg(errbuf, errlen, "tombstone has no string key");
        return 0;
    }
    lua_settop(L, top);
    if (!push_metadata(L, idx, errbuf, errlen))
        return 0;
    if (!meta_string(L, top + 1, "name", &name, errbuf, errlen) ||
        !meta_string(L, top + 1, "namespace", &ns, errbuf, errlen)) {
        lua_settop(L, top);
        return 0;
    }
    if (name.len == 0) {
        lua_settop(L, top);
        kinf_errmsg(errbuf, errlen, "object has no metadata.name");
        return 0;
    }
    if (ns.len)
        lua_pushfstring(L, "%s/%s", ns.ptr, name.ptr);
    else
        lua_pushlstring(L, name.ptr, name.len);
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
    return 1;
}


/* ---- module functions ---- */

static int l_tombstone(lua_State *L)
{
    luaL_checkstring(L, 1);
    if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
        kl_argerror(L, 2, "tombstone", "object or nil expected, got %s", luaL_typename(L, 2));
    lua_settop(L, 2); /* without an obj argument, index 2 would be the new table itself */
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, 1);
    lua_setfield(L, -2, "key");
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, "obj");
    kl_rawgetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);
    lua_setmetatable(L, -2);
    return 1;
}

/* __newindex of the tombstones kinformer made: they are shared like the objects they carry. */
static int tombstone_newindex(lua_State *L)
{
    return luaL_error(L, "kinformer: tombstones from the cache are read-only (set '%s' on a "
                         "copy: kinformer.to_table(tombstone))",
                      lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?");
}

int kl_is_tombstone(lua_State *L, int idx)
{
    int yes = 0;
    idx = kl_absindex(L, idx);
    if (lua_istable(L, idx) && lua_getmetatable(L, idx)) {
        kl_rawgetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);
        kl_rawgetp(L, LUA_REGISTRYINDEX, &CACHED_TOMBSTONE_KEY);
        yes = lua_rawequal(L, -1, -3) || lua_rawequal(L, -2, -3);
        lua_pop(L, 3);
    }
    return yes;
}

static int l_is_tombstone(lua_State *L)
{
    lua_pushboolean(L, kl_is_tombstone(L, 1));
    return 1;
}

/* encode(obj): the JSON of an object (its record's bytes for tables kinformer made), or nil,
 * err, code (EINVAL: a value JSON cannot hold, ENOMEM). */
static int l_encode(lua_State *L)
{
    char msg[256];
    kinf_object *obj;
    kinf_err err;
    box *b;
    luaL_checktype(L, 1, LUA_TTABLE);
    obj = kl_record_of(L, 1);
    if (obj != NULL && !kinf_object_is_tombstone(obj)) {
        lua_pushlstring(L, obj->json, obj->json_len);
        return 1;
    }
    b = kl_lazy_box(L, 1, &kl_subs_key);
    if (b != NULL) {
        lua_pushlstring(L, b->json, b->json_len);
        return 1;
    }
    err = kl_encode(L, 1, msg, sizeof(msg));
    if (err != KINF_OK)
        return kl_fail(L, err, msg);
    return 1;
}

/* Pushes a fresh, fully decoded, mutable copy of the table at idx (tombstones: a plain
 * {key, obj}, obj copied the same way). Raises, at the caller of to_table, for a user table
 * that cannot be encoded. */
static void push_copy(lua_State *L, int idx)
{
    kinf_object *obj;
    box *b;

    idx = kl_absindex(L, idx);
    luaL_checkstack(L, 4, "kinformer: copying an object");
    if (kl_is_tombstone(L, idx)) {
        lua_createtable(L, 0, 2);
        lua_getfield(L, idx, "key");
        lua_setfield(L, -2, "key");
        lua_getfield(L, idx, "obj");
        if (lua_istable(L, -1)) {
            push_copy(L, -1);
            lua_remove(L, -2);
        }
        lua_setfield(L, -2, "obj");
        return;
    }
    obj = kl_record_of(L, idx);
    if (obj != NULL) {
        decode_record(L, obj);
        return;
    }
    b = kl_lazy_box(L, idx, &kl_subs_key);
    if (b != NULL) {
        kl_decode_span(L, b, "metadata");
        return;
    }
    lua_pushcfunction(L, l_encode);
    lua_pushvalue(L, idx);
    lua_call(L, 1, 2);
    if (lua_isnil(L, -2))
        kl_argerror(L, 1, "to_table", "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    {
        size_t len;
        const char *json = lua_tolstring(L, -1, &len); /* stays on the stack below the copy */
        kl_decode_or_raise(L, json, len, "the copy", "a table");
        lua_remove(L, -2);
    }
}

/* to_table(obj): a fresh, fully decoded, mutable copy (tombstones: a plain {key, obj}). */
static int l_to_table(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    push_copy(L, 1);
    return 1;
}

/* decode(json): the value (as lua-cjson decodes it, but for kl_decode's number rule), or nil,
 * err for input that is not JSON. */
static int l_decode(lua_State *L)
{
    size_t len;
    const char *json = luaL_checklstring(L, 1, &len);
    if (kl_decode(L, json, len))
        return 1;
    kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODE_KEY);
    lua_pushvalue(L, 1);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK)
        return kl_fail(L, KINF_EPARSE, lua_tostring(L, -1));
    return 1;
}

void kl_new_weak_table(lua_State *L, const void *key, const char *mode)
{
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    kl_rawsetp(L, LUA_REGISTRYINDEX, key);
}

static const luaL_Reg FUNCS[] = {
    {"tombstone", l_tombstone},
    {"is_tombstone", l_is_tombstone},
    {"encode", l_encode},
    {"to_table", l_to_table},
    {"decode", l_decode},
    {NULL, NULL},
};

void kl_open_object(lua_State *L)
{
    /* lua-cjson decodes what kl_decode leaves to it: a private instance, so a user's cjson
     * settings never change our decoding. Encoding is ours (lua_encode.c). */
    lua_getglobal(L, "require");
    lua_pushstring(L, "cjson");
    lua_call(L, 1, 1);
    kl_open_encode(L, -1);
    lua_getfield(L, -1, "new");
    lua_call(L, 0, 1);
    lua_getfield(L, -1, "decode");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &DECODE_KEY);
    lua_pop(L, 2);

    kl_new_weak_table(L, &DECODED_KEY, "v");
    kl_new_weak_table(L, &kl_records_key, "k");

    luaL_newmetatable(L, BOX_MT);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    kl_open_lazy(L);

    lua_createtable(L, 0, 1);
    lua_pushstring(L, "kinformer.tombstone");
    lua_setfield(L, -2, "__name");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);
    lua_createtable(L, 0, 2);
    lua_pushstring(L, "kinformer.tombstone");
    lua_setfield(L, -2, "__name");
    lua_pushcfunction(L, tombstone_newindex);
    lua_setfield(L, -2, "__newindex");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &CACHED_TOMBSTONE_KEY);

    luaL_setfuncs(L, FUNCS, 0);
}
