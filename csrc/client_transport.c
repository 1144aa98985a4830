/*
 * client_transport.c - the client's I/O thread and the transport it gives reflectors
 * (transport.h; kinf_client_transport in client.h).
 *
 * The I/O thread loops: take attach/detach requests and the calls started or cancelled since
 * (call.c), let each reflector start what its timers say (kinf_reflector_io_tick), start and
 * abort the calls' transfers, run curl_multi_perform, hand finished transfers back to their
 * callbacks (on_response if not done yet, then on_done), end transfers idle for longer than
 * their idle_timeout, then sleep in curl_multi_poll until a socket is ready, the nearest
 * reflector deadline or idle deadline passes, or another thread calls curl_multi_wakeup.
 * A call's transfer is made the same way as a reflector's (client_xfer_new, client_impl.h),
 * with no idle timer: its whole-request timeout is libcurl's.
 *
 * A transfer that asks for an Accept of its own (kinf_xfer_request.accept: a reflector's
 * metadata-only lists and watches) gets a copy of the client's headers with that Accept line
 * instead of the client's, kept with the transfer and freed with its handle.
 *
 * Idle timer: every transfer keeps the kinf_now() of its last received byte (headers included,
 * set in the header and write callbacks); the loop ends a transfer whose last byte is
 * idle_timeout old as KINF_XFER_TIMEDOUT, and never sleeps past the nearest such deadline.
 * (libcurl's low-speed check averages over its window and fired seconds late.)
 *
 * Connections: transfers wait for the client's HTTP/2 connection rather than open their own
 * (CURLOPT_PIPEWAIT; client.h). The I/O thread opens and closes its connections' sockets itself
 * (CURLOPT_OPENSOCKETFUNCTION / CLOSESOCKETFUNCTION) and so knows them (c->socks, [io]); each
 * transfer learns the addresses of the connection it went out on (CURLOPT_PREREQFUNCTION, for
 * new and reused connections alike), which find its socket among them. A transfer ended by the
 * idle timer shuts its connection's socket down: a silent HTTP/2 connection stays in libcurl's
 * cache while it carries other streams and would take the retries too (libcurl keeps a
 * multiplexed connection when one stream is removed; it checks a connection only for being
 * closed, which a frozen peer's is not). Shut down, it fails every stream on it at once and is
 * never reused. HTTP/1.1 loses nothing: libcurl closes a connection whose response was cut
 * short anyway. The same goes for the last stream of a connection aborted by stop (t_abort).
 *
 * A finished transfer whose status is 401 marks the credential generation it carried as stale
 * before its reflector sees the result; the reflector's normal error path (backoff, then a new
 * request) then picks up a refreshed token. The pipe's scanner thread (pipe.h) consumes what
 * the reflectors queue: the write callback copies body bytes into the pipe and returns at once.
 * Both threads start with the first attach or call (the pipe's at its first write) and are
 * joined by the last unref (client.c): the I/O thread first (it is the pipe's only writer),
 * then the pipe.
 * Warning headers are noted in the client's record (warning.h) as they arrive.
 *
 * Threads: attach / detach from the reflector's owner, client_start_io_locked from whoever
 * starts the thread (under mu); everything else here on the I/O thread. c->xfers is the I/O
 * thread's alone.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_impl.h"

#define MAX_REFLECTORS_PER_CLIENT 4096
#define RECV_BUFFER (128L * 1024)
#define MAX_ACCEPT 1024 /* bytes of a transfer's own Accept value */

/* ---- the I/O thread's sockets ---- */

static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    kinf_client *c = ud;
    int fd;
    (void)purpose;
    fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd < 0)
        return CURL_SOCKET_BAD;
    if (c->nsocks == c->socks_cap) {
        size_t ncap = c->socks_cap ? c->socks_cap * 2 : 8;
        int *grown = realloc(c->socks, ncap * sizeof(*grown));
        if (grown == NULL)
            return fd; /* works, untracked: an idle end cannot shut it down */
        c->socks = grown;
        c->socks_cap = ncap;
    }
    c->socks[c->nsocks++] = fd;
    return fd;
}

static int close_socket(void *ud, curl_socket_t fd)
{
    kinf_client *c = ud;
    for (size_t i = 0; i < c->nsocks; i++) {
        if (c->socks[i] == fd) {
            c->socks[i] = c->socks[--c->nsocks];
            break;
        }
    }
    return close(fd);
}

/* Whether a socket address is ip:port (ip as inet_ntop writes it, as libcurl does). */
static int addr_is(const struct sockaddr_storage *ss, const char *ip, int port)
{
    char buf[INET6_ADDRSTRLEN];
    const void *a;
    int p;
    if (ss->ss_family == AF_INET) {
        a = &((const struct sockaddr_in *)ss)->sin_addr;
        p = ntohs(((const struct sockaddr_in *)ss)->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        p = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    } else {
        return 0;
    }
    return p == port && inet_ntop(ss->ss_family, a, buf, sizeof(buf)) != NULL &&
           strcmp(buf, ip) == 0;
}

/* Shuts down the socket of the connection x went out on, found by its two addresses. */
static void shut_connection(kinf_client *c, const struct kinf_xfer *x)
{
    if (x->local_port == 0)
        return; /* never connected: removing it closes its connection */
    for (size_t i = 0; i < c->nsocks; i++) {
        struct sockaddr_storage local, peer;
        socklen_t ll = sizeof(local), pl = sizeof(peer);
        if (getsockname(c->socks[i], (struct sockaddr *)&local, &ll) == 0 &&
            getpeername(c->socks[i], (struct sockaddr *)&peer, &pl) == 0 &&
            addr_is(&local, x->local_ip, x->local_port) &&
            addr_is(&peer, x->peer_ip, x->peer_port)) {
            (void)shutdown(c->socks[i], SHUT_RDWR);
            return;
        }
    }
}

/* ---- transfers ---- */

/* Called once the connection is there (new or reused), before the request goes out. */
static int on_prereq(void *ud, char *peer_ip, char *local_ip, int peer_port, int local_port)
{
    struct kinf_xfer *x = ud;
    snprintf(x->local_ip, sizeof(x->local_ip), "%s", local_ip ? local_ip : "");
    snprintf(x->peer_ip, sizeof(x->peer_ip), "%s", peer_ip ? peer_ip : "");
    x->local_port = local_port;
    x->peer_port = peer_port;
    return CURL_PREREQFUNC_OK;
}

static void link_xfer(kinf_client *c, struct kinf_xfer *x)
{
    x->prev = NULL;
    x->next = c->xfers;
    if (c->xfers != NULL)
        c->xfers->prev = x;
    c->xfers = x;
}

/* Takes x off the multi handle and the idle list and frees it. */
static void drop_xfer(kinf_client *c, struct kinf_xfer *x)
{
    if (x->prev != NULL)
        x->prev->next = x->next;
    else if (c->xfers == x)
        c->xfers = x->next;
    if (x->next != NULL)
        x->next->prev = x->prev;
    curl_multi_remove_handle(c->multi, x->easy); /* fine for a handle never added */
    kinf_client_easy_free(x->easy);              /* frees x too (CURLOPT_PRIVATE) */
}

/* Runs on_response once, with the status libcurl has (none: not yet a response). */
static void respond(struct kinf_xfer *x)
{
    long code = 0;
    if (x->responded)
        return;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code == 0)
        return;
    x->responded = 1;
    x->code = code;
    x->cb.on_response(x->cb.ud, code, x->retry_after);
}

static size_t on_header(char *data, size_t size, size_t nitems, void *ud)
{
    struct kinf_xfer *x = ud;
    size_t len = size * nitems;
    x->last_byte = kinf_now();
    client_header_seen(x, data, len);
    if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0)
        x->retry_after = strtod(data + 12, NULL);
    else if (len > 8 && strncasecmp(data, "Warning:", 8) == 0)
        x->warnings += (unsigned)kinf_warnings_note(x->c->warnings, data + 8, len - 8);
    return len;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
    struct kinf_xfer *x = ud;
    x->last_byte = kinf_now();
    respond(x);
    return x->cb.on_body(x->cb.ud, data, size * nmemb);
}

/* Ends x: on_response (when a response came and it did not run yet), x freed, then on_done
 * (which may start the next transfer). */
static void finish(kinf_client *c, struct kinf_xfer *x, kinf_xfer_result result,
                   const char *msg)
{
    kinf_xfer_callbacks cb = x->cb;
    respond(x);
    drop_xfer(c, x);
    cb.on_done(cb.ud, result, msg);
}

struct kinf_xfer *client_xfer_new(kinf_client *c, const kinf_xfer_request *req,
                                  const kinf_xfer_callbacks *cb, char *errbuf, size_t errlen)
{
    struct kinf_xfer *x;
    CURL *easy;
    int failed = 0;

    if (req->accept != NULL && (req->accept[0] == '\0' || strlen(req->accept) > MAX_ACCEPT ||
                                strpbrk(req->accept, "\r\n") != NULL)) {
        kinf_errmsg(errbuf, errlen, "Accept header value empty, too long or not one line");
        return NULL;
    }
    if ((easy = client_easy(c, req->path_query, &x, errbuf, errlen)) == NULL)
        return NULL;
    if (req->accept != NULL) {
        char line[MAX_ACCEPT + sizeof("Accept: ")];
        const char *extra[] = {line, NULL};
        snprintf(line, sizeof(line), "Accept: %s", req->accept);
        /* The client's headers with this Accept instead of its default (never sent twice). */
        if ((x->headers = kinf_client_headers(c, extra)) == NULL) {
            kinf_client_easy_free(easy);
            kinf_errmsg(errbuf, errlen, "out of memory");
            return NULL;
        }
        failed |= curl_easy_setopt(easy, CURLOPT_HTTPHEADER, x->headers) != CURLE_OK;
    }
    x->cb = *cb;
    x->idle = req->idle_timeout;
    x->last_byte = kinf_now();
    failed |= curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_WRITEDATA, x) != CURLE_OK;
    /* Fewer, larger reads: a big list arrives in 128 KiB pieces instead of 16 KiB ones. */
    failed |= curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, RECV_BUFFER) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_HEADERDATA, x) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 1L) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, open_socket) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, c) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, close_socket) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, c) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_PREREQFUNCTION, on_prereq) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_PREREQDATA, x) != CURLE_OK;
    /* libcurl decodes: on_body gets the JSON. */
    if (req->gzip)
        failed |= curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, "gzip") != CURLE_OK;
    if (failed) {
        kinf_client_easy_free(easy);
        kinf_errmsg(errbuf, errlen, "cannot start a transfer");
        return NULL;
    }
    return x;
}

int client_xfer_add(kinf_client *c, struct kinf_xfer *x, char *errbuf, size_t errlen)
{
    if (curl_multi_add_handle(c->multi, x->easy) != CURLM_OK) {
        kinf_client_easy_free(x->easy); /* frees x too */
        kinf_errmsg(errbuf, errlen, "cannot start a transfer");
        return -1;
    }
    link_xfer(c, x);
    return 0;
}

static kinf_xfer *t_get(void *impl, const kinf_xfer_request *req, const kinf_xfer_callbacks *cb,
                        char *errbuf, size_t errlen)
{
    kinf_client *c = impl;
    struct kinf_xfer *x = client_xfer_new(c, req, cb, errbuf, errlen);
    if (x == NULL || client_xfer_add(c, x, errbuf, errlen) != 0)
        return NULL;
    return x;
}

/* Whether another transfer in flight went out on x's connection. */
static int connection_shared(kinf_client *c, const struct kinf_xfer *x)
{
    for (const struct kinf_xfer *y = c->xfers; y != NULL; y = y->next)
        if (y != x && y->local_port == x->local_port && y->peer_port == x->peer_port &&
            strcmp(y->local_ip, x->local_ip) == 0 && strcmp(y->peer_ip, x->peer_ip) == 0)
            return 1;
    return 0;
}

void client_xfer_abort(kinf_client *c, struct kinf_xfer *x)
{
    if (x == NULL)
        return;
    /* libcurl (7.88) queues an aborted HTTP/2 stream's RST_STREAM but sends it only with the
     * connection's next frame: the last stream of a connection would stay open at the server
     * (a watch there) until the connection is used again. Closed instead, it ends there at
     * once; a stream that shares its connection is reset with the others' next frame. */
    if (x->local_port != 0 && !connection_shared(c, x))
        shut_connection(c, x);
    drop_xfer(c, x);
}

static void t_abort(void *impl, kinf_xfer *x)
{
    client_xfer_abort(impl, x);
}

/* Ends the transfers idle for their idle_timeout; returns the nearest idle deadline (or
 * `next` when it is sooner) and counts the ended ones in *ended. */
static double end_idle(kinf_client *c, double next, int *ended)
{
    struct kinf_xfer *x;
    double now = kinf_now();
again:
    for (x = c->xfers; x != NULL; x = x->next) {
        if (x->idle <= 0)
            continue; /* a call: libcurl's whole-request timeout ends it */
        if (now - x->last_byte >= x->idle) {
            char msg[64];
            snprintf(msg, sizeof(msg), "no data for %.0f s", x->idle);
            shut_connection(c, x);
            finish(c, x, KINF_XFER_TIMEDOUT, msg);
            (*ended)++;
            goto again; /* on_done may have started a transfer: the list changed */
        }
        if (x->last_byte + x->idle < next)
            next = x->last_byte + x->idle;
    }
    return next;
}

/* ---- the I/O thread ---- */

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
        if (!c->stopping)
            kinf_creds_interrupt(c->creds, 0); /* plugins may run again */
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
        int running, timeout_ms, queued, done = 0;
        CURLMsg *msg;

        pthread_mutex_lock(&c->mu);
        serve_detaches_locked(c);
        if (c->stopping) {
            pthread_mutex_unlock(&c->mu);
            break;
        }
        calls_take_locked(c);
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
        if (n > 0) /* none attached: calls alone started the thread (c->attached may be NULL) */
            memcpy(list, c->attached, n * sizeof(*list));
        pthread_mutex_unlock(&c->mu);

        /* Reflectors in `list` stay valid: only this thread forgets them (in
         * serve_detaches_locked above), and a detacher waits for that. */
        now = kinf_now();
        next = now + 1.0;
        for (size_t i = 0; i < n; i++) {
            double due = kinf_reflector_io_tick(list[i], now);
            if (due < next)
                next = due;
        }
        calls_run(c);
        curl_multi_perform(c->multi, &running);
        while ((msg = curl_multi_info_read(c->multi, &queued)) != NULL) {
            if (msg->msg == CURLMSG_DONE) {
                CURL *easy = msg->easy_handle;
                CURLcode result = msg->data.result;
                struct kinf_xfer *x = NULL;
                long code = 0;
                char why[300] = "";
                done++;
                curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
                curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
                if (code == 401) /* refresh what this request carried before the next one */
                    kinf_client_unauthorized(c, easy);
                if (result != CURLE_OK)
                    kinf_client_transfer_error(c, easy, result, why, sizeof(why));
                /* msg is invalid once the handle is removed (in finish). */
                finish(c, x, result == CURLE_OK ? KINF_XFER_OK : KINF_XFER_FAILED, why);
            }
        }
        next = end_idle(c, next, &done);
        now = kinf_now();
        /* A finished transfer may have scheduled its follow-up (a retry after a short
         * backoff, the next page) after `next` was computed: tick again before sleeping. */
        timeout_ms = done || next <= now ? 0 : (int)((next - now) * 1000) + 1;
        if (timeout_ms > 1000)
            timeout_ms = 1000;
        if (timeout_ms > 0)
            curl_multi_poll(c->multi, NULL, 0, timeout_ms, NULL);
    }
    if (list != snapshot)
        free(list);
    return NULL;
}

kinf_err client_start_io_locked(kinf_client *c)
{
    if (c->stopping)
        return KINF_ECLOSED;
    if (!c->thread_running) {
        if (pthread_create(&c->thread, NULL, io_thread, c) != 0)
            return KINF_ENOMEM;
        c->thread_running = 1;
    }
    return KINF_OK;
}

/* ---- the transport's other functions ---- */

static kinf_err t_attach(void *impl, kinf_reflector *r)
{
    kinf_client *c = impl;
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
        if (err == KINF_OK)
            err = client_start_io_locked(c);
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

static void t_detach(void *impl, kinf_reflector *r)
{
    kinf_client *c = impl;
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
    /* The I/O thread may be running an exec plugin (under creds_mu, for up to its timeout):
     * that run ends now, so the detach is served at once. Set under mu, as the I/O thread
     * clears it under mu once it served the detaches: a detach never finds it cleared early. */
    kinf_creds_interrupt(c->creds, 1);
    gen = c->detach_done;
    pthread_mutex_unlock(&c->mu);
    curl_multi_wakeup(c->multi);
    pthread_mutex_lock(&c->mu);
    while (gen == c->detach_done)
        pthread_cond_wait(&c->changed, &c->mu);
    pthread_mutex_unlock(&c->mu);
    kinf_client_unref(c);
}

static kinf_err t_queue(void *impl, kinf_pipe_fn fn, void *target, const char *buf, size_t len)
{
    return kinf_pipe_write(((kinf_client *)impl)->pipe, fn, target, buf, len);
}

static void t_flush(void *impl, void *target)
{
    kinf_pipe_flush(((kinf_client *)impl)->pipe, target);
}

static void t_cancel(void *impl, void *target)
{
    kinf_pipe_cancel(((kinf_client *)impl)->pipe, target);
}

static double t_now(void *impl)
{
    (void)impl;
    return kinf_now();
}

static void t_retain(void *impl)
{
    kinf_client_ref(impl);
}

static void t_release(void *impl)
{
    kinf_client_unref(impl);
}

static void t_wake(void *impl)
{
    curl_multi_wakeup(((kinf_client *)impl)->multi); /* thread-safe, and io_tick runs each loop */
}

static const kinf_transport_ops CLIENT_TRANSPORT = {
    t_attach, t_detach, t_get, t_abort, t_queue, t_flush, t_cancel, t_now, t_retain, t_release,
    t_wake,
};

kinf_transport kinf_client_transport(kinf_client *c)
{
    kinf_transport t;
    t.ops = &CLIENT_TRANSPORT;
    t.impl = c;
    return t;
}
