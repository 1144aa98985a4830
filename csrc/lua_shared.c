/*
 * lua_shared.c - the shared cache from Lua: core.shm(size) maps a segment (before nginx forks
 * its workers), an informer's processor mirrors its store into it (processor:mirror:
 * lua_mirror.c), and any process reads it with seg:store(slot).
 *
 * Readers: get / get_by_key / list / list_keys / by_index / index_keys / list_index_func_values /
 * len read the segment inside a read section (shm.h) and hand out lazily decoded tables whose
 * JSON stays in the segment (kinf_object_borrow): the process holds the record (its reader
 * slot's bit, shm_store.h) for as long as one of its tables is alive. A table is made once per
 * record version and reused (TABLES / OFFS by key, in the handle's uservalue); get(key) hands
 * the cached table out without a read section while the store has published no write since
 * (FAST: key -> table, valid for one write count of the store, started over when it moves). by_index and index_keys
 * hand out the same read-only array while the value's bucket is unchanged (RESULTS, with
 * lua_results.c's rules: held weakly, rebuilt when its length was changed).
 * poll(max, fn) hands fn(kind, obj, old, is_initial) the changes since the last poll, in order:
 * the first poll hands every object as an add (is_initial true) first, then the changes from
 * where that snapshot began, skipping what the snapshot already showed; after the reader fell
 * behind the log or a new writer took over, the snapshot is handed as what differs from what
 * fn was told (adds, updates, deletes). The tables of replaced and deleted records leave the cache there,
 * so a reader should poll (the OpenResty integration does, from a timer). fn may read the
 * handle; poll and close from inside fn raise. Poll is in lua_shared_poll.c.
 *
 * Ownership: a segment's C handle (segref) and a reader's state (rstate) are reference counted:
 * the userdata hold one reference each, every borrowed record one on its reader's state, and
 * each reader state one on its segment; the mapping goes with the last reference.
 * Threads: the thread that owns the Lua state.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "labelselector.h"
#include "lua_kinf.h"
#include "lua_results.h"
#include "lua_shared.h"
#include "lua_shared_impl.h"
#include "lua_store.h"
#include "map.h"
#include "shm_store.h"

#define KL_SHM_MT "kinformer.shm"


/* Sets t[k] = v in the table on top of the stack. */
void kl_set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

/* ---- segments ---- */

lseg *kl_check_seg(lua_State *L, int idx)
{
    return luaL_checkudata(L, idx, KL_SHM_MT);
}

kinf_shm *kl_check_shm(lua_State *L, int idx)
{
    return kl_check_seg(L, idx)->seg->shm;
}

int kl_new_shm(lua_State *L)
{
    lua_Integer size = luaL_checkinteger(L, 1);
    lseg *ls;
    kinf_err err;

    if (size < 65536)
        return kl_argerror(L, 1, "shm", "size must be at least 65536 bytes, got %d", (int)size);
    ls = kl_newuserdata(L, sizeof(*ls));
    ls->seg = NULL;
    luaL_setmetatable(L, KL_SHM_MT);
    ls->seg = calloc(1, sizeof(*ls->seg));
    if (ls->seg == NULL)
        return kl_fail(L, KINF_ENOMEM, NULL);
    ls->seg->shm = kinf_shm_create((size_t)size, &err);
    if (ls->seg->shm == NULL) {
        free(ls->seg);
        ls->seg = NULL;
        return kl_fail(L, err, "kinformer: shm: cannot map the segment");
    }
    kl_seg_init(ls->seg);
    return 1;
}

static int seg_gc(lua_State *L)
{
    lseg *ls = kl_check_seg(L, 1);
    kl_seg_unref(ls->seg);
    ls->seg = NULL;
    return 0;
}

void kl_push_shm_stats(lua_State *L, kinf_shm *shm)
{
    kinf_shm_stats st;
    kinf_shm_stats_get(shm, &st);
    lua_createtable(L, 0, 10);
    kl_set_int(L, "size", (lua_Integer)st.size);
    kl_set_int(L, "used", (lua_Integer)st.used);
    kl_set_int(L, "free", (lua_Integer)(st.free_listed + st.untouched));
    kl_set_int(L, "alloc_failures", (lua_Integer)st.alloc_failures);
    kl_set_int(L, "takeovers", (lua_Integer)st.takeovers);
    kl_set_int(L, "swept_blocks", (lua_Integer)st.swept_blocks);
    kl_set_int(L, "swept_bytes", (lua_Integer)st.swept_bytes);
    kl_set_int(L, "readers", st.readers);
    kl_set_int(L, "writer", st.writer);
    kl_set_int(L, "retired", (lua_Integer)st.retired);
}

static int seg_stats(lua_State *L)
{
    lseg *ls = kl_check_seg(L, 1);
    if (ls->seg == NULL)
        return luaL_error(L, "kinformer: shm: the segment is gone");
    kl_push_shm_stats(L, ls->seg->shm);
    return 1;
}

static int check_root(lua_State *L, int idx, const char *fname)
{
    lua_Integer root = luaL_checkinteger(L, idx);
    if (root < 1 || root > KINF_SHM_ROOTS)
        kl_argerror(L, idx - 1, fname, "slot must be 1..%d, got %d", KINF_SHM_ROOTS, (int)root);
    return (int)root - 1;
}

/* ---- readers: records to tables ---- */

/* Pushes the table of the record at v (inside a read section): the one made before for this
 * version of its key, else a new one, which replaces the cached one. Stack: the uservalue at uv.
 * KINF_ENOMEM (nothing pushed) when the record cannot be borrowed; the caller ends its read
 * section before it reports it.
 * UV_OFFS holds each cached table's record offset, negated once poll handed that table to its
 * handler (mark_handed): a resync tells from it what the handlers were told. */
kinf_err kl_sh_push_record(lua_State *L, rstate *rs, int uv, const kinf_shm_view *v)
{
    kinf_object *obj;
    kl_guard *g;
    kinf_err err;
    int key;

    lua_pushlstring(L, v->key, v->key_len); /* made once, used for every lookup below */
    key = lua_gettop(L);
    lua_rawgeti(L, uv, UV_OFFS);
    lua_pushvalue(L, key);
    lua_rawget(L, -2);
    if (fabs(lua_tonumber(L, -1)) == (lua_Number)v->off) {
        lua_pop(L, 2);
        lua_rawgeti(L, uv, UV_TABLES);
        lua_pushvalue(L, key);
        lua_rawget(L, -2);
        lua_replace(L, key); /* the table where the key was */
        lua_settop(L, key);
        return KINF_OK;
    }
    lua_pop(L, 2);
    g = kl_push_guard(L);
    obj = kl_borrow(rs, v, &err);
    if (obj == NULL) {
        lua_settop(L, key - 1);
        return err;
    }
    g->objs = g->one;
    g->objs[0] = obj;
    g->n = 1;
    kl_push_object(L, obj);
    kl_guard_release(g); /* the table's box holds its own reference */
    lua_rawgeti(L, uv, UV_TABLES);
    lua_pushvalue(L, key);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    lua_rawgeti(L, uv, UV_OFFS);
    lua_pushvalue(L, key);
    lua_pushnumber(L, (lua_Number)v->off);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    lua_replace(L, key); /* the table where the key was; the guard above it goes */
    lua_settop(L, key);
    return KINF_OK;
}

/* Starts the table caches of the uservalue table at uv over (the tables cached so far are
 * collected, releasing their holds, once nothing else refers to them). */
void kl_sh_reset_caches(lua_State *L, int uv)
{
    uv = kl_absindex(L, uv);
    for (int t = UV_TABLES; t <= UV_FAST; t++) {
        lua_newtable(L);
        lua_rawseti(L, uv, t);
    }
    kl_results_new(L); /* RESULTS: [1] objects, [2] keys: index -> weak value -> array */
    lua_rawseti(L, uv, UV_RESULTS);
}

/* Records that the handlers were handed the table cached for key at record offset off (when
 * that is still the cached one). */
void kl_sh_mark_handed(lua_State *L, int uv, const char *key, size_t len, kinf_shm_off off)
{
    lua_rawgeti(L, uv, UV_OFFS);
    lua_pushlstring(L, key, len);
    lua_pushvalue(L, -1);
    lua_rawget(L, -3);
    if (lua_tonumber(L, -1) == (lua_Number)off) {
        lua_pop(L, 1);
        lua_pushnumber(L, -(lua_Number)off);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    } else {
        lua_pop(L, 3);
    }
}

/* Forgets key's cached table (its record was replaced or deleted). */
void kl_sh_forget(lua_State *L, int uv, const char *key, size_t len)
{
    for (int t = UV_TABLES; t <= UV_FAST; t++) {
        lua_rawgeti(L, uv, t);
        lua_pushlstring(L, key, len);
        lua_pushnil(L);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    }
}

/* ---- reader handles ---- */

/* A handle inherited through fork would share its slot and holds with the parent's copy: the
 * child's releases would free what the parent still reads. Refused: the child opens its own. */
lshared *kl_sh_check(lua_State *L)
{
    lshared *s = luaL_checkudata(L, 1, KL_SHARED_MT);
    int self;
    if (s->rs == NULL)
        luaL_error(L, "kinformer: shared store is closed");
    else if (s->rs->pid != (self = kl_self_pid()))
        luaL_error(L, "kinformer: shared store: this reader was opened in process %d and is used "
                   "in process %d (after fork): open a reader in this process with seg:store()",
                   s->rs->pid, self);
    return s;
}

/* rs's slot, or -1 after logging once (error) that every slot is taken. */
int kl_sh_need_slot(lua_State *L, rstate *rs)
{
    if (kl_rstate_slot(rs) >= 0)
        return rs->slot;
    if (!rs->slot_logged) {
        char msg[200];
        snprintf(msg, sizeof(msg), "shared store: no free reader slot in the segment (%d "
                 "processes read it already): this process cannot read it", KINF_SHM_READERS);
        kl_log(L, "error", msg);
        rs->slot_logged = 1;
    }
    return -1;
}

#define CORRUPT_MSG "kinformer: shared store: the shared memory is corrupt (a word of the segment " \
                    "does not hold what the writer wrote: a stray write of some process); " \
                    "recreate the segment (restart nginx)"

/* Returns nil, msg, code for err; a corrupt segment is also logged, once per reader (error). */
int kl_sh_fail(lua_State *L, rstate *rs, kinf_err err)
{
    if (err != KINF_ECORRUPT)
        return kl_fail(L, err, NULL);
    if (!rs->corrupt_logged) {
        kl_log(L, "error", CORRUPT_MSG);
        rs->corrupt_logged = 1;
    }
    return kl_fail(L, KINF_ECORRUPT, CORRUPT_MSG);
}

/* What a read presizes a table for: a count read from the segment is checked, but a corrupt
 * one may still be large. */
static int presize(uint64_t n)
{
    return n < 1024 ? (int)n : 1024;
}


/* The reader's store, attached once the writer has created it; NULL before (the callers
 * return nil, "not created yet", "ENOTFOUND"). */
kinf_shm_store *kl_sh_attached(rstate *rs)
{
    if (rs->st == NULL)
        rs->st = kinf_shm_store_attach(rs->seg->shm, rs->root, &rs->attach_err);
    return rs->st;
}



static int sh_get_by_key(lua_State *L)
{
    size_t len;
    const char *key;
    kinf_shm_view v;
    kinf_err err;
    uint64_t writes;
    int found;
    lshared *fast = lua_touserdata(L, 1);

    /* Fast path: nothing written since this key was looked up (the metatable checked against
     * get's upvalue, not by name). */
    if (fast != NULL && lua_type(L, 2) == LUA_TSTRING && lua_getmetatable(L, 1)) {
        int same = lua_rawequal(L, -1, lua_upvalueindex(1));
        lua_pop(L, 1);
        if (same && fast->rs != NULL && fast->rs->st != NULL &&
            kinf_shm_store_writes(fast->rs->st) == fast->rs->fast_writes &&
            fast->rs->pid == kl_self_pid()) {
            lua_settop(L, 2);
            kl_getuservalue(L, 1);
            lua_rawgeti(L, 3, UV_FAST);
            lua_pushvalue(L, 2);
            lua_rawget(L, 4);
            if (!lua_isnil(L, 5))
                return 1;
        }
    }
    {
    READER_PROLOGUE();
    key = luaL_checklstring(L, 2, &len);
    luaL_checkstack(L, 12, "kinformer: shared store");
    lua_settop(L, uv);
    writes = kinf_shm_store_writes(st);
    kinf_shm_read_begin(rs->seg->shm, rs->slot);
    found = kinf_shm_store_get(st, key, len, &v);
    /* Only a memory error of Lua can raise inside a section: it stays open until this
     * process's next read, which only holds reclamation back meanwhile. */
    err = found > 0 ? kl_sh_push_record(L, rs, uv, &v) : found < 0 ? KINF_ECORRUPT : KINF_OK;
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    if (err != KINF_OK)
        return kl_sh_fail(L, rs, err);
    if (!found) {
        kl_sh_forget(L, uv, key, len);
        lua_pushnil(L);
        return 1;
    }
    if (writes != rs->fast_writes) { /* a write since: start FAST over */
        lua_newtable(L);
        lua_rawseti(L, uv, UV_FAST);
        rs->fast_writes = writes;
    }
    lua_rawgeti(L, uv, UV_FAST);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    return 1;
    }
}

/* Pushes an array of the tables (keys_only: the keys) of a bucket's records (inside a read
 * section). */
static kinf_err push_records(lua_State *L, rstate *rs, int uv, kinf_shm_bucket *b, int keys_only)
{
    kinf_shm_off off;
    lua_createtable(L, presize(b->n), 0);
    for (size_t i = 0; (off = kinf_shm_bucket_next(b)) != 0; i++) {
        kinf_shm_view v;
        if (kinf_shm_store_view(rs->st, off, &v) != KINF_OK) {
            lua_pop(L, 1);
            return KINF_ECORRUPT;
        }
        if (keys_only) {
            lua_pushlstring(L, v.key, v.key_len);
        } else {
            kinf_err err = kl_sh_push_record(L, rs, uv, &v);
            if (err != KINF_OK) {
                lua_pop(L, 1);
                return err;
            }
        }
        lua_rawseti(L, -2, (int)i + 1);
    }
    if (b->corrupt) {
        lua_pop(L, 1);
        return KINF_ECORRUPT;
    }
    return KINF_OK;
}

static int by_index_common(lua_State *L, const char *fname, int keys_only)
{
    const char *index;
    size_t len;
    const char *value;
    kinf_shm_bucket b;
    uint64_t writes;
    kinf_err err;
    int ix, sub;
    READER_PROLOGUE();
    index = luaL_checkstring(L, 2);
    value = luaL_checklstring(L, 3, &len);
    ix = kinf_shm_store_index_of(st, index);
    if (ix < 0)
        return kl_argerror(L, 1, fname, "index '%s' does not exist", index);
    luaL_checkstack(L, 16, "kinformer: shared store");
    lua_settop(L, uv);
    writes = kinf_shm_store_writes(st);
    /* RESULTS[keys_only + 1][index][value]: the array handed out last */
    lua_rawgeti(L, uv, UV_RESULTS);
    lua_rawgeti(L, -1, keys_only + 1);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        kl_results_push_weak_table(L);
        lua_pushvalue(L, 2);
        lua_pushvalue(L, -2);
        lua_rawset(L, -4);
    }
    sub = lua_gettop(L);
    lua_pushvalue(L, 3);
    lua_rawget(L, sub);
    if (kl_results_valid(L, writes, 0, 0))
        return 1; /* nothing written since it was built */
    kinf_shm_read_begin(rs->seg->shm, rs->slot);
    if (kinf_shm_store_by_index(st, ix, value, len, &b) != KINF_OK) {
        kinf_shm_read_end(rs->seg->shm, rs->slot);
        return kl_sh_fail(L, rs, KINF_ECORRUPT);
    }
    if (kl_results_valid(L, writes, 1, b.version)) {
        kinf_shm_read_end(rs->seg->shm, rs->slot);
        return 1;
    }
    lua_pop(L, 1);
    err = push_records(L, rs, uv, &b, keys_only);
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    if (err != KINF_OK)
        return kl_sh_fail(L, rs, err);
    kl_results_seal(L, writes, b.version);
    lua_pushvalue(L, 3);
    lua_pushvalue(L, -2);
    lua_rawset(L, sub);
    return 1;
}

static int sh_by_index(lua_State *L)
{
    return by_index_common(L, "by_index", 0);
}

static int sh_index_keys(lua_State *L)
{
    return by_index_common(L, "index_keys", 1);
}

static int shared_has_index(void *ud, const char *name)
{
    return kinf_shm_store_index_of(ud, name) >= 0;
}

/* Whether the record at v passes list's options: namespace, index values (ixs: the matches'
 * index numbers) and selector. */
static int passes(kinf_shm_store *st, const kinf_shm_view *v, const kinf_store_query *q,
                  const int *ixs, const kinf_labelselector *sel, kinf_err *err)
{
    if (q->namespace_.len != 0 && (v->namespace_.len != q->namespace_.len ||
                                   memcmp(v->namespace_.ptr, q->namespace_.ptr, v->namespace_.len)))
        return 0;
    for (size_t i = 0; i < q->nmatches; i++) {
        kinf_str vals[64];
        size_t n = kinf_shm_store_values(st, v->off, ixs[i], vals, 64);
        int has = 0;
        if (n == KINF_SHM_STORE_CORRUPT) {
            *err = KINF_ECORRUPT;
            return 0;
        }
        for (size_t j = 0; j < n && j < 64 && !has; j++)
            has = vals[j].len == q->matches[i].value.len &&
                  memcmp(vals[j].ptr, q->matches[i].value.ptr, vals[j].len) == 0;
        if (!has)
            return 0;
    }
    if (sel != NULL) {
        kinf_object probe; /* the matcher reads metadata.labels from the record's JSON */
        memset(&probe, 0, sizeof(probe));
        probe.json = v->json;
        probe.json_len = v->json_len;
        return kinf_labelselector_matches(sel, &probe);
    }
    return 1;
}

/* list / list_keys, with list's options as for a local store (docs/api.md): candidates from the
 * narrowest bucket named (an index value, else the namespace through the "namespace" index),
 * else every record; each checked against the rest. */
static int list_common(lua_State *L, int keys_only)
{
    const char *fname = keys_only ? "list_keys" : "list";
    lshared *s_ = kl_sh_check(L);
    rstate *rs = s_->rs;
    kinf_shm_store *st = kl_sh_attached(rs);
    kinf_store_query q;
    const char *selector = NULL;
    size_t selector_len = 0;
    kinf_labelselector *sel = NULL;
    kinf_shm_bucket cand;
    int ixs[KINF_SHM_STORE_INDEXES], uv, all = 1, n = 0;
    kinf_shm_map_iter it;
    kinf_err err = KINF_OK;
    kl_guard *g;

    memset(&q, 0, sizeof(q));
    if (kl_sh_need_slot(L, rs) < 0)
        return kl_fail(L, KINF_EBUSY, NO_SLOT_MSG);
    if (st == NULL)
        return NOT_ATTACHED(L, rs);
    /* Read raw: no Lua code runs that could close the reader and free rs. */
    if (kl_check_list_args(L, fname))
        kl_read_list_options(L, fname, shared_has_index, st, &q, &selector, &selector_len);
    if (q.nmatches > KINF_SHM_STORE_INDEXES)
        return kl_argerror(L, 1, fname, "option 'index': too many indexes");
    g = kl_push_guard(L);
    if (selector != NULL && (err = kl_parse_selector(L, fname, selector, selector_len, g, &sel)))
        return kl_fail(L, err, NULL);
    kl_getuservalue(L, 1);
    uv = lua_gettop(L);
    luaL_checkstack(L, 12, "kinformer: shared store");
    for (size_t i = 0; i < q.nmatches; i++)
        ixs[i] = kinf_shm_store_index_of(st, q.matches[i].index);
    kinf_shm_read_begin(rs->seg->shm, rs->slot);
    /* The narrowest bucket named is where the candidates come from. */
    for (size_t i = 0; i <= q.nmatches; i++) {
        kinf_shm_bucket b;
        int ix = i < q.nmatches ? ixs[i] : kinf_shm_store_index_of(st, KINF_NAMESPACE_INDEX);
        const kinf_str *value = i < q.nmatches ? &q.matches[i].value : &q.namespace_;
        if (ix < 0 || value->len == 0)
            continue;
        if (kinf_shm_store_by_index(st, ix, value->ptr, value->len, &b) != KINF_OK)
            err = KINF_ECORRUPT;
        if (all || b.n < cand.n) {
            cand = b;
            all = 0;
        }
    }
    lua_createtable(L, presize(all ? kinf_shm_store_len(st) : cand.n), 0);
    if (all)
        kinf_shm_store_iter(st, -1, &it);
    while (err == KINF_OK) {
        kinf_shm_off off = all ? kinf_shm_map_next(rs->seg->shm, &it) : kinf_shm_bucket_next(&cand);
        kinf_shm_view v;
        if (off == 0) {
            if (all ? it.corrupt : cand.corrupt)
                err = KINF_ECORRUPT;
            break;
        }
        if ((err = kinf_shm_store_view(st, off, &v)) != KINF_OK)
            break;
        if (!passes(st, &v, &q, ixs, sel, &err))
            continue;
        if (keys_only)
            lua_pushlstring(L, v.key, v.key_len);
        else if ((err = kl_sh_push_record(L, rs, uv, &v)) != KINF_OK)
            break;
        lua_rawseti(L, -2, ++n);
    }
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    return err == KINF_OK ? 1 : kl_sh_fail(L, rs, err);
}

static int sh_list(lua_State *L)
{
    return list_common(L, 0);
}

static int sh_list_keys(lua_State *L)
{
    return list_common(L, 1);
}

static int sh_list_index_func_values(lua_State *L)
{
    kinf_shm_map_iter it;
    kinf_shm_off off;
    int ix, n = 0;
    READER_PROLOGUE();
    (void)uv;
    ix = kinf_shm_store_index_of(st, luaL_checkstring(L, 2));
    lua_newtable(L);
    if (ix < 0)
        return 1; /* as the local store: an unknown index has no values */
    kinf_shm_read_begin(rs->seg->shm, rs->slot);
    kinf_shm_store_iter(st, ix, &it);
    while ((off = kinf_shm_map_next(rs->seg->shm, &it)) != 0) {
        kinf_str val = kinf_shm_store_bucket_value(st, off);
        lua_pushlstring(L, val.ptr, val.len);
        lua_rawseti(L, -2, ++n);
    }
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    return it.corrupt ? kl_sh_fail(L, rs, KINF_ECORRUPT) : 1;
}

static int sh_len(lua_State *L)
{
    READER_PROLOGUE();
    (void)uv;
    lua_pushinteger(L, (lua_Integer)kinf_shm_store_len(st));
    return 1;
}

static int sh_status(lua_State *L)
{
    kinf_shm_store_info info;
    lshared *s = kl_sh_check(L);
    rstate *rs = s->rs;
    kinf_shm_store *st = kl_sh_attached(rs);
    lua_createtable(L, 0, 10);
    lua_pushboolean(L, st != NULL);
    lua_setfield(L, -2, "created");
    if (st != NULL) {
        kinf_shm_store_info_get(st, &info);
        kl_set_int(L, "items", (lua_Integer)info.items);
        kl_set_int(L, "writes", (lua_Integer)info.writes);
        kl_set_int(L, "write_failures", (lua_Integer)info.write_failures);
        kl_set_int(L, "log_head", (lua_Integer)info.log_head);
    }
    kl_set_int(L, "cursor", (lua_Integer)rs->cursor);
    kl_set_int(L, "resyncs", (lua_Integer)rs->resyncs);
    kl_set_int(L, "events", (lua_Integer)rs->events);
    pthread_mutex_lock(&rs->mu);
    lua_pushinteger(L, (lua_Integer)rs->holds.count);
    pthread_mutex_unlock(&rs->mu);
    lua_setfield(L, -2, "held");
    kl_set_int(L, "slot", kl_rstate_slot(rs));
    if (rs->slot < 0) {
        lua_pushstring(L, NO_SLOT_MSG);
        lua_setfield(L, -2, "error");
    }
    kl_push_shm_stats(L, rs->seg->shm);
    lua_setfield(L, -2, "segment");
    return 1;
}

static int sh_gc(lua_State *L)
{
    lshared *s = luaL_checkudata(L, 1, KL_SHARED_MT);
    if (s->rs == NULL)
        return 0;
    /* The cached tables go; each releases its hold when collected. */
    kl_getuservalue(L, 1);
    kl_sh_reset_caches(L, -1);
    kl_rstate_unref(s->rs);
    s->rs = NULL;
    return 0;
}

static int sh_close(lua_State *L)
{
    lshared *s = luaL_checkudata(L, 1, KL_SHARED_MT);
    if (s->polling)
        return luaL_error(L, "kinformer: shared store: close called from inside its poll handler");
    return sh_gc(L);
}

static int seg_store(lua_State *L)
{
    lseg *ls = kl_check_seg(L, 1);
    int root = check_root(L, 2, "store");
    lshared *s;
    rstate *rs;

    if (ls->seg == NULL)
        return luaL_error(L, "kinformer: shm: the segment is gone");
    s = kl_newuserdata(L, sizeof(*s));
    s->rs = NULL;
    s->polling = 0;
    luaL_setmetatable(L, KL_SHARED_MT);
    lua_createtable(L, 5, 0);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, UV_SEG);
    kl_sh_reset_caches(L, -1);
    kl_setuservalue(L, -2);
    rs = kl_rstate_new(ls->seg, root);
    if (rs == NULL)
        return kl_fail(L, KINF_ENOMEM, NULL);
    s->rs = rs;
    return 1;
}

static const luaL_Reg SEG_METHODS[] = {
    {"store", seg_store},
    {"stats", seg_stats},
    {NULL, NULL},
};

static const luaL_Reg SEG_META[] = {
    {"__gc", seg_gc},
    {NULL, NULL},
};

static const luaL_Reg SHARED_METHODS[] = {
    {"get", sh_get_by_key},
    {"get_by_key", sh_get_by_key},
    {"list", sh_list},
    {"list_keys", sh_list_keys},
    {"by_index", sh_by_index},
    {"index_keys", sh_index_keys},
    {"list_index_func_values", sh_list_index_func_values},
    {"len", sh_len},
    {"poll", kl_sh_poll},
    {"status", sh_status},
    {"close", sh_close},
    {NULL, NULL},
};

static const luaL_Reg SHARED_META[] = {
    {"__gc", sh_gc},
    {"__len", sh_len},
    {NULL, NULL},
};

void kl_open_shared(lua_State *L)
{
    kl_new_class(L, KL_SHM_MT, SEG_METHODS, SEG_META);
    kl_new_class(L, KL_SHARED_MT, SHARED_METHODS, SHARED_META);
    /* get and get_by_key again, with the metatable as their upvalue (the fast path) */
    luaL_getmetatable(L, KL_SHARED_MT);
    lua_getfield(L, -1, "__index");
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, sh_get_by_key, 1);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "get");
    lua_setfield(L, -2, "get_by_key");
    lua_pop(L, 2);
}
