/*
 * lua_shm_named.c - segments that outlive the Lua state that mapped them: core.shm_named(name,
 * size) maps a segment the first time a process asks for name, and hands the same mapping to
 * every later call with that name and size, from any Lua state of the process.
 *
 * Why: nginx's master runs init_by_lua in a new Lua state on every reload and forks the new
 * workers from it. A segment mapped there again would start empty, and the new workers would
 * have nothing to serve until a writer listed; with the same mapping they read what the previous
 * generation's writer left, complete, from their first request.
 *
 * Contract:
 * - The registry is process-global (static), a few names; it keeps one reference on each
 *   segment (segref), so the mapping stays while the process lives, whatever the Lua states do.
 *   A call with a known name and another size maps a new segment and drops the registry's
 *   reference on the old one (unmapped in this process once no Lua state uses it; processes
 *   forked before keep theirs).
 * - Each segment gets an identity at creation (its hash seed, random, in hex): the same in every
 *   process that shares the mapping, different for every new mapping.
 * - The module's shared object is pinned in memory (RTLD_NODELETE) on first use, so the registry
 *   survives a Lua state that closes and unloads it.
 * - A forked child inherits the registry (the same mappings). Processes exec'd anew (nginx's
 *   binary upgrade) start with an empty one.
 * Threads: the thread that runs the master's Lua (nginx: one); no lock.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_kinf.h"
#include "lua_shared.h"
#include "lua_shared_impl.h"

#define KL_SHM_MT "kinformer.shm" /* lua_shared.c's segment class */
#define NAMED_MAX 8
#define NAME_MAX_LEN 64

typedef struct named {
    char name[NAME_MAX_LEN];
    lua_Integer size; /* as asked for (the mapping is rounded up to pages) */
    segref *seg;      /* the registry's reference */
    char id[24];
} named;

static named registry[NAMED_MAX];
static int pinned;

/* Keeps this shared object loaded after the Lua state that loaded it closes. */
static void pin_module(void)
{
    Dl_info info;
    if (pinned)
        return;
    pinned = 1;
    if (dladdr((void *)pin_module, &info) != 0 && info.dli_fname != NULL)
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE); /* kept open */
}

static segref *map_segment(lua_Integer size, kinf_err *err)
{
    segref *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    atomic_init(&s->refs, 1);
    atomic_init(&s->mirrored, 0);
    s->shm = kinf_shm_create((size_t)size, err);
    if (s->shm == NULL) {
        free(s);
        return NULL;
    }
    return s;
}

/* core.shm_named(name, size) -> segment, reused, id | nil, err, code */
int kl_shm_named(lua_State *L)
{
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    lua_Integer size = luaL_checkinteger(L, 2);
    named *e = NULL, *free_slot = NULL;
    lseg *ls;
    int reused = 0;
    kinf_err err;

    if (len == 0 || len >= NAME_MAX_LEN || memchr(name, '\0', len) != NULL)
        return kl_argerror(L, 1, "shm_named", "name must be 1 to %d bytes", NAME_MAX_LEN - 1);
    if (size < 65536)
        return kl_argerror(L, 2, "shm_named", "size must be at least 65536 bytes, got %d",
                           (int)size);
    pin_module();
    for (int i = 0; i < NAMED_MAX; i++) {
        if (registry[i].seg == NULL) {
            if (free_slot == NULL)
                free_slot = &registry[i];
        } else if (strcmp(registry[i].name, name) == 0) {
            e = &registry[i];
        }
    }
    if (e == NULL && free_slot == NULL)
        return kl_fail(L, KINF_ENOMEM, "kinformer: shm_named: too many named segments");
    /* The userdata first: a failed allocation raises before anything changed. */
    ls = kl_newuserdata(L, sizeof(*ls));
    ls->seg = NULL;
    luaL_setmetatable(L, KL_SHM_MT);
    if (e != NULL && e->size == size) {
        reused = 1;
    } else {
        segref *s = map_segment(size, &err);
        if (s == NULL)
            return kl_fail(L, err, "kinformer: shm_named: cannot map the segment");
        if (e == NULL) {
            e = free_slot;
            memcpy(e->name, name, len + 1);
        } else {
            kl_seg_unref(e->seg);
        }
        e->seg = s;
        e->size = size;
        snprintf(e->id, sizeof(e->id), "%016" PRIx64, kinf_shm_seed(s->shm));
    }
    atomic_fetch_add(&e->seg->refs, 1);
    ls->seg = e->seg;
    lua_pushboolean(L, reused);
    lua_pushstring(L, e->id);
    return 3;
}
