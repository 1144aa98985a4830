/*
 * client.h - a connection to one API server: its configuration and its I/O thread.
 *
 * Contract:
 * - A client owns one libcurl multi handle driven by one I/O thread, started when the first
 *   reflector attaches (never at creation: nginx creates clients before forking workers) and
 *   stopped when the client is freed. Every transfer of every attached reflector runs there.
 * - Received bodies are scanned on a second thread, the client's pipe (pipe.h): the I/O thread
 *   writes body bytes into it, the pipe's thread runs the reflector's scanner on them.
 * - Configuration is copied at creation and immutable afterwards. Secrets (token, keys) live
 *   only in the copy and in curl's request headers; they never reach an error message, a log
 *   line or a status.
 * - TLS verification is on unless insecure_skip_tls_verify is set by name.
 *
 * Threads: kinf_client_new/attach/detach/unref from any thread that is not the I/O thread;
 * functions marked "I/O thread" only from reflector callbacks on the I/O thread.
 *
 * Ownership: kinf_client_new returns one reference; each attached reflector holds another.
 */
#ifndef KINF_CLIENT_H
#define KINF_CLIENT_H

#include <curl/curl.h>

#include "kinf.h"
#include "pipe.h"

typedef struct kinf_client kinf_client;
typedef struct kinf_reflector kinf_reflector;

typedef struct kinf_client_config {
    const char *server;            /* "http(s)://host[:port][/prefix]", required */
    const char *token;             /* bearer token or NULL */
    const char *ca_file;           /* PEM bundle to trust, or NULL for the system's */
    int insecure_skip_tls_verify;  /* only when asked for by name */
    double connect_timeout;        /* seconds; 0: 10 s */
    const char *user_agent;        /* NULL: "kinformer/VERSION" */
} kinf_client_config;

kinf_client *kinf_client_new(const kinf_client_config *cfg, kinf_err *err, char *errbuf,
                             size_t errlen);
kinf_client *kinf_client_ref(kinf_client *c);
/* The last reference stops and joins the I/O thread (all reflectors must have detached). */
void kinf_client_unref(kinf_client *c);

/* Hands r to the I/O thread (starting it if needed). Takes a client reference for r. */
kinf_err kinf_client_attach(kinf_client *c, kinf_reflector *r);
/* Takes r back: returns once the I/O thread has aborted r's transfers and forgotten r. */
void kinf_client_detach(kinf_client *c, kinf_reflector *r);

/* I/O thread: an easy handle for GET server + path_query with auth, TLS and timeouts set, and
 * CURLOPT_PRIVATE = priv. NULL with a message (never holding secrets) on failure. */
CURL *kinf_client_easy(kinf_client *c, const char *path_query, void *priv, char *errbuf,
                       size_t errlen);
/* I/O thread: start / abort a transfer made by kinf_client_easy (remove also cleans it up). */
kinf_err kinf_client_add(kinf_client *c, CURL *easy);
void kinf_client_remove(kinf_client *c, CURL *easy);
/* I/O thread: the pipe to the client's scanner thread (the I/O thread is its only writer). */
kinf_pipe *kinf_client_pipe(kinf_client *c);
/* The server URL as configured (no secrets in it). */
const char *kinf_client_server(const kinf_client *c);

#endif
