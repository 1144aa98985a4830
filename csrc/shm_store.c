/*
 * shm_store.c - an informer's cache in a shared segment (contract in shm_store.h).
 *
 * Layout: the store header (names of the indexes, the roots of the items map and of each
 * index's value map, the log); records (shm_record) in the items map; buckets (shm_bucket) in
 * each index's value map, each an array of chunks (shm_chunk) of record offsets. A write
 * prepares everything it will publish (the record, every new bucket and chunk, room in every
 * map) before it publishes anything, so a full segment fails it with the cache unchanged; then
 * it publishes buckets first and the record last, and logs the event. A new bucket shares the
 * chunks it did not change with the old one, and only the chunks it replaced are retired with
 * the old bucket: a reader inside a section still reads the old bucket and all of its chunks. A
 * reader that reads an index and then the items map within one section may see the two a write
 * apart: each is consistent on its own.
 */
#include "shm_store_impl.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The old records the log may keep alive: this share of the segment (kinf_shm_store_flush
 * drops the oldest events past it). */
#define LOG_SHARE 8

/* ---- handles ---- */

/* The writer's dead-reader hook: the slot's bit leaves every record the store still publishes
 * (the items, and the records the log still names). */
static void forget_reader(void *ud, int slot)
{
    kinf_shm_store *st = ud;
    uint64_t keep = ~(1ull << slot);
    kinf_shm_map_iter it;
    kinf_shm_off off;
    size_t n;
    kinf_shm_map_iter_init(st->shm, &H(st)->items, &it);
    while ((off = kinf_shm_map_next(st->shm, &it)) != 0)
        atomic_fetch_and(&((shm_record *)kinf_shm_ptr(st->shm, off))->holders, keep);
    for (size_t i = 0; (off = kinf_shm_log_deferred_at(&st->deferred, i, &n)) != 0; i++)
        atomic_fetch_and(&((shm_record *)kinf_shm_ptr(st->shm, off))->holders, keep);
}

static kinf_shm_store *handle(kinf_shm *shm, kinf_shm_off hdr, kinf_err *err)
{
    kinf_shm_store *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    st->shm = shm;
    st->hdr = hdr;
    st->nindexes = (size_t)H(st)->nindexes;
    st->log = H(st)->log;
    *err = KINF_OK;
    return st;
}

kinf_err kinf_shm_store_become_writer(kinf_shm_store *st)
{
    if (st->writer)
        return KINF_OK;
    if (kinf_shm_on_dead_reader(st->shm, forget_reader, st) != KINF_OK)
        return KINF_ENOMEM;
    st->writer = 1;
    st->log_bytes = kinf_shm_size(st->shm) / LOG_SHARE;
    return KINF_OK;
}

kinf_shm_store *kinf_shm_store_create(kinf_shm *shm, int root, const char *const *index_names,
                                      size_t nindexes, uint64_t log_cap, kinf_err *err)
{
    kinf_shm_off hoff, log;
    kinf_shm_store *st;
    shm_store_hdr *h;

    if (root < 0 || root >= KINF_SHM_ROOTS || nindexes > KINF_SHM_STORE_INDEXES) {
        *err = KINF_EINVAL;
        return NULL;
    }
    for (size_t i = 0; i < nindexes; i++) {
        if (index_names[i] == NULL || strlen(index_names[i]) >= KINF_SHM_INDEX_NAME) {
            *err = KINF_EINVAL;
            return NULL;
        }
    }
    if (log_cap < 16 || (log_cap & (log_cap - 1)) != 0) {
        *err = KINF_EINVAL;
        return NULL;
    }
    hoff = kinf_shm_alloc(shm, sizeof(*h));
    log = kinf_shm_log_new(shm, log_cap);
    if (hoff == 0 || log == 0) {
        kinf_shm_free(shm, hoff);
        kinf_shm_free(shm, log);
        *err = KINF_ENOMEM;
        return NULL;
    }
    h = kinf_shm_ptr(shm, hoff);
    memset(h, 0, sizeof(*h));
    h->magic = STORE_MAGIC;
    h->nindexes = nindexes;
    h->log = log;
    for (size_t i = 0; i < nindexes; i++)
        memcpy(h->ix[i].name, index_names[i], strlen(index_names[i]) + 1);
    atomic_store_explicit(kinf_shm_root(shm, root), hoff, memory_order_release);
    st = handle(shm, hoff, err);
    if (st != NULL && (*err = kinf_shm_store_become_writer(st)) != KINF_OK) {
        kinf_shm_store_close(st);
        return NULL;
    }
    return st;
}

kinf_shm_store *kinf_shm_store_attach(kinf_shm *shm, int root, kinf_err *err)
{
    kinf_shm_off hoff;
    if (root < 0 || root >= KINF_SHM_ROOTS) {
        *err = KINF_EINVAL;
        return NULL;
    }
    hoff = atomic_load_explicit(kinf_shm_root(shm, root), memory_order_acquire);
    if (hoff == 0) {
        *err = KINF_ENOTFOUND;
        return NULL;
    }
    if (kinf_shm_span(shm, hoff) < sizeof(shm_store_hdr) ||
        ((shm_store_hdr *)kinf_shm_ptr(shm, hoff))->magic != STORE_MAGIC ||
        ((shm_store_hdr *)kinf_shm_ptr(shm, hoff))->nindexes > KINF_SHM_STORE_INDEXES) {
        *err = KINF_ECORRUPT;
        return NULL;
    }
    return handle(shm, hoff, err);
}

void kinf_shm_store_close(kinf_shm_store *st)
{
    if (st == NULL)
        return;
    if (st->writer)
        kinf_shm_off_dead_reader(st->shm, forget_reader, st);
    kinf_shm_log_deferred_free(&st->deferred);
    free(st);
}

/* ---- records ---- */


static void put_u32(char **p, uint32_t v)
{
    memcpy(*p, &v, 4);
    *p += 4;
}

static uint32_t get_u32(const char **p)
{
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

static size_t str_len(const char *s)
{
    return s ? strlen(s) : 0;
}

size_t kinf_shm_store_record_size(const kinf_shm_store *st, const kinf_object *obj,
                                  const kinf_values *const *vals)
{
    size_t nix = st->nindexes;
    size_t size = sizeof(shm_record) + obj->json_len + obj->key_len + str_len(obj->namespace_) +
                  str_len(obj->name) + str_len(obj->uid) + str_len(obj->resource_version) + 6 +
                  4 * nix;
    for (size_t i = 0; i < nix; i++) {
        for (size_t j = 0; vals && vals[i] && j < vals[i]->n; j++)
            size += 4 + vals[i]->v[j].len + 1;
    }
    return size;
}

/* A new, unpublished record for obj with its index values in *out. KINF_ENOMEM: the segment
 * is full now; KINF_ETOOBIG: no segment of this size could ever hold it. */
static kinf_err record_new(kinf_shm_store *st, const kinf_object *obj,
                           const kinf_values *const *vals, uint64_t seq, kinf_shm_off *out)
{
    size_t nix = st->nindexes;
    size_t ns = str_len(obj->namespace_), name = str_len(obj->name), uid = str_len(obj->uid);
    size_t rv = str_len(obj->resource_version);
    size_t size = kinf_shm_store_record_size(st, obj, vals);
    kinf_shm_off off;
    shm_record *r;
    char *p;

    *out = 0;
    if (ns > 0xffff || name > 0xffff || uid > 0xffff || rv > 0xffff || size > 0xffffffffu ||
        size > kinf_shm_max_alloc(st->shm))
        return KINF_ETOOBIG;
    if ((off = kinf_shm_alloc_held(st->shm, size)) == 0)
        return KINF_ENOMEM;
    *out = off;
    r = kinf_shm_ptr(st->shm, off);
    atomic_init(&r->holders, 0);
    r->seq = seq;
    r->json_len = (uint32_t)obj->json_len;
    r->ns_len = (uint16_t)ns;
    r->name_len = (uint16_t)name;
    r->uid_len = (uint16_t)uid;
    r->rv_len = (uint16_t)rv;
    p = r->bytes;
#define COPY(s, n)                 \
    do {                           \
        if (n)                     \
            memcpy(p, (s), (n));   \
        p[n] = '\0';               \
        p += (n) + 1;              \
    } while (0)
    COPY(obj->json, obj->json_len);
    r->h.key_at = (uint32_t)(p - (char *)r);
    r->h.key_len = (uint32_t)obj->key_len;
    COPY(obj->key, obj->key_len);
    COPY(obj->namespace_, ns);
    COPY(obj->name, name);
    COPY(obj->uid, uid);
    COPY(obj->resource_version, rv);
#undef COPY
    r->values_at = (uint32_t)(p - (char *)r);
    for (size_t i = 0; i < nix; i++) {
        size_t n = vals && vals[i] ? vals[i]->n : 0;
        put_u32(&p, (uint32_t)n);
        for (size_t j = 0; j < n; j++) {
            put_u32(&p, (uint32_t)vals[i]->v[j].len);
            memcpy(p, vals[i]->v[j].ptr, vals[i]->v[j].len);
            p[vals[i]->v[j].len] = '\0';
            p += vals[i]->v[j].len + 1;
        }
    }
    r->h.hash = kinf_shm_map_hash(st->shm, obj->key, obj->key_len);
    return KINF_OK;
}

/* The record at off when its fixed part and strings fit its block (shm.h, Corruption), else
 * NULL; *span gets the block's usable bytes. */
static const shm_record *rec_checked(const kinf_shm_store *st, kinf_shm_off off, uint64_t *span)
{
    const shm_record *r = REC(st, off);
    uint64_t key_at;
    if ((*span = kinf_shm_span(st->shm, off)) < sizeof(shm_record))
        return NULL;
    key_at = sizeof(shm_record) + (uint64_t)r->json_len + 1;
    if (r->h.key_at != key_at ||
        r->values_at != key_at + (uint64_t)r->h.key_len + 1 + r->ns_len + 1 + r->name_len + 1 +
                            r->uid_len + 1 + r->rv_len + 1 ||
        r->values_at > *span)
        return NULL;
    return r;
}

size_t kinf_shm_store_values(const kinf_shm_store *st, kinf_shm_off rec, int ix, kinf_str *out,
                             size_t max)
{
    uint64_t span, at, n = 0;
    const shm_record *r = rec_checked(st, rec, &span);
    const char *p;
    if (r == NULL || ix < 0 || (size_t)ix >= st->nindexes)
        return KINF_SHM_STORE_CORRUPT;
    /* Every count and length is checked against the block's end: at most span / 5 values. */
    at = r->values_at;
    for (int i = 0; i <= ix; i++) {
        if (span - at < 4)
            return KINF_SHM_STORE_CORRUPT;
        p = (const char *)r + at;
        n = get_u32(&p);
        at += 4;
        for (size_t j = 0; j < n; j++) {
            uint32_t len;
            if (span - at < 4)
                return KINF_SHM_STORE_CORRUPT;
            len = get_u32(&p);
            at += 4;
            if (span - at < (uint64_t)len + 1)
                return KINF_SHM_STORE_CORRUPT;
            if (i == ix && j < max) {
                out[j].ptr = p;
                out[j].len = len;
            }
            p += len + 1;
            at += len + 1;
        }
    }
    return (size_t)n;
}

int kinf_shm_store_hold(const kinf_shm_store *st, int slot, kinf_shm_off rec)
{
    uint64_t bit = 1ull << slot;
    return (atomic_fetch_or(&((shm_record *)kinf_shm_ptr(st->shm, rec))->holders, bit) & bit) != 0;
}

void kinf_shm_store_release(const kinf_shm_store *st, int slot, kinf_shm_off rec)
{
    atomic_fetch_and(&((shm_record *)kinf_shm_ptr(st->shm, rec))->holders, ~(1ull << slot));
}

kinf_shm_off kinf_shm_store_record_of(const kinf_shm_store *st, const char *json)
{
    return kinf_shm_offset(st->shm, json - offsetof(shm_record, bytes));
}

kinf_err kinf_shm_store_view(const kinf_shm_store *st, kinf_shm_off off, kinf_shm_view *out)
{
    uint64_t span;
    const shm_record *r = rec_checked(st, off, &span);
    const char *p;
    if (r == NULL) {
        memset(out, 0, sizeof(*out));
        return KINF_ECORRUPT;
    }
    p = r->bytes;
    out->off = off;
    out->seq = r->seq;
    out->json = p;
    out->json_len = r->json_len;
    p += r->json_len + 1;
    out->key = p;
    out->key_len = r->h.key_len;
    p += r->h.key_len + 1;
    out->namespace_ = (kinf_str){p, r->ns_len};
    p += r->ns_len + 1;
    out->name = (kinf_str){p, r->name_len};
    p += r->name_len + 1;
    out->uid = (kinf_str){p, r->uid_len};
    p += r->uid_len + 1;
    out->resource_version = (kinf_str){p, r->rv_len};
    return KINF_OK;
}

/* Whether the stored record at off holds exactly obj (same resourceVersion and JSON). */
static int same_object(const kinf_shm_store *st, kinf_shm_off off, const kinf_object *obj)
{
    kinf_shm_view v;
    size_t rv = str_len(obj->resource_version);
    if (kinf_shm_store_view(st, off, &v) != KINF_OK)
        return 0;
    return rv > 0 && v.resource_version.len == rv &&
           memcmp(v.resource_version.ptr, obj->resource_version, rv) == 0 &&
           v.json_len == obj->json_len && memcmp(v.json, obj->json, obj->json_len) == 0;
}

/* ---- writes ---- */

static void count_failure(kinf_shm_store *st)
{
    atomic_fetch_add_explicit(&H(st)->write_failures, 1, memory_order_relaxed);
}

/* Empties the log when a write found the segment full: the records only old events kept alive
 * are freed (once no read section can reach them), and readers that had not read those events
 * start over from the content (BEHIND). Returns whether memory came back. */
static int relieve(kinf_shm_store *st)
{
    kinf_shm_stats before, after;
    kinf_shm_stats_get(st->shm, &before);
    kinf_shm_log_truncate(st->shm, st->log, kinf_shm_log_head(st->shm, st->log));
    kinf_shm_store_flush(st);
    kinf_shm_stats_get(st->shm, &after);
    st->drops++;
    return after.used < before.used;
}

static kinf_err put_once(kinf_shm_store *st, const kinf_object *obj,
                         const kinf_values *const *vals)
{
    shm_store_hdr *h = H(st);
    kinf_shm_off old, rec, replaced = 0;
    changes cs = {0};
    uint64_t seq;
    kinf_err e;

    old = kinf_shm_map_get(st->shm, &h->items, obj->key, obj->key_len);
    if (old != 0 && same_object(st, old, obj))
        return KINF_OK;
    /* The writer is alone: the event appended below gets the log's head as its seq. */
    if ((e = record_new(st, obj, vals, kinf_shm_log_head(st->shm, st->log), &rec)) != KINF_OK)
        return e;
    e = kinf_shm_index_prepare(st, obj->key, obj->key_len, old, rec, &cs);
    if (e == KINF_OK && old == 0)
        e = kinf_shm_map_reserve(st->shm, &h->items, 1);
    if (e != KINF_OK) {
        kinf_shm_index_drop(st, &cs);
        free(cs.c);
        kinf_shm_free(st->shm, rec);
        return e;
    }
    kinf_shm_index_publish(st, &cs);
    free(cs.c);
    (void)kinf_shm_map_put(st->shm, &h->items, rec, &replaced);
    KINF_SHM_STEP();
    seq = kinf_shm_log_append(st->shm, st->log, replaced ? KINF_SHM_UPDATED : KINF_SHM_ADDED, rec,
                              replaced);
    (void)kinf_shm_log_defer(&st->deferred, replaced, seq, kinf_shm_block_size(st->shm, replaced));
    atomic_fetch_add_explicit(&h->writes, 1, memory_order_release);
    return KINF_OK;
}

kinf_err kinf_shm_store_put(kinf_shm_store *st, const kinf_object *obj,
                            const kinf_values *const *vals)
{
    kinf_err e;
    if (obj == NULL || kinf_object_is_tombstone(obj) || !st->writer)
        return KINF_EINVAL;
    e = put_once(st, obj, vals);
    if (e == KINF_ENOMEM && relieve(st))
        e = put_once(st, obj, vals);
    if (e != KINF_OK)
        count_failure(st);
    return e;
}

static kinf_err delete_once(kinf_shm_store *st, const char *key, size_t len)
{
    shm_store_hdr *h = H(st);
    kinf_shm_off old = kinf_shm_map_get(st->shm, &h->items, key, len), removed = 0;
    changes cs = {0};
    uint64_t seq;
    kinf_err e;

    if (old == 0)
        return KINF_OK;
    e = kinf_shm_index_prepare(st, key, len, old, 0, &cs);
    if (e != KINF_OK) {
        free(cs.c);
        return e;
    }
    kinf_shm_index_publish(st, &cs);
    free(cs.c);
    kinf_shm_map_remove(st->shm, &h->items, key, len, &removed);
    KINF_SHM_STEP();
    seq = kinf_shm_log_append(st->shm, st->log, KINF_SHM_DELETED, removed, 0);
    (void)kinf_shm_log_defer(&st->deferred, removed, seq, kinf_shm_block_size(st->shm, removed));
    atomic_fetch_add_explicit(&h->writes, 1, memory_order_release);
    return KINF_OK;
}

kinf_err kinf_shm_store_delete(kinf_shm_store *st, const char *key, size_t len)
{
    kinf_err e;
    if (!st->writer)
        return KINF_EINVAL;
    e = delete_once(st, key, len);
    if (e == KINF_ENOMEM && relieve(st))
        e = delete_once(st, key, len);
    if (e != KINF_OK)
        count_failure(st);
    return e;
}

kinf_err kinf_shm_store_retain(kinf_shm_store *st, int (*keep)(void *ud, const char *key,
                                                               size_t len), void *ud)
{
    kinf_shm_map_iter it;
    kinf_shm_off off, *gone = NULL;
    size_t n = 0, cap = 0;
    kinf_err e = KINF_OK;

    kinf_shm_map_iter_init(st->shm, &H(st)->items, &it);
    while ((off = kinf_shm_map_next(st->shm, &it)) != 0) {
        const shm_record *r = REC(st, off);
        if (keep(ud, rec_key(r), r->h.key_len))
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            kinf_shm_off *grown = realloc(gone, ncap * sizeof(*grown));
            if (grown == NULL) {
                free(gone);
                return KINF_ENOMEM;
            }
            gone = grown;
            cap = ncap;
        }
        gone[n++] = off;
    }
    /* The records stay valid while we delete: only a later flush can free them. */
    for (size_t i = 0; i < n && e == KINF_OK; i++) {
        const shm_record *r = REC(st, gone[i]);
        e = kinf_shm_store_delete(st, rec_key(r), r->h.key_len);
    }
    free(gone);
    return e;
}

void kinf_shm_store_set_log_bytes(kinf_shm_store *st, size_t bytes)
{
    st->log_bytes = bytes;
}

void kinf_shm_store_flush(kinf_shm_store *st)
{
    kinf_shm_log_bound(st->shm, st->log, &st->deferred, st->log_bytes);
    kinf_shm_log_release(st->shm, st->log, &st->deferred, offsetof(shm_record, holders));
    kinf_shm_reclaim(st->shm);
}

/* ---- reads ---- */

int kinf_shm_store_index_of(const kinf_shm_store *st, const char *name)
{
    const shm_store_hdr *h = H(st);
    /* Bounded: a name a stray write left unterminated ends at the header's field. */
    for (size_t i = 0; i < st->nindexes; i++) {
        if (strncmp(h->ix[i].name, name, KINF_SHM_INDEX_NAME) == 0)
            return (int)i;
    }
    return -1;
}

size_t kinf_shm_store_len(const kinf_shm_store *st)
{
    return kinf_shm_map_count(st->shm, &H(st)->items);
}

int kinf_shm_store_get(const kinf_shm_store *st, const char *key, size_t len, kinf_shm_view *out)
{
    kinf_shm_off off;
    if (kinf_shm_map_find(st->shm, &H(st)->items, key, len, &off) != KINF_OK)
        return -1;
    if (off == 0)
        return 0;
    return kinf_shm_store_view(st, off, out) == KINF_OK ? 1 : -1;
}

kinf_err kinf_shm_store_by_index(const kinf_shm_store *st, int ix, const char *value, size_t len,
                                 kinf_shm_bucket *out)
{
    kinf_shm_off b = 0;
    const shm_bucket *bk;
    memset(out, 0, sizeof(*out));
    out->st = st;
    if (ix >= 0 && (size_t)ix < st->nindexes &&
        kinf_shm_map_find(st->shm, &H(st)->ix[ix].buckets, value, len, &b) != KINF_OK) {
        out->corrupt = 1;
        return KINF_ECORRUPT;
    }
    if (b == 0)
        return KINF_OK;
    if ((bk = bucket_checked(st, b)) == NULL) {
        out->corrupt = 1;
        return KINF_ECORRUPT;
    }
    out->chunks = bk->chunks;
    out->nchunks = bk->nchunks;
    out->n = bk->n;
    out->version = bk->version;
    return KINF_OK;
}

kinf_shm_off kinf_shm_bucket_next(kinf_shm_bucket *b)
{
    while (!b->corrupt && b->chunk < b->nchunks) {
        uint64_t cn;
        const shm_chunk *c = chunk_checked(b->st, b->chunks[b->chunk], &cn);
        /* The chunks' counts must add up to the bucket's: never more records than it said. */
        if (c == NULL) {
            b->corrupt = 1;
            break;
        }
        if (b->at < cn) {
            if (b->seen >= b->n) {
                b->corrupt = 1;
                break;
            }
            b->seen++;
            return c->recs[b->at++];
        }
        b->chunk++;
        b->at = 0;
    }
    if (!b->corrupt && b->seen != b->n)
        b->corrupt = 1;
    return 0;
}

void kinf_shm_store_iter(const kinf_shm_store *st, int ix, kinf_shm_map_iter *it)
{
    shm_store_hdr *h = H(st);
    if (ix >= (int)st->nindexes) {
        memset(it, 0, sizeof(*it));
        it->corrupt = 1;
        return;
    }
    kinf_shm_map_iter_init(st->shm, ix < 0 ? &h->items : &h->ix[ix].buckets, it);
}

kinf_str kinf_shm_store_bucket_value(const kinf_shm_store *st, kinf_shm_off bucket)
{
    const shm_bucket *b = BKT(st, bucket);
    return (kinf_str){(const char *)b + b->h.key_at, b->h.key_len};
}

uint64_t kinf_shm_store_writes(const kinf_shm_store *st)
{
    return atomic_load_explicit(&H(st)->writes, memory_order_acquire);
}

kinf_shm_off kinf_shm_store_log(const kinf_shm_store *st)
{
    return st->log;
}

kinf_shm *kinf_shm_store_segment(const kinf_shm_store *st)
{
    return st->shm;
}

void kinf_shm_store_info_get(const kinf_shm_store *st, kinf_shm_store_info *out)
{
    shm_store_hdr *h = H(st);
    out->items = kinf_shm_store_len(st);
    out->writes = (unsigned long)atomic_load_explicit(&h->writes, memory_order_relaxed);
    out->write_failures =
        (unsigned long)atomic_load_explicit(&h->write_failures, memory_order_relaxed);
    out->log_head = kinf_shm_log_head(st->shm, st->log);
    out->log_tail = kinf_shm_log_tail(st->shm, st->log);
    out->log_bytes = st->deferred.bytes;
    out->log_drops = st->drops;
}

