/*
 * store.h - the thread-safe indexed store (client-go ThreadSafeStore + Indexer).
 *
 * Contract (docs/semantics.md, section 2):
 * - Items are object records keyed by their key. add == update: store the new record, then move
 *   the key in every index from the old record's values to the new ones. delete acts only when
 *   the key exists. replace swaps the whole content and rebuilds every index.
 * - An index maps a value to the set of keys whose object yields it. Values come from index
 *   functions (kinf_index_fn) or from the built-in "namespace" index ({metadata.namespace}).
 *   A value whose key set becomes empty is removed.
 * - An index function that fails does not fail the write: the object is stored, it is left out of
 *   that index (its old values there are removed), the failure is counted and its message kept
 *   (kinf_store_index_errors), and the write returns KINF_EINDEX with the message in errbuf.
 *
 * Threads and locks:
 * - Any thread may read (get, list, by_index, ...): readers take the read lock.
 * - Writers (add, update, delete, replace, add_indexers) are serialized by `write_mu`, held while
 *   index functions run; the data lock is taken only to apply a prepared change, so index
 *   functions run with NO data lock held and may read the store. A write from inside an index
 *   function (same thread re-entering) is refused with KINF_EBUSY instead of deadlocking.
 * - Index functions run on the thread that called the write (or kinf_store_index), never on
 *   another one: the Lua binding relies on this.
 * - Lock order, for code that holds other locks: FIFO lock -> write_mu -> data lock.
 *
 * Memory: every allocation failure leaves the store exactly as it was (writes prepare all
 * allocations before changing anything) and returns KINF_ENOMEM.
 *
 * Ownership: the store holds one reference on each stored record. Writes take their own
 * reference (the caller keeps its own). Reads return new references (or arrays of them) that the
 * caller releases with kinf_object_unref / kinf_objects_free. The store itself is reference
 * counted (a FIFO holds it as known objects): kinf_store_new returns one reference.
 */
#ifndef KINF_STORE_H
#define KINF_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "kinf.h"
#include "object.h"

typedef struct kinf_store kinf_store;

/* A set of index values: n strings, each NUL-terminated, in one allocation. */
typedef struct kinf_values {
    size_t n;
    kinf_str v[];
} kinf_values;

/* Copies n strings into one allocation; NULL on allocation failure. */
kinf_values *kinf_values_new(const kinf_str *vals, size_t n);
void kinf_values_free(kinf_values *vals);

/*
 * An index function: sets *out to a new kinf_values (or NULL for "no values") and returns
 * KINF_OK, or returns an error with a message in errbuf. ud is the pointer given at
 * registration. Called only for plain objects (never tombstones).
 */
typedef kinf_err (*kinf_index_fn)(void *ud, kinf_object *obj, kinf_values **out, char *errbuf,
                                  size_t errlen);

typedef struct kinf_indexer_def {
    const char *name;
    kinf_index_fn fn; /* NULL: the built-in namespace index */
    void *ud;
} kinf_indexer_def;

#define KINF_NAMESPACE_INDEX "namespace"

/* A store; with_namespace_index registers the built-in "namespace" index. */
kinf_store *kinf_store_new(int with_namespace_index, kinf_err *err);
kinf_store *kinf_store_ref(kinf_store *s);
void kinf_store_unref(kinf_store *s);

/*
 * Registers indexers and indexes the existing items into them (only into them). A name that
 * already exists (or appears twice in defs) -> KINF_EEXIST with "indexer conflict: NAME" in
 * errbuf, and nothing is registered. Index function failures for existing items are counted as
 * for writes (KINF_EINDEX, indexers registered).
 */
kinf_err kinf_store_add_indexers(kinf_store *s, const kinf_indexer_def *defs, size_t n,
                                 char *errbuf, size_t errlen);
/* Makes every index function of the store a no-op (values: none). For a binding whose function
 * data is about to go away while the C store lives on. */
void kinf_store_detach_index_functions(kinf_store *s);

/*
 * Add or update obj (a plain object, not a tombstone: KINF_EINVAL). *old_out (if old_out is not
 * NULL) receives the record it replaced, as a reference the caller releases, or NULL.
 */
kinf_err kinf_store_add(kinf_store *s, kinf_object *obj, kinf_object **old_out, char *errbuf,
                        size_t errlen);
/* Delete by key; *old_out receives the removed record (or NULL when the key was absent). */
kinf_err kinf_store_delete(kinf_store *s, const char *key, size_t len, kinf_object **old_out);
/* Asks the cache for the key map's slots of keys with these hashes (kinf_object.hash): a hint
 * for a caller that knows which keys it will write next. */
void kinf_store_prefetch(kinf_store *s, const uint32_t *hashes, size_t n);
/* Makes room for n keys in all, so that the adds of a list do not grow (and rehash) the key
 * map on their way. Changes no content; KINF_ENOMEM leaves the store as it was. */
kinf_err kinf_store_reserve(kinf_store *s, size_t n);
/* Replace the whole content with objs[0..n) (later duplicates of a key win). */
kinf_err kinf_store_replace(kinf_store *s, kinf_object *const *objs, size_t n, char *errbuf,
                            size_t errlen);

/*
 * Versions, for callers that cache what they read (the Lua binding hands out the same arrays
 * until their content changes). kinf_store_version grows with every write that changes the
 * content, and is read without taking a lock. kinf_store_index_version (unknown index:
 * KINF_ENOTFOUND) is the version of what by_index(index, value) returns: it changes whenever a
 * key gains or loses the value or the object of a key that has it is replaced, and is 0 while no
 * object has the value; a value that comes back gets a version it never had. Both only grow
 * for the store's lifetime. Read the version before the content it describes: a result is then
 * never older than the version it is cached under (at worst newer, which costs a re-read).
 */
uint64_t kinf_store_version(kinf_store *s);
kinf_err kinf_store_index_version(kinf_store *s, const char *index, const char *value, size_t len,
                                  uint64_t *out);

/* Reads. get returns a new reference or NULL. */
kinf_object *kinf_store_get(kinf_store *s, const char *key, size_t len);
size_t kinf_store_len(kinf_store *s);
/* Arrays of new references; free with kinf_objects_free. */
kinf_err kinf_store_list(kinf_store *s, kinf_object ***out, size_t *n);
/* Objects whose values in `index` include value. Unknown index: KINF_ENOTFOUND. */
kinf_err kinf_store_by_index(kinf_store *s, const char *index, const char *value, size_t len,
                             kinf_object ***out, size_t *n);
/* As by_index, sorted by key (index_keys). */
kinf_err kinf_store_index_keys(kinf_store *s, const char *index, const char *value, size_t len,
                               kinf_object ***out, size_t *n);
/* Objects sharing at least one value of `index` with obj (deduplicated). Calls the index function
 * on obj on this thread. Unknown index: KINF_ENOTFOUND; failing function: its error. */
kinf_err kinf_store_index(kinf_store *s, const char *index, kinf_object *obj, kinf_object ***out,
                          size_t *n, char *errbuf, size_t errlen);
/*
 * A filtered read (controller-runtime's cached List with options): the objects in namespace
 * `namespace_` (ptr NULL or len 0: every namespace, as client-go's NamespaceAll), whose values in
 * each matches[i].index include matches[i].value, and for which filter (when not NULL) returns
 * nonzero; unordered, as kinf_store_list.
 * Only candidates are visited: the smallest of the key sets named (the built-in namespace
 * index's set for the namespace, each index's set for its value) is walked and each of its
 * objects checked against the others and the filter; with nothing to narrow by, every object.
 * A store without the built-in namespace index compares each candidate's namespace instead.
 * The filter runs on the calling thread under the store's read lock: it must not call the store,
 * block or take other locks. An unknown index gives KINF_ENOTFOUND with *bad_match set to its
 * position in matches.
 */
typedef int (*kinf_store_filter)(void *ud, const kinf_object *obj);

typedef struct kinf_index_match {
    const char *index; /* NUL-terminated index name */
    kinf_str value;
} kinf_index_match;

typedef struct kinf_store_query {
    kinf_str namespace_;
    const kinf_index_match *matches;
    size_t nmatches;
    kinf_store_filter filter; /* NULL: none */
    void *ud;
} kinf_store_query;

kinf_err kinf_store_select(kinf_store *s, const kinf_store_query *q, kinf_object ***out,
                           size_t *n, size_t *bad_match);
/* The values present in `index` (an unknown index gives an empty set, not an error). *out is
 * NULL when there are none; free with kinf_values_free. */
kinf_err kinf_store_index_values(kinf_store *s, const char *index, kinf_values **out);
/* Whether `index` exists. */
int kinf_store_has_index(kinf_store *s, const char *index);
/* The indexes, in registration order (the built-in namespace index first when the store has
 * it): how many, and the name of index i (valid as long as the store). */
size_t kinf_store_index_count(kinf_store *s);
const char *kinf_store_index_name(kinf_store *s, size_t i);
/* Copies of key's values for indexes 0..n-1 (out[i] NULL: none, or no such index), as the
 * store computed them at the key's last write. KINF_ENOTFOUND: the key is not stored. Free each
 * with kinf_values_free. */
kinf_err kinf_store_item_values(kinf_store *s, const char *key, size_t len, kinf_values **out,
                                size_t n);
/* Replaces the record stored under obj's key by obj, which must hold the same object (the same
 * content in other memory: a record borrowed from a shared segment), without touching any index.
 * Takes a reference on obj; *old_out receives the replaced record (the caller releases it).
 * KINF_ENOTFOUND when the key is not stored or holds another resourceVersion (nothing changes). */
kinf_err kinf_store_swap_record(kinf_store *s, kinf_object *obj, kinf_object **old_out);
/* How many index function failures so far; the last message is copied to buf. */
unsigned long kinf_store_index_errors(kinf_store *s, char *buf, size_t len);

void kinf_objects_free(kinf_object **objs, size_t n);

#endif
