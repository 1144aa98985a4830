/* test_call.c - calls (call.h) against the fake API server, from C, so that ThreadSanitizer sees
 * owner threads start, poll, cancel and free calls while the I/O thread runs them beside a
 * reflector's watch, and AddressSanitizer sees every way a call ends and is freed: a result, a
 * cancel, a free in flight, a client's last unref with calls in flight. Needs python3 and
 * tools/fake-apiserver (run from the repository root). */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "call.h"
#include "ctest.h"
#include "fake_server.h"
#include "reflector.h"

#define CM_PATH "/api/v1/namespaces/default/configmaps"

static void sleep_for(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static kinf_client *new_client(void)
{
    kinf_client_config cc = {0};
    kinf_err err;
    char msg[256];
    cc.server = url;
    return kinf_client_new(&cc, &err, msg, sizeof(msg));
}

static kinf_call *start(kinf_client *c, const char *method, const char *path, const char *body,
                        double timeout)
{
    kinf_request req = {0};
    kinf_err err;
    char msg[256];
    kinf_call *k;
    req.method = method;
    req.path_query = path;
    if (body != NULL) {
        req.body = body;
        req.body_len = strlen(body);
        req.content_type = "application/json";
    }
    req.timeout = timeout;
    k = kinf_call_start(c, &req, &err, msg, sizeof(msg));
    CHECK(k != NULL);
    return k;
}

/* Waits on the completion fd until every call in ks is done (or `seconds` pass); 1 when all
 * are. Drains the fd after each wake-up, as a caller's loop does. */
static int wait_all(kinf_client *c, kinf_call **ks, size_t n, double seconds)
{
    kinf_err err;
    char msg[256];
    struct pollfd p;
    double deadline = now() + seconds;
    p.fd = kinf_calls_fd(c, &err, msg, sizeof(msg));
    p.events = POLLIN;
    CHECK(p.fd >= 0);
    for (;;) {
        size_t done = 0;
        for (size_t i = 0; i < n; i++)
            done += (size_t)kinf_call_done(ks[i]);
        if (done == n)
            return 1;
        if (now() > deadline)
            return 0;
        if (poll(&p, 1, 100) > 0)
            kinf_calls_drain(c);
    }
}

static long status_of(kinf_call *k, const char *needle)
{
    const kinf_response *resp = NULL;
    const char *msg = NULL;
    kinf_err err;
    if (!kinf_call_result(k, &err, &resp, &msg) || err != KINF_OK)
        return -1;
    if (needle != NULL && strstr(resp->body, needle) == NULL)
        return -2;
    return resp->status;
}

static kinf_err error_of(kinf_call *k, const char **msg)
{
    kinf_err err = KINF_OK;
    const kinf_response *resp;
    CHECK(kinf_call_result(k, &err, &resp, msg) == 1);
    return err;
}

/* Every verb and outcome on a client no reflector ever used. */
static void calls_on_a_fresh_client(void)
{
    kinf_client *c;
    kinf_call *k[4];
    kinf_request bad = {0};
    kinf_err err;
    char msg[256];
    const char *why;
    const char *cm = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
                     "\"metadata\":{\"name\":\"one\",\"namespace\":\"default\"}}";

    CHECK(start_server(0));
    c = new_client();
    CHECK(c != NULL);
    if (c == NULL)
        return;
    k[0] = start(c, "POST", CM_PATH, cm, 0);
    CHECK(kinf_call_done(k[0]) == 0); /* the fake server does not answer within the start */
    CHECK(wait_all(c, k, 1, 10));
    CHECK(status_of(k[0], "\"resourceVersion\"") == 201);
    k[1] = start(c, "GET", CM_PATH "/one", NULL, 0);
    k[2] = start(c, "DELETE", CM_PATH "/missing", NULL, 0);
    k[3] = start(c, "POST", CM_PATH, cm, 0);
    CHECK(wait_all(c, k + 1, 3, 10));
    CHECK(status_of(k[1], "\"one\"") == 200);
    CHECK(status_of(k[2], "\"NotFound\"") == 404);
    CHECK(status_of(k[3], "\"AlreadyExists\"") == 409);
    kinf_call_cancel(k[1]); /* ended already: keeps its result */
    CHECK(status_of(k[1], NULL) == 200);
    for (int i = 0; i < 4; i++)
        kinf_call_free(k[i]);
    CHECK(kinf_calls_drain(c) == 0); /* every completion was drained by wait_all */

    /* the limits: max_response_bytes, the timeout */
    bad.method = "GET";
    bad.path_query = "/api/v1/pods";
    bad.max_response_bytes = 10;
    k[0] = kinf_call_start(c, &bad, &err, msg, sizeof(msg));
    add_fault(c, "{\"path\":\"/configmaps/slow$\",\"action\":{\"type\":\"stall\",\"seconds\":2}}");
    k[1] = start(c, "GET", CM_PATH "/slow", NULL, 0.3);
    CHECK(wait_all(c, k, 2, 10));
    CHECK(error_of(k[0], &why) == KINF_ETOOBIG && strstr(why, "max_response_bytes (10)"));
    CHECK(error_of(k[1], &why) == KINF_EIO && strstr(why, "Timeout"));
    kinf_call_free(k[0]);
    kinf_call_free(k[1]);

    /* what kinf_request_do refuses */
    bad.method = "BREW";
    CHECK(kinf_call_start(c, &bad, &err, msg, sizeof(msg)) == NULL && err == KINF_EINVAL);
    kinf_client_unref(c);
    stop_server();
}

/* Cancel: at once as the owner sees it; the I/O thread aborts the transfer; the server's
 * stalled handler ends early (it sees the client gone), so the POST it held never happens. */
static void cancel_ends_a_call_at_once(void)
{
    kinf_client *c;
    kinf_call *k, *check;
    const char *why;
    double t0;

    CHECK(start_server(0));
    c = new_client();
    if (c == NULL)
        return;
    add_fault(c, "{\"method\":\"POST\",\"path\":\"/configmaps$\",\"action\":{\"type\":\"stall\","
             "\"seconds\":1}}");
    k = start(c, "POST", CM_PATH,
              "{\"metadata\":{\"name\":\"never\",\"namespace\":\"default\"}}", 0);
    t0 = now();
    while (now() - t0 < 0.3) /* in flight at the server, stalled */
        CHECK(kinf_call_done(k) == 0);
    kinf_call_cancel(k);
    CHECK(kinf_call_done(k) == 1);
    CHECK(error_of(k, &why) == KINF_ECANCELED);
    kinf_call_cancel(k); /* again: nothing new */
    CHECK(error_of(k, &why) == KINF_ECANCELED);
    kinf_call_free(k);
    sleep_for(1.2); /* past the stall */
    check = start(c, "GET", CM_PATH "/never", NULL, 0);
    CHECK(wait_all(c, &check, 1, 10));
    CHECK(status_of(check, NULL) == 404);
    kinf_call_free(check);
    kinf_client_unref(c);
    stop_server();
}

/* Owner threads start and wait for calls while the I/O thread watches pods for a reflector:
 * 3 threads x 10 calls, each stalled 0.5 s at the server, all in flight at once. */
typedef struct owner {
    kinf_client *c;
    int ok;
} owner;

static void *owner_thread(void *arg)
{
    owner *o = arg;
    kinf_call *k[10];
    for (int i = 0; i < 10; i++)
        k[i] = start(o->c, "GET", CM_PATH "/stalled", NULL, 0);
    o->ok = wait_all(o->c, k, 10, 15);
    for (int i = 0; i < 10; i++) {
        o->ok &= status_of(k[i], "\"NotFound\"") == 404;
        kinf_call_free(k[i]);
    }
    return NULL;
}

static void calls_from_threads_beside_a_watch(void)
{
    kinf_reflector_config rc = {0};
    kinf_transport tr;
    kinf_client *c;
    kinf_fifo *fifo;
    kinf_reflector *r;
    owner o[3];
    pthread_t t[3];
    kinf_err err;
    char msg[256];
    double t0;

    CHECK(start_server(20));
    c = new_client();
    if (c == NULL)
        return;
    fifo = kinf_fifo_new(NULL, KINF_FIFO_EMIT_REPLACED, &err);
    rc.path = "/api/v1/pods";
    tr = kinf_client_transport(c);
    r = kinf_reflector_new(&tr, fifo, &rc, &err, msg, sizeof(msg));
    CHECK(r != NULL && kinf_reflector_start(r) == KINF_OK);
    add_fault(c, "{\"path\":\"/configmaps/stalled$\",\"times\":-1,\"action\":{\"type\":\"stall\","
             "\"seconds\":0.5}}");
    t0 = now();
    for (int i = 0; i < 3; i++) {
        o[i].c = c;
        o[i].ok = 0;
        CHECK(pthread_create(&t[i], NULL, owner_thread, &o[i]) == 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(o[i].ok);
    }
    CHECK(now() - t0 >= 0.5); /* the stall held them */
    CHECK(now() - t0 < 10);   /* 30 x 0.5 s one after the other would be 15 s */
    kinf_reflector_free(r);
    kinf_client_unref(c);
    kinf_fifo_unref(fifo);
    stop_server();
}

/* Calls freed in flight, then the client's last reference dropped at once: the I/O thread
 * stops with transfers on its multi handle and queued calls it never took. */
static void last_unref_with_calls_in_flight(void)
{
    kinf_client *c;
    kinf_call *k[8];

    CHECK(start_server(0));
    c = new_client();
    if (c == NULL)
        return;
    add_fault(c, "{\"path\":\"/configmaps/slow$\",\"times\":-1,\"action\":{\"type\":\"stall\","
             "\"seconds\":5}}");
    for (int i = 0; i < 6; i++)
        k[i] = start(c, "GET", CM_PATH "/slow", NULL, 0);
    sleep_for(0.3); /* those are on the multi handle, stalled; the next two just queued */
    for (int i = 6; i < 8; i++)
        k[i] = start(c, "GET", CM_PATH "/slow", NULL, 0);
    kinf_client_unref(c); /* the calls' references keep it */
    for (int i = 0; i < 8; i++)
        kinf_call_free(k[i]); /* the last one drops the client's last reference */
    stop_server();
}

TEST_MAIN(TEST(calls_on_a_fresh_client), TEST(cancel_ends_a_call_at_once),
          TEST(calls_from_threads_beside_a_watch), TEST(last_unref_with_calls_in_flight))
