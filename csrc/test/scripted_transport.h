/*
 * scripted_transport.h - a transport (transport.h) played by a test, for the C tests and the
 * fuzzer: no libcurl, no threads, a clock the test moves. The test plays the API server, one
 * response at a time, on one thread:
 *
 *   sc_request(sc, &q)        the request the reflector now waits a response to: SC_LIST (a list
 *                             page) or SC_WATCH, *q its path and query (valid until the transfer
 *                             ends). If the reflector is waiting (backoff, an immediate retry),
 *                             the clock moves to the time it waits for first. SC_NONE (q NULL)
 *                             when it asks for nothing.
 *   sc_accept(sc)             that request's Accept (NULL: the transport's default).
 *   sc_gzip(sc)               whether that request asked for gzip (-1: no request)
 *   sc_response(sc, code, ra) the response's status and Retry-After (code 0: no response came;
 *                             nothing is called).
 *   sc_body(sc, buf, len)     the next body bytes; returns what the reflector's on_body does
 *                             (len, or 0 to abort: then end with KINF_XFER_FAILED, as the real
 *                             transport would). A 2xx body is scanned at once: queue() calls its
 *                             function inside the call.
 *   sc_end(sc, result, msg, lasted)  the transfer ended with result (msg: why, as the real
 *                             transport's message) after `lasted` seconds on the clock.
 *
 * start / stop / free and the FIFO work as usual (attach and detach are immediate).
 * Header-only: each test file gets its own copy of these static functions.
 */
#ifndef KINF_SCRIPTED_TRANSPORT_H
#define KINF_SCRIPTED_TRANSPORT_H

#include <stdlib.h>
#include <string.h>

#include "transport.h"

typedef enum { SC_NONE, SC_LIST, SC_WATCH } sc_req;

struct kinf_xfer {
    kinf_xfer_callbacks cb;
    char *query;
    char *accept; /* the request's own Accept, NULL: the default */
    int gzip;
};

typedef struct scripted {
    double clock;
    kinf_reflector *r; /* attached */
    kinf_xfer *cur;    /* the transfer in flight */
    int refs;          /* retain - release */
} scripted;

static kinf_err sc_attach(void *impl, kinf_reflector *r)
{
    ((scripted *)impl)->r = r;
    return KINF_OK;
}

static void sc_free_xfer(kinf_xfer *x)
{
    if (x != NULL) {
        free(x->query);
        free(x->accept);
        free(x);
    }
}

static void sc_detach(void *impl, kinf_reflector *r)
{
    scripted *sc = impl;
    if (sc->r == r) {
        kinf_reflector_io_detach(r);
        sc->r = NULL;
    }
}

static kinf_xfer *sc_get(void *impl, const kinf_xfer_request *req, const kinf_xfer_callbacks *cb,
                         char *errbuf, size_t errlen)
{
    scripted *sc = impl;
    kinf_xfer *x = calloc(1, sizeof(*x));
    if (x == NULL || (x->query = strdup(req->path_query)) == NULL || sc->cur != NULL ||
        (req->accept != NULL && (x->accept = strdup(req->accept)) == NULL)) {
        sc_free_xfer(x);
        kinf_errmsg(errbuf, errlen, sc->cur ? "two transfers at once" : "out of memory");
        return NULL;
    }
    x->cb = *cb;
    x->gzip = req->gzip;
    sc->cur = x;
    return x;
}

static void sc_abort(void *impl, kinf_xfer *x)
{
    scripted *sc = impl;
    if (x != NULL && x == sc->cur)
        sc->cur = NULL;
    sc_free_xfer(x);
}

static kinf_err sc_queue(void *impl, kinf_pipe_fn fn, void *target, const char *buf, size_t len)
{
    (void)impl;
    fn(target, buf, len);
    return KINF_OK;
}

static void sc_nothing(void *impl, void *target)
{
    (void)impl;
    (void)target;
}

static double sc_now(void *impl)
{
    return ((scripted *)impl)->clock;
}

static void sc_retain(void *impl)
{
    ((scripted *)impl)->refs++;
}

static void sc_release(void *impl)
{
    ((scripted *)impl)->refs--;
}

static void sc_wake(void *impl)
{
    (void)impl; /* the test ticks the reflector itself (sc_request, or kinf_reflector_io_tick) */
}

static const kinf_transport_ops SC_OPS = {
    sc_attach, sc_detach, sc_get, sc_abort, sc_queue, sc_nothing, sc_nothing, sc_now,
    sc_retain, sc_release, sc_wake,
};

static kinf_transport sc_transport(scripted *sc)
{
    kinf_transport t;
    t.ops = &SC_OPS;
    t.impl = sc;
    return t;
}

static sc_req sc_request(scripted *sc, const char **path_query)
{
    *path_query = NULL;
    if (sc->r == NULL)
        return SC_NONE;
    if (sc->cur == NULL) {
        double t = kinf_reflector_io_tick(sc->r, sc->clock);
        if (sc->cur == NULL && t > sc->clock) {
            sc->clock = t; /* the wait is over */
            (void)kinf_reflector_io_tick(sc->r, sc->clock);
        }
    }
    if (sc->cur == NULL)
        return SC_NONE;
    *path_query = sc->cur->query;
    return strstr(sc->cur->query, "watch=true") ? SC_WATCH : SC_LIST;
}

/* The Accept of the transfer in flight (NULL: the default, or none in flight). */
static inline const char *sc_accept(const scripted *sc) /* inline: not every user calls it */
{
    return sc->cur != NULL ? sc->cur->accept : NULL;
}

static inline int sc_gzip(const scripted *sc) /* inline: not every user calls it */
{
    return sc->cur != NULL ? sc->cur->gzip : -1;
}

static void sc_response(scripted *sc, long code, double retry_after)
{
    if (sc->cur != NULL && code != 0)
        sc->cur->cb.on_response(sc->cur->cb.ud, code, retry_after);
}

static size_t sc_body(scripted *sc, const char *buf, size_t len)
{
    return sc->cur != NULL ? sc->cur->cb.on_body(sc->cur->cb.ud, buf, len) : 0;
}

static void sc_end(scripted *sc, kinf_xfer_result result, const char *msg, double lasted)
{
    kinf_xfer *x = sc->cur;
    kinf_xfer_callbacks cb;
    if (x == NULL)
        return;
    sc->clock += lasted;
    cb = x->cb;
    sc->cur = NULL;
    sc_free_xfer(x);
    cb.on_done(cb.ud, result, msg);
}

#endif
