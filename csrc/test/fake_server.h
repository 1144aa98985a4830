/*
 * fake_server.h - the fake API server (tools/fake-apiserver) for the C tests that drive a real
 * client: start_server runs it as a child (it dies with the test: --exit-with-parent) and
 * leaves its URL in `url`; stop_server ends it; add_fault posts a fault rule
 * (docs/fake-apiserver.md). One server at a time. Needs python3 and the repository root as the
 * working directory (make runs the tests from there). Header-only.
 */
#ifndef KINF_TEST_FAKE_SERVER_H
#define KINF_TEST_FAKE_SERVER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "ctest.h"
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

/* Starts the fake server with N pods: popen's shell becomes one that prints its pid, then
 * exec's the server, which prints its URL. The server is this process's child, so it dies
 * with us, a crash included (--exit-with-parent). */
static int start_server(int pods)
{
    char cmd[256], line[64];
    snprintf(cmd, sizeof(cmd),
             "exec sh -c 'echo $$; exec python3 tools/fake-apiserver/server.py --port 0 --pods %d "
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

/* POST /_fake/faults with a rule (JSON), as a blocking request of client c. */
static inline void add_fault(kinf_client *c, const char *rule)
{
    kinf_request req = {0};
    kinf_response resp;
    char msg[256];
    req.method = "POST";
    req.path_query = "/_fake/faults";
    req.body = rule;
    req.body_len = strlen(rule);
    req.content_type = "application/json";
    CHECK(kinf_request_do(c, &req, &resp, msg, sizeof(msg)) == KINF_OK && resp.status == 200);
    kinf_response_free(&resp);
}

#endif
