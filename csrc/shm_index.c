/*
 * shm_index.c - the index buckets of a shared store (layout in shm_store_impl.h, contract in
 * shm_store.h): a value's records, sorted by key, in chunks of at most CHUNK_MAX offsets. A
 * write builds the chunk it changes and the bucket's array of chunks anew and shares the rest;
 * the chunks it replaced are retired with the old bucket once the new one is published.
 */
#include "shm_store_impl.h"

#include <stdint.h>
#include <stdlib.h>

static int rec_cmp(const kinf_shm_store *st, kinf_shm_off rec, const char *key, size_t len)
{
    const shm_record *r = REC(st, rec);
    if (!kinf_shm_entry_ok(st->shm, rec))
        return -1; /* a stray offset sorts first and is never read (shm.h, Corruption) */
    return key_cmp(rec_key(r), r->h.key_len, key, len);
}

/* Where key is (or would go) in c: *found set when it is there. */
static size_t chunk_find(const kinf_shm_store *st, const shm_chunk *c, const char *key,
                         size_t len, int *found)
{
    size_t lo = 0, hi = c->n;
    *found = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = rec_cmp(st, c->recs[mid], key, len);
        if (cmp == 0) {
            *found = 1;
            return mid;
        }
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The chunk of b where key is or would go: the last whose first key is not after it (0 when
 * key comes before every chunk); SIZE_MAX when a chunk it looks at does not check. Only the
 * chunks the search reads are checked: a write costs O(log chunks), not O(chunks). */
static size_t bucket_chunk(const kinf_shm_store *st, const shm_bucket *b, const char *key,
                           size_t len)
{
    size_t lo = 1, hi = b->nchunks; /* the answer is lo - 1 */
    uint64_t n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const shm_chunk *c = chunk_checked(st, b->chunks[mid], &n);
        if (c == NULL)
            return SIZE_MAX;
        if (rec_cmp(st, c->recs[0], key, len) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

/* A new, unpublished chunk of n offsets (1..CHUNK_MAX) from recs; 0 when the segment is full. */
static kinf_shm_off chunk_new(kinf_shm_store *st, const kinf_shm_off *recs, size_t n)
{
    kinf_shm_off off = kinf_shm_alloc(st->shm, sizeof(shm_chunk) + n * sizeof(kinf_shm_off));
    if (off != 0) {
        shm_chunk *c = kinf_shm_ptr(st->shm, off);
        c->n = n;
        memcpy(c->recs, recs, n * sizeof(kinf_shm_off));
    }
    return off;
}


/* Frees a change that was never published. */
static void change_free(kinf_shm_store *st, const change *c)
{
    kinf_shm_free(st->shm, c->bucket);
    kinf_shm_free(st->shm, c->fresh[0]);
    kinf_shm_free(st->shm, c->fresh[1]);
}

/* Prepares the change of value's bucket (old, or NULL when the value has none) where key's
 * record becomes rec (0: key leaves the value). KINF_ENOMEM when the segment is full (nothing
 * left allocated). */
static kinf_err bucket_with(kinf_shm_store *st, const shm_bucket *old, const kinf_str *value,
                            const char *key, size_t key_len, kinf_shm_off rec, change *out)
{
    kinf_shm_off recs[CHUNK_MAX + 1];
    size_t ci = 0, at = 0, n = 0, nchunks = 0, total, k = 0, made, replaced = 0;
    const shm_chunk *c = NULL;
    shm_bucket *b;
    int found = 0;

    memset(out, 0, sizeof(*out));
    if (old != NULL) {
        uint64_t cn;
        ci = bucket_chunk(st, old, key, key_len);
        if (ci == SIZE_MAX || (c = chunk_checked(st, old->chunks[ci], &cn)) == NULL)
            return KINF_ECORRUPT;
        at = chunk_find(st, c, key, key_len, &found);
        out->gone[0] = old->chunks[ci];
        replaced = 1;
        nchunks = old->nchunks;
        memcpy(recs, c->recs, at * sizeof(kinf_shm_off));
    }
    /* The chunk's records with key's replaced, in recs[0..n) */
    n = at;
    if (rec != 0)
        recs[n++] = rec;
    if (c != NULL) {
        size_t rest = c->n - at - (size_t)found;
        memcpy(recs + n, c->recs + at + found, rest * sizeof(kinf_shm_off));
        n += rest;
    }
    total = (old ? old->n : 0) - (size_t)found + (rec != 0);
    if (total == 0)
        return KINF_OK; /* the value goes away */
    /* A chunk a removal left under a quarter full joins a neighbour that has room for it,
     * which keeps the bucket's array short. */
    if (n > 0 && n < CHUNK_MAX / 4 && nchunks > 1) {
        int next = ci + 1 < nchunks;
        uint64_t nbn;
        const shm_chunk *nb = chunk_checked(st, old->chunks[next ? ci + 1 : ci - 1], &nbn);
        if (nb == NULL)
            return KINF_ECORRUPT; /* nothing made yet */
        if (n + nb->n <= CHUNK_MAX) {
            if (next) {
                memcpy(recs + n, nb->recs, nb->n * sizeof(kinf_shm_off));
            } else {
                memmove(recs + nb->n, recs, n * sizeof(kinf_shm_off));
                memcpy(recs, nb->recs, nb->n * sizeof(kinf_shm_off));
                ci--;
            }
            n += nb->n;
            out->gone[1] = old->chunks[next ? ci + 1 : ci]; /* ci is the earlier one now */
            replaced = 2;
        }
    }
    /* Its replacement: none (emptied), one chunk, or two halves of an overfull one. */
    made = n == 0 ? 0 : n > CHUNK_MAX ? 2 : 1;
    for (size_t i = 0; i < made; i++) {
        size_t from = i == 0 ? 0 : n / 2, len = made == 1 ? n : i == 0 ? n / 2 : n - n / 2;
        if ((out->fresh[i] = chunk_new(st, recs + from, len)) == 0) {
            change_free(st, out);
            out->fresh[0] = out->fresh[1] = 0;
            return KINF_ENOMEM;
        }
    }
    nchunks = nchunks - replaced + made;
    out->bucket = kinf_shm_alloc(st->shm, sizeof(shm_bucket) + nchunks * sizeof(kinf_shm_off) +
                                              value->len + 1);
    if (out->bucket == 0) {
        change_free(st, out);
        out->fresh[0] = out->fresh[1] = 0;
        return KINF_ENOMEM;
    }
    b = kinf_shm_ptr(st->shm, out->bucket);
    for (size_t i = 0; old != NULL && i < ci; i++)
        b->chunks[k++] = old->chunks[i];
    for (size_t i = 0; i < made; i++)
        b->chunks[k++] = out->fresh[i];
    for (size_t i = ci + replaced; old != NULL && i < old->nchunks; i++)
        b->chunks[k++] = old->chunks[i];
    b->nchunks = k;
    b->n = total;
    b->version = atomic_fetch_add_explicit(&H(st)->versions, 1, memory_order_relaxed) + 1;
    b->h.key_at = (uint32_t)(sizeof(shm_bucket) + k * sizeof(kinf_shm_off));
    b->h.key_len = (uint32_t)value->len;
    memcpy((char *)b + b->h.key_at, value->ptr, value->len);
    ((char *)b)[b->h.key_at + value->len] = '\0';
    b->h.hash = kinf_shm_map_hash(st->shm, value->ptr, value->len);
    return KINF_OK;
}

static int has_value(const kinf_str *vals, size_t n, const kinf_str *v)
{
    for (size_t i = 0; i < n; i++) {
        if (vals[i].len == v->len && memcmp(vals[i].ptr, v->ptr, v->len) == 0)
            return 1;
    }
    return 0;
}


static kinf_err changes_add(changes *cs, int ix, const kinf_str *value, const change *c)
{
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? cs->cap * 2 : 8;
        change *grown = realloc(cs->c, cap * sizeof(*grown));
        if (grown == NULL)
            return KINF_ENOMEM;
        cs->c = grown;
        cs->cap = cap;
    }
    cs->c[cs->n] = *c;
    cs->c[cs->n].ix = ix;
    cs->c[cs->n].value = *value;
    cs->n++;
    return KINF_OK;
}

void kinf_shm_index_drop(kinf_shm_store *st, changes *cs)
{
    for (size_t i = 0; i < cs->n; i++)
        change_free(st, &cs->c[i]);
    cs->n = 0;
}

kinf_err kinf_shm_index_prepare(kinf_shm_store *st, const char *key, size_t key_len,
                                kinf_shm_off old_rec, kinf_shm_off new_rec, changes *cs)
{
    shm_store_hdr *h = H(st);
    kinf_str ov[64], nv[64];
    kinf_err e = KINF_OK;

    for (size_t ix = 0; ix < st->nindexes && e == KINF_OK; ix++) {
        size_t on = old_rec ? kinf_shm_store_values(st, old_rec, (int)ix, ov, 64) : 0;
        size_t nn = new_rec ? kinf_shm_store_values(st, new_rec, (int)ix, nv, 64) : 0;
        size_t added = 0;
        if (on == KINF_SHM_STORE_CORRUPT || nn == KINF_SHM_STORE_CORRUPT) {
            e = KINF_ECORRUPT;
            break;
        }
        if (on > 64 || nn > 64) {
            e = KINF_ETOOBIG; /* more than 64 values of one index for one object */
            break;
        }
        for (size_t i = 0; i < on + nn && e == KINF_OK; i++) {
            int removal = i < on;
            const kinf_str *v = removal ? &ov[i] : &nv[i - on];
            kinf_shm_off b;
            const shm_bucket *old = NULL;
            change c;
            if (removal ? has_value(nv, nn, v) || has_value(ov, i, v) : has_value(nv, i - on, v))
                continue;
            if (kinf_shm_map_find(st->shm, &h->ix[ix].buckets, v->ptr, v->len, &b) != KINF_OK ||
                (b != 0 && (old = bucket_checked(st, b)) == NULL)) {
                e = KINF_ECORRUPT;
                break;
            }
            added += !removal && b == 0;
            e = bucket_with(st, old, v, key, key_len, removal ? 0 : new_rec, &c);
            if (e == KINF_OK && (e = changes_add(cs, (int)ix, v, &c)) != KINF_OK)
                change_free(st, &c);
        }
        if (e == KINF_OK && added)
            e = kinf_shm_map_reserve(st->shm, &h->ix[ix].buckets, added);
    }
    if (e != KINF_OK)
        kinf_shm_index_drop(st, cs);
    return e;
}

void kinf_shm_index_publish(kinf_shm_store *st, changes *cs)
{
    shm_store_hdr *h = H(st);
    for (size_t i = 0; i < cs->n; i++) {
        kinf_shm_off old = 0;
        _Atomic uint64_t *root = &h->ix[cs->c[i].ix].buckets;
        if (cs->c[i].bucket != 0)
            (void)kinf_shm_map_put(st->shm, root, cs->c[i].bucket, &old);
        else
            kinf_shm_map_remove(st->shm, root, cs->c[i].value.ptr, cs->c[i].value.len, &old);
        /* Either may fail to be queued (out of memory): it is leaked, never freed early. */
        KINF_SHM_STEP();
        (void)kinf_shm_retire(st->shm, old);
        (void)kinf_shm_retire(st->shm, cs->c[i].gone[0]);
        (void)kinf_shm_retire(st->shm, cs->c[i].gone[1]);
    }
}

kinf_shm_off kinf_shm_index_bucket_new(kinf_shm_store *st, const kinf_str *value,
                                       const kinf_shm_off *recs, size_t n)
{
    size_t per = CHUNK_MAX / 2, nchunks = (n + per - 1) / per;
    kinf_shm_off off = kinf_shm_alloc(st->shm, sizeof(shm_bucket) + nchunks * sizeof(kinf_shm_off) +
                                                   value->len + 1);
    shm_bucket *b;
    if (off == 0)
        return 0;
    b = kinf_shm_ptr(st->shm, off);
    for (size_t i = 0; i < nchunks; i++) {
        size_t from = i * per, len = n - from < per ? n - from : per;
        if ((b->chunks[i] = chunk_new(st, recs + from, len)) == 0) {
            while (i-- > 0)
                kinf_shm_free(st->shm, b->chunks[i]);
            kinf_shm_free(st->shm, off);
            return 0;
        }
    }
    b->nchunks = nchunks;
    b->n = n;
    b->version = atomic_fetch_add_explicit(&H(st)->versions, 1, memory_order_relaxed) + 1;
    b->h.key_at = (uint32_t)(sizeof(shm_bucket) + nchunks * sizeof(kinf_shm_off));
    b->h.key_len = (uint32_t)value->len;
    memcpy((char *)b + b->h.key_at, value->ptr, value->len);
    ((char *)b)[b->h.key_at + value->len] = '\0';
    b->h.hash = kinf_shm_map_hash(st->shm, value->ptr, value->len);
    return off;
}

