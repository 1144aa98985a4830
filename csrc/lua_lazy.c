/*
 * lua_lazy.c - lazily decoded object tables (kl_push_object's tables, lua_object.c): an object
 * and its metadata decode each member on first read, the same on Lua 5.4 and LuaJIT; and
 * core.pairs (kinformer.pairs), which iterates them on every runtime.
 *
 * Guarantees:
 * - A member is decoded at most once per table and kept in it (rawset): later reads are plain
 *   table reads, and what was read before keeps its identity, also through pairs.
 * - Tables are read-only: assigning a member the table does not hold (not read yet, or absent)
 *   raises. Limit: a member read before is a plain field of the table (which is what makes the
 *   next read a plain table read), so assigning it is not caught; nor are writes into the plain
 *   tables below (obj.spec, ...). Catching those would take a proxy whose every read calls a
 *   metamethod.
 * - After pairs (kinformer.pairs, or __pairs where the runtime calls it) a table is complete:
 *   next and rawget see every member, and nothing more is decoded.
 * Ownership: a lazy table's box (lua_object_impl.h) owns its member index, freed with the box or
 * once the table is complete.
 * Threads: the thread that owns the Lua state only.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lua_object_impl.h"

/* Registry keys: the addresses are unique; the bytes never change. */
const char kl_lazy_key = 0;          /* the metatable of lazily decoded objects */
const char kl_subs_key = 0;          /* lazy obj.metadata table -> its box (weak keys) */
static const char LAZY_META_KEY = 0; /* the metatable of lazily decoded metadata tables */
static const char NEXT_KEY = 0;      /* the base library's next, for pairs */

/*
 * Lazily decoded objects, the same on every runtime: the table starts empty; reading a member
 * decodes just that member's bytes and stores it in the table, so the next read is a plain table
 * read (on LuaJIT, a compiled one). `metadata` is lazy the same way (its own table over its own
 * span, kl_subs_key), and its name and namespace come from the record, parsed when the record was made:
 * a handler reading obj.metadata.name decodes nothing, and managedFields are decoded only by
 * whoever reads them. A string member without escapes is pushed as its bytes; other values go
 * through kl_decode. core.pairs (kinformer.pairs) decodes every member first, and so does pairs()
 * through __pairs where the runtime honours it (Lua 5.2+, LuaJIT built with
 * LUAJIT_ENABLE_LUA52COMPAT): after that the table is complete and plain next/rawget see
 * everything. Assigning a member not in the table raises: objects are read-only.
 */

box *kl_lazy_box(lua_State *L, int idx, const void *which)
{
    box *b;
    idx = kl_absindex(L, idx);
    kl_rawgetp(L, LUA_REGISTRYINDEX, which);
    lua_pushvalue(L, idx);
    lua_rawget(L, -2);
    b = lua_touserdata(L, -1);
    lua_pop(L, 2);
    return b != NULL && b->obj != NULL && b->json != NULL ? b : NULL;
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
void kl_decode_span(lua_State *L, const box *b, const char *what)
{
    kl_decode_or_raise(L, b->json, b->json_len, what, b->obj->key);
}

/* Pushes the value of member k, span v. */
static void push_member(lua_State *L, const box *b, const char *k, kinf_str v)
{
    if (v.len >= 2 && v.ptr[0] == '"' && memchr(v.ptr + 1, '\\', v.len - 2) == NULL) {
        /* Validated JSON: a string without escapes decodes to its bytes. */
        lua_pushlstring(L, v.ptr + 1, v.len - 2);
        return;
    }
    kl_decode_or_raise(L, v.ptr, v.len, k, b->obj->key);
}

/* Pushes a lazy table for the metadata of obj, whose JSON is span v (an object). */
static void push_lazy_metadata(lua_State *L, kinf_object *obj, kinf_str v)
{
    box *b;
    lua_createtable(L, 0, 4);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &LAZY_META_KEY);
    lua_setmetatable(L, -2);
    b = kl_push_box(L);
    b->obj = kinf_object_ref(obj);
    b->json = v.ptr; /* inside the record, which the box keeps alive */
    b->json_len = v.len;
    kl_rawgetp(L, LUA_REGISTRYINDEX, &kl_subs_key);
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
    if (which == &kl_records_key && klen == 8 && memcmp(k, "metadata", 8) == 0 && v.len > 0 &&
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
        kl_decode_span(L, b, "the object");
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

/* __index of lazy objects (which = &kl_records_key) and their metadata (&kl_subs_key). */
static int index_lazy(lua_State *L, const void *which)
{
    box *b;
    const char *k;
    size_t klen;
    kinf_str v;
    int rc;

    if (lua_type(L, 2) != LUA_TSTRING)
        return 0;
    b = kl_lazy_box(L, 1, which);
    if (b == NULL || b->complete)
        return 0;
    k = lua_tolstring(L, 2, &klen);
    if (which == &kl_subs_key && meta_from_record(b->obj, k, klen, &v)) {
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
    return index_lazy(L, &kl_records_key);
}

static int lazy_meta_index(lua_State *L)
{
    return index_lazy(L, &kl_subs_key);
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
    box *b = kl_lazy_box(L, 1, which);
    if (b != NULL)
        materialize(L, 1, b, which);
    return push_next(L, 1);
}

static int lazy_pairs(lua_State *L)
{
    return pairs_lazy(L, &kl_records_key);
}

static int lazy_meta_pairs(lua_State *L)
{
    return pairs_lazy(L, &kl_subs_key);
}

static int lazy_newindex(lua_State *L)
{
    return luaL_error(L, "kinformer: objects from the cache are read-only (set '%s' on a copy: "
                         "kinformer.to_table(obj))",
                      lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?");
}

/* pairs(t): Lua 5.2+'s pairs on every runtime (a __pairs metamethod is called), and for an
 * object table or its metadata, every member decoded first (then the table is complete). */
int kl_pairs(lua_State *L)
{
    const void *which = &kl_records_key;
    box *b;
    luaL_checktype(L, 1, LUA_TTABLE);
    b = kl_lazy_box(L, 1, which);
    if (b == NULL)
        b = kl_lazy_box(L, 1, which = &kl_subs_key);
    if (b != NULL) {
        materialize(L, 1, b, which);
    } else if (luaL_getmetafield(L, 1, "__pairs")) {
        lua_pushvalue(L, 1);
        lua_call(L, 1, 3);
        return 3;
    }
    return push_next(L, 1);
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

void kl_open_lazy(lua_State *L)
{
    kl_new_weak_table(L, &kl_subs_key, "k");
    new_lazy_metatable(L, &kl_lazy_key, lazy_index, lazy_pairs, "kinformer.object");
    new_lazy_metatable(L, &LAZY_META_KEY, lazy_meta_index, lazy_meta_pairs, "kinformer.metadata");
    lua_getglobal(L, "next");
    if (!lua_isfunction(L, -1))
        luaL_error(L, "kinformer: the base library's next is missing");
    kl_rawsetp(L, LUA_REGISTRYINDEX, &NEXT_KEY);
    lua_pushcfunction(L, kl_pairs);
    lua_setfield(L, -2, "pairs");
}
