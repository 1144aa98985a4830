/*
 * exec_credential_json.c - the ExecCredential JSON of an exec plugin, read with a small strict
 * parser (contract in exec_credential_json.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* timegm */
#endif
#include "exec_credential_json.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kinf.h"

#define JSON_MAX_DEPTH 64

typedef struct jcur {
    const char *p, *start, *end;
} jcur;

void kinf_execcred_clear(kinf_execcred *e)
{
    free(e->api_version);
    free(e->kind);
    kinf_wipe_free(e->token);
    free(e->cert);
    kinf_wipe_free(e->key);
    free(e->expiry);
    memset(e, 0, sizeof(*e));
}


static void j_ws(jcur *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int j_lit(jcur *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
        return KINF_J_BAD;
    j->p += n;
    return KINF_J_OK;
}


/* A string at j->p; out != NULL receives a malloc'd decoded copy (a decoded string is never
 * longer than its source, so the source length bounds the buffer). */
static int j_string(jcur *j, char **out)
{
    const char *q;
    char *buf = NULL;
    size_t n = 0;

    if (j->p >= j->end || *j->p != '"')
        return KINF_J_BAD;
    q = ++j->p;
    while (q < j->end && *q != '"') {
        if ((unsigned char)*q < 0x20)
            return KINF_J_BAD;
        q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    }
    if (q >= j->end)
        return KINF_J_BAD;
    if (out != NULL && (buf = malloc((size_t)(q - j->p) + 1)) == NULL)
        return KINF_J_NOMEM;
    while (j->p < q) {
        unsigned cp;
        size_t used;
        if (*j->p != '\\') {
            char c = *j->p++;
            if (buf)
                buf[n++] = c;
            continue;
        }
        if ((used = kinf_json_escape((const unsigned char *)j->p, (const unsigned char *)q,
                                     &cp)) == 0)
            goto bad;
        j->p += used;
        if (buf)
            n += (size_t)kinf_utf8_put((unsigned char *)buf + n, cp);
    }
    j->p = q + 1;
    if (buf) {
        buf[n] = '\0';
        *out = buf;
    }
    return KINF_J_OK;
bad:
    if (buf) {
        kinf_wipe(buf, n);
        free(buf);
    }
    return KINF_J_BAD;
}

static int j_number(jcur *j)
{
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end)
        return KINF_J_BAD;
    if (*j->p == '0') {
        j->p++;
    } else if (*j->p >= '1' && *j->p <= '9') {
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    } else {
        return KINF_J_BAD;
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return KINF_J_BAD;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return KINF_J_BAD;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    return j->p > s ? KINF_J_OK : KINF_J_BAD;
}

static int j_skip(jcur *j, int depth);

/* Calls on_member(ud, key, j) for each member; on_member consumes the value. */
static int j_object(jcur *j, int depth, int (*on_member)(void *, const char *, jcur *, int),
                    void *ud)
{
    int rc;
    if (depth > JSON_MAX_DEPTH || j->p >= j->end || *j->p != '{')
        return KINF_J_BAD;
    j->p++;
    j_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return KINF_J_OK;
    }
    for (;;) {
        char *key = NULL;
        j_ws(j);
        if ((rc = j_string(j, &key)) != KINF_J_OK)
            return rc;
        j_ws(j);
        if (j->p >= j->end || *j->p != ':') {
            free(key);
            return KINF_J_BAD;
        }
        j->p++;
        j_ws(j);
        rc = on_member ? on_member(ud, key, j, depth + 1) : j_skip(j, depth + 1);
        free(key);
        if (rc != KINF_J_OK)
            return rc;
        j_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return KINF_J_OK;
        }
        return KINF_J_BAD;
    }
}

static int j_skip(jcur *j, int depth)
{
    if (depth > JSON_MAX_DEPTH || j->p >= j->end)
        return KINF_J_BAD;
    switch (*j->p) {
    case '{':
        return j_object(j, depth, NULL, NULL);
    case '[':
        j->p++;
        j_ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return KINF_J_OK;
        }
        for (;;) {
            int rc;
            j_ws(j);
            if ((rc = j_skip(j, depth + 1)) != KINF_J_OK)
                return rc;
            j_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                return KINF_J_OK;
            }
            return KINF_J_BAD;
        }
    case '"':
        return j_string(j, NULL);
    case 't':
        return j_lit(j, "true");
    case 'f':
        return j_lit(j, "false");
    case 'n':
        return j_lit(j, "null");
    default:
        return j_number(j);
    }
}

/* A string member (last one wins) or null (absent). */
static int j_opt_string(jcur *j, char **slot, int secret)
{
    char *s = NULL;
    int rc;
    if (j->p < j->end && *j->p == 'n')
        return j_lit(j, "null");
    if ((rc = j_string(j, &s)) != KINF_J_OK)
        return rc;
    if (secret)
        kinf_wipe_free(*slot);
    else
        free(*slot);
    *slot = s;
    return KINF_J_OK;
}

static int on_status_member(void *ud, const char *key, jcur *j, int depth)
{
    kinf_execcred *e = ud;
    if (strcmp(key, "token") == 0)
        return j_opt_string(j, &e->token, 1);
    if (strcmp(key, "clientCertificateData") == 0)
        return j_opt_string(j, &e->cert, 0);
    if (strcmp(key, "clientKeyData") == 0)
        return j_opt_string(j, &e->key, 1);
    if (strcmp(key, "expirationTimestamp") == 0)
        return j_opt_string(j, &e->expiry, 0);
    return j_skip(j, depth);
}

static int on_top_member(void *ud, const char *key, jcur *j, int depth)
{
    kinf_execcred *e = ud;
    if (strcmp(key, "apiVersion") == 0)
        return j_opt_string(j, &e->api_version, 0);
    if (strcmp(key, "kind") == 0)
        return j_opt_string(j, &e->kind, 0);
    if (strcmp(key, "status") == 0) {
        if (j->p < j->end && *j->p == 'n')
            return j_lit(j, "null");
        e->has_status = 1;
        return j_object(j, depth, on_status_member, e);
    }
    return j_skip(j, depth);
}

int kinf_execcred_parse(const char *json, size_t len, kinf_execcred *e, size_t *where)
{
    jcur j = {json, json, json + len};
    int rc;
    memset(e, 0, sizeof(*e));
    j_ws(&j);
    rc = j_object(&j, 0, on_top_member, e);
    if (rc == KINF_J_OK) {
        j_ws(&j);
        if (j.p != j.end)
            rc = KINF_J_BAD;
    }
    *where = (size_t)(j.p - j.start);
    return rc;
}

static int digits(const char **s, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++, (*s)++) {
        if (**s < '0' || **s > '9')
            return 0;
        *v = *v * 10 + (**s - '0');
    }
    return 1;
}

int kinf_parse_rfc3339(const char *s, double *out)
{
    int y, mo, d, h, mi, se, oh = 0, om = 0, sign = 0;
    double frac = 0, scale = 0.1;
    struct tm tm;
    time_t t;

    if (!digits(&s, 4, &y) || *s++ != '-' || !digits(&s, 2, &mo) || *s++ != '-' ||
        !digits(&s, 2, &d) || (*s != 'T' && *s != 't' && *s != ' ') || !(s++, digits(&s, 2, &h)) ||
        *s++ != ':' || !digits(&s, 2, &mi) || *s++ != ':' || !digits(&s, 2, &se))
        return 0;
    if (*s == '.') {
        s++;
        if (*s < '0' || *s > '9')
            return 0;
        while (*s >= '0' && *s <= '9') {
            frac += (*s++ - '0') * scale;
            scale /= 10;
        }
    }
    if (*s == 'Z' || *s == 'z') {
        s++;
    } else if (*s == '+' || *s == '-') {
        sign = *s++ == '+' ? 1 : -1;
        if (!digits(&s, 2, &oh) || *s++ != ':' || !digits(&s, 2, &om) || oh > 23 || om > 59)
            return 0;
    } else {
        return 0;
    }
    if (*s != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
        return 0;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = se;
    t = timegm(&tm);
    *out = (double)t + frac - sign * (oh * 3600.0 + om * 60.0);
    return 1;
}

