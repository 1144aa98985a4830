/* test_map.c - the hash map against a trivially correct reference (an array), with removals
 * that exercise backward-shift deletion. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "ctest.h"
#include "map.h"
#include "object.h"

#define N 5000

static void random_ops_match_reference(void)
{
    static char keys[N][16];
    static int present[N];
    kinf_map m;
    uint64_t rng = 42;

    kinf_map_init(&m);
    for (int i = 0; i < N; i++)
        snprintf(keys[i], sizeof(keys[i]), "ns/pod-%d", i);
    for (int step = 0; step < 200000; step++) {
        int k;
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        k = (int)((rng >> 33) % N);
        if ((rng >> 20) & 1) {
            CHECK(kinf_map_put(&m, keys[k], strlen(keys[k]), &present[k]) == KINF_OK);
            present[k] = 1;
        } else {
            void *v = kinf_map_remove(&m, keys[k], strlen(keys[k]));
            CHECK((v != NULL) == present[k]);
            present[k] = 0;
        }
    }
    {
        size_t count = 0;
        for (int i = 0; i < N; i++) {
            void *v = kinf_map_get(&m, keys[i], strlen(keys[i]));
            CHECK((v != NULL) == present[i]);
            count += present[i];
        }
        CHECK(m.count == count);
    }
    kinf_map_free(&m);
}

static void iteration_visits_each_entry_once(void)
{
    kinf_map m;
    static char keys[100][8];
    int seen[100] = {0};
    kinf_map_slot *sl;

    kinf_map_init(&m);
    for (int i = 0; i < 100; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        CHECK(kinf_map_put(&m, keys[i], strlen(keys[i]), &seen[i]) == KINF_OK);
    }
    for (size_t i = 0; (sl = kinf_map_next(&m, &i)) != NULL;)
        (*(int *)sl->value)++;
    for (int i = 0; i < 100; i++)
        CHECK(seen[i] == 1);
    kinf_map_free(&m);
}

static void empty_key_and_binary_keys(void)
{
    kinf_map m;
    int a = 1, b = 2;
    kinf_map_init(&m);
    CHECK(kinf_map_get(&m, "", 0) == NULL);
    CHECK(kinf_map_put(&m, "", 0, &a) == KINF_OK);
    CHECK(kinf_map_put(&m, "x\0y", 3, &b) == KINF_OK);
    CHECK(kinf_map_get(&m, "", 0) == &a);
    CHECK(kinf_map_get(&m, "x\0y", 3) == &b);
    CHECK(kinf_map_get(&m, "x", 1) == NULL);
    kinf_map_free(&m);
}

static void *hash_of_a_key(void *out)
{
    *(uint32_t *)out = kinf_key_hash("default/web", 11);
    return NULL;
}

/* The first calls, from two threads at once, draw the process's seed: both get one hash. */
static void threads_agree_on_the_first_hash(void)
{
    pthread_t t[2];
    uint32_t h[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, hash_of_a_key, &h[i]) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(h[0] == h[1]);
    CHECK(kinf_key_hash("default/web", 11) == h[0]);
}

/* Records carry their key's hash, and a map finds a key whichever way its hash came. */
static void records_carry_the_hash_every_map_uses(void)
{
    const char json[] = "{}";
    kinf_meta meta = { { "default", 7 }, { "web", 3 }, { "", 0 }, { "5", 1 } };
    kinf_err err;
    kinf_object *obj = kinf_object_new(json, 2, &meta, &err);
    kinf_object *tomb = kinf_tombstone_new("kube-system/dns", 15, obj, &err);
    kinf_map m;
    int a = 1, b = 2;

    CHECK(obj != NULL && tomb != NULL);
    CHECK(obj->hash == kinf_key_hash("default/web", 11));
    CHECK(tomb->hash == kinf_key_hash("kube-system/dns", 15));
    kinf_map_init(&m);
    CHECK(kinf_map_put_h(&m, obj->key, obj->key_len, obj->hash, &a) == KINF_OK);
    CHECK(kinf_map_put(&m, "kube-system/dns", 15, &b) == KINF_OK);
    CHECK(kinf_map_get(&m, "default/web", 11) == &a);
    CHECK(kinf_map_get_h(&m, tomb->key, tomb->key_len, tomb->hash) == &b);
    CHECK(kinf_map_remove_h(&m, obj->key, obj->key_len, obj->hash) == &a);
    CHECK(kinf_map_get(&m, "default/web", 11) == NULL);
    CHECK(kinf_map_remove(&m, "kube-system/dns", 15) == &b);
    CHECK(m.count == 0);
    kinf_map_free(&m);
    kinf_object_unref(tomb);
    kinf_object_unref(obj);
}

TEST_MAIN(TEST(threads_agree_on_the_first_hash), TEST(records_carry_the_hash_every_map_uses),
          TEST(random_ops_match_reference), TEST(iteration_visits_each_entry_once),
          TEST(empty_key_and_binary_keys))
