/*
 * lua_informer.c - the informer's processing loop for Lua: core.processor(fifo, store,
 * transform) pops the informer's DeltaFIFO, applies the deltas to its store in C (informer.c)
 * and hands each notification to a Lua sink function. The handler fan-out, resync and replay
 * rules live in lua/kinformer/informer.lua; this file is the hot path that must not touch Lua
 * when nobody listens.
 *
 * processor:dispatch(max, sink) pops up to max keys without blocking; for each notification it
 * drops the replaced record's pinned table from the store and, when sink is given, calls
 * sink(kind, obj, old, is_in_initial_list, is_resync) with kind 1 = add, 2 = update, 3 = delete
 * (is_resync: an update that kept the resourceVersion). Objects are pushed (decoded lazily) only
 * for a sink. Returns the number of keys popped.
 * processor:fd() is readable while work is pending (level-triggered, see informer.h).
 * processor:mirror(segment, slot) also writes every change of the store into a shared store
 * (lua_shared.c), after the local store and before the sink sees it.
 *
 * The uservalue table keeps the FIFO and store userdata alive; the processor also holds C
 * references of its own. dispatch is not re-entrant (a sink that dispatches gets an error).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "informer.h"
#include "lua_kinf.h"
#include "lua_shared.h"
#include "lua_store.h"

#define PROC_MT "kinformer.processor"

typedef struct lproc {
    kinf_fifo *fifo;   /* one reference */
    kinf_store *store; /* one reference */
    kinf_wakeup *wake;
    kinf_notifications notes; /* the item being delivered (released at the next pop or __gc) */
    lua_State *L;             /* the dispatching state, for the transform */
    int transform_ref;        /* registry reference or LUA_NOREF */
    int in_dispatch;
    kl_mirror *mirror;        /* NULL unless processor:mirror */
    unsigned long items, adds, updates, deletes, errors;
    char last_error[320];
} lproc;

static lproc *check_proc(lua_State *L)
{
    lproc *lp = luaL_checkudata(L, 1, PROC_MT);
    if (lp->fifo == NULL)
        luaL_error(L, "kinformer: processor is closed");
    return lp;
}

/* ---- transform ---- */

typedef struct tcall {
    lproc *lp;
    kinf_object *in;
    kinf_object *out;
    char *errbuf;
    size_t errlen;
} tcall;

static int transform_protected(lua_State *L)
{
    kinf_err code;
    tcall *c = lua_touserdata(L, 1);
    kinf_object *obj;
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->lp->transform_ref);
    kl_push_decoded(L, c->in);
    lua_call(L, 1, 1);
    if (!lua_istable(L, -1)) {
        kinf_errmsg(c->errbuf, c->errlen, "transform returned %s, expected an object",
                    luaL_typename(L, -1));
        return 0;
    }
    obj = kl_to_object(L, -1, 1, "transform", &code, c->errbuf, c->errlen);
    if (obj != NULL)
        c->out = kinf_object_ref(obj);
    return 0;
}

static kinf_err transform_cb(void *ud, kinf_object *in, kinf_object **out, char *errbuf,
                             size_t errlen)
{
    lproc *lp = ud;
    lua_State *L = lp->L;
    tcall c = {lp, in, NULL, errbuf, errlen};
    int top = lua_gettop(L);

    errbuf[0] = '\0';
    if (!lua_checkstack(L, 8))
        return KINF_ENOMEM;
    lua_pushcfunction(L, transform_protected);
    lua_pushlightuserdata(L, &c);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        kinf_errmsg(errbuf, errlen, "raised: %s", kl_error_text(L, -1));
        lua_settop(L, top);
        kinf_object_unref(c.out);
        return KINF_EINVAL;
    }
    lua_settop(L, top);
    *out = c.out;
    return c.out != NULL ? KINF_OK : KINF_EINVAL;
}

/* ---- dispatch ---- */

enum { UV_FIFO = 1, UV_STORE = 2, UV_SHM = 3 };

/* Protected: the loop. Stack: proc, max, sink, uservalue, store userdata. */
static int dispatch_protected(lua_State *L)
{
    lproc *lp = lua_touserdata(L, 1);
    lua_Integer max = lua_tointeger(L, 2);
    int has_sink = !lua_isnil(L, 3);
    kinf_informer_step step = {lp->fifo, lp->store, NULL, lp};
    lua_Integer n = 0;
    char msg[320];

    if (lp->transform_ref != LUA_NOREF)
        step.transform = transform_cb;
    while (n < max) {
        kinf_err err;
        kinf_notifications_clear(&lp->notes);
        err = kinf_informer_pop(&step, 0, &lp->notes, msg, sizeof(msg));
        if (err == KINF_ETIMEDOUT || err == KINF_ECLOSED)
            break;
        if (err == KINF_EBUSY)
            return luaL_error(L, "kinformer: the informer's queue is busy (dispatch re-entered)");
        n++;
        lp->items++;
        if (err != KINF_OK) {
            lp->errors++;
            kinf_errmsg(lp->last_error, sizeof(lp->last_error), "%s", msg);
            kl_log(L, "error", msg);
            if (err == KINF_ENOMEM)
                break; /* requeued; try again at the next dispatch */
        }
        for (size_t i = 0; i < lp->notes.n; i++) {
            kinf_notification *note = &lp->notes.v[i];
            if (lp->mirror != NULL) {
                kinf_object *swapped = kl_mirror_note(lp->mirror, note);
                if (swapped != NULL)
                    kl_store_unpin(L, 5, swapped); /* the store keeps the borrowed one now */
                kinf_object_unref(swapped);
            }
            /* With a mirror the store may hold a borrowed copy of note->obj: nothing to repin. */
            if (note->old != NULL && note->old != note->obj)
                kl_store_replaced(L, 5, note->old,
                                  lp->mirror == NULL && note->kind != KINF_EVENT_DELETE
                                      ? note->obj : NULL);
            if (note->kind == KINF_EVENT_ADD)
                lp->adds++;
            else if (note->kind == KINF_EVENT_UPDATE)
                lp->updates++;
            else
                lp->deletes++;
            if (!has_sink)
                continue;
            lua_pushvalue(L, 3);
            lua_pushinteger(L, note->kind);
            kl_push_object(L, note->obj);
            if (note->kind == KINF_EVENT_UPDATE)
                kl_push_object(L, note->old);
            else
                lua_pushnil(L);
            lua_pushboolean(L, note->is_initial);
            /* An update that kept the resourceVersion is a resync (docs/semantics.md, section 5). */
            lua_pushboolean(L, note->kind == KINF_EVENT_UPDATE &&
                                   strcmp(note->old->resource_version,
                                          note->obj->resource_version) == 0);
            lua_call(L, 5, 0);
        }
    }
    kinf_notifications_clear(&lp->notes);
    if (lp->mirror != NULL) {
        kl_mirror_flush(lp->mirror, n > 0);
        if (n > 0)
            kl_mirror_report(L, lp->mirror);
    }
    lua_pushinteger(L, n);
    return 1;
}

static int p_dispatch(lua_State *L)
{
    lproc *lp = check_proc(L);
    lua_Integer max = luaL_optinteger(L, 2, 100);
    lua_State *saved;
    int rc;

    if (max < 1)
        kl_argerror(L, 1, "dispatch", "max must be >= 1, got %d", (int)max);
    if (!lua_isnoneornil(L, 3))
        luaL_checktype(L, 3, LUA_TFUNCTION);
    if (lp->in_dispatch)
        return luaL_error(L, "kinformer: dispatch called from inside a handler");
    lua_settop(L, 3);
    luaL_checkstack(L, 12, "kinformer: dispatch");
    kl_getuservalue(L, 1);           /* 4 */
    lua_rawgeti(L, 4, UV_STORE);     /* 5 */
    lua_pushcfunction(L, dispatch_protected);
    lua_pushlightuserdata(L, lp);
    lua_pushinteger(L, max);
    lua_pushvalue(L, 3);
    lua_pushvalue(L, 4);
    lua_pushvalue(L, 5);

    kinf_wakeup_clear(lp->wake);
    lp->in_dispatch = 1;
    lp->L = L;
    saved = kl_store_set_state(L, 5, L);
    rc = lua_pcall(L, 5, 1, 0);
    kl_store_set_state(L, 5, saved);
    lp->in_dispatch = 0;
    if (kinf_fifo_len(lp->fifo) > 0)
        kinf_wakeup_signal(lp->wake); /* level-triggered: work is left */
    if (rc != LUA_OK) {
        kinf_notifications_clear(&lp->notes);
        return lua_error(L);
    }
    return 1;
}

static int p_fd(lua_State *L)
{
    lua_pushinteger(L, kinf_wakeup_fd(check_proc(L)->wake));
    return 1;
}

/* processor:mirror(segment, slot) -> true | nil, err, code */
static int p_mirror(lua_State *L)
{
    lproc *lp = check_proc(L);
    lua_Integer root = luaL_checkinteger(L, 3);
    char msg[256];
    kinf_err err;

    kl_check_shm(L, 2);
    if (root < 1 || root > KINF_SHM_ROOTS)
        return kl_argerror(L, 2, "mirror", "slot must be 1..%d, got %d", KINF_SHM_ROOTS, (int)root);
    if (lp->mirror != NULL)
        return kl_argerror(L, 1, "mirror", "this informer mirrors already");
    lp->mirror = kl_mirror_open(L, 2, (int)root - 1, lp->store, &err, msg, sizeof(msg));
    if (lp->mirror == NULL)
        return kl_fail(L, err, msg[0] ? msg : NULL);
    kl_getuservalue(L, 1);
    lua_pushvalue(L, 2);
    lua_rawseti(L, -2, UV_SHM); /* the segment lives as long as the mirror */
    lua_pushboolean(L, 1);
    return 1;
}

/* processor:mirror_retain() -> true | nil, err, code: once synced, drops from the shared store
 * what a previous writer left there and this informer's list did not bring. */
static int p_mirror_retain(lua_State *L)
{
    lproc *lp = check_proc(L);
    kinf_err err;
    if (lp->mirror == NULL)
        return kl_argerror(L, 1, "mirror_retain", "this informer does not mirror");
    err = kl_mirror_retain(lp->mirror);
    if (err != KINF_OK)
        return kl_fail(L, err, NULL);
    lua_pushboolean(L, 1);
    return 1;
}

static int p_signal(lua_State *L)
{
    kinf_wakeup_signal(check_proc(L)->wake);
    return 0;
}

static void set_count(lua_State *L, const char *k, unsigned long v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static int p_status(lua_State *L)
{
    lproc *lp = check_proc(L);
    kinf_fifo_stats qs;
    kinf_fifo_get_stats(lp->fifo, &qs);
    lua_createtable(L, 0, 10);
    set_count(L, "items", lp->items);
    set_count(L, "adds", lp->adds);
    set_count(L, "updates", lp->updates);
    set_count(L, "deletes", lp->deletes);
    set_count(L, "errors", lp->errors);
    set_count(L, "queue_length", (unsigned long)qs.keys);
    set_count(L, "queued_deltas", (unsigned long)qs.deltas);
    set_count(L, "queued_bytes", (unsigned long)qs.bytes);
    if (lp->last_error[0]) {
        lua_pushstring(L, lp->last_error);
        lua_setfield(L, -2, "last_error");
    }
    if (lp->mirror != NULL)
        kl_mirror_status(L, lp->mirror);
    return 1;
}

static int p_gc(lua_State *L)
{
    lproc *lp = luaL_checkudata(L, 1, PROC_MT);
    if (lp->fifo == NULL)
        return 0;
    kinf_fifo_set_notify(lp->fifo, NULL, NULL);
    kinf_notifications_free(&lp->notes);
    kl_mirror_close(lp->mirror);
    lp->mirror = NULL;
    kinf_fifo_unref(lp->fifo);
    kinf_store_unref(lp->store);
    kinf_wakeup_free(lp->wake);
    lp->fifo = NULL;
    lp->store = NULL;
    lp->wake = NULL;
    luaL_unref(L, LUA_REGISTRYINDEX, lp->transform_ref);
    lp->transform_ref = LUA_NOREF;
    return 0;
}

static int p_close(lua_State *L)
{
    lproc *lp = luaL_checkudata(L, 1, PROC_MT);
    if (lp->in_dispatch)
        return luaL_error(L, "kinformer: cannot close an informer from inside its handler");
    return p_gc(L);
}

/* core.processor(fifo, store [, transform]) */
int kl_new_processor(lua_State *L)
{
    kinf_fifo *fifo = kl_test_fifo(L, 1);
    kinf_store *store = kl_test_store(L, 2);
    lproc *lp;
    kinf_err err;

    if (fifo == NULL)
        kl_argerror(L, 1, "processor", "kinformer.delta_fifo expected");
    if (store == NULL)
        kl_argerror(L, 2, "processor", "open kinformer.store expected");
    if (!lua_isnoneornil(L, 3))
        luaL_checktype(L, 3, LUA_TFUNCTION);
    lua_settop(L, 3);
    lp = kl_newuserdata(L, sizeof(*lp)); /* 4 */
    memset(lp, 0, sizeof(*lp));
    lp->transform_ref = LUA_NOREF;
    luaL_setmetatable(L, PROC_MT);
    lua_createtable(L, 2, 0);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, UV_FIFO);
    lua_pushvalue(L, 2);
    lua_rawseti(L, -2, UV_STORE);
    kl_setuservalue(L, 4);
    lp->wake = kinf_wakeup_new(&err);
    if (lp->wake == NULL)
        return kl_fail(L, err, "cannot create the informer's eventfd");
    lp->fifo = kinf_fifo_ref(fifo);
    lp->store = kinf_store_ref(store);
    if (!lua_isnil(L, 3)) {
        lua_pushvalue(L, 3);
        lp->transform_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    kl_store_set_readonly(L, 2);
    kinf_fifo_set_notify(fifo, kinf_wakeup_notify, lp->wake);
    if (kinf_fifo_len(fifo) > 0)
        kinf_wakeup_signal(lp->wake);
    lua_settop(L, 4);
    return 1;
}

/* ---- the blocking loop's helpers: a monotonic clock, poll with signals ---- */

static int l_now(lua_State *L)
{
    lua_pushnumber(L, (lua_Number)kinf_now());
    return 1;
}

/* wall_time() -> seconds since the epoch with a fraction (for timestamps such as a Lease's
 * renewTime; durations use now()). */
static int l_wall_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec / 1e9);
    return 1;
}

/* SIGINT/SIGTERM caught while kinformer.run is active: the handler only records the signal and
 * writes a byte to a pipe that wait() polls (async-signal-safe). */
static volatile sig_atomic_t caught;
static int sig_pipe[2] = {-1, -1};
static struct sigaction saved_int, saved_term;
static int catching;

static void on_signal(int sig)
{
    int saved_errno = errno;
    caught = sig;
    if (sig_pipe[1] >= 0) {
        ssize_t rc = write(sig_pipe[1], "s", 1);
        (void)rc;
    }
    errno = saved_errno;
}

static const char *sig_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "signal";
}

static void drain_sig_pipe(void)
{
    char buf[16];
    while (sig_pipe[0] >= 0 && read(sig_pipe[0], buf, sizeof(buf)) > 0)
        ;
}

/* The signal caught since the last call (0: none); empties the pipe when there was one. The
 * handler may run on another thread (the I/O threads do not block signals) and sets `caught`
 * before it writes its byte, so a byte may land after this drain: a wait that then finds the
 * pipe readable with nothing caught drains it (no busy poll on a stale byte). Cheap when
 * nothing was caught: no system call. */
static int take_caught(void)
{
    int sig = caught;
    if (sig == 0)
        return 0;
    caught = 0;
    drain_sig_pipe();
    return sig;
}

/* catch_signals(true | false) -> whether they were caught before: install / restore the
 * handlers. */
static int l_catch_signals(lua_State *L)
{
    int on = lua_toboolean(L, 1), was = catching;
    if (on && !catching) {
        struct sigaction sa;
        if (sig_pipe[0] < 0) {
            if (pipe(sig_pipe) != 0)
                return kl_fail(L, KINF_EIO, "cannot create the signal pipe");
            for (int i = 0; i < 2; i++) {
                fcntl(sig_pipe[i], F_SETFL, fcntl(sig_pipe[i], F_GETFL) | O_NONBLOCK);
                fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
            }
        }
        caught = 0;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        /* A signal ignored at startup (a background job's SIGINT) stays ignored, as shells do. */
        sigaction(SIGINT, NULL, &saved_int);
        sigaction(SIGTERM, NULL, &saved_term);
        if (saved_int.sa_handler != SIG_IGN)
            sigaction(SIGINT, &sa, NULL);
        if (saved_term.sa_handler != SIG_IGN)
            sigaction(SIGTERM, &sa, NULL);
        catching = 1;
    } else if (!on && catching) {
        sigaction(SIGINT, &saved_int, NULL);
        sigaction(SIGTERM, &saved_term, NULL);
        catching = 0;
        /* A signal caught and not yet reported belongs to the catching period: a later wait
         * must not report it. */
        take_caught();
    }
    lua_pushboolean(L, was);
    return 1;
}

/* take_signal() -> "SIGINT" | "SIGTERM" | nil: reports (once) a signal caught since the last
 * report, without waiting; for loops that may not reach a wait (a work queue with items
 * ready). */
static int l_take_signal(lua_State *L)
{
    int sig = take_caught();
    if (sig == 0)
        lua_pushnil(L);
    else
        lua_pushstring(L, sig_name(sig));
    return 1;
}

/* sleep(seconds): blocks this thread that long. A signal does not end it early and is not
 * consumed: a caught SIGINT / SIGTERM stays for the next wait or take_signal to report (the
 * REST client's throttle and Retry-After waits, which are short, use it). */
static int l_sleep(lua_State *L)
{
    double seconds = luaL_checknumber(L, 1);
    struct timespec left;
    if (!(seconds > 0))
        return 0;
    if (seconds > 86400)
        seconds = 86400;
    left.tv_sec = (time_t)seconds;
    left.tv_nsec = (long)((seconds - (double)left.tv_sec) * 1e9);
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
    return 0;
}

/* wait({fd, ...}, timeout) -> "ready" | "timeout" | "signal", signal name */
static int l_wait(lua_State *L)
{
    struct pollfd pfd[65];
    double timeout = luaL_checknumber(L, 2);
    int n = 0, ms, rc;

    luaL_checktype(L, 1, LUA_TTABLE);
    for (int i = 1; n < 64; i++) {
        lua_rawgeti(L, 1, i);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            break;
        }
        pfd[n].fd = (int)luaL_checkinteger(L, -1);
        pfd[n].events = POLLIN;
        pfd[n].revents = 0;
        n++;
        lua_pop(L, 1);
    }
    if (catching) {
        pfd[n].fd = sig_pipe[0];
        pfd[n].events = POLLIN;
        pfd[n].revents = 0;
        n++;
    }
    /* NaN or <= 0: do not wait; past ~23 days: the longest poll takes (never UB in the cast) */
    if (!(timeout > 0))
        ms = 0;
    else if (timeout >= 2.0e6)
        ms = 2000000000;
    else
        ms = (int)(timeout * 1000.0 + 0.999);
    if (catching && caught != 0)
        rc = 0;
    else
        rc = poll(pfd, (nfds_t)n, ms);
    if (rc < 0 && errno != EINTR)
        return kl_fail(L, KINF_EIO, strerror(errno));
    if (catching) {
        int sig = take_caught();
        if (sig != 0) {
            lua_pushstring(L, "signal");
            lua_pushstring(L, sig_name(sig));
            return 2;
        }
        if (rc > 0 && pfd[n - 1].revents != 0) {
            drain_sig_pipe(); /* the late byte of a signal reported already */
            rc--;             /* not an event of the caller's fds */
        }
    }
    lua_pushstring(L, rc > 0 ? "ready" : "timeout");
    return 1;
}

static const luaL_Reg LOOP_FUNCS[] = {
    {"now", l_now},
    {"wall_time", l_wall_time},
    {"catch_signals", l_catch_signals},
    {"wait", l_wait},
    {"sleep", l_sleep},
    {"take_signal", l_take_signal},
    {NULL, NULL},
};

void kl_open_loop(lua_State *L)
{
    luaL_setfuncs(L, LOOP_FUNCS, 0);
}

static const luaL_Reg METHODS[] = {
    {"dispatch", p_dispatch},
    {"mirror", p_mirror},
    {"mirror_retain", p_mirror_retain},
    {"fd", p_fd},
    {"signal", p_signal},
    {"status", p_status},
    {"close", p_close},
    {NULL, NULL},
};

static const luaL_Reg META[] = {
    {"__gc", p_gc},
    {NULL, NULL},
};

void kl_open_informer(lua_State *L)
{
    kl_new_class(L, PROC_MT, METHODS, META);
}
