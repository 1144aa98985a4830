/*
 * lua_shared_reader.c - a process's reading of a shared segment: its one reader slot, shared by
 * every reader state (rstate) of the process on the segment (every seg:store handle, and the
 * writer's mirror reading its own store), the count of its holds on each record, and the
 * borrowing of records (contract in lua_shared_impl.h).
 *
 * One slot per process: the segment has 64 (KINF_SHM_READERS), so 64 processes can read it
 * whatever the number of stores. The slot's bit in a record is set once for the process and
 * stands for one hold; the holds map counts the holds of a record held more than once, and the
 * bit is cleared only when the last one lets go.
 *
 * Fork: a reader state belongs to the process that made it. A forked child that inherited one
 * (and the copy of the slot's bookkeeping) never touches the parent's slot or bits through it:
 * its methods refuse (lua_shared.c), and its release frees process memory only. A reader the
 * child opens gets a slot of its own.
 *
 * Threads: the Lua thread opens, reads and closes; a borrowed record may be released on any
 * thread (a writer's store is also read by its I/O thread): seg->mu guards the process's slot
 * bookkeeping and holds, rstate.mu a reader state's holds (taken before seg->mu).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lua_shared_impl.h"

/* A page that reads 0 in a forked child (MADV_WIPEONFORK): this process's pid once set, so a
 * reader's fork check is a load, not a getpid() system call on every get. Where the kernel
 * does not have it, every check calls getpid(). */
static _Atomic(int *) pid_page;

int kl_self_pid(void)
{
    int *p = atomic_load_explicit(&pid_page, memory_order_acquire);
    int pid;
    if (p != NULL && *(volatile int *)p != 0)
        return *p;
    pid = (int)getpid();
#ifdef MADV_WIPEONFORK
    if (p == NULL) {
        void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        int *expected = NULL;
        if (page == MAP_FAILED)
            return pid;
        if (madvise(page, 4096, MADV_WIPEONFORK) != 0 ||
            !atomic_compare_exchange_strong(&pid_page, &expected, (int *)page)) {
            munmap(page, 4096);
            p = expected; /* another thread's page, or NULL when the kernel has no WIPEONFORK */
            if (p == NULL)
                return pid;
        } else {
            p = page;
        }
    }
    *(volatile int *)p = pid;
#endif
    return pid;
}

typedef struct phold {
    uint64_t off; /* the map's key bytes */
    long n;       /* holds of this process's reader states (each counts one per record) */
} phold;

void kl_seg_init(segref *s)
{
    atomic_init(&s->refs, 1);
    atomic_init(&s->mirrored, 0);
    pthread_mutex_init(&s->mu, NULL);
    s->pid = 0;
    s->slot = -1;
    s->users = 0;
    kinf_map_init(&s->holds);
}

/* Forgets the holds map's entries (process memory; the bits are left as they are). */
static void drop_holds(segref *s)
{
    kinf_map_slot *sl;
    for (size_t i = 0; (sl = kinf_map_next(&s->holds, &i)) != NULL;)
        free(sl->value);
    kinf_map_free(&s->holds);
    kinf_map_init(&s->holds);
}

void kl_seg_unref(segref *s)
{
    if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1) {
        drop_holds(s);
        pthread_mutex_destroy(&s->mu);
        kinf_shm_close(s->shm);
        free(s);
    }
}

/* This process's slot on s, claimed for the first of its reader states; -1 when every slot is
 * taken. A child's inherited bookkeeping (a parent's slot, holds and users) is started over. */
static int slot_acquire(segref *s)
{
    int pid = kl_self_pid(), slot;
    pthread_mutex_lock(&s->mu);
    if (s->pid != pid) {
        drop_holds(s);
        s->pid = pid;
        s->slot = -1;
        s->users = 0;
    }
    if (s->slot < 0)
        s->slot = kinf_shm_reader_open(s->shm, pid);
    if (s->slot >= 0)
        s->users++;
    slot = s->slot;
    pthread_mutex_unlock(&s->mu);
    return slot;
}

/* A reader state of this process lets the slot go; the last one frees it. */
static void slot_release(segref *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->pid == kl_self_pid() && s->slot >= 0 && --s->users == 0) {
        /* Every hold went with the reader states' borrowed records. */
        kinf_shm_reader_close(s->shm, s->slot);
        s->slot = -1;
    }
    pthread_mutex_unlock(&s->mu);
}

int kl_rstate_slot(rstate *rs)
{
    if (rs->slot < 0 && rs->pid == kl_self_pid())
        rs->slot = slot_acquire(rs->seg);
    return rs->slot;
}

/* The process's hold on the record at off (inside a read section). The bit alone stands for
 * one hold: most records are held by one reader state (the writer's own store holds every
 * record it wrote), and they cost no allocation. A second hold makes an entry counting them
 * all (n >= 2); when it drops back to one, the entry goes and the bit stays. */
static kinf_err process_hold(rstate *rs, uint64_t off)
{
    segref *s = rs->seg;
    phold *h;
    kinf_err err = KINF_OK;
    pthread_mutex_lock(&s->mu);
    h = kinf_map_get(&s->holds, (const char *)&off, sizeof(off));
    if (h != NULL) {
        h->n++;
    } else if (kinf_shm_store_hold(rs->st, rs->slot, off)) { /* held once already */
        h = calloc(1, sizeof(*h));
        if (h != NULL) {
            h->off = off;
            h->n = 2;
        }
        if (h == NULL || kinf_map_put(&s->holds, (const char *)&h->off, sizeof(h->off), h)) {
            free(h);
            err = KINF_ENOMEM; /* the bit stays for the hold there was */
        }
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* Lets one of the process's holds on off go; the last one clears the bit. In a forked child, a
 * reader state of the parent's touches nothing shared: the bit is the parent's. */
static void process_release(rstate *rs, uint64_t off)
{
    segref *s = rs->seg;
    phold *h;
    if (rs->pid != kl_self_pid())
        return;
    pthread_mutex_lock(&s->mu);
    h = kinf_map_get(&s->holds, (const char *)&off, sizeof(off));
    if (h == NULL) {
        kinf_shm_store_release(rs->st, rs->slot, off);
    } else if (--h->n == 1) {
        kinf_map_remove(&s->holds, (const char *)&h->off, sizeof(h->off));
        free(h);
    }
    pthread_mutex_unlock(&s->mu);
}

void kl_seen_clear(rstate *rs)
{
    kinf_map_slot *sl;
    for (size_t i = 0; (sl = kinf_map_next(&rs->seen, &i)) != NULL;)
        free((void *)sl->key);
    kinf_map_free(&rs->seen);
    kinf_map_init(&rs->seen);
}

rstate *kl_rstate_new(segref *seg, int root)
{
    rstate *rs = calloc(1, sizeof(*rs));
    if (rs == NULL)
        return NULL;
    atomic_init(&rs->refs, 1);
    pthread_mutex_init(&rs->mu, NULL);
    rs->seg = seg;
    atomic_fetch_add(&seg->refs, 1);
    rs->root = root;
    rs->pid = kl_self_pid();
    rs->slot = slot_acquire(seg);
    kinf_map_init(&rs->holds);
    kinf_map_init(&rs->seen);
    rs->fast_writes = UINT64_MAX;
    return rs;
}

void kl_rstate_unref(rstate *rs)
{
    kinf_map_slot *sl;
    if (rs == NULL || atomic_fetch_sub(&rs->refs, 1) != 1)
        return;
    /* No borrowed record is left (each held a reference): every hold was released, except in
     * a forked child, where the parent's holds are only forgotten. */
    for (size_t i = 0; (sl = kinf_map_next(&rs->holds, &i)) != NULL;)
        free(sl->value);
    pthread_mutex_destroy(&rs->mu);
    kinf_map_free(&rs->holds);
    kl_seen_clear(rs);
    kinf_map_free(&rs->seen);
    if (rs->slot >= 0 && rs->pid == kl_self_pid())
        slot_release(rs->seg);
    kinf_shm_store_close(rs->st);
    kl_seg_unref(rs->seg);
    free(rs);
}

/* The release of a borrowed record: on whichever thread drops its last reference. */
static void release_hold(void *ud, const kinf_object *obj)
{
    hold *h = ud;
    rstate *rs = h->rs;
    (void)obj;
    pthread_mutex_lock(&rs->mu);
    if (--h->count == 0) {
        kinf_map_remove(&rs->holds, (const char *)&h->off, sizeof(h->off));
        process_release(rs, h->off);
        free(h);
    }
    pthread_mutex_unlock(&rs->mu);
    kl_rstate_unref(rs);
}

/* The release of a record borrowed alone (kl_borrow_sole). */
static void release_sole(void *ud, const kinf_object *obj)
{
    rstate *rs = ud;
    process_release(rs, kinf_shm_store_record_of(rs->st, obj->json));
    kl_rstate_unref(rs);
}

static kinf_meta view_meta(const kinf_shm_view *v)
{
    return (kinf_meta){v->namespace_, v->name, v->uid, v->resource_version};
}

kinf_object *kl_borrow_sole(rstate *rs, const kinf_shm_view *v, kinf_err *err)
{
    kinf_meta meta = view_meta(v);
    kinf_str json = {v->json, v->json_len}, key = {v->key, v->key_len};
    kinf_object *obj;

    if ((*err = process_hold(rs, v->off)) != KINF_OK)
        return NULL;
    atomic_fetch_add(&rs->refs, 1);
    obj = kinf_object_borrow(&json, &key, &meta, release_sole, rs, err);
    if (obj == NULL) {
        process_release(rs, v->off);
        kl_rstate_unref(rs);
    }
    return obj;
}

kinf_object *kl_borrow(rstate *rs, const kinf_shm_view *v, kinf_err *err)
{
    kinf_meta meta = view_meta(v);
    kinf_str json = {v->json, v->json_len}, key = {v->key, v->key_len};
    kinf_object *obj;
    hold *h;

    pthread_mutex_lock(&rs->mu);
    h = kinf_map_get(&rs->holds, (const char *)&v->off, sizeof(v->off));
    if (h == NULL) {
        h = calloc(1, sizeof(*h));
        if (h != NULL) {
            h->off = v->off; /* the map's key: set before the put hashes it */
            h->rs = rs;
        }
        if (h == NULL ||
            kinf_map_put(&rs->holds, (const char *)&h->off, sizeof(h->off), h) != KINF_OK) {
            pthread_mutex_unlock(&rs->mu);
            free(h);
            *err = KINF_ENOMEM;
            return NULL;
        }
        if (process_hold(rs, v->off) != KINF_OK) {
            kinf_map_remove(&rs->holds, (const char *)&h->off, sizeof(h->off));
            pthread_mutex_unlock(&rs->mu);
            free(h);
            *err = KINF_ENOMEM;
            return NULL;
        }
    }
    h->count++;
    atomic_fetch_add(&rs->refs, 1);
    pthread_mutex_unlock(&rs->mu);
    obj = kinf_object_borrow(&json, &key, &meta, release_hold, h, err);
    if (obj == NULL)
        release_hold(h, NULL);
    return obj;
}
