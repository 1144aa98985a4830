/*
 * lua_store_impl.h - what the store userdata's files share: lua_store.c (the userdata, its writes,
 * reads and table cache) and lua_store_index.c (Lua index functions and the methods that add
 * and use indexers). Nothing else includes it; the other binding files see lua_store.h.
 * Threads: the thread that owns the Lua state only.
 */
#ifndef KINF_LUA_STORE_IMPL_H
#define KINF_LUA_STORE_IMPL_H

#include "lua_kinf.h"
#include "store.h"

#define KL_STORE_MT "kinformer.store"

/* Integer slots of the uservalue table. */
enum { PINNED = 1, FNS = 2, RESULTS = 3, KEYS = 4 };

typedef struct lindex {
    struct lstore *owner;
    int slot; /* key in the FNS table */
} lindex;

typedef struct lstore {
    kinf_store *store;    /* NULL once closed */
    lua_State *L;         /* the state of the write in progress (saved/restored if nested) */
    int fns_ref;          /* registry reference to the FNS table */
    lindex **indexes;     /* owned; ud of each Lua index function */
    size_t nindexes;
    int next_slot;
    int readonly;         /* an informer's cache: only the informer writes it */
    int in_index_fn;      /* index functions of this store running now: close is refused */
} lstore;

/* Runs a core write with ls->L set for the index functions it may call; restores it after, so
 * a nested write from a coroutine or another store cannot leave a stale state behind. */
#define WITH_STATE(ls, L, expr)          \
    do {                                 \
        lua_State *saved_ = (ls)->L;     \
        (ls)->L = (L);                   \
        expr;                            \
        (ls)->L = saved_;                \
    } while (0)

/* lua_store.c */
/* Raises unless the store is open (again after reading an argument that may run Lua code). */
lstore *kl_store_check_open(lua_State *L, lstore *ls);
/* The open store at 1, self of method fname. */
lstore *kl_store_self(lua_State *L, const char *fname);
/* Pushes the uservalue table of the store at index 1 and returns its stack index. */
int kl_store_begin(lua_State *L);
/* Pushes an array of the guarded objects' tables (keys when keys_only), the store's uservalue
 * table at uv, and frees them. Returns 1. */
int kl_store_push_guarded(lua_State *L, int uv, struct kl_guard *g, int keys_only);
/* Reports a write's outcome: true; or true, message, "EINDEX" when an index function failed
 * (the write went through); or nil, message, code. */
int kl_store_write_result(lua_State *L, const char *fname, kinf_err err, const char *msg);

/* lua_store_index.c */
/* Adds the indexers of the table at t ({ name = fn }) to ls on behalf of Lua function fname:
 * the write's results. A name taken already raises (conflict_raises) or returns nil, msg,
 * "EEXIST". */
int kl_store_add_indexer_table(lua_State *L, lstore *ls, int t, const char *fname,
                               int conflict_raises);
/* store:index, store:list_index_func_values, store:add_indexers */
int kl_store_index(lua_State *L);
int kl_store_list_index_func_values(lua_State *L);
int kl_store_add_indexers(lua_State *L);

#endif
