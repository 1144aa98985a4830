/* test_reflector.c - client + reflector against the fake API server, from C, so that
 * ThreadSanitizer sees the I/O thread and a consumer thread racing: list, watch, status reads,
 * stop and restart. Needs python3 and tools/fake-apiserver (run from the repository root). */
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctest.h"
#include "fake_server.h"
#include "reflector.h"
#include "store.h"
#include "request.h"

static kinf_reflector *new_reflector(kinf_client *client, kinf_fifo *fifo,
                                     const kinf_reflector_config *rc)
{
    kinf_transport tr = kinf_client_transport(client);
    kinf_err err;
    char msg[256];
    return client != NULL ? kinf_reflector_new(&tr, fifo, rc, &err, msg, sizeof(msg)) : NULL;
}

/* Pops until `want` distinct keys were seen in the initial list or the deadline passes. */
static size_t drain(kinf_fifo *f, double seconds)
{
    size_t popped = 0;
    double deadline = now() + seconds;
    while (now() < deadline) {
        kinf_deltas d;
        if (kinf_fifo_pop(f, 0.05, NULL, NULL, &d, NULL) == KINF_OK) {
            popped++;
            kinf_deltas_clear(&d);
        } else if (kinf_fifo_has_synced(f) && popped > 0) {
            break;
        }
    }
    return popped;
}

static void lists_watches_stops_and_restarts(void)
{
    kinf_client_config cc = {0};
    kinf_reflector_config rc = {0};
    kinf_reflector_status st;
    kinf_client *client;
    kinf_fifo *fifo;
    kinf_reflector *r;
    char msg[256];
    kinf_err err;
    double t0;

    CHECK(start_server(120));
    cc.server = url;
    client = kinf_client_new(&cc, &err, msg, sizeof(msg));
    CHECK(client != NULL);
    fifo = kinf_fifo_new(NULL, KINF_FIFO_EMIT_REPLACED, &err);
    rc.path = "/api/v1/pods";
    rc.page_size = 50;
    rc.strip_managed_fields = 1;
    r = new_reflector(client, fifo, &rc);
    CHECK(r != NULL);
    if (r == NULL)
        return;
    CHECK(kinf_reflector_start(r) == KINF_OK);
    CHECK(drain(fifo, 10) == 120);
    CHECK(kinf_fifo_has_synced(fifo));
    kinf_reflector_status_get(r, &st);
    CHECK(st.listed && st.lists == 1);
    CHECK(st.resource_version[0] != '\0');
    /* Status reads race the I/O thread's writes. */
    for (int i = 0; i < 200; i++)
        kinf_reflector_status_get(r, &st);
    t0 = now();
    kinf_reflector_stop(r);
    CHECK(now() - t0 < 1.0);
    kinf_reflector_status_get(r, &st);
    CHECK(!st.running);
    CHECK(kinf_reflector_start(r) == KINF_OK); /* again: relists at the last rv */
    t0 = now();
    while (now() - t0 < 10) {
        kinf_reflector_status_get(r, &st);
        if (st.lists >= 2 && st.watches >= 2)
            break;
        drain(fifo, 0.1);
    }
    CHECK(st.lists >= 2);
    kinf_reflector_free(r);      /* stops and detaches */
    kinf_client_unref(client);   /* joins the I/O thread */
    kinf_fifo_unref(fifo);
    stop_server();
}

/* Blocking requests (request.h) from this thread while the I/O thread lists and watches on the
 * same client: both use the credentials (TSan checks the locking). */
static void requests_while_watching(void)
{
    kinf_client_config cc = {0};
    kinf_reflector_config rc = {0};
    kinf_request req = {0};
    kinf_response resp;
    kinf_client *client;
    kinf_fifo *fifo;
    kinf_reflector *r;
    char msg[256];
    const char *body = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\","
                       "\"metadata\":{\"name\":\"c\",\"namespace\":\"default\"}}";
    kinf_err err;

    CHECK(start_server(20));
    cc.server = url;
    cc.token = "request-test-token";
    client = kinf_client_new(&cc, &err, msg, sizeof(msg));
    CHECK(client != NULL);
    fifo = kinf_fifo_new(NULL, KINF_FIFO_EMIT_REPLACED, &err);
    rc.path = "/api/v1/pods";
    r = new_reflector(client, fifo, &rc);
    CHECK(r != NULL);
    if (r == NULL)
        return;
    CHECK(kinf_reflector_start(r) == KINF_OK);

    req.method = "POST";
    req.path_query = "/api/v1/namespaces/default/configmaps";
    req.body = body;
    req.body_len = strlen(body);
    req.content_type = "application/json";
    CHECK(kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_OK);
    CHECK(resp.status == 201);
    CHECK(resp.body != NULL && strstr(resp.body, "\"resourceVersion\"") != NULL);
    kinf_response_free(&resp);
    for (int i = 0; i < 20; i++) {
        memset(&req, 0, sizeof(req));
        req.method = "GET";
        req.path_query = "/api/v1/namespaces/default/configmaps/c";
        CHECK(kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_OK);
        CHECK(resp.status == 200 && resp.len > 0 && resp.body[resp.len] == '\0');
        kinf_response_free(&resp);
    }
    req.path_query = "/api/v1/namespaces/default/configmaps/missing";
    CHECK(kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_OK);
    CHECK(resp.status == 404 && strstr(resp.body, "\"NotFound\"") != NULL);
    CHECK(resp.retry_after < 0);
    kinf_response_free(&resp);
    /* accept replaces the client's Accept; the response's Content-Type comes back. */
    req.path_query = "/apis";
    req.accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
                 "application/json";
    CHECK(kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_OK);
    CHECK(resp.status == 200 && strstr(resp.body, "\"APIGroupDiscoveryList\"") != NULL);
    CHECK(strcmp(resp.content_type,
                 "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList") == 0);
    kinf_response_free(&resp);
    req.accept = NULL;
    CHECK(kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_OK);
    CHECK(resp.status == 200 && strstr(resp.body, "\"APIGroupList\"") != NULL);
    CHECK(strcmp(resp.content_type, "application/json") == 0);
    kinf_response_free(&resp);
    req.path_query = "/api/v1/pods";
    req.max_response_bytes = 100;
    CHECK(kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_ETOOBIG);
    CHECK(resp.body == NULL && strstr(msg, "max_response_bytes (100)") != NULL);
    req.method = "BREW";
    CHECK(kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_EINVAL);
    CHECK(drain(fifo, 10) == 20);
    kinf_reflector_free(r);
    kinf_client_unref(client);
    kinf_fifo_unref(fifo);
    stop_server();
}

/* Pops what is queued into the store (as the informer does) until `seconds` pass with nothing. */
static void apply_pops(kinf_fifo *f, kinf_store *s, double quiet)
{
    kinf_deltas d = {0};
    while (kinf_fifo_pop(f, quiet, NULL, NULL, &d, NULL) == KINF_OK) {
        kinf_object *o = kinf_deltas_newest(&d), *old = NULL;
        if (o != NULL && d.v[d.n - 1].type != KINF_DELTA_DELETED)
            CHECK(kinf_store_add(s, o, &old, NULL, 0) == KINF_OK);
        kinf_object_unref(old);
        kinf_deltas_clear(&d);
    }
}

/* reuse_known: a relist of an unchanged cache hands the store's own records back (one copy of
 * each object during the relist, not two). */
static void relist_reuses_unchanged_records(void)
{
    kinf_client_config cc = {0};
    kinf_reflector_config rc = {0};
    kinf_reflector_status st;
    kinf_object **before = NULL, **after = NULL;
    size_t nb = 0, na = 0, same = 0;
    const char *rule = "{\"watch\":true,\"action\":{\"status\":410}}";
    kinf_client *client;
    kinf_store *store;
    kinf_fifo *fifo;
    kinf_reflector *r;
    char msg[256];
    kinf_err err;
    double t0;

    CHECK(start_server(30));
    cc.server = url;
    client = kinf_client_new(&cc, &err, msg, sizeof(msg));
    store = kinf_store_new(0, &err);
    fifo = kinf_fifo_new(store, KINF_FIFO_EMIT_REPLACED, &err);
    rc.path = "/api/v1/pods";
    rc.reuse_known = 1;
    rc.watch_timeout = 1; /* the watch ends within 2 s; its successor gets the 410 */
    rc.backoff_initial = 0.05;
    r = new_reflector(client, fifo, &rc);
    CHECK(client != NULL && store != NULL && fifo != NULL && r != NULL);
    if (r == NULL)
        return;
    CHECK(kinf_reflector_start(r) == KINF_OK);
    apply_pops(fifo, store, 0.5);
    CHECK(kinf_store_list(store, &before, &nb) == KINF_OK && nb == 30);

    add_fault(client, rule);
    t0 = now();
    do {
        apply_pops(fifo, store, 0.1);
        kinf_reflector_status_get(r, &st);
    } while (st.relists < 1 && now() - t0 < 10);
    CHECK(st.relists == 1);
    apply_pops(fifo, store, 0.3);
    CHECK(kinf_store_list(store, &after, &na) == KINF_OK && na == 30);
    for (size_t i = 0; i < nb; i++)
        for (size_t j = 0; j < na; j++)
            same += before[i] == after[j];
    CHECK(same == 30); /* the very same records: nothing was copied */
    kinf_objects_free(before, nb);
    kinf_objects_free(after, na);
    kinf_reflector_free(r);
    kinf_client_unref(client);
    kinf_fifo_unref(fifo);
    kinf_store_unref(store);
    stop_server();
}

/* How many times `needle` occurs in the fake server's request log. */
static int requests_with(kinf_client *client, const char *needle)
{
    kinf_request req = {0};
    kinf_response resp;
    char msg[256];
    int n = 0;
    req.method = "GET";
    req.path_query = "/_fake/requests";
    if (kinf_request_do(client, &req, &resp, msg, sizeof(msg)) != KINF_OK)
        return -1;
    for (const char *p = resp.body; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    kinf_response_free(&resp);
    return n;
}

/* WatchList relists: the first state and, after a 410 on a later plain watch, the relist both
 * come through WatchList streams; the end bookmark's bookkeeping happens on the scanner thread,
 * the next request's choice on the I/O thread (TSan checks the hand-over). */
static void watch_list_relists_through_watch_list(void)
{
    kinf_client_config cc = {0};
    kinf_reflector_config rc = {0};
    kinf_reflector_status st;
    const char *rule = "{\"watch\":true,\"query\":{\"sendInitialEvents\":null},"
                       "\"action\":{\"type\":\"error_event\",\"code\":410,"
                       "\"reason\":\"Expired\"}}";
    kinf_client *client;
    kinf_store *store;
    kinf_fifo *fifo;
    kinf_reflector *r;
    char msg[256];
    kinf_err err;
    double t0;

    CHECK(start_server(30));
    cc.server = url;
    client = kinf_client_new(&cc, &err, msg, sizeof(msg));
    store = kinf_store_new(0, &err);
    fifo = kinf_fifo_new(store, KINF_FIFO_EMIT_REPLACED, &err);
    rc.path = "/api/v1/pods";
    rc.watch_list = 1;
    rc.watch_timeout = 1; /* the WatchList stream ends within 2 s; the plain watch gets the 410 */
    rc.backoff_initial = 0.05;
    r = new_reflector(client, fifo, &rc);
    CHECK(client != NULL && store != NULL && fifo != NULL && r != NULL);
    if (r == NULL)
        return;
    CHECK(kinf_reflector_start(r) == KINF_OK);
    apply_pops(fifo, store, 0.5);
    CHECK(kinf_store_len(store) == 30);
    kinf_reflector_status_get(r, &st);
    CHECK(st.listed && st.lists == 1 && strcmp(st.phase, "watching") == 0);

    add_fault(client, rule);
    t0 = now();
    do {
        apply_pops(fifo, store, 0.1);
        kinf_reflector_status_get(r, &st);
    } while ((st.relists < 1 || strcmp(st.phase, "watching") != 0) && now() - t0 < 10);
    CHECK(st.relists == 1 && st.last_error_code == 410);
    CHECK(strcmp(st.phase, "watching") == 0);
    CHECK(requests_with(client, "sendInitialEvents") == 2); /* the first list and the relist */
    CHECK(requests_with(client, "\"limit\"") == 0);       /* no paginated list */
    apply_pops(fifo, store, 0.3);
    CHECK(kinf_store_len(store) == 30);
    kinf_reflector_free(r);
    kinf_client_unref(client);
    kinf_fifo_unref(fifo);
    kinf_store_unref(store);
    stop_server();
}

/* metadata_only through the real transport: every transfer carries its own Accept (its own
 * header list, freed with the handle on the I/O thread: ASan and TSan watch it), the server
 * answers PartialObjectMetadata, and the request log shows exactly one Accept per request. */
static int log_has(kinf_client *client, const char *needle)
{
    kinf_request req = {0};
    kinf_response resp;
    char msg[256];
    int found = 0;
    req.method = "GET";
    req.path_query = "/_fake/requests";
    if (kinf_request_do(client, &req, &resp, msg, sizeof(msg)) == KINF_OK) {
        found = resp.status == 200 && strstr(resp.body, needle) != NULL;
        kinf_response_free(&resp);
    }
    return found;
}

#define PARTIAL_PREFIX \
    "{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{"

static void metadata_only_through_the_client(void)
{
    kinf_client_config cc = {0};
    kinf_reflector_config rc = {0};
    kinf_xfer_request bad = {0};
    kinf_xfer_callbacks cb = {0};
    kinf_transport tr;
    kinf_client *client;
    kinf_fifo *fifo;
    kinf_reflector *r;
    kinf_deltas d;
    char msg[256];
    kinf_err err;
    double t0;

    CHECK(start_server(30));
    cc.server = url;
    client = kinf_client_new(&cc, &err, msg, sizeof(msg));
    CHECK(client != NULL);
    if (client == NULL)
        return;
    /* A value that would smuggle a header is refused before anything is made (which is why
     * this call may be made here, off the I/O thread). */
    tr = kinf_client_transport(client);
    bad.path_query = "/api/v1/pods";
    bad.idle_timeout = 5;
    bad.accept = "application/json\r\nX-Smuggled: 1";
    CHECK(tr.ops->get(tr.impl, &bad, &cb, msg, sizeof(msg)) == NULL);
    CHECK(strstr(msg, "not one line") != NULL);

    fifo = kinf_fifo_new(NULL, KINF_FIFO_EMIT_REPLACED, &err);
    rc.path = "/api/v1/pods";
    rc.page_size = 10;
    rc.strip_managed_fields = 1;
    rc.metadata_only = 1;
    r = new_reflector(client, fifo, &rc);
    CHECK(r != NULL);
    if (r == NULL)
        return;
    CHECK(kinf_reflector_start(r) == KINF_OK);
    CHECK(kinf_fifo_pop(fifo, 10, NULL, NULL, &d, NULL) == KINF_OK);
    CHECK(d.n >= 1 && strncmp(d.v[0].obj->json, PARTIAL_PREFIX, sizeof(PARTIAL_PREFIX) - 1) == 0);
    CHECK(strstr(d.v[0].obj->json, "\"spec\"") == NULL);
    kinf_deltas_clear(&d);
    CHECK(drain(fifo, 10) == 29);
    t0 = now();
    while (now() - t0 < 10 && !log_has(client, "\"accept\":\"" KINF_ACCEPT_METADATA_WATCH "\""))
        drain(fifo, 0.05);
    CHECK(log_has(client, "\"accept\":\"" KINF_ACCEPT_METADATA_LIST "\""));
    CHECK(log_has(client, "\"accept\":\"" KINF_ACCEPT_METADATA_WATCH "\""));
    kinf_reflector_free(r);
    kinf_client_unref(client);
    kinf_fifo_unref(fifo);
    stop_server();
}

TEST_MAIN(TEST(lists_watches_stops_and_restarts), TEST(requests_while_watching),
          TEST(relist_reuses_unchanged_records), TEST(watch_list_relists_through_watch_list),
          TEST(metadata_only_through_the_client))
