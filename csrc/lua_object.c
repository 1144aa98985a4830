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
 * - Tables kinformer made are read-only (writing a new member raises) and are never re-encoded:
 *   handing one back reuses its record. Tables a user built are encoded on every write.
 * - Object tables decode lazily, member by member, on every runtime (see "Lazily decoded
 *   objects" below): the same tables, metatables and behaviour on Lua 5.4 and LuaJIT.
 * Ownership: a box owns one record reference and its member index; both go in box_gc.
 * Threads: the thread that owns the Lua state only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jsonspan.h"
#include "lua_kinf.h"

/* Registry keys: the addresses are unique; the bytes never change. */
static const char DECODED_KEY = 0;   /* record address -> table (weak values) */
static const char RECORDS_KEY = 0;   /* table -> record box (weak keys) */
static const char TOMBSTONE_KEY = 0; /* the tombstone metatable */
static const char ENCODE_KEY = 0;    /* cjson encode */
static const char DECODE_KEY = 0;    /* cjson decode */
static const char LAZY_KEY = 0;      /* the metatable of lazily decoded objects */
static const char NEXT_KEY = 0;      /* the base library's next, for pairs */
static const char SUBS_KEY = 0;      /* lazy obj.metadata table -> its box (weak keys) */
static const char LAZY_META_KEY = 0; /* the metatable of lazily decoded metadata tables */

#define BOX_MT "kinformer.record"

/* Where a member of a lazily decoded table sits in its JSON (offsets from box.json). */
typedef struct member_span {
    uint32_t key, key_len, value, value_len;
} member_span;

#define MEMBERS_UNINDEXED (-1) /* not indexed yet */
#define MEMBERS_UNINDEXABLE (-2) /* escaped keys, too many, too big, or no memory: find each time */
#define MEMBERS_MAX 64

typedef struct box {
    kinf_object *obj; /* one reference */
    int from_user;    /* built from a user table: re-encode on every write */
    /* Lazy tables: the JSON object the table decodes members from (the record's JSON, or its
     * metadata member's span), and that object's members, indexed at the first read so that
     * later reads do not scan the object again. */
    const char *json;
    size_t json_len;
    int nmembers;          /* >= 0 once indexed, or MEMBERS_UNINDEXED / _UNINDEXABLE */
    int complete;          /* every member is in the table (materialized): nothing to decode */
    member_span *members;  /* malloc'd; freed with the box, or once complete */
} box;

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

/* Pushes an empty box (so the record it will hold is owned by Lua before it exists). */
static box *push_box(lua_State *L, int from_user)
{
    box *b = lua_newuserdata(L, sizeof(*b));
    b->obj = NULL;
    b->from_user = from_user;
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
    kl_rawgetp(L, LUA_REGISTRYINDEX, &RECORDS_KEY);
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

/* Pushes json[0..len) decoded (kl_decode, else lua-cjson). Raises naming `what` of record key on
 * a decoding failure, which valid records never give. */
static void decode_or_raise(lua_State *L, const char *json, size_t len, const char *what,
                            const char *key)
{
    if (kl_decode(L, json, len))
        return;
    kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODE_KEY);
    lua_pushlstring(L, json, len);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK)
        luaL_error(L, "kinformer: cannot decode %s of %s: %s", what, key, lua_tostring(L, -1));
}

/* Pushes the whole record decoded. */
static void decode_record(lua_State *L, kinf_object *obj)
{
    decode_or_raise(L, obj->json, obj->json_len, "the record", obj->key);
}

void kl_push_decoded(lua_State *L, kinf_object *obj)
{
    decode_record(L, obj);
}

/* The record behind a table kinformer made (NULL for user tables and others). */
static kinf_object *record_of(lua_State *L, int idx)
{
    box *b;
    idx = kl_absindex(L, idx);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &RECORDS_KEY);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    lua_pop(L, 2);
    return b != NULL && !b->from_user ? b->obj : NULL; /* the box lives as long as the table */
}

/*
 * Lazily decoded objects, the same on every runtime: the table starts empty; reading a member
 * decodes just that member's bytes and stores it in the table, so the next read is a plain table
 * read (on LuaJIT, a compiled one). `metadata` is lazy the same way (its own table over its own
 * span, SUBS), and its name and namespace come from the record, parsed when the record was made:
 * a handler reading obj.metadata.name decodes nothing, and managedFields are decoded only by
 * whoever reads them. A string member without escapes is pushed as its bytes; other values go
 * through kl_decode. core.pairs (kinformer.pairs) decodes every member first, and so does pairs()
 * through __pairs where the runtime honours it (Lua 5.2+, LuaJIT built with
 * LUAJIT_ENABLE_LUA52COMPAT): after that the table is complete and plain next/rawget see
 * everything. Writes of new members raise: objects are read-only.
 */

/* The box of lazy table idx: `which` is RECORDS_KEY (a decoded object) or SUBS_KEY (an object's
 * metadata). NULL for any other table, and for objects decoded whole. */
static box *lazy_box(lua_State *L, int idx, const void *which)
{
    box *b;
    idx = kl_absindex(L, idx);
    kl_rawgetp(L, LUA_REGISTRYINDEX, which);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    lua_pop(L, 2);
    return b != NULL && b->obj != NULL && !b->from_user && b->json != NULL ? b : NULL;
}

/* Records the members of b's JSON object once. Anything unusual (an escaped key, more than
 * MEMBERS_MAX members, no memory) leaves the box unindexable: find_member then scans each time,
 * as before the index existed. */
static void index_members(box *b)
{
    kinf_json_member m;
    member_span *ms = NULL, *grown;
    size_t pos = 0, cap = 0, n = 0;
    int rc;

    b->nmembers = MEMBERS_UNINDEXABLE;
    if (b->json_len > UINT32_MAX)
        return;
    while ((rc = kinf_json_next_member(b->json, b->json_len, &pos, &m)) == 1) {
        if (m.key_escaped || n == MEMBERS_MAX) {
            free(ms);
            return;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            grown = realloc(ms, cap * sizeof(*ms));
            if (grown == NULL) {
                free(ms);
                return;
            }
            ms = grown;
        }
        ms[n].key = (uint32_t)(m.key.ptr - b->json);
        ms[n].key_len = (uint32_t)m.key.len;
        ms[n].value = (uint32_t)(m.value.ptr - b->json);
        ms[n].value_len = (uint32_t)m.value.len;
        n++;
    }
    if (rc < 0) {
        free(ms);
        return;
    }
    /* The index lives as long as the table: no spare room (a failed shrink keeps it as is). */
    if (n == 0) {
        free(ms);
        ms = NULL;
    } else if (n < cap && (grown = realloc(ms, n * sizeof(*ms))) != NULL) {
        ms = grown;
    }
    b->members = ms;
    b->nmembers = (int)n;
}

/* 1 and the value's span, 0 when the member is absent, -1 when only decoding the whole object
 * can tell (escaped keys, malformed input). The last of duplicate keys wins, as in lua-cjson. */
static int find_member(box *b, const char *k, size_t klen, kinf_str *v)
{
    if (b->nmembers == MEMBERS_UNINDEXED)
        index_members(b);
    if (b->nmembers == MEMBERS_UNINDEXABLE)
        return kinf_json_find_member(b->json, b->json_len, k, klen, v);
    for (int i = b->nmembers - 1; i >= 0; i--) {
        const member_span *m = &b->members[i];
        if (m->key_len == klen && memcmp(b->json + m->key, k, klen) == 0) {
            v->ptr = b->json + m->value;
            v->len = m->value_len;
            return 1;
        }
    }
    return 0;
}

/* Pushes b's JSON decoded whole. Raises on a decoding failure (records are valid JSON). */
static void decode_span(lua_State *L, const box *b, const char *what)
{
    decode_or_raise(L, b->json, b->json_len, what, b->obj->key);
}

/* Pushes the value of member k, span v. */
static void push_member(lua_State *L, const box *b, const char *k, kinf_str v)
{
    if (v.len >= 2 && v.ptr[0] == '"' && memchr(v.ptr + 1, '\\', v.len - 2) == NULL) {
        /* Validated JSON: a string without escapes decodes to its bytes. */
        lua_pushlstring(L, v.ptr + 1, v.len - 2);
        return;
    }
    decode_or_raise(L, v.ptr, v.len, k, b->obj->key);
}

/* Pushes a lazy table for the metadata of obj, whose JSON is span v (an object). */
static void push_lazy_metadata(lua_State *L, kinf_object *obj, kinf_str v)
{
    box *b;
    lua_createtable(L, 0, 4);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &LAZY_META_KEY);
    lua_setmetatable(L, -2);
    b = push_box(L, 0);
    b->obj = kinf_object_ref(obj);
    b->json = v.ptr; /* inside the record, which the box keeps alive */
    b->json_len = v.len;
    kl_rawgetp(L, LUA_REGISTRYINDEX, &SUBS_KEY);
    lua_pushvalue(L, -3);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 2);
}

/* metadata.name / metadata.namespace as the record has them (the object's last metadata, like
 * lua-cjson's decoding). Only non-empty values, and only when the key's length confirms the
 * strings hold no NUL byte (the record keeps them NUL-terminated); else 0: ask the JSON. */
static int meta_from_record(const kinf_object *obj, const char *k, size_t klen, kinf_str *out)
{
    size_t ns_len = strlen(obj->namespace_), name_len = strlen(obj->name);
    if ((ns_len ? ns_len + 1 : 0) + name_len != obj->key_len)
        return 0;
    if (klen == 4 && memcmp(k, "name", 4) == 0 && name_len > 0) {
        out->ptr = obj->name;
        out->len = name_len;
        return 1;
    }
    if (klen == 9 && memcmp(k, "namespace", 9) == 0 && ns_len > 0) {
        out->ptr = obj->namespace_;
        out->len = ns_len;
        return 1;
    }
    return 0;
}

/* Pushes the value of member k (span v) of lazy table b: obj.metadata as a lazy table of its own,
 * anything else decoded. */
static void push_lazy_member(lua_State *L, const box *b, const void *which, const char *k,
                             size_t klen, kinf_str v)
{
    if (which == &RECORDS_KEY && klen == 8 && memcmp(k, "metadata", 8) == 0 && v.len > 0 &&
        v.ptr[0] == '{')
        push_lazy_metadata(L, b->obj, v);
    else
        push_member(L, b, k, v);
}

/* Puts every member not read yet into lazy table t (at idx), each as a read would have made it
 * (members read before keep their values). Then b is complete: its member index is no longer
 * needed. */
static void materialize(lua_State *L, int t, box *b, const void *which)
{
    t = kl_absindex(L, t);
    if (b->complete)
        return;
    luaL_checkstack(L, 8, "kinformer: decoding an object");
    if (b->nmembers == MEMBERS_UNINDEXED)
        index_members(b);
    if (b->nmembers == MEMBERS_UNINDEXABLE) {
        /* Escaped keys (or no memory for the index): only decoding the whole object can tell
         * which member is which. */
        decode_span(L, b, "the object");
        for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1)) {
            lua_pushvalue(L, -2);
            lua_rawget(L, t);
            if (lua_isnil(L, -1)) {
                lua_pushvalue(L, -3);
                lua_pushvalue(L, -3);
                lua_rawset(L, t);
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    } else {
        for (int i = 0; i < b->nmembers; i++) {
            const char *k = b->json + b->members[i].key;
            size_t klen = b->members[i].key_len;
            kinf_str v;
            lua_pushlstring(L, k, klen);
            lua_pushvalue(L, -1);
            lua_rawget(L, t);
            if (lua_isnil(L, -1) && find_member(b, k, klen, &v) == 1) { /* the last duplicate */
                lua_pop(L, 1);
                push_lazy_member(L, b, which, k, klen, v);
                lua_rawset(L, t);
            } else {
                lua_pop(L, 2);
            }
        }
    }
    b->complete = 1;
    free(b->members);
    b->members = NULL;
    b->nmembers = MEMBERS_UNINDEXABLE;
}

/* __index of lazy objects (which = RECORDS_KEY) and their metadata (SUBS_KEY). */
static int index_lazy(lua_State *L, const void *which)
{
    box *b;
    const char *k;
    size_t klen;
    kinf_str v;
    int rc;

    if (lua_type(L, 2) != LUA_TSTRING)
        return 0;
    b = lazy_box(L, 1, which);
    if (b == NULL || b->complete)
        return 0;
    k = lua_tolstring(L, 2, &klen);
    if (which == &SUBS_KEY && meta_from_record(b->obj, k, klen, &v)) {
        lua_pushlstring(L, v.ptr, v.len);
    } else {
        rc = find_member(b, k, klen, &v);
        if (rc == 0)
            return 0;
        if (rc < 0) { /* only decoding the whole object can tell */
            materialize(L, 1, b, which);
            lua_settop(L, 2);
            lua_rawget(L, 1);
            return 1;
        }
        push_lazy_member(L, b, which, k, klen, v);
    }
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -2);
    lua_rawset(L, 1);
    return 1;
}

static int lazy_index(lua_State *L)
{
    return index_lazy(L, &RECORDS_KEY);
}

static int lazy_meta_index(lua_State *L)
{
    return index_lazy(L, &SUBS_KEY);
}

/* Pushes next, t (at idx), nil: the results of pairs(t). */
static int push_next(lua_State *L, int idx)
{
    idx = kl_absindex(L, idx);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &NEXT_KEY);
    lua_pushvalue(L, idx);
    lua_pushnil(L);
    return 3;
}

static int pairs_lazy(lua_State *L, const void *which)
{
    box *b = lazy_box(L, 1, which);
    if (b != NULL)
        materialize(L, 1, b, which);
    return push_next(L, 1);
}

static int lazy_pairs(lua_State *L)
{
    return pairs_lazy(L, &RECORDS_KEY);
}

static int lazy_meta_pairs(lua_State *L)
{
    return pairs_lazy(L, &SUBS_KEY);
}

static int lazy_newindex(lua_State *L)
{
    return luaL_error(L, "kinformer: objects from the cache are read-only (set '%s' on a copy: "
                         "kinformer.to_table(obj))",
                      lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?");
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
        kl_rawgetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);
        lua_setmetatable(L, -2);
    } else {
        /* Members are decoded on first access (lazy_index). */
        lua_createtable(L, 0, 5);
        kl_rawgetp(L, LUA_REGISTRYINDEX, &LAZY_KEY);
        lua_setmetatable(L, -2);
    }
    b = push_box(L, 0);
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

kinf_object *kl_to_object(lua_State *L, int idx, int argn, const char *fname, char *errbuf,
                          size_t errlen)
{
    int top = lua_gettop(L);
    kinf_meta meta;
    kinf_err err;
    box *b;

    idx = kl_absindex(L, idx);
    if (!lua_istable(L, idx))
        kl_argerror(L, argn, fname, "object expected, got %s", luaL_typename(L, idx));
    luaL_checkstack(L, 10, "kinformer: converting an object");
    kl_rawgetp(L, LUA_REGISTRYINDEX, &RECORDS_KEY);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    if (b != NULL && b->obj != NULL && !b->from_user) {
        lua_remove(L, -2);
        return b->obj; /* a table kinformer made: its record, as it is */
    }
    if (b != NULL && b->obj != NULL) {
        /* A user table written before: forget its old record, encode it afresh. */
        kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODED_KEY);
        lua_pushnil(L);
        kl_rawsetp(L, -2, b->obj);
    }
    lua_settop(L, top);

    lua_getmetatable(L, idx);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);
    if (lua_rawequal(L, -1, -2)) {
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
            inner = kl_to_object(L, -1, argn, fname, errbuf, errlen);
            if (inner == NULL) {
                lua_settop(L, top);
                return NULL;
            }
        }
        b = push_box(L, 1);
        b->obj = kinf_tombstone_new(key, len, inner, &err);
        if (b->obj == NULL) {
            lua_settop(L, top);
            kinf_errmsg(errbuf, errlen, "%s", kinf_strerror(err));
            return NULL;
        }
        link_table(L, idx, -1);
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
    kl_rawgetp(L, LUA_REGISTRYINDEX, &ENCODE_KEY); /* top + 2 */
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        kinf_errmsg(errbuf, errlen, "cannot encode object as JSON: %s", lua_tostring(L, -1));
        lua_settop(L, top);
        return NULL;
    }
    b = push_box(L, 1); /* top + 3 */
    {
        size_t len;
        const char *json = lua_tolstring(L, top + 2, &len);
        b->obj = kinf_object_new(json, len, &meta, &err);
    }
    if (b->obj == NULL) {
        lua_settop(L, top);
        kinf_errmsg(errbuf, errlen, "%s", kinf_strerror(err));
        return NULL;
    }
    link_table(L, idx, top + 3);
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
    kl_rawgetp(L, LUA_REGISTRYINDEX, &RECORDS_KEY);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    if (b != NULL && b->obj != NULL && !b->from_user) {
        lua_settop(L, top);
        lua_pushlstring(L, b->obj->key, b->obj->key_len);
        return 1;
    }
    lua_settop(L, top);
    lua_getmetatable(L, idx);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);
    if (lua_rawequal(L, -1, -2)) {
        lua_settop(L, top);
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

int kl_is_tombstone(lua_State *L, int idx)
{
    int yes = 0;
    idx = kl_absindex(L, idx);
    if (lua_istable(L, idx) && lua_getmetatable(L, idx)) {
        kl_rawgetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);
        yes = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    return yes;
}

static int l_is_tombstone(lua_State *L)
{
    lua_pushboolean(L, kl_is_tombstone(L, 1));
    return 1;
}

/* encode(obj): the JSON of an object (its record's bytes for tables kinformer made). */
static int l_encode(lua_State *L)
{
    kinf_object *obj;
    box *b;
    luaL_checktype(L, 1, LUA_TTABLE);
    obj = record_of(L, 1);
    if (obj != NULL && !kinf_object_is_tombstone(obj)) {
        lua_pushlstring(L, obj->json, obj->json_len);
        return 1;
    }
    b = lazy_box(L, 1, &SUBS_KEY);
    if (b != NULL) {
        lua_pushlstring(L, b->json, b->json_len);
        return 1;
    }
    kl_rawgetp(L, LUA_REGISTRYINDEX, &ENCODE_KEY);
    lua_pushvalue(L, 1);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK)
        return kl_fail(L, KINF_EINVAL, lua_tostring(L, -1));
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
    obj = record_of(L, idx);
    if (obj != NULL) {
        decode_record(L, obj);
        return;
    }
    b = lazy_box(L, idx, &SUBS_KEY);
    if (b != NULL) {
        decode_span(L, b, "metadata");
        return;
    }
    kl_rawgetp(L, LUA_REGISTRYINDEX, &DECODE_KEY);
    lua_pushcfunction(L, l_encode);
    lua_pushvalue(L, idx);
    lua_call(L, 1, 2);
    if (lua_isnil(L, -2))
        kl_argerror(L, 1, "to_table", "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    lua_call(L, 1, 1);
}

/* to_table(obj): a fresh, fully decoded, mutable copy (tombstones: a plain {key, obj}). */
static int l_to_table(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    push_copy(L, 1);
    return 1;
}

/* pairs(t): Lua 5.2+'s pairs on every runtime (a __pairs metamethod is called), and for an
 * object table or its metadata, every member decoded first (then the table is complete). */
static int l_pairs(lua_State *L)
{
    const void *which = &RECORDS_KEY;
    box *b;
    luaL_checktype(L, 1, LUA_TTABLE);
    b = lazy_box(L, 1, which);
    if (b == NULL)
        b = lazy_box(L, 1, which = &SUBS_KEY);
    if (b != NULL) {
        materialize(L, 1, b, which);
    } else if (luaL_getmetafield(L, 1, "__pairs")) {
        lua_pushvalue(L, 1);
        lua_call(L, 1, 3);
        return 3;
    }
    return push_next(L, 1);
}

/* decode(json): the value (as lua-cjson decodes it), or nil, err for input that is not JSON. */
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

/* Creates a weak table with the given mode and stores it in the registry under key. */
static void new_weak_table(lua_State *L, const void *key, const char *mode)
{
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    kl_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/* registry[key] = a metatable of read-only lazy tables: __index, __pairs, __newindex, __name. */
static void new_lazy_metatable(lua_State *L, const void *key, lua_CFunction index,
                               lua_CFunction pairs, const char *name)
{
    lua_createtable(L, 0, 4);
    lua_pushcfunction(L, index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, pairs);
    lua_setfield(L, -2, "__pairs");
    lua_pushcfunction(L, lazy_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__name");
    kl_rawsetp(L, LUA_REGISTRYINDEX, key);
}

static const luaL_Reg FUNCS[] = {
    {"tombstone", l_tombstone},
    {"is_tombstone", l_is_tombstone},
    {"encode", l_encode},
    {"to_table", l_to_table},
    {"pairs", l_pairs},
    {"decode", l_decode},
    {NULL, NULL},
};

void kl_open_object(lua_State *L)
{
    /* lua-cjson, a private instance so a user's cjson settings never change our encoding. */
    lua_getglobal(L, "require");
    lua_pushstring(L, "cjson");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "new");
    lua_call(L, 0, 1);
    lua_getfield(L, -1, "encode");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &ENCODE_KEY);
    lua_getfield(L, -1, "decode");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &DECODE_KEY);
    lua_pop(L, 2);

    new_weak_table(L, &DECODED_KEY, "v");
    new_weak_table(L, &RECORDS_KEY, "k");
    new_weak_table(L, &SUBS_KEY, "k");

    luaL_newmetatable(L, BOX_MT);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);

    new_lazy_metatable(L, &LAZY_KEY, lazy_index, lazy_pairs, "kinformer.object");
    new_lazy_metatable(L, &LAZY_META_KEY, lazy_meta_index, lazy_meta_pairs, "kinformer.metadata");

    lua_getglobal(L, "next");
    if (!lua_isfunction(L, -1))
        luaL_error(L, "kinformer: the base library's next is missing");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &NEXT_KEY);

    lua_createtable(L, 0, 1);
    lua_pushstring(L, "kinformer.tombstone");
    lua_setfield(L, -2, "__name");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &TOMBSTONE_KEY);

    luaL_setfuncs(L, FUNCS, 0);
}
