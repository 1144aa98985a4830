/*
 * jsonscan.h - the streaming JSON scanner of the reflector's I/O thread.
 *
 * What it does: takes an HTTP response body in arbitrary chunks (a value may
 * span chunks; a chunk may end mid-string, mid-escape, mid-number or inside a
 * UTF-8 sequence) and, in one pass over the bytes, without building a DOM:
 *   - watch mode: frames a stream of watch events {"type":..,"object":{..}}
 *     (any whitespace between them, keys in any order) and reports, for each
 *     complete event, its type, the bytes of the "object" value and the
 *     object's parsed metadata;
 *   - list mode: reports each element of the list's "items" as soon as the
 *     element is complete (the body is never held whole), then, at
 *     kinf_scanner_finish, the list's kind, apiVersion, metadata.
 *     resourceVersion and metadata.continue, or the Status the server sent
 *     instead of a list.
 * Every emitted object is fully validated JSON (RFC 8259 grammar, escapes
 * including surrogate pairs, no raw control characters, valid UTF-8), so a
 * decoder such as lua-cjson cannot fail on it. Anything malformed anywhere in
 * the stream (also outside the emitted objects) is an error, with one
 * exception: a metadata.managedFields array or object that
 * KINF_SCAN_STRIP_MANAGED_FIELDS drops is framed, not validated. Its strings
 * must end and hold no raw control byte; outside them no backslash, no control
 * byte but whitespace and no byte >= 0x80 may appear; brackets are counted
 * (not matched) and nest within KINF_SCAN_MAX_DEPTH. The grammar between those
 * (commas, colons, numbers, escapes, UTF-8) is not looked at. The framing is
 * exact for valid JSON; what follows the value is validated as usual.
 *
 * Transforms applied while copying an object (see kinf_scan_options.flags):
 *   KINF_SCAN_STRIP_MANAGED_FIELDS drops metadata.managedFields (only the
 *     object's own metadata, not nested objects that happen to have one),
 *     framing rather than validating an array or object value (above);
 *   KINF_SCAN_INJECT_KIND (list mode) gives an item without a top-level
 *     "kind" / "apiVersion" the list's ("PodList" -> "Pod"), inserted at the
 *     start of the object, so list items look like watch objects. It needs the
 *     list's kind / apiVersion to come before "items" in the body (real API
 *     servers send them first); if they come later nothing is injected. A list
 *     kind without the "List" suffix injects no kind.
 *   Without flags the emitted bytes are exactly the input bytes of the value.
 *
 * Limits (hostile input cannot exhaust the C stack or the heap):
 *   - nesting depth KINF_SCAN_MAX_DEPTH counted from the top-level value, no
 *     recursion (explicit stack) -> KINF_EPARSE;
 *   - max_object_bytes per in-flight value (watch: the whole event; list: one
 *     item), measured on the input bytes -> KINF_ETOOBIG; the scanner's
 *     memory is about that much plus a few KiB;
 *   - metadata strings (name, namespace, uid, resourceVersion, kind,
 *     apiVersion, list continue token) have fixed caps (KINF_SCAN_MAX_*);
 *     a longer value -> KINF_ETOOBIG. Status reason/message are truncated.
 * Errors: KINF_EPARSE (malformed JSON, unknown watch event type, event
 * without "type"/"object", non-object item), KINF_ETOOBIG, KINF_ENOMEM, or
 * what a callback returned. kinf_scanner_error() then gives a message with the
 * byte offset in the stream (counted from the last reset) and what was
 * expected. After an error the scanner stays failed: every feed / finish
 * returns the same error until kinf_scanner_reset.
 *
 * Duplicate keys: the last one wins, as in lua-cjson (a second "metadata"
 * replaces everything the first one gave); a watch event with two "type" or
 * two "object" members is an error.
 *
 * Ownership and threads: a scanner belongs to its creator and is used by one
 * thread at a time (no locks, no global state). Callbacks run on the calling
 * thread, from inside kinf_scanner_feed / kinf_scanner_finish. Every pointer
 * in a kinf_scan_item / kinf_scan_list_end (json bytes, meta spans, kind, ...)
 * points into the scanner or into the chunk being fed and is valid only during
 * the callback: copy what you keep (kinf_object_new copies). A callback must
 * not call feed / finish (they return KINF_EBUSY) nor reset / free the scanner.
 * Meta spans are unescaped UTF-8, not NUL-terminated, never NULL ("" when
 * absent); a value containing \u0000 keeps the NUL inside the span.
 */
#ifndef KINF_JSONSCAN_H
#define KINF_JSONSCAN_H

#include <stddef.h>
#include <stdint.h>

#include "kinf.h"
#include "object.h"

#define KINF_SCAN_MAX_DEPTH 512
#define KINF_SCAN_DEFAULT_MAX_OBJECT ((size_t)64 << 20) /* 64 MiB */
#define KINF_SCAN_MAX_META 1024     /* name, namespace, uid, resourceVersion */
#define KINF_SCAN_MAX_KIND 256      /* kind, apiVersion (objects and lists) */
#define KINF_SCAN_MAX_CONTINUE 8192 /* list metadata.continue */

#define KINF_STATUS_REASON_MAX 128   /* bytes incl. NUL */
#define KINF_STATUS_MESSAGE_MAX 1024 /* bytes incl. NUL */

/* options.flags */
#define KINF_SCAN_STRIP_MANAGED_FIELDS 0x1u
#define KINF_SCAN_INJECT_KIND 0x2u

typedef struct kinf_scanner kinf_scanner;

typedef enum kinf_scan_mode { KINF_SCAN_WATCH, KINF_SCAN_LIST } kinf_scan_mode;

typedef enum kinf_event_type {
    KINF_EV_ADDED,
    KINF_EV_MODIFIED,
    KINF_EV_DELETED,
    KINF_EV_BOOKMARK,
    KINF_EV_ERROR,    /* object is a Status: see kinf_status_parse */
    KINF_EV_LIST_ITEM /* list mode */
} kinf_event_type;

/* "ADDED", ..., "LIST_ITEM"; "?" for a value out of range. */
const char *kinf_event_type_name(kinf_event_type type);

/* One complete object. Valid only during the on_item callback. */
typedef struct kinf_scan_item {
    kinf_event_type type;
    const char *json; /* the object value only (not the watch envelope), transformed */
    size_t json_len;
    kinf_meta meta;          /* metadata.{namespace,name,uid,resourceVersion}, "" when absent */
    kinf_str kind;           /* top-level "kind" (the injected one if injected), "" if absent */
    kinf_str api_version;    /* top-level "apiVersion", likewise */
    int initial_events_end;  /* metadata.annotations["k8s.io/initial-events-end"] == "true" */
    uint64_t offset;         /* stream offset of the object's first byte */
} kinf_scan_item;

/* A Kubernetes Status (metav1.Status), as far as the reflector needs it. */
typedef struct kinf_status {
    int is_status;  /* top-level kind == "Status" */
    int code;       /* "code" when an integer in int range, else 0 */
    char reason[KINF_STATUS_REASON_MAX];   /* NUL-terminated, "" when absent, truncated */
    char message[KINF_STATUS_MESSAGE_MAX]; /* likewise, truncated at a UTF-8 boundary */
    long retry_after_seconds;              /* details.retryAfterSeconds, 0 when absent */
    /* client-go isTooLargeResourceVersionError: a details.causes[] entry with
     * reason "ResourceVersionTooLarge"; or, when the status is a timeout
     * (reason "Timeout" or code 504), a cause message "Too large resource
     * version" or a message containing it (API servers before 1.18.6). */
    int too_large_resource_version;
} kinf_status;

/* The end of a list body (list mode, from kinf_scanner_finish). Valid only
 * during the on_list_end callback. */
typedef struct kinf_scan_list_end {
    kinf_str kind, api_version;     /* top-level, "" when absent */
    kinf_str resource_version;      /* metadata.resourceVersion */
    kinf_str continue_;             /* metadata.continue, "" when absent */
    long long remaining_item_count; /* metadata.remainingItemCount, -1 when absent */
    size_t items;                   /* number of items reported */
    int has_items;                  /* the body had an "items" array */
    int items_null;                 /* the body had "items": null */
    int is_status;                  /* kind == "Status": see status */
    const kinf_status *status;      /* code / reason / message of the body (all bodies) */
} kinf_scan_list_end;

typedef struct kinf_scan_options {
    /* Return KINF_OK to go on; anything else stops the scanner with that
     * error (it stays failed). Either may be NULL. */
    kinf_err (*on_item)(void *ud, const kinf_scan_item *item);
    kinf_err (*on_list_end)(void *ud, const kinf_scan_list_end *end);
    void *ud;
    unsigned flags;          /* KINF_SCAN_STRIP_MANAGED_FIELDS | KINF_SCAN_INJECT_KIND */
    size_t max_object_bytes; /* 0: KINF_SCAN_DEFAULT_MAX_OBJECT */
} kinf_scan_options;

/* opts is copied (NULL: no callbacks, no flags, defaults). Unknown flag bits
 * -> KINF_EINVAL. Returns NULL with *err set on failure. */
kinf_scanner *kinf_scanner_new(kinf_scan_mode mode, const kinf_scan_options *opts, kinf_err *err);

/* Scans len more bytes of the body, calling on_item for each object that
 * completes. The bytes are not kept past the call (the scanner copies what it
 * still needs). */
kinf_err kinf_scanner_feed(kinf_scanner *s, const char *buf, size_t len);

/* End of the body. Watch: an error if the stream ends inside an event (a
 * partial last line). List: an error unless one complete JSON object was
 * seen; otherwise calls on_list_end. Afterwards feed returns KINF_EINVAL and
 * finish returns KINF_OK without calling back, until reset. */
kinf_err kinf_scanner_finish(kinf_scanner *s);

/* List mode, between feeds: 1 and *out = metadata.continue once the list's
 * "metadata" object is complete and holds a non-empty continue (API servers
 * send it before "items", so a client can ask for the next page while the
 * items are still being scanned); 0 until then, after an error, in watch mode.
 * Provisional: a later duplicate "metadata" member may change what
 * on_list_end reports, which is final. *out is valid until the next feed. */
int kinf_scanner_list_continue(const kinf_scanner *s, kinf_str *out);

/* Message for the last error ("" when none). Valid until the next call. */
const char *kinf_scanner_error(const kinf_scanner *s);

/* Forgets the current body and the error; keeps options and (bounded)
 * buffers for the next response. */
void kinf_scanner_reset(kinf_scanner *s, kinf_scan_mode mode);

void kinf_scanner_free(kinf_scanner *s); /* accepts NULL */

/*
 * Parses a Status JSON object (an ERROR watch event's object, or a non-2xx
 * body). *out is always filled (zeroed fields when the input is not a
 * Status). Returns KINF_EPARSE if json is not one valid JSON object (out then
 * holds what was read before the error), KINF_ENOMEM.
 */
kinf_err kinf_status_parse(const char *json, size_t len, kinf_status *out);

#endif
