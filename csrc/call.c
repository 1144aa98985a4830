/*
 * call.c - non-blocking requests run by the client's I/O thread (contract in call.h).
 *
 * A call's life: kinf_call_start copies the request, queues the call on c->calls_queued under
 * mu and wakes the I/O thread. The I/O thread takes the queue (calls_take_locked, in its loop),
 * makes each call a transfer of its multi handle (client_xfer_new, plus the method, body,
 * headers and timeout as a blocking request sets them: request_impl.h) and keeps it in
 * c->calls_io (calls_run). The transfer's callbacks collect the response: on_response its
 * status and headers, on_body its body within max_response_bytes. on_done turns the end into
 * the result, sends a 401 once more when the credential can be refreshed, then marks the call
 * ended under mu, lets go of it and signals the completion fd (a kinf_wakeup, informer.h).
 *
 * Who frees a call: its owner holds it until kinf_call_free (`released`), the I/O thread from
 * its start until its transfer ended or was aborted (`held`). Both flags are under mu; whoever
 * drops the second frees the call. The owner drops the call's client reference in
 * kinf_call_free, on its own thread: the I/O thread never drops the last one (it would join
 * itself). What the I/O thread still holds when the client's last unref stops it is freed
 * there (calls_free_all): every such call was released, since an unreleased one holds a
 * reference.
 *
 * Cancel: the owner marks the call cancelled under mu and counts a cancel for the I/O thread
 * (c->calls_cancels), which looks through its calls for cancelled ones only when that count is
 * not 0 and aborts their transfers with client_xfer_abort (the connection is shut down when no
 * other transfer uses it, so the server sees the client go).
 *
 * Threads and fields: [mu] under c->mu; [io] the I/O thread's (and, after it was joined, the
 * last unref's); the request copy is immutable. The result (err, msg, resp) is written by the
 * I/O thread before it sets `ended` under mu and is read by the owner only after it saw `ended`
 * under mu, so it needs no lock of its own.
 */
#include "call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_impl.h"
#include "informer.h"
#include "request_impl.h"

#define CALL_MSG 512

struct kinf_call {
    kinf_client *c;             /* a reference, dropped by kinf_call_free */
    kinf_request req;           /* the request: its strings and body point into `copy` */
    char *copy;

    int held;                   /* [mu] the I/O thread holds it (queued, or its transfer) */
    int released;               /* [mu] kinf_call_free ran */
    int cancelled;              /* [mu] cancelled before it ended */
    int ended;                  /* [mu] the result is there (never with cancelled) */
    struct kinf_call *queued_next; /* [mu] in c->calls_queued */

    kinf_err err;               /* the result: see the threads note above */
    char msg[CALL_MSG];
    kinf_response resp;

    struct kinf_call *io_prev, *io_next; /* [io] in c->calls_io (io_next: c->calls_start) */
    int stop;                   /* [io] seen cancelled: calls_run aborts it */
    struct kinf_xfer *x;        /* [io] its transfer in flight, or NULL */
    int attempts;               /* [io] transfers made: 2 after a 401 sent again */
    request_body body;          /* [io] the body being received */
    kinf_response cur, first;   /* [io] the response being received; a 401 sent again */
};

/* ---- the call record ---- */

/* An empty body buffer (what it held is freed or moved already). */
static void reset_body(kinf_call *k)
{
    memset(&k->body, 0, sizeof(k->body));
    k->body.max = k->req.max_response_bytes ? k->req.max_response_bytes
                                            : KINF_REQUEST_DEFAULT_MAX_RESPONSE;
}

/* A call with a copy of req (checked already), or NULL when out of memory. */
static kinf_call *call_new(const kinf_request *req)
{
    size_t lm = strlen(req->method) + 1, lp = strlen(req->path_query) + 1;
    size_t lc = req->body != NULL ? strlen(req->content_type) + 1 : 0;
    size_t la = req->accept != NULL ? strlen(req->accept) + 1 : 0;
    size_t lb = req->body != NULL ? req->body_len : 0, fixed = lm + lp + lc + la;
    kinf_call *k;
    char *p;

    if (lb > (size_t)-1 - fixed || (k = calloc(1, sizeof(*k))) == NULL)
        return NULL;
    if ((k->copy = p = malloc(fixed + lb)) == NULL) {
        free(k);
        return NULL;
    }
    k->req = *req;
    k->req.method = memcpy(p, req->method, lm);
    k->req.path_query = memcpy(p += lm, req->path_query, lp);
    p += lp;
    if (req->body != NULL) {
        k->req.content_type = memcpy(p, req->content_type, lc);
        k->req.body = p += lc;
        memcpy(p, req->body, lb);
        p += lb;
    }
    if (req->accept != NULL)
        k->req.accept = memcpy(p, req->accept, la);
    k->cur.retry_after = k->first.retry_after = k->resp.retry_after = -1;
    reset_body(k);
    return k;
}

static void call_destroy(kinf_call *k)
{
    kinf_response_free(&k->resp);
    kinf_response_free(&k->cur);
    kinf_response_free(&k->first);
    free(k->body.p);
    free(k->copy);
    free(k);
}

/* Makes the completion fd unless it is there; mu held. */
static kinf_err wake_locked(kinf_client *c, char *errbuf, size_t errlen)
{
    kinf_err err = KINF_OK;
    if (c->calls_wake == NULL && (c->calls_wake = kinf_wakeup_new(&err)) == NULL)
        kinf_errmsg(errbuf, errlen, "cannot make the calls' completion fd: %s",
                    kinf_strerror(err));
    return err;
}

/* ---- the I/O thread ---- */

static void io_link(kinf_client *c, kinf_call *k)
{
    k->io_prev = NULL;
    k->io_next = c->calls_io;
    if (c->calls_io != NULL)
        c->calls_io->io_prev = k;
    c->calls_io = k;
}

static void io_unlink(kinf_client *c, kinf_call *k)
{
    if (k->io_prev != NULL)
        k->io_prev->io_next = k->io_next;
    else
        c->calls_io = k->io_next;
    if (k->io_next != NULL)
        k->io_next->io_prev = k->io_prev;
}

/* The I/O thread is done with k: it ended (its result is in k) or its transfer was aborted
 * (it was cancelled). Frees k when its owner released it. */
static void let_go(kinf_client *c, kinf_call *k)
{
    kinf_wakeup *w = NULL;
    int destroy;
    io_unlink(c, k);
    pthread_mutex_lock(&c->mu);
    k->held = 0;
    if (!k->cancelled) {
        k->ended = 1;
        w = c->calls_wake;
    }
    destroy = k->released;
    pthread_mutex_unlock(&c->mu);
    if (w != NULL)
        kinf_wakeup_signal(w); /* lives until the last unref, after this thread */
    if (destroy)
        call_destroy(k);
}

/* Stores the result and lets go of k. */
static void end(kinf_client *c, kinf_call *k, kinf_err err, const char *msg)
{
    k->err = err;
    if (err == KINF_OK)
        k->resp = k->cur;
    else
        kinf_response_free(&k->cur);
    memset(&k->cur, 0, sizeof(k->cur));
    snprintf(k->msg, sizeof(k->msg), "%s", err == KINF_OK ? "" : msg);
    let_go(c, k);
}

static void on_response(void *ud, long code, double retry_after)
{
    kinf_call *k = ud;
    (void)code;
    (void)retry_after; /* read as a blocking request reads them, from the handle: */
    request_response_info(k->x->easy, &k->cur);
    k->cur.warnings = k->x->warnings;
}

static size_t on_body(void *ud, const char *data, size_t len)
{
    return request_body_add(&((kinf_call *)ud)->body, data, len);
}

static void on_done(void *ud, kinf_xfer_result result, const char *why);

/* Sends k's request (again, after a 401): a transfer on the multi handle, or an error with a
 * message (KINF_EIO as a blocking request's: no easy handle, e.g. the credentials plugin
 * failed; KINF_ENOMEM). */
static kinf_err attempt(kinf_client *c, kinf_call *k, char *errbuf, size_t errlen)
{
    kinf_xfer_request xr;
    kinf_xfer_callbacks cb = {k, on_response, on_body, on_done};
    struct kinf_xfer *x;

    memset(&xr, 0, sizeof(xr));
    xr.path_query = k->req.path_query; /* idle_timeout 0: the request's own timeout ends it */
    k->attempts++;
    memset(&k->cur, 0, sizeof(k->cur));
    k->cur.retry_after = -1;
    if ((x = client_xfer_new(c, &xr, &cb, errbuf, errlen)) == NULL)
        return KINF_EIO;
    /* Freed with the handle, as a transfer's own Accept list is. */
    /* libcurl's default receive buffer (16 KiB), not the 128 KiB a list gets: many calls may
     * be in flight, and their answers are small. */
    if ((x->headers = request_headers(c, &k->req)) == NULL ||
        request_setopts(x->easy, &k->req, x->headers) != 0 ||
        curl_easy_setopt(x->easy, CURLOPT_BUFFERSIZE, (long)CURL_MAX_WRITE_SIZE) != CURLE_OK) {
        kinf_client_easy_free(x->easy);
        kinf_errmsg(errbuf, errlen, "out of memory");
        return KINF_ENOMEM;
    }
    if (client_xfer_add(c, x, errbuf, errlen) != 0)
        return KINF_EIO;
    k->x = x;
    return KINF_OK;
}

static void on_done(void *ud, kinf_xfer_result result, const char *why)
{
    kinf_call *k = ud;
    kinf_client *c = k->c;
    char msg[CALL_MSG];
    kinf_err err;

    k->x = NULL; /* gone */
    if (result == KINF_XFER_OK) {
        err = request_body_take(&k->body, &k->cur, msg, sizeof(msg));
    } else if ((err = request_body_error(&k->body, msg, sizeof(msg))) == KINF_OK) {
        kinf_errmsg(msg, sizeof(msg), "%s", why);
        err = KINF_EIO;
    }
    free(k->body.p);
    reset_body(k);
    if (k->attempts == 1 && err == KINF_OK && k->cur.status == 401 && kinf_client_refreshable(c)) {
        /* The I/O thread marked the credential stale: the next handle gets a refreshed one. */
        k->first = k->cur;
        if (attempt(c, k, msg, sizeof(msg)) == KINF_OK)
            return; /* the second transfer's on_done ends the call */
        k->cur = k->first; /* it could not be sent: report the 401 */
        memset(&k->first, 0, sizeof(k->first));
    } else if (k->attempts == 2) {
        if (err != KINF_OK) { /* the second one got no answer: report the 401 */
            kinf_response_free(&k->cur);
            k->cur = k->first;
            err = KINF_OK;
        } else {
            kinf_response_free(&k->first);
        }
        memset(&k->first, 0, sizeof(k->first));
    }
    end(c, k, err, msg);
}

void calls_take_locked(kinf_client *c)
{
    kinf_call **tail = &c->calls_start;
    while (*tail != NULL) /* empty unless calls_run did not run since */
        tail = &(*tail)->io_next;
    for (kinf_call *k = c->calls_queued; k != NULL; k = k->queued_next) {
        k->stop = k->cancelled;
        k->io_next = NULL;
        *tail = k;
        tail = &k->io_next;
    }
    c->calls_queued = NULL;
    c->calls_tail = &c->calls_queued;
    if (c->calls_cancels != 0) {
        for (kinf_call *k = c->calls_io; k != NULL; k = k->io_next)
            if (k->cancelled)
                c->calls_stop = k->stop = 1;
        c->calls_cancels = 0;
    }
}

void calls_run(kinf_client *c)
{
    kinf_call *k = c->calls_start, *next;
    char msg[CALL_MSG];
    kinf_err err;

    c->calls_start = NULL;
    for (; k != NULL; k = next) {
        next = k->io_next;
        io_link(c, k);
        if (k->stop)
            let_go(c, k); /* cancelled before it was sent */
        else if ((err = attempt(c, k, msg, sizeof(msg))) != KINF_OK)
            end(c, k, err, msg);
    }
    if (c->calls_stop) {
        c->calls_stop = 0;
        for (k = c->calls_io; k != NULL; k = next) {
            next = k->io_next;
            if (k->stop) {
                client_xfer_abort(c, k->x);
                k->x = NULL;
                let_go(c, k);
            }
        }
    }
}

void calls_free_all(kinf_client *c)
{
    kinf_call *k, *next;
    for (k = c->calls_queued; k != NULL; k = next) {
        next = k->queued_next;
        call_destroy(k);
    }
    for (k = c->calls_start; k != NULL; k = next) {
        next = k->io_next;
        call_destroy(k);
    }
    for (k = c->calls_io; k != NULL; k = next) {
        next = k->io_next;
        client_xfer_abort(c, k->x);
        call_destroy(k);
    }
    c->calls_queued = c->calls_start = c->calls_io = NULL;
    c->calls_tail = &c->calls_queued;
    kinf_wakeup_free(c->calls_wake);
    c->calls_wake = NULL;
}

/* ---- the owner's side ---- */

kinf_call *kinf_call_start(kinf_client *c, const kinf_request *req, kinf_err *err, char *errbuf,
                           size_t errlen)
{
    kinf_call *k;

    if ((*err = request_check(req, errbuf, errlen)) != KINF_OK)
        return NULL;
    if ((k = call_new(req)) == NULL) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        *err = KINF_ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    *err = wake_locked(c, errbuf, errlen);
    if (*err == KINF_OK && (*err = client_start_io_locked(c)) != KINF_OK)
        kinf_errmsg(errbuf, errlen, *err == KINF_ECLOSED ? "the client is being freed"
                                                         : "cannot start the I/O thread");
    if (*err == KINF_OK) {
        k->c = kinf_client_ref(c);
        k->held = 1;
        *c->calls_tail = k;
        c->calls_tail = &k->queued_next;
    }
    pthread_mutex_unlock(&c->mu);
    if (*err != KINF_OK) {
        call_destroy(k);
        return NULL;
    }
    curl_multi_wakeup(c->multi);
    return k;
}

int kinf_call_done(kinf_call *k)
{
    int done;
    pthread_mutex_lock(&k->c->mu);
    done = k->ended || k->cancelled;
    pthread_mutex_unlock(&k->c->mu);
    return done;
}

int kinf_call_result(kinf_call *k, kinf_err *err, const kinf_response **resp, const char **msg)
{
    int ended, cancelled;
    pthread_mutex_lock(&k->c->mu);
    ended = k->ended;
    cancelled = k->cancelled;
    pthread_mutex_unlock(&k->c->mu);
    if (!ended && !cancelled)
        return 0;
    *err = ended ? k->err : KINF_ECANCELED;
    if (resp != NULL)
        *resp = ended && k->err == KINF_OK ? &k->resp : NULL;
    if (msg != NULL)
        *msg = ended ? k->msg : kinf_strerror(KINF_ECANCELED);
    return 1;
}

void kinf_call_cancel(kinf_call *k)
{
    kinf_client *c = k->c;
    int wake = 0;
    pthread_mutex_lock(&c->mu);
    if (!k->ended && !k->cancelled) {
        k->cancelled = 1;
        if (k->held) {
            c->calls_cancels++;
            wake = 1;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (wake)
        curl_multi_wakeup(c->multi);
}

void kinf_call_free(kinf_call *k)
{
    kinf_client *c;
    int held;
    if (k == NULL)
        return;
    c = k->c;
    kinf_call_cancel(k);
    pthread_mutex_lock(&c->mu);
    k->released = 1;
    held = k->held;
    pthread_mutex_unlock(&c->mu);
    if (!held)
        call_destroy(k);
    kinf_client_unref(c); /* may be the last: it frees what the I/O thread still holds */
}

int kinf_calls_fd(kinf_client *c, kinf_err *err, char *errbuf, size_t errlen)
{
    int fd = -1;
    pthread_mutex_lock(&c->mu);
    if ((*err = wake_locked(c, errbuf, errlen)) == KINF_OK)
        fd = kinf_wakeup_fd(c->calls_wake);
    pthread_mutex_unlock(&c->mu);
    return fd;
}

unsigned long kinf_calls_drain(kinf_client *c)
{
    kinf_wakeup *w;
    pthread_mutex_lock(&c->mu);
    w = c->calls_wake;
    pthread_mutex_unlock(&c->mu);
    return w != NULL ? kinf_wakeup_clear(w) : 0;
}
