/*
 * shm_store_impl.h - what shm_store.c (records, writes, reads) and shm_index.c (index buckets
 * and their chunks) share: the layout of a shared store in its segment. Nothing else includes
 * it; the contract is shm_store.h.
 */
#ifndef KINF_SHM_STORE_IMPL_H
#define KINF_SHM_STORE_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "shm_store.h"

#define STORE_MAGIC 0x6b696e6673746f31ULL /* "kinfsto1" */

typedef struct shm_store_hdr {
    uint64_t magic;
    uint64_t nindexes;
    kinf_shm_off log;
    _Atomic uint64_t items;
    _Atomic uint64_t writes, write_failures;
    _Atomic uint64_t versions; /* the last bucket version given: taken before the bucket is
                                  published, so no writer, dead or alive, gives one twice */
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

/* Records are allocated with kinf_shm_alloc_held: a sweep finds their holders word there. */
_Static_assert(offsetof(shm_record, holders) == KINF_SHM_HOLDERS_AT, "holders word");

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
    uint64_t version; /* from the store's versions counter: never given twice */
    uint64_t n;       /* records in all */
    uint64_t nchunks;
    kinf_shm_off chunks[];
} shm_bucket;

struct kinf_shm_store {
    kinf_shm *shm;
    kinf_shm_off hdr;
    /* Fixed at creation, checked and copied at attach: a stray write to the header later cannot
     * change how many indexes a reader walks or where it finds the log. */
    size_t nindexes;
    kinf_shm_off log;
    kinf_shm_log_deferred deferred; /* [writer] */
    int writer;                     /* its dead-reader hook is registered */
    size_t log_bytes;               /* [writer] the most the log's old records may take */
    unsigned long drops;            /* [writer] the log emptied to make room (relieve) */
};

static inline shm_store_hdr *H(const kinf_shm_store *st)
{
    return kinf_shm_ptr(st->shm, st->hdr);
}

static inline const shm_record *REC(const kinf_shm_store *st, kinf_shm_off off)
{
    return kinf_shm_ptr(st->shm, off);
}

static inline const shm_bucket *BKT(const kinf_shm_store *st, kinf_shm_off off)
{
    return kinf_shm_ptr(st->shm, off);
}

static inline const shm_chunk *CHK(const kinf_shm_store *st, kinf_shm_off off)
{
    return kinf_shm_ptr(st->shm, off);
}

/* The chunk at off when it checks (a block holding 1..CHUNK_MAX offsets), else NULL; *n gets
 * its count, loaded once. */
static inline const shm_chunk *chunk_checked(const kinf_shm_store *st, kinf_shm_off off,
                                             uint64_t *n)
{
    uint64_t span = kinf_shm_span(st->shm, off);
    if (span < sizeof(shm_chunk))
        return NULL;
    *n = CHK(st, off)->n;
    if (*n == 0 || *n > CHUNK_MAX || *n > (span - sizeof(shm_chunk)) / sizeof(kinf_shm_off))
        return NULL;
    return CHK(st, off);
}

/* The bucket at off when it checks (an entry whose chunk array ends before its value, with at
 * most CHUNK_MAX records per chunk), else NULL. */
static inline const shm_bucket *bucket_checked(const kinf_shm_store *st, kinf_shm_off off)
{
    const shm_bucket *b = BKT(st, off);
    uint64_t nchunks;
    if (!kinf_shm_entry_ok(st->shm, off) || kinf_shm_span(st->shm, off) < sizeof(shm_bucket))
        return NULL;
    nchunks = b->nchunks;
    if (b->h.key_at < sizeof(shm_bucket) ||
        nchunks > (b->h.key_at - sizeof(shm_bucket)) / sizeof(kinf_shm_off) || b->n < nchunks ||
        b->n > nchunks * CHUNK_MAX)
        return NULL;
    return b;
}

static inline int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static inline const char *rec_key(const shm_record *r)
{
    return (const char *)r + r->h.key_at;
}

/* One bucket change a write prepares: index, the value, the new bucket (0: the value goes
 * away) with the chunks made for it (fresh[], 0 when unused), and the chunks it no longer
 * shares with the old bucket (gone[], 0 when unused), retired once the new bucket is published. */
typedef struct change {
    int ix;
    kinf_str value;
    kinf_shm_off bucket, fresh[2], gone[2];
} change;

typedef struct changes {
    change *c;
    size_t n, cap;
} changes;

/* Prepares the bucket changes that move key from old_rec's values to new_rec's (either may be
 * 0), with room in every value map; on failure frees what it allocated (KINF_ENOMEM: the
 * segment is full; KINF_ETOOBIG: more than 64 values of one index). A value listed twice
 * counts once. cs->c is the caller's to free. */
kinf_err kinf_shm_index_prepare(kinf_shm_store *st, const char *key, size_t key_len,
                                kinf_shm_off old_rec, kinf_shm_off new_rec, changes *cs);
/* Publishes prepared bucket changes (cannot fail: prepare made room). */
void kinf_shm_index_publish(kinf_shm_store *st, changes *cs);
/* Frees every prepared change (none was published) and forgets them. */
void kinf_shm_index_drop(kinf_shm_store *st, changes *cs);
/* A new, unpublished bucket for value holding recs[0..n) (n >= 1, sorted by key), in chunks
 * of at most half CHUNK_MAX; 0 when the segment is full (nothing left allocated). */
kinf_shm_off kinf_shm_index_bucket_new(kinf_shm_store *st, const kinf_str *value,
                                       const kinf_shm_off *recs, size_t n);

#endif
