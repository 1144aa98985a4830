/*
 * client_impl.h - the client's state, shared by client.c (configuration, credentials, easy
 * handles) and client_transport.c (the I/O thread and the reflectors' transport). Private.
 *
 * Threads: the configuration fields are immutable after kinf_client_new; `creds` is under
 * creds_mu; the fields tagged [mu] under mu, [pool] under pool_mu; [io] fields belong to the
 * I/O thread (and to the last unref once it joined the I/O thread).
 */
#ifndef KINF_CLIENT_IMPL_H
#define KINF_CLIENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "client.h"

/* Idle easy handles kept for blocking requests: one per thread that made requests at the same
 * time, up to this many. */
#define KINF_CLIENT_POOL 4

struct kinf_client {
    atomic_long refs;
    char *server;               /* as configured, trailing slashes dropped (no secrets) */
    char *base;                 /* what request URLs start with: server, or with
                                   tls_server_name as the host */
    char *host;                 /* the name TLS verifies, for messages */
    char *user_agent, *proxy;
    char *ca_file, *cert_file, *key_file;
    char *ca_data, *cert_data, *key_data; /* PEM; key_data is wiped when freed */
    struct curl_slist *headers; /* Accept (Host with tls_server_name, Impersonate-*); no
                                   secrets */
    struct curl_slist *connect_to; /* tls_server_name: the URL's real host and port */
    int insecure;
    long connect_timeout_ms;
    kinf_warnings *warnings;    /* its own lock (warning.h) */
    kinf_creds *creds;          /* [creds_mu]: the I/O thread and blocking requests
                                   (request.h) share it */
    pthread_mutex_t creds_mu;   /* taken alone, never with mu; a refresh (exec plugin) runs
                                   under it, so it may be held for the plugin's timeout */

    pthread_mutex_t mu;
    pthread_cond_t changed;     /* signalled when a detach completes */
    CURLM *multi;               /* [io], except creation and curl_multi_wakeup */
    kinf_pipe *pipe;            /* written by the I/O thread only (pipe.h) */
    pthread_t thread;
    int thread_running;         /* [mu] */
    int stopping;               /* [mu] */
    kinf_reflector **attached;  /* [mu] reflectors the I/O thread serves */
    size_t nattached, cap;
    kinf_reflector **detaching; /* [mu] requests not yet served; capacity `cap` too */
    size_t ndetaching;
    unsigned long detach_done;  /* [mu] generation counter for waiters */
    struct kinf_xfer *xfers;    /* [io] the reflectors' transfers in flight (idle timers) */
    int *socks;                 /* [io] the sockets of the I/O thread's connections (opened and
                                   closed through client_transport.c's socket callbacks) */
    size_t nsocks, socks_cap;

    /* Calls (call.h): non-blocking requests the I/O thread runs. */
    struct kinf_call *calls_queued; /* [mu] started, not yet taken by the I/O thread; in order */
    struct kinf_call **calls_tail;  /* [mu] where the next started call is linked */
    unsigned long calls_cancels;    /* [mu] cancels of taken calls the I/O thread has not served */
    struct kinf_call *calls_start;  /* [io] taken by calls_take_locked, for calls_run to start */
    int calls_stop;                 /* [io] calls_io holds cancelled calls, for calls_run */
    struct kinf_call *calls_io;     /* [io] the calls whose transfers the I/O thread runs */
    struct kinf_wakeup *calls_wake; /* [mu] readable after completions (informer.h's eventfd);
                                       made by the first call or kinf_calls_fd, then kept until
                                       the last unref frees it */

    /* Blocking requests' easy handles between two requests (request.h): each keeps its
     * connection open for the next request (keep-alive, TLS session). */
    pthread_mutex_t pool_mu;    /* taken alone, held only to push or pop */
    struct client_pooled {
        CURL *easy;
        struct kinf_xfer *x;    /* its CURLOPT_PRIVATE, kept across curl_easy_reset */
    } pool[KINF_CLIENT_POOL];   /* [pool] */
    size_t npool;               /* [pool] */
    pid_t pool_pid;             /* [pool] the process whose handles these are: a forked child
                                   must not use nor close its parent's connections */
};

/* What the client keeps per transfer (CURLOPT_PRIVATE): the credential generation the request
 * was sent with (a 401 invalidates exactly that one) and libcurl's error detail; for a
 * reflector's transfer (client_transport.c) also its callbacks, response and idle timer. */
struct kinf_xfer {
    kinf_client *c;
    CURL *easy;
    unsigned long cred_gen;
    char errbuf[CURL_ERROR_SIZE];
    kinf_xfer_callbacks cb;
    long code;                  /* HTTP status once on_response ran */
    double retry_after;         /* from a Retry-After header, 0: none */
    int responded;              /* on_response ran */
    int headers_done;           /* the last header block seen ended (its blank line came):
                                   a failure before that is a failure reading headers */
    double last_byte, idle;     /* kinf_now() of the last byte (headers too), idle_timeout
                                   (0: none, for a call: its whole-request timeout ends it) */
    struct curl_slist *headers; /* this transfer's own header list (an Accept of its own), or
                                   NULL: the client's; freed with the handle */
    unsigned warnings;          /* Warning texts its responses carried (noted in c->warnings) */
    int local_port, peer_port;  /* the connection the request went out on (0: none yet): */
    char local_ip[48], peer_ip[48]; /* its addresses, as inet_ntop writes them */
    struct kinf_xfer *prev, *next; /* in c->xfers */
};

/* Header callbacks pass every header line here (the status line and the blank line too), so a
 * transfer knows whether it failed inside its response headers. */
void client_header_seen(struct kinf_xfer *x, const char *data, size_t len);

/* An easy handle as kinf_client_easy makes it; *x (its CURLOPT_PRIVATE) is zeroed but for c,
 * easy and cred_gen. */
CURL *client_easy(kinf_client *c, const char *path_query, struct kinf_xfer **x, char *errbuf,
                  size_t errlen);

/* ---- client_transport.c: transfers of the I/O thread, for the I/O thread only ---- */

/* A transfer as the transport's get() makes it (x->easy set up for the I/O thread: callbacks,
 * socket tracking, idle timer, Accept), not yet on the multi handle: the caller may set more
 * options (a method, a body), then client_xfer_add, or kinf_client_easy_free(x->easy) (which
 * frees x) to give up. NULL with a message. */
struct kinf_xfer *client_xfer_new(kinf_client *c, const kinf_xfer_request *req,
                                  const kinf_xfer_callbacks *cb, char *errbuf, size_t errlen);
/* Puts x on the multi handle: its callbacks run from then on, as transport.h says. 0, or -1
 * with a message and x freed. */
int client_xfer_add(kinf_client *c, struct kinf_xfer *x, char *errbuf, size_t errlen);
/* Ends x without on_done (the transport's abort: shuts its connection down when no other
 * transfer uses it, so the server sees the client go). Accepts NULL. */
void client_xfer_abort(kinf_client *c, struct kinf_xfer *x);
/* Starts the I/O thread unless it runs; mu held. KINF_ECLOSED when the client is stopping,
 * KINF_ENOMEM when the thread cannot be made. */
kinf_err client_start_io_locked(kinf_client *c);

/* ---- call.c: calls on the I/O thread ---- */

/* I/O thread, mu held: takes the calls started since the last time into c->calls_io and
 * notes which of its calls were cancelled. Bounded by the calls started and held. */
void calls_take_locked(kinf_client *c);
/* I/O thread, mu not held: starts the taken calls' transfers, aborts the cancelled ones' and
 * lets go of (frees) the calls their owners released. */
void calls_run(kinf_client *c);
/* The last unref, after the I/O thread ended: ends and frees every call left (all released:
 * each unreleased call holds a client reference) and closes the completion fd. */
void calls_free_all(kinf_client *c);

#endif
