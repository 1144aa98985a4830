/* test_shm_corrupt.c - a shared store whose segment a stray write changed: every read reports
 * the corruption or returns data read inside the segment, and never crashes or loops.
 *
 * A populated store (a few hundred records with index values, updates and deletes in the log)
 * is corrupted in a forked child per trial: one to three words, chosen among the structure
 * (map tables and slots, bucket and chunk words, record headers, the log and its slots, the
 * store header) or anywhere in the heap, get a random value (a random word, an offset inside or
 * past the segment, a flipped bit, 0, a small count, another block's offset). The child then
 * runs every read API: attach, get of every key, by_index of every value with each record's
 * view, the iteration of every record with its values, the values of every index, the log from
 * its tail to its head with the views of what each event names, then the successor's recovery.
 * It must exit normally (an alarm ends a loop that never would); the test counts the
 * corruptions the reads reported. KINF_CORRUPT_TRIALS sets the number of trials (default 400;
 * `make soak-corrupt` runs many more). Meant for the ASan+UBSan build. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"
#include "shm_store.h"
#include "testobj.h"

#define RECORDS 300
#define NODES 7
#define NIX 2

static const char *const INDEXES[NIX] = {"namespace", "by_node"};

typedef struct target {
    kinf_shm_off off;
    unsigned words; /* words from off - 8 that may be chosen */
} target;

typedef struct fixture {
    kinf_shm *shm;
    kinf_shm_store *st;
    char keys[RECORDS][32];
    target t[4096];
    size_t nt;
    kinf_shm_off heap_end;
} fixture;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void add_target(fixture *f, kinf_shm_off off, unsigned words)
{
    if (off != 0 && f->nt < sizeof(f->t) / sizeof(f->t[0]))
        f->t[f->nt++] = (target){off, words};
}

static void put(fixture *f, int i, int version)
{
    char ns[16], name[16], node[16], rv[16];
    kinf_str nv;
    kinf_values *vals[NIX];
    kinf_object *o;
    snprintf(ns, sizeof(ns), "ns%d", i % 5);
    snprintf(name, sizeof(name), "p%d", i);
    snprintf(node, sizeof(node), "n%d", (i + version) % NODES);
    snprintf(rv, sizeof(rv), "%d", version);
    o = mkobj(ns, name, node, rv);
    nv = (kinf_str){ns, strlen(ns)};
    vals[0] = kinf_values_new(&nv, 1);
    nv = (kinf_str){node, strlen(node)};
    vals[1] = kinf_values_new(&nv, 1);
    CHECK(o != NULL && vals[0] != NULL && vals[1] != NULL);
    CHECK(kinf_shm_store_put(f->st, o, (const kinf_values *const *)vals) == KINF_OK);
    snprintf(f->keys[i], sizeof(f->keys[i]), "%s/%s", ns, name);
    kinf_object_unref(o);
    kinf_values_free(vals[0]);
    kinf_values_free(vals[1]);
}

static void populate(fixture *f)
{
    kinf_err err;
    kinf_shm_map_iter it;
    kinf_shm_off off;
    kinf_shm_stats stats;
    const char *names[NIX] = {INDEXES[0], INDEXES[1]};

    memset(f, 0, sizeof(*f));
    f->shm = kinf_shm_create(1 << 20, &err);
    CHECK(f->shm != NULL);
    CHECK(kinf_shm_claim_writer(f->shm, (int)getpid()) == KINF_OK);
    f->st = kinf_shm_store_create(f->shm, 0, names, NIX, 64, &err);
    CHECK(f->st != NULL);
    for (int i = 0; i < RECORDS; i++)
        put(f, i, 1);
    for (int i = 0; i < RECORDS; i += 7)
        put(f, i, 2); /* updates: some move to another node's bucket */
    for (int i = 3; i < RECORDS; i += 29)
        CHECK(kinf_shm_store_delete(f->st, f->keys[i], strlen(f->keys[i])) == KINF_OK);
    kinf_shm_store_flush(f->st);

    /* The structure's words, found through the read API. */
    add_target(f, atomic_load(kinf_shm_root(f->shm, 0)), 8);
    add_target(f, kinf_shm_store_log(f->st), 8 + 64 * 4);
    kinf_shm_store_iter(f->st, -1, &it);
    add_target(f, it.table, 4 + (unsigned)it.cap);
    while ((off = kinf_shm_map_next(f->shm, &it)) != 0)
        add_target(f, off, 8);
    for (int ix = 0; ix < NIX; ix++) {
        kinf_shm_store_iter(f->st, ix, &it);
        add_target(f, it.table, 4 + (unsigned)it.cap);
        while ((off = kinf_shm_map_next(f->shm, &it)) != 0) {
            kinf_str v = kinf_shm_store_bucket_value(f->st, off);
            kinf_shm_bucket b;
            CHECK(kinf_shm_store_by_index(f->st, ix, v.ptr, v.len, &b) == KINF_OK);
            add_target(f, off, 6 + (unsigned)b.nchunks);
            for (size_t c = 0; c < b.nchunks; c++)
                add_target(f, b.chunks[c], 2 + 256);
        }
    }
    kinf_shm_stats_get(f->shm, &stats);
    f->heap_end = stats.size - stats.untouched;
}

/* A value a stray write might leave. */
static uint64_t bad_value(fixture *f, uint64_t *s, uint64_t old)
{
    switch (rnd(s) % 7) {
    case 0: return rnd(s);
    case 1: return rnd(s) % (kinf_shm_size(f->shm) * 2);
    case 2: return (rnd(s) % kinf_shm_size(f->shm)) & ~(uint64_t)7;
    case 3: return old ^ (1ull << (rnd(s) % 64));
    case 4: return 0;
    case 5: return rnd(s) % 600;
    default: return f->t[rnd(s) % f->nt].off + 8 * (rnd(s) % 4);
    }
}

static void corrupt(fixture *f, uint64_t *s)
{
    int n = 1 + (int)(rnd(s) % 3);
    for (int k = 0; k < n; k++) {
        kinf_shm_off at;
        uint64_t *w;
        if (rnd(s) % 4 != 0) {
            const target *t = &f->t[rnd(s) % f->nt];
            at = t->off - 8 + 8 * (rnd(s) % t->words);
        } else {
            at = 4096 + 8 * (rnd(s) % ((f->heap_end - 4096) / 8));
        }
        if (at + 8 > f->heap_end)
            continue;
        w = kinf_shm_ptr(f->shm, at);
        *w = bad_value(f, s, *w);
    }
}

/* Every read API over the whole store; returns how many reported corruption. */
static int read_all(fixture *f)
{
    kinf_err err;
    kinf_shm_store *st = kinf_shm_store_attach(f->shm, 0, &err);
    int slot = kinf_shm_reader_open(f->shm, (int)getpid()), bad = 0;
    kinf_shm_map_iter it;
    kinf_shm_off off, log;
    volatile size_t sum = 0; /* every byte handed out is read */

    if (st == NULL)
        return err == KINF_ECORRUPT;
    kinf_shm_read_begin(f->shm, slot);
    for (int i = 0; i < RECORDS; i++) {
        kinf_shm_view v;
        int r = kinf_shm_store_get(st, f->keys[i], strlen(f->keys[i]), &v);
        bad += r < 0;
        if (r > 0) {
            for (size_t j = 0; j < v.json_len; j++)
                sum += (unsigned char)v.json[j];
            sum += v.key_len + v.namespace_.len + v.name.len + v.uid.len +
                   v.resource_version.len;
            if (v.resource_version.len > 0)
                sum += (unsigned char)v.resource_version.ptr[v.resource_version.len - 1];
        }
    }
    for (int ix = 0; ix < NIX; ix++) {
        kinf_shm_store_iter(st, ix, &it);
        while ((off = kinf_shm_map_next(f->shm, &it)) != 0) {
            kinf_str value = kinf_shm_store_bucket_value(st, off);
            kinf_shm_bucket b;
            kinf_shm_off rec;
            if (value.len > 0)
                sum += (unsigned char)value.ptr[value.len - 1];
            if (kinf_shm_store_by_index(st, ix, value.ptr, value.len, &b) != KINF_OK) {
                bad++;
                continue;
            }
            while ((rec = kinf_shm_bucket_next(&b)) != 0) {
                kinf_shm_view v;
                if (kinf_shm_store_view(st, rec, &v) != KINF_OK) {
                    bad++;
                    break;
                }
                sum += v.key_len ? (unsigned char)v.key[v.key_len - 1] : 0;
            }
            bad += b.corrupt;
        }
        bad += it.corrupt;
    }
    kinf_shm_store_iter(st, -1, &it);
    while ((off = kinf_shm_map_next(f->shm, &it)) != 0) {
        kinf_shm_view v;
        kinf_str vals[8];
        if (kinf_shm_store_view(st, off, &v) != KINF_OK) {
            bad++;
            continue;
        }
        for (int ix = 0; ix < NIX; ix++) {
            size_t n = kinf_shm_store_values(st, off, ix, vals, 8);
            if (n == KINF_SHM_STORE_CORRUPT) {
                bad++;
                continue;
            }
            for (size_t j = 0; j < n && j < 8; j++)
                sum += vals[j].len ? (unsigned char)vals[j].ptr[vals[j].len - 1] : 0;
        }
    }
    bad += it.corrupt;
    sum += kinf_shm_store_len(st);
    log = kinf_shm_store_log(st);
    for (uint64_t seq = kinf_shm_log_tail(f->shm, log), head = kinf_shm_log_head(f->shm, log);
         seq < head && seq < kinf_shm_log_tail(f->shm, log) + 256; seq++) {
        kinf_shm_event ev;
        kinf_shm_view v;
        kinf_shm_log_read_result r = kinf_shm_log_read(f->shm, log, seq, &ev);
        bad += r == KINF_SHM_LOG_CORRUPT;
        if (r != KINF_SHM_LOG_EVENT || ev.type == KINF_SHM_RESYNCED)
            continue;
        bad += kinf_shm_store_view(st, ev.obj, &v) != KINF_OK;
        if (ev.old != 0)
            bad += kinf_shm_store_view(st, ev.old, &v) != KINF_OK;
    }
    kinf_shm_read_end(f->shm, slot);
    kinf_shm_reader_close(f->shm, slot);
    kinf_shm_store_close(st);
    (void)sum;
    return bad;
}

static void test_corrupt_reads(void)
{
    fixture *f = calloc(1, sizeof(*f));
    const char *env = getenv("KINF_CORRUPT_TRIALS");
    int trials = env ? atoi(env) : 400, failed = 0, reported = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    unsigned char *copy;

    CHECK(f != NULL);
    populate(f);
    CHECK(f->nt > RECORDS);
    CHECK(read_all(f) == 0); /* the intact segment reads clean */
    /* The segment is shared with the children: each trial's corruption is undone from here. */
    CHECK((copy = malloc(kinf_shm_size(f->shm))) != NULL);
    memcpy(copy, kinf_shm_ptr(f->shm, 0), kinf_shm_size(f->shm));
    for (int t = 0; t < trials; t++) {
        uint64_t s = seed + (uint64_t)t * 0x2545f4914f6cdd1dull;
        int status;
        pid_t pid = fork();
        if (pid == 0) {
            kinf_shm_recovery rec;
            int bad;
            alarm(20); /* a read that loops forever fails the trial */
            if (t > 0)
                corrupt(f, &s); /* trial 0: the intact segment, recovery included, is clean */
            bad = read_all(f);
            /* A successor's recovery on the corrupt segment: reported, never a crash. */
            bad += kinf_shm_store_recover(f->shm, &rec) == KINF_ECORRUPT;
            _exit(bad > 0 ? 3 : 0);
        }
        CHECK(pid > 0);
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3)) {
            if (failed++ < 5)
                fprintf(stderr, "trial %d (seed %llu): the reads died (status %#x)\n", t,
                        (unsigned long long)s, status);
        } else {
            CHECK(t > 0 || WEXITSTATUS(status) == 0);
            reported += WEXITSTATUS(status) == 3;
        }
        memcpy(kinf_shm_ptr(f->shm, 0), copy, kinf_shm_size(f->shm));
    }
    free(copy);
    CHECK(failed == 0);
    CHECK(trials < 50 || reported > trials / 10); /* the checks do see corruption */
    fprintf(stderr, "%d trials: %d crashed or hung, %d reported corruption\n", trials, failed,
            reported);
    kinf_shm_store_close(f->st);
    kinf_shm_close(f->shm);
    free(f);
}

TEST_MAIN(TEST(test_corrupt_reads))
