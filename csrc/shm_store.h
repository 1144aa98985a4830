/*
 * shm_store.h - an informer's cache in a shared segment (shm.h): the records, the index values
 * the writer computed, and the change log, readable by every process without a lock.
 *
 * One writer process mirrors its own store into it, key by key (kinf_shm_store_put /
 * kinf_shm_store_delete, with the index values its index functions gave), and every reader
 * process reads: get by key, the records of an index value (by_index), every record, every
 * value of an index, and the change log (shm_log.h) to follow changes in order.
 *
 * Records: a record is the object's JSON and metadata (namespace, name, uid, resourceVersion,
 * key) and its values for each index, in one block that never changes once published. A put of
 * a record whose resourceVersion and JSON are the ones stored changes nothing and logs nothing
 * (a relist of an unchanged object). Events: ADDED (no record under the key before), UPDATED,
 * DELETED, each naming the record(s); a record leaves the segment once the log has moved past
 * its last event, no read section can reach it and no reader holds it (kinf_shm_store_hold: how
 * a reader process keeps the records behind the objects it handed out).
 *
 * Indexes: fixed at creation (names; the first may be the built-in "namespace"). An index maps
 * each value to a bucket, an immutable array of chunks of record offsets (at most 256 each),
 * sorted by key; a write builds the chunk it changes and the bucket's array of chunks anew
 * (copying at most 256 offsets and one per chunk), retires the old ones and shares the other
 * chunks. A reader's bucket is therefore one consistent moment of that value.
 *
 * Crash: everything is published with one atomic store after it is complete (shm_map.h), so a
 * writer killed at any point leaves every structure readable, but a write is several such
 * stores (the buckets, the record, its event, the write count) and a writer killed between two
 * leaves them apart: a record no event announced, buckets that disagree with the items map, the
 * old records only its process memory knew about. A successor (kinf_shm_claim_writer, then
 * kinf_shm_store_recover before it writes, then kinf_shm_store_attach and
 * kinf_shm_store_become_writer) takes the items map as it finds it, rebuilds every bucket that
 * disagrees with it, appends a RESYNCED event (every reader starts over from the content) and
 * reclaims every block no store reaches. It then puts what its own list holds and removes the
 * keys it does not hold (kinf_shm_store_retain), and readers see the difference as events. So
 * a crash loses no change for good: what the dead writer had not written, the successor's list
 * brings. Bucket versions come from a counter in the segment, taken before a bucket is
 * published: no version is ever given twice, across writers.
 *
 * Memory: the segment holds the live records, their index buckets and maps, and the old records
 * the log still names, bounded in bytes (kinf_shm_store_set_log_bytes, an eighth of the
 * segment by default: past it kinf_shm_store_flush drops the oldest events), plus what read
 * sections and holders keep for a moment. A write that finds the segment full empties the log
 * (every old record the log alone kept is freed; readers that had not read its events start over
 * from the content) and tries once more.
 *
 * Errors: a write that still finds the segment full fails with KINF_ENOMEM, one whose record
 * could never fit the segment with KINF_ETOOBIG; either leaves the cache as it was before that
 * write (counted in kinf_shm_store_info); readers keep the last consistent content. The caller
 * remembers the key and writes it again later (the segment recovers as readers move on).
 */
#ifndef KINF_SHM_STORE_H
#define KINF_SHM_STORE_H

#include "object.h"
#include "shm.h"
#include "shm_log.h"
#include "shm_map.h"
#include "store.h"

#define KINF_SHM_STORE_INDEXES 16
#define KINF_SHM_INDEX_NAME 64 /* bytes of an index name, NUL included */

typedef struct kinf_shm_store kinf_shm_store;

/* A record as readers see it: pointers into the segment, valid inside a read section. */
typedef struct kinf_shm_view {
    kinf_shm_off off;
    uint64_t seq; /* the log seq of the event that wrote the record */
    const char *json;
    size_t json_len;
    const char *key;
    size_t key_len;
    kinf_str namespace_, name, uid, resource_version;
} kinf_shm_view;

/* Writer: a new store in the segment, its offset kept in root slot `root` (kinf_shm_root). The
 * index names are copied (at most KINF_SHM_STORE_INDEXES, each shorter than
 * KINF_SHM_INDEX_NAME); log_cap events are kept (a power of two, at least 16). NULL with *err
 * (KINF_EINVAL, KINF_ENOMEM: the segment is too small). */
kinf_shm_store *kinf_shm_store_create(kinf_shm *shm, int root, const char *const *index_names,
                                      size_t nindexes, uint64_t log_cap, kinf_err *err);
/* Any process: the store kept at root (KINF_ENOTFOUND: none yet; KINF_ECORRUPT: the root does
 * not lead to a store header), to read. A handle is used by one thread at a time. */
kinf_shm_store *kinf_shm_store_attach(kinf_shm *shm, int root, kinf_err *err);
/* Makes an attached handle the writer's (a successor writer, after kinf_shm_claim_writer): it
 * registers the dead-reader hook on the segment handle, so only the writer thread may call it.
 * Writes through a handle that is not the writer's fail with KINF_EINVAL. */
kinf_err kinf_shm_store_become_writer(kinf_shm_store *st);
/* Writer that just claimed the segment (shm.h), before any store of it is written: recovers
 * every store kept at a root of the segment from what the last writer left (see Crash above).
 * The segment must hold nothing but stores: any block no store reaches is freed. KINF_ENOMEM
 * (process memory, or no room in the segment to rebuild a bucket): recovery stopped early;
 * calling it again continues. KINF_ECORRUPT: a store's structure does not check (shm.h,
 * Corruption): nothing is swept (what it could not walk may be in use), buckets that do not
 * check are rebuilt where the items map allows; the segment should be recreated. */
typedef struct kinf_shm_recovery {
    size_t stores;         /* stores found at the roots */
    size_t buckets_fixed;  /* buckets rebuilt or removed: they disagreed with the items map */
    size_t swept_blocks;   /* blocks no store reached, retired */
    size_t swept_bytes;
} kinf_shm_recovery;
kinf_err kinf_shm_store_recover(kinf_shm *shm, kinf_shm_recovery *out);
/* Frees the handle (and the writer's bookkeeping), not the store. Accepts NULL. */
void kinf_shm_store_close(kinf_shm_store *st);

/* Writer. Stores obj (a plain object) with vals[i] its values for index i (NULL: none), for
 * every index of the store, and logs the change. */
kinf_err kinf_shm_store_put(kinf_shm_store *st, const kinf_object *obj,
                            const kinf_values *const *vals);
/* Writer. Removes key (nothing when absent) and logs it. */
kinf_err kinf_shm_store_delete(kinf_shm_store *st, const char *key, size_t len);
/* Writer. Removes every key for which keep(ud, key, len) returns 0, logging each. */
kinf_err kinf_shm_store_retain(kinf_shm_store *st, int (*keep)(void *ud, const char *key,
                                                               size_t len), void *ud);
/* Writer. Frees what readers can no longer reach, first dropping the log's oldest events past
 * its bytes; call after each batch of writes. */
void kinf_shm_store_flush(kinf_shm_store *st);
/* Writer. The most bytes of old records the log keeps alive (default: the segment's size / 8). */
void kinf_shm_store_set_log_bytes(kinf_shm_store *st, size_t bytes);
/* The bytes a record for obj with vals takes (KINF_ETOOBIG past kinf_shm_max_alloc). */
size_t kinf_shm_store_record_size(const kinf_shm_store *st, const kinf_object *obj,
                                  const kinf_values *const *vals);

/* Readers (inside a read section). A stray write may have changed any word of the segment
 * (shm.h, Corruption): every offset, length and count these read is checked before use, and
 * one that does not check is reported (KINF_ECORRUPT, -1, KINF_SHM_STORE_CORRUPT, a corrupt
 * flag), never read past. What they hand out (views, offsets) is checked. The checks are of
 * structure, not content: a changed byte inside a JSON reads as that JSON. */
int kinf_shm_store_index_of(const kinf_shm_store *st, const char *name); /* -1: unknown */
size_t kinf_shm_store_len(const kinf_shm_store *st);
/* The record under key: 1 and *out filled, 0 absent, -1 corrupt (the items map or the record). */
int kinf_shm_store_get(const kinf_shm_store *st, const char *key, size_t len, kinf_shm_view *out);
/* The records under a value of an index, in key order: n of them, read one by one with
 * kinf_shm_bucket_next (inside the read section that found them). version (0 when none) changes
 * whenever they do, and is never given twice in the store, across writers. */
typedef struct kinf_shm_bucket {
    size_t n;
    uint64_t version;
    int corrupt; /* a check failed: by_index's, or a chunk's; set, the walk ends */
    const kinf_shm_store *st; /* the rest: kinf_shm_bucket_next's */
    const kinf_shm_off *chunks;
    size_t nchunks, chunk, at, seen;
} kinf_shm_bucket;
/* KINF_ECORRUPT (out->corrupt set, n 0): the value map or the bucket does not check. */
kinf_err kinf_shm_store_by_index(const kinf_shm_store *st, int ix, const char *value, size_t len,
                                 kinf_shm_bucket *out);
/* The next record of the bucket, or 0 after the last, or 0 with b->corrupt set when a chunk does
 * not check or the chunks hold more or fewer records than the bucket's n (a walk is at most n
 * long). The record itself is checked by kinf_shm_store_view. */
kinf_shm_off kinf_shm_bucket_next(kinf_shm_bucket *b);
/* Readers: keeps the record at off (reached inside a read section) valid beyond the section,
 * until kinf_shm_store_release with the same reader slot. One bit per reader slot: a process
 * that hands the same record out several times counts its uses itself and releases once.
 * Returns whether the slot held the record already (its bit was set before). */
int kinf_shm_store_hold(const kinf_shm_store *st, int slot, kinf_shm_off rec);
void kinf_shm_store_release(const kinf_shm_store *st, int slot, kinf_shm_off rec);
/* The record whose JSON starts at json (a view's json). */
kinf_shm_off kinf_shm_store_record_of(const kinf_shm_store *st, const char *json);
/* Fills *out for the record at off; KINF_ECORRUPT (*out zeroed) when the record does not check:
 * a block whose strings, as its lengths say, fit it. */
kinf_err kinf_shm_store_view(const kinf_shm_store *st, kinf_shm_off off, kinf_shm_view *out);
/* record i's values for index ix: n strings (ptr/len pairs written to out, at most max), or
 * KINF_SHM_STORE_CORRUPT when a count or length runs past the record's block. */
#define KINF_SHM_STORE_CORRUPT ((size_t)-1)
size_t kinf_shm_store_values(const kinf_shm_store *st, kinf_shm_off rec, int ix, kinf_str *out,
                             size_t max);
/* Iteration over every record, or (values) over every value of index ix (its bucket offsets):
 * kinf_shm_map_iter it; kinf_shm_store_iter(st, -1, &it); while ((off = kinf_shm_map_next(..)))
 * then it.corrupt (shm_map.h). */
void kinf_shm_store_iter(const kinf_shm_store *st, int ix, kinf_shm_map_iter *it);
/* A bucket's value. */
kinf_str kinf_shm_store_bucket_value(const kinf_shm_store *st, kinf_shm_off bucket);
/* How many writes the store has published: a reader whose lookup began after it read N finds
 * what those writes left while this still reads N (one atomic load, no read section). */
uint64_t kinf_shm_store_writes(const kinf_shm_store *st);
/* The change log. */
kinf_shm_off kinf_shm_store_log(const kinf_shm_store *st);
kinf_shm *kinf_shm_store_segment(const kinf_shm_store *st);

typedef struct kinf_shm_store_info {
    size_t items;
    unsigned long writes, write_failures; /* failures: the segment was full, or a record too big */
    uint64_t log_head, log_tail; /* events [max(head - cap, tail), head) can be read */
    size_t log_bytes;            /* [writer's handle] old records the log keeps alive */
    unsigned long log_drops;     /* [writer's handle] times a full segment emptied the log */
} kinf_shm_store_info;
void kinf_shm_store_info_get(const kinf_shm_store *st, kinf_shm_store_info *out);

#endif
