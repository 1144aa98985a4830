/* test_map.c - the hash map against a trivially correct reference (an array), with removals
 * that exercise backward-shift deletion. */
#include <stdint.h>
#include <stdio.h>

#include "ctest.h"
#include "map.h"

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

TEST_MAIN(TEST(random_ops_match_reference), TEST(iteration_visits_each_entry_once),
          TEST(empty_key_and_binary_keys))
