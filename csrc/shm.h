/*
 * shm.h - a segment of memory shared by the processes of one nginx instance: one writer
 * allocates and frees in it, every process reads it without a lock, and memory a reader may
 * still hold is freed only after it has left its read section (epoch-based reclamation).
 *
 * The building block of the shared cache: records, index buckets and the change log live in a
 * segment (shm_map.h, shm_log.h); this file knows nothing of what they hold.
 *
 * Mapping: kinf_shm_create maps an anonymous shared segment in the calling process; processes it
 * forks afterwards (nginx's workers, forked by the master after init_by_lua) see it at the same
 * address. Everything inside refers to everything else by offset from the segment's start
 * (kinf_shm_off, 0 = none), never by pointer, so nothing depends on where it is mapped.
 *
 * Roles and threads:
 * - One writer at a time allocates, frees and retires. The writer is the process that called
 *   kinf_shm_claim_writer last; nothing stops two from writing at once: callers elect one (the
 *   agent process) and kinf_shm_claim_writer tells a successor that a predecessor died mid-write
 *   (KINF_EEXIST: it is gone but never released; everything it published stays readable). A
 *   process is known by its pid and its start time, so one that got a dead writer's pid again
 *   is not taken for the writer. Within the writer process only one thread may call the
 *   writer functions.
 * - Any thread of any process reads. A reader registers once (kinf_shm_reader_open: a slot of
 *   the segment's reader table, KINF_SHM_READERS of them) and brackets its reads with
 *   kinf_shm_read_begin / kinf_shm_read_end. Inside, every offset it loaded stays valid; outside,
 *   none, unless the reader holds the block: blocks retired with kinf_shm_retire_held carry a
 *   holders word, where reader slot i sets bit i (inside a read section) for as long as it keeps
 *   using the block, and clears it when done. A read section never waits for the writer and the
 *   writer never waits for a reader.
 * - A reader process that dies keeps its slot until the writer reaps it (kinf_shm_reap_readers,
 *   or kinf_shm_reclaim when the dead process holds something back): the writer first calls the
 *   dead-reader hooks (users clear the slot's bit in the blocks they still publish), clears the
 *   bit in its retired blocks, and only then frees the slot for another process.
 * - Liveness: a slot records its process's pid and start time (/proc/PID/stat). The process is
 *   dead when no process has the pid, when it is a zombie (exited, not waited for yet) and when
 *   the process with that pid started at another time (the pid was reused). Without /proc only
 *   the first is known (kill(pid, 0)).
 * - Limit: a live reader stopped inside its read section (SIGSTOP, a debugger, a page-in that
 *   never ends) holds back every block retired since it began: nothing is freed until it moves
 *   on or dies. The writer never waits for it; it goes on allocating from free memory, and once
 *   the segment is full its writes fail (counted, kinf_shm_alloc returns 0) while readers keep
 *   the last consistent content. A stalled section is never expired: the reader could be
 *   reading any block, and freeing one under it would hand it another's bytes.
 *
 * Crash consistency: the writer publishes every change with one atomic store of an offset
 * (a map slot, a root, the log head) after the memory it points at is complete, so a writer
 * killed at any point leaves every structure readable. What it leaves unaccounted for: blocks it
 * had allocated and not published, blocks it had unlinked and not yet freed (its retire list is
 * its own memory), and what its users kept in process memory. A successor finds them by
 * marking every block its users can reach (kinf_shm_mark) and sweeping the heap
 * (kinf_shm_sweep): every allocated block left unmarked is retired, so nothing leaks across
 * takeovers (counted in kinf_shm_stats). Blocks allocated with kinf_shm_alloc_held are retired
 * with their holders word. The sweep assumes the segment holds nothing but what the marking
 * reaches (shm_store.h's kinf_shm_store_recover marks every store).
 *
 * Allocation: blocks of the size asked (rounded up to 8 bytes, at least 32, an 8-byte header
 * included), carved from the segment's unused end; a freed block merges with its free
 * neighbours (boundary tags) and goes to a free list by size class (four per doubling), or back
 * to the unused end when it borders it. A request takes the first block of a class that
 * certainly fits and splits off the rest. So memory freed by objects of one size serves objects
 * of another (objects that grow a few percent per update reuse what their old versions left),
 * and a segment's free memory is fragmented only between live blocks. A segment that cannot
 * serve a request returns 0 from kinf_shm_alloc (and counts it), never crashes: the caller
 * reports it and keeps its last consistent content. Every header change is one 8-byte store in
 * an order that keeps the heap walkable, and a writer that takes over from a dead one rebuilds
 * the free lists from the headers (its predecessor may have died inside a list update).
 *
 * Corruption: every process maps the whole segment writable, so a stray write of any of them
 * (a bug, a bad pointer of a module in an nginx worker) can change any word. Whoever reads an
 * offset or a length from the segment checks it before use (kinf_shm_span: an allocated block
 * of this segment, and what is read of it inside it; counts within what the block can hold;
 * loops bounded by what they walk), and reports a failed check as KINF_ECORRUPT, never reading
 * outside the segment. The checks see structure, not content: a changed byte of a string or a
 * plausible offset of another block of the right kind reads as data. Readers cannot map the
 * segment read-only: besides their reader slot they write the holders word of the records
 * they keep (kinf_shm_store_hold).
 */
#ifndef KINF_SHM_H
#define KINF_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "kinf.h"

typedef uint64_t kinf_shm_off;

#define KINF_SHM_READERS 64 /* reader slots: one per process that reads; a bit each in a holders
                               word (kinf_shm_retire_held) */
#define KINF_SHM_ROOTS 16    /* words of the header the users of the segment keep offsets in */
#define KINF_SHM_HOLDERS_AT 16 /* where a kinf_shm_alloc_held block keeps its holders word */

typedef struct kinf_shm kinf_shm;

/* Maps a new segment of `size` bytes (at least 64 KiB; rounded up to pages). NULL with *err
 * (KINF_ENOMEM or KINF_EINVAL) on failure. The handle is this process's; a forked child uses
 * the same handle (the same address). */
kinf_shm *kinf_shm_create(size_t size, kinf_err *err);
/* As kinf_shm_create, in the memory object fd (a memfd: empty, sized here to `size`), so that a
 * process that gets fd (across exec: fd must not be close-on-exec) can attach the segment. The
 * caller keeps fd; the mapping does not need it once made. */
kinf_shm *kinf_shm_create_fd(int fd, size_t size, kinf_err *err);
/* Maps the segment kinf_shm_create_fd made in fd (this process or another, before or after an
 * exec): the same memory and content. KINF_EINVAL when fd holds no segment of this build's
 * layout (its magic, size and header), KINF_ENOMEM when it cannot be mapped. The caller keeps fd. */
kinf_shm *kinf_shm_attach_fd(int fd, kinf_err *err);
/* Unmaps the segment in this process and frees the handle. Accepts NULL. */
void kinf_shm_close(kinf_shm *shm);

/* The address of offset off (off != 0), and back. */
static inline void *kinf_shm_ptr(const kinf_shm *shm, kinf_shm_off off);
kinf_shm_off kinf_shm_offset(const kinf_shm *shm, const void *p);
size_t kinf_shm_size(const kinf_shm *shm);

/* The segment's hash seed (random, set at creation; the same in every process). */
uint64_t kinf_shm_seed(const kinf_shm *shm);

/* Flags of the segment's users, in its header: bits are only ever set (atomically, any process);
 * a new segment has none. */
uint64_t kinf_shm_flags(const kinf_shm *shm);
void kinf_shm_set_flags(kinf_shm *shm, uint64_t bits);

/* A root: an atomic word of the header (0 <= i < KINF_SHM_ROOTS) where users keep an offset. */
_Atomic uint64_t *kinf_shm_root(kinf_shm *shm, int i);

/* ---- the writer ---- */

/* Makes this process (pid) the writer. KINF_OK: no writer, or the last one released or is this
 * process; KINF_EBUSY: another live process is the writer (nothing changed); KINF_EEXIST: the
 * writer was taken over from a process that died holding it (the free lists are rebuilt from
 * the block headers; what it held unaccounted for is found by the caller's sweep). */
kinf_err kinf_shm_claim_writer(kinf_shm *shm, int pid);
/* Gives the role up. The blocks still waiting in this process's retire list are left to the
 * next writer's sweep (this process may be the next writer: the list is dropped either way). */
void kinf_shm_release_writer(kinf_shm *shm, int pid);

/* A block of at least n bytes, 8-aligned, or 0 when the segment is full. Writer only. */
kinf_shm_off kinf_shm_alloc(kinf_shm *shm, size_t n);
/* As kinf_shm_alloc, for a block whose word at KINF_SHM_HOLDERS_AT bytes is a holders word
 * (kinf_shm_retire_held): a sweep that finds it unreachable retires it with that word. */
kinf_shm_off kinf_shm_alloc_held(kinf_shm *shm, size_t n);
/* The largest n kinf_shm_alloc could ever serve (in an empty segment). */
size_t kinf_shm_max_alloc(const kinf_shm *shm);
/* The bytes the block at off (from kinf_shm_alloc) takes, header included. 0 for 0. */
size_t kinf_shm_block_size(const kinf_shm *shm, kinf_shm_off off);
/* Frees a block now: only for a block no reader can have seen (never published). Accepts 0. */
void kinf_shm_free(kinf_shm *shm, kinf_shm_off off);
/* Frees a published block once every reader that may hold it has left its read section. The
 * retire list is the writer process's memory. KINF_ENOMEM: the block stays allocated, for the
 * next writer's sweep to find. */
kinf_err kinf_shm_retire(kinf_shm *shm, kinf_shm_off off);
/* As kinf_shm_retire, for a block readers may hold beyond their read sections: holders is the
 * block's holders word; the block is freed only once, in addition, no live reader's bit is set
 * in it. */
kinf_err kinf_shm_retire_held(kinf_shm *shm, kinf_shm_off off, _Atomic uint64_t *holders);
/* Advances the epoch and frees the retired blocks no reader can hold any more; returns how many
 * are still waiting. Call it after each batch of writes. A dead reader that holds something back
 * is reaped here. */
size_t kinf_shm_reclaim(kinf_shm *shm);
/* Reaps the slots of reader processes that are gone (each costs a read of /proc/PID/stat);
 * returns how many. Call it now and then (every second or so): a respawned worker needs a free slot. */
size_t kinf_shm_reap_readers(kinf_shm *shm);
/* Registers fn(ud, slot), called in the writer before a dead reader's slot is freed (at most
 * 16 hooks per handle; KINF_ENOMEM past that). kinf_shm_off_dead_reader removes it. */
kinf_err kinf_shm_on_dead_reader(kinf_shm *shm, void (*fn)(void *ud, int slot), void *ud);
void kinf_shm_off_dead_reader(kinf_shm *shm, void (*fn)(void *ud, int slot), void *ud);

/* ---- recovery (a writer that took over) ---- */

/* A set of reachable blocks, in process memory (a bit per 8 bytes of the segment: size / 64
 * bytes). NULL when out of memory. */
typedef struct kinf_shm_marks kinf_shm_marks;
kinf_shm_marks *kinf_shm_marks_new(const kinf_shm *shm);
void kinf_shm_marks_free(kinf_shm_marks *m);
/* Marks the block at off (from kinf_shm_alloc; 0 and offsets outside the heap are ignored);
 * returns 1 when it was not marked before. */
int kinf_shm_mark(kinf_shm_marks *m, kinf_shm_off off);
/* Writer. Retires every allocated block that is neither marked nor waiting in this writer's
 * retire list (held blocks with their holders word); *blocks and *bytes get how many (also
 * added to kinf_shm_stats). Everything the users of the segment can reach must be marked: an
 * unmarked block is freed once readers moved on. KINF_ENOMEM: the retire list could not grow;
 * the rest stays allocated for the next sweep. */
kinf_err kinf_shm_sweep(kinf_shm *shm, kinf_shm_marks *m, size_t *blocks, size_t *bytes);

/* A seam for crash tests: when set, the writer calls it between the steps of a write (after
 * each allocation, before each free, after each publication); a test kills the process there.
 * NULL in production. */
extern void (*kinf_shm_step)(void);
#define KINF_SHM_STEP()                                                                        \
    do {                                                                                       \
        if (kinf_shm_step != NULL)                                                             \
            kinf_shm_step();                                                                   \
    } while (0)

/* ---- readers ---- */

/* A reader slot for process pid, claimed in the segment; -1 when every slot is taken (a dead
 * process's slot is free again once the writer reaped it). A thread may take a slot of its own
 * (the same pid); users that share one slot (the Lua binding: one per process, for all its
 * handles) count their holds themselves, since a bit is set once per slot, and never overlap
 * their read sections. A forked child never uses its parent's slot: it opens its own. */
int kinf_shm_reader_open(kinf_shm *shm, int pid);
/* As kinf_shm_reader_open, with the process's start time given (kinf_shm_process_start; 0:
 * unknown, then only the pid is checked). */
int kinf_shm_reader_open_as(kinf_shm *shm, int pid, uint64_t start);
/* The start time of process pid (/proc/PID/stat field 22, clock ticks since boot); 0 when it
 * cannot be read (no /proc, no such process, a zombie). */
uint64_t kinf_shm_process_start(int pid);
/* Frees the slot; the reader must have cleared its bit in every block it held. */
void kinf_shm_reader_close(kinf_shm *shm, int slot);
/* The read section: every offset loaded between begin and end stays valid until end. Sections
 * do not nest. */
void kinf_shm_read_begin(kinf_shm *shm, int slot);
void kinf_shm_read_end(kinf_shm *shm, int slot);

typedef struct kinf_shm_stats {
    size_t size;          /* bytes of the segment */
    size_t used;          /* bytes in allocated blocks (block sizes, headers included) */
    size_t free_listed;   /* bytes in blocks on the free lists */
    size_t untouched;     /* bytes never carved yet */
    size_t retired;       /* blocks retired by this writer and not yet freed */
    unsigned long alloc_failures;
    unsigned long takeovers; /* writers that took over from a dead one */
    unsigned long swept_blocks; /* blocks kinf_shm_sweep found unreachable and retired, in all */
    size_t swept_bytes;         /* and their bytes */
    int readers;          /* reader slots in use */
    int writer;           /* the writer's pid; 0: none (released) */
} kinf_shm_stats;
void kinf_shm_stats_get(kinf_shm *shm, kinf_shm_stats *out);

/* ---- inline ---- */
struct shm_hook {
    void (*fn)(void *ud, int slot);
    void *ud;
};

struct kinf_shm {
    unsigned char *base; /* where this process maps the segment */
    size_t size;
    size_t data; /* where blocks start: process memory, so a stray write cannot move it */
    struct shm_retired *retired; /* [writer] blocks waiting for readers to move on */
    size_t nretired, cap_retired;
    struct shm_hook hooks[16]; /* [writer] dead-reader hooks */
    size_t nhooks;
};

static inline void *kinf_shm_ptr(const kinf_shm *shm, kinf_shm_off off)
{
    return shm->base + off;
}

/* A block's header word (shm.c): its size (header included) in bits 3..47, F_FREE in bit 0, the
 * magic in the top 16 bits. Shared here for kinf_shm_span. */
#define KINF_SHM_BLOCK_MAGIC 0x6b62u
#define KINF_SHM_BLOCK_FREE 1u
#define KINF_SHM_SIZE_MASK (((1ull << 48) - 1) & ~(uint64_t)7)

/* The bytes usable at off (the block's size less its header) when off is an allocated block of
 * this segment: 8-aligned, its header parses (the magic, not free, at least 32 bytes) and the
 * block ends inside the segment; 0 otherwise (0 is never a block). What a reader checks an
 * offset it loaded from the segment with before it reads there: a load, a mask and a few
 * compares. The header is loaded once, atomically (the writer changes its flag bits while
 * readers read). It cannot tell a stale block of the same kind from the right one. */
static inline uint64_t kinf_shm_span(const kinf_shm *shm, kinf_shm_off off)
{
    uint64_t w, s;
    if ((off & 7) != 0 || off < shm->data + 8 || off > shm->size)
        return 0;
    w = __atomic_load_n((const uint64_t *)(const void *)(shm->base + off - 8), __ATOMIC_RELAXED);
    s = w & KINF_SHM_SIZE_MASK;
    if ((w >> 48) != KINF_SHM_BLOCK_MAGIC || (w & KINF_SHM_BLOCK_FREE) || s < 32 ||
        s - 8 > shm->size - off)
        return 0;
    return s - 8;
}

#endif
