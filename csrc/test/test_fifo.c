/* test_fifo.c - the DeltaFIFO from C, especially what Lua cannot show: real producer and
 * consumer threads (TSan), blocked poppers woken by close, timed pops. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctest.h"
#include "delta_fifo.h"
#include "testobj.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static kinf_fifo *new_fifo(kinf_store *known, unsigned flags)
{
    kinf_err err;
    kinf_fifo *f = kinf_fifo_new(known, flags, &err);
    CHECK(f != NULL);
    return f;
}

static void push(kinf_fifo *f, kinf_err (*op)(kinf_fifo *, kinf_object *), const char *name,
                 const char *rv)
{
    kinf_object *o = mkobj("", name, "", rv);
    CHECK(op(f, o) == KINF_OK);
    kinf_object_unref(o);
}

/* ---- basic: two producers, one consumer, per-producer order kept ---- */

#define PER_PRODUCER 1000

struct producer {
    kinf_fifo *f;
    char prefix;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    char name[32];
    for (int i = 0; i < PER_PRODUCER; i++) {
        snprintf(name, sizeof(name), "%c%d", p->prefix, i);
        push(p->f, kinf_fifo_add, name, "1");
    }
    return NULL;
}

static void basic_two_producers_keep_their_order(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    struct producer a = {f, 'a'}, b = {f, 'b'};
    pthread_t ta, tb;
    int next_a = 0, next_b = 0;

    pthread_create(&ta, NULL, produce, &a);
    pthread_create(&tb, NULL, produce, &b);
    for (int i = 0; i < 2 * PER_PRODUCER; i++) {
        kinf_deltas d;
        int n;
        CHECK(kinf_fifo_pop(f, 5.0, NULL, NULL, &d, NULL) == KINF_OK);
        if (d.n != 1) {
            CHECK(d.n == 1);
            kinf_deltas_clear(&d);
            break;
        }
        n = atoi(d.v[0].obj->name + 1);
        if (d.v[0].obj->name[0] == 'a')
            CHECK(n == next_a++);
        else
            CHECK(n == next_b++);
        kinf_deltas_clear(&d);
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(next_a == PER_PRODUCER && next_b == PER_PRODUCER);
    kinf_fifo_unref(f);
}

/* ---- PopShouldUnblockWhenClosed: 10 blocked pops return within 500 ms of close ---- */

struct popper {
    kinf_fifo *f;
    kinf_err result;
    double returned_at;
};

static void *blocked_pop(void *arg)
{
    struct popper *p = arg;
    kinf_deltas d;
    p->result = kinf_fifo_pop(p->f, -1, NULL, NULL, &d, NULL);
    p->returned_at = now();
    kinf_deltas_clear(&d);
    return NULL;
}

static void close_unblocks_every_blocked_pop(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    struct popper poppers[10];
    pthread_t threads[10];
    struct timespec pause = {0, 50 * 1000 * 1000};
    double closed_at;

    for (int i = 0; i < 10; i++) {
        poppers[i].f = f;
        poppers[i].result = KINF_OK;
        pthread_create(&threads[i], NULL, blocked_pop, &poppers[i]);
    }
    nanosleep(&pause, NULL);
    closed_at = now();
    kinf_fifo_close(f);
    for (int i = 0; i < 10; i++) {
        pthread_join(threads[i], NULL);
        CHECK(poppers[i].result == KINF_ECLOSED);
        CHECK(poppers[i].returned_at - closed_at < 0.5);
    }
    CHECK(kinf_fifo_is_closed(f));
    kinf_fifo_unref(f);
}

static void queued_items_drain_after_close(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    kinf_deltas d;
    push(f, kinf_fifo_add, "x", "1");
    push(f, kinf_fifo_add, "y", "1");
    kinf_fifo_close(f);
    CHECK(kinf_fifo_pop(f, 0, NULL, NULL, &d, NULL) == KINF_OK && strcmp(d.v[0].obj->key, "x") == 0);
    kinf_deltas_clear(&d);
    CHECK(kinf_fifo_pop(f, 0, NULL, NULL, &d, NULL) == KINF_OK && strcmp(d.v[0].obj->key, "y") == 0);
    kinf_deltas_clear(&d);
    CHECK(kinf_fifo_pop(f, -1, NULL, NULL, &d, NULL) == KINF_ECLOSED);
    kinf_fifo_unref(f);
}

static void timed_pop_times_out(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    kinf_deltas d;
    double t0 = now(), waited;
    CHECK(kinf_fifo_pop(f, 0.1, NULL, NULL, &d, NULL) == KINF_ETIMEDOUT);
    waited = now() - t0;
    CHECK(waited >= 0.09 && waited < 2.0);
    kinf_fifo_unref(f);
}

/* ---- requeue and re-entry ---- */

struct ctx {
    kinf_fifo *f;
    int calls;
    kinf_err inner;
};

static int requeue_once(void *ud, const kinf_deltas *d, int initial)
{
    struct ctx *c = ud;
    (void)d;
    (void)initial;
    return c->calls++ == 0 ? KINF_FIFO_REQUEUE : KINF_OK;
}

static int reenter(void *ud, const kinf_deltas *d, int initial)
{
    struct ctx *c = ud;
    (void)initial;
    c->inner = kinf_fifo_add(c->f, d->v[0].obj); /* must be refused, not deadlock */
    return KINF_OK;
}

static void requeue_puts_item_back_and_reentry_is_refused(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    struct ctx c = {f, 0, KINF_OK};
    kinf_deltas d;
    push(f, kinf_fifo_add, "x", "1");
    CHECK(kinf_fifo_pop(f, 0, requeue_once, &c, &d, NULL) == KINF_OK);
    CHECK(d.n == 1); /* the caller still gets the deltas */
    kinf_deltas_clear(&d);
    CHECK(kinf_fifo_len(f) == 1);
    CHECK(kinf_fifo_pop(f, 0, requeue_once, &c, &d, NULL) == KINF_OK);
    kinf_deltas_clear(&d);
    CHECK(kinf_fifo_len(f) == 0);
    push(f, kinf_fifo_add, "y", "1");
    CHECK(kinf_fifo_pop(f, 0, reenter, &c, &d, NULL) == KINF_OK);
    CHECK(c.inner == KINF_EBUSY);
    kinf_deltas_clear(&d);
    kinf_fifo_unref(f);
}

/* A queue that grew big and drained gives its arrays back: pushes, merges and a requeue work
 * from there as in a new queue (under ASan: nothing read from what was freed). */
static void a_drained_big_queue_works_as_a_new_one(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    struct ctx c = {f, 0, KINF_OK};
    kinf_deltas d;
    char name[32];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3000; i++) {
            snprintf(name, sizeof(name), "k%d", i);
            push(f, kinf_fifo_add, name, "1");
        }
        for (int i = 0; i < 3000; i++) {
            snprintf(name, sizeof(name), "k%d", i);
            CHECK(kinf_fifo_pop(f, 0, NULL, NULL, &d, NULL) == KINF_OK);
            CHECK(d.n == 1 && strcmp(d.v[0].obj->name, name) == 0);
            kinf_deltas_clear(&d);
        }
        CHECK(kinf_fifo_len(f) == 0);
        push(f, kinf_fifo_add, "x", "1");
        push(f, kinf_fifo_update, "x", "2"); /* merged into x's entry */
        push(f, kinf_fifo_add, "y", "1");
        c.calls = 0;
        CHECK(kinf_fifo_pop(f, 0, requeue_once, &c, &d, NULL) == KINF_OK);
        CHECK(d.n == 2 && kinf_fifo_len(f) == 2); /* x went back, behind y */
        kinf_deltas_clear(&d);
        CHECK(kinf_fifo_pop(f, 0, NULL, NULL, &d, NULL) == KINF_OK);
        CHECK(strcmp(d.v[0].obj->name, "y") == 0);
        kinf_deltas_clear(&d);
        CHECK(kinf_fifo_pop(f, 0, NULL, NULL, &d, NULL) == KINF_OK);
        CHECK(d.n == 2 && strcmp(d.v[1].obj->resource_version, "2") == 0);
        kinf_deltas_clear(&d);
        CHECK(kinf_fifo_len(f) == 0);
    }
    kinf_fifo_unref(f);
}

/* ---- replace against known objects, has_synced ---- */

static void replace_emits_tombstones_and_counts_initial_list(void)
{
    kinf_err err;
    kinf_store *known = kinf_store_new(0, &err);
    kinf_fifo *f = new_fifo(known, KINF_FIFO_EMIT_REPLACED);
    kinf_object *gone = mkobj("", "gone", "", "3"), *list[2];
    kinf_deltas d;
    int initial = 0;

    CHECK(kinf_store_add(known, gone, NULL, NULL, 0) == KINF_OK);
    list[0] = mkobj("", "a", "", "4");
    list[1] = mkobj("", "b", "", "4");
    CHECK(!kinf_fifo_has_synced(f));
    CHECK(kinf_fifo_replace(f, list, 2, "4") == KINF_OK);
    CHECK(!kinf_fifo_has_synced(f));
    CHECK(kinf_fifo_len(f) == 3);
    for (int i = 0; i < 3; i++) {
        CHECK(kinf_fifo_pop(f, 0, NULL, NULL, &d, &initial) == KINF_OK);
        CHECK(initial == 1);
        if (strcmp(d.v[0].obj->key, "gone") == 0) {
            CHECK(d.v[0].type == KINF_DELTA_DELETED);
            CHECK(kinf_object_is_tombstone(d.v[0].obj));
            CHECK(d.v[0].obj->inner == gone); /* the known object, shared, not copied */
        } else {
            CHECK(d.v[0].type == KINF_DELTA_REPLACED);
        }
        kinf_deltas_clear(&d);
    }
    CHECK(kinf_fifo_has_synced(f));
    kinf_object_unref(list[0]);
    kinf_object_unref(list[1]);
    kinf_object_unref(gone);
    kinf_fifo_unref(f);
    kinf_store_unref(known);
}

static void consecutive_deletions_are_deduplicated(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    kinf_deltas d;
    kinf_err err;
    kinf_object *o = mkobj("", "x", "", "1");
    kinf_object *t = kinf_tombstone_new("x", 1, o, &err);
    CHECK(kinf_fifo_add(f, o) == KINF_OK);
    CHECK(kinf_fifo_delete(f, t) == KINF_OK);
    CHECK(kinf_fifo_delete(f, o) == KINF_OK); /* older is a tombstone: keep the newer */
    CHECK(kinf_fifo_get_by_key(f, "x", 1, &d) == KINF_OK);
    CHECK(d.n == 2 && d.v[1].type == KINF_DELTA_DELETED && d.v[1].obj == o);
    kinf_deltas_clear(&d);
    CHECK(kinf_fifo_delete(f, t) == KINF_OK); /* older is plain: keep the older */
    CHECK(kinf_fifo_get_by_key(f, "x", 1, &d) == KINF_OK);
    CHECK(d.n == 2 && d.v[1].obj == o);
    kinf_deltas_clear(&d);
    kinf_object_unref(t);
    kinf_object_unref(o);
    kinf_fifo_unref(f);
}

/* ---- what the queue holds: keys, deltas, record bytes ---- */

static void stats_follow_every_enqueue_merge_pop_and_requeue(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    kinf_fifo_stats st;
    kinf_deltas d;
    kinf_err err;
    struct ctx c = {f, 0, KINF_OK};
    kinf_object *x1 = mkobj("ns", "x", "", "1"), *x2 = mkobj("ns", "x", "", "2");
    kinf_object *y = mkobj("ns", "y", "", "3");
    kinf_object *t = kinf_tombstone_new("ns/x", 4, x2, &err);
    size_t sx1 = kinf_object_size(x1), sx2 = kinf_object_size(x2), sy = kinf_object_size(y);
    size_t st_ = kinf_object_size(t);

    /* A record's size covers its JSON and its strings; a tombstone only its key. */
    CHECK(sx1 > x1->json_len + sizeof(*x1));
    CHECK(st_ == sizeof(*t) + 5);
    kinf_fifo_get_stats(f, &st);
    CHECK(st.keys == 0 && st.deltas == 0 && st.bytes == 0);
    /* Every update is kept (client-go keeps every delta): memory grows per event. */
    CHECK(kinf_fifo_add(f, x1) == KINF_OK);
    CHECK(kinf_fifo_update(f, x2) == KINF_OK);
    CHECK(kinf_fifo_update(f, x2) == KINF_OK);
    CHECK(kinf_fifo_add(f, y) == KINF_OK);
    kinf_fifo_get_stats(f, &st);
    CHECK(st.keys == 2 && st.deltas == 4 && st.bytes == sx1 + 2 * sx2 + sy);
    /* Two deletions in a row merge: the dropped one leaves the totals. */
    CHECK(kinf_fifo_delete(f, x2) == KINF_OK);
    CHECK(kinf_fifo_delete(f, t) == KINF_OK);
    kinf_fifo_get_stats(f, &st);
    CHECK(st.keys == 2 && st.deltas == 5 && st.bytes == sx1 + 3 * sx2 + sy);
    /* A requeued item is counted again; a popped one leaves. */
    CHECK(kinf_fifo_pop(f, 0, requeue_once, &c, &d, NULL) == KINF_OK);
    kinf_deltas_clear(&d);
    kinf_fifo_get_stats(f, &st);
    CHECK(st.keys == 2 && st.deltas == 5 && st.bytes == sx1 + 3 * sx2 + sy);
    CHECK(kinf_fifo_pop(f, 0, NULL, NULL, &d, NULL) == KINF_OK); /* y */
    CHECK(d.n == 1 && d.v[0].obj == y);
    kinf_fifo_get_stats(f, &st);
    CHECK(st.keys == 1 && st.deltas == 4 && st.bytes == sx1 + 3 * sx2);
    CHECK(kinf_fifo_add_if_not_present(f, &d) == KINF_OK);
    kinf_deltas_clear(&d);
    kinf_fifo_get_stats(f, &st);
    CHECK(st.keys == 2 && st.deltas == 5 && st.bytes == sx1 + 3 * sx2 + sy);
    while (kinf_fifo_pop(f, 0, NULL, NULL, &d, NULL) == KINF_OK)
        kinf_deltas_clear(&d);
    kinf_fifo_get_stats(f, &st);
    CHECK(st.keys == 0 && st.deltas == 0 && st.bytes == 0);
    kinf_object_unref(t);
    kinf_object_unref(x1);
    kinf_object_unref(x2);
    kinf_object_unref(y);
    kinf_fifo_unref(f);
}

/* ---- many producers and a consumer: nothing lost (TSan) ---- */

#define STRESS_OPS 4000

static void *stress_producer(void *arg)
{
    kinf_fifo *f = arg;
    char name[16];
    for (int i = 0; i < STRESS_OPS; i++) {
        snprintf(name, sizeof(name), "k%d", i % 97);
        push(f, (i & 1) ? kinf_fifo_update : kinf_fifo_add, name, "1");
    }
    return NULL;
}

static int notified;
static void note(void *ud)
{
    (void)ud;
    notified++; /* called with the FIFO lock held */
}

static void producers_and_consumer_lose_nothing(void)
{
    kinf_fifo *f = new_fifo(NULL, 0);
    pthread_t p[3];
    size_t popped = 0;
    kinf_fifo_set_notify(f, note, NULL);
    for (int i = 0; i < 3; i++)
        pthread_create(&p[i], NULL, stress_producer, f);
    while (popped < 3 * STRESS_OPS) {
        kinf_deltas d;
        kinf_err err = kinf_fifo_pop(f, 5.0, NULL, NULL, &d, NULL);
        CHECK(err == KINF_OK);
        if (err != KINF_OK)
            break;
        popped += d.n;
        kinf_deltas_clear(&d);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(p[i], NULL);
    CHECK(popped == 3 * STRESS_OPS);
    CHECK(kinf_fifo_len(f) == 0);
    kinf_fifo_close(f);
    CHECK(notified >= 1);
    kinf_fifo_unref(f);
}

/* ---- relists against a store that a consumer fills at the same time ---- */

#define RELISTS 30
#define RELIST_KEYS 2500

static int listed_in(int round, int i)
{
    return (i + round) % 7 != 0 && i < 1500 + (round * 137) % 1000;
}

struct relister {
    kinf_fifo *f;
    atomic_int done;
};

/* The I/O thread's part: a list every round, each missing other keys, at a new version. */
static void *relist(void *arg)
{
    struct relister *r = arg;
    static kinf_object *objs[RELIST_KEYS];
    char ns[16], name[16], rv[16];

    for (int round = 0; round < RELISTS; round++) {
        size_t n = 0;
        snprintf(rv, sizeof(rv), "%d", round + 1);
        for (int i = 0; i < RELIST_KEYS; i++) {
            if (!listed_in(round, i))
                continue;
            snprintf(ns, sizeof(ns), "ns-%d", i % 5);
            snprintf(name, sizeof(name), "k%d", i);
            objs[n++] = mkobj(ns, name, "", rv);
        }
        CHECK(kinf_fifo_replace(r->f, objs, n, rv) == KINF_OK);
        for (size_t i = 0; i < n; i++)
            kinf_object_unref(objs[i]);
    }
    atomic_store(&r->done, 1);
    return NULL;
}

/* The replace reserves the known store's map and the pops look ahead into it (prefetch under
 * its read lock) while this thread writes it, as an informer's dispatch does: once the last
 * list is drained, the store holds exactly that list. */
static void relists_while_the_store_fills_end_with_the_last_list(void)
{
    kinf_err err;
    kinf_store *known = kinf_store_new(1, &err);
    kinf_fifo *f = new_fifo(known, KINF_FIFO_EMIT_REPLACED);
    struct relister r = { f, 0 };
    pthread_t t;
    size_t want = 0;
    char key[32];

    CHECK(pthread_create(&t, NULL, relist, &r) == 0);
    for (;;) {
        kinf_deltas d;
        int finished = atomic_load(&r.done);
        err = kinf_fifo_pop(f, 0.05, NULL, NULL, &d, NULL);
        if (err == KINF_ETIMEDOUT && finished)
            break;
        if (err == KINF_ETIMEDOUT)
            continue;
        CHECK(err == KINF_OK);
        if (err != KINF_OK)
            break;
        for (size_t i = 0; i < d.n; i++) {
            kinf_object *o = d.v[i].obj, *old = NULL;
            if (d.v[i].type == KINF_DELTA_DELETED)
                CHECK(kinf_store_delete(known, o->key, o->key_len, &old) == KINF_OK);
            else
                CHECK(kinf_store_add(known, o, &old, NULL, 0) == KINF_OK);
            kinf_object_unref(old);
        }
        kinf_deltas_clear(&d);
    }
    pthread_join(t, NULL);
    for (int i = 0; i < RELIST_KEYS; i++) {
        kinf_object *o;
        snprintf(key, sizeof(key), "ns-%d/k%d", i % 5, i);
        o = kinf_store_get(known, key, strlen(key));
        if (listed_in(RELISTS - 1, i)) {
            want++;
            CHECK(o != NULL && atoi(o->resource_version) == RELISTS);
        } else {
            CHECK(o == NULL);
        }
        kinf_object_unref(o);
    }
    CHECK(kinf_store_len(known) == want);
    kinf_fifo_unref(f);
    kinf_store_unref(known);
}

TEST_MAIN(TEST(basic_two_producers_keep_their_order),
          TEST(stats_follow_every_enqueue_merge_pop_and_requeue), TEST(close_unblocks_every_blocked_pop),
          TEST(queued_items_drain_after_close), TEST(timed_pop_times_out),
          TEST(requeue_puts_item_back_and_reentry_is_refused),
          TEST(a_drained_big_queue_works_as_a_new_one),
          TEST(replace_emits_tombstones_and_counts_initial_list),
          TEST(consecutive_deletions_are_deduplicated),
          TEST(producers_and_consumer_lose_nothing),
          TEST(relists_while_the_store_fills_end_with_the_last_list))
