/*
 * shm_map.h - a string-keyed hash map in a shared segment (shm.h): one writer, readers in any
 * process and thread without a lock.
 *
 * What it maps: entries, blocks of the segment that start with a kinf_shm_entry header (the
 * key's hash, its length and where its bytes are in the entry). The map stores the entries'
 * offsets and never copies or frees them: the caller owns entries, and retires (kinf_shm_retire)
 * those that put and remove hand back. The map's root is any atomic word of the segment
 * (kinf_shm_root, or a field of another block) holding the offset of its current table (0: an
 * empty map).
 *
 * Readers (inside kinf_shm_read_begin / _end): get and the iteration see, for each key, either
 * the entry before a concurrent write or the one after it, never a torn one: the writer
 * completes an entry before it stores its offset in a slot, and a table before it stores its
 * offset in the root (release / acquire). A reader holding an older table after a resize reads
 * that table's (older, still valid) content. A key deleted and added again by two writes may be
 * missed by a reader between the two, as if it read between them.
 *
 * Writer: open addressing with linear probing, at most 3/4 of the slots used (tombstones
 * counted); a put that would pass that builds a new table (twice as large, or the same size
 * when tombstones are the reason), stores it in the root and retires the old one. Every
 * allocation failure returns KINF_ENOMEM with the map unchanged.
 */
#ifndef KINF_SHM_MAP_H
#define KINF_SHM_MAP_H

#include "shm.h"

typedef struct kinf_shm_entry {
    uint64_t hash;   /* kinf_shm_map_hash of the key */
    uint32_t key_len;
    uint32_t key_at; /* offset of the key's bytes from the entry's start */
} kinf_shm_entry;

/* The hash entries of this segment's maps must carry. */
uint64_t kinf_shm_map_hash(const kinf_shm *shm, const char *key, size_t len);

/* Writer. Inserts entry, or replaces the entry with its key; *replaced gets the entry replaced
 * (or 0), for the caller to retire. */
kinf_err kinf_shm_map_put(kinf_shm *shm, _Atomic uint64_t *root, kinf_shm_off entry,
                          kinf_shm_off *replaced);
/* Writer. Makes room for `extra` more keys, so that the next puts of up to that many new keys
 * cannot fail (KINF_ENOMEM: the segment is full; the map is unchanged). */
kinf_err kinf_shm_map_reserve(kinf_shm *shm, _Atomic uint64_t *root, size_t extra);
/* Writer. Removes key's entry; *removed gets it (or 0), for the caller to retire. */
void kinf_shm_map_remove(kinf_shm *shm, _Atomic uint64_t *root, const char *key, size_t len,
                         kinf_shm_off *removed);
/* Writer. Empties the map: the root becomes 0 and the table is retired. The entries are not
 * touched (the caller retires them). */
void kinf_shm_map_clear(kinf_shm *shm, _Atomic uint64_t *root);

/* Writer (a successor). Counts the current table's entries and tombstones again: a writer
 * killed between a slot's store and its count left them off by one. */
void kinf_shm_map_recount(kinf_shm *shm, _Atomic uint64_t *root);

/* Reader (or writer). key's entry in *out (0: absent). KINF_ECORRUPT (*out 0) when the table
 * or an entry the probe met does not check (shm.h, Corruption): the table must be a block that
 * holds its slots, with a power-of-two capacity, each entry a block holding its header and key.
 * The probe stops after the table's capacity. An entry found is one of those checks. */
kinf_err kinf_shm_map_find(const kinf_shm *shm, _Atomic uint64_t *root, const char *key,
                           size_t len, kinf_shm_off *out);
/* kinf_shm_map_find, where a corrupt map reads as one without key (0). */
kinf_shm_off kinf_shm_map_get(const kinf_shm *shm, _Atomic uint64_t *root, const char *key,
                              size_t len);
/* Reader (or writer). How many entries (at most the table's capacity; 0 for a corrupt table). */
size_t kinf_shm_map_count(const kinf_shm *shm, _Atomic uint64_t *root);
/* Whether the entry at off checks: a block holding its header and its key. */
int kinf_shm_entry_ok(const kinf_shm *shm, kinf_shm_off off);

/* Iteration over one table (the one current at kinf_shm_map_iter_init), inside a read section:
 *   kinf_shm_map_iter it; kinf_shm_map_iter_init(shm, root, &it);
 *   for (kinf_shm_off e; (e = kinf_shm_map_next(shm, &it)) != 0;) ...
 *   if (it.corrupt) ... the table, or an entry in it, did not check: the iteration stopped there
 * Every entry handed out checks (kinf_shm_entry_ok); at most the table's capacity are. */
typedef struct kinf_shm_map_iter {
    kinf_shm_off table;
    uint64_t i, cap; /* cap: the table's, checked at init and kept (a word changed later
                        cannot make the walk longer) */
    int corrupt;
} kinf_shm_map_iter;
void kinf_shm_map_iter_init(const kinf_shm *shm, _Atomic uint64_t *root, kinf_shm_map_iter *it);
kinf_shm_off kinf_shm_map_next(const kinf_shm *shm, kinf_shm_map_iter *it);

#endif
