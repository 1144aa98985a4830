/*
 * reflector.c - list + watch into a DeltaFIFO (contract in reflector.h): the state machine,
 * start / stop / status, and the transfers it makes through its transport (transport.h).
 * The fields and which thread owns each: reflector_impl.h. The list rules are in
 * reflector_list.c, the watch rules in reflector_watch.c, error reporting in
 * reflector_report.c, the backoff manager in backoff.c, the query builder in query.c.
 *
 * The state machine, on the transport's I/O thread:
 *
 *   WAIT(due, next) --due--> LIST page --continue--> LIST page ... --last--> replace --> WATCH
 *   WATCH --server timeout / dropped after events--> WATCH (same rv, no relist)
 *   WATCH --ERROR 429, 429 / connection refused on open--> backoff --> WATCH
 *   WATCH --ERROR 410, other errors, malformed line, very short watch--> backoff --> LIST
 *   LIST  --410 / "too large resource version"--> LIST at once with resourceVersion=""
 *   LIST continuation page --410--> one full list (no limit) at the first page's rv
 *   LIST  --other failure--> backoff --> LIST
 *
 * Backoff (backoff.h): initial 0.8 s, x2 per use, cap 30 s, jitter 1.0 (d + rand*d), reset
 * after 2 minutes without a use; Retry-After on 429/503 lengthens the wait to at least what the
 * server asked. Timers (due, a watch's duration) run on the transport's clock (ops->now).
 *
 * Two threads. The state machine and the transfer callbacks run on the I/O thread; on_body only
 * copies a 2xx body into the transport's queue (ops->queue: the client's pipe, pipe.h). The
 * queue's scanner thread runs scan_chunk: jsonscan and its callbacks (records, list items,
 * DeltaFIFO adds, watch rv), on the [scan] fields of reflector_impl.h. A transfer's on_done
 * flushes the queue before the list / watch rules read them; io_detach cancels it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reflector_impl.h"

#define ERRBODY_MAX (64 * 1024)
_Static_assert(RV_SIZE == KINF_SCAN_MAX_META + 1, "an rv the scanner accepts must fit");

static char *dup_opt(const char *s)
{
    return (s && s[0]) ? strdup(s) : NULL;
}

double refl_now(kinf_reflector *r)
{
    return r->tr.ops->now(r->tr.impl);
}

kinf_reflector *kinf_reflector_new(const kinf_transport *transport, kinf_fifo *fifo,
                                   const kinf_reflector_config *cfg, kinf_err *err, char *errbuf,
                                   size_t errlen)
{
    kinf_reflector *r;
    kinf_scan_options so;

    if (transport == NULL || transport->ops == NULL || fifo == NULL || cfg == NULL ||
        cfg->path == NULL || cfg->path[0] != '/') {
        kinf_errmsg(errbuf, errlen,
                    "reflector needs a transport, a fifo and a path starting with /");
        *err = KINF_EINVAL;
        return NULL;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        goto nomem;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        r = NULL;
        goto nomem;
    }
    r->path = strdup(cfg->path);
    r->label_selector = dup_opt(cfg->label_selector);
    r->field_selector = dup_opt(cfg->field_selector);
    if (r->path == NULL || (cfg->label_selector && cfg->label_selector[0] && !r->label_selector) ||
        (cfg->field_selector && cfg->field_selector[0] && !r->field_selector))
        goto nomem;
    r->watch_list = cfg->watch_list;
    r->strip = cfg->strip_managed_fields;
    r->reuse_known = cfg->reuse_known;
    r->metadata_only = cfg->metadata_only;
    r->gzip = cfg->gzip;
    r->page_size = cfg->page_size ? cfg->page_size : 500;
    r->max_object = cfg->max_object_bytes ? cfg->max_object_bytes : KINF_SCAN_DEFAULT_MAX_OBJECT;
    r->idle_timeout = cfg->idle_timeout > 0 ? cfg->idle_timeout : 90;
    r->watch_timeout = cfg->watch_timeout > 0 ? cfg->watch_timeout : 300;
    kinf_backoff_init(&r->backoff, cfg->backoff_initial > 0 ? cfg->backoff_initial : 0.8,
                      cfg->backoff_max > 0 ? cfg->backoff_max : 30);
    /* From the OS, not from the clock: reflectors made together must not draw alike. */
    r->rng = kinf_rand_seed();
    kinf_map_init(&r->initial_keys);
    /* One scanner per kind of body, made once: begin_query resets the one it uses. */
    memset(&so, 0, sizeof(so));
    so.on_item = on_list_item;
    so.on_list_end = on_list_end;
    so.ud = r;
    so.flags = KINF_SCAN_INJECT_KIND | (r->strip ? KINF_SCAN_STRIP_MANAGED_FIELDS : 0u);
    so.max_object_bytes = r->max_object;
    r->list_scanner = kinf_scanner_new(KINF_SCAN_LIST, &so, err);
    memset(&so, 0, sizeof(so));
    so.on_item = on_watch_item;
    so.ud = r;
    so.flags = r->strip ? KINF_SCAN_STRIP_MANAGED_FIELDS : 0u;
    so.max_object_bytes = r->max_object;
    r->watch_scanner = kinf_scanner_new(KINF_SCAN_WATCH, &so, err);
    if (r->list_scanner == NULL || r->watch_scanner == NULL)
        goto nomem;
    r->scanner = r->list_scanner;
    r->tr = *transport;
    r->tr.ops->retain(r->tr.impl);
    r->fifo = kinf_fifo_ref(fifo);
    atomic_init(&r->scan_failed, 0);
    atomic_init(&r->log_pending, 0);
    r->st.phase = "stopped";
    *err = KINF_OK;
    return r;
nomem:
    if (r != NULL) {
        kinf_scanner_free(r->list_scanner);
        kinf_scanner_free(r->watch_scanner);
        free(r->path);
        free(r->label_selector);
        free(r->field_selector);
        pthread_mutex_destroy(&r->mu);
        free(r);
    }
    kinf_errmsg(errbuf, errlen, "out of memory");
    *err = KINF_ENOMEM;
    return NULL;
}

/* ---- status (any thread) ---- */

void kinf_reflector_status_get(kinf_reflector *r, kinf_reflector_status *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}

void set_phase(kinf_reflector *r, const char *phase)
{
    pthread_mutex_lock(&r->mu);
    r->st.phase = phase;
    pthread_mutex_unlock(&r->mu);
}

/* ---- start / stop ---- */

kinf_err kinf_reflector_start(kinf_reflector *r)
{
    kinf_err err = KINF_OK;
    pthread_mutex_lock(&r->mu);
    if (!r->attached) {
        /* The I/O thread does not know r yet: resetting its state here is race-free. */
        r->phase = PH_WAIT;
        r->next = NEXT_LIST;
        r->need_list = 1;
        r->watch_list_failed = 0; /* a fresh start tries WatchList again */
        r->due = 0;
        r->st.running = 1;
        r->st.phase = "listing";
        r->attached = 1;
        pthread_mutex_unlock(&r->mu);
        err = r->tr.ops->attach(r->tr.impl, r);
        pthread_mutex_lock(&r->mu);
        if (err != KINF_OK) {
            r->attached = 0;
            r->st.running = 0;
            r->st.phase = "stopped";
        }
    }
    pthread_mutex_unlock(&r->mu);
    return err;
}

void kinf_reflector_stop(kinf_reflector *r)
{
    int was;
    pthread_mutex_lock(&r->mu);
    was = r->attached;
    r->attached = 0;
    pthread_mutex_unlock(&r->mu);
    if (!was)
        return;
    r->tr.ops->detach(r->tr.impl, r);
    pthread_mutex_lock(&r->mu);
    r->st.running = 0;
    r->st.phase = "stopped";
    pthread_mutex_unlock(&r->mu);
}

void drop_items(kinf_reflector *r)
{
    kinf_map_free(&r->initial_keys); /* before the records that own its keys */
    kinf_map_init(&r->initial_keys);
    kinf_objects_free(r->items, r->nitems);
    r->items = NULL;
    r->nitems = r->capitems = 0;
}

kinf_err items_room(kinf_reflector *r)
{
    if (r->nitems == r->capitems) {
        size_t cap = r->capitems ? r->capitems * 2 : 512;
        kinf_object **grown = realloc(r->items, cap * sizeof(*grown));
        if (grown == NULL)
            return KINF_ENOMEM;
        r->items = grown;
        r->capitems = cap;
    }
    return KINF_OK;
}

void kinf_reflector_free(kinf_reflector *r)
{
    if (r == NULL)
        return;
    kinf_reflector_stop(r);
    drop_items(r);
    free(r->continue_token);
    free(r->early_continue);
    free(r->requested_continue);
    free(r->pub_token);
    free(r->errbody);
    kinf_scanner_free(r->list_scanner);
    kinf_scanner_free(r->watch_scanner);
    kinf_fifo_unref(r->fifo);
    r->tr.ops->release(r->tr.impl);
    free(r->path);
    free(r->label_selector);
    free(r->field_selector);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* ---- helpers (I/O thread) ---- */

/* Waits before `next`: the backoff manager's next step, at least retry_after. */
void schedule_backoff(kinf_reflector *r, next_t next, double retry_after)
{
    double now = refl_now(r), d = kinf_backoff_next(&r->backoff, now);
    if (retry_after > d)
        d = retry_after > 3600 ? 3600 : retry_after;
    r->phase = PH_WAIT;
    r->next = next;
    r->due = now + d;
    if (next == NEXT_LIST)
        r->need_list = 1;
    set_phase(r, "backoff");
}

void schedule_now(kinf_reflector *r, next_t next)
{
    r->phase = PH_WAIT;
    r->next = next;
    r->due = 0;
    if (next == NEXT_LIST)
        r->need_list = 1;
}

/* A list that is due goes through WatchList (client-go: every ListAndWatch tries it first). */
int use_watch_list(const kinf_reflector *r)
{
    return r->watch_list && !r->watch_list_failed;
}

char *dup_span(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s != NULL) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* A record keeps uid and resourceVersion as C strings: one holding a NUL byte (\u0000, which no
 * API server sends) would be cut and differ from the object's JSON, so the object is refused. */
int nul_free_meta(const kinf_scan_item *item)
{
    return memchr(item->meta.uid.ptr, '\0', item->meta.uid.len) == NULL &&
           memchr(item->meta.resource_version.ptr, '\0', item->meta.resource_version.len) == NULL;
}

int wrong_kind(kinf_reflector *r, const kinf_scan_item *item, const char *what)
{
    static const char want[] = KINF_METADATA_KIND;
    int n = item->kind.len > 64 ? 64 : (int)item->kind.len;
    if (!r->metadata_only ||
        (item->kind.len == sizeof(want) - 1 && memcmp(item->kind.ptr, want, sizeof(want) - 1) == 0))
        return 0;
    /* The kind is the server's text: record_error cleans what reaches status() and logs. */
    snprintf(r->scan_msg, sizeof(r->scan_msg),
             "%s is %s%.*s%s, not a " KINF_METADATA_KIND
             " (the server ignored the metadata-only Accept)",
             what, n ? "a \"" : "an object without kind", n, item->kind.ptr, n ? "\"" : "");
    return 1;
}

void parse_errbody(kinf_reflector *r, kinf_status *st)
{
    memset(st, 0, sizeof(*st));
    if (r->errbody != NULL && r->errlen > 0)
        (void)kinf_status_parse(r->errbody, r->errlen, st);
    if (st->code == 0)
        st->code = (int)r->http_code;
}

void query_start(kinf_query *q, const kinf_reflector *r)
{
    kinf_query_init(q, r->path);
    if (r->label_selector)
        kinf_query_param(q, "labelSelector", r->label_selector);
    if (r->field_selector)
        kinf_query_param(q, "fieldSelector", r->field_selector);
}

/* ---- the scanner thread ---- */

/* The next bytes of r's 2xx body (queue callback). */
static void scan_chunk(void *target, const char *buf, size_t len)
{
    kinf_reflector *r = target;
    kinf_err err;

    if (r->scan_err != KINF_OK)
        return; /* the transfer is being aborted: the rest of the body is not looked at */
    err = kinf_scanner_feed(r->scanner, buf, len);
    if (err != KINF_OK) {
        r->scan_err = err;
        /* Our callbacks say why they refused an item (an ERROR event, an event out of order,
         * an item without a name): keep that rather than the scanner's "callback failed". */
        if (!r->scan_msg[0])
            snprintf(r->scan_msg, sizeof(r->scan_msg), "%s", kinf_scanner_error(r->scanner));
        atomic_store_explicit(&r->scan_failed, 1, memory_order_relaxed);
        /* A complete bad line (or an ERROR event) on a watch that then goes quiet must be acted
         * on now, not when the next byte or the idle timeout comes (kinf_reflector_io_tick). */
        r->tr.ops->wake(r->tr.impl);
    } else if (r->scanner == r->list_scanner) {
        publish_continue(r);
    }
    if (r->pub_any) {
        /* Watch status once per chunk, not per event: one lock and one rv copy. */
        double t = kinf_now();
        pthread_mutex_lock(&r->mu);
        r->st.events += r->pub_events;
        r->st.last_event_time = t;
        snprintf(r->st.resource_version, sizeof(r->st.resource_version), "%s", r->last_rv);
        pthread_mutex_unlock(&r->mu);
        r->pub_events = 0;
        r->pub_any = 0;
    }
}

/* ---- transfer callbacks (I/O thread) ---- */

static void on_response(void *ud, long code, double retry_after)
{
    kinf_reflector *r = ud;
    r->http_code = code;
    r->retry_after = retry_after;
    /* A plain watch the server accepted ends a run of failures (a WatchList's ends at its end
     * bookmark, a list's when it completes). No byte of this body is queued yet: initial_phase
     * is the I/O thread's here. */
    if (r->phase == PH_WATCH && !r->initial_phase && code >= 200 && code < 300)
        note_success(r, "watch");
}

/* The next bytes of the response in progress: a non-2xx body is kept, bounded, for its Status;
 * a 2xx body goes to the scanner thread. Returns len, or 0 to abort the transfer (the body
 * already failed, or it could not be queued). */
static size_t on_body(void *ud, const char *data, size_t len)
{
    kinf_reflector *r = ud;
    kinf_err err;

    pthread_mutex_lock(&r->mu);
    r->st.bytes += len;
    pthread_mutex_unlock(&r->mu);
    if (r->http_code < 200 || r->http_code >= 300) {
        size_t room = ERRBODY_MAX - r->errlen;
        if (r->errbody == NULL && (r->errbody = malloc(ERRBODY_MAX + 1)) == NULL)
            return len; /* the status code alone will do */
        if (len < room)
            room = len;
        memcpy(r->errbody + r->errlen, data, room);
        r->errlen += room;
        return len;
    }
    /* Scanned on the scanner thread (scan_chunk); a failure seen there aborts the transfer at
     * the next chunk (or the transfer ends first: on_done waits for the scan either way). */
    if (atomic_load_explicit(&r->scan_failed, memory_order_relaxed))
        return 0;
    err = r->tr.ops->queue(r->tr.impl, scan_chunk, r, data, len);
    if (err != KINF_OK) {
        r->pipe_err = err;
        return 0;
    }
    return len;
}

/* The transfer in progress ended with `result`; its whole body has been scanned. */
static void transfer_done(kinf_reflector *r, kinf_xfer_result result)
{
    if (r->pipe_err != KINF_OK && r->scan_err == KINF_OK) {
        r->scan_err = r->pipe_err;
        snprintf(r->scan_msg, sizeof(r->scan_msg), "out of memory queueing the response body");
    }
    if (r->phase == PH_LIST)
        list_done(r, result);
    else if (r->phase == PH_WATCH)
        watch_done(r, result);
}

static void on_done(void *ud, kinf_xfer_result result, const char *msg)
{
    kinf_reflector *r = ud;
    r->xfer = NULL;
    snprintf(r->xfer_msg, sizeof(r->xfer_msg), "%s", msg ? msg : "");
    if (pipelined_next_page(r, result))
        return;
    /* The body's last bytes may still be queued: the [scan] fields are ours after this. */
    r->tr.ops->flush(r->tr.impl, r);
    transfer_done(r, result);
}

kinf_xfer *new_transfer(kinf_reflector *r, const char *path_query, int list)
{
    static const kinf_xfer_callbacks cb_template = {NULL, on_response, on_body, on_done};
    kinf_xfer_callbacks cb = cb_template;
    kinf_xfer_request req;
    char msg[512];
    kinf_xfer *x;

    memset(&req, 0, sizeof(req));
    req.path_query = path_query;
    req.idle_timeout = r->idle_timeout;
    if (r->metadata_only)
        req.accept = list ? KINF_ACCEPT_METADATA_LIST : KINF_ACCEPT_METADATA_WATCH;
    req.gzip = list && r->gzip;
    cb.ud = r;
    x = r->tr.ops->get(r->tr.impl, &req, &cb, msg, sizeof(msg));
    if (x == NULL)
        record_error(r, 0, NULL, "%s", msg);
    return x;
}

void started_transfer(kinf_reflector *r, kinf_xfer *x)
{
    r->xfer = x;
    r->http_code = 0;
    r->retry_after = 0;
    r->errlen = 0;
    r->pipe_err = KINF_OK;
}

kinf_err begin_query(kinf_reflector *r, kinf_query *q, kinf_scan_mode mode)
{
    kinf_xfer *x;

    if (q->s == NULL) {
        record_error(r, 0, NULL, "%s %s: out of memory", mode == KINF_SCAN_LIST ? "list" : "watch",
                     r->path);
        return KINF_ENOMEM;
    }
    kinf_scanner_reset(r->scanner, mode);
    /* No byte of this transfer is queued yet and the previous one was flushed or cancelled:
     * the [scan] fields are ours here. */
    r->scan_err = KINF_OK;
    r->scan_msg[0] = '\0';
    r->ev_error = 0;
    r->pub_events = 0;
    r->pub_any = 0;
    r->early_page_failed = 0;
    free(r->requested_continue);
    r->requested_continue = NULL;
    free(r->pub_token);
    r->pub_token = NULL;
    r->scan_page = ++r->io_page;
    free(take_early_continue(r)); /* published after the last on_done looked */
    atomic_store_explicit(&r->scan_failed, 0, memory_order_relaxed);
    started_transfer(r, NULL);
    x = new_transfer(r, q->s, mode == KINF_SCAN_LIST);
    kinf_query_free(q);
    if (x == NULL)
        return KINF_EIO;
    r->xfer = x;
    return KINF_OK;
}

/* ---- transport entry points (I/O thread) ---- */

double kinf_reflector_io_tick(kinf_reflector *r, double now)
{
    if (r->phase == PH_WATCH && r->xfer != NULL &&
        atomic_load_explicit(&r->scan_failed, memory_order_relaxed)) {
        /* The scanner refused the watch's body (a bad line, an ERROR event): the transfer ends
         * here, as a failed one, and the watch rules decide what comes next (relist, backoff). */
        r->tr.ops->abort(r->tr.impl, r->xfer);
        r->xfer = NULL;
        snprintf(r->xfer_msg, sizeof(r->xfer_msg), "ended after a bad event");
        r->tr.ops->flush(r->tr.impl, r); /* the [scan] fields are ours after this */
        transfer_done(r, KINF_XFER_FAILED);
        now = refl_now(r);
    }
    if (r->phase != PH_WAIT)
        return now + 1.0;
    if (now < r->due)
        return r->due;
    if (r->need_list && !use_watch_list(r))
        start_list(r);
    else
        start_watch(r);
    return now + 1.0;
}

void kinf_reflector_io_detach(kinf_reflector *r)
{
    r->tr.ops->abort(r->tr.impl, r->xfer);
    r->xfer = NULL;
    r->tr.ops->cancel(r->tr.impl, r); /* the [scan] fields are ours after this */
    drop_items(r);
    r->phase = PH_IDLE;
}
