/*
 * lua_shared_poll.c - a shared-store reader's poll (contract at the top of lua_shared.c): the
 * changes since the last poll handed to fn in the writer's order; a snapshot first, on the
 * first poll, and after the reader fell behind or a new writer took over, handed as what
 * differs from what the handler was told (adds, updates, deletes: a relist's Replace); poll
 * with no fn forgets the tables of replaced and deleted objects only.
 *
 * Threads: the thread that owns the Lua state.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lua_kinf.h"
#include "lua_shared_impl.h"
#include "map.h"
#include "shm_log.h"
#include "shm_store.h"

enum { EV_ADD = 1, EV_UPDATE = 2, EV_DELETE = 3 };

static void call_handler(lua_State *L, int fn, int kind, int is_initial)
{
    /* Stack: ..., obj, old */
    lua_pushvalue(L, fn);
    lua_pushinteger(L, kind);
    lua_pushvalue(L, -4);
    lua_pushvalue(L, -4);
    lua_pushboolean(L, is_initial);
    lua_call(L, 4, 0);
    lua_pop(L, 2);
}

/* A snapshot's changes waiting to be handed (UV_PENDING): entries 1..len of the arrays kind,
 * obj, old (false: none), key, off, and "next", the first not handed yet. */
enum { PEND_KIND = 1, PEND_OBJ, PEND_OLD, PEND_KEY, PEND_OFF };

/* Hands fn the snapshot's changes not handed yet; returns how many. Each is counted handed
 * before fn runs, so a handler that raises loses none of the others: they come with the next
 * poll. A handler that closes the reader (s->rs NULL after it) ends the delivery there. */
static int deliver_pending(lua_State *L, lshared *s, int uv, int fn)
{
    int n = 0, p, len, next, initial;
    lua_rawgeti(L, uv, UV_PENDING);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    p = lua_gettop(L);
    lua_getfield(L, p, "len");
    len = (int)lua_tointeger(L, -1);
    lua_getfield(L, p, "next");
    next = (int)lua_tointeger(L, -1);
    lua_getfield(L, p, "initial");
    initial = lua_toboolean(L, -1);
    lua_pop(L, 3);
    while (next <= len && s->rs != NULL) {
        int kind, i = next;
        lua_rawgeti(L, p, PEND_KIND);
        lua_rawgeti(L, -1, i);
        kind = (int)lua_tointeger(L, -1);
        lua_pop(L, 2);
        if (kind != EV_DELETE) {
            size_t klen;
            const char *key;
            lua_rawgeti(L, p, PEND_KEY);
            lua_rawgeti(L, -1, i);
            key = lua_tolstring(L, -1, &klen);
            lua_rawgeti(L, p, PEND_OFF);
            lua_rawgeti(L, -1, i);
            kl_sh_mark_handed(L, uv, key, klen, (kinf_shm_off)lua_tonumber(L, -1));
            lua_pop(L, 4);
        }
        for (int a = PEND_OBJ; a <= PEND_OLD; a++) { /* obj, old: pushed, and let go here */
            lua_rawgeti(L, p, a);
            lua_rawgeti(L, -1, i);
            lua_pushboolean(L, 0);
            lua_rawseti(L, -3, i);
            lua_remove(L, -2);
        }
        if (!lua_toboolean(L, -1)) {
            lua_pop(L, 1);
            lua_pushnil(L);
        }
        lua_pushinteger(L, ++next);
        lua_setfield(L, p, "next");
        n++;
        call_handler(L, fn, kind, initial && kind == EV_ADD);
    }
    if (next > len) {
        lua_pushnil(L);
        lua_rawseti(L, uv, UV_PENDING);
    }
    lua_pop(L, 1);
    return n;
}

/* Appends a change to the pending arrays at p. Stack: ..., obj, old (nil: none); pops both. */
static void pend(lua_State *L, int p, int i, int kind, const char *key, size_t klen, double off)
{
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 0);
    }
    lua_rawgeti(L, p, PEND_OLD);
    lua_insert(L, -2);
    lua_rawseti(L, -2, i);
    lua_pop(L, 1);
    lua_rawgeti(L, p, PEND_OBJ);
    lua_insert(L, -2);
    lua_rawseti(L, -2, i);
    lua_pop(L, 1);
    lua_rawgeti(L, p, PEND_KIND);
    lua_pushinteger(L, kind);
    lua_rawseti(L, -2, i);
    lua_pop(L, 1);
    lua_rawgeti(L, p, PEND_KEY);
    if (key != NULL)
        lua_pushlstring(L, key, klen);
    else
        lua_pushboolean(L, 0);
    lua_rawseti(L, -2, i);
    lua_pop(L, 1);
    lua_rawgeti(L, p, PEND_OFF);
    lua_pushnumber(L, off);
    lua_rawseti(L, -2, i);
    lua_pop(L, 1);
}

/* The snapshot, handed as what changed since what the handlers were told: on the first poll
 * every object is an add (is_initial true); after the reader fell behind or a new writer took
 * over, an object the handlers were not handed is an add, one handed in another version an
 * update (old: the table handed), one handed and gone a delete, and one handed in this version
 * nothing (client-go's relist: Replace). Remembers what it showed, for the catch-up. The tables
 * are collected inside one read section and handed to fn after it (deliver_pending). Returns
 * the number handed, or -1 with the error pushed (nil, msg, code). */
static int resync(lua_State *L, lshared *s, rstate *rs, int uv, int fn)
{
    kinf_shm_map_iter it;
    kinf_shm_off off, log = kinf_shm_store_log(rs->st);
    kinf_err err = KINF_OK;
    int n = 0, arr, offs, keys, old_offs, old_tabs, p, np = 0, top = lua_gettop(L);

    kl_seen_clear(rs);
    rs->resyncs++;
    /* What the handlers were told: the caches before this snapshot (offsets negated where
     * handed). The tables cached from before describe older versions: start over. */
    lua_rawgeti(L, uv, UV_OFFS);
    old_offs = lua_gettop(L);
    lua_rawgeti(L, uv, UV_TABLES);
    old_tabs = lua_gettop(L);
    kl_sh_reset_caches(L, uv);
    lua_newtable(L);
    arr = lua_gettop(L);
    lua_newtable(L);
    offs = lua_gettop(L);
    lua_newtable(L);
    keys = lua_gettop(L);
    kinf_shm_read_begin(rs->seg->shm, rs->slot);
    /* The events from here on may or may not be in the snapshot: the writer goes on while it is
     * read. Those up to the head after it (catchup) are checked against what it showed (seen):
     * a key it missed was added after its place was read, or removed before. */
    rs->cursor = kinf_shm_log_head(rs->seg->shm, log);
    rs->catchup = rs->cursor;
    kinf_shm_store_iter(rs->st, -1, &it);
    while ((off = kinf_shm_map_next(rs->seg->shm, &it)) != 0) {
        kinf_shm_view v;
        char *key;
        if ((err = kinf_shm_store_view(rs->st, off, &v)) != KINF_OK ||
            (err = kl_sh_push_record(L, rs, uv, &v)) != KINF_OK)
            break;
        lua_rawseti(L, arr, ++n);
        lua_pushnumber(L, (lua_Number)off);
        lua_rawseti(L, offs, n);
        lua_pushlstring(L, v.key, v.key_len);
        lua_rawseti(L, keys, n);
        key = malloc(v.key_len ? v.key_len : 1);
        if (key != NULL) {
            memcpy(key, v.key, v.key_len);
            if (kinf_map_put(&rs->seen, key, v.key_len, (void *)(uintptr_t)v.seq) != KINF_OK)
                free(key);
        }
        if (v.seq >= rs->catchup)
            rs->catchup = v.seq + 1;
    }
    if (err == KINF_OK && (it.corrupt || kinf_shm_log_cap(rs->seg->shm, log) == 0))
        err = KINF_ECORRUPT;
    if (err == KINF_OK) {
        uint64_t after = kinf_shm_log_head(rs->seg->shm, log);
        if (after > rs->catchup)
            rs->catchup = after;
    }
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    if (err != KINF_OK) {
        rs->cursor = 0; /* the next poll starts over */
        lua_settop(L, top);
        kl_sh_fail(L, rs, err);
        return -1;
    }
    lua_createtable(L, 0, 8);
    p = lua_gettop(L);
    for (int a = PEND_KIND; a <= PEND_OFF; a++) {
        lua_createtable(L, n, 0);
        lua_rawseti(L, p, a);
    }
    /* Each object of the snapshot against what was handed before. */
    for (int i = 1; i <= n; i++) {
        size_t klen;
        const char *key;
        lua_Number o, was;
        lua_rawgeti(L, arr, i);
        lua_rawgeti(L, keys, i);
        key = lua_tolstring(L, -1, &klen);
        lua_rawgeti(L, offs, i);
        o = lua_tonumber(L, -1);
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawget(L, old_offs);
        was = lua_tonumber(L, -1);
        lua_pop(L, 1);
        if (was < 0 && -was == o) { /* handed in this version: nothing to tell */
            kl_sh_mark_handed(L, uv, key, klen, (kinf_shm_off)o);
            lua_pop(L, 2);
            continue;
        }
        lua_insert(L, -2); /* key, obj */
        if (was < 0) {
            lua_pushvalue(L, -2);
            lua_rawget(L, old_tabs); /* key, obj, old */
            pend(L, p, ++np, EV_UPDATE, key, klen, o);
        } else {
            lua_pushnil(L);
            pend(L, p, ++np, EV_ADD, key, klen, o);
        }
        lua_pop(L, 1); /* the key */
    }
    /* Each object handed before and not in the snapshot: gone. */
    lua_pushnil(L);
    while (lua_next(L, old_offs) != 0) {
        lua_Number was = lua_tonumber(L, -1);
        lua_pop(L, 1);
        if (was >= 0)
            continue;
        lua_rawgeti(L, uv, UV_OFFS);
        lua_pushvalue(L, -2);
        lua_rawget(L, -2);
        if (!lua_isnil(L, -1)) {
            lua_pop(L, 2);
            continue;
        }
        lua_pop(L, 2);
        lua_pushvalue(L, -1);
        lua_rawget(L, old_tabs); /* the table handed last */
        lua_pushnil(L);
        pend(L, p, ++np, EV_DELETE, NULL, 0, 0);
    }
    lua_pushboolean(L, rs->resyncs == 1);
    lua_setfield(L, p, "initial");
    lua_pushinteger(L, 1);
    lua_setfield(L, p, "next");
    lua_pushinteger(L, np);
    lua_setfield(L, p, "len");
    lua_rawseti(L, uv, UV_PENDING);
    lua_settop(L, top);
    return deliver_pending(L, s, uv, fn);
}

/* poll(max) with no handler: moves the cursor over up to max changes and forgets the tables
 * cached for the keys they name, so a process that only reads (get, by_index) keeps no table
 * of an object replaced or deleted; hands nothing and makes no table (no snapshot: the first
 * poll starts at the log's head). With no table cached it jumps to the head. Falling behind
 * forgets every cached table. Returns how many changes it passed, or nil, err, code. */
static int poll_forget(lua_State *L, rstate *rs, kinf_shm_store *st, int uv, lua_Integer max)
{
    kinf_shm_off log = kinf_shm_store_log(st);
    lua_Integer n = 0;
    lua_pushnil(L);
    lua_rawseti(L, uv, UV_PENDING); /* a snapshot a handler was handed part of: not any more */
    lua_rawgeti(L, uv, UV_OFFS);
    lua_pushnil(L);
    if (lua_next(L, -2) == 0) {
        /* No table cached: nothing to forget, and no record to read (a process that only
         * counts or has not read yet touches none of the segment's pages). */
        lua_pop(L, 1);
        rs->cursor = kinf_shm_log_head(rs->seg->shm, log);
        lua_pushinteger(L, 0);
        return 1;
    }
    lua_pop(L, 3);
    while (n < max) {
        kinf_shm_event ev;
        kinf_shm_view v;
        kinf_shm_log_read_result r = KINF_SHM_LOG_BEHIND;

        kinf_shm_read_begin(rs->seg->shm, rs->slot);
        if (rs->cursor != 0)
            r = kinf_shm_log_read(rs->seg->shm, log, rs->cursor, &ev);
        if (r == KINF_SHM_LOG_EVENT && ev.type == KINF_SHM_RESYNCED)
            r = KINF_SHM_LOG_BEHIND;
        if (r == KINF_SHM_LOG_EVENT && kinf_shm_store_view(st, ev.obj, &v) != KINF_OK)
            r = KINF_SHM_LOG_CORRUPT;
        if (r == KINF_SHM_LOG_BEHIND) {
            rs->cursor = kinf_shm_log_head(rs->seg->shm, log);
            kinf_shm_read_end(rs->seg->shm, rs->slot);
            kl_seen_clear(rs);
            kl_sh_reset_caches(L, uv);
            if (rs->cursor == 0)
                break;
            continue;
        }
        if (r != KINF_SHM_LOG_EVENT) {
            kinf_shm_read_end(rs->seg->shm, rs->slot);
            if (r == KINF_SHM_LOG_CORRUPT)
                return kl_sh_fail(L, rs, KINF_ECORRUPT);
            break;
        }
        kl_sh_forget(L, uv, v.key, v.key_len); /* only a memory error of Lua raises here */
        kinf_shm_read_end(rs->seg->shm, rs->slot);
        rs->cursor++;
        rs->events++;
        n++;
    }
    lua_pushinteger(L, n);
    return 1;
}

/* Protected (sh_poll): the poll itself, with sh_poll's arguments. */
static int poll_protected(lua_State *L)
{
    lua_Integer max;
    int fn, n = 0;
    kinf_shm_off log;
    READER_PROLOGUE();
    max = luaL_optinteger(L, 2, 100);
    if (lua_isnoneornil(L, 3))
        return poll_forget(L, rs, st, uv, max);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    fn = 3;
    luaL_checkstack(L, 16, "kinformer: shared store");
    log = kinf_shm_store_log(st);
    if (rs->cursor == 0) {
        int got = resync(L, s_, rs, uv, fn);
        if (got < 0)
            return 3;
        n += got;
    } else {
        n += deliver_pending(L, s_, uv, fn); /* a snapshot a raising handler interrupted */
    }
    /* After every handler call: the handler may have closed the reader, freeing rs. */
    while (n < max && s_->rs != NULL) {
        kinf_shm_event ev;
        kinf_shm_view v, old;
        kinf_shm_log_read_result r;
        int deliver = 1, as_add = 0, got;
        kinf_err err = KINF_OK;

        kinf_shm_read_begin(rs->seg->shm, rs->slot);
        r = kinf_shm_log_read(rs->seg->shm, log, rs->cursor, &ev);
        if (r == KINF_SHM_LOG_EVENT && ev.type == KINF_SHM_RESYNCED)
            r = KINF_SHM_LOG_BEHIND; /* a new writer took over: start over from the content */
        if (r == KINF_SHM_LOG_EVENT && kinf_shm_store_view(st, ev.obj, &v) != KINF_OK)
            r = KINF_SHM_LOG_CORRUPT;
        if (r == KINF_SHM_LOG_EVENT && ev.type == KINF_SHM_UPDATED && ev.old != 0 &&
            kinf_shm_store_view(st, ev.old, &old) != KINF_OK)
            r = KINF_SHM_LOG_CORRUPT;
        if (r != KINF_SHM_LOG_EVENT) {
            kinf_shm_read_end(rs->seg->shm, rs->slot);
            if (r == KINF_SHM_LOG_NONE)
                break;
            if (r == KINF_SHM_LOG_CORRUPT)
                return kl_sh_fail(L, rs, KINF_ECORRUPT); /* the cursor stays: read again next time */
            got = resync(L, s_, rs, uv, fn); /* fell behind: start over */
            if (got < 0)
                return 3;
            n += got;
            continue;
        }
        rs->cursor++;
        rs->events++;
        if (ev.seq < rs->catchup) {
            /* Within the snapshot's span: only what the handlers have not seen. */
            uintptr_t had = (uintptr_t)kinf_map_get(&rs->seen, v.key, v.key_len);
            int known = kinf_map_find(&rs->seen, v.key, v.key_len) != NULL;
            if (ev.type == KINF_SHM_DELETED)
                deliver = known && had < ev.seq;
            else
                deliver = !known || had < ev.seq;
            as_add = ev.type == KINF_SHM_UPDATED && !known; /* its old version never shown */
            if (deliver) {
                char *key = malloc(v.key_len ? v.key_len : 1);
                kinf_map_slot *sl = kinf_map_find(&rs->seen, v.key, v.key_len);
                if (sl != NULL) {
                    sl->value = (void *)(uintptr_t)ev.seq;
                    free(key);
                } else if (key != NULL) {
                    memcpy(key, v.key, v.key_len);
                    if (kinf_map_put(&rs->seen, key, v.key_len, (void *)(uintptr_t)ev.seq) !=
                        KINF_OK)
                        free(key);
                }
            }
        }
        if (!deliver) {
            kinf_shm_read_end(rs->seg->shm, rs->slot);
            continue;
        }
        if (ev.type == KINF_SHM_UPDATED && ev.old != 0 && !as_add) {
            err = kl_sh_push_record(L, rs, uv, &old); /* the table handed out before, if any */
            if (err == KINF_OK) {
                kl_sh_forget(L, uv, v.key, v.key_len);
                if ((err = kl_sh_push_record(L, rs, uv, &v)) == KINF_OK)
                    lua_insert(L, -2);
                else
                    lua_pop(L, 1);
            }
        } else if ((err = kl_sh_push_record(L, rs, uv, &v)) == KINF_OK) {
            if (ev.type == KINF_SHM_DELETED)
                kl_sh_forget(L, uv, v.key, v.key_len);
            lua_pushnil(L);
        }
        kinf_shm_read_end(rs->seg->shm, rs->slot);
        if (err != KINF_OK) {
            rs->cursor--; /* delivered at the next poll */
            return kl_sh_fail(L, rs, err);
        }
        if (ev.type != KINF_SHM_DELETED)
            kl_sh_mark_handed(L, uv, v.key, v.key_len, v.off);
        call_handler(L, fn, ev.type == KINF_SHM_DELETED ? EV_DELETE
                            : ev.type == KINF_SHM_UPDATED && !as_add ? EV_UPDATE : EV_ADD, 0);
        n++;
        if (s_->rs == NULL)
            break;
        if (rs->cursor >= rs->catchup && rs->seen.count > 0)
            kl_seen_clear(rs);
    }
    lua_pushinteger(L, n);
    return 1;
}

/* poll(max, fn). A nested poll from fn would hand fn later changes before the rest of the
 * current snapshot (an older version after a newer one): refused, as is close (sh_close). */
int kl_sh_poll(lua_State *L)
{
    lshared *s = kl_sh_check(L);
    int rc;
    if (s->polling)
        return luaL_error(L, "kinformer: shared store: poll called from inside its handler");
    lua_settop(L, 3);
    lua_pushcfunction(L, poll_protected);
    lua_insert(L, 1);
    s->polling = 1;
    rc = lua_pcall(L, 3, LUA_MULTRET, 0);
    s->polling = 0; /* also when fn raised */
    if (rc != LUA_OK)
        return lua_error(L);
    return lua_gettop(L);
}

