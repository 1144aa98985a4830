/*
 * client.h - a connection to one API server: its configuration and its I/O thread.
 *
 * Contract:
 * - A client owns one libcurl multi handle driven by one I/O thread, started when the first
 *   reflector attaches or the first call starts (call.h; never at creation: nginx creates
 *   clients before forking workers) and stopped when the client is freed. Every transfer of
 *   every attached reflector and every call runs there.
 *   A transfer that receives no byte (headers included) for its idle_timeout is ended by the
 *   I/O thread's own timer (not libcurl's averaged low-speed check) within a few milliseconds.
 * - Received bodies are scanned on a second thread, the client's pipe (pipe.h): the I/O thread
 *   writes body bytes into it, the pipe's thread runs the reflector's scanner on them.
 * - Configuration is copied at creation and immutable afterwards; files named in it (token,
 *   CA, client certificate and key) are checked then, so a missing or unreadable one is an
 *   error of kinf_client_new. Secrets (token, password, keys) live only in the copy, in the
 *   credentials object (credentials.h) and in curl's handles; they never reach an error
 *   message, a log line or a status.
 * - Credentials are taken from the credentials object for each request (on the I/O thread): a
 *   token file is re-read when it changes, an exec plugin re-run when its credential expires.
 *   A response with status 401 marks the credential it was sent with as stale, so the next
 *   request (the reflector's retry after its backoff) refreshes it first.
 * - TLS verification is on unless insecure_skip_tls_verify is set by name. With a CA given,
 *   only that CA is trusted (not the system's). tls_server_name is the name sent in SNI and
 *   verified; the connection still goes to the URL's host and port, whose authority is also
 *   the Host header.
 *
 * - Impersonation (client-go's ImpersonationConfig): with impersonate_user set, every request
 *   (list, watch and blocking) carries the Impersonate-* headers (impersonate.h); what
 *   impersonate.h refuses is KINF_EINVAL at creation.
 * - Warning headers (warning.h) of every response, list/watch and blocking, are noted in the
 *   client's record (kinf_client_warnings): counted, and each distinct text queued once for the
 *   Lua thread to log.
 *
 * - Connections are reused. The I/O thread's transfers are HTTP/2 streams of one connection
 *   where the server negotiates HTTP/2 (TLS with ALPN): a transfer started while that
 *   connection is being set up waits for it (CURLOPT_PIPEWAIT) instead of opening another; a
 *   second connection opens only past the server's concurrent-stream limit. Over HTTP/1.1,
 *   finished transfers leave their connection open for the next one (keep-alive).
 * - A transfer ended by its idle timer takes its connection down with it (the socket is shut
 *   down): a connection that went silent without closing (a frozen proxy, a lost peer) would
 *   otherwise keep carrying the other HTTP/2 streams and the retries, which would hang on it
 *   in turn. The other transfers on it fail at once and are retried on a new connection.
 *
 * - Calls (call.h) are requests that do not block their caller: transfers of the I/O thread,
 *   sharing its connections with the watches.
 * - Blocking requests (request.h) run on the caller's thread with easy handles from
 *   kinf_client_easy_take; they share the credentials (under a lock of their own) but not the
 *   I/O thread, so they neither wait for watches nor delay them. kinf_client_easy_give keeps
 *   a finished handle, and with it its open connection, for the next request (up to
 *   KINF_CLIENT_POOL idle handles, one per thread that made requests at once); a process
 *   forked after requests were made does not use its parent's handles.
 *
 * Threads: kinf_client_new/unref from any thread that is not the I/O thread; the transport's
 * functions as transport.h says; the others from any thread.
 *
 * Ownership: kinf_client_new returns one reference; each attached reflector holds another, and
 * each call until it is freed.
 */
#ifndef KINF_CLIENT_H
#define KINF_CLIENT_H

#include <curl/curl.h>

#include "credentials.h"
#include "kinf.h"
#include "pipe.h"
#include "transport.h"
#include "warning.h"

typedef struct kinf_client kinf_client;

typedef struct kinf_client_config {
    const char *server;            /* "http(s)://host[:port][/prefix]", required */
    /* Authentication: at most one of token, token_file, username/password, exec. */
    const char *token;             /* bearer token or NULL */
    const char *token_file;        /* bearer token file, re-read when it changes and on 401 */
    const char *username;          /* HTTP basic auth */
    const char *password;
    const kinf_exec_config *exec;  /* exec credential plugin (credentials.h), or NULL */
    /* TLS. Data is PEM text; data wins over a file given for the same thing. */
    const char *ca_file;           /* PEM bundle to trust instead of the system's, or NULL */
    const char *ca_data;
    const char *client_cert_file;  /* client certificate (with client_key_*) */
    const char *client_cert_data;
    const char *client_key_file;
    const char *client_key_data;
    const char *tls_server_name;   /* name for SNI and verification instead of the URL's host */
    int insecure_skip_tls_verify;  /* only when asked for by name */
    const char *proxy;             /* proxy URL (http, https, socks5); NULL: libcurl's default,
                                      i.e. the *_proxy environment variables */
    double connect_timeout;        /* seconds; 0: 10 s */
    const char *user_agent;        /* NULL: "kinformer/VERSION" */
    /* Impersonation: all NULL for none; uid, groups and extra need a user. */
    const char *impersonate_user;
    const char *impersonate_uid;
    const char *const *impersonate_groups; /* NULL-terminated, or NULL */
    const char *const *impersonate_extra;  /* NULL-terminated pairs: key, value, key, value... */
} kinf_client_config;

kinf_client *kinf_client_new(const kinf_client_config *cfg, kinf_err *err, char *errbuf,
                             size_t errlen);
kinf_client *kinf_client_ref(kinf_client *c);
/* The last reference stops and joins the I/O thread (all reflectors must have detached), then
 * ends and frees the freed calls the I/O thread still held (call.h). */
void kinf_client_unref(kinf_client *c);

/* The client as a reflector's transport (transport.h): attach starts the I/O thread if needed
 * (and holds a client reference while r is attached), get makes transfers on it, queue writes
 * into the client's pipe, retain / release take and drop client references. No reference is
 * taken by this call. */
kinf_transport kinf_client_transport(kinf_client *c);

/* An easy handle for GET server + path_query with auth, TLS and timeouts set (any thread).
 * CURLOPT_PRIVATE belongs to the client: do not set it. NULL with a message (never holding
 * secrets) on failure, e.g. when the exec plugin fails. May run the exec plugin (blocking up to
 * its timeout). */
CURL *kinf_client_easy(kinf_client *c, const char *path_query, char *errbuf, size_t errlen);
/* kinf_client_easy for a blocking request, reusing an idle handle of the client (and its
 * open connection) when there is one. Give it back with kinf_client_easy_give (any thread),
 * never to kinf_client_easy_free. */
CURL *kinf_client_easy_take(kinf_client *c, const char *path_query, char *errbuf, size_t errlen);
/* Ends the use of a handle from kinf_client_easy_take (accepts NULL): it is reset (nothing of
 * the caller's memory is referenced any more) and kept for the next request, or freed when
 * enough are kept. */
void kinf_client_easy_give(kinf_client *c, CURL *easy);
/* A copy of the headers kinf_client_easy sets (Accept, Host with tls_server_name) followed by
 * `extra` (NULL-terminated, may be NULL); for a request that needs more, e.g. Content-Type. An
 * extra header replaces the client's header of the same name (e.g. another Accept).
 * Free with curl_slist_free_all after the handle. NULL when out of memory. */
struct curl_slist *kinf_client_headers(const kinf_client *c, const char *const *extra);
/* Disposes of a handle from kinf_client_easy that was never added to the I/O thread. */
void kinf_client_easy_free(CURL *easy);
/* The response to easy was 401: the credential it carried is stale (credentials.h). */
void kinf_client_unauthorized(kinf_client *c, CURL *easy);
/* Whether a stale credential can be refreshed (token file or exec plugin). */
int kinf_client_refreshable(kinf_client *c);
/* Replaces the client's secrets in msg with "[redacted]" (kinf_creds_redact). */
void kinf_client_redact(kinf_client *c, char *msg, size_t len);
/* A message for a failed transfer (result != CURLE_OK), before it is removed:
 * libcurl's detail and the server's host, e.g. "TLS certificate verification failed for
 * 127.0.0.1: SSL certificate problem: self-signed certificate". Secrets are redacted. */
void kinf_client_transfer_error(kinf_client *c, CURL *easy, CURLcode result, char *buf,
                                size_t len);
/* The record of the Warning headers this client received (warning.h); lives as long as c. */
kinf_warnings *kinf_client_warnings(kinf_client *c);
/* The server URL as configured (no secrets in it). */
const char *kinf_client_server(const kinf_client *c);

#endif
