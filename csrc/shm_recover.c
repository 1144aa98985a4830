/*
 * shm_recover.c - a successor writer's recovery of the shared stores a dead writer left
 * (kinf_shm_store_recover, contract in shm_store.h).
 *
 * Why each step:
 * - A write is several publications (buckets, the record, the log entry, the write count), so
 *   a writer killed between two of them leaves records no event announced and buckets that
 *   disagree with the items map. The items map is taken as the truth (the successor's relist
 *   corrects it key by key, with events): every bucket is checked against it and rebuilt where
 *   it differs, and a RESYNCED event sends every reader back to the content.
 * - The old events are dropped with it (the tail moves past them): they name records only the
 *   dead writer's deferred list knew about, and nobody needs them once readers start over.
 * - What the dead writer held in process memory (its retire and deferred lists, what it had
 *   allocated and not published) is found by marking everything the stores reach and sweeping
 *   the heap (shm.h). The sweep runs twice: once before the bucket repair (to give it room), and
 *   once after (the buckets it replaced, their chunks and any record only they still named).
 * - The write count moves, so that readers drop what they cached for the last count.
 */
#include "shm_store_impl.h"

#include <stdlib.h>

/* The marking returns 1 when something it walked did not check (shm.h, Corruption): the sweep
 * is then skipped, since a block only the corrupt part named could still be in use; what the
 * dead writer left stays allocated rather than anything live being freed. */
static int mark_map(kinf_shm *shm, _Atomic uint64_t *root, kinf_shm_marks *m,
                    int (*each)(const kinf_shm_store *st, kinf_shm_off off, kinf_shm_marks *m),
                    const kinf_shm_store *st)
{
    kinf_shm_map_iter it;
    kinf_shm_off off;
    int bad = 0;
    kinf_shm_map_iter_init(shm, root, &it);
    (void)kinf_shm_mark(m, it.table);
    while ((off = kinf_shm_map_next(shm, &it)) != 0) {
        (void)kinf_shm_mark(m, off);
        if (each != NULL)
            bad |= each(st, off, m);
    }
    return bad | it.corrupt;
}

static int mark_bucket(const kinf_shm_store *st, kinf_shm_off off, kinf_shm_marks *m)
{
    const shm_bucket *b = bucket_checked(st, off);
    if (b == NULL)
        return 1;
    for (uint64_t i = 0; i < b->nchunks; i++) {
        uint64_t n;
        const shm_chunk *c = chunk_checked(st, b->chunks[i], &n);
        if (c == NULL)
            return 1;
        (void)kinf_shm_mark(m, b->chunks[i]);
        for (uint64_t j = 0; j < n; j++)
            (void)kinf_shm_mark(m, c->recs[j]); /* an orphan stays until its bucket goes */
    }
    return 0;
}

/* Everything st reaches: its header, log, maps, records, buckets, chunks, and what the
 * readable events name. 1: something did not check. */
static int mark_store(kinf_shm_store *st, kinf_shm_marks *m)
{
    shm_store_hdr *h = H(st);
    kinf_shm_off log = st->log;
    int bad = kinf_shm_log_cap(st->shm, log) == 0;
    uint64_t head = kinf_shm_log_head(st->shm, log), cap = kinf_shm_log_cap(st->shm, log);
    uint64_t from = kinf_shm_log_tail(st->shm, log);
    (void)kinf_shm_mark(m, st->hdr);
    (void)kinf_shm_mark(m, log);
    bad |= mark_map(st->shm, &h->items, m, NULL, st);
    for (uint64_t ix = 0; ix < st->nindexes; ix++)
        bad |= mark_map(st->shm, &h->ix[ix].buckets, m, mark_bucket, st);
    if (head > cap && head - cap > from)
        from = head - cap;
    for (uint64_t seq = from; seq < head && !bad; seq++) { /* at most cap events */
        kinf_shm_event ev;
        kinf_shm_log_read_result r = kinf_shm_log_read(st->shm, log, seq, &ev);
        if (r == KINF_SHM_LOG_EVENT) {
            (void)kinf_shm_mark(m, ev.obj);
            (void)kinf_shm_mark(m, ev.old);
        }
        bad |= r == KINF_SHM_LOG_CORRUPT;
    }
    return bad;
}

static kinf_err sweep(kinf_shm *shm, kinf_shm_store **sts, size_t n, kinf_shm_recovery *out)
{
    kinf_shm_marks *m = kinf_shm_marks_new(shm);
    size_t blocks, bytes;
    kinf_err e;
    int bad = 0;
    if (m == NULL)
        return KINF_ENOMEM;
    for (size_t i = 0; i < n; i++)
        bad |= mark_store(sts[i], m);
    if (bad) {
        kinf_shm_marks_free(m);
        return KINF_ECORRUPT;
    }
    e = kinf_shm_sweep(shm, m, &blocks, &bytes);
    kinf_shm_marks_free(m);
    out->swept_blocks += blocks;
    out->swept_bytes += bytes;
    (void)kinf_shm_reclaim(shm);
    return e;
}

/* ---- index repair ---- */

typedef struct pair {
    const char *v, *k;
    size_t vlen, klen;
    kinf_shm_off rec;
} pair;

static int by_value(const pair *a, const pair *b)
{
    return key_cmp(a->v, a->vlen, b->v, b->vlen);
}

static int by_value_key(const void *x, const void *y)
{
    const pair *a = x, *b = y;
    int c = by_value(a, b);
    return c ? c : key_cmp(a->k, a->klen, b->k, b->klen);
}

static int value_only(const void *x, const void *y)
{
    return by_value(x, y);
}

/* Whether bucket off holds exactly recs[0..n). */
static int bucket_is(const kinf_shm_store *st, kinf_shm_off off, const pair *p, size_t n)
{
    kinf_shm_bucket b;
    const shm_bucket *bk;
    size_t i = 0;
    kinf_shm_off r;
    if (off == 0 || (bk = bucket_checked(st, off)) == NULL || bk->n != n)
        return 0; /* a bucket that does not check is rebuilt */
    memset(&b, 0, sizeof(b));
    b.st = st;
    b.chunks = bk->chunks;
    b.nchunks = bk->nchunks;
    b.n = bk->n;
    while ((r = kinf_shm_bucket_next(&b)) != 0) {
        if (i >= n || r != p[i].rec)
            return 0;
        i++;
    }
    return i == n && !b.corrupt;
}

/* Makes index ix's buckets what the items map's records give. The buckets replaced are not
 * retired here: the sweep that follows finds them. */
static kinf_err repair_index(kinf_shm_store *st, int ix, size_t *fixed)
{
    shm_store_hdr *h = H(st);
    _Atomic uint64_t *root = &h->ix[ix].buckets;
    size_t n = 0, cap = 0, maxgroup = 0;
    pair *ps = NULL;
    kinf_shm_off off, *recs = NULL;
    kinf_shm_map_iter it;
    kinf_err e = KINF_OK;

    kinf_shm_map_iter_init(st->shm, &h->items, &it);
    while ((off = kinf_shm_map_next(st->shm, &it)) != 0) {
        kinf_str vals[64];
        const shm_record *r = REC(st, off);
        size_t nv = kinf_shm_store_values(st, off, ix, vals, 64);
        if (nv == KINF_SHM_STORE_CORRUPT) {
            e = KINF_ECORRUPT;
            goto out;
        }
        for (size_t i = 0; i < nv && i < 64; i++) {
            int dup = 0;
            for (size_t j = 0; j < i && !dup; j++)
                dup = vals[j].len == vals[i].len && memcmp(vals[j].ptr, vals[i].ptr, vals[i].len) == 0;
            if (dup)
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 256;
                pair *grown = realloc(ps, ncap * sizeof(*grown));
                if (grown == NULL) {
                    e = KINF_ENOMEM;
                    goto out;
                }
                ps = grown;
                cap = ncap;
            }
            ps[n++] = (pair){vals[i].ptr, rec_key(r), vals[i].len, r->h.key_len, off};
        }
    }
    if (it.corrupt) {
        e = KINF_ECORRUPT;
        goto out;
    }
    if (n > 0)
        qsort(ps, n, sizeof(*ps), by_value_key);
    /* Values no record has any more. */
    kinf_shm_map_iter_init(st->shm, root, &it);
    while ((off = kinf_shm_map_next(st->shm, &it)) != 0) {
        kinf_str v = kinf_shm_store_bucket_value(st, off);
        pair probe = {v.ptr, NULL, v.len, 0, 0};
        kinf_shm_off gone;
        if (n == 0 || bsearch(&probe, ps, n, sizeof(*ps), value_only) == NULL) {
            kinf_shm_map_remove(st->shm, root, v.ptr, v.len, &gone); /* tombstones: it goes on */
            ++*fixed;
        }
    }
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && by_value(&ps[i], &ps[j]) == 0; j++)
            ;
        if (j - i > maxgroup)
            maxgroup = j - i;
    }
    if (n > 0 && (recs = malloc(maxgroup * sizeof(*recs))) == NULL) {
        e = KINF_ENOMEM;
        goto out;
    }
    for (size_t i = 0, j; i < n && e == KINF_OK; i = j) {
        kinf_str v = {ps[i].v, ps[i].vlen};
        kinf_shm_off b, replaced;
        for (j = i; j < n && by_value(&ps[i], &ps[j]) == 0; j++)
            recs[j - i] = ps[j].rec;
        if (bucket_is(st, kinf_shm_map_get(st->shm, root, v.ptr, v.len), ps + i, j - i))
            continue;
        if ((b = kinf_shm_index_bucket_new(st, &v, recs, j - i)) == 0) {
            e = KINF_ENOMEM;
        } else if ((e = kinf_shm_map_put(st->shm, root, b, &replaced)) != KINF_OK) {
            kinf_shm_free(st->shm, b); /* its chunks: the next sweep */
        } else {
            ++*fixed;
        }
    }
out:
    free(recs);
    free(ps);
    return e;
}

/* ---- the whole ---- */

kinf_err kinf_shm_store_recover(kinf_shm *shm, kinf_shm_recovery *out)
{
    kinf_shm_store *sts[KINF_SHM_ROOTS];
    size_t n = 0;
    kinf_err e = KINF_OK, e2;

    memset(out, 0, sizeof(*out));
    for (int r = 0; r < KINF_SHM_ROOTS; r++) {
        kinf_err err;
        kinf_shm_store *st = kinf_shm_store_attach(shm, r, &err);
        shm_store_hdr *h;
        uint64_t seq;
        if (st == NULL) {
            if (err == KINF_ENOMEM || err == KINF_ECORRUPT)
                e = err;
            continue;
        }
        sts[n++] = st;
        h = H(st);
        kinf_shm_map_recount(shm, &h->items);
        for (uint64_t ix = 0; ix < st->nindexes; ix++)
            kinf_shm_map_recount(shm, &h->ix[ix].buckets);
        /* A reader at any seq up to here reads RESYNCED or finds its event gone: either way it
         * starts over from the content. */
        seq = kinf_shm_log_append(shm, st->log, KINF_SHM_RESYNCED, 0, 0);
        kinf_shm_log_truncate(shm, st->log, seq);
    }
    out->stores = n;
    if (e == KINF_OK)
        e = sweep(shm, sts, n, out);
    /* A corrupt store is left as it is: rebuilding would allocate from, and free into, a heap
     * whose words cannot be trusted. */
    for (size_t i = 0; i < n && e != KINF_ECORRUPT; i++) {
        for (uint64_t ix = 0; ix < sts[i]->nindexes; ix++) {
            if ((e2 = repair_index(sts[i], (int)ix, &out->buckets_fixed)) != KINF_OK && e == KINF_OK)
                e = e2;
        }
    }
    if (e == KINF_OK)
        e = sweep(shm, sts, n, out);
    for (size_t i = 0; i < n; i++) {
        atomic_fetch_add_explicit(&H(sts[i])->writes, 1, memory_order_release);
        kinf_shm_store_close(sts[i]);
    }
    return e;
}
