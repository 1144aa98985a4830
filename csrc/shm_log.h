/*
 * shm_log.h - the change log of a shared cache: a ring of events in a shared segment (shm.h)
 * that one writer appends to and every reader follows with a cursor of its own, without a lock.
 *
 * Events are numbered from 1 (seq). The ring keeps at most the last `cap` of them: a reader at
 * seq s reads event s while tail <= s < head; once the writer has appended cap events past s,
 * or moved the tail past it (kinf_shm_log_truncate: to bound the memory the old events keep
 * alive, or to make room in a full segment), event s is gone and the reader is told it fell
 * behind (it then starts over from the current content,
 * its handlers seeing it as adds: the caller's part). A reader can tell a torn read from a good
 * one: the writer marks a slot invalid, fills it and stamps it with its seq (each field an
 * atomic), and the reader takes an event only when the stamp was its seq before and after
 * reading the fields (a sequence lock per slot).
 *
 * The objects events name (offsets of the caller's records) must stay readable while an event
 * can still be read: a record the cache no longer holds is retired (kinf_shm_retire) only once
 * the last event that names it is gone (cap events past it, or below the tail).
 * kinf_shm_log_defer and kinf_shm_log_release do that bookkeeping for the writer, in its own
 * process memory, and kinf_shm_log_bound moves the tail so that the deferred blocks stay under
 * a number of bytes: the log then keeps fewer events rather than more memory.
 *
 * Threads: one writer thread (of the writer process); readers anywhere, each inside a read
 * section (kinf_shm_read_begin / _end) while it uses what an event names.
 */
#ifndef KINF_SHM_LOG_H
#define KINF_SHM_LOG_H

#include "shm.h"

enum { KINF_SHM_ADDED = 1, KINF_SHM_UPDATED = 2, KINF_SHM_DELETED = 3, KINF_SHM_RESYNCED = 4 };

typedef struct kinf_shm_event {
    uint64_t seq;
    unsigned type;    /* KINF_SHM_ADDED, ... */
    kinf_shm_off obj; /* added / updated: the new object; deleted: the last one */
    kinf_shm_off old; /* updated: the object before; else 0 */
} kinf_shm_event;

/* Writer. A new, empty log of cap events (a power of two, at least 16) in the segment; 0 when
 * the segment is full or could never hold it. */
kinf_shm_off kinf_shm_log_new(kinf_shm *shm, uint64_t cap);
/* Writer. Appends an event; returns its seq. Never fails: the ring overwrites its oldest. */
uint64_t kinf_shm_log_append(kinf_shm *shm, kinf_shm_off log, unsigned type, kinf_shm_off obj,
                             kinf_shm_off old);

/* The seq the next event will get: events [max(head - cap, tail), head) may be read. Head, tail
 * and cap read 0 for a log that does not check (kinf_shm_log_read says KINF_SHM_LOG_CORRUPT);
 * the writer's calls on one do nothing (append returns 0). */
uint64_t kinf_shm_log_head(const kinf_shm *shm, kinf_shm_off log);
uint64_t kinf_shm_log_tail(const kinf_shm *shm, kinf_shm_off log);
/* Writer. Events before upto (at most head) are gone: a reader asking for one is BEHIND. A
 * reader already at head loses nothing. */
void kinf_shm_log_truncate(kinf_shm *shm, kinf_shm_off log, uint64_t upto);
uint64_t kinf_shm_log_cap(const kinf_shm *shm, kinf_shm_off log);

typedef enum kinf_shm_log_read_result {
    KINF_SHM_LOG_EVENT,  /* *out is event seq */
    KINF_SHM_LOG_NONE,   /* no event seq yet */
    KINF_SHM_LOG_BEHIND, /* event seq is gone: start over from the content */
    KINF_SHM_LOG_CORRUPT /* the log (its block, its capacity) or the event's type does not check
                            (shm.h, Corruption); the event's offsets are the caller's to check */
} kinf_shm_log_read_result;
kinf_shm_log_read_result kinf_shm_log_read(const kinf_shm *shm, kinf_shm_off log, uint64_t seq,
                                           kinf_shm_event *out);

/* Writer bookkeeping (process memory): retire off once event `seq` has left the ring. */
typedef struct kinf_shm_log_deferred {
    struct shm_deferred *items;
    size_t n, cap, first;
    size_t bytes; /* the deferred blocks' sizes, summed */
} kinf_shm_log_deferred;
/* Queues off (bytes: its block size, kinf_shm_block_size) until event seq is gone. KINF_ENOMEM:
 * off could not be queued and is leaked instead (never freed early). */
kinf_err kinf_shm_log_defer(kinf_shm_log_deferred *d, kinf_shm_off off, uint64_t seq,
                            size_t bytes);
/* Moves the tail of log past the oldest deferred blocks' events until the rest take at most
 * max_bytes; kinf_shm_log_release then retires them. */
void kinf_shm_log_bound(kinf_shm *shm, kinf_shm_off log, const kinf_shm_log_deferred *d,
                        size_t max_bytes);
/* Retires every deferred block whose event has left the ring of log: with kinf_shm_retire_held
 * on the holders word at byte holders_at of each block, or (KINF_SHM_NO_HOLDERS) with
 * kinf_shm_retire. */
#define KINF_SHM_NO_HOLDERS ((size_t)-1)
void kinf_shm_log_release(kinf_shm *shm, kinf_shm_off log, kinf_shm_log_deferred *d,
                          size_t holders_at);
/* The deferred blocks, oldest first: for (i = 0; i < n; i++) blocks[i]. */
kinf_shm_off kinf_shm_log_deferred_at(const kinf_shm_log_deferred *d, size_t i, size_t *n);
/* Frees the bookkeeping (not the blocks: they are the segment's). */
void kinf_shm_log_deferred_free(kinf_shm_log_deferred *d);

#endif
