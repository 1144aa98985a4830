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
#include "reflector.h"
#include "request.h"

static FILE *server;
static pid_t server_pid;
static char url[128];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Starts the fake server with N pods: the shell prints its pid, then exec's the server, which
 * prints its URL (and dies with us: --exit-with-parent). */
static int start_server(int pods)
{
    char cmd[256], line[64];
    snprintf(cmd, sizeof(cmd),
             "sh -c 'echo $$; exec python3 tools/fake-apiserver/server.py --port 0 --pods %d "
             "--exit-with-parent'",
             pods);
    server = popen(cmd, "r");
    if (server == NULL || fgets(line, sizeof(line), server) == NULL ||
        fgets(url, sizeof(url), server) == NULL)
        return 0;
    server_pid = (pid_t)atol(line);
    url[strcspn(url, "\r\n")] = '\0';
    return server_pid > 0 && strncmp(url, "http://", 7) == 0;
}

static void stop_server(void)
{
    if (server_pid > 0)
        kill(server_pid, SIGTERM);
    if (server != NULL)
        pclose(server);
    server = NULL;
    server_pid = 0;
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
    r = kinf_reflector_new(client, fifo, &rc, &err, msg, sizeof(msg));
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
    r = kinf_reflector_new(client, fifo, &rc, &err, msg, sizeof(msg));
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

TEST_MAIN(TEST(lists_watches_stops_and_restarts), TEST(requests_while_watching))
