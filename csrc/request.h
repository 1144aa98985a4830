/*
 * request.h - one blocking request to the API server, on the calling thread.
 *
 * Contract:
 * - kinf_request_do sends method + path_query (+ body) to the client's server with the client's
 *   TLS settings and credentials (client.h) and waits for the whole response. It does not use
 *   the client's I/O thread: list/watch transfers go on while it waits, and it never waits for
 *   them. It blocks its thread for up to `timeout`; not for an nginx request handler.
 * - KINF_OK means an HTTP response arrived, whatever its status: the caller reads out->status
 *   and out->body (a Kubernetes Status for errors). Failures before a response (connection
 *   refused, TLS, timeout, credentials plugin failing) are KINF_EIO with libcurl's message;
 *   a response body over max_response_bytes is KINF_ETOOBIG ("response larger than ...")
 *   and nothing of it is returned; out of memory is KINF_ENOMEM. Messages never hold secrets.
 * - A 401 answered to a refreshable credential (token file, exec plugin) marks it stale and the
 *   request is sent once more with the refreshed credential; a second 401 is returned as is.
 * - The body is sent as given (no encoding); content_type is required with a body.
 * - accept, when set, replaces the client's "Accept: application/json" (discovery asks for
 *   aggregated discovery this way); out->content_type is the response's Content-Type
 *   (truncated to fit, "" when absent).
 * - The connection stays open for the next request of the client (kinf_client_easy_take /
 *   give, client.h): consecutive requests share one connection and its TLS session.
 *
 * Threads: any thread; several threads may run requests on one client at once.
 * Ownership: out->body is malloc'd (NUL-terminated) and belongs to the caller: free it with
 * kinf_response_free. Nothing of req is kept after the call.
 */
#ifndef KINF_REQUEST_H
#define KINF_REQUEST_H

#include <stddef.h>

#include "client.h"
#include "kinf.h"

#define KINF_REQUEST_DEFAULT_TIMEOUT 30.0                   /* seconds */
#define KINF_REQUEST_DEFAULT_MAX_RESPONSE ((size_t)64 << 20) /* 64 MiB, like max_object_bytes */

typedef struct kinf_request {
    const char *method;        /* "GET", "POST", "PUT", "PATCH" or "DELETE" */
    const char *path_query;    /* "/api/v1/namespaces/default/pods/x?dryRun=All" */
    const char *body;          /* NULL for none */
    size_t body_len;
    const char *content_type;  /* e.g. "application/merge-patch+json"; required with a body */
    double timeout;            /* whole request, seconds; 0: KINF_REQUEST_DEFAULT_TIMEOUT */
    size_t max_response_bytes; /* 0: KINF_REQUEST_DEFAULT_MAX_RESPONSE */
    const char *accept;        /* NULL: the client's default (application/json) */
} kinf_request;

typedef struct kinf_response {
    long status;        /* HTTP status code */
    char *body;         /* malloc'd, NUL-terminated (may be ""); caller frees */
    size_t len;
    double retry_after; /* seconds from a Retry-After header in seconds form; -1: none */
    char content_type[256]; /* the response's Content-Type, "" when absent */
    unsigned warnings;  /* Warning texts (code 299) it carried, noted in the client's record
                           (kinf_client_warnings) for the log */
} kinf_response;

kinf_err kinf_request_do(kinf_client *c, const kinf_request *req, kinf_response *out,
                         char *errbuf, size_t errlen);
void kinf_response_free(kinf_response *r); /* frees the body, keeps the struct; accepts NULL */

#endif
