/*
 * client_impl.h - the client's state, shared by client.c (configuration, credentials, easy
 * handles) and client_transport.c (the I/O thread and the reflectors' transport). Private.
 *
 * Threads: the configuration fields are immutable after kinf_client_new; `creds` is under
 * creds_mu; the fields tagged [mu] under mu, [pool] under pool_mu; [io] fields belong to the
 * I/O thread.
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
    double last_byte, idle;     /* kinf_now() of the last byte (headers too), idle_timeout */
    struct curl_slist *headers; /* this transfer's own header list (an Accept of its own), or
                                   NULL: the client's; freed with the handle */
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

#endif
