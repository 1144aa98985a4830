/*
 * lua_mirror.c - the writer's side of the shared cache: an informer's processor mirrors every
 * change of its store into a shared store (kl_mirror_*, lua_shared.h), and its own store keeps
 * the segment's copy of each object instead of one of its own (borrowed records).
 *
 * A write the segment could not take (full) is not lost: its key goes to a set of dirty keys,
 * and every flush (each dispatch) first frees what readers left and then writes those keys
 * again from the local store (its current object, or a delete when it has none), until the
 * shared cache has caught up. A record too big for any segment of this size is not retried.
 *
 * Threads: the thread that owns the informer (its dispatch); borrowed records may be released
 * on the client's I/O thread too (lua_shared_impl.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "lua_kinf.h"
#include "lua_shared.h"
#include "lua_shared_impl.h"

struct kl_mirror {
    segref *seg;
    kinf_shm_store *st;
    rstate *rs;           /* the writer as a reader: the local store's records borrow from it */
    kinf_store *local;    /* one reference */
    size_t nindexes;
    int root;             /* the segment's root slot this mirror writes */
    int took_over;        /* attached to a previous writer's store */
    size_t buckets_fixed; /* index buckets the recovery found wrong and rebuilt */
    unsigned long writes, failures, borrowed;
    unsigned long failures_seen; /* failures up to the last report */
    int failing;                 /* an error was logged and no recovery since */
    int wrote;                   /* a write succeeded since the last report */
    double last_log;             /* of the last error line; 0: none yet */
    size_t swapped_bytes; /* of local records given back since the last trim */
    kinf_map dirty;       /* keys whose last write failed (key copies, owned: value = key) */
    unsigned long retried; /* dirty keys written at a later flush */
    char last_error[200];
    double last_reap, last_trim;
};

kl_mirror *kl_mirror_open(lua_State *L, int seg_idx, int root, kinf_store *local, kinf_err *err,
                          char *msg, size_t msglen)
{
    lseg *ls = kl_check_seg(L, seg_idx);
    kinf_shm *shm = ls->seg->shm;
    const char *names[KINF_SHM_STORE_INDEXES];
    size_t n = kinf_store_index_count(local);
    kl_mirror *m;
    kinf_err claim;

    msg[0] = '\0';
    if (n > KINF_SHM_STORE_INDEXES) {
        kinf_errmsg(msg, msglen, "a shared store takes at most %d indexes, this one has %d",
                    KINF_SHM_STORE_INDEXES, (int)n);
        *err = KINF_EINVAL;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        names[i] = kinf_store_index_name(local, i);
    /* Two mirrors of one store would interleave their objects, and one's retain would drop the
     * other's. Claimed here, given back by kl_mirror_close (this thread only: no race). */
    if (atomic_load(&ls->seg->mirrored) & (1u << root)) {
        kinf_errmsg(msg, msglen, "another informer already mirrors into slot %d", root + 1);
        *err = KINF_EBUSY;
        return NULL;
    }
    claim = kinf_shm_claim_writer(shm, (int)getpid());
    if (claim == KINF_EBUSY) {
        kinf_errmsg(msg, msglen, "another live process writes this segment");
        *err = KINF_EBUSY;
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    /* The first mirror of this process to hold the role recovers what the last writer left
     * (dead, or gone cleanly with its bookkeeping): the others find the segment recovered. */
    if (claim == KINF_EEXIST || atomic_load(&ls->seg->mirrored) == 0) {
        kinf_shm_recovery rec;
        kinf_err re = kinf_shm_store_recover(shm, &rec);
        m->buckets_fixed = rec.buckets_fixed;
        if (re != KINF_OK) {
            m->failures++;
            kinf_errmsg(m->last_error, sizeof(m->last_error),
                        "shared store: recovery from the last writer stopped early: %s",
                        kinf_strerror(re));
        }
    }
    m->st = kinf_shm_store_attach(shm, root, err);
    if (m->st != NULL) {
        int same = 1;
        for (size_t i = 0; i < n; i++)
            same &= kinf_shm_store_index_of(m->st, names[i]) == (int)i;
        if (!same) {
            kinf_errmsg(msg, msglen, "the shared store in slot %d has other indexes", root + 1);
            *err = KINF_EINVAL;
        } else {
            *err = kinf_shm_store_become_writer(m->st);
            m->took_over = 1;
        }
    } else {
        m->st = kinf_shm_store_create(shm, root, names, n, 4096, err);
        if (m->st == NULL)
            kinf_errmsg(msg, msglen, "the segment has no room for the store");
    }
    if (m->st == NULL || *err != KINF_OK) {
        kinf_shm_store_close(m->st);
        free(m);
        return NULL;
    }
    m->seg = ls->seg;
    atomic_fetch_add(&m->seg->refs, 1);
    atomic_fetch_or(&m->seg->mirrored, 1u << root);
    m->local = kinf_store_ref(local);
    kinf_map_init(&m->dirty);
    m->nindexes = n;
    m->root = root;
    /* The local store keeps its objects in the segment too (borrowed records): without a reader
     * slot, or a second handle, it keeps its own copies. */
    m->rs = kl_rstate_new(m->seg, root);
    if (m->rs != NULL) {
        kinf_err e2;
        m->rs->st = kinf_shm_store_attach(shm, root, &e2);
        if (m->rs->slot < 0 || m->rs->st == NULL) {
            kl_rstate_unref(m->rs);
            m->rs = NULL;
        }
    }
    return m;
}

static void mirror_failed(kl_mirror *m, kinf_err e, const char *key)
{
    m->failures++;
    kinf_errmsg(m->last_error, sizeof(m->last_error), "shared store: %s: %s", key,
                e == KINF_ENOMEM ? "the segment is full" : kinf_strerror(e));
}

static void dirty_add(kl_mirror *m, const char *key, size_t len)
{
    char *k;
    if (kinf_map_find(&m->dirty, key, len) != NULL)
        return;
    k = malloc(len ? len : 1);
    if (k == NULL)
        return; /* out of process memory too: the key waits for its next change */
    memcpy(k, key, len);
    if (kinf_map_put(&m->dirty, k, len, k) != KINF_OK)
        free(k);
}

static void dirty_clear(kl_mirror *m, const char *key, size_t len)
{
    free(kinf_map_remove(&m->dirty, key, len));
}

/* Writes key's state in the local store to the segment: obj (the store's current object for
 * key) or, when NULL, a delete. Failures are counted and described; a full segment leaves the
 * key dirty, to be written again by a later flush (retry: such a write, whose failure on a
 * still full segment was counted already). */
static kinf_err write_key(kl_mirror *m, const char *key, size_t len, const kinf_object *obj,
                          int retry)
{
    kinf_values *vals[KINF_SHM_STORE_INDEXES];
    kinf_err e;
    size_t size = 0;

    if (obj == NULL) {
        e = kinf_shm_store_delete(m->st, key, len);
    } else {
        e = kinf_store_item_values(m->local, key, len, vals, m->nindexes);
        if (e == KINF_OK) {
            e = kinf_shm_store_put(m->st, obj, (const kinf_values *const *)vals);
            if (e == KINF_ETOOBIG)
                size = kinf_shm_store_record_size(m->st, obj, (const kinf_values *const *)vals);
            for (size_t i = 0; i < m->nindexes; i++)
                kinf_values_free(vals[i]);
        }
    }
    if (e == KINF_OK) {
        dirty_clear(m, key, len);
        m->writes++;
        m->wrote = 1;
        return KINF_OK;
    }
    if (e == KINF_ETOOBIG && size > kinf_shm_max_alloc(m->seg->shm)) {
        m->failures++;
        kinf_errmsg(m->last_error, sizeof(m->last_error),
                    "shared store: %s: object of %zu bytes cannot fit a segment of %zu bytes", key,
                    size, kinf_shm_size(m->seg->shm));
        dirty_clear(m, key, len); /* writing it again cannot help */
        return e;
    }
    if (retry && e == KINF_ENOMEM)
        return e;
    mirror_failed(m, e, key);
    if (e == KINF_ENOMEM)
        dirty_add(m, key, len);
    return e;
}

/* Writes the dirty keys again, each from the local store's current state; stops at the first
 * that still finds the segment full. */
static void retry_dirty(kl_mirror *m)
{
    size_t n = m->dirty.count, k = 0, i = 0;
    char **keys = malloc(n * sizeof(*keys));
    size_t *lens = malloc(n * sizeof(*lens));
    kinf_map_slot *sl;

    if (keys == NULL || lens == NULL)
        goto out;
    while ((sl = kinf_map_next(&m->dirty, &i)) != NULL && k < n) {
        /* Copies: a successful write removes the entry and frees its key. */
        keys[k] = malloc(sl->len ? sl->len : 1);
        if (keys[k] == NULL)
            break;
        memcpy(keys[k], sl->key, sl->len);
        lens[k++] = sl->len;
    }
    for (size_t j = 0; j < k; j++) {
        kinf_object *obj = kinf_store_get(m->local, keys[j], lens[j]);
        kinf_err e = write_key(m, keys[j], lens[j], obj, 1);
        kinf_object_unref(obj);
        if (e == KINF_OK)
            m->retried++;
        else if (e == KINF_ENOMEM)
            break;
    }
    for (size_t j = 0; j < k; j++)
        free(keys[j]);
out:
    free(keys);
    free(lens);
}

/* After obj was written to the segment: the local store's record becomes one borrowed from the
 * segment (the same object, no second copy), held by the mirror's reader bit alone. A write that
 * changed nothing (a relist brings the same objects again) finds the segment's record borrowed
 * already, by `prev` (the record obj replaced): that one goes back into the store. Returns the
 * record it replaced, or NULL. */
static kinf_object *borrow_local(kl_mirror *m, const kinf_object *obj, kinf_object *prev)
{
    kinf_shm *shm = m->seg->shm;
    kinf_object *b = NULL, *old = NULL;
    kinf_shm_view v;
    kinf_err e;

    if (m->rs == NULL || (obj->flags & KINF_OBJ_BORROWED) || m->rs->pid != kl_self_pid())
        return NULL;
    kinf_shm_read_begin(shm, m->rs->slot);
    if (kinf_shm_store_get(m->rs->st, obj->key, obj->key_len, &v) == 1) {
        if (prev != NULL && (prev->flags & KINF_OBJ_BORROWED) && prev->json == v.json)
            b = kinf_object_ref(prev); /* the write changed nothing: prev is the record */
        else
            b = kl_borrow_sole(m->rs, &v, &e);
    }
    kinf_shm_read_end(shm, m->rs->slot);
    if (b == NULL)
        return NULL;
    if (kinf_store_swap_record(m->local, b, &old) == KINF_OK) {
        m->borrowed++;
        m->swapped_bytes += kinf_object_size(old);
    }
    kinf_object_unref(b); /* the store holds its own reference */
    return old;
}

kinf_object *kl_mirror_note(kl_mirror *m, const kinf_notification *note)
{
    const kinf_object *obj = note->obj;

    if (note->kind == KINF_EVENT_DELETE) {
        (void)write_key(m, obj->key, obj->key_len, NULL, 0);
        return NULL;
    }
    /* One popped key may carry several changes (added then deleted, updated twice): only the
     * one whose object the store still holds is written, with its index values; the segment
     * goes straight to the key's last state. */
    {
        kinf_object *cur = kinf_store_get(m->local, obj->key, obj->key_len);
        kinf_object_unref(cur);
        if (cur != obj)
            return NULL;
    }
    if (write_key(m, obj->key, obj->key_len, obj, 0) != KINF_OK)
        return NULL;
    return borrow_local(m, obj, note->old);
}

void kl_mirror_flush(kl_mirror *m, int wrote)
{
    double now = kinf_now();
    if (wrote || m->dirty.count > 0)
        kinf_shm_store_flush(m->st);
    if (m->dirty.count > 0)
        retry_dirty(m);
#ifdef __GLIBC__
    /* The local copies the segment replaced (a whole list of them after a sync) went back to
     * malloc, which keeps them mapped: hand them back to the system, at once after a big list,
     * else at most once a second (a trim walks every arena). */
    if (m->swapped_bytes >= 64u << 20 || (m->swapped_bytes > 0 && now - m->last_trim >= 1.0)) {
        m->swapped_bytes = 0;
        m->last_trim = now;
        malloc_trim(0);
    }
#endif
    if (now - m->last_reap >= 1.0) { /* a respawned worker needs its predecessor's slot */
        m->last_reap = now;
        kinf_shm_reap_readers(m->seg->shm);
    }
}

void kl_mirror_report(lua_State *L, kl_mirror *m)
{
    double now = kinf_now();
    int failed = m->failures > m->failures_seen, wrote = m->wrote;
    m->failures_seen = m->failures;
    m->wrote = 0;
    if (failed) {
        /* One line at the first failure, then at most one a minute, however often writes
         * succeed in between (a segment at its limit fails some and passes others). */
        if (m->last_log == 0 || now - m->last_log >= 60) {
            char msg[400];
            snprintf(msg, sizeof(msg), "%s (%lu writes failed so far, %zu keys wait to be written "
                     "again; the shared cache keeps their last content meanwhile)", m->last_error,
                     m->failures, m->dirty.count);
            kl_log(L, "error", msg);
            m->last_log = now;
            m->failing = 1;
        }
    } else if (m->failing && wrote) {
        kl_log(L, "info", "shared store: writes succeed again");
        m->failing = 0;
    }
}

static int in_local(void *ud, const char *key, size_t len)
{
    kinf_object *o = kinf_store_get(ud, key, len);
    kinf_object_unref(o);
    return o != NULL;
}

kinf_err kl_mirror_retain(kl_mirror *m)
{
    kinf_err e = kinf_shm_store_retain(m->st, in_local, m->local);
    if (e != KINF_OK)
        mirror_failed(m, e, "(retain)");
    kinf_shm_store_flush(m->st);
    return e;
}

void kl_mirror_status(lua_State *L, kl_mirror *m)
{
    kinf_shm_store_info info;
    kinf_shm_store_info_get(m->st, &info);
    lua_createtable(L, 0, 15);
    kl_set_int(L, "items", (lua_Integer)info.items);
    kl_set_int(L, "writes", (lua_Integer)m->writes);
    kl_set_int(L, "failures", (lua_Integer)m->failures);
    kl_set_int(L, "log_head", (lua_Integer)info.log_head);
    kl_set_int(L, "log_tail", (lua_Integer)info.log_tail);
    kl_set_int(L, "log_bytes", (lua_Integer)info.log_bytes);
    kl_set_int(L, "log_drops", (lua_Integer)info.log_drops);
    kl_set_int(L, "dirty", (lua_Integer)m->dirty.count);
    kl_set_int(L, "retried", (lua_Integer)m->retried);
    lua_pushboolean(L, m->took_over);
    lua_setfield(L, -2, "took_over");
    kl_set_int(L, "borrowed", (lua_Integer)m->borrowed);
    kl_set_int(L, "buckets_fixed", (lua_Integer)m->buckets_fixed);
    if (m->last_error[0]) {
        lua_pushstring(L, m->last_error);
        lua_setfield(L, -2, "last_error");
    }
    kl_push_shm_stats(L, m->seg->shm);
    lua_setfield(L, -2, "segment");
    lua_setfield(L, -2, "shared");
}

void kl_mirror_close(kl_mirror *m)
{
    if (m == NULL)
        return;
    kinf_shm_store_flush(m->st);
    kinf_shm_store_close(m->st);
    {
        size_t i = 0;
        kinf_map_slot *sl;
        while ((sl = kinf_map_next(&m->dirty, &i)) != NULL)
            free(sl->value);
        kinf_map_free(&m->dirty);
    }
    /* The role is the process's: it goes with the last of its mirrors. */
    if ((atomic_fetch_and(&m->seg->mirrored, ~(1u << m->root)) & ~(1u << m->root)) == 0)
        kinf_shm_release_writer(m->seg->shm, (int)getpid());
    kinf_store_unref(m->local);
    kl_rstate_unref(m->rs); /* the local store's borrowed records keep it until they go */
    kl_seg_unref(m->seg);
    free(m);
}
