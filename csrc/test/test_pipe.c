/* test_pipe.c - the bounded byte queue between the I/O thread and the scanner thread: order per
 * target, no cross-target merging, flush / cancel semantics, the memory bound, and free with
 * and without a started thread. Run under ASan+UBSan and TSan like every C test. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "ctest.h"
#include "pipe.h"

#define BLOCK 4096

typedef struct sink {
    unsigned char *buf; /* consumer thread; the test reads it after flush */
    size_t len, cap;
    atomic_size_t calls;
    int mixed;          /* a call carried bytes of another target */
    atomic_int slow;    /* consumer sleeps per call (to fill the queue) */
    atomic_int busy;    /* the consumer is inside fn for this sink */
} sink;

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void consume(void *target, const char *buf, size_t len)
{
    sink *k = target;
    atomic_store(&k->busy, 1);
    if (atomic_load(&k->slow))
        sleep_ms(atomic_load(&k->slow));
    for (size_t i = 0; i < len; i++) {
        /* Each sink's writer writes bytes tagged with the sink's parity in the top bit. */
        if (((unsigned char)buf[i] >> 7) != (k->cap & 1))
            k->mixed = 1;
    }
    if (k->len + len <= k->cap - 1) {
        memcpy(k->buf + k->len, buf, len);
        k->len += len;
    }
    atomic_fetch_add(&k->calls, 1);
    atomic_store(&k->busy, 0);
}

static void sink_init(sink *k, size_t cap)
{
    memset(k, 0, sizeof(*k));
    k->buf = malloc(cap);
    k->cap = cap;
}

/* Bytes i of target t: a counter in the low 7 bits, t's parity in the top bit. */
static unsigned char byte_of(const sink *k, size_t i)
{
    return (unsigned char)((i * 7 + 3) % 128) | (unsigned char)((k->cap & 1) << 7);
}

static void order_kept_across_targets(void)
{
    kinf_err err;
    kinf_pipe *p = kinf_pipe_new(BLOCK, 4, &err);
    sink a, b;
    size_t wa = 0, wb = 0;
    uint64_t rng = 7;
    unsigned char chunk[3 * BLOCK];

    CHECK(p != NULL && err == KINF_OK);
    sink_init(&a, 1000000); /* even: top bit 0 */
    sink_init(&b, 1000001); /* odd: top bit 1 */
    while (wa < 400000 || wb < 400000) {
        sink *k;
        size_t *w, n;
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        k = (rng >> 40) & 1 ? &a : &b;
        w = k == &a ? &wa : &wb;
        n = (size_t)(rng >> 20) % sizeof(chunk) + 1;
        if (*w + n > 400000)
            n = 400000 - *w;
        if (n == 0)
            continue;
        for (size_t i = 0; i < n; i++)
            chunk[i] = byte_of(k, *w + i);
        CHECK(kinf_pipe_write(p, consume, k, (const char *)chunk, n) == KINF_OK);
        *w += n;
    }
    kinf_pipe_flush(p, &a);
    CHECK(a.len == 400000);
    kinf_pipe_flush(p, &b);
    CHECK(b.len == 400000);
    CHECK(!a.mixed && !b.mixed);
    for (size_t i = 0; i < a.len; i++)
        if (a.buf[i] != byte_of(&a, i)) {
            CHECK(a.buf[i] == byte_of(&a, i));
            break;
        }
    for (size_t i = 0; i < b.len; i++)
        if (b.buf[i] != byte_of(&b, i)) {
            CHECK(b.buf[i] == byte_of(&b, i));
            break;
        }
    kinf_pipe_free(p);
    free(a.buf);
    free(b.buf);
}

/* Small writes while the consumer is busy are merged into one block (fewer calls). */
static void small_writes_merge(void)
{
    kinf_err err;
    kinf_pipe *p = kinf_pipe_new(BLOCK, 2, &err);
    sink a;
    char c = 1;
    sink_init(&a, 100000);
    atomic_store(&a.slow, 20);
    for (int i = 0; i < 2000; i++)
        CHECK(kinf_pipe_write(p, consume, &a, &c, 1) == KINF_OK);
    kinf_pipe_flush(p, &a);
    CHECK(a.len == 2000);
    CHECK(atomic_load(&a.calls) < 100);
    kinf_pipe_free(p);
    free(a.buf);
}

/* Cancel drops what is queued and waits for the running call; flush of an idle target and of a
 * target never written to returns at once. */
static void cancel_and_flush(void)
{
    kinf_err err;
    kinf_pipe *p = kinf_pipe_new(BLOCK, 3, &err);
    sink a, idle;
    static char big[BLOCK * 3];
    sink_init(&a, sizeof(big) * 2 + 1);
    sink_init(&idle, 10);
    kinf_pipe_flush(p, &idle); /* nothing started yet */
    atomic_store(&a.slow, 50);
    CHECK(kinf_pipe_write(p, consume, &a, big, sizeof(big)) == KINF_OK); /* 3 blocks */
    for (int i = 0; i < 2000 && !atomic_load(&a.busy); i++)
        sleep_ms(1); /* until the consumer is inside the first block */
    kinf_pipe_cancel(p, &a);
    CHECK(atomic_load(&a.busy) == 0);
    CHECK(atomic_load(&a.calls) >= 1 && atomic_load(&a.calls) < 3);
    {
        size_t before = atomic_load(&a.calls);
        kinf_pipe_flush(p, &a);
        kinf_pipe_flush(p, &idle);
        CHECK(atomic_load(&a.calls) == before);
    }
    /* The pipe is usable after a cancel. */
    atomic_store(&a.slow, 0);
    a.len = 0;
    CHECK(kinf_pipe_write(p, consume, &a, big, 100) == KINF_OK);
    kinf_pipe_flush(p, &a);
    CHECK(a.len == 100);
    kinf_pipe_free(p);
    free(a.buf);
    free(idle.buf);
}

/* A writer that outruns the consumer waits for blocks instead of growing the queue; free with
 * bytes still queued drops them. */
static void bounded_and_free_with_backlog(void)
{
    kinf_err err;
    kinf_pipe *p = kinf_pipe_new(BLOCK, 2, &err);
    sink a;
    static char big[BLOCK * 8];
    sink_init(&a, sizeof(big) + 1);
    atomic_store(&a.slow, 5);
    CHECK(kinf_pipe_write(p, consume, &a, big, sizeof(big)) == KINF_OK);
    /* 8 blocks went through a pipe of 2: at least 6 were consumed before write returned. */
    CHECK(atomic_load(&a.calls) >= 6);
    kinf_pipe_free(p); /* up to two blocks are dropped, the consumer is joined */
    free(a.buf);
}

static void bad_arguments_and_unstarted_free(void)
{
    kinf_err err = KINF_OK;
    CHECK(kinf_pipe_new(100, 4, &err) == NULL && err == KINF_EINVAL);
    CHECK(kinf_pipe_new(BLOCK, 1, &err) == NULL && err == KINF_EINVAL);
    kinf_pipe_free(kinf_pipe_new(BLOCK, 2, &err)); /* no thread was started */
    kinf_pipe_free(NULL);
}

TEST_MAIN(TEST(order_kept_across_targets), TEST(small_writes_merge), TEST(cancel_and_flush),
          TEST(bounded_and_free_with_backlog), TEST(bad_arguments_and_unstarted_free))
