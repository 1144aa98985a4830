/* test_shm_store.c - an informer's cache in a shared segment (shm_store.c): puts, updates that
 * move a key between index values, deletes, the change log, an unchanged object written again,
 * retain (a successor writer's sweep), a full segment, a value of thousands of keys kept in
 * chunks that split and merge, and a writer churning while readers in
 * threads (TSan) and in processes check that every bucket is sorted and holds only records
 * with its value; one writer process is killed with SIGKILL and a successor takes over. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"
#include "shm_store.h"
#include "testobj.h"

static const char *const INDEXES[] = {"namespace", "by_node"};

static kinf_shm_store *new_store(kinf_shm **shm, size_t size)
{
    kinf_err err;
    kinf_shm_store *st;
    *shm = kinf_shm_create(size, &err);
    CHECK(*shm != NULL);
    st = kinf_shm_store_create(*shm, 0, INDEXES, 2, 64, &err);
    CHECK(st != NULL && err == KINF_OK);
    return st;
}

/* Puts ns/name on node at rv, with its namespace and node as index values. */
static kinf_err put(kinf_shm_store *st, const char *ns, const char *name, const char *node,
                    const char *rv)
{
    kinf_object *o = mkobj(ns, name, node, rv);
    kinf_str nsv = {ns, strlen(ns)}, nodev = {node, strlen(node)};
    kinf_values *vals[2] = {kinf_values_new(&nsv, 1), node[0] ? kinf_values_new(&nodev, 1) : NULL};
    kinf_err e = kinf_shm_store_put(st, o, (const kinf_values *const *)vals);
    kinf_values_free(vals[0]);
    kinf_values_free(vals[1]);
    kinf_object_unref(o);
    return e;
}

/* The keys under value in index ix, joined with ','. */
static const char *keys(kinf_shm_store *st, int ix, const char *value)
{
    static char buf[1024];
    kinf_shm_bucket b;
    kinf_shm_off off;
    buf[0] = '\0';
    kinf_shm_store_by_index(st, ix, value, strlen(value), &b);
    for (size_t i = 0; (off = kinf_shm_bucket_next(&b)) != 0; i++) {
        kinf_shm_view v;
        kinf_shm_store_view(st, off, &v);
        if (i)
            strcat(buf, ",");
        strncat(buf, v.key, v.key_len);
    }
    return buf;
}

static const char *events(kinf_shm_store *st, uint64_t from)
{
    static char buf[1024];
    kinf_shm *shm = kinf_shm_store_segment(st);
    kinf_shm_event ev;
    static const char *T[] = {"?", "A", "U", "D"};
    buf[0] = '\0';
    while (kinf_shm_log_read(shm, kinf_shm_store_log(st), from++, &ev) == KINF_SHM_LOG_EVENT) {
        kinf_shm_view v;
        kinf_shm_store_view(st, ev.obj, &v);
        snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s:%.*s", buf[0] ? " " : "",
                 T[ev.type], (int)v.key_len, v.key);
    }
    return buf;
}

static void writes_indexes_and_logs(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 4 << 20);
    kinf_shm_view v;
    kinf_str vals[4];
    int node = kinf_shm_store_index_of(st, "by_node");

    CHECK(node == 1 && kinf_shm_store_index_of(st, "nope") == -1);
    CHECK(put(st, "a", "p2", "n1", "1") == KINF_OK);
    CHECK(put(st, "a", "p1", "n1", "2") == KINF_OK);
    CHECK(put(st, "b", "p3", "n2", "3") == KINF_OK);
    CHECK(kinf_shm_store_len(st) == 3);
    CHECK_STR(keys(st, node, "n1"), "a/p1,a/p2"); /* sorted by key */
    CHECK_STR(keys(st, 0, "a"), "a/p1,a/p2");
    CHECK(kinf_shm_store_get(st, "a/p1", 4, &v) == 1);
    CHECK(v.name.len == 2 && memcmp(v.name.ptr, "p1", 2) == 0);
    CHECK(v.resource_version.len == 1 && v.resource_version.ptr[0] == '2');
    CHECK(strstr(v.json, "\"node\":\"n1\"") != NULL && v.json[v.json_len] == '\0');
    CHECK(kinf_shm_store_values(st, v.off, node, vals, 4) == 1 && vals[0].len == 2);
    /* Moves between values; an unchanged object changes nothing. */
    CHECK(put(st, "a", "p1", "n2", "4") == KINF_OK);
    CHECK(put(st, "a", "p1", "n2", "4") == KINF_OK);
    CHECK_STR(keys(st, node, "n1"), "a/p2");
    CHECK_STR(keys(st, node, "n2"), "a/p1,b/p3");
    CHECK(kinf_shm_store_delete(st, "a/p2", 4) == KINF_OK);
    CHECK(kinf_shm_store_delete(st, "a/zz", 4) == KINF_OK);
    CHECK_STR(keys(st, node, "n1"), ""); /* the value is gone */
    CHECK_STR(events(st, 1), "A:a/p2 A:a/p1 A:b/p3 U:a/p1 D:a/p2");
    {
        kinf_shm_map_iter it;
        size_t values = 0;
        kinf_shm_store_iter(st, node, &it);
        while (kinf_shm_map_next(shm, &it) != 0)
            values++;
        CHECK(values == 1);
    }
    kinf_shm_store_flush(st);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

static int keep_b(void *ud, const char *key, size_t len)
{
    (void)ud;
    return len > 0 && key[0] == 'b';
}

static void a_successor_attaches_and_retains_what_it_listed(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 4 << 20), *next;
    kinf_shm_store_info info;
    kinf_err err;

    put(st, "a", "p1", "n1", "1");
    put(st, "b", "p2", "n1", "1");
    kinf_shm_store_close(st);
    next = kinf_shm_store_attach(shm, 0, &err);
    CHECK(next != NULL && err == KINF_OK);
    CHECK(put(next, "x", "y", "", "1") == KINF_EINVAL); /* not the writer's handle yet */
    CHECK(kinf_shm_store_become_writer(next) == KINF_OK);
    CHECK(kinf_shm_store_attach(shm, 1, &err) == NULL && err == KINF_ENOTFOUND);
    put(next, "b", "p2", "n1", "1"); /* relisted, unchanged: no event */
    CHECK(kinf_shm_store_retain(next, keep_b, NULL) == KINF_OK);
    CHECK_STR(keys(next, 1, "n1"), "b/p2");
    CHECK_STR(events(next, 1), "A:a/p1 A:b/p2 D:a/p1");
    kinf_shm_store_info_get(next, &info);
    CHECK(info.items == 1 && info.writes == 3 && info.write_failures == 0 && info.log_head == 4);
    kinf_shm_store_flush(next);
    kinf_shm_store_close(next);
    kinf_shm_close(shm);
}

static void a_full_segment_fails_the_write_and_keeps_the_content(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 64 << 10);
    kinf_shm_store_info info;
    char name[32];
    int i;
    kinf_err e = KINF_OK;

    for (i = 0; e == KINF_OK; i++) {
        snprintf(name, sizeof(name), "pod-%d", i);
        e = put(st, "ns", name, "n1", "1");
    }
    CHECK(e == KINF_ENOMEM);
    kinf_shm_store_info_get(st, &info);
    CHECK(info.items == (size_t)(i - 1) && info.write_failures == 1);
    CHECK(kinf_shm_store_len(st) == info.items);
    {   /* the index holds exactly the stored keys */
        kinf_shm_bucket b;
        size_t n = 0;
        kinf_shm_store_by_index(st, 1, "n1", 2, &b);
        while (kinf_shm_bucket_next(&b) != 0)
            n++;
        CHECK(b.n == info.items && n == b.n);
    }
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

/* The record at key in a fresh read section, held by slot. */
static kinf_shm_off hold(kinf_shm_store *st, kinf_shm *shm, int slot, const char *key)
{
    kinf_shm_view v;
    kinf_shm_off off = 0;
    kinf_shm_read_begin(shm, slot);
    if (kinf_shm_store_get(st, key, strlen(key), &v)) {
        kinf_shm_store_hold(st, slot, v.off);
        off = v.off;
    }
    kinf_shm_read_end(shm, slot);
    return off;
}

/* Updates ns/p1 n times (each a new record), flushing after each. */
static void churn_p1(kinf_shm_store *st, int from, int n)
{
    char rv[16];
    for (int i = from; i < from + n; i++) {
        snprintf(rv, sizeof(rv), "%d", i);
        CHECK(put(st, "ns", "p1", "n1", rv) == KINF_OK);
        kinf_shm_store_flush(st);
    }
}

/* The keys under value, checked against the model (present[i]: "big/p<i>" is there, sorted as
 * strings); returns problems. */
static int bucket_matches(kinf_shm_store *st, const char *value, const char *present, int n)
{
    kinf_shm_bucket b;
    kinf_shm_off off;
    char prev[32] = "", key[32];
    size_t seen = 0, want = 0;
    int bad = 0;
    for (int i = 0; i < n; i++)
        want += present[i] != 0;
    kinf_shm_store_by_index(st, 0, value, strlen(value), &b);
    while ((off = kinf_shm_bucket_next(&b)) != 0) {
        kinf_shm_view v;
        int i;
        kinf_shm_store_view(st, off, &v);
        snprintf(key, sizeof(key), "%.*s", (int)v.key_len, v.key);
        bad += sscanf(key, "big/p%d", &i) != 1 || i < 0 || i >= n || !present[i];
        bad += seen > 0 && strcmp(prev, key) >= 0;
        memcpy(prev, key, sizeof(key));
        seen++;
    }
    return bad + (seen != want) + (b.n != want);
}

/* One round: inserts in a scrambled order (splits), moves between node values and deletes at
 * random, then deletes everything (merges), checking the whole value against the model as it
 * goes; then pushes the last records out of the log. */
static void big_value_round(kinf_shm_store *st, unsigned seed)
{
    enum { N = 3000 };
    static char present[N];
    char name[16], key[24];
    kinf_shm_bucket b;

    for (int k = 0; k < N; k++) {
        int i = (int)(((unsigned)k * 1237u) % N);
        snprintf(name, sizeof(name), "p%d", i);
        CHECK(put(st, "big", name, k % 2 ? "n1" : "n2", "1") == KINF_OK);
        present[i] = 1;
        if (k % 500 == 499) {
            CHECK(bucket_matches(st, "big", present, N) == 0);
            kinf_shm_store_flush(st);
        }
    }
    kinf_shm_store_by_index(st, 0, "big", 3, &b);
    CHECK(b.n == N && b.nchunks > 1);
    for (int k = 0; k < N; k++) {
        seed = seed * 1103515245u + 12345u;
        int i = (int)((seed >> 8) % N);
        snprintf(name, sizeof(name), "p%d", i);
        if (present[i] && (seed >> 4) % 3 == 0) {
            snprintf(key, sizeof(key), "big/%s", name);
            CHECK(kinf_shm_store_delete(st, key, strlen(key)) == KINF_OK);
            present[i] = 0;
        } else {
            CHECK(put(st, "big", name, (seed >> 16) % 2 ? "n1" : "n3", "2") == KINF_OK);
            present[i] = 1;
        }
        if (k % 300 == 299) {
            CHECK(bucket_matches(st, "big", present, N) == 0);
            kinf_shm_store_flush(st);
        }
    }
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "big/p%d", i);
        CHECK(kinf_shm_store_delete(st, key, strlen(key)) == KINF_OK);
        present[i] = 0;
        if (i % 250 == 0)
            CHECK(bucket_matches(st, "big", present, N) == 0);
    }
    CHECK(bucket_matches(st, "big", present, N) == 0);
    for (int i = 0; i < 70; i++) { /* the log (64 events) moves past the deleted records */
        CHECK(put(st, "other", "z", "", "1") == KINF_OK);
        CHECK(kinf_shm_store_delete(st, "other/z", 7) == KINF_OK);
        kinf_shm_store_flush(st);
    }
}

static void a_big_value_is_kept_in_chunks_that_split_and_merge(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 16 << 20);
    kinf_shm_stats first, second;

    /* The second round ends where the first did (the maps' tables have grown already): no
     * chunk or bucket leaked, none freed twice. */
    big_value_round(st, 7);
    kinf_shm_stats_get(shm, &first);
    big_value_round(st, 8);
    kinf_shm_stats_get(shm, &second);
    CHECK(first.retired <= 2 && second.retired <= 2);
    CHECK(second.used == first.used);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

static void a_held_record_outlives_its_section_and_the_log(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 4 << 20);
    int slot = kinf_shm_reader_open(shm, getpid());
    kinf_shm_off held;
    kinf_shm_view v;
    kinf_shm_stats before, after;

    CHECK(slot >= 0);
    put(st, "ns", "p1", "n1", "1");
    held = hold(st, shm, slot, "ns/p1");
    CHECK(held != 0);
    churn_p1(st, 2, 200); /* far past the log's 64 events */
    kinf_shm_store_view(st, held, &v);
    CHECK(v.resource_version.len == 1 && v.resource_version.ptr[0] == '1');
    CHECK(strstr(v.json, "\"resourceVersion\":\"1\"") != NULL);
    kinf_shm_stats_get(shm, &before);
    CHECK(before.retired >= 1);
    kinf_shm_store_release(st, slot, held);
    kinf_shm_store_flush(st);
    kinf_shm_stats_get(shm, &after);
    CHECK(after.retired < before.retired && after.used < before.used);
    kinf_shm_reader_close(shm, slot);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

static void a_dead_holder_is_reaped_and_holds_nothing(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 4 << 20);
    kinf_shm_stats stats;
    pid_t child;
    int status;

    put(st, "ns", "p1", "n1", "1");
    child = fork();
    if (child == 0) {
        int slot = kinf_shm_reader_open(shm, getpid());
        _exit(slot >= 0 && hold(st, shm, slot, "ns/p1") != 0 ? 0 : 1); /* never releases */
    }
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kinf_shm_stats_get(shm, &stats);
    CHECK(stats.readers == 1);
    churn_p1(st, 2, 200);
    kinf_shm_stats_get(shm, &stats);
    CHECK(stats.readers == 0 && stats.retired == 0);
    /* A live process whose slot was reaped finds free slots again. */
    CHECK(kinf_shm_reader_open(shm, getpid()) >= 0);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

/* ---- churn ---- */

#define NODES 7
#define PODS 1500 /* the namespace's value: several chunks */

typedef struct churn {
    kinf_shm *shm;
    atomic_int *stop;
} churn;

static void churn_writer(kinf_shm *shm, unsigned seed, long rounds)
{
    kinf_err err;
    kinf_shm_store *st = kinf_shm_store_attach(shm, 0, &err);
    char name[16], node[8], rv[16];
    CHECK(st != NULL && kinf_shm_store_become_writer(st) == KINF_OK);
    for (long r = 0; st != NULL && (rounds < 0 || r < rounds); r++) {
        seed = seed * 1103515245u + 12345u;
        snprintf(name, sizeof(name), "p%u", (seed >> 8) % PODS);
        if ((seed >> 20) % 5 == 0) {
            char key[24];
            snprintf(key, sizeof(key), "ns/%s", name);
            (void)kinf_shm_store_delete(st, key, strlen(key));
        } else {
            snprintf(node, sizeof(node), "n%u", (seed >> 12) % NODES);
            snprintf(rv, sizeof(rv), "%ld", r + 1);
            (void)put(st, "ns", name, node, rv);
        }
        kinf_shm_store_flush(st);
    }
    kinf_shm_store_close(st);
}

/* Every bucket sorted, each record in it carrying the bucket's node; returns problems. */
static int check_buckets(kinf_shm_store *st)
{
    int bad = 0;
    char node[8];
    for (int k = 0; k < NODES; k++) {
        kinf_shm_bucket b;
        kinf_shm_off off, last = 0;
        size_t n = 0;
        snprintf(node, sizeof(node), "n%d", k);
        kinf_shm_store_by_index(st, 1, node, strlen(node), &b);
        for (size_t i = 0; (off = kinf_shm_bucket_next(&b)) != 0; i++, n++) {
            kinf_shm_view v, prev;
            kinf_shm_store_view(st, off, &v);
            {
                kinf_object probe;
                memset(&probe, 0, sizeof(probe));
                probe.json = v.json;
                kinf_str got = node_of(&probe);
                bad += got.len != strlen(node) || memcmp(got.ptr, node, got.len) != 0;
            }
            if (i > 0) {
                kinf_shm_store_view(st, last, &prev);
                bad += strcmp(prev.key, v.key) >= 0;
            }
            last = off;
        }
        bad += n != b.n;
    }
    return bad;
}

static int run_reader(kinf_shm *shm, int slot, atomic_int *stop)
{
    kinf_err err;
    kinf_shm_store *st = kinf_shm_store_attach(shm, 0, &err);
    int bad = st == NULL;
    while (st != NULL && !atomic_load(stop)) {
        kinf_shm_view v;
        kinf_shm_read_begin(shm, slot);
        bad += check_buckets(st);
        if (kinf_shm_store_get(st, "ns/p7", 5, &v))
            bad += v.key_len != 5 || memcmp(v.key, "ns/p7", 5) != 0;
        kinf_shm_read_end(shm, slot);
    }
    kinf_shm_store_close(st);
    return bad;
}

typedef struct rarg {
    kinf_shm *shm;
    int slot;
    atomic_int *stop;
    int bad;
} rarg;

static void *reader_thread(void *p)
{
    rarg *a = p;
    a->bad = run_reader(a->shm, a->slot, a->stop);
    return NULL;
}

static void readers_in_threads_see_consistent_buckets(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 16 << 20);
    atomic_int stop = 0;
    pthread_t th[2];
    rarg args[2];

    kinf_shm_store_close(st);
    for (int i = 0; i < 2; i++) {
        args[i] = (rarg){shm, kinf_shm_reader_open(shm, getpid()), &stop, 0};
        pthread_create(&th[i], NULL, reader_thread, &args[i]);
    }
    churn_writer(shm, 1, 20000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].bad == 0);
    }
    kinf_shm_close(shm);
}

static void readers_in_processes_survive_a_killed_writer(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 32 << 20);
    atomic_int *stop = kinf_shm_ptr(shm, kinf_shm_alloc(shm, sizeof(atomic_int)));
    pid_t readers[2], writer;
    int status;

    kinf_shm_store_close(st);
    atomic_init(stop, 0);
    for (int i = 0; i < 2; i++) {
        readers[i] = fork();
        if (readers[i] == 0)
            _exit(run_reader(shm, kinf_shm_reader_open(shm, getpid()), stop) == 0 ? 0 : 1);
    }
    writer = fork();
    if (writer == 0) {
        kinf_shm_claim_writer(shm, getpid());
        churn_writer(shm, 2, -1);
        _exit(0);
    }
    usleep(300 * 1000);
    kill(writer, SIGKILL);
    CHECK(waitpid(writer, &status, 0) == writer && WIFSIGNALED(status));
    CHECK(kinf_shm_claim_writer(shm, getpid()) == KINF_EEXIST);
    churn_writer(shm, 3, 20000);
    atomic_store(stop, 1);
    for (int i = 0; i < 2; i++) {
        CHECK(waitpid(readers[i], &status, 0) == readers[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    {
        kinf_err err;
        kinf_shm_store *last = kinf_shm_store_attach(shm, 0, &err);
        CHECK(last != NULL && check_buckets(last) == 0);
        kinf_shm_store_close(last);
    }
    kinf_shm_close(shm);
}

TEST_MAIN(TEST(writes_indexes_and_logs), TEST(a_successor_attaches_and_retains_what_it_listed),
          TEST(a_full_segment_fails_the_write_and_keeps_the_content),
          TEST(a_big_value_is_kept_in_chunks_that_split_and_merge),
          TEST(a_held_record_outlives_its_section_and_the_log),
          TEST(a_dead_holder_is_reaped_and_holds_nothing),
          TEST(readers_in_threads_see_consistent_buckets),
          TEST(readers_in_processes_survive_a_killed_writer))
