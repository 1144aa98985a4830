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
#include "shm_store.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define STORE_MAGIC 0x6b696e6673746f31ULL /* "kinfsto1" */

typedef struct shm_store_hdr {
    uint64_t magic;
    uint64_t nindexes;
    kinf_shm_off log;
    _Atomic uint64_t items;
    _Atomic uint64_t writes, write_failures;
    struct {
        char name[KINF_SHM_INDEX_NAME];
        _Atomic uint64_t buckets;
    } ix[KINF_SHM_STORE_INDEXES];
} shm_store_hdr;

/* bytes: json NUL key NUL namespace NUL name NUL uid NUL rv NUL, then at values_at, for each
 * index: a uint32 count, then per value a uint32 length and the bytes with a NUL. */
typedef struct shm_record {
    kinf_shm_entry h;
    _Atomic uint64_t holders; /* bit i: reader slot i holds the record (kinf_shm_store_hold) */
    uint64_t seq;             /* the log seq of the event that wrote it */
    uint32_t json_len;
    uint32_t values_at;
    uint16_t ns_len, name_len, uid_len, rv_len;
    char bytes[];
} shm_record;

/* A value's records, sorted by key, in chunks of at most CHUNK_MAX: a write copies the chunk it
 * changes and the bucket's array of chunk offsets, not every record of the value. Chunks are
 * shared by the buckets built one from the other and retired one by one, when a write replaces
 * them. */
#define CHUNK_MAX 256

typedef struct shm_chunk {
    uint64_t n; /* 1..CHUNK_MAX */
    kinf_shm_off recs[];
} shm_chunk;

/* chunks: nchunks chunk offsets, in key order; the value's bytes follow them (h.key_at). */
typedef struct shm_bucket {
    kinf_shm_entry h;
    uint64_t version; /* the store's write count when it was built: grows for a value */
    uint64_t n;       /* records in all */
    uint64_t nchunks;
    kinf_shm_off chunks[];
} shm_bucket;

struct kinf_shm_store {
    kinf_shm *shm;
    kinf_shm_off hdr;
    kinf_shm_log_deferred deferred; /* [writer] */
    int writer;                     /* its dead-reader hook is registered */
};

static shm_store_hdr *H(const kinf_shm_store *st)
{
    return kinf_shm_ptr(st->shm, st->hdr);
}

static const shm_record *REC(const kinf_shm_store *st, kinf_shm_off off)
{
    return kinf_shm_ptr(st->shm, off);
}

static const shm_bucket *BKT(const kinf_shm_store *st, kinf_shm_off off)
{
    return kinf_shm_ptr(st->shm, off);
}

static const shm_chunk *CHK(const kinf_shm_store *st, kinf_shm_off off)
{
    return kinf_shm_ptr(st->shm, off);
}

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
    if (hoff == 0 || ((shm_store_hdr *)kinf_shm_ptr(shm, hoff))->magic != STORE_MAGIC) {
        *err = KINF_ENOTFOUND;
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

static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static const char *rec_key(const shm_record *r)
{
    return (const char *)r + r->h.key_at;
}

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

/* A new, unpublished record for obj with its index values; 0 when the segment is full. */
static kinf_shm_off record_new(kinf_shm_store *st, const kinf_object *obj,
                               const kinf_values *const *vals, uint64_t seq)
{
    size_t nix = H(st)->nindexes;
    size_t ns = str_len(obj->namespace_), name = str_len(obj->name), uid = str_len(obj->uid);
    size_t rv = str_len(obj->resource_version);
    size_t strings = obj->json_len + obj->key_len + ns + name + uid + rv + 6;
    size_t values = 4 * nix, size;
    kinf_shm_off off;
    shm_record *r;
    char *p;

    if (ns > 0xffff || name > 0xffff || uid > 0xffff || rv > 0xffff || obj->json_len > 0xffffffffu)
        return 0;
    for (size_t i = 0; i < nix; i++) {
        for (size_t j = 0; vals && vals[i] && j < vals[i]->n; j++)
            values += 4 + vals[i]->v[j].len + 1;
    }
    size = sizeof(shm_record) + strings + values;
    if (size > 0xffffffffu || (off = kinf_shm_alloc(st->shm, size)) == 0)
        return 0;
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
    return off;
}

size_t kinf_shm_store_values(const kinf_shm_store *st, kinf_shm_off rec, int ix, kinf_str *out,
                             size_t max)
{
    const shm_record *r = REC(st, rec);
    const char *p = (const char *)r + r->values_at;
    size_t n = 0;
    for (int i = 0; i <= ix; i++) {
        n = get_u32(&p);
        for (size_t j = 0; j < n; j++) {
            uint32_t len = get_u32(&p);
            if (i == ix && j < max) {
                out[j].ptr = p;
                out[j].len = len;
            }
            p += len + 1;
        }
    }
    return n;
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

void kinf_shm_store_view(const kinf_shm_store *st, kinf_shm_off off, kinf_shm_view *out)
{
    const shm_record *r = REC(st, off);
    const char *p = r->bytes;
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
}

/* Whether the stored record at off holds exactly obj (same resourceVersion and JSON). */
static int same_object(const kinf_shm_store *st, kinf_shm_off off, const kinf_object *obj)
{
    kinf_shm_view v;
    size_t rv = str_len(obj->resource_version);
    kinf_shm_store_view(st, off, &v);
    return rv > 0 && v.resource_version.len == rv &&
           memcmp(v.resource_version.ptr, obj->resource_version, rv) == 0 &&
           v.json_len == obj->json_len && memcmp(v.json, obj->json, obj->json_len) == 0;
}

/* ---- buckets ---- */

static int rec_cmp(const kinf_shm_store *st, kinf_shm_off rec, const char *key, size_t len)
{
    const shm_record *r = REC(st, rec);
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
 * key comes before every chunk). */
static size_t bucket_chunk(const kinf_shm_store *st, const shm_bucket *b, const char *key,
                           size_t len)
{
    size_t lo = 1, hi = b->nchunks; /* the answer is lo - 1 */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rec_cmp(st, CHK(st, b->chunks[mid])->recs[0], key, len) <= 0)
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

/* One bucket change a write prepares: index, the value, the new bucket (0: the value goes
 * away) with the chunks made for it (fresh[], 0 when unused), and the chunks it no longer
 * shares with the old bucket (gone[], 0 when unused), retired once the new bucket is published. */
typedef struct change {
    int ix;
    kinf_str value;
    kinf_shm_off bucket, fresh[2], gone[2];
} change;

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
        ci = bucket_chunk(st, old, key, key_len);
        c = CHK(st, old->chunks[ci]);
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
        const shm_chunk *nb = CHK(st, old->chunks[next ? ci + 1 : ci - 1]);
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
    b->version = atomic_load_explicit(&H(st)->writes, memory_order_relaxed) + 1;
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

typedef struct changes {
    change *c;
    size_t n, cap;
} changes;

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

/* Frees every prepared change (none was published) and forgets them. */
static void changes_drop(kinf_shm_store *st, changes *cs)
{
    for (size_t i = 0; i < cs->n; i++)
        change_free(st, &cs->c[i]);
    cs->n = 0;
}

/* Prepares the bucket changes that move key from old_rec's values to new_rec's (either may be
 * 0), with room in every value map; on failure frees what it allocated. A value listed twice
 * counts once. */
static kinf_err prepare(kinf_shm_store *st, const char *key, size_t key_len, kinf_shm_off old_rec,
                        kinf_shm_off new_rec, changes *cs)
{
    shm_store_hdr *h = H(st);
    kinf_str ov[64], nv[64];
    kinf_err e = KINF_OK;

    for (size_t ix = 0; ix < h->nindexes && e == KINF_OK; ix++) {
        size_t on = old_rec ? kinf_shm_store_values(st, old_rec, (int)ix, ov, 64) : 0;
        size_t nn = new_rec ? kinf_shm_store_values(st, new_rec, (int)ix, nv, 64) : 0;
        size_t added = 0;
        if (on > 64 || nn > 64) {
            e = KINF_ETOOBIG; /* more than 64 values of one index for one object */
            break;
        }
        for (size_t i = 0; i < on + nn && e == KINF_OK; i++) {
            int removal = i < on;
            const kinf_str *v = removal ? &ov[i] : &nv[i - on];
            kinf_shm_off b;
            change c;
            if (removal ? has_value(nv, nn, v) || has_value(ov, i, v) : has_value(nv, i - on, v))
                continue;
            b = kinf_shm_map_get(st->shm, &h->ix[ix].buckets, v->ptr, v->len);
            added += !removal && b == 0;
            e = bucket_with(st, b ? BKT(st, b) : NULL, v, key, key_len, removal ? 0 : new_rec,
                            &c);
            if (e == KINF_OK && (e = changes_add(cs, (int)ix, v, &c)) != KINF_OK)
                change_free(st, &c);
        }
        if (e == KINF_OK && added)
            e = kinf_shm_map_reserve(st->shm, &h->ix[ix].buckets, added);
    }
    if (e != KINF_OK)
        changes_drop(st, cs);
    return e;
}

/* Publishes prepared bucket changes (cannot fail: prepare made room). */
static void publish(kinf_shm_store *st, changes *cs)
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
        (void)kinf_shm_retire(st->shm, old);
        (void)kinf_shm_retire(st->shm, cs->c[i].gone[0]);
        (void)kinf_shm_retire(st->shm, cs->c[i].gone[1]);
    }
}

/* ---- writes ---- */

static void count_failure(kinf_shm_store *st)
{
    atomic_fetch_add_explicit(&H(st)->write_failures, 1, memory_order_relaxed);
}

kinf_err kinf_shm_store_put(kinf_shm_store *st, const kinf_object *obj,
                            const kinf_values *const *vals)
{
    shm_store_hdr *h = H(st);
    kinf_shm_off old, rec, replaced = 0;
    changes cs = {0};
    uint64_t seq;
    kinf_err e;

    if (obj == NULL || kinf_object_is_tombstone(obj) || !st->writer)
        return KINF_EINVAL;
    old = kinf_shm_map_get(st->shm, &h->items, obj->key, obj->key_len);
    if (old != 0 && same_object(st, old, obj))
        return KINF_OK;
    /* The writer is alone: the event appended below gets the log's head as its seq. */
    rec = record_new(st, obj, vals, kinf_shm_log_head(st->shm, h->log));
    if (rec == 0) {
        count_failure(st);
        return KINF_ENOMEM;
    }
    e = prepare(st, obj->key, obj->key_len, old, rec, &cs);
    if (e == KINF_OK && old == 0)
        e = kinf_shm_map_reserve(st->shm, &h->items, 1);
    if (e != KINF_OK) {
        changes_drop(st, &cs);
        free(cs.c);
        kinf_shm_free(st->shm, rec);
        count_failure(st);
        return e;
    }
    publish(st, &cs);
    free(cs.c);
    (void)kinf_shm_map_put(st->shm, &h->items, rec, &replaced);
    seq = kinf_shm_log_append(st->shm, h->log, replaced ? KINF_SHM_UPDATED : KINF_SHM_ADDED, rec,
                              replaced);
    (void)kinf_shm_log_defer(&st->deferred, replaced, seq);
    atomic_fetch_add_explicit(&h->writes, 1, memory_order_release);
    return KINF_OK;
}

kinf_err kinf_shm_store_delete(kinf_shm_store *st, const char *key, size_t len)
{
    shm_store_hdr *h = H(st);
    kinf_shm_off old = kinf_shm_map_get(st->shm, &h->items, key, len), removed = 0;
    changes cs = {0};
    uint64_t seq;
    kinf_err e;

    if (!st->writer)
        return KINF_EINVAL;
    if (old == 0)
        return KINF_OK;
    e = prepare(st, key, len, old, 0, &cs);
    if (e != KINF_OK) {
        free(cs.c);
        count_failure(st);
        return e;
    }
    publish(st, &cs);
    free(cs.c);
    kinf_shm_map_remove(st->shm, &h->items, key, len, &removed);
    seq = kinf_shm_log_append(st->shm, h->log, KINF_SHM_DELETED, removed, 0);
    (void)kinf_shm_log_defer(&st->deferred, removed, seq);
    atomic_fetch_add_explicit(&h->writes, 1, memory_order_release);
    return KINF_OK;
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

void kinf_shm_store_flush(kinf_shm_store *st)
{
    kinf_shm_log_release(st->shm, H(st)->log, &st->deferred, offsetof(shm_record, holders));
    kinf_shm_reclaim(st->shm);
}

/* ---- reads ---- */

int kinf_shm_store_index_of(const kinf_shm_store *st, const char *name)
{
    const shm_store_hdr *h = H(st);
    for (size_t i = 0; i < h->nindexes; i++) {
        if (strcmp(h->ix[i].name, name) == 0)
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
    kinf_shm_off off = kinf_shm_map_get(st->shm, &H(st)->items, key, len);
    if (off == 0)
        return 0;
    kinf_shm_store_view(st, off, out);
    return 1;
}

void kinf_shm_store_by_index(const kinf_shm_store *st, int ix, const char *value, size_t len,
                             kinf_shm_bucket *out)
{
    kinf_shm_off b = 0;
    if (ix >= 0 && (uint64_t)ix < H(st)->nindexes)
        b = kinf_shm_map_get(st->shm, &H(st)->ix[ix].buckets, value, len);
    memset(out, 0, sizeof(*out));
    out->st = st;
    if (b != 0) {
        out->chunks = BKT(st, b)->chunks;
        out->nchunks = BKT(st, b)->nchunks;
        out->n = BKT(st, b)->n;
        out->version = BKT(st, b)->version;
    }
}

kinf_shm_off kinf_shm_bucket_next(kinf_shm_bucket *b)
{
    while (b->chunk < b->nchunks) {
        const shm_chunk *c = CHK(b->st, b->chunks[b->chunk]);
        if (b->at < c->n)
            return c->recs[b->at++];
        b->chunk++;
        b->at = 0;
    }
    return 0;
}

void kinf_shm_store_iter(const kinf_shm_store *st, int ix, kinf_shm_map_iter *it)
{
    shm_store_hdr *h = H(st);
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
    return H(st)->log;
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
    out->log_head = kinf_shm_log_head(st->shm, h->log);
}
