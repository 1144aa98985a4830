/*
 * reflector.h - list + watch of one resource into a DeltaFIFO (client-go Reflector),
 * SEMANTICS.md section 4.
 *
 * Contract:
 * - start() attaches the reflector to its client's I/O thread, which then lists (paginated,
 *   resourceVersion=0 first), replaces the FIFO's content with the list, and watches from the
 *   list's resourceVersion, turning ADDED/MODIFIED/DELETED into add/update/delete and
 *   BOOKMARKs into a newer resourceVersion. The relist, re-watch, fallback and backoff rules are
 *   client-go's (see reflector.c). With watch_list, every list (the first and each relist)
 *   comes as a WatchList stream instead, falling back to the paginated list on failure.
 * - stop() returns once the I/O thread has aborted the reflector's transfer (well within 1 s);
 *   the reflector can be started again. free() stops it first.
 * - Every failure is kept for status() (message, HTTP code, Status reason), never only logged.
 *   Messages never contain credentials.
 *
 * Threads: new/start/stop/status/free from any thread but the client's I/O thread; the
 * kinf_reflector_io_* functions only from the I/O thread. `mu` guards the status copy.
 *
 * Ownership: the reflector holds a reference on its client and on its FIFO.
 */
#ifndef KINF_REFLECTOR_H
#define KINF_REFLECTOR_H

#include <curl/curl.h>

#include "client.h"
#include "delta_fifo.h"
#include "kinf.h"

/* Room for any resourceVersion the scanner accepts (KINF_SCAN_MAX_META bytes) and its NUL. */
#define KINF_REFLECTOR_RV_SIZE 1025

typedef struct kinf_reflector_config {
    const char *path;              /* "/api/v1/namespaces/default/pods" (no query) */
    const char *label_selector;    /* NULL or "" for none */
    const char *field_selector;    /* NULL or "" for none */
    int watch_list;                /* lists through WatchList streams */
    int strip_managed_fields;      /* drop metadata.managedFields while scanning */
    size_t page_size;              /* list page size; 0: 500 */
    double idle_timeout;           /* a watch with no byte for this long is reconnected; 0: 90 s */
    double watch_timeout;          /* timeoutSeconds lower bound (random in [t, 2t)); 0: 300 s */
    double backoff_initial;        /* 0: 0.8 s */
    double backoff_max;            /* 0: 30 s */
    size_t max_object_bytes;       /* 0: 64 MiB */
    int reuse_known;               /* a listed object whose key and resourceVersion match a
                                      record of the FIFO's known store reuses that record
                                      instead of a copy (a relist then holds one copy). Only
                                      when the store keeps records as listed (no transform) */
} kinf_reflector_config;

typedef struct kinf_reflector_status {
    int running;                   /* attached to the I/O thread */
    int listed;                    /* a list (or WatchList) has completed at least once */
    const char *phase;             /* "stopped", "listing", "watching", "backoff" (static) */
    char resource_version[KINF_REFLECTOR_RV_SIZE]; /* last_sync_resource_version ("" before the
                                                      first list) */
    char last_error[512];          /* "" when none yet */
    int last_error_code;           /* HTTP status of the last error, 0 for transport errors */
    char last_error_reason[128];   /* Status reason ("Expired", "Forbidden", ...) or "" */
    double last_error_time;        /* CLOCK_MONOTONIC seconds, 0 when none */
    double last_event_time;        /* CLOCK_MONOTONIC seconds of the last watch event, 0: none */
    unsigned long lists;           /* completed lists */
    unsigned long relists;         /* lists after the first */
    unsigned long watches;         /* watch requests started */
    unsigned long watch_restarts;  /* watches that ended and were restarted */
    unsigned long events;          /* watch events applied (ADDED/MODIFIED/DELETED) */
    unsigned long errors;          /* failures recorded */
    unsigned long long bytes;      /* response bytes received */
} kinf_reflector_status;

kinf_reflector *kinf_reflector_new(kinf_client *client, kinf_fifo *fifo,
                                   const kinf_reflector_config *cfg, kinf_err *err, char *errbuf,
                                   size_t errlen);
kinf_err kinf_reflector_start(kinf_reflector *r);
void kinf_reflector_stop(kinf_reflector *r);
void kinf_reflector_free(kinf_reflector *r); /* stops first; accepts NULL */
void kinf_reflector_status_get(kinf_reflector *r, kinf_reflector_status *out);

/* I/O thread only (called by client.c). */
/* Starts what is due; returns the monotonic time it next wants to be called. */
double kinf_reflector_io_tick(kinf_reflector *r, double now);
/* A transfer of r finished; r removes and cleans up `easy`. */
void kinf_reflector_io_done(kinf_reflector *r, CURL *easy, CURLcode result);
/* r is being detached: abort its transfer, drop partial state. */
void kinf_reflector_io_detach(kinf_reflector *r);

/*
 * Test seam: the reflector's handling of responses without libcurl, the I/O thread or the pipe,
 * for C tests and the fuzzer (csrc/fuzz/fuzz_reflector.c); not for production use. The test
 * plays the API server, one response at a time, on one thread:
 *
 *   kinf_reflector_test_start(r)      instead of start(): r must never have been started; it
 *                                     then never makes a transfer and start() refuses it
 *                                     (KINF_EINVAL). The client is never asked for anything.
 *   kinf_reflector_test_request(r, &q) the request r now waits a response to: KINF_TEST_LIST
 *                                     (a list page) or KINF_TEST_WATCH, *q its path and query
 *                                     (valid until the next call). If r is waiting (backoff, an
 *                                     immediate retry), the wait ends first as if its time had
 *                                     come. KINF_TEST_NONE (q NULL) when r has nothing to ask.
 *   kinf_reflector_test_response(r, code, retry_after)  the response's status and Retry-After.
 *   kinf_reflector_test_body(r, buf, len)  the next body bytes, taken exactly as the write
 *                                     callback takes them, except that a 2xx body is scanned on
 *                                     the calling thread at once (events reach the FIFO before
 *                                     the call returns). Returns len, or 0 where libcurl would
 *                                     be told to abort (the body already failed): then end
 *                                     with CURLE_WRITE_ERROR as libcurl would.
 *   kinf_reflector_test_end(r, result, lasted)  the transfer ended with `result` (CURLE_OK; a
 *                                     dropped connection is e.g. CURLE_PARTIAL_FILE), `lasted`
 *                                     seconds after it started: the list / watch rules run as
 *                                     in kinf_reflector_io_done (FIFO replace, status, errors,
 *                                     the next request or a backoff).
 *
 * status_get, the FIFO and free work as usual. The caller keeps the sequence: request, response,
 * body bytes, end; body and end outside a request do nothing.
 */
typedef enum { KINF_TEST_NONE, KINF_TEST_LIST, KINF_TEST_WATCH } kinf_reflector_test_req;

kinf_err kinf_reflector_test_start(kinf_reflector *r);
kinf_reflector_test_req kinf_reflector_test_request(kinf_reflector *r, const char **path_query);
void kinf_reflector_test_response(kinf_reflector *r, long http_code, double retry_after);
size_t kinf_reflector_test_body(kinf_reflector *r, const char *buf, size_t len);
void kinf_reflector_test_end(kinf_reflector *r, CURLcode result, double lasted);

#endif
