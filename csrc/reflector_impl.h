/*
 * reflector_impl.h - the reflector's state, shared by its files (private: not for other parts of
 * the core).
 *
 *   reflector.c         state machine: new / start / stop / free, tick, transfers (begin, body,
 *                       done), the scanner thread's chunk callback
 *   reflector_list.c    list pages, pipelined pages, expired continuations, consistent-read retry
 *   reflector_watch.c   watch and WatchList (initial state, end bookmark), event order
 *   reflector_report.c  errors for status() and the log queue, text cleaning
 *
 * Threads and who owns each field (the tags below):
 *   [const]  set by kinf_reflector_new, read-only afterwards (any thread).
 *   [mu]     under `mu` (any thread).
 *   [io]     the transport's I/O thread (before start() hands r to it and after stop() took it
 *            back, the caller's thread: the two never overlap).
 *   [scan]   the scanner thread (the transport's queue) while a transfer's bytes are queued; the
 *            I/O thread touches them only before a transfer's first byte is queued and after
 *            flush (on_done) or cancel (io_detach), whose mutex orders the accesses. While a
 *            transfer runs, the I/O thread reads only the atomic scan_failed.
 */
#ifndef KINF_REFLECTOR_IMPL_H
#define KINF_REFLECTOR_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backoff.h"
#include "jsonscan.h"
#include "map.h"
#include "query.h"
#include "reflector.h"

#define RV_SIZE KINF_REFLECTOR_RV_SIZE
#define LOG_QUEUE 8 /* log lines kept until the owner drains them; more are dropped */

typedef enum { PH_IDLE, PH_WAIT, PH_LIST, PH_WATCH } phase_t;
typedef enum { NEXT_LIST, NEXT_WATCH } next_t;

typedef struct log_line {
    const char *level; /* "warn" or "info" (static) */
    char msg[KINF_REFLECTOR_LOG_MAX];
} log_line;

struct kinf_reflector {
    kinf_transport tr;            /* [const] */
    kinf_fifo *fifo;              /* [const] */
    char *path, *label_selector, *field_selector; /* [const] */
    int watch_list, strip, reuse_known, metadata_only, gzip; /* [const] */
    size_t page_size, max_object;                  /* [const] */
    double idle_timeout, watch_timeout;            /* [const] */
    kinf_scanner *list_scanner, *watch_scanner;    /* [const]; their state is [scan] */

    pthread_mutex_t mu;
    kinf_reflector_status st;     /* [mu] */
    int attached;                 /* [mu] from the caller's side: start/stop */
    char *early_continue;         /* [mu] a page's continue token, as soon as it was scanned */
    unsigned long early_page;     /* [mu] the page it is of (scan_page) */
    /* error reporting (reflector_report.c) */
    log_line logq[LOG_QUEUE];     /* [mu] lines not drained yet, oldest first */
    size_t nlog;                  /* [mu] */
    atomic_int log_pending;       /* nlog > 0, read without the lock by the drain */
    uint64_t fail_kind;           /* [mu] kind of the last failure logged (0: none yet) */
    double fail_logged_at;        /* [mu] when a failure of that kind was last logged */
    unsigned long fail_unlogged;  /* [mu] failures of that kind not logged since */
    unsigned long fail_run;       /* [mu] failures since the last success */
    int fail_warned;              /* [mu] a warn line went out since the last "recovered" */

    /* state machine */
    phase_t phase;                /* [io] */
    next_t next;                  /* [io] */
    double due;                   /* [io] on the transport's clock */
    kinf_xfer *xfer;              /* [io] the transfer in flight */
    kinf_scanner *scanner;        /* [scan] list_scanner or watch_scanner, for the transfer */
    long http_code;               /* [io] of the transfer in progress, 0 until a response */
    double retry_after;           /* [io] */
    char *errbody;                /* [io] non-2xx body, bounded */
    size_t errlen;                /* [io] */
    kinf_err scan_err;            /* [scan] first error raised while scanning or by callbacks */
    char scan_msg[300];           /* [scan] */
    atomic_int scan_failed;       /* scan_err was set: the I/O thread aborts the transfer */
    kinf_err pipe_err;            /* [io] the body could not be queued (out of memory) */
    char xfer_msg[300];           /* [io] transport failure of the finished transfer */
    kinf_backoff backoff;         /* [io] */
    uint64_t rng;                 /* [io] the watch's timeoutSeconds jitter */

    /* list (and the WatchList's initial state) */
    kinf_object **items;          /* [scan] */
    size_t nitems, capitems;      /* [scan] */
    kinf_map initial_keys;        /* [scan] WatchList: key -> index + 1 in items */
    char list_rv[RV_SIZE];        /* [io] rv requested by the first page of this list */
    char page_rv[RV_SIZE];        /* [scan] rv the server reported (on_list_end) */
    char *continue_token;         /* [scan] while a pipelined page is in flight (page_end) */
    unsigned long io_page;        /* [io] the list page being received (counts pages) */
    unsigned long scan_page;      /* [scan] the list page being scanned */
    char *pub_token;              /* [scan] what publish_continue last published (NULL: none) */
    char *requested_continue;     /* [scan] the token the pipelined next page was asked with */
    int early_page_failed;        /* [scan] the page before the one in flight failed (page_end) */
    long page_http_code;          /* [io] that page's status code */
    int full_list;                /* [io] the continuation expired: one unpaginated list */
    int paginated;                /* [io] the server paginated a list before */
    int rv_unavailable;           /* [io] next list with resourceVersion="" */
    int retried_unavailable;      /* [io] the consistent-read retry was made for this list */
    char last_rv[RV_SIZE];        /* [scan] */

    /* watch */
    double watch_started;         /* [io] on the transport's clock */
    unsigned long watch_events;   /* [scan] */
    int initial_phase;            /* [scan] WatchList: collecting the initial objects */
    int need_list;                /* [scan] a list is due: set when one is scheduled, cleared
                                     when a list or a WatchList's initial state completes */
    int watch_list_failed;        /* [io] a WatchList failed before its end bookmark: lists
                                     until one completes, then the next relist tries again */
    kinf_status ev_status;        /* [scan] */
    int ev_error;                 /* [scan] */
    unsigned long pub_events;     /* [scan] events of this chunk not yet in st.events */
    int pub_any;                  /* [scan] this chunk had an event (bookmarks too) */
};

/* reflector.c */
double refl_now(kinf_reflector *r);
void drop_items(kinf_reflector *r);
void schedule_backoff(kinf_reflector *r, next_t next, double retry_after);
void schedule_now(kinf_reflector *r, next_t next);
void set_phase(kinf_reflector *r, const char *phase);
int use_watch_list(const kinf_reflector *r);
/* Room in r->items for one more item (grows it); KINF_ENOMEM when it cannot grow. */
kinf_err items_room(kinf_reflector *r);
/* The path and selectors every request carries. */
void query_start(kinf_query *q, const kinf_reflector *r);
/* Starts the transfer of a built query (freed here); KINF_ENOMEM when building it failed. */
kinf_err begin_query(kinf_reflector *r, kinf_query *q, kinf_scan_mode mode);
/* A new transfer for path_query with r's callbacks, or NULL (error recorded). */
/* list: a list page (gzip as configured), else a watch or WatchList stream. */
kinf_xfer *new_transfer(kinf_reflector *r, const char *path_query, int list);
/* Resets the I/O fields of a transfer that starts (a pipelined page's [scan] are not touched). */
void started_transfer(kinf_reflector *r, kinf_xfer *x);
char *dup_span(const char *p, size_t n);
int nul_free_meta(const kinf_scan_item *item);
/* metadata_only: 0 when item is a PartialObjectMetadata; else 1 with scan_msg saying what came
 * instead (what: "list item #3", "the MODIFIED event's object"). [scan] */
int wrong_kind(kinf_reflector *r, const kinf_scan_item *item, const char *what);
/* Fills st from a non-2xx body (or from the code alone). */
void parse_errbody(kinf_reflector *r, kinf_status *st);

/* reflector_list.c */
kinf_err on_list_item(void *ud, const kinf_scan_item *item);
kinf_err on_list_end(void *ud, const kinf_scan_list_end *end);
kinf_object *list_record(kinf_reflector *r, const char *json, size_t len, const kinf_meta *meta,
                         kinf_err *err);
void publish_continue(kinf_reflector *r);
char *take_early_continue(kinf_reflector *r);
void start_list(kinf_reflector *r);
int pipelined_next_page(kinf_reflector *r, kinf_xfer_result result);
void list_done(kinf_reflector *r, kinf_xfer_result result);

/* reflector_watch.c */
kinf_err on_watch_item(void *ud, const kinf_scan_item *item);
void start_watch(kinf_reflector *r);
void watch_done(kinf_reflector *r, kinf_xfer_result result);

/* reflector_report.c */
void record_error(kinf_reflector *r, int code, const char *reason, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* A list completed or a watch was served: ends a run of failures (logs "recovered" once). what:
 * "list" or "watch". Takes mu; the _locked form expects it held. */
void note_success(kinf_reflector *r, const char *what);
void note_success_locked(kinf_reflector *r, const char *what);
void clean_text(char *s);

#endif
