/*
 * lua_object_impl.h - what lua_object.c (records <-> tables), lua_lazy.c (lazily decoded
 * tables) and lua_encode.c (which writes lazy tables as their bytes) share: record boxes and the
 * registry keys they use. Nothing else includes it.
 * Threads: the thread that owns the Lua state only.
 */
#ifndef KINF_LUA_OBJECT_IMPL_H
#define KINF_LUA_OBJECT_IMPL_H

#include <stdint.h>

#include "jsonspan.h"
#include "lua_kinf.h"

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
    /* Lazy tables: the JSON object the table decodes members from (the record's JSON, or its
     * metadata member's span), and that object's members, indexed at the first read so that
     * later reads do not scan the object again. */
    const char *json;
    size_t json_len;
    int nmembers;          /* >= 0 once indexed, or MEMBERS_UNINDEXED / _UNINDEXABLE */
    int complete;          /* every member is in the table (materialized): nothing to decode */
    member_span *members;  /* malloc'd; freed with the box, or once complete */
} box;

/* Registry keys (their addresses): tables -> record boxes (weak keys; lua_object.c), the lazy
 * object metatable and lazy metadata tables -> boxes (weak keys; lua_lazy.c). */
extern const char kl_records_key, kl_lazy_key, kl_subs_key;

/* lua_object.c */
/* Pushes an empty box (so the record it will hold is owned by Lua before it exists). */
box *kl_push_box(lua_State *L);
/* Pushes json[0..len) decoded (kl_decode, else lua-cjson). Raises naming `what` of record key on
 * a decoding failure, which valid records never give. */
void kl_decode_or_raise(lua_State *L, const char *json, size_t len, const char *what,
                        const char *key);
/* Creates a weak table with the given mode and stores it in the registry under key. */
void kl_new_weak_table(lua_State *L, const void *key, const char *mode);

/* lua_lazy.c */
/* The box of lazy table idx: `which` is &kl_records_key (an object) or &kl_subs_key (an object's
 * metadata). NULL for any other table. */
box *kl_lazy_box(lua_State *L, int idx, const void *which);
/* Pushes b's JSON decoded whole. Raises on a decoding failure (records are valid JSON). */
void kl_decode_span(lua_State *L, const box *b, const char *what);
/* core.pairs (kinformer.pairs). */
int kl_pairs(lua_State *L);
/* Registers the lazy metatables and adds `pairs` to the module table on top of the stack. */
void kl_open_lazy(lua_State *L);

#endif
