/*
 * shm.c - the shared segment: header, size-class allocator, writer election and epoch-based
 * reclamation (contract in shm.h).
 *
 * Why readers never see freed memory: a reader announces the global epoch in its slot (then a
 * full fence) before it loads any offset, and clears it after its last use. The writer unlinks
 * a block (an atomic store that makes it unreachable for new loads), records the epoch at that
 * moment (r) with the block, and later advances the epoch (then a full fence) and frees the
 * block only when every announced epoch is above r. A reader that could have loaded the block
 * loaded it before the unlink, so it announced an epoch <= r and holds the block back; a reader
 * announcing r + 1 or later started after the unlink and cannot reach it.
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Names the layout of everything a segment holds: a segment can reach another build across a
 * binary upgrade (kinf_shm_attach_fd), which attaches only a segment with this magic. Change it
 * with any change of that layout. */
#define SHM_MAGIC 0x6b696e6673686d32ULL /* "kinfshm2" */
#define NCLASSES 160
#define NWORDS ((NCLASSES + 63) / 64)
#define BLOCK_HEADER 8
#define BLOCK_MAGIC KINF_SHM_BLOCK_MAGIC
#define MIN_BLOCK 32 /* header, two list links and a footer when free */
#define F_FREE KINF_SHM_BLOCK_FREE
#define F_PREV_FREE 2u
#define F_HELD 4u /* allocated with kinf_shm_alloc_held: a holders word at KINF_SHM_HOLDERS_AT */
#define SIZE_MASK KINF_SHM_SIZE_MASK

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared memory needs address-free 64-bit atomics");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "shared memory needs address-free int atomics");

/* A slot's owner is one word, so that a claim, a check and a reap each see one process: the
 * pid in the low 32 bits, the low 32 bits of its start time (/proc/PID/stat field 22, clock
 * ticks since boot; 0 when unknown) in the high ones. 0: the slot is free. */
typedef struct shm_reader {
    _Atomic uint64_t owner;
    _Atomic uint64_t epoch;  /* 0: outside a read section */
} shm_reader;

#define OWNER(pid, start) ((uint64_t)(uint32_t)(pid) | (uint64_t)(uint32_t)(start) << 32)
#define OWNER_PID(o) ((int)(uint32_t)(o))
#define OWNER_START(o) ((uint32_t)((o) >> 32))

typedef struct shm_header {
    uint64_t magic;
    uint64_t size;
    uint64_t data;                    /* offset of the first carvable byte */
    uint64_t seed;                    /* hash seed of the maps in the segment */
    _Atomic uint64_t epoch;           /* starts at 1; only the writer advances it */
    _Atomic uint64_t writer;          /* the writer's identity (ident()); 0: no writer */
    _Atomic uint64_t brk;             /* [writer] carved up to here */
    _Atomic uint64_t used, free_listed; /* [writer] bytes, for stats */
    _Atomic uint64_t alloc_failures, takeovers;
    _Atomic uint64_t swept_blocks, swept_bytes; /* retired by kinf_shm_sweep, in all */
    _Atomic uint64_t roots[KINF_SHM_ROOTS];
    _Atomic uint64_t free_heads[NCLASSES]; /* [writer] block offsets */
    uint64_t nonempty[NWORDS];             /* [writer] bit c: free_heads[c] != 0 */
    shm_reader readers[KINF_SHM_READERS];
    _Atomic uint64_t flags; /* the users' flags (kinf_shm_set_flags); only ever set */
} shm_header;

/* A block starts with one word: its size (header included, a multiple of 8) with F_FREE and
 * F_PREV_FREE in the low bits and BLOCK_MAGIC in the top 16. A free block also keeps its list
 * links (next, prev: block offsets) after the header and its size in its last word, so that
 * the block after it can find it (F_PREV_FREE) and merge. */
struct shm_retired {
    kinf_shm_off off;
    uint64_t epoch;
    _Atomic uint64_t *holders; /* NULL: no reader holds it beyond a read section */
};

void (*kinf_shm_step)(void);

static shm_header *hdr(const kinf_shm *shm)
{
    return (shm_header *)shm->base;
}

static void rebuild_free_lists(kinf_shm *shm);

/* ---- size classes ---- */

/* The class of a block of n bytes (header included): free lists are kept by class. */
static unsigned class_of(uint64_t n)
{
    unsigned p;
    uint64_t step, k;
    if (n <= 16)
        return 0;
    p = 63u - (unsigned)__builtin_clzll(n - 1); /* 2^p < n <= 2^(p+1), p >= 4 */
    step = 1ull << (p - 2);
    k = (n - (1ull << p) + step - 1) / step; /* 1..4 */
    return 4 * (p - 4) + (unsigned)k;
}

static uint64_t class_size(unsigned c)
{
    unsigned p, k;
    if (c == 0)
        return 16;
    p = (c - 1) / 4 + 4;
    k = (c - 1) % 4 + 1;
    return (1ull << p) + (uint64_t)k * (1ull << (p - 2));
}

/* ---- segment ---- */

/* size rounded up to pages; 0 when out of bounds. */
static size_t page_size_of(size_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        page = 4096;
    if (size < 65536 || size > (1ull << 40))
        return 0;
    return (size + (size_t)page - 1) / (size_t)page * (size_t)page;
}

/* The handle of a mapping of size bytes at base; with init, a new segment is set up there.
 * Unmaps base when out of memory. */
static kinf_shm *handle_of(void *base, size_t size, int init, kinf_err *err)
{
    kinf_shm *shm = calloc(1, sizeof(*shm));
    shm_header *h = base;
    if (shm == NULL) {
        munmap(base, size);
        *err = KINF_ENOMEM;
        return NULL;
    }
    shm->base = base;
    shm->size = size;
    /* The data's start, in this process's memory: a stray write to the header cannot move it
     * (an attached segment's header was checked to say the same). */
    shm->data = (sizeof(*h) + 63) & ~(uint64_t)63;
    if (init) { /* the kernel gave zeroed pages: every counter, root and slot starts at 0 */
        h->magic = SHM_MAGIC;
        h->size = size;
        h->data = shm->data;
        h->seed = kinf_random_seed();
        atomic_init(&h->brk, h->data);
        atomic_init(&h->epoch, 1);
    }
    *err = KINF_OK;
    return shm;
}

kinf_shm *kinf_shm_create(size_t size, kinf_err *err)
{
    void *base;

    size = page_size_of(size);
    if (size == 0) {
        *err = KINF_EINVAL;
        return NULL;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    return handle_of(base, size, 1, err);
}

kinf_shm *kinf_shm_create_fd(int fd, size_t size, kinf_err *err)
{
    struct stat st;
    void *base;

    size = page_size_of(size);
    if (size == 0 || fstat(fd, &st) != 0 || st.st_size != 0) {
        *err = KINF_EINVAL;
        return NULL;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    return handle_of(base, size, 1, err);
}

kinf_shm *kinf_shm_attach_fd(int fd, kinf_err *err)
{
    struct stat st;
    const shm_header *h;
    size_t size;
    void *base;

    if (fstat(fd, &st) != 0 || st.st_size < 0 || (size = page_size_of((size_t)st.st_size)) == 0 ||
        size != (size_t)st.st_size) {
        *err = KINF_EINVAL;
        return NULL;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    h = base;
    if (h->magic != SHM_MAGIC || h->size != size || h->data != ((sizeof(*h) + 63) & ~(uint64_t)63)) {
        munmap(base, size);
        *err = KINF_EINVAL;
        return NULL;
    }
    return handle_of(base, size, 0, err);
}

uint64_t kinf_shm_flags(const kinf_shm *shm)
{
    return atomic_load_explicit(&hdr(shm)->flags, memory_order_acquire);
}

void kinf_shm_set_flags(kinf_shm *shm, uint64_t bits)
{
    atomic_fetch_or_explicit(&hdr(shm)->flags, bits, memory_order_release);
}

void kinf_shm_close(kinf_shm *shm)
{
    if (shm == NULL)
        return;
    munmap(shm->base, shm->size);
    free(shm->retired);
    free(shm);
}

kinf_shm_off kinf_shm_offset(const kinf_shm *shm, const void *p)
{
    return p ? (kinf_shm_off)((const unsigned char *)p - shm->base) : 0;
}

size_t kinf_shm_size(const kinf_shm *shm)
{
    return shm->size;
}

uint64_t kinf_shm_seed(const kinf_shm *shm)
{
    return hdr(shm)->seed;
}

_Atomic uint64_t *kinf_shm_root(kinf_shm *shm, int i)
{
    return &hdr(shm)->roots[i];
}

/* What /proc/PID/stat says of pid: 1 running (or stopped), with *start its start time; 0 gone
 * or a zombie (dead, only not waited for yet); -1 unknown (no /proc, or unreadable). */
static int proc_stat(int pid, uint64_t *start)
{
    char path[64], buf[1024], *p;
    unsigned long long st = 0;
    char state;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? 0 : -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return n == 0 || errno == ESRCH ? 0 : -1; /* the process went between open and read */
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: fields follow its last ')'. */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %c", &state) != 1)
        return -1;
    if (state == 'Z' || state == 'X')
        return 0;
    for (field = 2, p++; *p != '\0' && field < 22; p++) { /* to the start of field 22 */
        if (*p == ' ')
            field++;
    }
    if (field != 22 || sscanf(p, "%llu", &st) != 1)
        return -1;
    *start = st;
    return 1;
}

uint64_t kinf_shm_process_start(int pid)
{
    uint64_t start = 0;
    return pid > 0 && proc_stat(pid, &start) == 1 ? start : 0;
}

/* Whether the process of owner word o is gone: no process with its pid, a zombie, or a
 * process with its pid that started at another time (the pid was reused). Without /proc, only
 * the first (kill(pid, 0)). A start of 0 in o (unknown) is not compared. */
static int owner_gone(uint64_t o)
{
    int pid = OWNER_PID(o);
    uint64_t start = 0;
    int r;

    if (pid <= 0)
        return 0;
    r = proc_stat(pid, &start);
    if (r == 0)
        return 1;
    if (r == 1)
        return OWNER_START(o) != 0 && (uint32_t)start != OWNER_START(o);
    return kill(pid, 0) == -1 && errno == ESRCH;
}

static int process_gone(int pid)
{
    return owner_gone(OWNER(pid, 0));
}

/* ---- writer ---- */

/* The writer's identity: its pid and its start time (field 22 of /proc/PID/stat, clock ticks
 * since boot) in one word, so that a process that got a dead writer's pid again is not taken
 * for it. Without /proc the start time is 0 and the pid alone decides. */
#define PID_SHIFT 42
#define START_MASK ((1ull << PID_SHIFT) - 1)

static uint64_t start_time(int pid)
{
    char path[64], buf[1024];
    const char *p;
    unsigned long long t = 0;
    FILE *f;
    size_t n;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: count from the last ')'. */
    if ((p = strrchr(buf, ')')) == NULL)
        return 0;
    for (int field = 2; field < 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL || sscanf(p + 1, "%llu", &t) != 1)
        return 0;
    return (uint64_t)t & START_MASK;
}

static uint64_t ident(int pid)
{
    return (uint64_t)(unsigned)pid << PID_SHIFT | start_time(pid);
}

/* Whether the process with identity id is gone (its pid dead, or another process's now). */
static int ident_gone(uint64_t id)
{
    int pid = (int)(id >> PID_SHIFT);
    uint64_t start = id & START_MASK;
    return process_gone(pid) || (start != 0 && start_time(pid) != start);
}

kinf_err kinf_shm_claim_writer(kinf_shm *shm, int pid)
{
    shm_header *h = hdr(shm);
    uint64_t me = ident(pid), cur = atomic_load(&h->writer);
    for (;;) {
        if (cur == me)
            return KINF_OK;
        if (cur == 0) {
            if (atomic_compare_exchange_weak(&h->writer, &cur, me))
                return KINF_OK;
            continue;
        }
        if (!ident_gone(cur))
            return KINF_EBUSY;
        if (atomic_compare_exchange_weak(&h->writer, &cur, me)) {
            atomic_fetch_add(&h->takeovers, 1);
            shm->nretired = 0; /* a list this process kept from an earlier role is stale */
            rebuild_free_lists(shm);
            return KINF_EEXIST;
        }
    }
}

void kinf_shm_release_writer(kinf_shm *shm, int pid)
{
    uint64_t cur = ident(pid);
    /* The blocks still waiting are unreachable; they are not freed here (a reader may still
     * read them) and the list is dropped, since the next writer may free and reuse them: its
     * kinf_shm_sweep finds them. */
    if (atomic_compare_exchange_strong(&hdr(shm)->writer, &cur, 0))
        shm->nretired = 0;
}

/* ---- blocks ---- */

/* Header words are atomic (relaxed): readers check them (kinf_shm_span) while the writer
 * changes a live block's F_PREV_FREE bit. */
static uint64_t hword(const kinf_shm *shm, uint64_t b)
{
    return __atomic_load_n((const uint64_t *)(const void *)(shm->base + b), __ATOMIC_RELAXED);
}

static void set_hword(kinf_shm *shm, uint64_t b, uint64_t size, uint64_t flags)
{
    uint64_t w = size | flags | ((uint64_t)BLOCK_MAGIC << 48);
    __atomic_store_n((uint64_t *)(void *)(shm->base + b), w, __ATOMIC_RELAXED);
}

static uint64_t bsize(uint64_t w)
{
    return w & SIZE_MASK;
}

static int is_block(uint64_t w)
{
    return (w >> 48) == BLOCK_MAGIC;
}

/* A free block's list links and its footer (its size, in its last word). */
static uint64_t get_word(const kinf_shm *shm, uint64_t at)
{
    uint64_t v;
    memcpy(&v, shm->base + at, sizeof(v));
    return v;
}

static void put_word(kinf_shm *shm, uint64_t at, uint64_t v)
{
    memcpy(shm->base + at, &v, sizeof(v));
}

/* The free list a free block of size s goes to: the largest class not above s, so that every
 * block on list c serves any request of class c. */
static unsigned list_of(uint64_t s)
{
    unsigned c = class_of(s);
    return class_size(c) > s ? c - 1 : c;
}

static void list_insert(kinf_shm *shm, uint64_t b, uint64_t s)
{
    shm_header *h = hdr(shm);
    unsigned c = list_of(s);
    uint64_t head = atomic_load_explicit(&h->free_heads[c], memory_order_relaxed);
    put_word(shm, b + 8, head);
    put_word(shm, b + 16, 0);
    put_word(shm, b + s - 8, s);
    if (head != 0)
        put_word(shm, head + 16, b);
    atomic_store_explicit(&h->free_heads[c], b, memory_order_relaxed);
    h->nonempty[c / 64] |= 1ull << (c % 64);
    atomic_fetch_add_explicit(&h->free_listed, s, memory_order_relaxed);
}

static void list_remove(kinf_shm *shm, uint64_t b, uint64_t s)
{
    shm_header *h = hdr(shm);
    unsigned c = list_of(s);
    uint64_t next = get_word(shm, b + 8), prev = get_word(shm, b + 16);
    /* A link a stray write changed is not followed out of the heap (shm.h, Corruption). */
    if (prev != 0 && prev >= shm->data && prev <= shm->size - MIN_BLOCK)
        put_word(shm, prev + 8, next);
    else
        atomic_store_explicit(&h->free_heads[c], next, memory_order_relaxed);
    if (next != 0 && next >= shm->data && next <= shm->size - MIN_BLOCK)
        put_word(shm, next + 16, prev);
    if (atomic_load_explicit(&h->free_heads[c], memory_order_relaxed) == 0)
        h->nonempty[c / 64] &= ~(1ull << (c % 64));
    atomic_fetch_sub_explicit(&h->free_listed, s, memory_order_relaxed);
}

/* Sets or clears the PREV_FREE bit of the block at b (when b is a block below brk). */
static void mark_prev_free(kinf_shm *shm, uint64_t b, int is_free)
{
    uint64_t w;
    if (b >= atomic_load_explicit(&hdr(shm)->brk, memory_order_relaxed))
        return;
    w = hword(shm, b);
    set_hword(shm, b, bsize(w), (w & (F_FREE | F_HELD)) | (is_free ? F_PREV_FREE : 0));
}

/* The first non-empty list at or above class c, or NCLASSES. */
static unsigned first_list(const shm_header *h, unsigned c)
{
    for (unsigned w = c / 64; w < NWORDS; w++) {
        uint64_t bits = h->nonempty[w];
        if (w == c / 64)
            bits &= ~0ull << (c % 64);
        if (bits != 0)
            return w * 64 + (unsigned)__builtin_ctzll(bits);
    }
    return NCLASSES;
}

size_t kinf_shm_max_alloc(const kinf_shm *shm)
{
    return (size_t)(hdr(shm)->size - hdr(shm)->data - BLOCK_HEADER);
}

static kinf_shm_off alloc_flags(kinf_shm *shm, size_t n, uint64_t flags)
{
    shm_header *h = hdr(shm);
    uint64_t need, off, s, brk;
    unsigned c;

    if (n > kinf_shm_max_alloc(shm)) {
        atomic_fetch_add_explicit(&h->alloc_failures, 1, memory_order_relaxed);
        return 0;
    }
    need = ((uint64_t)n + BLOCK_HEADER + 7) & ~(uint64_t)7;
    if (need < MIN_BLOCK)
        need = MIN_BLOCK;
    /* The list below the request's class holds blocks that may fit: a few are tried first
     * (the closest fits), then the first block of a class that certainly fits. */
    off = 0;
    c = class_of(need);
    if (c > 0 && class_size(c) != need) {
        uint64_t x = atomic_load_explicit(&h->free_heads[c - 1], memory_order_relaxed);
        for (int tries = 0; x != 0 && tries < 16; tries++, x = get_word(shm, x + 8)) {
            if (bsize(hword(shm, x)) >= need) {
                off = x;
                break;
            }
        }
    }
    if (off == 0 && (c = first_list(h, c)) < NCLASSES)
        off = atomic_load_explicit(&h->free_heads[c], memory_order_relaxed);
    if (off != 0) {
        s = bsize(hword(shm, off));
        list_remove(shm, off, s);
        if (s - need >= MIN_BLOCK) {
            /* The rest stays free: its header is written before the block shrinks, so the
             * heap parses at every step (a successor writer walks it). */
            set_hword(shm, off + need, s - need, F_FREE);
            list_insert(shm, off + need, s - need);
            s = need;
        } else {
            mark_prev_free(shm, off + s, 0);
        }
        set_hword(shm, off, s, flags);
    } else {
        brk = atomic_load_explicit(&h->brk, memory_order_relaxed);
        if (need > h->size - brk) {
            atomic_fetch_add_explicit(&h->alloc_failures, 1, memory_order_relaxed);
            return 0;
        }
        off = brk;
        s = need;
        set_hword(shm, off, s, flags); /* what precedes brk is never free: it would have merged */
        atomic_store_explicit(&h->brk, off + s, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&h->used, s, memory_order_relaxed);
    KINF_SHM_STEP();
    return off + BLOCK_HEADER;
}

kinf_shm_off kinf_shm_alloc(kinf_shm *shm, size_t n)
{
    return alloc_flags(shm, n, 0);
}

kinf_shm_off kinf_shm_alloc_held(kinf_shm *shm, size_t n)
{
    if (n < KINF_SHM_HOLDERS_AT + sizeof(uint64_t))
        n = KINF_SHM_HOLDERS_AT + sizeof(uint64_t);
    return alloc_flags(shm, n, F_HELD);
}

size_t kinf_shm_block_size(const kinf_shm *shm, kinf_shm_off off)
{
    return off ? (size_t)bsize(hword(shm, off - BLOCK_HEADER)) : 0;
}

void kinf_shm_free(kinf_shm *shm, kinf_shm_off off)
{
    shm_header *h = hdr(shm);
    uint64_t b, w, s, brk;

    if (off < BLOCK_HEADER)
        return;
    b = off - BLOCK_HEADER;
    w = hword(shm, b);
    if (!is_block(w) || (w & F_FREE) || bsize(w) < MIN_BLOCK)
        return; /* not a block of ours (or freed twice): leak rather than corrupt the lists */
    s = bsize(w);
    KINF_SHM_STEP();
    atomic_fetch_sub_explicit(&h->used, s, memory_order_relaxed);
    brk = atomic_load_explicit(&h->brk, memory_order_relaxed);
    /* Merge with the free neighbours: one header store makes each merge, so the heap parses
     * at every step. */
    if (s > brk - b)
        return; /* a size a stray write changed: leaked rather than followed */
    if (b + s < brk && (hword(shm, b + s) & F_FREE) && bsize(hword(shm, b + s)) <= brk - b - s) {
        uint64_t ns = bsize(hword(shm, b + s));
        list_remove(shm, b + s, ns);
        s += ns;
        set_hword(shm, b, s, w & F_PREV_FREE);
    }
    if ((w & F_PREV_FREE) && get_word(shm, b - 8) <= b - h->data &&
        get_word(shm, b - 8) >= MIN_BLOCK && (get_word(shm, b - 8) & 7) == 0) {
        uint64_t ps = get_word(shm, b - 8);
        list_remove(shm, b - ps, ps);
        b -= ps;
        s += ps;
        set_hword(shm, b, s, 0);
    }
    if (b + s == brk) {
        set_hword(shm, b, s, F_FREE);
        atomic_store_explicit(&h->brk, b, memory_order_relaxed); /* back to the untouched end */
        __atomic_store_n((uint64_t *)(void *)(shm->base + b), 0, __ATOMIC_RELAXED);
        return;
    }
    set_hword(shm, b, s, F_FREE);
    list_insert(shm, b, s);
    mark_prev_free(shm, b + s, 1);
}

/* A successor writer's first act: the free lists are rebuilt from the block headers (the
 * predecessor may have died in the middle of a list update), merging adjacent free blocks. A
 * header that does not parse ends the walk: what lies above it is lost to the segment. */
static void rebuild_free_lists(kinf_shm *shm)
{
    shm_header *h = hdr(shm);
    uint64_t off = h->data, brk = atomic_load(&h->brk), used = 0, run = 0, runs = 0;
    for (unsigned c = 0; c < NCLASSES; c++)
        atomic_store_explicit(&h->free_heads[c], 0, memory_order_relaxed);
    memset(h->nonempty, 0, sizeof(h->nonempty));
    atomic_store(&h->free_listed, 0);
    while (off < brk) {
        uint64_t w = hword(shm, off), s = bsize(w);
        if (!is_block(w) || s < MIN_BLOCK || s > brk - off)
            break;
        if (w & F_FREE) {
            if (runs == 0)
                run = off;
            runs += s;
        } else {
            if (runs != 0) {
                set_hword(shm, run, runs, F_FREE);
                list_insert(shm, run, runs);
                runs = 0;
            }
            used += s;
        }
        off += s;
    }
    if (runs != 0) {
        if (run + runs == off && off == brk) {
            atomic_store(&h->brk, run);
        } else {
            set_hword(shm, run, runs, F_FREE);
            list_insert(shm, run, runs);
        }
    }
    /* PREV_FREE bits follow the lists just made. */
    for (uint64_t b = h->data, prev_free = 0; b < atomic_load(&h->brk);) {
        uint64_t w = hword(shm, b), s = bsize(w);
        if (!is_block(w) || s < MIN_BLOCK)
            break;
        set_hword(shm, b, s, (w & (F_FREE | F_HELD)) | (prev_free ? F_PREV_FREE : 0));
        prev_free = (w & F_FREE) != 0;
        b += s;
    }
    atomic_store(&h->used, used);
}

kinf_err kinf_shm_retire(kinf_shm *shm, kinf_shm_off off)
{
    return kinf_shm_retire_held(shm, off, NULL);
}

kinf_err kinf_shm_retire_held(kinf_shm *shm, kinf_shm_off off, _Atomic uint64_t *holders)
{
    if (off == 0)
        return KINF_OK;
    if (shm->nretired == shm->cap_retired) {
        size_t cap = shm->cap_retired ? shm->cap_retired * 2 : 64;
        struct shm_retired *grown = realloc(shm->retired, cap * sizeof(*grown));
        if (grown == NULL)
            return KINF_ENOMEM;
        shm->retired = grown;
        shm->cap_retired = cap;
    }
    /* The unlink that made off unreachable happened before this load (program order, and the
     * unlink's store is seq_cst or followed by the fence in kinf_shm_reclaim). */
    shm->retired[shm->nretired].off = off;
    shm->retired[shm->nretired].epoch = atomic_load(&hdr(shm)->epoch);
    shm->retired[shm->nretired].holders = holders;
    shm->nretired++;
    return KINF_OK;
}

/* Frees dead reader slot i: the hooks clear its bit where users publish holders words, then
 * the retired blocks' words are cleared, then the slot is free for another process. */
static void reap(kinf_shm *shm, int i, uint64_t owner)
{
    shm_header *h = hdr(shm);
    uint64_t bit = 1ull << i;
    for (size_t k = 0; k < shm->nhooks; k++)
        shm->hooks[k].fn(shm->hooks[k].ud, i);
    for (size_t k = 0; k < shm->nretired; k++) {
        if (shm->retired[k].holders != NULL)
            atomic_fetch_and(shm->retired[k].holders, ~bit);
    }
    atomic_store(&h->readers[i].epoch, 0);
    /* Only a dead owner's slot gets here, and no one else frees or claims it: the exchange
     * cannot fail; it is one all the same, so a slot is never freed from under another. */
    atomic_compare_exchange_strong(&h->readers[i].owner, &owner, 0);
}

size_t kinf_shm_reap_readers(kinf_shm *shm)
{
    shm_header *h = hdr(shm);
    size_t n = 0;
    for (int i = 0; i < KINF_SHM_READERS; i++) {
        uint64_t o = atomic_load(&h->readers[i].owner);
        if (o != 0 && owner_gone(o)) {
            reap(shm, i, o);
            n++;
        }
    }
    return n;
}

/* Which readers are alive, each looked up at most once per reclaim (a look costs a read of
 * /proc/PID/stat). */
typedef struct liveness {
    uint64_t checked, alive;
} liveness;

static int reader_alive(kinf_shm *shm, liveness *lv, int i)
{
    uint64_t bit = 1ull << i;
    if (!(lv->checked & bit)) {
        uint64_t o = atomic_load(&hdr(shm)->readers[i].owner);
        lv->checked |= bit;
        if (o != 0 && !owner_gone(o))
            lv->alive |= bit;
        else if (o != 0)
            reap(shm, i, o);
        /* 0: a free slot holds nothing (a reader releases its holds before it closes) */
    }
    return (lv->alive & bit) != 0;
}

/* Whether a held block may go: no bit set but those of readers that turn out dead (reaped). */
static int unheld(kinf_shm *shm, liveness *lv, _Atomic uint64_t *holders)
{
    uint64_t bits = holders ? atomic_load(holders) : 0;
    for (int i = 0; bits != 0 && i < KINF_SHM_READERS; i++) {
        if ((bits & (1ull << i)) && reader_alive(shm, lv, i))
            return 0;
    }
    return holders == NULL || atomic_load(holders) == 0;
}

size_t kinf_shm_reclaim(kinf_shm *shm)
{
    shm_header *h = hdr(shm);
    uint64_t oldest, now;
    liveness lv = {0, 0};
    size_t k = 0, n = shm->nretired;

    if (n == 0)
        return 0;
    now = atomic_fetch_add(&h->epoch, 1) + 1;
    atomic_thread_fence(memory_order_seq_cst);
    oldest = now;
    for (int i = 0; i < KINF_SHM_READERS; i++) {
        uint64_t e = atomic_load(&h->readers[i].epoch);
        if (e == 0 || e >= oldest)
            continue;
        if (!reader_alive(shm, &lv, i))
            continue; /* it died inside a read section: reaped */
        oldest = e;
    }
    /* First every decision, then the frees: a dead holder found on the way is reaped, and the
     * reap clears its bit in every retired block's holders word, which must all be live then.
     * A holder sets its bit inside a read section: once no section that began before the
     * retirement is left, a clear word stays clear. The low bit of each offset (blocks are
     * 8-aligned) carries the decision meanwhile. */
    for (size_t i = 0; i < n; i++) {
        if (shm->retired[i].epoch < oldest && unheld(shm, &lv, shm->retired[i].holders))
            shm->retired[i].off |= 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (shm->retired[i].off & 1)
            kinf_shm_free(shm, shm->retired[i].off & ~(kinf_shm_off)1);
        else
            shm->retired[k++] = shm->retired[i];
    }
    shm->nretired = k;
    return k;
}

kinf_err kinf_shm_on_dead_reader(kinf_shm *shm, void (*fn)(void *ud, int slot), void *ud)
{
    if (shm->nhooks == sizeof(shm->hooks) / sizeof(shm->hooks[0]))
        return KINF_ENOMEM;
    shm->hooks[shm->nhooks].fn = fn;
    shm->hooks[shm->nhooks].ud = ud;
    shm->nhooks++;
    return KINF_OK;
}

void kinf_shm_off_dead_reader(kinf_shm *shm, void (*fn)(void *ud, int slot), void *ud)
{
    for (size_t k = 0; k < shm->nhooks; k++) {
        if (shm->hooks[k].fn == fn && shm->hooks[k].ud == ud) {
            shm->hooks[k] = shm->hooks[--shm->nhooks];
            return;
        }
    }
}

/* ---- recovery ---- */

struct kinf_shm_marks {
    uint64_t *bits; /* bit (block - data) / 8: the block is reachable */
    uint64_t data, nbits;
};

kinf_shm_marks *kinf_shm_marks_new(const kinf_shm *shm)
{
    kinf_shm_marks *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->data = hdr(shm)->data;
    m->nbits = (hdr(shm)->size - m->data) / 8;
    m->bits = calloc((size_t)(m->nbits + 63) / 64, sizeof(uint64_t));
    if (m->bits == NULL) {
        free(m);
        return NULL;
    }
    return m;
}

void kinf_shm_marks_free(kinf_shm_marks *m)
{
    if (m != NULL)
        free(m->bits);
    free(m);
}

int kinf_shm_mark(kinf_shm_marks *m, kinf_shm_off off)
{
    uint64_t i, bit;
    if (off < m->data + BLOCK_HEADER || (off - m->data - BLOCK_HEADER) / 8 >= m->nbits)
        return 0;
    i = (off - BLOCK_HEADER - m->data) / 8;
    bit = 1ull << (i % 64);
    if (m->bits[i / 64] & bit)
        return 0;
    m->bits[i / 64] |= bit;
    return 1;
}

kinf_err kinf_shm_sweep(kinf_shm *shm, kinf_shm_marks *m, size_t *blocks, size_t *bytes)
{
    shm_header *h = hdr(shm);
    uint64_t brk = atomic_load_explicit(&h->brk, memory_order_relaxed);
    kinf_err e = KINF_OK;

    *blocks = *bytes = 0;
    /* What waits in this writer's retire list is accounted for already. */
    for (size_t k = 0; k < shm->nretired; k++)
        (void)kinf_shm_mark(m, shm->retired[k].off);
    for (uint64_t b = h->data; b < brk;) {
        uint64_t w = hword(shm, b), s = bsize(w);
        if (!is_block(w) || s < MIN_BLOCK || s > brk - b)
            break; /* unparsable (the free lists' rebuild stopped there too) */
        if (!(w & F_FREE) && kinf_shm_mark(m, b + BLOCK_HEADER)) {
            _Atomic uint64_t *holders =
                (w & F_HELD) ? (_Atomic uint64_t *)(shm->base + b + BLOCK_HEADER +
                                                    KINF_SHM_HOLDERS_AT)
                             : NULL;
            if (kinf_shm_retire_held(shm, b + BLOCK_HEADER, holders) != KINF_OK) {
                e = KINF_ENOMEM; /* stays allocated: the next sweep finds it again */
                break;
            }
            ++*blocks;
            *bytes += s;
        }
        b += s;
    }
    atomic_fetch_add(&h->swept_blocks, *blocks);
    atomic_fetch_add(&h->swept_bytes, *bytes);
    return e;
}

/* ---- readers ---- */

int kinf_shm_reader_open(kinf_shm *shm, int pid)
{
    return kinf_shm_reader_open_as(shm, pid, kinf_shm_process_start(pid));
}

int kinf_shm_reader_open_as(kinf_shm *shm, int pid, uint64_t start)
{
    shm_header *h = hdr(shm);
    uint64_t owner = OWNER(pid, start);
    for (int i = 0; i < KINF_SHM_READERS; i++) {
        uint64_t cur = 0;
        if (atomic_compare_exchange_strong(&h->readers[i].owner, &cur, owner)) {
            atomic_store(&h->readers[i].epoch, 0);
            return i;
        }
    }
    return -1;
}

void kinf_shm_reader_close(kinf_shm *shm, int slot)
{
    shm_header *h = hdr(shm);
    if (slot < 0 || slot >= KINF_SHM_READERS)
        return;
    atomic_store(&h->readers[slot].epoch, 0);
    atomic_store(&h->readers[slot].owner, 0);
}

void kinf_shm_read_begin(kinf_shm *shm, int slot)
{
    shm_header *h = hdr(shm);
    atomic_store(&h->readers[slot].epoch, atomic_load(&h->epoch));
    atomic_thread_fence(memory_order_seq_cst); /* announced before any offset is loaded */
}

void kinf_shm_read_end(kinf_shm *shm, int slot)
{
    atomic_store_explicit(&hdr(shm)->readers[slot].epoch, 0, memory_order_release);
}

void kinf_shm_stats_get(kinf_shm *shm, kinf_shm_stats *out)
{
    shm_header *h = hdr(shm);
    memset(out, 0, sizeof(*out));
    out->size = h->size;
    out->used = atomic_load_explicit(&h->used, memory_order_relaxed);
    out->free_listed = atomic_load_explicit(&h->free_listed, memory_order_relaxed);
    out->untouched = h->size - atomic_load_explicit(&h->brk, memory_order_relaxed);
    out->retired = shm->nretired;
    out->alloc_failures = (unsigned long)atomic_load(&h->alloc_failures);
    out->takeovers = (unsigned long)atomic_load(&h->takeovers);
    out->swept_blocks = (unsigned long)atomic_load(&h->swept_blocks);
    out->swept_bytes = (size_t)atomic_load(&h->swept_bytes);
    out->writer = (int)(atomic_load(&h->writer) >> PID_SHIFT);
    for (int i = 0; i < KINF_SHM_READERS; i++)
        out->readers += atomic_load_explicit(&h->readers[i].owner, memory_order_relaxed) != 0;
}
