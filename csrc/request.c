/*
 * request.c - one blocking request to the API server (contract in request.h).
 *
 * An easy handle from kinf_client_easy_take (auth, TLS, timeouts as for watches; an idle handle
 * of an earlier request, with its open connection, when there is one), plus the method, the
 * body and a Content-Type; curl_easy_perform on the caller's thread; the handle is given back
 * for the next request. The response body is collected into a growing buffer that refuses to
 * pass max_response_bytes. Warning headers go to the client's record (warning.h), which counts
 * them and queues new texts for the log. What a call (call.h) does the same way is here too,
 * declared in request_impl.h.
 */
#include "request_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTYPE_LINE 256   /* bytes of the Content-Type line, NUL included */
#define ACCEPT_LINE 1024 /* bytes of the Accept line, NUL included */

/* ---- shared with calls (request_impl.h) ---- */

static int method_ok(const char *m)
{
    static const char *const known[] = {"GET", "POST", "PUT", "PATCH", "DELETE", NULL};
    for (int i = 0; known[i] != NULL; i++)
        if (strcmp(m, known[i]) == 0)
            return 1;
    return 0;
}

kinf_err request_check(const kinf_request *req, char *errbuf, size_t errlen)
{
    if (req == NULL || req->method == NULL || !method_ok(req->method) || req->path_query == NULL ||
        req->path_query[0] != '/' || (req->body != NULL && req->content_type == NULL)) {
        kinf_errmsg(errbuf, errlen, "bad request: method, a path starting with '/' and a "
                                    "content type for a body are required");
        return KINF_EINVAL;
    }
    if (req->body != NULL && strlen(req->content_type) > CTYPE_LINE - sizeof("Content-Type: ")) {
        kinf_errmsg(errbuf, errlen, "content type too long");
        return KINF_EINVAL;
    }
    if (req->accept != NULL && strlen(req->accept) > ACCEPT_LINE - sizeof("Accept: ")) {
        kinf_errmsg(errbuf, errlen, "accept header too long");
        return KINF_EINVAL;
    }
    return KINF_OK;
}

struct curl_slist *request_headers(kinf_client *c, const kinf_request *req)
{
    char ctype[CTYPE_LINE], accept[ACCEPT_LINE];
    const char *extra[4] = {"Expect:", NULL, NULL, NULL};
    size_t n = 1;

    if (req->body != NULL) {
        snprintf(ctype, sizeof(ctype), "Content-Type: %s", req->content_type);
        extra[n++] = ctype;
    }
    if (req->accept != NULL) {
        snprintf(accept, sizeof(accept), "Accept: %s", req->accept);
        extra[n++] = accept; /* replaces the client's default Accept (client.h) */
    }
    return kinf_client_headers(c, extra);
}

int request_setopts(CURL *easy, const kinf_request *req, struct curl_slist *headers)
{
    int failed = 0;
#define SET(opt, val) failed |= curl_easy_setopt(easy, opt, val) != CURLE_OK
    SET(CURLOPT_HTTPHEADER, headers);
    /* at least 1 ms: 0 would mean no timeout at all to libcurl */
    SET(CURLOPT_TIMEOUT_MS, (long)((req->timeout > 0 ? req->timeout : KINF_REQUEST_DEFAULT_TIMEOUT) *
                                   1000) + 1);
    if (strcmp(req->method, "GET") != 0)
        SET(CURLOPT_CUSTOMREQUEST, req->method);
    if (req->body != NULL) {
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        SET(CURLOPT_POSTFIELDS, req->body); /* not copied */
    }
#undef SET
    return failed ? -1 : 0;
}

size_t request_body_add(request_body *b, const char *data, size_t add)
{
    if (add > b->max - b->len) {
        b->too_big = 1;
        return 0; /* aborts the transfer */
    }
    if (b->len + add + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        char *p;
        while (cap < b->len + add + 1)
            cap = cap > ((size_t)-1) / 2 ? b->len + add + 1 : cap * 2;
        if ((p = realloc(b->p, cap)) == NULL) {
            b->nomem = 1;
            return 0;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, add);
    b->len += add;
    return add;
}

kinf_err request_body_error(const request_body *b, char *errbuf, size_t errlen)
{
    if (b->nomem) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        return KINF_ENOMEM;
    }
    if (b->too_big) {
        kinf_errmsg(errbuf, errlen, "response larger than max_response_bytes (%zu)", b->max);
        return KINF_ETOOBIG;
    }
    return KINF_OK;
}

kinf_err request_body_take(request_body *b, kinf_response *out, char *errbuf, size_t errlen)
{
    if (b->p == NULL && (b->p = malloc(1)) == NULL) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        return KINF_ENOMEM;
    }
    b->p[b->len] = '\0';
    out->body = b->p;
    out->len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return KINF_OK;
}

static double retry_after(CURL *easy)
{
    struct curl_header *h = NULL;
    char *end;
    double v;
    if (curl_easy_header(easy, "Retry-After", 0, CURLH_HEADER, -1, &h) != CURLHE_OK || h == NULL)
        return -1;
    v = strtod(h->value, &end);
    return end != h->value && v >= 0 ? v : -1; /* the HTTP-date form is not used by Kubernetes */
}

void request_response_info(CURL *easy, kinf_response *out)
{
    const char *got_ctype = NULL;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &out->status);
    out->retry_after = retry_after(easy);
    if (curl_easy_getinfo(easy, CURLINFO_CONTENT_TYPE, &got_ctype) == CURLE_OK && got_ctype != NULL)
        snprintf(out->content_type, sizeof(out->content_type), "%s", got_ctype);
}

/* ---- the blocking request ---- */

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    return request_body_add(ud, data, size * n);
}

/* Notes the response's Warning headers in the client's record (warning.h); returns how many
 * warnings they held. */
static unsigned note_warnings(kinf_client *c, CURL *easy)
{
    struct curl_header *h = NULL;
    size_t amount;
    unsigned n = 0;
    if (curl_easy_header(easy, "Warning", 0, CURLH_HEADER, -1, &h) != CURLHE_OK || h == NULL)
        return 0;
    amount = h->amount;
    for (size_t i = 0; i < amount; i++) {
        if (i > 0 && (curl_easy_header(easy, "Warning", i, CURLH_HEADER, -1, &h) != CURLHE_OK ||
                      h == NULL))
            break;
        n += (unsigned)kinf_warnings_note(kinf_client_warnings(c), h->value, strlen(h->value));
    }
    return n;
}

/* One attempt; *got_401 tells the caller the answer was 401 (its credential now stale). */
static kinf_err attempt(kinf_client *c, const kinf_request *req, kinf_response *out,
                        int *got_401, char *errbuf, size_t errlen)
{
    struct curl_slist *headers = NULL;
    request_body b = {NULL, 0, 0, 0, 0, 0};
    CURL *easy;
    CURLcode rc;
    kinf_err err = KINF_OK;
    int failed = 0;

    *got_401 = 0;
    b.max = req->max_response_bytes ? req->max_response_bytes : KINF_REQUEST_DEFAULT_MAX_RESPONSE;
    if ((easy = kinf_client_easy_take(c, req->path_query, errbuf, errlen)) == NULL)
        return KINF_EIO; /* a credentials failure, or out of memory; errbuf says which */
    if ((headers = request_headers(c, req)) == NULL) {
        kinf_client_easy_give(c, easy);
        kinf_errmsg(errbuf, errlen, "out of memory");
        return KINF_ENOMEM;
    }
    failed |= request_setopts(easy, req, headers) != 0;
    failed |= curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    failed |= curl_easy_setopt(easy, CURLOPT_WRITEDATA, &b) != CURLE_OK;
    if (failed) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        err = KINF_ENOMEM;
        goto done;
    }
    rc = curl_easy_perform(easy);
    if ((err = request_body_error(&b, errbuf, errlen)) != KINF_OK)
        goto done;
    if (rc != CURLE_OK) {
        kinf_client_transfer_error(c, easy, rc, errbuf, errlen);
        err = KINF_EIO;
        goto done;
    }
    request_response_info(easy, out);
    if (out->status == 401) {
        kinf_client_unauthorized(c, easy);
        *got_401 = 1;
    }
    out->warnings = note_warnings(c, easy);
    err = request_body_take(&b, out, errbuf, errlen);
done:
    kinf_client_easy_give(c, easy);
    curl_slist_free_all(headers);
    free(b.p);
    return err;
}

kinf_err kinf_request_do(kinf_client *c, const kinf_request *req, kinf_response *out,
                         char *errbuf, size_t errlen)
{
    kinf_err err;
    int got_401;

    memset(out, 0, sizeof(*out));
    out->retry_after = -1;
    if ((err = request_check(req, errbuf, errlen)) != KINF_OK)
        return err;
    err = attempt(c, req, out, &got_401, errbuf, errlen);
    if (err == KINF_OK && got_401 && kinf_client_refreshable(c)) {
        kinf_response first = *out;
        err = attempt(c, req, out, &got_401, errbuf, errlen);
        if (err != KINF_OK)
            *out = first; /* the retry failed to get an answer: report the 401 */
        else
            kinf_response_free(&first);
        err = KINF_OK;
    }
    return err;
}

void kinf_response_free(kinf_response *r)
{
    if (r == NULL)
        return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}
