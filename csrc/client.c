/*
 * client.c - API server connection and its I/O thread (contract in client.h).
 *
 * The I/O thread loops: take attach/detach requests, let each reflector start what its timers
 * say (kinf_reflector_io_tick), run curl_multi_perform, hand finished transfers back to their
 * reflector (kinf_reflector_io_done), then sleep in curl_multi_poll until a socket is ready,
 * the nearest reflector deadline passes, or another thread calls curl_multi_wakeup.
 *
 * Its second thread, the scanner thread of `pipe` (pipe.h), consumes what the I/O thread
 * receives: the reflectors' write callbacks copy body bytes into the pipe and return at once,
 * and the scanner thread runs jsonscan, builds the records and queues them in the DeltaFIFO,
 * so receiving and scanning overlap. Both threads start with the first attach (the pipe's at
 * its first write) and are joined by the last unref: the I/O thread first (it is the pipe's
 * only writer), then the pipe.
 */
#include "client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipe.h"
#include "reflector.h"

#define MAX_REFLECTORS_PER_CLIENT 4096
/* Received bytes in flight between the I/O thread and the scanner thread: at most
 * PIPE_BLOCKS blocks of PIPE_BLOCK bytes (4 MiB), about 2 ms of scanning. */
#define PIPE_BLOCK ((size_t)256 << 10)
#define PIPE_BLOCKS 16

struct kinf_client {
    atomic_long refs;
    char *server, *ca_file, *user_agent;
    struct curl_slist *headers; /* Authorization lives here and in no other place */
    int insecure;
    long connect_timeout_ms;

    pthread_mutex_t mu;
    pthread_cond_t changed;     /* signalled when a detach completes */
    CURLM *multi;               /* I/O thread, except creation and curl_multi_wakeup */
    kinf_pipe *pipe;            /* written by the I/O thread only (pipe.h) */
    pthread_t thread;
    int thread_running;         /* [mu] */
    int stopping;               /* [mu] */
    kinf_reflector **attached;  /* [mu] reflectors the I/O thread serves */
    size_t nattached, cap;
    kinf_reflector **detaching; /* [mu] requests not yet served; capacity `cap` too */
    size_t ndetaching;
    unsigned long detach_done;  /* [mu] generation counter for waiters */
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

kinf_client *kinf_client_new(const kinf_client_config *cfg, kinf_err *err, char *errbuf,
                             size_t errlen)
{
    kinf_client *c;
    size_t len;

    if (cfg == NULL || cfg->server == NULL ||
        (strncmp(cfg->server, "http://", 7) != 0 && strncmp(cfg->server, "https://", 8) != 0)) {
        kinf_errmsg(errbuf, errlen, "server must be an http:// or https:// URL");
        *err = KINF_EINVAL;
        return NULL;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        kinf_errmsg(errbuf, errlen, "libcurl initialisation failed");
        *err = KINF_EIO;
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        goto nomem;
    atomic_init(&c->refs, 1);
    c->server = strdup(cfg->server);
    c->ca_file = dup_or_null(cfg->ca_file);
    c->user_agent = strdup(cfg->user_agent ? cfg->user_agent : "kinformer/0.1");
    if (c->server == NULL || c->user_agent == NULL || (cfg->ca_file && c->ca_file == NULL))
        goto nomem;
    len = strlen(c->server);
    while (len > 0 && c->server[len - 1] == '/')
        c->server[--len] = '\0';
    c->insecure = cfg->insecure_skip_tls_verify;
    c->connect_timeout_ms = cfg->connect_timeout > 0 ? (long)(cfg->connect_timeout * 1000) : 10000;
    c->headers = curl_slist_append(NULL, "Accept: application/json");
    if (c->headers == NULL)
        goto nomem;
    if (cfg->token != NULL && cfg->token[0]) {
        size_t n = strlen(cfg->token) + 32;
        char *h = malloc(n);
        struct curl_slist *more;
        if (h == NULL)
            goto nomem;
        kinf_errmsg(h, n, "Authorization: Bearer %s", cfg->token);
        more = curl_slist_append(c->headers, h);
        memset(h, 0, n); /* no stray copy of the token */
        free(h);
        if (more == NULL)
            goto nomem;
        c->headers = more;
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        goto nomem;
    if (pthread_cond_init(&c->changed, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        goto nomem;
    }
    c->multi = curl_multi_init();
    c->pipe = c->multi ? kinf_pipe_new(PIPE_BLOCK, PIPE_BLOCKS, err) : NULL;
    if (c->pipe == NULL) {
        curl_multi_cleanup(c->multi);
        pthread_cond_destroy(&c->changed);
        pthread_mutex_destroy(&c->mu);
        goto nomem;
    }
    *err = KINF_OK;
    return c;
nomem:
    if (c != NULL) {
        curl_slist_free_all(c->headers);
        free(c->server);
        free(c->ca_file);
        free(c->user_agent);
        free(c);
    }
    curl_global_cleanup();
    kinf_errmsg(errbuf, errlen, "out of memory");
    *err = KINF_ENOMEM;
    return NULL;
}

kinf_client *kinf_client_ref(kinf_client *c)
{
    if (c != NULL)
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    return c;
}

void kinf_client_unref(kinf_client *c)
{
    int running;
    if (c == NULL || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    running = c->thread_running;
    pthread_mutex_unlock(&c->mu);
    if (running) {
        curl_multi_wakeup(c->multi);
        pthread_join(c->thread, NULL);
    }
    kinf_pipe_free(c->pipe); /* after the I/O thread, its only writer */
    curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->headers);
    free(c->attached);
    free(c->detaching);
    free(c->server);
    free(c->ca_file);
    free(c->user_agent);
    pthread_cond_destroy(&c->changed);
    pthread_mutex_destroy(&c->mu);
    free(c);
    curl_global_cleanup();
}

kinf_pipe *kinf_client_pipe(kinf_client *c)
{
    return c->pipe;
}

const char *kinf_client_server(const kinf_client *c)
{
    return c->server;
}

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Serves pending detach requests. Called with mu held. */
static void serve_detaches_locked(kinf_client *c)
{
    for (size_t i = 0; i < c->ndetaching; i++) {
        kinf_reflector *r = c->detaching[i];
        for (size_t j = 0; j < c->nattached; j++) {
            if (c->attached[j] == r) {
                c->attached[j] = c->attached[--c->nattached];
                break;
            }
        }
        kinf_reflector_io_detach(r);
    }
    if (c->ndetaching) {
        c->ndetaching = 0;
        c->detach_done++;
        pthread_cond_broadcast(&c->changed);
    }
}

static void *io_thread(void *arg)
{
    kinf_client *c = arg;
    kinf_reflector *snapshot[64], **list = snapshot;
    size_t cap = 64;

    for (;;) {
        double now, next;
        size_t n;
        int running, timeout_ms, queued;
        CURLMsg *msg;

        pthread_mutex_lock(&c->mu);
        serve_detaches_locked(c);
        if (c->stopping) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        if (c->nattached > cap) {
            kinf_reflector **grown = malloc(c->nattached * sizeof(*grown));
            if (grown != NULL) {
                if (list != snapshot)
                    free(list);
                list = grown;
                cap = c->nattached;
            }
        }
        n = c->nattached < cap ? c->nattached : cap;
        memcpy(list, c->attached, n * sizeof(*list));
        pthread_mutex_unlock(&c->mu);

        /* Reflectors in `list` stay valid: only this thread forgets them (in
         * serve_detaches_locked above), and a detacher waits for that. */
        now = monotonic_now();
        next = now + 1.0;
        for (size_t i = 0; i < n; i++) {
            double due = kinf_reflector_io_tick(list[i], now);
            if (due < next)
                next = due;
        }
        curl_multi_perform(c->multi, &running);
        while ((msg = curl_multi_info_read(c->multi, &queued)) != NULL) {
            if (msg->msg == CURLMSG_DONE) {
                CURL *easy = msg->easy_handle;
                CURLcode result = msg->data.result;
                void *priv = NULL;
                curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&priv);
                /* io_done removes and cleans up the handle; msg is invalid afterwards. */
                kinf_reflector_io_done(priv, easy, result);
            }
        }
        now = monotonic_now();
        timeout_ms = next <= now ? 0 : (int)((next - now) * 1000) + 1;
        if (timeout_ms > 1000)
            timeout_ms = 1000;
        if (timeout_ms > 0)
            curl_multi_poll(c->multi, NULL, 0, timeout_ms, NULL);
    }
    if (list != snapshot)
        free(list);
    return NULL;
}

kinf_err kinf_client_attach(kinf_client *c, kinf_reflector *r)
{
    kinf_err err = KINF_OK;
    pthread_mutex_lock(&c->mu);
    if (c->stopping) {
        err = KINF_ECLOSED;
    } else if (c->nattached >= MAX_REFLECTORS_PER_CLIENT) {
        err = KINF_EINVAL;
    } else {
        if (c->nattached == c->cap) {
            /* The detach queue grows with the attached list, so detach never allocates. */
            size_t ncap = c->cap ? c->cap * 2 : 8;
            kinf_reflector **grown = realloc(c->attached, ncap * sizeof(*grown));
            kinf_reflector **det = grown ? realloc(c->detaching, ncap * sizeof(*det)) : NULL;
            if (grown != NULL)
                c->attached = grown;
            if (det != NULL) {
                c->detaching = det;
                c->cap = ncap;
            } else {
                err = KINF_ENOMEM;
            }
        }
        if (err == KINF_OK && !c->thread_running) {
            if (pthread_create(&c->thread, NULL, io_thread, c) != 0)
                err = KINF_ENOMEM;
            else
                c->thread_running = 1;
        }
        if (err == KINF_OK) {
            c->attached[c->nattached++] = r;
            kinf_client_ref(c);
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (err == KINF_OK)
        curl_multi_wakeup(c->multi);
    return err;
}

void kinf_client_detach(kinf_client *c, kinf_reflector *r)
{
    int found = 0;
    unsigned long gen;

    pthread_mutex_lock(&c->mu);
    for (size_t j = 0; j < c->nattached; j++)
        found |= c->attached[j] == r;
    if (!found) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    /* Room was reserved at attach: detaching never allocates and so never fails. */
    c->detaching[c->ndetaching++] = r;
    gen = c->detach_done;
    pthread_mutex_unlock(&c->mu);
    curl_multi_wakeup(c->multi);
    pthread_mutex_lock(&c->mu);
    while (gen == c->detach_done)
        pthread_cond_wait(&c->changed, &c->mu);
    pthread_mutex_unlock(&c->mu);
    kinf_client_unref(c);
}

CURL *kinf_client_easy(kinf_client *c, const char *path_query, void *priv, char *errbuf,
                       size_t errlen)
{
    CURL *easy = curl_easy_init();
    size_t n = strlen(c->server) + strlen(path_query) + 1;
    char *url;

    if (easy == NULL || (url = malloc(n)) == NULL) {
        curl_easy_cleanup(easy);
        kinf_errmsg(errbuf, errlen, "out of memory");
        return NULL;
    }
    memcpy(url, c->server, strlen(c->server));
    memcpy(url + strlen(c->server), path_query, strlen(path_query) + 1);
    curl_easy_setopt(easy, CURLOPT_URL, url); /* curl copies it */
    free(url);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, priv);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, c->insecure ? 0L : 1L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, c->insecure ? 0L : 2L);
    if (c->ca_file != NULL)
        curl_easy_setopt(easy, CURLOPT_CAINFO, c->ca_file);
    return easy;
}

kinf_err kinf_client_add(kinf_client *c, CURL *easy)
{
    return curl_multi_add_handle(c->multi, easy) == CURLM_OK ? KINF_OK : KINF_EIO;
}

void kinf_client_remove(kinf_client *c, CURL *easy)
{
    if (easy == NULL)
        return;
    curl_multi_remove_handle(c->multi, easy);
    curl_easy_cleanup(easy);
}
