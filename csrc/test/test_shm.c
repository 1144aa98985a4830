/* test_shm.c - the shared segment (shm.c), its map (shm_map.c) and change log (shm_log.c):
 * allocation and a full segment, the map's writes and resizes, reclamation held back by a read
 * section (also one whose process died in it), the writer taken over from a dead process, and
 * a writer churning while readers check every entry and event they see: threads (run under
 * TSan) and forked processes, one of them a writer killed with SIGKILL mid-churn. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"
#include "shm.h"
#include "shm_log.h"
#include "shm_map.h"

/* A test entry: the map's header, a version and a checksum of (key, version), then the key. */
typedef struct tentry {
    kinf_shm_entry h;
    uint64_t version;
    uint64_t check;
    char key[];
} tentry;

static uint64_t checksum(const char *key, size_t len, uint64_t version)
{
    uint64_t c = 1469598103934665603ULL ^ version;
    for (size_t i = 0; i < len; i++)
        c = (c ^ (unsigned char)key[i]) * 1099511628211ULL;
    return c;
}

static kinf_shm_off mkentry(kinf_shm *shm, const char *key, uint64_t version)
{
    size_t len = strlen(key);
    kinf_shm_off off = kinf_shm_alloc(shm, sizeof(tentry) + len + 1);
    tentry *e;
    if (off == 0)
        return 0;
    e = kinf_shm_ptr(shm, off);
    e->h.hash = kinf_shm_map_hash(shm, key, len);
    e->h.key_len = (uint32_t)len;
    e->h.key_at = (uint32_t)offsetof(tentry, key);
    e->version = version;
    e->check = checksum(key, len, version);
    memcpy(e->key, key, len + 1);
    return off;
}

/* Whether off is a complete entry for key (version any): what a reader must always see. */
static int entry_ok(kinf_shm *shm, kinf_shm_off off, const char *key)
{
    const tentry *e = kinf_shm_ptr(shm, off);
    size_t len = strlen(key);
    return e->h.key_len == len && memcmp(e->key, key, len) == 0 &&
           e->check == checksum(key, len, e->version);
}

static int entry_self_ok(kinf_shm *shm, kinf_shm_off off)
{
    const tentry *e = kinf_shm_ptr(shm, off);
    return e->h.key_len < 64 && e->check == checksum(e->key, e->h.key_len, e->version);
}

static kinf_shm *new_shm(size_t size)
{
    kinf_err err;
    kinf_shm *shm = kinf_shm_create(size, &err);
    CHECK(shm != NULL && err == KINF_OK);
    return shm;
}

/* Writer step: put key at version (retiring what it replaced). */
static void put(kinf_shm *shm, _Atomic uint64_t *root, const char *key, uint64_t version)
{
    kinf_shm_off old = 0, e = mkentry(shm, key, version);
    CHECK(e != 0);
    CHECK(kinf_shm_map_put(shm, root, e, &old) == KINF_OK);
    CHECK(kinf_shm_retire(shm, old) == KINF_OK);
}

static void allocates_by_class_and_reports_a_full_segment(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    kinf_shm_stats st;
    kinf_shm_off a, b, c;

    CHECK(kinf_shm_create(1000, &(kinf_err){0}) == NULL); /* too small */
    a = kinf_shm_alloc(shm, 1);
    b = kinf_shm_alloc(shm, 100);
    CHECK(a != 0 && b != 0 && a % 8 == 0 && b % 8 == 0 && a != b);
    memset(kinf_shm_ptr(shm, b), 0xab, 100);
    kinf_shm_stats_get(shm, &st);
    CHECK(st.used == 32 + 112); /* 1 + 8 -> 32, the least block; 100 + 8 -> 112 (8-aligned) */
    kinf_shm_free(shm, b);
    c = kinf_shm_alloc(shm, 97); /* same class: the freed block again */
    CHECK(c == b);
    kinf_shm_free(shm, c);
    kinf_shm_free(shm, c); /* twice: ignored, never a corrupt free list */
    CHECK(kinf_shm_alloc(shm, 100) == b);
    CHECK(kinf_shm_alloc(shm, 100) != b);
    CHECK(kinf_shm_alloc(shm, 2 << 20) == 0);
    while (kinf_shm_alloc(shm, 4000) != 0)
        ;
    kinf_shm_stats_get(shm, &st);
    CHECK(st.alloc_failures == 2);
    CHECK(st.untouched < 4096 + 8);
    kinf_shm_close(shm);
}

/* Objects that grow 3% at each update, each new version allocated before the old one is freed,
 * in a segment twice their final size: blocks merge and split, so what the old versions leave
 * serves the new ones (size classes that never merge fill the segment with free blocks of the
 * sizes left behind). */
static void growing_objects_reuse_what_they_left(void)
{
    enum { N = 200, ROUNDS = 60 };
    kinf_shm_off blk[N];
    double size = 2000, final = 2000;
    kinf_shm *shm;
    kinf_shm_stats st;

    for (int r = 0; r < ROUNDS; r++)
        final *= 1.03;
    shm = new_shm((size_t)(2 * N * final));
    for (int i = 0; i < N; i++)
        CHECK((blk[i] = kinf_shm_alloc(shm, (size_t)size)) != 0);
    for (int r = 0; r < ROUNDS; r++) {
        size *= 1.03;
        for (int i = 0; i < N; i++) {
            kinf_shm_off grown = kinf_shm_alloc(shm, (size_t)size);
            CHECK(grown != 0);
            if (grown == 0)
                break;
            memset(kinf_shm_ptr(shm, grown), r, (size_t)size);
            kinf_shm_free(shm, blk[i]);
            blk[i] = grown;
        }
    }
    kinf_shm_stats_get(shm, &st);
    CHECK(st.alloc_failures == 0);
    for (int i = 0; i < N; i++)
        kinf_shm_free(shm, blk[i]);
    kinf_shm_stats_get(shm, &st);
    CHECK(st.used == 0 && st.free_listed == 0); /* all merged back into the unused end */
    CHECK(st.untouched + 4096 > st.size);
    kinf_shm_close(shm);
}

static void map_puts_replaces_removes_and_grows(void)
{
    kinf_shm *shm = new_shm(8 << 20);
    _Atomic uint64_t *root = kinf_shm_root(shm, 0);
    char key[32];
    kinf_shm_off got, removed;
    kinf_shm_map_iter it;
    size_t n = 0;

    CHECK(kinf_shm_map_get(shm, root, "a", 1) == 0);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "ns/pod-%d", i);
        put(shm, root, key, 1);
    }
    CHECK(kinf_shm_map_count(shm, root) == 5000);
    for (int i = 0; i < 5000; i += 2) {
        snprintf(key, sizeof(key), "ns/pod-%d", i);
        put(shm, root, key, 2); /* replace */
        snprintf(key, sizeof(key), "ns/pod-%d", i + 1);
        kinf_shm_map_remove(shm, root, key, strlen(key), &removed);
        CHECK(removed != 0 && entry_ok(shm, removed, key));
        CHECK(kinf_shm_retire(shm, removed) == KINF_OK);
    }
    CHECK(kinf_shm_map_count(shm, root) == 2500);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "ns/pod-%d", i);
        got = kinf_shm_map_get(shm, root, key, strlen(key));
        CHECK((i % 2 == 0) == (got != 0));
        if (got != 0)
            CHECK(entry_ok(shm, got, key) && ((tentry *)kinf_shm_ptr(shm, got))->version == 2);
    }
    kinf_shm_map_iter_init(shm, root, &it);
    while ((got = kinf_shm_map_next(shm, &it)) != 0) {
        CHECK(entry_self_ok(shm, got));
        n++;
    }
    CHECK(n == 2500);
    /* Tombstones are swept by rebuilds: churn on few keys keeps the table small. */
    for (int r = 0; r < 20000; r++) {
        snprintf(key, sizeof(key), "churn-%d", r % 10);
        if (r % 3 == 2) {
            kinf_shm_map_remove(shm, root, key, strlen(key), &removed);
            CHECK(kinf_shm_retire(shm, removed) == KINF_OK);
        } else {
            put(shm, root, key, (uint64_t)r);
        }
        kinf_shm_reclaim(shm);
    }
    CHECK(kinf_shm_reclaim(shm) == 0); /* no reader: everything retired is freed */
    kinf_shm_map_clear(shm, root);
    CHECK(kinf_shm_map_count(shm, root) == 0);
    CHECK(kinf_shm_map_get(shm, root, "ns/pod-0", 8) == 0);
    kinf_shm_close(shm);
}

static void a_read_section_holds_back_what_it_may_hold(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    _Atomic uint64_t *root = kinf_shm_root(shm, 0);
    int slot = kinf_shm_reader_open(shm, getpid());
    kinf_shm_off seen;

    CHECK(slot >= 0);
    put(shm, root, "k", 1);
    kinf_shm_reclaim(shm);
    kinf_shm_read_begin(shm, slot);
    seen = kinf_shm_map_get(shm, root, "k", 1);
    put(shm, root, "k", 2); /* retires the version the reader holds */
    CHECK(kinf_shm_reclaim(shm) == 1);
    CHECK(kinf_shm_reclaim(shm) == 1);
    CHECK(entry_ok(shm, seen, "k") && ((tentry *)kinf_shm_ptr(shm, seen))->version == 1);
    kinf_shm_read_end(shm, slot);
    CHECK(kinf_shm_reclaim(shm) == 0);
    /* A section begun after the write never holds the old version back. */
    put(shm, root, "k", 3);
    kinf_shm_read_begin(shm, slot);
    CHECK(kinf_shm_reclaim(shm) == 1); /* retired before the epoch moved: still held */
    kinf_shm_read_end(shm, slot);
    kinf_shm_reclaim(shm);
    kinf_shm_reader_close(shm, slot);
    kinf_shm_close(shm);
}

static void a_reader_that_died_in_its_section_is_released(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    _Atomic uint64_t *root = kinf_shm_root(shm, 0);
    kinf_shm_stats st;
    pid_t child;
    int status;

    put(shm, root, "k", 1);
    child = fork();
    if (child == 0) {
        int slot = kinf_shm_reader_open(shm, getpid());
        kinf_shm_read_begin(shm, slot);
        (void)kinf_shm_map_get(shm, root, "k", 1);
        _exit(slot >= 0 ? 0 : 1); /* dies inside its read section */
    }
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kinf_shm_stats_get(shm, &st);
    CHECK(st.readers == 1);
    put(shm, root, "k", 2);
    CHECK(kinf_shm_reclaim(shm) == 0); /* the dead reader holds nothing */
    kinf_shm_stats_get(shm, &st);
    CHECK(st.readers == 0);
    kinf_shm_close(shm);
}

static void the_writer_is_taken_over_from_a_dead_process(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    kinf_shm_stats st;
    pid_t child;
    int status, go[2];

    CHECK(pipe(go) == 0);
    child = fork();
    if (child == 0) {
        char c;
        close(go[1]);
        while (kinf_shm_claim_writer(shm, getpid()) != KINF_OK)
            usleep(100);
        if (read(go[0], &c, 1) < 0)
            _exit(2);
        _exit(0); /* never releases */
    }
    close(go[0]);
    while (kinf_shm_claim_writer(shm, getpid()) == KINF_OK) { /* until the child holds it */
        kinf_shm_release_writer(shm, getpid());
        usleep(1000);
    }
    CHECK(kinf_shm_claim_writer(shm, getpid()) == KINF_EBUSY);
    CHECK(write(go[1], "x", 1) == 1);
    close(go[1]);
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(kinf_shm_claim_writer(shm, getpid()) == KINF_EEXIST);
    CHECK(kinf_shm_claim_writer(shm, getpid()) == KINF_OK);
    kinf_shm_release_writer(shm, getpid());
    kinf_shm_stats_get(shm, &st);
    CHECK(st.takeovers == 1);
    kinf_shm_close(shm);
}

static void the_log_keeps_the_last_cap_events_and_tells_a_reader_it_fell_behind(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    kinf_shm_off log = kinf_shm_log_new(shm, 16);
    kinf_shm_log_deferred d = {0};
    kinf_shm_event ev;

    CHECK(kinf_shm_log_new(shm, 20) == 0); /* not a power of two */
    CHECK(log != 0 && kinf_shm_log_head(shm, log) == 1);
    CHECK(kinf_shm_log_read(shm, log, 1, &ev) == KINF_SHM_LOG_NONE);
    for (uint64_t i = 1; i <= 40; i++) {
        kinf_shm_off obj = mkentry(shm, "k", i);
        CHECK(kinf_shm_log_append(shm, log, KINF_SHM_UPDATED, obj, 0) == i);
        CHECK(kinf_shm_log_defer(&d, obj, i, 0) == KINF_OK);
        kinf_shm_log_release(shm, log, &d, KINF_SHM_NO_HOLDERS);
    }
    CHECK(kinf_shm_log_head(shm, log) == 41);
    CHECK(kinf_shm_log_read(shm, log, 24, &ev) == KINF_SHM_LOG_BEHIND);
    CHECK(kinf_shm_log_read(shm, log, 25, &ev) == KINF_SHM_LOG_EVENT);
    CHECK(ev.seq == 25 && ev.type == KINF_SHM_UPDATED && entry_ok(shm, ev.obj, "k"));
    CHECK(((tentry *)kinf_shm_ptr(shm, ev.obj))->version == 25);
    CHECK(kinf_shm_log_read(shm, log, 41, &ev) == KINF_SHM_LOG_NONE);
    CHECK(d.n - d.first == 16); /* the 24 that left the ring were retired */
    CHECK(kinf_shm_reclaim(shm) == 0);
    kinf_shm_log_deferred_free(&d);
    kinf_shm_close(shm);
}

/* The log's memory is bounded in bytes too: kinf_shm_log_bound moves the tail past the oldest
 * deferred blocks, a reader below the tail is BEHIND, one at the head loses nothing, and the
 * blocks are freed at once. A log too big for the segment is refused, also when its size in
 * bytes would wrap around. */
static void the_log_drops_old_events_to_stay_under_its_bytes(void)
{
    kinf_shm *shm = new_shm(1 << 20);
    kinf_shm_off log = kinf_shm_log_new(shm, 1024);
    kinf_shm_log_deferred d = {0};
    kinf_shm_event ev;
    kinf_shm_stats before, after;
    size_t one = 0;

    CHECK(kinf_shm_log_new(shm, 1ull << 59) == 0); /* 2^59 slots of 32 bytes: 2^64 wraps */
    CHECK(kinf_shm_log_new(shm, 1ull << 20) == 0); /* 32 MiB: more than the segment */
    CHECK(log != 0 && kinf_shm_log_tail(shm, log) == 1);
    for (uint64_t i = 1; i <= 100; i++) {
        kinf_shm_off obj = mkentry(shm, "k", i);
        one = kinf_shm_block_size(shm, obj);
        CHECK(kinf_shm_log_append(shm, log, KINF_SHM_UPDATED, obj, 0) == i);
        CHECK(kinf_shm_log_defer(&d, obj, i, one) == KINF_OK);
    }
    CHECK(d.bytes == 100 * one);
    kinf_shm_stats_get(shm, &before);
    kinf_shm_log_bound(shm, log, &d, 10 * one);
    kinf_shm_log_release(shm, log, &d, KINF_SHM_NO_HOLDERS);
    CHECK(kinf_shm_reclaim(shm) == 0);
    kinf_shm_stats_get(shm, &after);
    CHECK(d.bytes == 10 * one && d.n - d.first == 10);
    CHECK(before.used - after.used == 90 * one);
    CHECK(kinf_shm_log_tail(shm, log) == 91);
    CHECK(kinf_shm_log_read(shm, log, 90, &ev) == KINF_SHM_LOG_BEHIND);
    CHECK(kinf_shm_log_read(shm, log, 91, &ev) == KINF_SHM_LOG_EVENT && ev.seq == 91);
    kinf_shm_log_truncate(shm, log, 1000); /* past the head: up to the head */
    CHECK(kinf_shm_log_tail(shm, log) == 101);
    CHECK(kinf_shm_log_read(shm, log, 100, &ev) == KINF_SHM_LOG_BEHIND);
    CHECK(kinf_shm_log_read(shm, log, 101, &ev) == KINF_SHM_LOG_NONE);
    kinf_shm_log_release(shm, log, &d, KINF_SHM_NO_HOLDERS);
    CHECK(d.bytes == 0 && kinf_shm_reclaim(shm) == 0);
    kinf_shm_log_deferred_free(&d);
    kinf_shm_close(shm);
}

/* ---- a writer churning, readers checking ---- */

#define KEYS 64
#define ROUNDS 20000

typedef struct churn {
    kinf_shm *shm;
    kinf_shm_off log;
    _Atomic int done;
} churn;

/* One write: a random key updated, deleted or added; its event logged; what left retired. */
static void churn_step(churn *c, kinf_shm_log_deferred *d, unsigned *rng)
{
    _Atomic uint64_t *root = kinf_shm_root(c->shm, 0);
    char key[16];
    kinf_shm_off e, old = 0;
    uint64_t seq;

    *rng = *rng * 1103515245u + 12345u;
    snprintf(key, sizeof(key), "k%u", (*rng >> 8) % KEYS);
    if ((*rng >> 20) % 4 == 0) {
        kinf_shm_map_remove(c->shm, root, key, strlen(key), &old);
        if (old == 0)
            return;
        seq = kinf_shm_log_append(c->shm, c->log, KINF_SHM_DELETED, old, 0);
    } else {
        e = mkentry(c->shm, key, *rng);
        if (e == 0 || kinf_shm_map_put(c->shm, root, e, &old) != KINF_OK) {
            kinf_shm_free(c->shm, e);
            return;
        }
        seq = kinf_shm_log_append(c->shm, c->log, old ? KINF_SHM_UPDATED : KINF_SHM_ADDED, e,
                                  old);
    }
    (void)kinf_shm_log_defer(d, old, seq, kinf_shm_block_size(c->shm, old));
    kinf_shm_log_release(c->shm, c->log, d, KINF_SHM_NO_HOLDERS);
    kinf_shm_reclaim(c->shm);
}

static void run_writer(churn *c, unsigned seed, long rounds)
{
    kinf_shm_log_deferred d = {0};
    for (long r = 0; rounds < 0 || r < rounds; r++)
        churn_step(c, &d, &seed);
    kinf_shm_log_deferred_free(&d);
}

/* Reads until the writer is done: every entry found complete and under its own key, every
 * event complete; returns the number of problems. */
static int run_reader(churn *c, int slot, atomic_int *stop)
{
    _Atomic uint64_t *root = kinf_shm_root(c->shm, 0);
    uint64_t cursor = 1;
    int bad = 0;
    unsigned rng = (unsigned)slot * 7919u + 1;
    char key[16];

    while (!atomic_load(stop)) {
        kinf_shm_event ev;
        kinf_shm_map_iter it;
        kinf_shm_off e;
        kinf_shm_read_begin(c->shm, slot);
        rng = rng * 1103515245u + 12345u;
        snprintf(key, sizeof(key), "k%u", (rng >> 8) % KEYS);
        e = kinf_shm_map_get(c->shm, root, key, strlen(key));
        bad += e != 0 && !entry_ok(c->shm, e, key);
        kinf_shm_map_iter_init(c->shm, root, &it);
        while ((e = kinf_shm_map_next(c->shm, &it)) != 0)
            bad += !entry_self_ok(c->shm, e);
        for (int i = 0; i < 8; i++) {
            kinf_shm_log_read_result r = kinf_shm_log_read(c->shm, c->log, cursor, &ev);
            if (r == KINF_SHM_LOG_NONE)
                break;
            if (r == KINF_SHM_LOG_BEHIND) { /* start over at the oldest event kept */
                uint64_t head = kinf_shm_log_head(c->shm, c->log);
                cursor = head > kinf_shm_log_cap(c->shm, c->log) / 2
                             ? head - kinf_shm_log_cap(c->shm, c->log) / 2 : 1;
                continue;
            }
            bad += ev.seq != cursor || ev.type < KINF_SHM_ADDED || ev.type > KINF_SHM_DELETED;
            bad += !entry_self_ok(c->shm, ev.obj);
            bad += ev.old != 0 && !entry_self_ok(c->shm, ev.old);
            cursor++;
        }
        kinf_shm_read_end(c->shm, slot);
    }
    return bad;
}

typedef struct reader_arg {
    churn *c;
    int slot;
    atomic_int *stop;
    int bad;
} reader_arg;

static void *reader_thread(void *arg)
{
    reader_arg *a = arg;
    a->bad = run_reader(a->c, a->slot, a->stop);
    return NULL;
}

static void readers_in_threads_see_only_whole_entries_and_events(void)
{
    churn c = {new_shm(16 << 20), 0, 0};
    atomic_int stop = 0;
    pthread_t th[3];
    reader_arg args[3];

    c.log = kinf_shm_log_new(c.shm, 64);
    CHECK(c.log != 0);
    for (int i = 0; i < 3; i++) {
        args[i] = (reader_arg){&c, kinf_shm_reader_open(c.shm, getpid()), &stop, 0};
        CHECK(args[i].slot >= 0);
        pthread_create(&th[i], NULL, reader_thread, &args[i]);
    }
    run_writer(&c, 1, ROUNDS);
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0);
        kinf_shm_reader_close(c.shm, args[i].slot);
    }
    CHECK(kinf_shm_reclaim(c.shm) == 0);
    kinf_shm_close(c.shm);
}

static void readers_in_processes_survive_a_writer_killed_mid_churn(void)
{
    churn c = {new_shm(32 << 20), 0, 0};
    atomic_int *stop = kinf_shm_ptr(c.shm, kinf_shm_alloc(c.shm, sizeof(atomic_int)));
    pid_t readers[3], writer;
    int status;
    kinf_shm_stats st;

    atomic_init(stop, 0);
    c.log = kinf_shm_log_new(c.shm, 64);
    for (int i = 0; i < 3; i++) {
        readers[i] = fork();
        if (readers[i] == 0) {
            int slot = kinf_shm_reader_open(c.shm, getpid());
            _exit(slot >= 0 && run_reader(&c, slot, stop) == 0 ? 0 : 1);
        }
    }
    /* A writer process churns until it is killed, wherever it is. */
    writer = fork();
    if (writer == 0) {
        CHECK(kinf_shm_claim_writer(c.shm, getpid()) == KINF_OK);
        run_writer(&c, 2, -1);
        _exit(0);
    }
    usleep(300 * 1000);
    kill(writer, SIGKILL);
    CHECK(waitpid(writer, &status, 0) == writer && WIFSIGNALED(status));
    /* This process takes over and goes on from what the dead one published. */
    CHECK(kinf_shm_claim_writer(c.shm, getpid()) == KINF_EEXIST);
    {
        _Atomic uint64_t *root = kinf_shm_root(c.shm, 0);
        kinf_shm_map_iter it;
        kinf_shm_off e;
        kinf_shm_map_iter_init(c.shm, root, &it);
        while ((e = kinf_shm_map_next(c.shm, &it)) != 0)
            CHECK(entry_self_ok(c.shm, e));
    }
    run_writer(&c, 3, ROUNDS);
    atomic_store(stop, 1);
    for (int i = 0; i < 3; i++) {
        CHECK(waitpid(readers[i], &status, 0) == readers[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(kinf_shm_reclaim(c.shm) == 0);
    kinf_shm_stats_get(c.shm, &st);
    CHECK(st.takeovers == 1 && st.alloc_failures == 0);
    kinf_shm_release_writer(c.shm, getpid());
    kinf_shm_close(c.shm);
}

TEST_MAIN(TEST(allocates_by_class_and_reports_a_full_segment), TEST(growing_objects_reuse_what_they_left),
          TEST(map_puts_replaces_removes_and_grows), TEST(a_read_section_holds_back_what_it_may_hold),
          TEST(a_reader_that_died_in_its_section_is_released),
          TEST(the_writer_is_taken_over_from_a_dead_process),
          TEST(the_log_keeps_the_last_cap_events_and_tells_a_reader_it_fell_behind),
          TEST(the_log_drops_old_events_to_stay_under_its_bytes),
          TEST(readers_in_threads_see_only_whole_entries_and_events),
          TEST(readers_in_processes_survive_a_writer_killed_mid_churn))
