/*
 * lua_shm_named.c - segments that outlive the Lua state, and the binary, that mapped them:
 * core.shm_named(name, size) maps a segment the first time a process asks for name, and hands
 * the same mapping to every later call with that name and size, from any Lua state of the
 * process, and to the first call of a program this process executes (nginx's binary upgrade).
 *
 * Why: nginx's master runs init_by_lua in a new Lua state on every reload and forks the new
 * workers from it; on a binary upgrade (USR2) it forks and executes a new master, which runs
 * init_by_lua from scratch. A segment mapped there again would start empty, and the new workers
 * would have nothing to serve until a writer listed; with the same memory they read what the
 * previous generation's writer left, complete, from their first request.
 *
 * Contract:
 * - The registry is process-global (static), a few names; it keeps one reference on each
 *   segment (segref), so the mapping stays while the process lives, whatever the Lua states do.
 *   A call with a known name and another size maps a new segment and drops the registry's
 *   reference on the old one (unmapped in this process once no Lua state uses it; processes
 *   forked before keep theirs).
 * - Each segment lives in a memfd named "kinformer:NAME" that the registry keeps open without
 *   close-on-exec, so a program this process (or a child it forks) executes inherits it. The
 *   first call for a name in a process looks for such a descriptor among its own (/proc/self/fd:
 *   the link reads "/memfd:kinformer:NAME (deleted)") and attaches the segment when it has this
 *   build's layout and the size asked for; inherited ones that do not fit are closed. No
 *   environment variable is needed: nginx passes only its `env` variables to the new binary,
 *   but every descriptor that is not close-on-exec.
 * - A memfd has no path: only processes that hold the descriptor (or may ptrace one that does,
 *   through /proc/PID/fd) reach the memory, as with an anonymous mapping.
 * - Only the master needs the descriptor across exec: core.shm_named_private() makes this
 *   process's descriptors close-on-exec (kinformer.ngx calls it in every worker), so a program a
 *   worker runs (io.popen, an exec credential plugin) never inherits the cache. Limits: a
 *   program the master itself executes, other than a new nginx binary, inherits it. Where memfd_create is missing (Linux before 3.17, a seccomp filter)
 *   the segment is anonymous and a new binary starts with an empty one.
 * - Each segment gets an identity at creation (its hash seed, random, in hex): the same in every
 *   process that shares the memory, also after an exec, different for every new segment.
 * - The module's shared object is pinned in memory (RTLD_NODELETE) on first use, so the registry
 *   survives a Lua state that closes and unloads it.
 * - A forked child inherits the registry (the same mappings).
 * Threads: the thread that runs the master's Lua (nginx: one); no lock.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lua_kinf.h"
#include "lua_shared.h"
#include "lua_shared_impl.h"

#define KL_SHM_MT "kinformer.shm" /* lua_shared.c's segment class */
#define NAMED_MAX 8
#define NAME_MAX_LEN 64
#define MEMFD_PREFIX "kinformer:"
#define INHERITED_MAX 16 /* descriptors of one name looked at after an exec */

typedef struct named {
    char name[NAME_MAX_LEN];
    lua_Integer size; /* as asked for (the mapping is rounded up to pages) */
    segref *seg;      /* the registry's reference */
    int fd;           /* the memfd holding the segment (kept open, inheritable); -1: anonymous */
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

static segref *new_segref(kinf_shm *shm, kinf_err *err)
{
    segref *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        kinf_shm_close(shm);
        *err = KINF_ENOMEM;
        return NULL;
    }
    kl_seg_init(s);
    s->shm = shm;
    return s;
}

/* size rounded up to pages, as kinf_shm_create maps it. */
static size_t mapped_size(lua_Integer size)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    return ((size_t)size + (size_t)page - 1) / (size_t)page * (size_t)page;
}

/* Moves fd to 3 or above: a daemon (nginx) points 0, 1 and 2 at /dev/null after init_by_lua,
 * which would close a segment's descriptor that got one of them. -1 (fd closed) on failure. */
static int above_stdio(int fd)
{
    int moved;
    if (fd > 2)
        return fd;
    moved = fcntl(fd, F_DUPFD, 3); /* not F_DUPFD_CLOEXEC: it must stay inheritable */
    close(fd);
    return moved;
}

/* A new segment: in a memfd named mname when the system has them (*fd set, the caller keeps
 * it), else anonymous (*fd = -1). */
static segref *map_segment(const char *mname, lua_Integer size, int *fd, kinf_err *err)
{
    kinf_shm *shm;
    segref *s;
    int m = memfd_create(mname, 0); /* no MFD_CLOEXEC: a binary upgrade inherits it */

    *fd = -1;
    if (m >= 0)
        m = above_stdio(m);
    if (m < 0) {
        shm = kinf_shm_create((size_t)size, err);
    } else {
        shm = kinf_shm_create_fd(m, (size_t)size, err);
        if (shm == NULL)
            close(m);
    }
    if (shm == NULL)
        return NULL;
    s = new_segref(shm, err);
    if (s == NULL) {
        if (m >= 0)
            close(m);
        return NULL;
    }
    *fd = m;
    return s;
}

/* The segment named mname that this process inherited open across exec, when one holds a
 * segment of this build and of size bytes: its segref, with *fd the descriptor (now the
 * caller's). Every other inherited descriptor of that name is closed: nothing else of this
 * process uses it, and it would keep an unused segment's memory. NULL otherwise (*fd = -1). */
static segref *inherited_segment(const char *mname, lua_Integer size, int *fd)
{
    char want[NAME_MAX_LEN + 32], link[NAME_MAX_LEN + 32], path[64];
    int fds[INHERITED_MAX], n = 0;
    segref *found = NULL;
    struct dirent *de;
    DIR *dir;

    *fd = -1;
    snprintf(want, sizeof(want), "/memfd:%s (deleted)", mname);
    dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return NULL;
    while (n < INHERITED_MAX && (de = readdir(dir)) != NULL) {
        char *end;
        long v = strtol(de->d_name, &end, 10);
        ssize_t len;
        if (*end != '\0' || end == de->d_name || v < 0 || v == dirfd(dir))
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%ld", v);
        len = readlink(path, link, sizeof(link) - 1);
        if (len <= 0 || (size_t)len != strlen(want))
            continue;
        link[len] = '\0';
        if (strcmp(link, want) == 0)
            fds[n++] = (int)v;
    }
    closedir(dir);
    for (int i = 0; i < n; i++) {
        kinf_err err;
        kinf_shm *shm = NULL;
        if (found == NULL) {
            shm = kinf_shm_attach_fd(fds[i], &err);
            if (shm != NULL && kinf_shm_size(shm) != mapped_size(size)) {
                kinf_shm_close(shm);
                shm = NULL;
            }
        }
        if (shm != NULL)
            found = new_segref(shm, &err); /* out of memory: closed, a new one is made */
        if (shm != NULL && found != NULL)
            *fd = above_stdio(fds[i]);
        else
            close(fds[i]);
    }
    if (found != NULL && *fd < 0) { /* the descriptor could not be moved: the mapping stays */
        kl_seg_unref(found);
        found = NULL;
    }
    return found;
}

/* core.shm_named(name, size) -> segment, reused, id, inherited | nil, err, code
 * reused: the segment is one this process mapped before, or inherited across exec (then
 * inherited is true as well). */
int kl_shm_named(lua_State *L)
{
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    lua_Integer size = luaL_checkinteger(L, 2);
    char mname[NAME_MAX_LEN + sizeof(MEMFD_PREFIX)];
    named *e = NULL, *free_slot = NULL;
    lseg *ls;
    int reused = 0, inherited = 0;
    kinf_err err = KINF_OK;

    if (len == 0 || len >= NAME_MAX_LEN || memchr(name, '\0', len) != NULL)
        return kl_argerror(L, 1, "shm_named", "name must be 1 to %d bytes", NAME_MAX_LEN - 1);
    if (size < 65536 || size > ((lua_Integer)1 << 40))
        return kl_argerror(L, 2, "shm_named", "size must be 65536 bytes to 1 TiB, got %f",
                           (double)size);
    pin_module();
    snprintf(mname, sizeof(mname), MEMFD_PREFIX "%s", name);
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
        int fd = -1;
        segref *s = NULL;
        if (e == NULL) { /* this process's first call: a segment inherited across exec? */
            s = inherited_segment(mname, size, &fd);
            reused = inherited = s != NULL;
        }
        if (s == NULL)
            s = map_segment(mname, size, &fd, &err);
        if (s == NULL)
            return kl_fail(L, err, "kinformer: shm_named: cannot map the segment");
        if (e == NULL) {
            e = free_slot;
            memcpy(e->name, name, len + 1);
        } else {
            kl_seg_unref(e->seg);
            if (e->fd >= 0)
                close(e->fd);
        }
        e->seg = s;
        e->fd = fd;
        e->size = size;
        snprintf(e->id, sizeof(e->id), "%016" PRIx64, kinf_shm_seed(s->shm));
    }
    atomic_fetch_add(&e->seg->refs, 1);
    ls->seg = e->seg;
    lua_pushboolean(L, reused);
    lua_pushstring(L, e->id);
    lua_pushboolean(L, inherited);
    return 4;
}

/* core.shm_named_private(): every segment descriptor of the registry close-on-exec in this
 * process (a worker: only the master hands them to a new binary). Idempotent. */
int kl_shm_named_private(lua_State *L)
{
    (void)L;
    for (int i = 0; i < NAMED_MAX; i++) {
        int fd = registry[i].fd;
        if (registry[i].seg != NULL && fd >= 0) {
            int fl = fcntl(fd, F_GETFD);
            if (fl >= 0)
                (void)fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
        }
    }
    return 0;
}

/* core.shm_flags(seg [, bits]) -> flags: sets bits (an integer, 0 to 2^53) in the segment's
 * flags word (kinf_shm_set_flags: kept in the segment, so every process that maps it sees
 * them, also after an exec) and returns the word. */
int kl_shm_flags(lua_State *L)
{
    kinf_shm *shm = kl_check_shm(L, 1);
    if (!lua_isnoneornil(L, 2)) {
        lua_Integer bits = luaL_checkinteger(L, 2);
        if (bits < 0 || bits > ((lua_Integer)1 << 53))
            return kl_argerror(L, 2, "shm_flags", "bits must be 0 to 2^53, got %f", (double)bits);
        kinf_shm_set_flags(shm, (uint64_t)bits);
    }
    lua_pushinteger(L, (lua_Integer)kinf_shm_flags(shm));
    return 1;
}
