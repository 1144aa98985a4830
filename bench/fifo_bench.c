/* fifo_bench.c - DeltaFIFO throughput from C. add + pop: one producer thread enqueues N
 * prebuilt records (distinct keys, then updates of the same keys), one consumer pops them.
 * replace: one list of N records replaces the FIFO's content (what the reflector does at the
 * end of a list, on the sync's critical path), into an empty FIFO (the first list) and again
 * while the first list's N entries are still queued (a relist before they were popped).
 * Build and run: make bench-core (or see bench/README.md). Prints objects/s. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "delta_fifo.h"
#include "informer.h"
#include "store.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct job {
    kinf_fifo *f;
    kinf_object **objs;
    size_t n;
};

static void *produce(void *arg)
{
    struct job *j = arg;
    for (size_t i = 0; i < j->n; i++) {
        if (kinf_fifo_add(j->f, j->objs[i]) != KINF_OK)
            abort(); /* a benchmark, not library code */
    }
    return NULL;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
    size_t keys = argc > 2 ? strtoul(argv[2], NULL, 10) : n;
    kinf_object **objs = malloc(n * sizeof(*objs));
    struct job j;
    pthread_t t;
    size_t popped = 0;
    double t0, dt;
    kinf_err err;

    for (size_t i = 0; i < n; i++) {
        char name[32], json[128];
        int len;
        snprintf(name, sizeof(name), "pod-%zu", i % keys);
        len = snprintf(json, sizeof(json), "{\"metadata\":{\"namespace\":\"default\",\"name\":\"%s\"}}", name);
        kinf_meta meta = {{"default", 7}, {name, strlen(name)}, {"", 0}, {"1", 1}};
        objs[i] = kinf_object_new(json, (size_t)len, &meta, &err);
    }
    j.f = kinf_fifo_new(NULL, 0, &err);
    j.objs = objs;
    j.n = n;
    t0 = now();
    pthread_create(&t, NULL, produce, &j);
    while (popped < n) {
        kinf_deltas d;
        if (kinf_fifo_pop(j.f, 10, NULL, NULL, &d, NULL) != KINF_OK)
            break;
        popped += d.n;
        kinf_deltas_clear(&d);
    }
    pthread_join(t, NULL);
    dt = now() - t0;
    printf("| C add+pop, %zu objects over %zu keys, 1 producer + 1 consumer | %.3f s | %.0f objects/s |\n",
           n, keys, dt, (double)n / dt);
    if (keys == n) {
        kinf_fifo *rf = kinf_fifo_new(NULL, 0, &err);
        if (rf == NULL)
            abort();
        t0 = now();
        if (kinf_fifo_replace(rf, objs, n, "1") != KINF_OK)
            abort();
        dt = now() - t0;
        printf("| C replace of %zu objects into an empty FIFO | %.3f s | %.0f objects/s |\n", n,
               dt, (double)n / dt);
        t0 = now();
        if (kinf_fifo_replace(rf, objs, n, "2") != KINF_OK)
            abort();
        dt = now() - t0;
        printf("| C replace of %zu objects, the same %zu keys still queued | %.3f s | %.0f objects/s |\n",
               n, n, dt, (double)n / dt);
        kinf_fifo_unref(rf);

        /* What an informer does with the first list: replace into its FIFO (known objects: its
         * store, EMIT_REPLACED), then pop every key into the store (namespace index). */
        {
            kinf_store *st = kinf_store_new(1, &err);
            kinf_fifo *inf = st ? kinf_fifo_new(st, KINF_FIFO_EMIT_REPLACED, &err) : NULL;
            kinf_informer_step step = {inf, st, NULL, NULL};
            kinf_notifications ns = {NULL, 0, 0};
            char msg[256];
            double t1;
            if (inf == NULL)
                abort();
            t0 = now();
            if (kinf_fifo_replace(inf, objs, n, "1") != KINF_OK)
                abort();
            t1 = now();
            for (size_t i = 0; i < n; i++) {
                if (kinf_informer_pop(&step, 0, &ns, msg, sizeof(msg)) != KINF_OK)
                    abort();
                kinf_notifications_clear(&ns);
            }
            dt = now() - t0;
            printf("| C informer's first list: replace %zu objects (%.3f s), then pop each into the store | %.3f s | %.0f objects/s |\n",
                   n, t1 - t0, dt, (double)n / dt);
            kinf_notifications_free(&ns);
            kinf_fifo_unref(inf);
            kinf_store_unref(st);
        }
    }
    for (size_t i = 0; i < n; i++)
        kinf_object_unref(objs[i]);
    free(objs);
    kinf_fifo_unref(j.f);
    return popped == n ? 0 : 1;
}
