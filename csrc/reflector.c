/*
 * reflector.c - list + watch into a DeltaFIFO (contract in reflector.h).
 *
 * The state machine, all on the client's I/O thread:
 *
 *   WAIT(due, next) --due--> LIST page --continue--> LIST page ... --last--> replace --> WATCH
 *   WATCH --server timeout / dropped after events--> WATCH (same rv, no relist)
 *   WATCH --ERROR 429, 429 / connection refused on open--> backoff --> WATCH
 *   WATCH --ERROR 410, other errors, malformed line, very short watch--> backoff --> LIST
 *   LIST  --410 / "too large resource version"--> LIST at once with resourceVersion=""
 *   LIST continuation page --410--> one full list (no limit) at the first page's rv
 *   LIST  --other failure--> backoff --> LIST
 *
 * List resourceVersion (relistResourceVersion): "" after a 410/too-large, "0" before the first
 * list, else the last synced rv. Pages carry limit=page_size when the rv is "" or "0" or the
 * server paginated before (client-go's pager rules); continuation pages carry no rv.
 * Watch rv: every event that was applied advances it (a failed one does not). WatchList
 * (watch_list): every LIST that is due (need_list), the first and each relist, is a WatchList
 * stream instead, as client-go's ListAndWatch tries it first each time; its initial events
 * build a temporary state (items + initial_keys: ADDED / MODIFIED set a key, DELETED removes
 * it, as client-go's temporaryStore) that replaces the FIFO's content at the
 * initial-events-end bookmark, and the stream goes on as the WATCH. One that fails before that
 * bookmark falls back to the paginated LIST (watch_list_failed) until a list completes.
 * Backoff: initial 0.8 s, x2 per use, cap 30 s, jitter 1.0 (d + rand*d), reset after 2 minutes
 * without a use; Retry-After on 429/503 lengthens the wait to at least what the server asked.
 *
 * Two threads. The state machine, curl and the write callback run on the client's I/O thread;
 * the write callback only copies a 2xx body into the client's pipe (pipe.h). The pipe's scanner
 * thread runs scan_chunk: jsonscan and its callbacks (records, list items, DeltaFIFO adds,
 * watch rv). The fields marked [scan] below belong to the scanner thread while a transfer is in
 * flight and to the I/O thread otherwise: the I/O thread touches them only before the transfer
 * starts (no byte queued yet) and after kinf_pipe_flush (io_done) or kinf_pipe_cancel
 * (io_detach), whose mutex orders the accesses. While a transfer runs, the one thing the I/O
 * thread reads is the atomic scan_failed, to abort a transfer whose body is bad.
 *
 * Pipelined pages: when a list page's transfer ends and the scanner has already seen the page's
 * metadata.continue (API servers send it before the items; publish_continue hands it over under
 * mu, tagged with the page's number), io_done asks for the next page at once instead of waiting
 * for the scanner to finish this one: it queues a marker (page_end) behind the page's last bytes
 * and starts the next transfer without touching the [scan] fields. The pipe keeps the order
 * (page N's bytes, page_end, page N+1's bytes); page_end, on the scanner thread, finishes page N
 * as list_done would and resets the scanner for page N+1. Without this every page boundary
 * drained the pipeline: the I/O thread waited for the scanner, then the scanner waited for the
 * next page's first bytes. If page N turns out bad in page_end (its end is malformed, or a
 * second "metadata" member changed the token after it was used), page N+1's transfer is aborted
 * and list_done reports page N's error (early_page_failed): the list fails and starts over, as
 * it would have unpipelined; the requests made hold one more, for page N+1.
 *
 * Test mode (kinf_reflector_test_*, reflector.h): begin_transfer records the request instead of
 * making it, and the test's bytes go through take_body and scan_chunk on its own thread; the
 * rest (list_done, watch_done, the FIFO) is the code above, unchanged, pipelined pages included
 * (page_end runs at once: the page was scanned as its bytes came).
 */
#include "reflector.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonscan.h"
#include "map.h"

#define ERRBODY_MAX (64 * 1024)
#define RECV_BUFFER (128L * 1024)
#define VERY_SHORT_WATCH 1.0
#define BACKOFF_RESET 120.0
#define RV_SIZE KINF_REFLECTOR_RV_SIZE
_Static_assert(RV_SIZE == KINF_SCAN_MAX_META + 1, "an rv the scanner accepts must fit");

typedef enum { PH_IDLE, PH_WAIT, PH_LIST, PH_WATCH } phase_t;
typedef enum { NEXT_LIST, NEXT_WATCH } next_t;

struct kinf_reflector {
    kinf_client *client;
    kinf_fifo *fifo;
    char *path, *label_selector, *field_selector;
    int watch_list, strip;
    size_t page_size, max_object;
    double idle_timeout, watch_timeout, backoff_initial, backoff_max;

    pthread_mutex_t mu;
    kinf_reflector_status st; /* [mu] */
    int attached;             /* [mu] from the caller's side: start/stop */

    /* Everything below: I/O thread only, except [scan] (see the top of the file). */
    phase_t phase;
    next_t next;
    double due;
    CURL *easy;
    kinf_pipe *pipe;          /* the client's; immutable */
    kinf_scanner *scanner;    /* [scan] list_scanner or watch_scanner, for the transfer */
    kinf_scanner *list_scanner, *watch_scanner; /* immutable; their state is [scan] */
    long http_code;           /* of the transfer in progress, 0 until headers arrive */
    double retry_after;
    char *errbody;            /* non-2xx body, bounded */
    size_t errlen;
    kinf_err scan_err;        /* [scan] first error raised while scanning, or by our callbacks */
    char scan_msg[300];       /* [scan] */
    atomic_int scan_failed;   /* scan_err was set: the I/O thread aborts the transfer */
    kinf_err pipe_err;        /* the body could not be queued (out of memory) */
    char xfer_msg[300];       /* transport failure of the finished transfer (client's words) */

    /* list (and the WatchList's initial state) */
    int reuse_known;          /* immutable: see list_record */
    kinf_object **items;      /* [scan] */
    size_t nitems, capitems;  /* [scan] */
    kinf_map initial_keys;    /* [scan] WatchList: key -> index + 1 in items */
    char list_rv[RV_SIZE];    /* rv requested by the first page of this list */
    char page_rv[RV_SIZE];    /* [scan] rv the server reported (on_list_end) */
    char *continue_token;     /* [scan] while a pipelined page is in flight (page_end sets it) */
    char *early_continue;     /* [mu] a page's continue token, as soon as it was scanned */
    unsigned long early_page; /* [mu] the page it is of (scan_page) */
    unsigned long io_page;    /* the list page being received (counts pages) */
    unsigned long scan_page;  /* [scan] the list page being scanned */
    char *pub_token;          /* [scan] what publish_continue last published (NULL: nothing) */
    char *requested_continue; /* [scan] the token the pipelined next page was asked with */
    int early_page_failed;    /* [scan] the page before the one in flight failed in page_end */
    long page_http_code;      /* that page's status code */
    int full_list;            /* the continuation expired: one unpaginated list at list_rv */
    int paginated;            /* the server paginated a list before */
    int rv_unavailable;       /* next list with resourceVersion="" */
    int retried_unavailable;  /* the consistent-read retry was already made for this list */
    char last_rv[RV_SIZE];    /* [scan] */

    /* watch */
    double watch_started;
    unsigned long watch_events; /* [scan] */
    int initial_phase;        /* [scan] WatchList: collecting the initial objects */
    int need_list;            /* [scan] a list is due: set when one is scheduled, cleared when a
                               * list or a WatchList's initial state completes */
    int watch_list_failed;    /* a WatchList failed before its end bookmark: lists until one
                               * completes, then the next relist tries WatchList again */
    kinf_status ev_status;    /* [scan] */
    int ev_error;             /* [scan] */
    unsigned long pub_events; /* [scan] events of this chunk not yet in st.events */
    int pub_any;              /* [scan] this chunk had an event (bookmarks too) */

    /* backoff */
    double backoff, backoff_used_at;
    uint64_t rng;

    /* test seam (kinf_reflector_test_*): no client transfers, the test plays the server */
    int test_mode;
    char *test_query;         /* the request the reflector waits a response to */
};

static kinf_err on_list_item(void *ud, const kinf_scan_item *item);
static kinf_err on_list_end(void *ud, const kinf_scan_list_end *end);
static kinf_err on_watch_item(void *ud, const kinf_scan_item *item);

static double rand01(kinf_reflector *r)
{
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return (double)(r->rng >> 11) / (double)(1ULL << 53);
}

static char *dup_opt(const char *s)
{
    return (s && s[0]) ? strdup(s) : NULL;
}

kinf_reflector *kinf_reflector_new(kinf_client *client, kinf_fifo *fifo,
                                   const kinf_reflector_config *cfg, kinf_err *err, char *errbuf,
                                   size_t errlen)
{
    kinf_reflector *r;
    kinf_scan_options so;

    if (client == NULL || fifo == NULL || cfg == NULL || cfg->path == NULL || cfg->path[0] != '/') {
        kinf_errmsg(errbuf, errlen, "reflector needs a client, a fifo and a path starting with /");
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
    r->page_size = cfg->page_size ? cfg->page_size : 500;
    r->max_object = cfg->max_object_bytes ? cfg->max_object_bytes : KINF_SCAN_DEFAULT_MAX_OBJECT;
    r->idle_timeout = cfg->idle_timeout > 0 ? cfg->idle_timeout : 90;
    r->watch_timeout = cfg->watch_timeout > 0 ? cfg->watch_timeout : 300;
    r->backoff_initial = cfg->backoff_initial > 0 ? cfg->backoff_initial : 0.8;
    r->backoff_max = cfg->backoff_max > 0 ? cfg->backoff_max : 30;
    r->backoff = r->backoff_initial;
    kinf_map_init(&r->initial_keys);
    r->rng = (uint64_t)(uintptr_t)r ^ (uint64_t)(kinf_now() * 1e9) ^ 0x9e3779b97f4a7c15ULL;
    if (r->rng == 0)
        r->rng = 1;
    /* One scanner per kind of body, made once: begin_transfer resets the one it uses. */
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
    r->client = kinf_client_ref(client);
    r->pipe = kinf_client_pipe(client);
    r->fifo = kinf_fifo_ref(fifo);
    atomic_init(&r->scan_failed, 0);
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

static void set_phase(kinf_reflector *r, const char *phase)
{
    pthread_mutex_lock(&r->mu);
    r->st.phase = phase;
    pthread_mutex_unlock(&r->mu);
}

static void record_error(kinf_reflector *r, int code, const char *reason, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Makes s fit for a log line and status(), in place: control characters (C0, DEL, C1) become
 * spaces, bytes that are not valid UTF-8 become '?', and a sequence cut by truncation at the
 * end is dropped. Messages carry what the server sent (a Status message, an event type). */
static void clean_text(char *s)
{
    unsigned char *in = (unsigned char *)s, *out = in;
    while (*in) {
        unsigned c = *in, need, cp, i;
        if (c < 0x80) {
            *out++ = (c < 0x20 || c == 0x7f) ? ' ' : (unsigned char)c;
            in++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3, cp = c & 0x07;
        else
            need = 0, cp = 0;
        for (i = 1; need && i <= need; i++) {
            if ((in[i] & 0xC0) != 0x80)
                break;
            cp = (cp << 6) | (in[i] & 0x3F);
        }
        if (need && i > need &&
            !((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
              (cp >= 0xD800 && cp <= 0xDFFF))) {
            if (cp < 0xA0) {
                *out++ = ' '; /* C1 control */
            } else {
                memmove(out, in, need + 1);
                out += need + 1;
            }
            in += need + 1;
        } else if (need && in[i] == '\0' && i <= need) {
            break; /* cut by truncation */
        } else {
            *out++ = '?';
            in++;
        }
    }
    *out = '\0';
}

static void record_error(kinf_reflector *r, int code, const char *reason, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&r->mu);
    va_start(ap, fmt);
    vsnprintf(r->st.last_error, sizeof(r->st.last_error), fmt, ap);
    va_end(ap);
    clean_text(r->st.last_error);
    r->st.last_error_code = code;
    snprintf(r->st.last_error_reason, sizeof(r->st.last_error_reason), "%s", reason ? reason : "");
    clean_text(r->st.last_error_reason);
    r->st.last_error_time = kinf_now();
    r->st.errors++;
    pthread_mutex_unlock(&r->mu);
}

/* ---- start / stop ---- */

kinf_err kinf_reflector_start(kinf_reflector *r)
{
    kinf_err err = KINF_OK;
    pthread_mutex_lock(&r->mu);
    if (r->test_mode) {
        err = KINF_EINVAL;
    } else if (!r->attached) {
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
        err = kinf_client_attach(r->client, r);
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
    kinf_client_detach(r->client, r);
    pthread_mutex_lock(&r->mu);
    r->st.running = 0;
    r->st.phase = "stopped";
    pthread_mutex_unlock(&r->mu);
}

static void drop_items(kinf_reflector *r)
{
    kinf_map_free(&r->initial_keys); /* before the records that own its keys */
    kinf_map_init(&r->initial_keys);
    kinf_objects_free(r->items, r->nitems);
    r->items = NULL;
    r->nitems = r->capitems = 0;
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
    free(r->test_query);
    kinf_scanner_free(r->list_scanner);
    kinf_scanner_free(r->watch_scanner);
    kinf_fifo_unref(r->fifo);
    kinf_client_unref(r->client);
    free(r->path);
    free(r->label_selector);
    free(r->field_selector);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* ---- helpers (I/O thread) ---- */

/* Waits before `next`: the backoff manager's next step, at least retry_after. */
static void schedule_backoff(kinf_reflector *r, next_t next, double retry_after)
{
    double now = kinf_now(), d;
    if (r->backoff_used_at > 0 && now - r->backoff_used_at > BACKOFF_RESET)
        r->backoff = r->backoff_initial;
    d = r->backoff;
    r->backoff = r->backoff * 2 > r->backoff_max ? r->backoff_max : r->backoff * 2;
    r->backoff_used_at = now;
    d += rand01(r) * d;
    if (retry_after > d)
        d = retry_after > 3600 ? 3600 : retry_after;
    r->phase = PH_WAIT;
    r->next = next;
    r->due = now + d;
    if (next == NEXT_LIST)
        r->need_list = 1;
    set_phase(r, "backoff");
}

static void schedule_now(kinf_reflector *r, next_t next)
{
    r->phase = PH_WAIT;
    r->next = next;
    r->due = 0;
    if (next == NEXT_LIST)
        r->need_list = 1;
}

/* A list that is due goes through WatchList (client-go: every ListAndWatch tries it first). */
static int use_watch_list(const kinf_reflector *r)
{
    return r->watch_list && !r->watch_list_failed;
}

/* An rv as the reflector keeps it: it fits the buffers (the scanner caps it at
 * KINF_SCAN_MAX_META) and holds no NUL (it goes into a query string and status()). */
static int rv_ok(kinf_str rv)
{
    return rv.len < RV_SIZE && memchr(rv.ptr, '\0', rv.len) == NULL;
}

/* A request's path and query, grown as parameters are added (a continue token of 8 KiB, or
 * long selectors, are never cut). An allocation failure is remembered: q.s is then NULL. */
typedef struct query {
    char *s;
    size_t len, cap;
} query;

static void q_append(query *q, const char *bytes, size_t n)
{
    if (q->s == NULL)
        return;
    if (q->len + n + 1 > q->cap) {
        size_t cap = q->cap * 2 > q->len + n + 1 ? q->cap * 2 : q->len + n + 1;
        char *grown = realloc(q->s, cap);
        if (grown == NULL) {
            free(q->s);
            q->s = NULL;
            return;
        }
        q->s = grown;
        q->cap = cap;
    }
    memcpy(q->s + q->len, bytes, n);
    q->len += n;
    q->s[q->len] = '\0';
}

static void q_init(query *q, const char *path)
{
    q->len = 0;
    q->cap = strlen(path) + 256;
    q->s = malloc(q->cap);
    if (q->s != NULL)
        q->s[0] = '\0';
    q_append(q, path, strlen(path));
}

/* Appends ?key=value or &key=value, the value percent-encoded (all but RFC 3986 unreserved). */
static void q_param(query *q, const char *key, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    q_append(q, q->s && strchr(q->s, '?') ? "&" : "?", 1);
    q_append(q, key, strlen(key));
    q_append(q, "=", 1);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            q_append(q, (const char *)p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            q_append(q, esc, 3);
        }
    }
}

static size_t on_header(char *data, size_t size, size_t nitems, void *ud)
{
    kinf_reflector *r = ud;
    size_t len = size * nitems;
    if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0)
        r->retry_after = strtod(data + 12, NULL);
    return len;
}

static char *dup_span(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s != NULL) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* Scanner thread, after each chunk of a list page: keeps early_continue equal to what the
 * scanner knows of the page's continue token (kinf_scanner_list_continue), for
 * pipelined_next_page. Mirroring the scanner rather than publishing once makes what io_done
 * finds depend on the bytes scanned, not on how they were chunked. */
static void publish_continue(kinf_reflector *r)
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
        free(mine); /* out of memory: nothing published (io_done takes the flushed path) */
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

/* The continue token the scanner published for the page being received, or NULL. */
static char *take_early_continue(kinf_reflector *r)
{
    char *token;
    pthread_mutex_lock(&r->mu);
    token = r->early_continue;
    if (token != NULL && r->early_page != r->io_page) {
        free(token); /* published for an earlier page after its io_done looked */
        token = NULL;
    }
    r->early_continue = NULL;
    pthread_mutex_unlock(&r->mu);
    return token;
}

/* Scanner thread: the marker pipelined_next_page queues behind a list page's last bytes.
 * Finishes the page as list_done would (on_list_end: page_rv, continue_token) and readies the
 * scanner for the next page. A page that fails here fails the list: scan_failed aborts the next
 * page's transfer and list_done reports this page's error. */
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

/* Scanner thread: the next bytes of r's 2xx body (pipe callback). */
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

/* The next bytes of the response in progress (http_code known): a non-2xx body is kept, bounded,
 * for its Status; a 2xx body goes to the scanner thread (in test mode it is scanned at once).
 * Returns len, or 0 to abort the transfer (the body already failed, or it could not be queued). */
static size_t take_body(kinf_reflector *r, const char *data, size_t len)
{
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
     * the next chunk (or the transfer ends first: io_done waits for the scan either way). */
    if (atomic_load_explicit(&r->scan_failed, memory_order_relaxed))
        return 0;
    if (r->test_mode) {
        scan_chunk(r, data, len);
        return len;
    }
    err = kinf_pipe_write(r->pipe, scan_chunk, r, data, len);
    if (err != KINF_OK) {
        r->pipe_err = err;
        return 0;
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
    kinf_reflector *r = ud;
    if (r->http_code == 0)
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http_code);
    return take_body(r, data, size * nmemb);
}

/* The handle for a request (NULL in test mode, where the test gets the query instead). */
static kinf_err new_request(kinf_reflector *r, const char *path_query, CURL **easy)
{
    char msg[512];

    *easy = NULL;
    if (r->test_mode) {
        char *q = strdup(path_query);
        if (q == NULL) {
            record_error(r, 0, NULL, "out of memory");
            return KINF_ENOMEM;
        }
        free(r->test_query);
        r->test_query = q;
        return KINF_OK;
    }
    *easy = kinf_client_easy(r->client, path_query, r, msg, sizeof(msg));
    if (*easy == NULL) {
        record_error(r, 0, NULL, "%s", msg);
        return KINF_ENOMEM;
    }
    return KINF_OK;
}

static kinf_err add_transfer(kinf_reflector *r, CURL *easy);

static kinf_err begin_transfer(kinf_reflector *r, const char *path_query, kinf_scan_mode mode)
{
    CURL *easy;
    kinf_err err = new_request(r, path_query, &easy);

    if (err != KINF_OK)
        return err;
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
    free(take_early_continue(r)); /* published after the last io_done looked */
    atomic_store_explicit(&r->scan_failed, 0, memory_order_relaxed);
    return add_transfer(r, easy);
}

/* Starts easy (I/O fields only: a pipelined page's scanner state is the scanner thread's). */
static kinf_err add_transfer(kinf_reflector *r, CURL *easy)
{
    r->http_code = 0;
    r->retry_after = 0;
    r->errlen = 0;
    r->pipe_err = KINF_OK;
    if (r->test_mode)
        return KINF_OK; /* the test plays the response (kinf_reflector_test_response) */
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, r);
    /* Fewer, larger reads: a big list arrives in 128 KiB pieces instead of 16 KiB ones. */
    curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, RECV_BUFFER);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, r);
    /* A transfer that moves no byte for idle_timeout is dead (stalled server, lost peer). */
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, (long)(r->idle_timeout + 0.5));
    r->easy = easy;
    if (kinf_client_add(r->client, easy) != KINF_OK) {
        kinf_client_remove(r->client, easy);
        r->easy = NULL;
        record_error(r, 0, NULL, "cannot start a transfer");
        return KINF_EIO;
    }
    return KINF_OK;
}

/* ---- list ---- */

/* The record for an object of a list (or of a WatchList's initial events). With reuse_known,
 * the FIFO's known store's record when it holds this key at this resourceVersion: a relist of
 * an unchanged cache then holds one copy of each object, not two (client-go holds two). The
 * store's records are what a list produces (same scan options, no transform: the informer sets
 * reuse_known only then), and one resourceVersion is one content. */
static kinf_object *list_record(kinf_reflector *r, const char *json, size_t len,
                                const kinf_meta *meta, kinf_err *err)
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

/* A record keeps uid and resourceVersion as C strings: one holding a NUL byte (\u0000, which no
 * API server sends) would be cut and differ from the object's JSON, so the object is refused. */
static int nul_free_meta(const kinf_scan_item *item)
{
    return memchr(item->meta.uid.ptr, '\0', item->meta.uid.len) == NULL &&
           memchr(item->meta.resource_version.ptr, '\0', item->meta.resource_version.len) == NULL;
}

static kinf_err on_list_item(void *ud, const kinf_scan_item *item)
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
    if (r->nitems == r->capitems) {
        size_t cap = r->capitems ? r->capitems * 2 : 512;
        kinf_object **grown = realloc(r->items, cap * sizeof(*grown));
        if (grown == NULL)
            return KINF_ENOMEM;
        r->items = grown;
        r->capitems = cap;
    }
    obj = list_record(r, item->json, item->json_len, &item->meta, &err);
    if (obj == NULL)
        return err;
    r->items[r->nitems++] = obj;
    return KINF_OK;
}

static kinf_err on_list_end(void *ud, const kinf_scan_list_end *end)
{
    kinf_reflector *r = ud;
    if (end->is_status) {
        snprintf(r->scan_msg, sizeof(r->scan_msg), "server sent a Status instead of a list: %.200s",
                 end->status ? end->status->message : "");
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

/* The path and the selectors every request carries. */
static void q_start(query *q, const kinf_reflector *r)
{
    q_init(q, r->path);
    if (r->label_selector)
        q_param(q, "labelSelector", r->label_selector);
    if (r->field_selector)
        q_param(q, "fieldSelector", r->field_selector);
}

/* begin_transfer for a built query (which it frees); KINF_ENOMEM when building it failed. */
static kinf_err begin_query(kinf_reflector *r, query *q, kinf_scan_mode mode)
{
    kinf_err err;
    if (q->s == NULL) {
        record_error(r, 0, NULL, "%s %s: out of memory", mode == KINF_SCAN_LIST ? "list" : "watch",
                     r->path);
        return KINF_ENOMEM;
    }
    err = begin_transfer(r, q->s, mode);
    free(q->s);
    q->s = NULL;
    return err;
}

/* The first page of a list (or the unpaginated fallback). */
static void start_list(kinf_reflector *r)
{
    query q;
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
    q_start(&q, r);
    if (r->list_rv[0] || r->full_list)
        q_param(&q, "resourceVersion", r->list_rv);
    if (!r->full_list &&
        (r->paginated || r->list_rv[0] == '\0' || strcmp(r->list_rv, "0") == 0)) {
        snprintf(limit, sizeof(limit), "%zu", r->page_size);
        q_param(&q, "limit", limit);
    }
    r->phase = PH_LIST;
    set_phase(r, "listing");
    if (begin_query(r, &q, KINF_SCAN_LIST) != KINF_OK)
        schedule_backoff(r, NEXT_LIST, 0);
}

static void page_query(query *q, const kinf_reflector *r, const char *token)
{
    char limit[32];
    q_start(q, r);
    snprintf(limit, sizeof(limit), "%zu", r->page_size);
    q_param(q, "limit", limit);
    q_param(q, "continue", token);
}

static void next_page(kinf_reflector *r)
{
    query q;
    page_query(&q, r, r->continue_token);
    r->paginated = 1;
    if (begin_query(r, &q, KINF_SCAN_LIST) != KINF_OK)
        schedule_backoff(r, NEXT_LIST, 0);
}

/* page_end behind the page's last bytes (test mode scans each body as it comes: at once). */
static kinf_err queue_page_end(kinf_reflector *r)
{
    if (r->test_mode) {
        page_end(r, NULL, 0);
        return KINF_OK;
    }
    return kinf_pipe_write(r->pipe, page_end, r, "", 1);
}

/* io_done of a list page: when the page ended well and the scanner already published its
 * continue token, asks for the next page now, with page_end queued between the two pages (see
 * the top of the file). Returns 0 when io_done must take the ordinary path (flush, list_done). */
static int pipelined_next_page(kinf_reflector *r, CURLcode result)
{
    char *token = take_early_continue(r);
    CURL *easy;
    query q;

    if (token == NULL)
        return 0;
    if (r->phase != PH_LIST || result != CURLE_OK || r->http_code < 200 || r->http_code >= 300 ||
        r->pipe_err != KINF_OK || r->full_list ||
        atomic_load_explicit(&r->scan_failed, memory_order_relaxed)) {
        free(token);
        return 0;
    }
    page_query(&q, r, token);
    if (q.s == NULL || new_request(r, q.s, &easy) != KINF_OK) {
        free(q.s);
        free(token);
        return 0;
    }
    free(q.s);
    /* page_end reads it; it runs after the write below (the pipe's mutex orders the two). */
    r->requested_continue = token;
    if (queue_page_end(r) != KINF_OK) {
        r->requested_continue = NULL;
        free(token);
        kinf_client_remove(r->client, easy);
        return 0;
    }
    r->page_http_code = r->http_code;
    r->paginated = 1;
    r->io_page++; /* page_end moves scan_page on likewise */
    if (add_transfer(r, easy) != KINF_OK) {
        kinf_pipe_flush(r->pipe, r); /* page_end has run: the [scan] fields are ours */
        drop_items(r);
        schedule_backoff(r, NEXT_LIST, 0);
    }
    return 1;
}

static void start_watch(kinf_reflector *r);

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
    pthread_mutex_unlock(&r->mu);
    start_watch(r);
}

static int is_expired(const kinf_status *s, long code)
{
    return code == 410 || strcmp(s->reason, "Expired") == 0 || strcmp(s->reason, "Gone") == 0;
}

/* Fills st from a non-2xx body (or from the code alone). */
static void parse_errbody(kinf_reflector *r, kinf_status *st)
{
    memset(st, 0, sizeof(*st));
    if (r->errbody != NULL && r->errlen > 0)
        (void)kinf_status_parse(r->errbody, r->errlen, st);
    if (st->code == 0)
        st->code = (int)r->http_code;
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

static void list_done(kinf_reflector *r, CURLcode result)
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
    if (result != CURLE_OK && r->scan_err == KINF_OK) {
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

/* ---- watch ---- */

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
    if (r->nitems == r->capitems) {
        size_t cap = r->capitems ? r->capitems * 2 : 512;
        kinf_object **grown = realloc(r->items, cap * sizeof(*grown));
        if (grown == NULL)
            return KINF_ENOMEM;
        r->items = grown;
        r->capitems = cap;
    }
    if (kinf_map_put(&r->initial_keys, obj->key, obj->key_len,
                     (void *)(uintptr_t)(r->nitems + 1)) != KINF_OK)
        return KINF_ENOMEM;
    r->items[r->nitems++] = kinf_object_ref(obj);
    return KINF_OK;
}

static kinf_err on_watch_item(void *ud, const kinf_scan_item *item)
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
            pthread_mutex_unlock(&r->mu);
        }
    } else {
        if (item->meta.name.len == 0) {
            snprintf(r->scan_msg, sizeof(r->scan_msg), "%s event object has no metadata.name",
                     kinf_event_type_name(item->type));
            return KINF_ENOKEY;
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

static void start_watch(kinf_reflector *r)
{
    query q;
    char timeout[32];
    int watch_list = r->need_list && use_watch_list(r);

    r->scanner = r->watch_scanner;
    q_start(&q, r);
    q_param(&q, "watch", "true");
    if (watch_list) {
        /* The first one, or a relist: from the last rv when there is one (NotOlderThan). */
        q_param(&q, "sendInitialEvents", "true");
        q_param(&q, "resourceVersionMatch", "NotOlderThan");
        if (r->last_rv[0] && !r->rv_unavailable)
            q_param(&q, "resourceVersion", r->last_rv);
    } else {
        q_param(&q, "resourceVersion", r->last_rv);
    }
    q_param(&q, "allowWatchBookmarks", "true");
    snprintf(timeout, sizeof(timeout), "%ld",
             (long)(r->watch_timeout + rand01(r) * r->watch_timeout));
    q_param(&q, "timeoutSeconds", timeout);
    r->initial_phase = watch_list;
    drop_items(r);
    r->watch_started = kinf_now();
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

static void watch_done(kinf_reflector *r, CURLcode result)
{
    double lasted = kinf_now() - r->watch_started;
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
    if (result == CURLE_OPERATION_TIMEDOUT && r->http_code == 0 && r->watch_started > 0 &&
        kinf_now() - r->watch_started >= r->idle_timeout) {
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
    if (result == CURLE_OPERATION_TIMEDOUT) {
        record_error(r, 0, NULL, "watch %s: no data for %.0f s, reconnecting", r->path,
                     r->idle_timeout);
        watch_restart(r, r->initial_phase ? NEXT_LIST : NEXT_WATCH, 1, 0);
        return;
    }
    if (result != CURLE_OK) {
        /* The connection dropped mid-stream (client-go: probable EOF): resume from the last
         * rv; a partial last line is discarded. */
        record_error(r, 0, NULL, "watch %s: connection lost: %s", r->path, r->xfer_msg);
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

/* ---- I/O thread entry points ---- */

double kinf_reflector_io_tick(kinf_reflector *r, double now)
{
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

/* The transfer in progress ended with `result`; its whole body has been scanned. */
static void transfer_done(kinf_reflector *r, CURLcode result)
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

void kinf_reflector_io_done(kinf_reflector *r, CURL *easy, CURLcode result)
{
    if (r->http_code == 0)
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->http_code);
    r->xfer_msg[0] = '\0';
    if (result != CURLE_OK)
        kinf_client_transfer_error(r->client, easy, result, r->xfer_msg, sizeof(r->xfer_msg));
    kinf_client_remove(r->client, easy);
    r->easy = NULL;
    if (pipelined_next_page(r, result))
        return;
    /* The body's last bytes may still be queued: the [scan] fields are ours after this. */
    kinf_pipe_flush(r->pipe, r);
    transfer_done(r, result);
}

void kinf_reflector_io_detach(kinf_reflector *r)
{
    kinf_client_remove(r->client, r->easy);
    r->easy = NULL;
    kinf_pipe_cancel(r->pipe, r); /* the [scan] fields are ours after this */
    drop_items(r);
    r->phase = PH_IDLE;
}

/* ---- test seam (reflector.h) ---- */

kinf_err kinf_reflector_test_start(kinf_reflector *r)
{
    pthread_mutex_lock(&r->mu);
    if (r->attached || r->test_mode) {
        pthread_mutex_unlock(&r->mu);
        return KINF_EINVAL;
    }
    r->test_mode = 1;
    r->phase = PH_WAIT;
    r->next = NEXT_LIST;
    r->need_list = 1;
    r->due = 0;
    r->st.running = 1;
    r->st.phase = "listing";
    pthread_mutex_unlock(&r->mu);
    return KINF_OK;
}

kinf_reflector_test_req kinf_reflector_test_request(kinf_reflector *r, const char **path_query)
{
    *path_query = NULL;
    if (!r->test_mode)
        return KINF_TEST_NONE;
    if (r->phase == PH_WAIT) {
        double now = kinf_now();
        (void)kinf_reflector_io_tick(r, r->due > now ? r->due : now);
    }
    if (r->phase != PH_LIST && r->phase != PH_WATCH)
        return KINF_TEST_NONE;
    *path_query = r->test_query;
    return r->phase == PH_LIST ? KINF_TEST_LIST : KINF_TEST_WATCH;
}

void kinf_reflector_test_response(kinf_reflector *r, long http_code, double retry_after)
{
    r->http_code = http_code;
    r->retry_after = retry_after;
}

size_t kinf_reflector_test_body(kinf_reflector *r, const char *buf, size_t len)
{
    if (!r->test_mode || (r->phase != PH_LIST && r->phase != PH_WATCH))
        return 0;
    return take_body(r, buf, len);
}

void kinf_reflector_test_end(kinf_reflector *r, CURLcode result, double lasted)
{
    if (!r->test_mode)
        return;
    snprintf(r->xfer_msg, sizeof(r->xfer_msg), "%s",
             result != CURLE_OK ? curl_easy_strerror(result) : "");
    r->watch_started = kinf_now() - lasted;
    if (!pipelined_next_page(r, result))
        transfer_done(r, result);
}
