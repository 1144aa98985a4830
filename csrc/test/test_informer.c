/* test_informer.c - applying deltas to the store (HandleDeltas), notifications and their
 * references, transforms, the wake-up fd, and a producer thread racing the consumer (TSan). */
#include <poll.h>
#include <pthread.h>
#include <string.h>

#include "ctest.h"
#include "informer.h"
#include "testobj.h"

typedef struct fixture {
    kinf_store *store;
    kinf_fifo *fifo;
    kinf_informer_step step;
    kinf_notifications notes;
} fixture;

static void setup(fixture *f)
{
    kinf_err err;
    memset(f, 0, sizeof(*f));
    f->store = kinf_store_new(1, &err);
    f->fifo = kinf_fifo_new(f->store, KINF_FIFO_EMIT_REPLACED, &err);
    f->step.fifo = f->fifo;
    f->step.store = f->store;
}

static void teardown(fixture *f)
{
    kinf_notifications_free(&f->notes);
    kinf_fifo_unref(f->fifo);
    kinf_store_unref(f->store);
}

static kinf_err pop(fixture *f)
{
    char msg[256];
    kinf_notifications_clear(&f->notes);
    return kinf_informer_pop(&f->step, 0, &f->notes, msg, sizeof(msg));
}

static void add_update_delete(void)
{
    fixture f;
    kinf_object *a1 = mkobj("ns", "a", "n1", "1"), *a2 = mkobj("ns", "a", "n2", "2");
    kinf_object *stored;
    setup(&f);

    CHECK(pop(&f) == KINF_ETIMEDOUT);
    CHECK(kinf_fifo_add(f.fifo, a1) == KINF_OK);
    CHECK(pop(&f) == KINF_OK);
    CHECK(f.notes.n == 1 && f.notes.v[0].kind == KINF_EVENT_ADD && f.notes.v[0].obj == a1);
    CHECK(f.notes.v[0].old == NULL && f.notes.v[0].is_initial == 0);

    /* Two deltas of one key, applied oldest first: update then delete. */
    CHECK(kinf_fifo_update(f.fifo, a2) == KINF_OK);
    CHECK(kinf_fifo_delete(f.fifo, a2) == KINF_OK);
    CHECK(pop(&f) == KINF_OK);
    CHECK(f.notes.n == 2);
    CHECK(f.notes.v[0].kind == KINF_EVENT_UPDATE && f.notes.v[0].old == a1 &&
          f.notes.v[0].obj == a2);
    CHECK(f.notes.v[1].kind == KINF_EVENT_DELETE && f.notes.v[1].obj == a2 &&
          f.notes.v[1].old == a2);
    stored = kinf_store_get(f.store, "ns/a", 4);
    CHECK(stored == NULL);

    /* The FIFO drops a delete of a key neither stored nor queued: nothing to notify. */
    CHECK(kinf_fifo_delete(f.fifo, a1) == KINF_OK);
    CHECK(pop(&f) == KINF_ETIMEDOUT);
    /* Added and Deleted queued together: both notified, in order. */
    CHECK(kinf_fifo_add(f.fifo, a1) == KINF_OK);
    CHECK(kinf_fifo_delete(f.fifo, a1) == KINF_OK);
    CHECK(pop(&f) == KINF_OK);
    CHECK(f.notes.n == 2 && f.notes.v[0].kind == KINF_EVENT_ADD);
    CHECK(f.notes.v[1].kind == KINF_EVENT_DELETE && f.notes.v[1].old == a1);
    CHECK(kinf_store_len(f.store) == 0);

    kinf_object_unref(a1);
    kinf_object_unref(a2);
    teardown(&f);
}

static void replace_is_initial_then_updates(void)
{
    fixture f;
    kinf_object *a = mkobj("ns", "a", "n1", "1"), *b = mkobj("ns", "b", "n1", "1");
    kinf_object *list[2] = {a, b};
    setup(&f);
    CHECK(kinf_fifo_replace(f.fifo, list, 2, "5") == KINF_OK);
    CHECK(!kinf_fifo_has_synced(f.fifo));
    CHECK(pop(&f) == KINF_OK);
    CHECK(f.notes.n == 1 && f.notes.v[0].kind == KINF_EVENT_ADD && f.notes.v[0].is_initial);
    CHECK(pop(&f) == KINF_OK);
    CHECK(f.notes.n == 1 && f.notes.v[0].is_initial);
    CHECK(kinf_fifo_has_synced(f.fifo));
    CHECK(kinf_store_len(f.store) == 2);
    /* A relist with b gone: a is Replaced (update with the same record), b deleted. */
    CHECK(kinf_fifo_replace(f.fifo, list, 1, "6") == KINF_OK);
    CHECK(pop(&f) == KINF_OK);
    CHECK(f.notes.n == 1 && f.notes.v[0].kind == KINF_EVENT_UPDATE && f.notes.v[0].old == a);
    CHECK(pop(&f) == KINF_OK);
    CHECK(f.notes.n == 1 && f.notes.v[0].kind == KINF_EVENT_DELETE);
    CHECK(kinf_object_is_tombstone(f.notes.v[0].obj));
    CHECK(f.notes.v[0].old == b);
    CHECK(kinf_store_len(f.store) == 1);
    kinf_object_unref(a);
    kinf_object_unref(b);
    teardown(&f);
}

/* Transform: replaces the node; one that changes the key is refused and reported. */
static kinf_err transform(void *ud, kinf_object *in, kinf_object **out, char *errbuf, size_t len)
{
    (void)ud;
    (void)errbuf;
    (void)len;
    if (strcmp(in->name, "rename") == 0)
        *out = mkobj(in->namespace_, "other", "x", in->resource_version);
    else
        *out = mkobj(in->namespace_, in->name, "transformed", in->resource_version);
    return *out ? KINF_OK : KINF_ENOMEM;
}

static void transforms(void)
{
    fixture f;
    kinf_object *a = mkobj("ns", "a", "n1", "1"), *r = mkobj("ns", "rename", "n1", "1");
    kinf_object *got;
    char msg[256];
    setup(&f);
    f.step.transform = transform;
    CHECK(kinf_fifo_add(f.fifo, a) == KINF_OK);
    CHECK(kinf_fifo_add(f.fifo, r) == KINF_OK);
    CHECK(pop(&f) == KINF_OK);
    got = kinf_store_get(f.store, "ns/a", 4);
    CHECK(got != NULL && got != a);
    if (got != NULL) {
        kinf_str node = node_of(got);
        CHECK(node.len == 11 && memcmp(node.ptr, "transformed", 11) == 0);
    }
    kinf_object_unref(got);
    kinf_notifications_clear(&f.notes);
    CHECK(kinf_informer_pop(&f.step, 0, &f.notes, msg, sizeof(msg)) == KINF_EINVAL);
    CHECK(strstr(msg, "same key") != NULL);
    CHECK(f.notes.n == 0);
    CHECK(kinf_store_len(f.store) == 1);
    kinf_object_unref(a);
    kinf_object_unref(r);
    teardown(&f);
}

static int readable(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

static void wakeup(void)
{
    fixture f;
    kinf_err err;
    kinf_wakeup *w = kinf_wakeup_new(&err);
    kinf_object *a = mkobj("ns", "a", "n1", "1");
    setup(&f);
    CHECK(w != NULL);
    kinf_fifo_set_notify(f.fifo, kinf_wakeup_notify, w);
    CHECK(!readable(kinf_wakeup_fd(w)));
    CHECK(kinf_fifo_add(f.fifo, a) == KINF_OK);
    CHECK(readable(kinf_wakeup_fd(w)));
    kinf_wakeup_clear(w);
    CHECK(!readable(kinf_wakeup_fd(w)));
    kinf_wakeup_signal(w);
    kinf_wakeup_signal(w);
    CHECK(readable(kinf_wakeup_fd(w)));
    kinf_wakeup_clear(w);
    CHECK(!readable(kinf_wakeup_fd(w)));
    kinf_fifo_close(f.fifo);
    CHECK(readable(kinf_wakeup_fd(w)));
    kinf_fifo_set_notify(f.fifo, NULL, NULL);
    kinf_wakeup_free(w);
    kinf_object_unref(a);
    teardown(&f);
}

/* A producer thread adds, updates and deletes while this thread pops; in the end the store
 * holds exactly what the producer left, and adds - deletes == objects stored. */
typedef struct producer {
    kinf_fifo *fifo;
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    char name[32];
    for (int i = 0; i < 2000; i++) {
        kinf_object *o;
        snprintf(name, sizeof(name), "p%d", i % 300);
        o = mkobj("ns", name, "n", "1");
        if (i % 7 == 6)
            kinf_fifo_delete(p->fifo, o);
        else
            kinf_fifo_add(p->fifo, o);
        kinf_object_unref(o);
    }
    kinf_fifo_close(p->fifo);
    return NULL;
}

static void producer_races_consumer(void)
{
    fixture f;
    producer p;
    pthread_t t;
    long live = 0;
    char msg[256];
    setup(&f);
    p.fifo = f.fifo;
    CHECK(pthread_create(&t, NULL, produce, &p) == 0);
    for (;;) {
        kinf_err err;
        kinf_notifications_clear(&f.notes);
        err = kinf_informer_pop(&f.step, 1.0, &f.notes, msg, sizeof(msg));
        if (err == KINF_ECLOSED)
            break;
        CHECK(err == KINF_OK);
        for (size_t i = 0; i < f.notes.n; i++) {
            if (f.notes.v[i].kind == KINF_EVENT_ADD)
                live++;
            else if (f.notes.v[i].kind == KINF_EVENT_DELETE && f.notes.v[i].old != NULL)
                live--;
        }
    }
    pthread_join(t, NULL);
    CHECK(live == (long)kinf_store_len(f.store));
    teardown(&f);
}

TEST_MAIN(TEST(add_update_delete), TEST(replace_is_initial_then_updates), TEST(transforms),
          TEST(wakeup), TEST(producer_races_consumer))
