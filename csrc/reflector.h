/*
 * reflector.h - list + watch of one resource into a DeltaFIFO (client-go Reflector),
 * docs/semantics.md, section 4.
 *
 * Contract:
 * - start() attaches the reflector to its transport's I/O thread (transport.h; the client's,
 *   client.h, in production), which then lists (paginated,
 *   resourceVersion=0 first), replaces the FIFO's content with the list, and watches from the
 *   list's resourceVersion, turning ADDED/MODIFIED/DELETED into add/update/delete and
 *   BOOKMARKs into a newer resourceVersion. The relist, re-watch, fallback and backoff rules are
 *   client-go's (see reflector.c and docs/reflector.md). With watch_list, every list (the
 *   first and each relist) comes as a WatchList stream instead, falling back to the paginated
 *   list on failure.
 * - stop() returns once the I/O thread has aborted the reflector's transfer (well within 1 s);
 *   the reflector can be started again. free() stops it first.
 * - Every failure is kept for status() (message, HTTP code, Status reason), never only logged.
 *   Messages never contain credentials.
 *
 * Threads: new/start/stop/status/log_next/free from any thread but the transport's I/O thread;
 * the entry points of transport.h only from the I/O thread. `mu` guards the status copy.
 *
 * Ownership: the reflector holds a reference on its transport and on its FIFO.
 */
#ifndef KINF_REFLECTOR_H
#define KINF_REFLECTOR_H

#include "delta_fifo.h"
#include "kinf.h"
#include "transport.h"

/* Room for any resourceVersion the scanner accepts (KINF_SCAN_MAX_META bytes) and its NUL. */
#define KINF_REFLECTOR_RV_SIZE 1025

/* What a metadata_only reflector asks for (client-go's metadata client, JSON only): lists as
 * PartialObjectMetadataList, watch events (and a WatchList's) as PartialObjectMetadata. */
#define KINF_ACCEPT_METADATA_LIST \
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
#define KINF_ACCEPT_METADATA_WATCH \
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
#define KINF_METADATA_KIND "PartialObjectMetadata"

typedef struct kinf_reflector_config {
    const char *path;              /* "/api/v1/namespaces/default/pods" (no query) */
    const char *label_selector;    /* NULL or "" for none */
    const char *field_selector;    /* NULL or "" for none */
    int watch_list;                /* lists through WatchList streams */
    int strip_managed_fields;      /* drop metadata.managedFields while scanning */
    int gzip;                      /* lists ask for gzip (the transport decodes); watches never
                                      do (the API server does not compress them) */
    size_t page_size;              /* list page size; 0: 500 */
    double idle_timeout;           /* a transfer with no byte (headers included) for this long
                                      is ended: a watch reconnects; 0: 90 s */
    double watch_timeout;          /* timeoutSeconds lower bound (random in [t, 2t)); 0: 300 s */
    double backoff_initial;        /* 0: 0.8 s */
    double backoff_max;            /* 0: 30 s */
    size_t max_object_bytes;       /* 0: 64 MiB */
    int reuse_known;               /* a listed object whose key and resourceVersion match a
                                      record of the FIFO's known store reuses that record
                                      instead of a copy (a relist then holds one copy). Only
                                      when the store keeps records as listed (no transform) */
    int metadata_only;             /* lists and watches PartialObjectMetadata (apiVersion, kind
                                      and metadata only): KINF_ACCEPT_METADATA_*. An object of
                                      another kind (a server that ignored the form) fails the
                                      list or watch rather than being cached whole */
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

/* The reflector takes a reference on the transport (ops->retain) and on the FIFO. */
kinf_reflector *kinf_reflector_new(const kinf_transport *transport, kinf_fifo *fifo,
                                   const kinf_reflector_config *cfg, kinf_err *err, char *errbuf,
                                   size_t errlen);
kinf_err kinf_reflector_start(kinf_reflector *r);
void kinf_reflector_stop(kinf_reflector *r);
void kinf_reflector_free(kinf_reflector *r); /* stops first; accepts NULL */
void kinf_reflector_status_get(kinf_reflector *r, kinf_reflector_status *out);

/*
 * Log lines: the reflector reports failures in status() and also queues a few lines for a log
 * (the core logs nothing itself: its owner drains them on its own thread). A line is queued for
 * a failure whose kind (its message with the numbers left out, code and reason) differs from
 * the previous failure's, or for the same kind again once 60 s passed since it was last
 * queued (saying how many were left out); and one "recovered" line ("info") when a list
 * completes or a watch is served after a failure that was logged. At most 8 lines wait; more
 * are dropped. Lines hold what last_error holds: never credentials.
 *
 * kinf_reflector_log_next copies the oldest waiting line into buf (NUL-terminated, at most
 * KINF_REFLECTOR_LOG_MAX bytes used), sets *level to "warn" or "info" (static) and returns 1;
 * 0 when none waits. Any thread; cheap when none waits (no lock).
 */
#define KINF_REFLECTOR_LOG_MAX 640
int kinf_reflector_log_next(kinf_reflector *r, const char **level, char *buf, size_t len);

#endif
