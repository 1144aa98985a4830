/*
 * reflector_watch.c - the reflector's watches: the watch request, its events (order checks,
 * the rv they advance), the WatchList's initial state, and what a watch's end leads to
 * (re-watch, backoff, relist). Fields and threads: reflector_impl.h.
 *
 * Watch rv: every event that was applied advances it (a failed one does not). WatchList
 * (watch_list): every LIST that is due (need_list), the first and each relist, is a WatchList
 * stream instead, as client-go's ListAndWatch tries it first each time; its initial events
 * build a temporary state (items + initial_keys: ADDED / MODIFIED set a key, DELETED removes
 * it, as client-go's temporaryStore) that replaces the FIFO's content at the
 * initial-events-end bookmark, and the stream goes on as the WATCH. One that fails before that
 * bookmark falls back to the paginated LIST (watch_list_failed) until a list completes.
 *
 * A stream that ends, cleanly or not, inside an event (a partial last line) loses that line
 * only: the watch resumes from the last applied event's rv, as client-go does, and the loss is
 * recorded as an error ("connection lost" for a dropped connection, "stream ended inside an
 * event" for a clean end: the scanner's finish says bytes were left over).
 *
 * Threads: on_watch_item (and initial_event) on the scanner thread; the rest on the I/O thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reflector_impl.h"

#define VERY_SHORT_WATCH 1.0

/* ---- the scanner thread ---- */

static int is_decimal(const char *s, size_t len)
{
    if (len == 0 || (len > 1 && s[0] == '0'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
    }
    return 1;
}

/* Compares two resourceVersions as numbers when both are decimal integers (etcd's are): -1, 0
 * or 1; 2 when they cannot be compared (resourceVersions are opaque to clients in general). */
static int rv_compare(const char *a, size_t alen, const char *b, size_t blen)
{
    int c;
    if (!is_decimal(a, alen) || !is_decimal(b, blen))
        return 2;
    if (alen != blen)
        return alen < blen ? -1 : 1;
    c = memcmp(a, b, alen);
    return c < 0 ? -1 : c > 0;
}

static void set_last_rv(kinf_reflector *r, kinf_str rv)
{
    if (rv.len == 0)
        return;
    memcpy(r->last_rv, rv.ptr, rv.len);
    r->last_rv[rv.len] = '\0';
}

/* WatchList: an event of the initial state goes to the temporary state (items + initial_keys,
 * client-go's temporaryStore), which replaces the FIFO's content at the end bookmark. */
static kinf_err initial_event(kinf_reflector *r, kinf_event_type type, kinf_object *obj)
{
    kinf_map_slot *slot = kinf_map_find(&r->initial_keys, obj->key, obj->key_len);
    size_t i;

    if (type == KINF_EV_DELETED) {
        if (slot == NULL)
            return KINF_OK;
        i = (size_t)(uintptr_t)slot->value - 1;
        kinf_map_remove(&r->initial_keys, obj->key, obj->key_len);
        kinf_object_unref(r->items[i]);
        if (i != --r->nitems) {
            r->items[i] = r->items[r->nitems];
            slot = kinf_map_find(&r->initial_keys, r->items[i]->key, r->items[i]->key_len);
            slot->value = (void *)(uintptr_t)(i + 1);
        }
        return KINF_OK;
    }
    if (slot != NULL) {
        /* ADDED or MODIFIED of a key already there: the newer object replaces it. */
        i = (size_t)(uintptr_t)slot->value - 1;
        slot->key = kinf_object_ref(obj)->key; /* the old record, owner of the key, goes */
        kinf_object_unref(r->items[i]);
        r->items[i] = obj;
        return KINF_OK;
    }
    if (items_room(r) != KINF_OK)
        return KINF_ENOMEM;
    if (kinf_map_put(&r->initial_keys, obj->key, obj->key_len,
                     (void *)(uintptr_t)(r->nitems + 1)) != KINF_OK)
        return KINF_ENOMEM;
    r->items[r->nitems++] = kinf_object_ref(obj);
    return KINF_OK;
}

kinf_err on_watch_item(void *ud, const kinf_scan_item *item)
{
    kinf_reflector *r = ud;
    kinf_object *obj;
    kinf_err err = KINF_OK;
    const kinf_str *rv = &item->meta.resource_version;

    if (item->type == KINF_EV_ERROR) {
        (void)kinf_status_parse(item->json, item->json_len, &r->ev_status);
        r->ev_error = 1;
        snprintf(r->scan_msg, sizeof(r->scan_msg), "watch error event");
        return KINF_EIO; /* stop: the watch is over */
    }
    if (!nul_free_meta(item)) { /* an rv always fits (RV_SIZE static assert) */
        snprintf(r->scan_msg, sizeof(r->scan_msg),
                 "%s event: metadata.uid or resourceVersion holds a NUL byte",
                 kinf_event_type_name(item->type));
        return KINF_EPARSE;
    }
    if (!r->initial_phase) {
        /* A watch delivers every change once, in resourceVersion order (the initial events of a
         * WatchList excepted: its end bookmark sets the rv these checks start from).
         * - An event at the previous event's resourceVersion repeats it: it is dropped (applying
         *   it would only notify the handlers of a change that did not happen) and reported.
         * - An older one means the stream cannot be trusted: applying it could leave an older
         *   version in the cache for good (client-go would). The watch stops here and the
         *   relist brings a state at least as new as the last event.
         * - An older bookmark is ignored. */
        int c = rv_compare(rv->ptr, rv->len, r->last_rv, strlen(r->last_rv));
        if (item->type == KINF_EV_BOOKMARK && c == -1)
            return KINF_OK;
        if (item->type != KINF_EV_BOOKMARK && (c == -1 || c == 0)) {
            char what[300];
            snprintf(what, sizeof(what), "%s event for %.*s%s%.*s at resourceVersion %.*s",
                     kinf_event_type_name(item->type), (int)item->meta.namespace_.len,
                     item->meta.namespace_.ptr, item->meta.namespace_.len ? "/" : "",
                     (int)item->meta.name.len, item->meta.name.ptr, (int)rv->len, rv->ptr);
            if (c == 0) {
                record_error(r, 0, NULL, "watch %s: %.200s repeats the previous event: ignored",
                             r->path, what);
                return KINF_OK;
            }
            snprintf(r->scan_msg, sizeof(r->scan_msg),
                     "%.180s is older than the previous event's %.64s (out of order)", what,
                     r->last_rv);
            return KINF_EPARSE;
        }
    }
    /* The rv advances only with an event that was applied (client-go: after the store call). */
    if (item->type == KINF_EV_BOOKMARK) {
        set_last_rv(r, item->meta.resource_version);
        if (r->initial_phase && item->initial_events_end) {
            /* WatchList: the initial state is complete. */
            err = kinf_fifo_replace(r->fifo, r->items, r->nitems, r->last_rv);
            drop_items(r);
            r->initial_phase = 0;
            if (err != KINF_OK) {
                snprintf(r->scan_msg, sizeof(r->scan_msg),
                         "replacing the queue's content failed: %s", kinf_strerror(err));
                return err;
            }
            r->need_list = 0;
            pthread_mutex_lock(&r->mu);
            if (r->st.lists++ > 0)
                r->st.relists++;
            r->st.listed = 1;
            r->st.phase = "watching"; /* the same stream goes on as the watch */
            note_success_locked(r, "list");
            pthread_mutex_unlock(&r->mu);
        }
    } else {
        if (item->meta.name.len == 0) {
            snprintf(r->scan_msg, sizeof(r->scan_msg), "%s event object has no metadata.name",
                     kinf_event_type_name(item->type));
            return KINF_ENOKEY;
        }
        if (r->metadata_only) {
            char what[48];
            snprintf(what, sizeof(what), "the %s event's object", kinf_event_type_name(item->type));
            if (wrong_kind(r, item, what))
                return KINF_EPARSE;
        }
        if (r->initial_phase && item->type == KINF_EV_ADDED)
            obj = list_record(r, item->json, item->json_len, &item->meta, &err);
        else
            obj = kinf_object_new(item->json, item->json_len, &item->meta, &err);
        if (obj == NULL)
            return err;
        if (r->initial_phase)
            err = initial_event(r, item->type, obj);
        else if (item->type == KINF_EV_ADDED)
            err = kinf_fifo_add(r->fifo, obj);
        else if (item->type == KINF_EV_MODIFIED)
            err = kinf_fifo_update(r->fifo, obj);
        else
            err = kinf_fifo_delete(r->fifo, obj);
        kinf_object_unref(obj);
        if (err != KINF_OK)
            return err;
        set_last_rv(r, item->meta.resource_version);
    }
    r->watch_events++;
    /* st.events, last_event_time and resource_version are published by scan_chunk. */
    if (item->type != KINF_EV_BOOKMARK)
        r->pub_events++;
    r->pub_any = 1;
    return KINF_OK;
}

/* ---- the I/O thread ---- */

void start_watch(kinf_reflector *r)
{
    kinf_query q;
    char timeout[32];
    int watch_list = r->need_list && use_watch_list(r);

    r->scanner = r->watch_scanner;
    query_start(&q, r);
    kinf_query_param(&q, "watch", "true");
    if (watch_list) {
        /* The first one, or a relist: from the last rv when there is one (NotOlderThan). */
        kinf_query_param(&q, "sendInitialEvents", "true");
        kinf_query_param(&q, "resourceVersionMatch", "NotOlderThan");
        if (r->last_rv[0] && !r->rv_unavailable)
            kinf_query_param(&q, "resourceVersion", r->last_rv);
    } else {
        kinf_query_param(&q, "resourceVersion", r->last_rv);
    }
    kinf_query_param(&q, "allowWatchBookmarks", "true");
    snprintf(timeout, sizeof(timeout), "%ld",
             (long)(r->watch_timeout + kinf_rand01(&r->rng) * r->watch_timeout));
    kinf_query_param(&q, "timeoutSeconds", timeout);
    r->initial_phase = watch_list;
    drop_items(r);
    r->watch_started = refl_now(r);
    r->watch_events = 0;
    r->phase = PH_WATCH;
    pthread_mutex_lock(&r->mu);
    r->st.watches++;
    r->st.phase = watch_list ? "listing" : "watching";
    pthread_mutex_unlock(&r->mu);
    if (begin_query(r, &q, KINF_SCAN_WATCH) != KINF_OK)
        schedule_backoff(r, NEXT_WATCH, 0);
}

static void watch_restart(kinf_reflector *r, next_t next, int backoff, double retry_after)
{
    int was_initial = r->initial_phase;
    pthread_mutex_lock(&r->mu);
    r->st.watch_restarts++;
    pthread_mutex_unlock(&r->mu);
    drop_items(r);
    r->initial_phase = 0;
    if (was_initial && next == NEXT_LIST) {
        /* WatchList failed before its end bookmark: the paginated list instead. */
        r->watch_list_failed = 1;
    }
    if (backoff)
        schedule_backoff(r, next, retry_after);
    else
        schedule_now(r, next);
}

void watch_done(kinf_reflector *r, kinf_xfer_result result)
{
    double lasted = refl_now(r) - r->watch_started;
    kinf_status st;

    if (r->ev_error) {
        const kinf_status *e = &r->ev_status;
        record_error(r, e->code, e->reason, "watch %s: error event: %d %s: %s", r->path, e->code,
                     e->reason, e->message);
        if (e->code == 429)
            watch_restart(r, NEXT_WATCH, 1, (double)e->retry_after_seconds);
        else
            watch_restart(r, NEXT_LIST, 1, 0); /* 410 included: relist at the last rv */
        return;
    }
    if (result == KINF_XFER_TIMEDOUT && r->http_code == 0) {
        record_error(r, 0, NULL, "watch %s: no data for %.0f s (not even headers), reconnecting",
                     r->path, r->idle_timeout);
        watch_restart(r, r->initial_phase ? NEXT_LIST : NEXT_WATCH, 1, 0);
        return;
    }
    if (r->http_code == 0) {
        /* No response at all: connection refused, DNS, TLS, connect timeout. */
        record_error(r, 0, NULL, "watch %s: %s", r->path, r->xfer_msg);
        watch_restart(r, r->initial_phase ? NEXT_LIST : NEXT_WATCH, 1, 0);
        return;
    }
    if (r->http_code < 200 || r->http_code >= 300) {
        parse_errbody(r, &st);
        record_error(r, st.code, st.reason, "watch %s: %ld %s", r->path, r->http_code,
                     st.message[0] ? st.message : "(no message)");
        if (r->http_code == 429)
            watch_restart(r, NEXT_WATCH, 1, r->retry_after);
        else
            watch_restart(r, NEXT_LIST, 1, r->http_code == 503 ? r->retry_after : 0);
        return;
    }
    if (r->scan_err != KINF_OK) {
        /* Malformed event, object too large, or the FIFO refused: relist after backoff. */
        record_error(r, (int)r->http_code, NULL, "watch %s: bad event: %s", r->path,
                     r->scan_msg[0] ? r->scan_msg : kinf_strerror(r->scan_err));
        watch_restart(r, NEXT_LIST, 1, 0);
        return;
    }
    if (result == KINF_XFER_TIMEDOUT) {
        record_error(r, 0, NULL, "watch %s: no data for %.0f s, reconnecting", r->path,
                     r->idle_timeout);
        watch_restart(r, r->initial_phase ? NEXT_LIST : NEXT_WATCH, 1, 0);
        return;
    }
    if (result != KINF_XFER_OK) {
        /* The connection dropped mid-stream (client-go: probable EOF): resume from the last
         * rv; a partial last line is discarded. */
        record_error(r, 0, NULL, "watch %s: connection lost: %s", r->path, r->xfer_msg);
    } else if (kinf_scanner_finish(r->scanner) != KINF_OK) {
        /* A clean end inside an event: the same loss as a dropped connection, and as
         * client-go, the watch resumes from the last applied event. */
        record_error(r, (int)r->http_code, NULL,
                     "watch %s: stream ended inside an event (its last line is cut): %s",
                     r->path, kinf_scanner_error(r->scanner));
    }
    if (r->initial_phase) {
        record_error(r, 0, NULL, "watch %s: WatchList ended before its initial-events-end bookmark",
                     r->path);
        watch_restart(r, NEXT_LIST, 1, 0);
        return;
    }
    if (lasted < VERY_SHORT_WATCH && r->watch_events == 0) {
        record_error(r, 0, NULL, "watch %s: very short watch: ended after %.3f s with no event",
                     r->path, lasted);
        watch_restart(r, NEXT_LIST, 1, 0);
        return;
    }
    watch_restart(r, NEXT_WATCH, 0, 0);
}
