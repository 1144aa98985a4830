/*
 * request_impl.h - what a blocking request (request.c) and a call (call.c) share: checking a
 * kinf_request, setting it on an easy handle, collecting the response body within
 * max_response_bytes and reading the response's status and headers. Private to the core.
 *
 * Threads: every function works on what it is given and nothing else (no lock taken), from any
 * thread: the request's on its caller's thread, a call's on the client's I/O thread.
 */
#ifndef KINF_REQUEST_IMPL_H
#define KINF_REQUEST_IMPL_H

#include "request.h"

/* A response body being received: at most `max` bytes (too_big set past them), nomem set when
 * growing failed. Starts zeroed but for max; `p` is malloc'd and belongs to whoever holds it. */
typedef struct request_body {
    char *p;
    size_t len, cap, max;
    int too_big, nomem;
} request_body;

/* KINF_OK, or KINF_EINVAL with a message: a known method, a path starting with '/', a content
 * type with a body, and a content type and accept that fit in a header line. */
kinf_err request_check(const kinf_request *req, char *errbuf, size_t errlen);

/* The client's headers (kinf_client_headers) with the request's Content-Type and Accept, and
 * no "Expect: 100-continue". NULL when out of memory. Free with curl_slist_free_all after the
 * handle. Needs a request that request_check accepted. */
struct curl_slist *request_headers(kinf_client *c, const kinf_request *req);

/* Sets headers, the method, the body (not copied: it must live as long as the transfer) and
 * the whole request's timeout on easy. 0, or -1 when libcurl refused (out of memory). */
int request_setopts(CURL *easy, const kinf_request *req, struct curl_slist *headers);

/* Appends len bytes to b: returns len, or 0 (b->too_big or b->nomem set) to abort the
 * transfer. */
size_t request_body_add(request_body *b, const char *data, size_t len);

/* What ended a transfer early on b's account: KINF_ENOMEM or KINF_ETOOBIG with a message, or
 * KINF_OK when b is not why. */
kinf_err request_body_error(const request_body *b, char *errbuf, size_t errlen);

/* Moves b's bytes into out->body (NUL-terminated, "" for none) and out->len. KINF_ENOMEM with
 * a message when even "" cannot be allocated (b then keeps nothing either). */
kinf_err request_body_take(request_body *b, kinf_response *out, char *errbuf, size_t errlen);

/* The status, Retry-After (-1: none) and Content-Type of the response easy received. */
void request_response_info(CURL *easy, kinf_response *out);

#endif
