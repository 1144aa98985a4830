/*
 * informer.h - the processing step of a shared informer (client-go sharedIndexInformer's
 * HandleDeltas / processDeltas), docs/semantics.md, section 5, and the wake-up an event loop polls.
 *
 * Contract:
 * - kinf_informer_pop pops one key from the informer's DeltaFIFO (whose known objects are the
 *   store, EMIT_REPLACED) and, under the FIFO lock as client-go does, applies its deltas oldest
 *   first to the store:
 *     Sync / Replaced / Added / Updated: store add; a key already stored gives an UPDATE
 *       notification (old, new), else an ADD (new, is_in_initial_list);
 *     Deleted: store delete; a DELETE notification with the delta's object (possibly a
 *       tombstone) even when the key was not stored, and the removed record as `old`.
 *   Each notification is appended to `out` with its own references. Handlers are not called
 *   here: the caller delivers the notifications after the FIFO lock is released.
 * - An optional transform replaces each plain object (not tombstones) before it is stored, as
 *   client-go's TransformFunc; a failing transform drops that delta and is reported (errbuf,
 *   KINF_EINVAL) after the rest of the item was applied.
 * - Index function failures do not stop processing (the object is stored without that index,
 *   the store counts them); KINF_EINDEX is returned with the message.
 * - Out of memory while applying: the whole item goes back to the FIFO (requeue) and
 *   KINF_ENOMEM is returned; re-applying the deltas already applied is harmless (the same
 *   records are stored again, giving UPDATE notifications with an unchanged resourceVersion,
 *   which the informer treats as resyncs).
 *
 * Wake-up (kinf_wakeup): an eventfd that is readable while work may be pending. The FIFO's notify
 * hook signals it when the queue goes from empty to non-empty or is closed; the consumer clears
 * it before draining and signals it again if work is left, so it behaves level-triggered.
 *
 * Threads: kinf_informer_pop on the consumer thread (the one that owns the store's index
 * functions); kinf_wakeup_signal from any thread.
 */
#ifndef KINF_INFORMER_H
#define KINF_INFORMER_H

#include "delta_fifo.h"
#include "kinf.h"
#include "object.h"
#include "store.h"

typedef enum kinf_event_kind {
    KINF_EVENT_ADD = 1,
    KINF_EVENT_UPDATE = 2,
    KINF_EVENT_DELETE = 3
} kinf_event_kind;

typedef struct kinf_notification {
    kinf_event_kind kind;
    int is_initial;   /* ADD: the object came with the initial list */
    kinf_object *obj; /* ADD/UPDATE: the stored object; DELETE: the deleted object or tombstone */
    kinf_object *old; /* UPDATE: the replaced record; DELETE: the removed record or NULL */
} kinf_notification;

typedef struct kinf_notifications {
    kinf_notification *v;
    size_t n, cap;
} kinf_notifications;

/* Releases every reference; keeps the array for reuse (free_ also frees it). */
void kinf_notifications_clear(kinf_notifications *ns);
void kinf_notifications_free(kinf_notifications *ns);

/* A transform: *out receives a new reference (it may be `in` itself, referenced again). */
typedef kinf_err (*kinf_transform_fn)(void *ud, kinf_object *in, kinf_object **out, char *errbuf,
                                      size_t errlen);

typedef struct kinf_informer_step {
    kinf_fifo *fifo;
    kinf_store *store;
    kinf_transform_fn transform; /* NULL: none */
    void *transform_ud;
} kinf_informer_step;

/*
 * Pops one key (waiting up to timeout seconds; 0 polls) and applies it as above. Returns
 * KINF_OK, KINF_ETIMEDOUT (nothing queued), KINF_ECLOSED (closed and drained), KINF_EBUSY
 * (re-entry), KINF_EINDEX / KINF_EINVAL (applied, with a message) or KINF_ENOMEM (requeued).
 */
kinf_err kinf_informer_pop(const kinf_informer_step *step, double timeout, kinf_notifications *out,
                           char *errbuf, size_t errlen);

typedef struct kinf_wakeup kinf_wakeup;
kinf_wakeup *kinf_wakeup_new(kinf_err *err);
void kinf_wakeup_free(kinf_wakeup *w);
int kinf_wakeup_fd(const kinf_wakeup *w);
void kinf_wakeup_signal(kinf_wakeup *w);
/* Makes the fd unreadable; returns how many signals it took back (since the last clear). */
unsigned long kinf_wakeup_clear(kinf_wakeup *w);
/* A FIFO notify hook: kinf_fifo_set_notify(f, kinf_wakeup_notify, w). */
void kinf_wakeup_notify(void *w);

#endif
