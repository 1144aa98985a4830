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
 * the first poll, and any after the reader fell behind the log, hands every object as an add
 * (is_initial true) first, then the changes from where that snapshot began, skipping what the
 * snapshot already showed. The tables of replaced and deleted records leave the cache there,
 * so a reader should poll (the OpenResty integration does, from a timer). fn may read the
 * handle; poll and close from inside fn raise.
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
#define KL_SHARED_MT "kinformer.shared_store"

enum { UV_SEG = 1, UV_TABLES = 2, UV_OFFS = 3, UV_FAST = 4, UV_RESULTS = 5, UV_PENDING = 6 };

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
static kinf_err push_record(lua_State *L, rstate *rs, int uv, const kinf_shm_view *v)
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
static void reset_caches(lua_State *L, int uv)
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
static void mark_handed(lua_State *L, int uv, const char *key, size_t len, kinf_shm_off off)
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
static void forget(lua_State *L, int uv, const char *key, size_t len)
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
static lshared *check_shared(lua_State *L)
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
static int need_slot(lua_State *L, rstate *rs)
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
static int fail(lua_State *L, rstate *rs, kinf_err err)
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

#define NO_SLOT_MSG "kinformer: shared store: no free reader slot (every one of the segment's " \
                    "64 is another process's)"

/* The reader's store, attached once the writer has created it; NULL before (the callers
 * return nil, "not created yet", "ENOTFOUND"). */
static kinf_shm_store *attached(rstate *rs)
{
    if (rs->st == NULL)
        rs->st = kinf_shm_store_attach(rs->seg->shm, rs->root, &rs->attach_err);
    return rs->st;
}

#define NOT_ATTACHED(L, rs)                                                              \
    ((rs)->attach_err == KINF_ECORRUPT                                                   \
         ? fail(L, rs, KINF_ECORRUPT)                                                    \
         : kl_fail(L, KINF_ENOTFOUND, "kinformer: shared store: not created yet"))

#define READER_PROLOGUE()                                                            \
    lshared *s_ = check_shared(L);                                                   \
    rstate *rs = s_->rs;                                                             \
    kinf_shm_store *st;                                                              \
    int uv;                                                                          \
    if (need_slot(L, rs) < 0)                                                        \
        return kl_fail(L, KINF_EBUSY, NO_SLOT_MSG);                                  \
    if ((st = attached(rs)) == NULL)                                                 \
        return NOT_ATTACHED(L, rs);                                                  \
    kl_getuservalue(L, 1);                                                           \
    uv = lua_gettop(L)

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
    err = found > 0 ? push_record(L, rs, uv, &v) : found < 0 ? KINF_ECORRUPT : KINF_OK;
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    if (err != KINF_OK)
        return fail(L, rs, err);
    if (!found) {
        forget(L, uv, key, len);
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
            kinf_err err = push_record(L, rs, uv, &v);
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
        return fail(L, rs, KINF_ECORRUPT);
    }
    if (kl_results_valid(L, writes, 1, b.version)) {
        kinf_shm_read_end(rs->seg->shm, rs->slot);
        return 1;
    }
    lua_pop(L, 1);
    err = push_records(L, rs, uv, &b, keys_only);
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    if (err != KINF_OK)
        return fail(L, rs, err);
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
    lshared *s_ = check_shared(L);
    rstate *rs = s_->rs;
    kinf_shm_store *st = attached(rs);
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
    if (need_slot(L, rs) < 0)
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
        else if ((err = push_record(L, rs, uv, &v)) != KINF_OK)
            break;
        lua_rawseti(L, -2, ++n);
    }
    kinf_shm_read_end(rs->seg->shm, rs->slot);
    return err == KINF_OK ? 1 : fail(L, rs, err);
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
    return it.corrupt ? fail(L, rs, KINF_ECORRUPT) : 1;
}

static int sh_len(lua_State *L)
{
    READER_PROLOGUE();
    (void)uv;
    lua_pushinteger(L, (lua_Integer)kinf_shm_store_len(st));
    return 1;
}

/* ---- poll ---- */

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
            mark_handed(L, uv, key, klen, (kinf_shm_off)lua_tonumber(L, -1));
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
    reset_caches(L, uv);
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
            (err = push_record(L, rs, uv, &v)) != KINF_OK)
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
        fail(L, rs, err);
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
            mark_handed(L, uv, key, klen, (kinf_shm_off)o);
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
            reset_caches(L, uv);
            if (rs->cursor == 0)
                break;
            continue;
        }
        if (r != KINF_SHM_LOG_EVENT) {
            kinf_shm_read_end(rs->seg->shm, rs->slot);
            if (r == KINF_SHM_LOG_CORRUPT)
                return fail(L, rs, KINF_ECORRUPT);
            break;
        }
        forget(L, uv, v.key, v.key_len); /* only a memory error of Lua raises here */
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
                return fail(L, rs, KINF_ECORRUPT); /* the cursor stays: read again next time */
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
            err = push_record(L, rs, uv, &old); /* the table handed out before, if any */
            if (err == KINF_OK) {
                forget(L, uv, v.key, v.key_len);
                if ((err = push_record(L, rs, uv, &v)) == KINF_OK)
                    lua_insert(L, -2);
                else
                    lua_pop(L, 1);
            }
        } else if ((err = push_record(L, rs, uv, &v)) == KINF_OK) {
            if (ev.type == KINF_SHM_DELETED)
                forget(L, uv, v.key, v.key_len);
            lua_pushnil(L);
        }
        kinf_shm_read_end(rs->seg->shm, rs->slot);
        if (err != KINF_OK) {
            rs->cursor--; /* delivered at the next poll */
            return fail(L, rs, err);
        }
        if (ev.type != KINF_SHM_DELETED)
            mark_handed(L, uv, v.key, v.key_len, v.off);
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
static int sh_poll(lua_State *L)
{
    lshared *s = check_shared(L);
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

static int sh_status(lua_State *L)
{
    kinf_shm_store_info info;
    lshared *s = check_shared(L);
    rstate *rs = s->rs;
    kinf_shm_store *st = attached(rs);
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
    reset_caches(L, -1);
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
    reset_caches(L, -1);
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
    {"poll", sh_poll},
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
