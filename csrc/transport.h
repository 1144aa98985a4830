/*
 * transport.h - what a reflector needs from an HTTP transport (client-go's ListerWatcher idea):
 * GET requests whose response bytes it receives, a queue to its scanner thread and a clock.
 *
 * Contract:
 * - A transport is a table of functions (kinf_transport_ops) and an opaque `impl`. The
 *   reflector calls them; the transport calls the reflector back only through the entry points
 *   below (kinf_reflector_io_tick, kinf_reflector_io_detach) and the callbacks of each transfer
 *   (kinf_xfer_callbacks). No libcurl type crosses this interface: a transfer ends with a
 *   kinf_xfer_result and a message.
 * - attach(r) hands r to the transport's I/O thread, which from then on calls io_tick(r) in its
 *   loop (every second at least, and when the time io_tick returned comes) until detach(r),
 *   which returns once the I/O thread has called io_detach(r) and forgotten r.
 * - get() starts one GET described by a kinf_xfer_request (copied: nothing of it is kept after
 *   the call). Its callbacks run on the I/O thread, never inside get()
 *   itself, in this order:
 *   on_response once, when the status line and headers arrived (never for a transfer that got
 *   no response); on_body for each piece of the body (returning less than len aborts the
 *   transfer, which then ends as KINF_XFER_FAILED); on_done exactly once, unless the transfer
 *   was aborted with abort(). A transfer that receives no byte (headers included) for
 *   idle_timeout seconds is ended by the transport as KINF_XFER_TIMEDOUT. When on_done runs
 *   the transfer is gone: on_done may start the next one.
 * - queue(fn, target, bytes) hands bytes to the scanner thread, which calls fn(target, ...) with
 *   them in queue order (pipe.h); flush(target) returns once all of target's queued bytes were
 *   consumed, cancel(target) drops them and waits until fn no longer runs for target. A
 *   transport without a second thread may call fn at once, inside queue.
 * - now() is the clock the reflector's timers (backoff, watch duration) run on: monotonic
 *   seconds (kinf_now for the real transport; a test's transport may script it).
 * - retain / release: the reflector holds a reference on the transport from kinf_reflector_new
 *   to kinf_reflector_free.
 * - wake() asks the I/O thread for an io_tick at once (the scanner thread found the body of the
 *   transfer in progress bad: io_tick then ends the transfer instead of waiting for its next
 *   byte, which on a quiet watch may be minutes away).
 *
 * Threads: attach / detach / retain / release from the reflector's owner thread (never the I/O
 * thread); get / abort / queue / flush / cancel / now from the I/O thread only (the reflector's
 * io_* entry points and transfer callbacks, where the transport calls it).
 */
#ifndef KINF_TRANSPORT_H
#define KINF_TRANSPORT_H

#include <stddef.h>

#include "kinf.h"
#include "pipe.h"

typedef struct kinf_reflector kinf_reflector;
typedef struct kinf_xfer kinf_xfer; /* one transfer, owned by the transport */

typedef enum kinf_xfer_result {
    KINF_XFER_OK,       /* the response ended normally */
    KINF_XFER_TIMEDOUT, /* no byte for idle_timeout (maybe not even headers) */
    KINF_XFER_FAILED    /* connection refused, TLS, DNS, dropped mid-body, aborted... */
} kinf_xfer_result;

/* What one GET asks for. New per-request settings (headers, encodings) go here. */
typedef struct kinf_xfer_request {
    const char *path_query;  /* "/api/v1/pods?watch=true&..." */
    double idle_timeout;     /* seconds without a byte (headers included): KINF_XFER_TIMEDOUT */
    const char *accept;      /* the Accept header's value; NULL: the transport's default
                                ("application/json"). No CR or LF (get() refuses them) */
    int gzip;                /* 1: ask for a gzip-encoded body (Accept-Encoding: gzip), which
                                the transport decodes: on_body gets the decoded bytes either
                                way; 0: no encoding asked for */
} kinf_xfer_request;

typedef struct kinf_xfer_callbacks {
    void *ud;
    /* code: the HTTP status; retry_after: seconds of a Retry-After header (0: none). */
    void (*on_response)(void *ud, long code, double retry_after);
    /* Returns len to go on, anything else to abort the transfer. */
    size_t (*on_body)(void *ud, const char *data, size_t len);
    /* msg: why it failed, for a message (no secrets in it); "" with KINF_XFER_OK. */
    void (*on_done)(void *ud, kinf_xfer_result result, const char *msg);
} kinf_xfer_callbacks;

typedef struct kinf_transport_ops {
    kinf_err (*attach)(void *impl, kinf_reflector *r);
    void (*detach)(void *impl, kinf_reflector *r);
    /* NULL with a message (never holding secrets) when the request cannot be made. The
     * callbacks are copied. */
    kinf_xfer *(*get)(void *impl, const kinf_xfer_request *req, const kinf_xfer_callbacks *cb,
                      char *errbuf, size_t errlen);
    /* Ends x without calling on_done; accepts NULL. */
    void (*abort)(void *impl, kinf_xfer *x);
    kinf_err (*queue)(void *impl, kinf_pipe_fn fn, void *target, const char *buf, size_t len);
    void (*flush)(void *impl, void *target);
    void (*cancel)(void *impl, void *target);
    double (*now)(void *impl);
    void (*retain)(void *impl);
    void (*release)(void *impl);
    /* From any thread (the scanner's): the I/O thread should call io_tick soon, not only at its
     * next deadline. A transport whose I/O thread ticks right after each callback may do
     * nothing. */
    void (*wake)(void *impl);
} kinf_transport_ops;

typedef struct kinf_transport {
    const kinf_transport_ops *ops;
    void *impl;
} kinf_transport;

/* ---- reflector entry points, for the transport's I/O thread only ---- */

/* Starts what is due, and ends a watch whose body the scanner refused; returns the monotonic
 * time (on ops->now's clock) it next wants a tick. */
double kinf_reflector_io_tick(kinf_reflector *r, double now);
/* r is being detached: it aborts its transfer and drops partial state. */
void kinf_reflector_io_detach(kinf_reflector *r);

#endif
