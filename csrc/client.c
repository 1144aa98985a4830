/*
 * client.c - API server connection: configuration, TLS checks, credentials and the easy
 * handles every request starts from (contract in client.h). The I/O thread and the transport
 * it gives reflectors are in client_transport.c; the shared state in client_impl.h.
 *
 * Authentication and TLS are set per request in kinf_client_easy from the credentials object
 * (credentials.c) and the copied configuration. A finished transfer whose status is 401 marks
 * the credential generation it carried as stale before its reflector sees the result; the
 * reflector's normal error path (backoff, then a new request) then picks up a refreshed token.
 * Its second thread, the scanner thread of `pipe` (pipe.h), consumes what the I/O thread
 * receives: the reflectors' write callbacks copy body bytes into the pipe and return at once,
 * and the scanner thread runs jsonscan, builds the records and queues them in the DeltaFIFO,
 * so receiving and scanning overlap. Both threads start with the first attach or call (the
 * pipe's at its first write) and are joined by the last unref: the I/O thread first (it is the
 * pipe's only writer), then the calls it still held (call.c), then the pipe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "client_impl.h"
#include "impersonate.h"

#define PEM_CHECK_MAX (1024 * 1024) /* bytes of a PEM file read at creation to check it */
/* Received bytes in flight between the I/O thread and the scanner thread: at most
 * PIPE_BLOCKS blocks of PIPE_BLOCK bytes (4 MiB), about 2 ms of scanning. */
#define PIPE_BLOCK ((size_t)256 << 10)
#define PIPE_BLOCKS 16

static char *dup_opt(const char *s, int *failed)
{
    char *d;
    if (s == NULL || s[0] == '\0')
        return NULL;
    if ((d = strdup(s)) == NULL)
        *failed = 1;
    return d;
}

/* Whether marker occurs in buf[0..n) (which may hold NULs: strstr would stop there). */
static int has_marker(const char *buf, size_t n, const char *marker)
{
    size_t m = strlen(marker);
    for (size_t i = 0; i + m <= n; i++)
        if (buf[i] == marker[0] && memcmp(buf + i, marker, m) == 0)
            return 1;
    return 0;
}

/* The file exists, is readable and its first MiB holds `marker`. */
static kinf_err check_pem_file(const char *path, const char *what, const char *marker,
                               char *errbuf, size_t errlen)
{
    FILE *f;
    char *buf;
    size_t n;
    kinf_err err = KINF_OK;

    if ((f = fopen(path, "rbe")) == NULL) {
        kinf_errmsg(errbuf, errlen, "%s %s: %s", what, path, strerror(errno));
        return KINF_EIO;
    }
    if ((buf = malloc(PEM_CHECK_MAX + 1)) == NULL) {
        fclose(f);
        kinf_errmsg(errbuf, errlen, "out of memory");
        return KINF_ENOMEM;
    }
    n = fread(buf, 1, PEM_CHECK_MAX, f);
    if (ferror(f)) {
        kinf_errmsg(errbuf, errlen, "%s %s: %s", what, path, strerror(errno));
        err = KINF_EIO;
    } else {
        buf[n] = '\0';
        if (!has_marker(buf, n, marker)) {
            kinf_errmsg(errbuf, errlen, "%s %s: no PEM %s in it", what, path,
                        marker[0] == 'P' ? "private key" : "certificate");
            err = KINF_EPARSE;
        }
    }
    {
        volatile char *v = buf;
        for (size_t i = 0; i < n; i++)
            v[i] = 0;
    }
    free(buf);
    fclose(f);
    return err;
}

static kinf_err check_pem_data(const char *data, const char *what, const char *marker,
                               char *errbuf, size_t errlen)
{
    if (strstr(data, marker) == NULL) {
        kinf_errmsg(errbuf, errlen, "%s: no PEM %s in it", what,
                    marker[0] == 'P' ? "private key" : "certificate");
        return KINF_EPARSE;
    }
    return KINF_OK;
}

#define PEM_CERT "-----BEGIN CERTIFICATE-----"
#define PEM_KEY "PRIVATE KEY-----"

/* Checks the TLS material: files readable and PEM, a certificate only with its key. */
static kinf_err check_tls(const kinf_client_config *cfg, char *errbuf, size_t errlen)
{
    kinf_err err = KINF_OK;
    int has_cert = (cfg->client_cert_data && cfg->client_cert_data[0]) ||
                   (cfg->client_cert_file && cfg->client_cert_file[0]);
    int has_key = (cfg->client_key_data && cfg->client_key_data[0]) ||
                  (cfg->client_key_file && cfg->client_key_file[0]);
    if (has_cert != has_key) {
        kinf_errmsg(errbuf, errlen, "a client certificate needs a client key and a key needs "
                    "a certificate");
        return KINF_EINVAL;
    }
    if (cfg->ca_data && cfg->ca_data[0])
        err = check_pem_data(cfg->ca_data, "CA data", PEM_CERT, errbuf, errlen);
    else if (cfg->ca_file && cfg->ca_file[0])
        err = check_pem_file(cfg->ca_file, "CA file", PEM_CERT, errbuf, errlen);
    if (err == KINF_OK) {
        if (cfg->client_cert_data && cfg->client_cert_data[0])
            err = check_pem_data(cfg->client_cert_data, "client certificate data", PEM_CERT,
                                 errbuf, errlen);
        else if (has_cert)
            err = check_pem_file(cfg->client_cert_file, "client certificate file", PEM_CERT,
                                 errbuf, errlen);
    }
    if (err == KINF_OK) {
        if (cfg->client_key_data && cfg->client_key_data[0])
            err = check_pem_data(cfg->client_key_data, "client key data", PEM_KEY, errbuf,
                                 errlen);
        else if (has_key)
            err = check_pem_file(cfg->client_key_file, "client key file", PEM_KEY, errbuf,
                                 errlen);
    }
    return err;
}

/* tls_server_name: requests go to https://NAME:PORT/prefix (so libcurl sends NAME in SNI and
 * verifies the certificate against it) while CURLOPT_CONNECT_TO sends the connection to the
 * configured host, and the Host header keeps the configured authority. */
static kinf_err setup_server_name(kinf_client *c, const char *name, char *errbuf, size_t errlen)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *explicit_port = NULL, *url = NULL;
    char *line = NULL;
    size_t n;
    kinf_err err = KINF_ENOMEM;
    struct curl_slist *more;

    if (u == NULL)
        goto out;
    if (curl_url_set(u, CURLUPART_URL, c->server, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        kinf_errmsg(errbuf, errlen, "server URL %s cannot be parsed", c->server);
        err = KINF_EINVAL;
        goto out;
    }
    if (strcmp(scheme, "https") != 0) {
        kinf_errmsg(errbuf, errlen, "tls_server_name needs an https:// server");
        err = KINF_EINVAL;
        goto out;
    }
    (void)curl_url_get(u, CURLUPART_PORT, &explicit_port, 0); /* NULL when none */
    if (strpbrk(name, ":/@?#[] ") != NULL || curl_url_set(u, CURLUPART_HOST, name, 0) != CURLUE_OK) {
        kinf_errmsg(errbuf, errlen, "tls_server_name \"%.100s\" is not a host name", name);
        err = KINF_EINVAL;
        goto out;
    }
    if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK)
        goto out;
    free(c->base);
    if ((c->base = strdup(url)) == NULL)
        goto out;
    n = strlen(c->base);
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    n = strlen(name) + strlen(host) + 2 * strlen(port) + 16;
    if ((line = malloc(n)) == NULL)
        goto out;
    snprintf(line, n, "%s:%s:%s:%s", name, port, host, port);
    if ((more = curl_slist_append(c->connect_to, line)) == NULL)
        goto out;
    c->connect_to = more;
    snprintf(line, n, "Host: %s%s%s", host, explicit_port ? ":" : "",
             explicit_port ? explicit_port : "");
    if ((more = curl_slist_append(c->headers, line)) == NULL)
        goto out;
    c->headers = more;
    free(c->host);
    if ((c->host = strdup(name)) == NULL)
        goto out;
    err = KINF_OK;
out:
    if (err == KINF_ENOMEM)
        kinf_errmsg(errbuf, errlen, "out of memory");
    free(line);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_free(explicit_port);
    curl_free(url);
    curl_url_cleanup(u);
    return err;
}

/* The URL's host, for messages ("" when it cannot be parsed). */
static char *url_host(const char *server)
{
    CURLU *u = curl_url();
    char *host = NULL, *copy;
    if (u != NULL && curl_url_set(u, CURLUPART_URL, server, 0) == CURLUE_OK)
        (void)curl_url_get(u, CURLUPART_HOST, &host, 0);
    copy = strdup(host ? host : "");
    curl_free(host);
    curl_url_cleanup(u);
    return copy;
}

/* A password in the proxy URL is a secret like the others: messages never show it (in its
 * decoded nor in its percent-encoded form). */
static kinf_err add_proxy_secret(kinf_client *c)
{
    static const unsigned int forms[] = {CURLU_URLDECODE, 0};
    CURLU *u = curl_url();
    kinf_err err = KINF_OK;

    if (u == NULL)
        return KINF_ENOMEM;
    if (curl_url_set(u, CURLUPART_URL, c->proxy, CURLU_GUESS_SCHEME) == CURLUE_OK) {
        for (size_t i = 0; i < 2 && err == KINF_OK; i++) {
            char *pw = NULL;
            if (curl_url_get(u, CURLUPART_PASSWORD, &pw, forms[i]) == CURLUE_OK && pw != NULL) {
                volatile char *v = pw;
                err = kinf_creds_add_secret(c->creds, pw);
                while (*v)
                    *v++ = 0;
            }
            curl_free(pw);
        }
    }
    curl_url_cleanup(u);
    return err;
}

static void client_free_config(kinf_client *c)
{
    curl_slist_free_all(c->headers);
    curl_slist_free_all(c->connect_to);
    kinf_warnings_free(c->warnings);
    kinf_creds_free(c->creds);
    free(c->server);
    free(c->base);
    free(c->host);
    free(c->user_agent);
    kinf_wipe_free(c->proxy); /* may carry proxy credentials */
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c->ca_data);
    free(c->cert_data);
    kinf_wipe_free(c->key_data);
}

kinf_client *kinf_client_new(const kinf_client_config *cfg, kinf_err *err, char *errbuf,
                             size_t errlen)
{
    kinf_client *c;
    kinf_creds_config cc;
    kinf_impersonation imp;
    size_t len;
    int failed = 0;

    if (cfg == NULL || cfg->server == NULL ||
        (strncmp(cfg->server, "http://", 7) != 0 && strncmp(cfg->server, "https://", 8) != 0)) {
        kinf_errmsg(errbuf, errlen, "server must be an http:// or https:// URL");
        *err = KINF_EINVAL;
        return NULL;
    }
    if ((*err = check_tls(cfg, errbuf, errlen)) != KINF_OK)
        return NULL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        kinf_errmsg(errbuf, errlen, "libcurl initialisation failed");
        *err = KINF_EIO;
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        goto nomem;
    atomic_init(&c->refs, 1);
    c->calls_tail = &c->calls_queued;
    c->server = strdup(cfg->server);
    c->user_agent = strdup(cfg->user_agent ? cfg->user_agent : "kinformer/0.1");
    if (c->server == NULL || c->user_agent == NULL)
        goto nomem;
    len = strlen(c->server);
    while (len > 0 && c->server[len - 1] == '/')
        c->server[--len] = '\0';
    c->base = strdup(c->server);
    c->host = url_host(c->server);
    c->proxy = dup_opt(cfg->proxy, &failed);
    c->ca_data = dup_opt(cfg->ca_data, &failed);
    c->ca_file = c->ca_data ? NULL : dup_opt(cfg->ca_file, &failed);
    c->cert_data = dup_opt(cfg->client_cert_data, &failed);
    c->cert_file = c->cert_data ? NULL : dup_opt(cfg->client_cert_file, &failed);
    c->key_data = dup_opt(cfg->client_key_data, &failed);
    c->key_file = c->key_data ? NULL : dup_opt(cfg->client_key_file, &failed);
    if (failed || c->base == NULL || c->host == NULL)
        goto nomem;
    c->insecure = cfg->insecure_skip_tls_verify;
    c->connect_timeout_ms = cfg->connect_timeout > 0 ? (long)(cfg->connect_timeout * 1000) : 10000;
    c->headers = curl_slist_append(NULL, "Accept: application/json");
    if (c->headers == NULL)
        goto nomem;
    if (cfg->tls_server_name && cfg->tls_server_name[0] &&
        (*err = setup_server_name(c, cfg->tls_server_name, errbuf, errlen)) != KINF_OK)
        goto fail;
    imp.user = cfg->impersonate_user;
    imp.uid = cfg->impersonate_uid;
    imp.groups = cfg->impersonate_groups;
    imp.extra = cfg->impersonate_extra;
    if ((*err = kinf_impersonation_headers(&imp, &c->headers, errbuf, errlen)) != KINF_OK)
        goto fail;
    if ((c->warnings = kinf_warnings_new()) == NULL)
        goto nomem;
    memset(&cc, 0, sizeof(cc));
    cc.token = cfg->token;
    cc.token_file = cfg->token_file && cfg->token_file[0] ? cfg->token_file : NULL;
    cc.username = cfg->username && cfg->username[0] ? cfg->username : NULL;
    cc.password = cfg->password;
    cc.exec = cfg->exec;
    if ((c->creds = kinf_creds_new(&cc, err, errbuf, errlen)) == NULL)
        goto fail;
    if (c->proxy != NULL && add_proxy_secret(c) != KINF_OK)
        goto nomem;
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        goto nomem;
    if (pthread_mutex_init(&c->creds_mu, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        goto nomem;
    }
    if (pthread_cond_init(&c->changed, NULL) != 0) {
        pthread_mutex_destroy(&c->creds_mu);
        pthread_mutex_destroy(&c->mu);
        goto nomem;
    }
    if (pthread_mutex_init(&c->pool_mu, NULL) != 0) {
        pthread_cond_destroy(&c->changed);
        pthread_mutex_destroy(&c->creds_mu);
        pthread_mutex_destroy(&c->mu);
        goto nomem;
    }
    c->pool_pid = getpid();
    c->multi = curl_multi_init();
    c->pipe = c->multi ? kinf_pipe_new(PIPE_BLOCK, PIPE_BLOCKS, err) : NULL;
    if (c->pipe == NULL) {
        curl_multi_cleanup(c->multi);
        pthread_mutex_destroy(&c->pool_mu);
        pthread_cond_destroy(&c->changed);
        pthread_mutex_destroy(&c->creds_mu);
        pthread_mutex_destroy(&c->mu);
        goto nomem;
    }
    /* HTTP/2: every transfer of the I/O thread is a stream of one connection per server (a
     * second one only past the server's stream limit). This is libcurl's default since 7.62;
     * set anyway, it is what client_transport.c's CURLOPT_PIPEWAIT relies on. */
    (void)curl_multi_setopt(c->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    *err = KINF_OK;
    return c;
nomem:
    kinf_errmsg(errbuf, errlen, "out of memory");
    *err = KINF_ENOMEM;
fail:
    if (c != NULL) {
        client_free_config(c);
        free(c);
    }
    curl_global_cleanup();
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
    kinf_creds_interrupt(c->creds, 1); /* a plugin run in progress ends: the join is prompt */
    pthread_mutex_unlock(&c->mu);
    if (running) {
        curl_multi_wakeup(c->multi);
        pthread_join(c->thread, NULL);
    }
    calls_free_all(c); /* their transfers off the multi before it goes */
    kinf_pipe_free(c->pipe); /* after the I/O thread, its only writer */
    curl_multi_cleanup(c->multi); /* closes its connections: close_socket reads c->socks */
    free(c->socks);
    if (c->pool_pid == getpid()) { /* else a parent's connections: left alone */
        for (size_t i = 0; i < c->npool; i++) {
            curl_easy_cleanup(c->pool[i].easy);
            free(c->pool[i].x);
        }
    }
    client_free_config(c);
    free(c->attached);
    free(c->detaching);
    pthread_mutex_destroy(&c->pool_mu);
    pthread_cond_destroy(&c->changed);
    pthread_mutex_destroy(&c->creds_mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
    curl_global_cleanup();
}

kinf_warnings *kinf_client_warnings(kinf_client *c)
{
    return c->warnings;
}

const char *kinf_client_server(const kinf_client *c)
{
    return c->server;
}

/* Records the first setopt failure (an allocation, or an option this libcurl lacks). */
static void set_check(CURLcode rc, const char *opt, int *failed, char *errbuf, size_t errlen)
{
    if (rc == CURLE_OK || *failed)
        return;
    *failed = 1;
    if (rc == CURLE_OUT_OF_MEMORY)
        kinf_errmsg(errbuf, errlen, "out of memory");
    else
        kinf_errmsg(errbuf, errlen, "libcurl refused %s: %s", opt, curl_easy_strerror(rc));
}

static void set_blob(CURL *easy, CURLoption opt, const char *name, const char *pem, int *failed,
                     char *errbuf, size_t errlen)
{
    struct curl_blob b;
    b.data = (void *)pem;
    b.len = strlen(pem);
    b.flags = CURL_BLOB_COPY;
    set_check(curl_easy_setopt(easy, opt, &b), name, failed, errbuf, errlen);
}

CURL *kinf_client_easy(kinf_client *c, const char *path_query, char *errbuf, size_t errlen)
{
    struct kinf_xfer *x;
    return client_easy(c, path_query, &x, errbuf, errlen);
}

void client_header_seen(struct kinf_xfer *x, const char *data, size_t len)
{
    if (len >= 5 && memcmp(data, "HTTP/", 5) == 0)
        x->headers_done = 0; /* a new block: after a 1xx, or the response's own */
    else if ((len == 2 && data[0] == '\r' && data[1] == '\n') || (len == 1 && data[0] == '\n'))
        x->headers_done = 1;
}

/* The header callback of blocking requests; the I/O thread's transfers set their own. */
static size_t on_header_line(char *data, size_t size, size_t nitems, void *ud)
{
    client_header_seen(ud, data, size * nitems);
    return size * nitems;
}

/* Sets every option of a fresh (or reset) easy handle for GET server + path_query; x becomes
 * its CURLOPT_PRIVATE, zeroed but for c, easy and cred_gen. 0, or -1 with a message. */
static int easy_setup(kinf_client *c, CURL *easy, struct kinf_xfer *x, const char *path_query,
                      char *errbuf, size_t errlen)
{
    size_t nb = strlen(c->base), np = strlen(path_query);
    char *url = malloc(nb + np + 1);
    kinf_cred cred;
    int failed = 0;

#define SET(opt, val) set_check(curl_easy_setopt(easy, opt, val), #opt, &failed, errbuf, errlen)
    if (url == NULL) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&c->creds_mu); /* cred's strings live until the next get */
    if (kinf_creds_get(c->creds, &cred, errbuf, errlen) != KINF_OK) {
        pthread_mutex_unlock(&c->creds_mu);
        free(url);
        return -1;
    }
    memset(x, 0, sizeof(*x));
    x->c = c;
    x->easy = easy;
    x->cred_gen = cred.generation;
    memcpy(url, c->base, nb);
    memcpy(url + nb, path_query, np + 1);
    SET(CURLOPT_URL, url); /* curl copies it */
    SET(CURLOPT_PRIVATE, x);
    SET(CURLOPT_ERRORBUFFER, x->errbuf);
    SET(CURLOPT_HEADERFUNCTION, on_header_line);
    SET(CURLOPT_HEADERDATA, x);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_HTTPHEADER, c->headers);
    SET(CURLOPT_USERAGENT, c->user_agent);
    SET(CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    SET(CURLOPT_FOLLOWLOCATION, 0L);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    /* Credentials go through libcurl's auth options, which copy them and send them to this
     * host only; nothing of them is in c->headers. */
    if (cred.token != NULL) {
        SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        SET(CURLOPT_XOAUTH2_BEARER, cred.token);
    } else if (cred.username != NULL) {
        SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        SET(CURLOPT_USERNAME, cred.username);
        SET(CURLOPT_PASSWORD, cred.password ? cred.password : "");
    }
    if (cred.cert_pem != NULL) {
        set_blob(easy, CURLOPT_SSLCERT_BLOB, "CURLOPT_SSLCERT_BLOB", cred.cert_pem, &failed,
                 errbuf, errlen);
        set_blob(easy, CURLOPT_SSLKEY_BLOB, "CURLOPT_SSLKEY_BLOB", cred.key_pem, &failed,
                 errbuf, errlen);
    }
    pthread_mutex_unlock(&c->creds_mu); /* libcurl copied what it keeps */
    SET(CURLOPT_SSL_VERIFYPEER, c->insecure ? 0L : 1L);
    SET(CURLOPT_SSL_VERIFYHOST, c->insecure ? 0L : 2L);
    if (c->ca_data != NULL || c->ca_file != NULL) {
        /* Only the given CA: not the system bundle nor its directory. */
        SET(CURLOPT_CAPATH, (char *)NULL);
        SET(CURLOPT_CAINFO, c->ca_file);
        if (c->ca_data != NULL)
            set_blob(easy, CURLOPT_CAINFO_BLOB, "CURLOPT_CAINFO_BLOB", c->ca_data, &failed,
                     errbuf, errlen);
    }
    if (cred.cert_pem == NULL) {
        if (c->cert_data != NULL)
            set_blob(easy, CURLOPT_SSLCERT_BLOB, "CURLOPT_SSLCERT_BLOB", c->cert_data, &failed,
                     errbuf, errlen);
        else if (c->cert_file != NULL)
            SET(CURLOPT_SSLCERT, c->cert_file);
        if (c->key_data != NULL)
            set_blob(easy, CURLOPT_SSLKEY_BLOB, "CURLOPT_SSLKEY_BLOB", c->key_data, &failed,
                     errbuf, errlen);
        else if (c->key_file != NULL)
            SET(CURLOPT_SSLKEY, c->key_file);
    }
    if (c->connect_to != NULL)
        SET(CURLOPT_CONNECT_TO, c->connect_to);
    if (c->proxy != NULL)
        SET(CURLOPT_PROXY, c->proxy);
#undef SET
    free(url);
    return failed ? -1 : 0;
}

CURL *client_easy(kinf_client *c, const char *path_query, struct kinf_xfer **xp, char *errbuf,
                  size_t errlen)
{
    CURL *easy = curl_easy_init();
    struct kinf_xfer *x = malloc(sizeof(*x));

    if (easy == NULL || x == NULL) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        goto fail;
    }
    if (easy_setup(c, easy, x, path_query, errbuf, errlen) != 0)
        goto fail;
    *xp = x;
    return easy;
fail:
    curl_easy_cleanup(easy);
    free(x);
    return NULL;
}

/* Whether one of the NULL-terminated headers has the name of header h ("Name: value"). */
static int header_named_in(const char *h, const char *const *list)
{
    const char *colon = strchr(h, ':');
    size_t len = colon != NULL ? (size_t)(colon - h) : strlen(h);
    for (size_t i = 0; list != NULL && list[i] != NULL; i++)
        if (strncasecmp(list[i], h, len) == 0 && list[i][len] == ':')
            return 1;
    return 0;
}

CURL *kinf_client_easy_take(kinf_client *c, const char *path_query, char *errbuf, size_t errlen)
{
    struct client_pooled p = {NULL, NULL};

    pthread_mutex_lock(&c->pool_mu);
    if (c->npool > 0 && c->pool_pid == getpid())
        p = c->pool[--c->npool];
    pthread_mutex_unlock(&c->pool_mu);
    if (p.easy == NULL)
        return kinf_client_easy(c, path_query, errbuf, errlen);
    /* Reset when it was given back; its connection, DNS and TLS session caches stay. */
    if (easy_setup(c, p.easy, p.x, path_query, errbuf, errlen) != 0) {
        curl_easy_cleanup(p.easy);
        free(p.x);
        return NULL;
    }
    return p.easy;
}

void kinf_client_easy_give(kinf_client *c, CURL *easy)
{
    struct kinf_xfer *x = NULL;
    pid_t pid = getpid();

    if (easy == NULL)
        return;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    /* Forget every pointer into the caller's memory (headers, body, callbacks' data) now. */
    curl_easy_reset(easy);
    pthread_mutex_lock(&c->pool_mu);
    if (c->pool_pid != pid) {
        /* The pooled handles are a parent process's (nginx creates clients before forking):
         * their connections are its, so they are left alone, neither used nor closed here. */
        c->npool = 0;
        c->pool_pid = pid;
    }
    if (c->npool < KINF_CLIENT_POOL && x != NULL) {
        c->pool[c->npool].easy = easy;
        c->pool[c->npool++].x = x;
        easy = NULL;
    }
    pthread_mutex_unlock(&c->pool_mu);
    if (easy != NULL) {
        curl_easy_cleanup(easy);
        free(x);
    }
}

struct curl_slist *kinf_client_headers(const kinf_client *c, const char *const *extra)
{
    struct curl_slist *list = NULL, *more;
    for (const struct curl_slist *h = c->headers; h != NULL; h = h->next) {
        if (header_named_in(h->data, extra))
            continue;
        if ((more = curl_slist_append(list, h->data)) == NULL)
            goto nomem;
        list = more;
    }
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++) {
        if ((more = curl_slist_append(list, extra[i])) == NULL)
            goto nomem;
        list = more;
    }
    return list;
nomem:
    curl_slist_free_all(list);
    return NULL;
}

void kinf_client_easy_free(CURL *easy)
{
    struct kinf_xfer *x = NULL;
    if (easy == NULL)
        return;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    curl_easy_cleanup(easy);
    if (x != NULL)
        curl_slist_free_all(x->headers); /* after the handle that used it */
    free(x);
}

void kinf_client_unauthorized(kinf_client *c, CURL *easy)
{
    struct kinf_xfer *x = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    if (x == NULL)
        return;
    pthread_mutex_lock(&c->creds_mu);
    kinf_creds_invalidate(c->creds, x->cred_gen);
    pthread_mutex_unlock(&c->creds_mu);
}

int kinf_client_refreshable(kinf_client *c)
{
    int r;
    pthread_mutex_lock(&c->creds_mu);
    r = kinf_creds_refreshable(c->creds);
    pthread_mutex_unlock(&c->creds_mu);
    return r;
}

void kinf_client_redact(kinf_client *c, char *msg, size_t len)
{
    pthread_mutex_lock(&c->creds_mu);
    kinf_creds_redact(c->creds, msg, len);
    pthread_mutex_unlock(&c->creds_mu);
}

void kinf_client_transfer_error(kinf_client *c, CURL *easy, CURLcode result, char *buf,
                                size_t len)
{
    struct kinf_xfer *x = NULL;
    const char *what = curl_easy_strerror(result), *detail;

    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
    detail = x != NULL && x->errbuf[0] ? x->errbuf : what;
    switch (result) {
    case CURLE_PEER_FAILED_VERIFICATION:
        kinf_errmsg(buf, len, "TLS certificate verification failed for %s: %s", c->host, detail);
        break;
    case CURLE_SSL_CONNECT_ERROR:
        kinf_errmsg(buf, len, "TLS handshake with %s failed: %s", c->host, detail);
        break;
    case CURLE_SSL_CERTPROBLEM:
        kinf_errmsg(buf, len, "client certificate or key unusable: %s", detail);
        break;
    case CURLE_SSL_CACERT_BADFILE:
        kinf_errmsg(buf, len, "CA certificate unusable: %s", detail);
        break;
    case CURLE_OUT_OF_MEMORY:
        /* libcurl ends a transfer whose response header line (or, in newer versions, whose
         * headers together) outgrow its limit with this code, in 7.88 with no detail: inside
         * the headers, that is what it means. */
        if (x != NULL && !x->headers_done) {
            kinf_errmsg(buf, len, "response headers too large: a header line longer than "
                        "libcurl accepts (%d KiB)%s%s", CURL_MAX_HTTP_HEADER / 1024,
                        x->errbuf[0] ? ": " : "", x->errbuf);
            break;
        }
        /* fall through */
    default:
        if (strcmp(detail, what) == 0)
            kinf_errmsg(buf, len, "%s", what);
        else
            kinf_errmsg(buf, len, "%s: %s", what, detail);
    }
    kinf_client_redact(c, buf, len);
}
