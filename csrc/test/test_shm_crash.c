/* test_shm_crash.c - a writer killed at any step of a write, and its successor's recovery
 * (kinf_shm_store_recover): a forked writer puts, updates and deletes against a model and
 * kills itself at a random step (the kinf_shm_step seam: after an allocation, before a free,
 * after a publication); the parent takes over as a successor would (claim, recover, attach,
 * become_writer, put the model's every object as a relist would, retain) and checks that the
 * items equal the model, that every bucket holds exactly the keys whose values give it (sorted,
 * each the current record) and that no bucket version comes back with other content, that a
 * reader that polled before the kill and after ends, applying its events, with exactly the
 * model, and that the segment's use stays bounded over the takeovers. KINF_CRASH_TRIALS sets
 * the number of trials (default 150; `make soak-crash` runs many more). */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"
#include "shm_store.h"

#define KEYS 40
#define LABELS 5
#define OPS 24
#define NIX 2

static const char *const INDEXES[NIX] = {"namespace", "label"};

typedef struct model {
    int present[KEYS];
    unsigned ver[KEYS], label[KEYS], pad[KEYS];
} model;

static unsigned rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

/* The next op of a trial, applied to m: a delete (one in five) or a put of a new version;
 * returns its key. */
static unsigned op(model *m, unsigned *s, unsigned *version)
{
    unsigned k = rnd(s) % KEYS, kind = rnd(s) % 5;
    if (kind == 0) {
        m->present[k] = 0;
        return k;
    }
    m->present[k] = 1;
    m->ver[k] = ++*version;
    m->label[k] = rnd(s) % LABELS;
    m->pad[k] = rnd(s) % 600;
    return k;
}

static void keyname(unsigned k, char *ns, char *name)
{
    sprintf(ns, "ns%u", k % 3);
    sprintf(name, "o%u", k);
}

/* Key k's JSON in m (buf of 1024 bytes); its length. */
static int json_of(const model *m, unsigned k, char *buf)
{
    char ns[8], name[8];
    keyname(k, ns, name);
    return snprintf(buf, 1024,
                    "{\"metadata\":{\"namespace\":\"%s\",\"name\":\"%s\",\"resourceVersion\":"
                    "\"%u\"},\"label\":\"L%u\",\"pad\":\"%*s\"}",
                    ns, name, m->ver[k], m->label[k], (int)m->pad[k], "");
}

static kinf_err put_key(kinf_shm_store *st, const model *m, unsigned k)
{
    char json[1024], ns[8], name[8], rv[16], l1[8], l2[8];
    kinf_err err;
    int n = json_of(m, k, json);
    kinf_object *o;
    kinf_str nsv, lv[2];
    kinf_values *vals[NIX];

    keyname(k, ns, name);
    sprintf(rv, "%u", m->ver[k]);
    {
        kinf_meta meta = {{ns, strlen(ns)}, {name, strlen(name)}, {"", 0}, {rv, strlen(rv)}};
        o = kinf_object_new(json, (size_t)n, &meta, &err);
    }
    if (o == NULL)
        return err;
    /* Two label values for every other version: a key moves between several buckets. */
    sprintf(l1, "L%u", m->label[k]);
    sprintf(l2, "M%u", (m->label[k] + 1) % LABELS);
    nsv = (kinf_str){ns, strlen(ns)};
    lv[0] = (kinf_str){l1, strlen(l1)};
    lv[1] = (kinf_str){l2, strlen(l2)};
    vals[0] = kinf_values_new(&nsv, 1);
    vals[1] = kinf_values_new(lv, m->ver[k] % 2 ? 2 : 1);
    err = kinf_shm_store_put(st, o, (const kinf_values *const *)vals);
    kinf_values_free(vals[0]);
    kinf_values_free(vals[1]);
    kinf_object_unref(o);
    return err;
}

static int key_index(const char *key, size_t len)
{
    const char *slash = memchr(key, '/', len);
    return slash && slash[1] == 'o' ? atoi(slash + 2) : -1;
}

/* ---- the child: a writer that dies at step `die_at` ---- */

typedef struct ctl {
    atomic_uint started; /* ops begun by the writer: the server's state includes them */
} ctl;

static long steps, die_at;

static void step(void)
{
    if (++steps == die_at)
        raise(SIGKILL);
}

static void writer(kinf_shm *shm, ctl *c, model m, unsigned seed, unsigned version)
{
    kinf_err err;
    kinf_shm_store *st;
    if (kinf_shm_claim_writer(shm, getpid()) != KINF_OK)
        _exit(2);
    if ((st = kinf_shm_store_attach(shm, 0, &err)) == NULL ||
        kinf_shm_store_become_writer(st) != KINF_OK)
        _exit(3);
    kinf_shm_step = step;
    for (unsigned i = 0; i < OPS; i++) {
        unsigned k = op(&m, &seed, &version);
        atomic_store(&c->started, i + 1);
        if (m.present[k]) {
            (void)put_key(st, &m, k);
        } else {
            char key[16], ns[8], name[8];
            keyname(k, ns, name);
            sprintf(key, "%s/%s", ns, name);
            (void)kinf_shm_store_delete(st, key, strlen(key));
        }
        if (i % 4 == 3)
            kinf_shm_store_flush(st);
    }
    _exit(0); /* never released: the parent takes over as from a dead writer */
}

/* ---- a reader that follows the log ---- */

typedef struct reader {
    int slot;
    uint64_t cursor;
    kinf_shm_off held[KEYS]; /* the record the reader's "handlers" got last, held */
    int anomalies;           /* an event that does not follow from what the reader had */
} reader;

static void take(kinf_shm_store *st, reader *r, int k, kinf_shm_off rec)
{
    if (r->held[k] == rec)
        return;
    if (rec != 0)
        (void)kinf_shm_store_hold(st, r->slot, rec);
    if (r->held[k] != 0)
        kinf_shm_store_release(st, r->slot, r->held[k]);
    r->held[k] = rec;
}

/* Starts over from the content (inside a read section). */
static void snapshot(kinf_shm_store *st, reader *r)
{
    kinf_shm *shm = kinf_shm_store_segment(st);
    int seen[KEYS] = {0};
    kinf_shm_map_iter it;
    kinf_shm_off off;
    r->cursor = kinf_shm_log_head(shm, kinf_shm_store_log(st));
    kinf_shm_store_iter(st, -1, &it);
    while ((off = kinf_shm_map_next(shm, &it)) != 0) {
        kinf_shm_view v;
        int k;
        kinf_shm_store_view(st, off, &v);
        if ((k = key_index(v.key, v.key_len)) >= 0) {
            take(st, r, k, off);
            seen[k] = 1;
        }
    }
    for (int k = 0; k < KEYS; k++) {
        if (!seen[k])
            take(st, r, k, 0);
    }
}

static void poll(kinf_shm_store *st, reader *r)
{
    kinf_shm *shm = kinf_shm_store_segment(st);
    kinf_shm_off log = kinf_shm_store_log(st);
    for (;;) {
        kinf_shm_event ev;
        kinf_shm_log_read_result res;
        kinf_shm_read_begin(shm, r->slot);
        res = kinf_shm_log_read(shm, log, r->cursor, &ev);
        if (res == KINF_SHM_LOG_NONE) {
            kinf_shm_read_end(shm, r->slot);
            return;
        }
        if (res == KINF_SHM_LOG_BEHIND || ev.type == KINF_SHM_RESYNCED) {
            snapshot(st, r);
        } else {
            kinf_shm_view v;
            int k;
            r->cursor++;
            kinf_shm_store_view(st, ev.obj, &v);
            k = key_index(v.key, v.key_len);
            if (k < 0) {
                r->anomalies++;
            } else if (ev.type == KINF_SHM_DELETED) {
                r->anomalies += r->held[k] != ev.obj;
                take(st, r, k, 0);
            } else {
                r->anomalies += ev.type == KINF_SHM_ADDED ? r->held[k] != 0 : r->held[k] != ev.old;
                take(st, r, k, ev.obj);
            }
        }
        kinf_shm_read_end(shm, r->slot);
    }
}

/* ---- checks ---- */

/* Whether the store's items are exactly m. */
static int items_match(kinf_shm_store *st, const model *m)
{
    size_t n = 0;
    int bad = 0;
    for (unsigned k = 0; k < KEYS; k++) {
        char key[16], ns[8], name[8], json[1024];
        kinf_shm_view v;
        int len = json_of(m, k, json);
        keyname(k, ns, name);
        sprintf(key, "%s/%s", ns, name);
        if (kinf_shm_store_get(st, key, strlen(key), &v) != m->present[k])
            bad++;
        else if (m->present[k] && (v.json_len != (size_t)len || memcmp(v.json, json, len) != 0))
            bad++;
        n += m->present[k];
    }
    return bad == 0 && kinf_shm_store_len(st) == n;
}

static int reader_matches(kinf_shm_store *st, const reader *r, const model *m)
{
    for (unsigned k = 0; k < KEYS; k++) {
        char json[1024];
        kinf_shm_view v;
        int len;
        if ((r->held[k] != 0) != m->present[k])
            return 0;
        if (!m->present[k])
            continue;
        len = json_of(m, k, json);
        kinf_shm_store_view(st, r->held[k], &v); /* held: valid outside a read section */
        if (v.json_len != (size_t)len || memcmp(v.json, json, len) != 0)
            return 0;
    }
    return r->anomalies == 0;
}

/* Bucket versions seen (with their index and value), with a digest of what the bucket held:
 * a version must never come back with other content for the value. */
#define VERSIONS 65536
typedef struct versions {
    uint64_t version[VERSIONS], digest[VERSIONS];
    size_t n;
    int reused;
} versions;

static void saw_version(versions *vs, uint64_t version, uint64_t digest)
{
    for (size_t i = 0; i < vs->n; i++) {
        if (vs->version[i] == version) {
            vs->reused += vs->digest[i] != digest;
            return;
        }
    }
    if (vs->n < VERSIONS) {
        vs->version[vs->n] = version;
        vs->digest[vs->n++] = digest;
    }
}

static int key_order(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static uint64_t digest_add(uint64_t d, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d = (d ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return d;
}

/* Every bucket of every index: sorted, each record the key's current one and carrying the
 * value, and (with m) exactly the keys m gives the value. Versions go to vs. Returns problems. */
static int check_buckets(kinf_shm_store *st, const model *m, versions *vs)
{
    kinf_shm *shm = kinf_shm_store_segment(st);
    int bad = 0;
    for (int ix = 0; ix < NIX; ix++) {
        kinf_shm_map_iter it;
        kinf_shm_off boff;
        size_t pairs = 0, expected = 0;
        kinf_shm_store_iter(st, ix, &it);
        while ((boff = kinf_shm_map_next(shm, &it)) != 0) {
            kinf_str value = kinf_shm_store_bucket_value(st, boff);
            kinf_shm_bucket b;
            kinf_shm_off rec;
            kinf_shm_view prev = {0};
            uint64_t d = 14695981039346656037ull, which;
            size_t n = 0;
            which = digest_add(d, &ix, sizeof(ix));
            which = digest_add(which, value.ptr, value.len);
            kinf_shm_store_by_index(st, ix, value.ptr, value.len, &b);
            while ((rec = kinf_shm_bucket_next(&b)) != 0) {
                kinf_shm_view v, cur;
                kinf_str vals[4];
                size_t nv = kinf_shm_store_values(st, rec, ix, vals, 4), has = 0;
                kinf_shm_store_view(st, rec, &v);
                d = digest_add(d, &rec, sizeof(rec));
                d = digest_add(d, v.json, v.json_len);
                if (m != NULL && (!kinf_shm_store_get(st, v.key, v.key_len, &cur) || cur.off != rec))
                    bad++; /* a key the store no longer has, or an old version of it */
                for (size_t i = 0; i < nv && i < 4; i++)
                    has |= vals[i].len == value.len && memcmp(vals[i].ptr, value.ptr, value.len) == 0;
                bad += !has;
                bad += n > 0 && key_order(prev.key, prev.key_len, v.key, v.key_len) >= 0;
                prev = v;
                n++;
            }
            bad += n != b.n || n == 0;
            pairs += n;
            saw_version(vs, digest_add(which, &b.version, sizeof(b.version)), d);
        }
        for (unsigned k = 0; m != NULL && k < KEYS; k++)
            expected += m->present[k] ? (ix == 0 ? 1 : m->ver[k] % 2 ? 2 : 1) : 0;
        bad += m != NULL && pairs != expected;
    }
    return bad;
}

static int in_model(void *ud, const char *key, size_t len)
{
    const model *m = ud;
    int k = key_index(key, len);
    return k >= 0 && k < KEYS && m->present[k];
}

static long trials(void)
{
    const char *s = getenv("KINF_CRASH_TRIALS");
    return s && atol(s) > 0 ? atol(s) : 150;
}

static void a_writer_killed_at_any_step_is_recovered_exactly(void)
{
    kinf_err err;
    kinf_shm *shm = kinf_shm_create(8 << 20, &err);
    kinf_shm_store *st = kinf_shm_store_create(shm, 0, INDEXES, NIX, 64, &err);
    ctl *c = mmap(NULL, sizeof(ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    versions *vs = calloc(1, sizeof(*vs));
    reader r = {0};
    model m = {0};
    unsigned seed = 12345, version = 0;
    size_t base_used = 0, max_used = 0;
    long n = trials(), bad_items = 0, bad_buckets = 0, bad_reader = 0, swept = 0;

    CHECK(shm != NULL && st != NULL && c != MAP_FAILED && vs != NULL);
    kinf_shm_store_close(st);
    r.slot = kinf_shm_reader_open(shm, getpid());
    for (long t = 0; t < n; t++) {
        model next = m;
        unsigned s = seed, v = version;
        long target = 1 + (long)(rnd(&seed) % 900);
        kinf_shm_recovery rec;
        kinf_shm_stats stats;
        pid_t child;
        int status;

        atomic_store(&c->started, 0);
        child = fork();
        if (child == 0) {
            die_at = target;
            writer(shm, c, m, s, v);
        }
        CHECK(waitpid(child, &status, 0) == child);
        CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
        /* The server's state: every op the writer began. */
        unsigned last = KEYS;
        for (unsigned i = 0; i < atomic_load(&c->started); i++)
            last = op(&next, &s, &v);
        /* The object being written when the writer died is often gone by the relist. */
        if (last < KEYS && rnd(&seed) % 2)
            next.present[last] = 0;
        /* And what changed while no writer watched: the relist brings it. */
        for (unsigned i = rnd(&seed) % 3; i > 0; i--)
            (void)op(&next, &seed, &v);
        /* A reader between the crash and the takeover sees the dead writer's last state. */
        {
            kinf_shm_store *rd = kinf_shm_store_attach(shm, 0, &err);
            CHECK(rd != NULL);
            poll(rd, &r);
            (void)check_buckets(rd, NULL, vs);
            kinf_shm_store_close(rd);
        }
        /* The successor. */
        CHECK(kinf_shm_claim_writer(shm, getpid()) == KINF_EEXIST);
        CHECK(kinf_shm_store_recover(shm, &rec) == KINF_OK && rec.stores == 1);
        swept += rec.swept_blocks;
        st = kinf_shm_store_attach(shm, 0, &err);
        CHECK(st != NULL && kinf_shm_store_become_writer(st) == KINF_OK);
        for (unsigned k = 0; k < KEYS; k++) {
            if (next.present[k])
                CHECK(put_key(st, &next, k) == KINF_OK);
        }
        CHECK(kinf_shm_store_retain(st, in_model, &next) == KINF_OK);
        kinf_shm_store_flush(st);
        m = next;
        version = v;
        bad_items += !items_match(st, &m);
        bad_buckets += check_buckets(st, &m, vs) != 0;
        poll(st, &r);
        bad_reader += !reader_matches(st, &r, &m);
        r.anomalies = 0;
        kinf_shm_store_flush(st);
        kinf_shm_store_close(st);
        kinf_shm_release_writer(shm, getpid());
        kinf_shm_stats_get(shm, &stats);
        if (t == 10)
            base_used = stats.used;
        if (t > 10 && stats.used > max_used)
            max_used = stats.used;
    }
    printf("  %ld trials: items wrong %ld, buckets wrong %ld, reader wrong %ld, versions reused "
           "%d; swept %ld blocks; used %zu after 10, at most %zu after\n",
           n, bad_items, bad_buckets, bad_reader, vs->reused, swept, base_used, max_used);
    CHECK(bad_items == 0);
    CHECK(bad_buckets == 0);
    CHECK(bad_reader == 0);
    CHECK(vs->reused == 0);
    /* The live data varies with the model: at most twice the use early on, not a leak per
     * takeover. */
    CHECK(max_used <= 2 * base_used + (64u << 10));
    st = kinf_shm_store_attach(shm, 0, &err);
    for (int k = 0; st != NULL && k < KEYS; k++)
        take(st, &r, k, 0);
    kinf_shm_store_close(st);
    kinf_shm_reader_close(shm, r.slot);
    munmap(c, sizeof(ctl));
    free(vs);
    kinf_shm_close(shm);
}

TEST_MAIN(TEST(a_writer_killed_at_any_step_is_recovered_exactly))
