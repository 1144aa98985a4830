/*
 * shm_log.c - the shared change log (contract in shm_log.h).
 *
 * The log is one block: cap, head and cap slots. A slot's stamp is 0 while the writer fills it
 * and the event's seq once it is complete; head is stored after the stamp, so a reader that
 * sees head > s finds event s stamped (or already overwritten by s + cap, which it detects).
 */
#include "shm_log.h"

#include <stdatomic.h>
#include <stdlib.h>

typedef struct shm_slot {
    _Atomic uint64_t stamp;
    _Atomic uint32_t type;
    _Atomic uint64_t obj, old;
} shm_slot;

typedef struct shm_log {
    uint64_t cap; /* a power of two; fixed at creation */
    _Atomic uint64_t head;
    _Atomic uint64_t tail; /* the oldest seq still readable (kinf_shm_log_truncate) */
    shm_slot slots[];
} shm_log;

struct shm_deferred {
    kinf_shm_off off;
    uint64_t seq;
    size_t bytes;
};

static shm_log *log_at(const kinf_shm *shm, kinf_shm_off off)
{
    return kinf_shm_ptr(shm, off);
}

/* The log at off when it checks (a block holding a power-of-two number of slots), else NULL;
 * *cap gets its capacity, loaded once. Every function here goes through it: the log's offset
 * and capacity are segment words a stray write may have changed (shm.h, Corruption). */
static shm_log *log_checked(const kinf_shm *shm, kinf_shm_off off, uint64_t *cap)
{
    uint64_t span = kinf_shm_span(shm, off);
    if (span < sizeof(shm_log))
        return NULL;
    *cap = log_at(shm, off)->cap;
    if (*cap == 0 || (*cap & (*cap - 1)) != 0 || *cap > (span - sizeof(shm_log)) / sizeof(shm_slot))
        return NULL;
    return log_at(shm, off);
}

kinf_shm_off kinf_shm_log_new(kinf_shm *shm, uint64_t cap)
{
    kinf_shm_off off;
    shm_log *l;
    if (cap < 16 || (cap & (cap - 1)) != 0)
        return 0;
    /* Checked before the product, which would wrap for a huge cap. */
    if (cap > (kinf_shm_max_alloc(shm) - sizeof(shm_log)) / sizeof(shm_slot))
        return 0;
    off = kinf_shm_alloc(shm, sizeof(shm_log) + cap * sizeof(shm_slot));
    if (off == 0)
        return 0;
    l = log_at(shm, off);
    l->cap = cap;
    atomic_init(&l->head, 1);
    atomic_init(&l->tail, 1);
    for (uint64_t i = 0; i < cap; i++) {
        atomic_init(&l->slots[i].stamp, 0);
        atomic_init(&l->slots[i].type, 0);
        atomic_init(&l->slots[i].obj, 0);
        atomic_init(&l->slots[i].old, 0);
    }
    return off;
}

uint64_t kinf_shm_log_append(kinf_shm *shm, kinf_shm_off log, unsigned type, kinf_shm_off obj,
                             kinf_shm_off old)
{
    uint64_t cap;
    shm_log *l = log_checked(shm, log, &cap);
    uint64_t seq;
    shm_slot *s;
    if (l == NULL)
        return 0; /* nothing logged: readers of this log find it corrupt */
    seq = atomic_load_explicit(&l->head, memory_order_relaxed);
    s = &l->slots[seq & (cap - 1)];

    atomic_store_explicit(&s->stamp, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* the invalid stamp before any new field */
    atomic_store_explicit(&s->type, type, memory_order_relaxed);
    atomic_store_explicit(&s->obj, obj, memory_order_relaxed);
    atomic_store_explicit(&s->old, old, memory_order_relaxed);
    atomic_store_explicit(&s->stamp, seq, memory_order_release);
    KINF_SHM_STEP();
    atomic_store_explicit(&l->head, seq + 1, memory_order_release);
    KINF_SHM_STEP();
    return seq;
}

uint64_t kinf_shm_log_head(const kinf_shm *shm, kinf_shm_off log)
{
    uint64_t cap;
    shm_log *l = log_checked(shm, log, &cap);
    return l ? atomic_load_explicit(&l->head, memory_order_acquire) : 0;
}

uint64_t kinf_shm_log_cap(const kinf_shm *shm, kinf_shm_off log)
{
    uint64_t cap;
    return log_checked(shm, log, &cap) ? cap : 0;
}

kinf_shm_log_read_result kinf_shm_log_read(const kinf_shm *shm, kinf_shm_off log, uint64_t seq,
                                           kinf_shm_event *out)
{
    uint64_t cap, head, before, after;
    shm_log *l = log_checked(shm, log, &cap);
    shm_slot *s;

    if (l == NULL)
        return KINF_SHM_LOG_CORRUPT;
    head = atomic_load_explicit(&l->head, memory_order_acquire);
    if (seq >= head)
        return KINF_SHM_LOG_NONE;
    if (seq == 0 || head - seq > cap ||
        seq < atomic_load_explicit(&l->tail, memory_order_seq_cst))
        return KINF_SHM_LOG_BEHIND;
    s = &l->slots[seq & (cap - 1)];
    before = atomic_load_explicit(&s->stamp, memory_order_acquire);
    out->seq = seq;
    out->type = atomic_load_explicit(&s->type, memory_order_relaxed);
    out->obj = atomic_load_explicit(&s->obj, memory_order_relaxed);
    out->old = atomic_load_explicit(&s->old, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire); /* the fields before the second stamp */
    after = atomic_load_explicit(&s->stamp, memory_order_relaxed);
    if (before != seq || after != seq)
        return KINF_SHM_LOG_BEHIND;
    /* The offsets are the caller's to check (they name its records); the type is ours. */
    return out->type >= KINF_SHM_ADDED && out->type <= KINF_SHM_RESYNCED ? KINF_SHM_LOG_EVENT
                                                                        : KINF_SHM_LOG_CORRUPT;
}

uint64_t kinf_shm_log_tail(const kinf_shm *shm, kinf_shm_off log)
{
    uint64_t cap;
    shm_log *l = log_checked(shm, log, &cap);
    return l ? atomic_load_explicit(&l->tail, memory_order_acquire) : 0;
}

void kinf_shm_log_truncate(kinf_shm *shm, kinf_shm_off log, uint64_t upto)
{
    uint64_t cap;
    shm_log *l = log_checked(shm, log, &cap);
    uint64_t head;
    if (l == NULL)
        return;
    head = atomic_load_explicit(&l->head, memory_order_relaxed);
    if (upto > head)
        upto = head;
    /* seq_cst: the store is the unlink of what the dropped events name (shm.h's retire rule) */
    if (upto > atomic_load_explicit(&l->tail, memory_order_relaxed))
        atomic_store_explicit(&l->tail, upto, memory_order_seq_cst);
}

kinf_err kinf_shm_log_defer(kinf_shm_log_deferred *d, kinf_shm_off off, uint64_t seq,
                            size_t bytes)
{
    if (off == 0)
        return KINF_OK;
    if (d->n == d->cap) {
        /* Compact what was released from the front before growing. */
        size_t live = d->n - d->first, cap = d->cap;
        struct shm_deferred *items = d->items;
        if (d->first * 2 < d->cap || cap == 0) {
            cap = cap ? cap * 2 : 64;
            items = malloc(cap * sizeof(*items));
            if (items == NULL)
                return KINF_ENOMEM;
        }
        for (size_t i = 0; i < live; i++)
            items[i] = d->items[d->first + i];
        if (items != d->items) {
            free(d->items);
            d->items = items;
        }
        d->cap = cap;
        d->n = live;
        d->first = 0;
    }
    d->items[d->n].off = off;
    d->items[d->n].seq = seq;
    d->items[d->n].bytes = bytes;
    d->n++;
    d->bytes += bytes;
    return KINF_OK;
}

void kinf_shm_log_release(kinf_shm *shm, kinf_shm_off log, kinf_shm_log_deferred *d,
                          size_t holders_at)
{
    uint64_t cap;
    shm_log *l = log_checked(shm, log, &cap);
    uint64_t head, tail;
    if (l == NULL)
        return; /* a corrupt log: the deferred blocks stay (leaked rather than freed early) */
    head = atomic_load_explicit(&l->head, memory_order_relaxed);
    tail = atomic_load_explicit(&l->tail, memory_order_relaxed);
    /* Deferred in seq order: release from the front while the event has left the ring. */
    while (d->first < d->n &&
           (head - d->items[d->first].seq > cap || d->items[d->first].seq < tail)) {
        kinf_shm_off off = d->items[d->first].off;
        _Atomic uint64_t *holders = holders_at == KINF_SHM_NO_HOLDERS
                                        ? NULL
                                        : (_Atomic uint64_t *)((unsigned char *)kinf_shm_ptr(shm, off) + holders_at);
        if (kinf_shm_retire_held(shm, off, holders) != KINF_OK)
            break; /* try again at the next release */
        d->bytes -= d->items[d->first].bytes;
        d->first++;
    }
    if (d->first == d->n)
        d->first = d->n = 0;
}

void kinf_shm_log_bound(kinf_shm *shm, kinf_shm_off log, const kinf_shm_log_deferred *d,
                        size_t max_bytes)
{
    size_t bytes = d->bytes, i = d->first;
    uint64_t upto = 0;
    while (i < d->n && bytes > max_bytes) {
        bytes -= d->items[i].bytes;
        upto = d->items[i].seq + 1;
        i++;
    }
    if (upto != 0)
        kinf_shm_log_truncate(shm, log, upto);
}

kinf_shm_off kinf_shm_log_deferred_at(const kinf_shm_log_deferred *d, size_t i, size_t *n)
{
    *n = d->n - d->first;
    return i < *n ? d->items[d->first + i].off : 0;
}

void kinf_shm_log_deferred_free(kinf_shm_log_deferred *d)
{
    free(d->items);
    d->items = NULL;
    d->n = d->cap = d->first = 0;
    d->bytes = 0;
}
