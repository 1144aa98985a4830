/*
 * call.h - a non-blocking request to the API server ("call"), run by the client's I/O thread.
 *
 * Contract:
 * - kinf_call_start hands a kinf_request (request.h) to the client's I/O thread and returns at
 *   once: it never waits for the network (it takes the client's lock for a moment and wakes
 *   the I/O thread). It starts the I/O thread when no reflector did (client.h): calls work on
 *   a client that never had a reflector. On the I/O thread the call is a transfer of the
 *   client's multi handle, beside the reflectors' lists and watches: it shares their HTTP/2
 *   connection (or, over HTTP/1.1, their idle keep-alive connections).
 * - A call ends with the result kinf_request_do would give for the same request: KINF_OK with
 *   a kinf_response (any HTTP status; Retry-After, Content-Type, Warning headers noted in the
 *   client's record), or KINF_EIO (no response: connection, TLS, credentials, the request's
 *   timeout, with libcurl's message), KINF_ETOOBIG (a body over max_response_bytes) or
 *   KINF_ENOMEM, each with a message that holds no secret. A 401 answered to a refreshable
 *   credential is sent once more with the refreshed credential (request.h's rule).
 * - When a call ends, the client's completion fd (kinf_calls_fd) becomes readable and stays so
 *   until kinf_calls_drain. One fd serves every call of the client: a wake-up says "some call
 *   ended", and the caller asks its calls which (kinf_call_done).
 * - kinf_call_cancel ends a call in flight at once as far as its owner sees: from then on its
 *   result is KINF_ECANCELED, and the fd is not signalled for it. The I/O thread then takes its
 *   transfer off the multi handle and, when no other transfer uses the connection, shuts the
 *   connection down, so the server sees the client go (the transport's abort rule,
 *   client_transport.c). A cancel after the call ended changes nothing: it keeps its result.
 * - kinf_call_free cancels a call in flight and frees it; the I/O thread frees what it still
 *   holds of it later (or the client's last unref does).
 *
 * Threads: kinf_call_start, kinf_calls_fd and kinf_calls_drain from any thread but the I/O
 * thread. The other functions from the call's owner: one thread at a time per call, never the
 * I/O thread (the thread that started it, usually). The completion fd may be polled by any
 * thread; kinf_calls_drain is for the one loop that waits on it (a drain by one thread takes
 * the wake-up from another).
 *
 * Locking: a call's state (cancelled, released, ended) and the client's queue of started calls
 * are under the client's mu (client_impl.h), taken for a bounded time; the result is written
 * by the I/O thread before it marks the call ended under mu, and read by the owner only after
 * it saw that mark under mu. The I/O thread's transfer state of a call is its own.
 *
 * Ownership: kinf_call_start copies the request (nothing of req is kept) and takes a client
 * reference for the call, which kinf_call_free drops: a call keeps its client alive, and the
 * last client unref may happen in kinf_call_free. A result's response and message are the
 * call's: valid until kinf_call_free.
 */
#ifndef KINF_CALL_H
#define KINF_CALL_H

#include "client.h"
#include "kinf.h"
#include "request.h"

typedef struct kinf_call kinf_call;

/* The call, or NULL with *err and a message: KINF_EINVAL for a request kinf_request_do would
 * refuse (request.h), KINF_ENOMEM, KINF_EIO when the completion fd or the I/O thread cannot be
 * made, KINF_ECLOSED for a client being freed. */
kinf_call *kinf_call_start(kinf_client *c, const kinf_request *req, kinf_err *err, char *errbuf,
                           size_t errlen);

/* 1 once the call ended (its result is there) or was cancelled; 0 while in flight. */
int kinf_call_done(kinf_call *call);

/* 0 while the call is in flight. 1 once it ended: *err is KINF_OK with *resp set, or an error
 * (KINF_EIO, KINF_ETOOBIG, KINF_ENOMEM, KINF_ECANCELED) with *msg set. The same every time
 * after that. resp and msg are the call's (valid until kinf_call_free); either may be NULL. */
int kinf_call_result(kinf_call *call, kinf_err *err, const kinf_response **resp,
                     const char **msg);

/* Cancels the call if it is in flight; does nothing otherwise (a second time too). */
void kinf_call_cancel(kinf_call *call);

/* Cancels (if in flight) and frees the call; drops its client reference. Accepts NULL. */
void kinf_call_free(kinf_call *call);

/* The client's completion fd (an eventfd, close-on-exec, non-blocking): readable once a call
 * ended since the last kinf_calls_drain. Made at the first call or here, kept until the client
 * is freed; the caller must not close it. -1 with *err (KINF_EIO, KINF_ENOMEM) and a message
 * when it cannot be made. */
int kinf_calls_fd(kinf_client *c, kinf_err *err, char *errbuf, size_t errlen);

/* Makes the fd unreadable until the next call ends; returns how many calls ended since the
 * last drain (0 when none, or when no call was ever made). */
unsigned long kinf_calls_drain(kinf_client *c);

#endif
