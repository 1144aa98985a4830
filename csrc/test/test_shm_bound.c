/* test_shm_bound.c - a shared store's memory under churn (shm_store.c, shm_log.c, shm.c): a
 * segment sized by the documented rule (1.2x the JSON plus 20%) takes thousands of updates of
 * big objects without a failed write and with its use bounded; a segment filled to the last
 * byte takes writes again once keys are deleted; objects growing 3% per update fit a segment
 * twice their final size; an object bigger than any segment could hold fails with its own
 * error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "shm_store.h"

static const char *const INDEXES[] = {"namespace", "by_node"};

static kinf_shm_store *new_store(kinf_shm **shm, size_t size)
{
    kinf_err err;
    kinf_shm_store *st;
    *shm = kinf_shm_create(size, &err);
    CHECK(*shm != NULL);
    st = kinf_shm_store_create(*shm, 0, INDEXES, 2, 4096, &err);
    CHECK(st != NULL && err == KINF_OK);
    return st;
}

/* Puts ns/p<i> at resourceVersion rv with a JSON of about `bytes` bytes, indexed by namespace
 * and by one of 20 nodes. */
static kinf_err put_big(kinf_shm_store *st, int i, int rv, size_t bytes)
{
    char name[32], rvs[32], node[32];
    char *json = malloc(bytes + 256);
    kinf_meta meta;
    kinf_object *o;
    kinf_err err;
    kinf_str nsv = {"ns", 2}, nodev;
    kinf_values *vals[2];
    int n;

    CHECK(json != NULL);
    snprintf(name, sizeof(name), "p%d", i);
    snprintf(rvs, sizeof(rvs), "%d", rv);
    snprintf(node, sizeof(node), "n%d", i % 20);
    n = snprintf(json, 256, "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"%s\","
                 "\"resourceVersion\":\"%s\"},\"pad\":\"", name, rvs);
    memset(json + n, 'x', bytes);
    memcpy(json + n + bytes, "\"}", 3);
    meta = (kinf_meta){{"ns", 2}, {name, strlen(name)}, {"", 0}, {rvs, strlen(rvs)}};
    o = kinf_object_new(json, (size_t)n + bytes + 2, &meta, &err);
    free(json);
    CHECK(o != NULL);
    nodev = (kinf_str){node, strlen(node)};
    vals[0] = kinf_values_new(&nsv, 1);
    vals[1] = kinf_values_new(&nodev, 1);
    err = kinf_shm_store_put(st, o, (const kinf_values *const *)vals);
    kinf_values_free(vals[0]);
    kinf_values_free(vals[1]);
    kinf_object_unref(o);
    return err;
}

static kinf_err del(kinf_shm_store *st, int i)
{
    char key[32];
    int n = snprintf(key, sizeof(key), "ns/p%d", i);
    return kinf_shm_store_delete(st, key, (size_t)n);
}

static size_t used(kinf_shm *shm)
{
    kinf_shm_stats s;
    kinf_shm_stats_get(shm, &s);
    return s.used;
}

/* 2,000 objects of 5 KB, every one updated 20 times in batches of 100 (a flush after each), in
 * a segment of 1.2x their JSON plus 20%: no write fails and the segment's use stays within the
 * live data plus the log's bytes. */
static void updates_at_the_documented_size_never_fail(void)
{
    enum { N = 2000, SIZE = 5000, ROUNDS = 20 };
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, (size_t)(N * SIZE * 1.2 * 1.2));
    kinf_shm_store_info info;
    size_t live, peak = 0;
    int failed = 0;

    for (int i = 0; i < N; i++) {
        kinf_err e = put_big(st, i, 1, SIZE);
        failed += e != KINF_OK;
        if (i % 100 == 99)
            kinf_shm_store_flush(st);
    }
    kinf_shm_store_flush(st);
    live = used(shm);
    for (int r = 2; r <= ROUNDS + 1; r++) {
        for (int i = 0; i < N; i++) {
            failed += put_big(st, i, r, SIZE) != KINF_OK;
            if (i % 100 == 99) {
                kinf_shm_store_flush(st);
                if (used(shm) > peak)
                    peak = used(shm);
            }
        }
    }
    kinf_shm_store_info_get(st, &info);
    CHECK(failed == 0 && info.write_failures == 0);
    CHECK(info.items == N);
    CHECK(peak <= live + kinf_shm_size(shm) / 8 + 64 * 1024);
    CHECK(info.log_bytes <= kinf_shm_size(shm) / 8);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

/* A segment filled until a put fails: deleting half the keys makes room, later puts and
 * deletes succeed, and updates go on without a failure. */
static void a_full_segment_recovers_once_keys_are_deleted(void)
{
    enum { SIZE = 5000 };
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 4 << 20);
    kinf_shm_store_info info;
    int n = 0, failed = 0;

    while (put_big(st, n, 1, SIZE) == KINF_OK)
        n++;
    CHECK(n > 100);
    CHECK(put_big(st, 0, 2, SIZE) == KINF_ENOMEM || put_big(st, n, 1, SIZE) == KINF_ENOMEM);
    for (int i = 0; i < n; i += 2)
        failed += del(st, i) != KINF_OK;
    kinf_shm_store_flush(st);
    CHECK(failed == 0);
    for (int r = 3; r < 23; r++) {
        for (int i = 1; i < n; i += 2)
            failed += put_big(st, i, r, SIZE) != KINF_OK;
        kinf_shm_store_flush(st);
    }
    CHECK(failed == 0);
    kinf_shm_store_info_get(st, &info);
    CHECK(info.items == (size_t)n / 2);
    for (int i = 0; i < n; i += 2)
        failed += put_big(st, i, 30, SIZE) != KINF_OK; /* back to where it was */
    CHECK(failed == 0);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

/* 300 objects growing 3% per update for 50 rounds, in a segment of twice their final JSON. */
static void growing_objects_fit_twice_their_final_size(void)
{
    enum { N = 300, ROUNDS = 50 };
    double size = 2000, final = 2000;
    kinf_shm *shm;
    kinf_shm_store *st;
    int failed = 0;

    for (int r = 0; r < ROUNDS; r++)
        final *= 1.03;
    st = new_store(&shm, (size_t)(2 * N * final));
    for (int i = 0; i < N; i++)
        failed += put_big(st, i, 1, (size_t)size) != KINF_OK;
    for (int r = 2; r <= ROUNDS + 1; r++) {
        size *= 1.03;
        for (int i = 0; i < N; i++)
            failed += put_big(st, i, r, (size_t)size) != KINF_OK;
        kinf_shm_store_flush(st);
    }
    CHECK(failed == 0);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

/* An object bigger than the segment: KINF_ETOOBIG, not a full segment, and nothing changes. */
static void an_object_bigger_than_the_segment_has_its_own_error(void)
{
    kinf_shm *shm;
    kinf_shm_store *st = new_store(&shm, 1 << 20);
    kinf_shm_store_info info;

    CHECK(put_big(st, 1, 1, 100) == KINF_OK);
    CHECK(put_big(st, 2, 1, 2 << 20) == KINF_ETOOBIG);
    CHECK(put_big(st, 1, 2, 2 << 20) == KINF_ETOOBIG);
    kinf_shm_store_info_get(st, &info);
    CHECK(info.items == 1 && info.write_failures == 2 && info.log_drops == 0);
    CHECK(put_big(st, 2, 1, 100) == KINF_OK);
    kinf_shm_store_close(st);
    kinf_shm_close(shm);
}

TEST_MAIN(TEST(updates_at_the_documented_size_never_fail),
          TEST(a_full_segment_recovers_once_keys_are_deleted),
          TEST(growing_objects_fit_twice_their_final_size),
          TEST(an_object_bigger_than_the_segment_has_its_own_error))
