/*
 * reflector_list.c - the reflector's lists: paginated pages, pipelined pages, an expired
 * continuation, the consistent-read retry, and the FIFO replace that ends a list (client-go's
 * pager and relistResourceVersion). Fields and threads: reflector_impl.h.
 *
 * List resourceVersion (relistResourceVersion): "" after a 410/too-large, "0" before the first
 * list, else the last synced rv. Pages carry limit=page_size when the rv is "" or "0" or the
 * server paginated before (client-go's pager rules); continuation pages carry no rv. A 410 on
 * a continuation page: one full list (no limit) at the first page's rv (FullListIfExpired). A
 * 410 or "too large resource version" on the first page: once, at once, with rv "".
 *
 * Pipelined pages: when a list page's transfer ends and the scanner has already seen the page's
 * metadata.continue (API servers send it before the items; publish_continue hands it over under
 * mu, tagged with the page's number), on_done asks for the next page at once instead of
 * waiting for the scanner to finish this one: it queues a marker (page_end) behind the page's
 * last bytes and starts the next transfer without touching the [scan] fields. The queue keeps
 * the order (page N's bytes, page_end, page N+1's bytes); page_end, on the scanner thread,
 * finishes page N as list_done would and resets the scanner for page N+1. Without this every
 * page boundary drained the pipeline: the I/O thread waited for the scanner, then the scanner
 * waited for the next page's first bytes. If page N turns out bad in page_end (its end is
 * malformed, or a second "metadata" member changed the token after it was used), page N+1's
 * transfer is aborted and list_done reports page N's error (early_page_failed): the list fails
 * and starts over, as it would have unpipelined; the requests made hold one more, for page N+1.
 * A transport without a scanner thread (a test's) runs page_end at once: the page was scanned
 * as its bytes came.
 *
 * Threads: on_list_item, on_list_end, publish_continue and page_end on the scanner thread; the
 * rest on the I/O thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reflector_impl.h"

/* The record for an object of a list (or of a WatchList's initial events). With reuse_known,
 * the FIFO's known store's record when it holds this key at this resourceVersion: a relist of
 * an unchanged cache then holds one copy of each object, not two (client-go holds two). The
 * store's records are what a list produces (same scan options, no transform: the informer sets
 * reuse_known only then), and one resourceVersion is one content. */
kinf_object *list_record(kinf_reflector *r, const char *json, size_t len, const kinf_meta *meta,
                         kinf_err *err)
{
    kinf_store *known = r->reuse_known ? kinf_fifo_known(r->fifo) : NULL;
    const kinf_str *ns = &meta->namespace_, *rv = &meta->resource_version;
    char key[512];
    size_t klen = (ns->len ? ns->len + 1 : 0) + meta->name.len;

    if (known != NULL && rv->len > 0 && klen <= sizeof(key)) {
        kinf_object *old;
        if (ns->len) {
            memcpy(key, ns->ptr, ns->len);
            key[ns->len] = '/';
        }
        memcpy(key + (ns->len ? ns->len + 1 : 0), meta->name.ptr, meta->name.len);
        old = kinf_store_get(known, key, klen);
        if (old != NULL) {
            if (strlen(old->resource_version) == rv->len &&
                memcmp(old->resource_version, rv->ptr, rv->len) == 0)
                return old; /* the store's reference becomes ours */
            kinf_object_unref(old);
        }
    }
    return kinf_object_new(json, len, meta, err);
}

/* An rv as the reflector keeps it: it fits the buffers (the scanner caps it at
 * KINF_SCAN_MAX_META) and holds no NUL (it goes into a query string and status()). */
static int rv_ok(kinf_str rv)
{
    return rv.len < RV_SIZE && memchr(rv.ptr, '\0', rv.len) == NULL;
}

/* ---- the scanner thread ---- */

kinf_err on_list_item(void *ud, const kinf_scan_item *item)
{
    kinf_reflector *r = ud;
    kinf_err err;
    kinf_object *obj;

    if (item->meta.name.len == 0) {
        snprintf(r->scan_msg, sizeof(r->scan_msg), "list item #%zu has no metadata.name",
                 r->nitems + 1);
        return KINF_ENOKEY;
    }
    if (!nul_free_meta(item)) {
        snprintf(r->scan_msg, sizeof(r->scan_msg),
                 "list item #%zu: metadata.uid or resourceVersion holds a NUL byte", r->nitems + 1);
        return KINF_EPARSE;
    }
    if (r->metadata_only) {
        char what[48];
        snprintf(what, sizeof(what), "list item #%zu", r->nitems + 1);
        if (wrong_kind(r, item, what))
            return KINF_EPARSE;
    }
    if (items_room(r) != KINF_OK)
        return KINF_ENOMEM;
    obj = list_record(r, item->json, item->json_len, &item->meta, &err);
    if (obj == NULL)
        return err;
    r->items[r->nitems++] = obj;
    return KINF_OK;
}

kinf_err on_list_end(void *ud, const kinf_scan_list_end *end)
{
    kinf_reflector *r = ud;
    if (end->is_status) {
        snprintf(r->scan_msg, sizeof(r->scan_msg), "server sent a Status instead of a list: %.200s",
                 end->status ? end->status->message : "");
        return KINF_EPARSE;
    }
    if (!end->has_items && !end->items_null) {
        /* An object that is not a list (no "items" array: {}, a single object, "items" an
         * object) would replace the cache with nothing: every object deleted. "items": null
         * is the one empty form besides [] (client-go decodes it as empty). */
        snprintf(r->scan_msg, sizeof(r->scan_msg),
                 "the response is not a list: no \"items\" array (kind \"%.*s\")",
                 (int)(end->kind.len < 64 ? end->kind.len : 64), end->kind.ptr);
        return KINF_EPARSE;
    }
    if (!rv_ok(end->resource_version) || memchr(end->continue_.ptr, '\0', end->continue_.len)) {
        snprintf(r->scan_msg, sizeof(r->scan_msg),
                 "list metadata.resourceVersion or continue holds a NUL byte");
        return KINF_EPARSE;
    }
    memcpy(r->page_rv, end->resource_version.ptr, end->resource_version.len);
    r->page_rv[end->resource_version.len] = '\0';
    free(r->continue_token);
    r->continue_token = NULL;
    if (end->continue_.len) {
        r->continue_token = dup_span(end->continue_.ptr, end->continue_.len);
        if (r->continue_token == NULL)
            return KINF_ENOMEM;
    }
    return KINF_OK;
}

/* After each chunk of a list page: keeps early_continue equal to what the scanner knows of the
 * page's continue token (kinf_scanner_list_continue), for pipelined_next_page. Mirroring the
 * scanner rather than publishing once makes what on_done finds depend on the bytes scanned,
 * not on how they were chunked. */
void publish_continue(kinf_reflector *r)
{
    kinf_str tok;
    char *copy = NULL, *mine = NULL;
    /* A NUL byte: on_list_end refuses the page; publish nothing. */
    int have = kinf_scanner_list_continue(r->scanner, &tok) && !memchr(tok.ptr, '\0', tok.len);

    if (have ? r->pub_token != NULL && strlen(r->pub_token) == tok.len &&
                   memcmp(r->pub_token, tok.ptr, tok.len) == 0
             : r->pub_token == NULL)
        return; /* unchanged */
    if (have && ((mine = dup_span(tok.ptr, tok.len)) == NULL ||
                 (copy = dup_span(tok.ptr, tok.len)) == NULL)) {
        free(mine); /* out of memory: nothing published (on_done takes the flushed path) */
        mine = NULL;
    }
    free(r->pub_token);
    r->pub_token = mine;
    pthread_mutex_lock(&r->mu);
    free(r->early_continue);
    r->early_continue = copy;
    r->early_page = r->scan_page;
    pthread_mutex_unlock(&r->mu);
}

/* The marker pipelined_next_page queues behind a list page's last bytes. Finishes the page as
 * list_done would (on_list_end: page_rv, continue_token) and readies the scanner for the next
 * page. A page that fails here fails the list: scan_failed aborts the next page's transfer and
 * list_done reports this page's error. */
static void page_end(void *target, const char *buf, size_t len)
{
    kinf_reflector *r = target;
    kinf_err err = r->scan_err;

    (void)buf;
    (void)len;
    if (err == KINF_OK) {
        err = kinf_scanner_finish(r->scanner);
        if (err != KINF_OK && !r->scan_msg[0])
            snprintf(r->scan_msg, sizeof(r->scan_msg), "%s", kinf_scanner_error(r->scanner));
    }
    if (err == KINF_OK &&
        (r->continue_token == NULL || strcmp(r->continue_token, r->requested_continue) != 0)) {
        err = KINF_EPARSE;
        snprintf(r->scan_msg, sizeof(r->scan_msg),
                 "the list's metadata.continue changed after the next page was asked for with "
                 "it (a second \"metadata\" member)");
    }
    free(r->requested_continue);
    r->requested_continue = NULL;
    if (err != KINF_OK) {
        r->scan_err = err;
        r->early_page_failed = 1;
        atomic_store_explicit(&r->scan_failed, 1, memory_order_relaxed);
        return;
    }
    kinf_scanner_reset(r->scanner, KINF_SCAN_LIST);
    free(r->pub_token);
    r->pub_token = NULL;
    r->scan_page++;
}

/* ---- the I/O thread ---- */

/* The continue token the scanner published for the page being received, or NULL. */
char *take_early_continue(kinf_reflector *r)
{
    char *token;
    pthread_mutex_lock(&r->mu);
    token = r->early_continue;
    if (token != NULL && r->early_page != r->io_page) {
        free(token); /* published for an earlier page after its on_done looked */
        token = NULL;
    }
    r->early_continue = NULL;
    pthread_mutex_unlock(&r->mu);
    return token;
}

/* The first page of a list (or the unpaginated fallback). */
void start_list(kinf_reflector *r)
{
    kinf_query q;
    char limit[32];
    const char *rv;

    drop_items(r);
    free(r->continue_token);
    r->continue_token = NULL;
    if (!r->full_list) {
        rv = r->rv_unavailable ? "" : (r->last_rv[0] ? r->last_rv : "0");
        snprintf(r->list_rv, sizeof(r->list_rv), "%s", rv);
    }
    r->scanner = r->list_scanner;
    query_start(&q, r);
    if (r->list_rv[0] || r->full_list)
        kinf_query_param(&q, "resourceVersion", r->list_rv);
    if (!r->full_list &&
        (r->paginated || r->list_rv[0] == '\0' || strcmp(r->list_rv, "0") == 0)) {
        snprintf(limit, sizeof(limit), "%zu", r->page_size);
        kinf_query_param(&q, "limit", limit);
    }
    r->phase = PH_LIST;
    set_phase(r, "listing");
    if (begin_query(r, &q, KINF_SCAN_LIST) != KINF_OK)
        schedule_backoff(r, NEXT_LIST, 0);
}

static void page_query(kinf_query *q, const kinf_reflector *r, const char *token)
{
    char limit[32];
    query_start(q, r);
    snprintf(limit, sizeof(limit), "%zu", r->page_size);
    kinf_query_param(q, "limit", limit);
    kinf_query_param(q, "continue", token);
}

static void next_page(kinf_reflector *r)
{
    kinf_query q;
    page_query(&q, r, r->continue_token);
    r->paginated = 1;
    if (begin_query(r, &q, KINF_SCAN_LIST) != KINF_OK)
        schedule_backoff(r, NEXT_LIST, 0);
}

/* on_done of a list page: when the page ended well and the scanner already published its
 * continue token, asks for the next page now, with page_end queued between the two pages (see
 * the top of the file). Returns 0 when on_done must take the ordinary path (flush, list_done). */
int pipelined_next_page(kinf_reflector *r, kinf_xfer_result result)
{
    char *token = take_early_continue(r);
    kinf_xfer *x;
    kinf_query q;

    if (token == NULL)
        return 0;
    if (r->phase != PH_LIST || result != KINF_XFER_OK || r->http_code < 200 ||
        r->http_code >= 300 || r->pipe_err != KINF_OK || r->full_list ||
        atomic_load_explicit(&r->scan_failed, memory_order_relaxed)) {
        free(token);
        return 0;
    }
    page_query(&q, r, token);
    if (q.s == NULL) {
        free(token);
        return 0;
    }
    /* page_end reads it; it runs after the queue call below (the queue's mutex orders the
     * two, or the call itself runs it). */
    r->requested_continue = token;
    if (r->tr.ops->queue(r->tr.impl, page_end, r, "", 1) != KINF_OK) {
        r->requested_continue = NULL;
        free(token);
        kinf_query_free(&q);
        return 0;
    }
    r->page_http_code = r->http_code;
    r->paginated = 1;
    r->io_page++; /* page_end moves scan_page on likewise */
    started_transfer(r, NULL);
    x = new_transfer(r, q.s, 1);
    kinf_query_free(&q);
    if (x == NULL) {
        r->tr.ops->flush(r->tr.impl, r); /* page_end has run: the [scan] fields are ours */
        drop_items(r);
        schedule_backoff(r, NEXT_LIST, 0);
        return 1;
    }
    r->xfer = x;
    return 1;
}

static void list_complete(kinf_reflector *r)
{
    kinf_err err = kinf_fifo_replace(r->fifo, r->items, r->nitems, r->page_rv);
    drop_items(r);
    if (err != KINF_OK) {
        record_error(r, 0, NULL, "replacing the queue's content failed: %s", kinf_strerror(err));
        schedule_backoff(r, NEXT_LIST, 0);
        return;
    }
    snprintf(r->last_rv, sizeof(r->last_rv), "%s", r->page_rv);
    r->rv_unavailable = 0;
    r->retried_unavailable = 0;
    r->full_list = 0;
    r->need_list = 0;
    r->watch_list_failed = 0;
    pthread_mutex_lock(&r->mu);
    if (r->st.lists++ > 0)
        r->st.relists++;
    r->st.listed = 1;
    snprintf(r->st.resource_version, sizeof(r->st.resource_version), "%s", r->last_rv);
    note_success_locked(r, "list");
    pthread_mutex_unlock(&r->mu);
    start_watch(r);
}

static int is_expired(const kinf_status *s, long code)
{
    return code == 410 || strcmp(s->reason, "Expired") == 0 || strcmp(s->reason, "Gone") == 0;
}

/* A page's body failed (scan_err, scan_msg): the list starts over after a backoff. */
static void bad_list_body(kinf_reflector *r, long http_code)
{
    record_error(r, (int)http_code, NULL, "list %s: bad response: %s", r->path,
                 r->scan_msg[0] ? r->scan_msg : kinf_strerror(r->scan_err));
    drop_items(r);
    r->full_list = 0;
    schedule_backoff(r, NEXT_LIST, 0);
}

void list_done(kinf_reflector *r, kinf_xfer_result result)
{
    kinf_status st;
    /* A continuation page failed (client-go's pager: Continue != "", whatever the earlier pages
     * held: with selectors a page can be empty and still carry a token). */
    int continuation = r->continue_token != NULL && !r->full_list;

    if (r->early_page_failed) {
        /* The page before this one failed in page_end: its error is the list's. */
        bad_list_body(r, r->page_http_code);
        return;
    }
    if (result != KINF_XFER_OK && r->scan_err == KINF_OK) {
        record_error(r, 0, NULL, "list %s: %s", r->path, r->xfer_msg);
        drop_items(r);
        r->full_list = 0; /* as any failed list: the next one starts over (client-go's pager
                             returns the full list's error to the reflector) */
        schedule_backoff(r, NEXT_LIST, 0);
        return;
    }
    if (r->http_code < 200 || r->http_code >= 300) {
        parse_errbody(r, &st);
        record_error(r, st.code, st.reason, "list %s: %ld %s", r->path, r->http_code,
                     st.message[0] ? st.message : "(no message)");
        if (continuation && is_expired(&st, r->http_code)) {
            /* pager FullListIfExpired: the snapshot expired between pages. */
            r->full_list = 1;
            schedule_now(r, NEXT_LIST);
        } else if ((is_expired(&st, r->http_code) || st.too_large_resource_version) &&
                   !r->retried_unavailable) {
            /* The rv we listed at is gone or not there yet: a consistent read, at once. */
            r->full_list = 0;
            r->rv_unavailable = 1;
            r->retried_unavailable = 1;
            schedule_now(r, NEXT_LIST);
        } else {
            r->full_list = 0;
            schedule_backoff(r, NEXT_LIST,
                             (r->http_code == 429 || r->http_code == 503) ? r->retry_after : 0);
        }
        drop_items(r);
        return;
    }
    if (r->scan_err == KINF_OK) {
        kinf_err err = kinf_scanner_finish(r->scanner);
        if (err != KINF_OK) {
            r->scan_err = err;
            if (!r->scan_msg[0])
                snprintf(r->scan_msg, sizeof(r->scan_msg), "%s", kinf_scanner_error(r->scanner));
        }
    }
    if (r->scan_err != KINF_OK) {
        bad_list_body(r, r->http_code);
        return;
    }
    if (r->continue_token != NULL && !r->full_list) {
        next_page(r);
        return;
    }
    list_complete(r);
}
