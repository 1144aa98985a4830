/*
 * credentials.c - bearer token, token file, basic auth and exec credential plugins (contract in
 * credentials.h).
 *
 * Why in C: credentials that must be refreshed (a rotated token file, an expired plugin token,
 * a 401) are needed on the client's I/O thread, which never touches a Lua state.
 *
 * Limits: plugin stdout is capped at 1 MiB (more is an error), the stderr kept for the error
 * message at 4 KiB (the rest is read and dropped), a token file at 64 KiB. The ExecCredential
 * reader below is a small strict JSON parser (RFC 8259 grammar, depth 64) that keeps only the
 * fields it needs; it is not the streaming scanner of jsonscan.c, which is specialised for
 * Kubernetes objects.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2: close-on-exec pipes with no window for a concurrent spawn */
#endif
#include "credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TOKEN_FILE_MAX (64 * 1024)
#define EXEC_STDOUT_MAX (1024 * 1024)
#define EXEC_STDERR_KEEP 4096
#define EXEC_DEFAULT_TIMEOUT 30.0
#define JSON_MAX_DEPTH 64
#define REDACTED "[redacted]"
#define MIN_SECRET 4 /* shorter "secrets" would blank out ordinary words */

typedef enum { CR_NONE, CR_TOKEN, CR_TOKEN_FILE, CR_BASIC, CR_EXEC } cr_kind;

struct kinf_creds {
    cr_kind kind;
    unsigned long generation;
    int stale;              /* a 401 rejected the current generation */

    char *token;            /* static, or the file's / plugin's current token */
    char *prev_token;       /* the one before the last refresh (kept for redaction only) */
    char *username, *password;

    /* token file */
    char *token_file;
    int have_id;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;

    /* exec */
    char **argv;            /* command + args, NULL-terminated */
    char **env;             /* NAME=VALUE, NULL-terminated */
    char *api_version, *install_hint;
    double timeout;
    int have_exec;          /* a plugin credential is cached */
    char *cert_pem, *key_pem;
    double expires;         /* wall-clock seconds; 0: no expiry */
    unsigned long runs;

    char **extra;           /* more secrets to redact (kinf_creds_add_secret) */
    size_t nextra;
};

/* ---- small helpers ---- */

static char *dup_or_null(const char *s, int *failed)
{
    char *d;
    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        *failed = 1;
    return d;
}

static void free_vec(char **v, int secret)
{
    if (v == NULL)
        return;
    for (char **p = v; *p; p++) {
        if (secret)
            kinf_wipe_free(*p);
        else
            free(*p);
    }
    free(v);
}

/* A NULL-terminated copy of first (if not NULL) followed by rest (NULL-terminated or NULL). */
static char **dup_vec(const char *first, const char *const *rest, int *failed)
{
    size_t n = first ? 1 : 0, i = 0;
    char **v;
    for (const char *const *p = rest; p && *p; p++)
        n++;
    v = calloc(n + 1, sizeof(*v));
    if (v == NULL) {
        *failed = 1;
        return NULL;
    }
    if (first && (v[i++] = strdup(first)) == NULL)
        goto fail;
    for (const char *const *p = rest; p && *p; p++)
        if ((v[i++] = strdup(*p)) == NULL)
            goto fail;
    return v;
fail:
    free_vec(v, 1);
    *failed = 1;
    return NULL;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Trims surrounding whitespace in place (tokens in files end with a newline). */
static void trim(char *s)
{
    size_t n = strlen(s), a = 0;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    while (a < n && (s[a] == ' ' || s[a] == '\t' || s[a] == '\n' || s[a] == '\r'))
        a++;
    memmove(s, s + a, n - a);
    s[n - a] = '\0';
}

/* A token goes into an HTTP header: no control characters (header injection), no spaces. */
static int token_ok(const char *t)
{
    if (t == NULL || t[0] == '\0')
        return 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++)
        if (*p < 0x21 || *p == 0x7f)
            return 0;
    return 1;
}

/* A new current token; the old one is kept (for redaction) and the generation moves on. */
static void set_token(kinf_creds *cr, char *tok)
{
    kinf_wipe_free(cr->prev_token);
    cr->prev_token = cr->token;
    cr->token = tok;
    cr->generation++;
}

/* ---- token file ---- */

/* Reads the file into a fresh trimmed string. KINF_EIO with a message on failure. */
static kinf_err read_token_file(const char *path, char **out, struct stat *st, char *errbuf,
                                size_t errlen)
{
    char *buf = NULL;
    size_t n = 0;
    ssize_t got;
    kinf_err err = KINF_EIO;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    *out = NULL;
    if (fd < 0) {
        kinf_errmsg(errbuf, errlen, "token file %s: %s", path, strerror(errno));
        return KINF_EIO;
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        kinf_errmsg(errbuf, errlen, "token file %s: not a regular file", path);
        goto out;
    }
    if ((buf = malloc(TOKEN_FILE_MAX + 1)) == NULL) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        err = KINF_ENOMEM;
        goto out;
    }
    while (n < TOKEN_FILE_MAX && (got = read(fd, buf + n, TOKEN_FILE_MAX - n)) != 0) {
        if (got < 0) {
            if (errno == EINTR)
                continue;
            kinf_errmsg(errbuf, errlen, "token file %s: %s", path, strerror(errno));
            goto out;
        }
        n += (size_t)got;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        kinf_errmsg(errbuf, errlen, "token file %s: contains a NUL byte", path);
        goto out;
    }
    trim(buf);
    if (buf[0] == '\0') {
        kinf_errmsg(errbuf, errlen, "token file %s is empty", path);
        goto out;
    }
    if (!token_ok(buf)) {
        kinf_errmsg(errbuf, errlen, "token file %s: the token contains spaces or control characters",
                    path);
        goto out;
    }
    *out = buf;
    buf = NULL;
    err = KINF_OK;
out:
    if (buf != NULL) {
        kinf_wipe(buf, TOKEN_FILE_MAX + 1);
        free(buf);
    }
    close(fd);
    return err;
}

static int same_file(const kinf_creds *cr, const struct stat *st)
{
    return cr->have_id && cr->dev == st->st_dev && cr->ino == st->st_ino &&
           cr->size == st->st_size && cr->mtime.tv_sec == st->st_mtim.tv_sec &&
           cr->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static kinf_err refresh_token_file(kinf_creds *cr, char *errbuf, size_t errlen)
{
    struct stat st;
    char *tok;
    kinf_err err;

    if (!cr->stale && stat(cr->token_file, &st) == 0 && same_file(cr, &st))
        return KINF_OK;
    err = read_token_file(cr->token_file, &tok, &st, errbuf, errlen);
    if (err != KINF_OK)
        return cr->token != NULL && err != KINF_ENOMEM ? KINF_OK : err; /* keep the last good one */
    cr->stale = 0;
    cr->have_id = 1;
    cr->dev = st.st_dev;
    cr->ino = st.st_ino;
    cr->size = st.st_size;
    cr->mtime = st.st_mtim;
    if (cr->token != NULL && strcmp(cr->token, tok) == 0) {
        kinf_wipe_free(tok);
        return KINF_OK;
    }
    set_token(cr, tok);
    return KINF_OK;
}

/* ---- ExecCredential JSON ---- */

typedef struct jcur {
    const char *p, *start, *end;
} jcur;

typedef struct execcred {
    char *api_version, *kind;
    int has_status;
    char *token, *cert, *key, *expiry;
} execcred;

static void execcred_clear(execcred *e)
{
    free(e->api_version);
    free(e->kind);
    kinf_wipe_free(e->token);
    free(e->cert);
    kinf_wipe_free(e->key);
    free(e->expiry);
    memset(e, 0, sizeof(*e));
}

enum { J_OK = 0, J_BAD = -1, J_NOMEM = -2 };

static void j_ws(jcur *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int j_lit(jcur *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
        return J_BAD;
    j->p += n;
    return J_OK;
}


/* A string at j->p; out != NULL receives a malloc'd decoded copy (a decoded string is never
 * longer than its source, so the source length bounds the buffer). */
static int j_string(jcur *j, char **out)
{
    const char *q;
    char *buf = NULL;
    size_t n = 0;

    if (j->p >= j->end || *j->p != '"')
        return J_BAD;
    q = ++j->p;
    while (q < j->end && *q != '"') {
        if ((unsigned char)*q < 0x20)
            return J_BAD;
        q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    }
    if (q >= j->end)
        return J_BAD;
    if (out != NULL && (buf = malloc((size_t)(q - j->p) + 1)) == NULL)
        return J_NOMEM;
    while (j->p < q) {
        char c = *j->p++;
        unsigned cp, lo;
        if (c != '\\') {
            if (buf)
                buf[n++] = c;
            continue;
        }
        c = *j->p++;
        switch (c) {
        case '"': case '\\': case '/':
            break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u':
            if (kinf_hex4((const unsigned char *)j->p, (const unsigned char *)q, &cp) != 1)
                goto bad;
            j->p += 4;
            if (cp >= 0xd800 && cp < 0xdc00) {
                if (q - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || kinf_hex4((const unsigned char *)j->p + 2, (const unsigned char *)q, &lo) != 1 ||
                    lo < 0xdc00 || lo > 0xdfff)
                    goto bad;
                j->p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                goto bad;
            }
            if (buf)
                n += (size_t)kinf_utf8_put((unsigned char *)buf + n, cp);
            continue;
        default:
            goto bad;
        }
        if (buf)
            buf[n++] = c;
    }
    j->p = q + 1;
    if (buf) {
        buf[n] = '\0';
        *out = buf;
    }
    return J_OK;
bad:
    if (buf) {
        kinf_wipe(buf, n);
        free(buf);
    }
    return J_BAD;
}

static int j_number(jcur *j)
{
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end)
        return J_BAD;
    if (*j->p == '0') {
        j->p++;
    } else if (*j->p >= '1' && *j->p <= '9') {
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    } else {
        return J_BAD;
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return J_BAD;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || *j->p < '0' || *j->p > '9')
            return J_BAD;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    return j->p > s ? J_OK : J_BAD;
}

static int j_skip(jcur *j, int depth);

/* Calls on_member(ud, key, j) for each member; on_member consumes the value. */
static int j_object(jcur *j, int depth, int (*on_member)(void *, const char *, jcur *, int),
                    void *ud)
{
    int rc;
    if (depth > JSON_MAX_DEPTH || j->p >= j->end || *j->p != '{')
        return J_BAD;
    j->p++;
    j_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return J_OK;
    }
    for (;;) {
        char *key = NULL;
        j_ws(j);
        if ((rc = j_string(j, &key)) != J_OK)
            return rc;
        j_ws(j);
        if (j->p >= j->end || *j->p != ':') {
            free(key);
            return J_BAD;
        }
        j->p++;
        j_ws(j);
        rc = on_member ? on_member(ud, key, j, depth + 1) : j_skip(j, depth + 1);
        free(key);
        if (rc != J_OK)
            return rc;
        j_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return J_OK;
        }
        return J_BAD;
    }
}

static int j_skip(jcur *j, int depth)
{
    if (depth > JSON_MAX_DEPTH || j->p >= j->end)
        return J_BAD;
    switch (*j->p) {
    case '{':
        return j_object(j, depth, NULL, NULL);
    case '[':
        j->p++;
        j_ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return J_OK;
        }
        for (;;) {
            int rc;
            j_ws(j);
            if ((rc = j_skip(j, depth + 1)) != J_OK)
                return rc;
            j_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                return J_OK;
            }
            return J_BAD;
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
    if ((rc = j_string(j, &s)) != J_OK)
        return rc;
    if (secret)
        kinf_wipe_free(*slot);
    else
        free(*slot);
    *slot = s;
    return J_OK;
}

static int on_status_member(void *ud, const char *key, jcur *j, int depth)
{
    execcred *e = ud;
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
    execcred *e = ud;
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

/* J_OK, J_BAD (with *where = byte offset) or J_NOMEM. */
static int parse_execcred(const char *json, size_t len, execcred *e, size_t *where)
{
    jcur j = {json, json, json + len};
    int rc;
    memset(e, 0, sizeof(*e));
    j_ws(&j);
    rc = j_object(&j, 0, on_top_member, e);
    if (rc == J_OK) {
        j_ws(&j);
        if (j.p != j.end)
            rc = J_BAD;
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

/* RFC 3339: YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM) -> seconds since the epoch. */
static int parse_rfc3339(const char *s, double *out)
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

/* ---- redaction ---- */

/* Replaces occurrences of secret in msg (len bytes of room) with REDACTED. */
static void redact_one(char *msg, size_t len, const char *secret)
{
    size_t sl, rl = strlen(REDACTED);
    char *hit, *from = msg;
    if (secret == NULL || (sl = strlen(secret)) < MIN_SECRET || len == 0)
        return;
    while ((hit = strstr(from, secret)) != NULL) {
        size_t tail = strlen(hit + sl), at = (size_t)(hit - msg);
        if (at + rl + tail + 1 > len) {
            /* No room for the rest: cut the message after the marker (or before the hit). */
            if (at + rl + 1 <= len) {
                memcpy(hit, REDACTED, rl);
                hit[rl] = '\0';
            } else {
                *hit = '\0';
            }
            return;
        }
        memmove(hit + rl, hit + sl, tail + 1);
        memcpy(hit, REDACTED, rl);
        from = hit + rl;
    }
}

/* Blanks the rest of a word after "Bearer " and whole PEM private key blocks. */
static void redact_patterns(char *msg, size_t len)
{
    char *p = msg;
    while ((p = strstr(p, "Bearer ")) != NULL) {
        char *w = p + 7, *e = w;
        while (*e && *e != ' ' && *e != '"' && *e != '\'' && *e != '\n' && *e != ';' && *e != ',')
            e++;
        if (e - w >= MIN_SECRET && strncmp(w, REDACTED, strlen(REDACTED)) != 0) {
            size_t rl = strlen(REDACTED);
            if ((size_t)(w - msg) + rl + strlen(e) + 1 <= len) {
                memmove(w + rl, e, strlen(e) + 1);
                memcpy(w, REDACTED, rl);
            } else {
                *w = '\0';
                return;
            }
        }
        p = w;
    }
    p = msg;
    while ((p = strstr(p, "-----BEGIN")) != NULL) {
        char *hdr_end = strstr(p + 10, "-----"), *end;
        if (hdr_end == NULL)
            return;
        if (strstr(p, "PRIVATE KEY") == NULL || strstr(p, "PRIVATE KEY") > hdr_end) {
            p = hdr_end;
            continue;
        }
        end = strstr(hdr_end + 5, "-----END");
        end = end ? strstr(end + 8, "-----") : NULL;
        end = end ? end + 5 : p + strlen(p);
        if ((size_t)(end - p) >= strlen(REDACTED)) {
            memcpy(p, REDACTED, strlen(REDACTED));
            memmove(p + strlen(REDACTED), end, strlen(end) + 1);
        } else {
            *p = '\0';
            return;
        }
        p += strlen(REDACTED);
    }
    (void)len;
}

void kinf_creds_redact(const kinf_creds *cr, char *msg, size_t len)
{
    if (msg == NULL || len == 0)
        return;
    msg[len - 1] = '\0';
    if (cr != NULL) {
        redact_one(msg, len, cr->token);
        redact_one(msg, len, cr->prev_token);
        redact_one(msg, len, cr->password);
        redact_one(msg, len, cr->key_pem);
        for (size_t i = 0; i < cr->nextra; i++)
            redact_one(msg, len, cr->extra[i]);
    }
    redact_patterns(msg, len);
}

/* ---- exec plugin ---- */

typedef struct obuf {
    char *p;
    size_t n, cap;
} obuf;

static int obuf_add(obuf *b, const char *src, size_t n, size_t max)
{
    if (b->n + n > max)
        return -1;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *grown;
        while (cap < b->n + n + 1)
            cap *= 2;
        if (cap > max + 1)
            cap = max + 1;
        grown = malloc(cap);
        if (grown == NULL)
            return -2;
        if (b->p != NULL) {
            memcpy(grown, b->p, b->n);
            kinf_wipe(b->p, b->n);
            free(b->p);
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static void obuf_free(obuf *b)
{
    if (b->p != NULL) {
        kinf_wipe(b->p, b->n);
        free(b->p);
    }
    memset(b, 0, sizeof(*b));
}

/* The environment for the plugin: environ with cr->env applied (a NAME=... in cr->env replaces
 * the inherited NAME). The strings are borrowed; only the array is allocated. */
static char **plugin_env(const kinf_creds *cr)
{
    size_t n = 0, extra = 0, k = 0;
    char **envp;
    for (char **e = environ; e && *e; e++)
        n++;
    for (char **e = cr->env; e && *e; e++)
        extra++;
    envp = calloc(n + extra + 1, sizeof(*envp));
    if (envp == NULL)
        return NULL;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t nl = eq ? (size_t)(eq - *e) : strlen(*e);
        int replaced = 0;
        for (char **x = cr->env; x && *x && !replaced; x++)
            replaced = strncmp(*x, *e, nl) == 0 && (*x)[nl] == '=';
        if (!replaced)
            envp[k++] = *e;
    }
    for (char **x = cr->env; x && *x; x++)
        envp[k++] = *x;
    envp[k] = NULL;
    return envp;
}

/* Makes stderr fit for a message: control characters become spaces, runs of blanks one
 * space, at most `max` bytes. */
static void tidy_stderr(char *s, size_t max)
{
    size_t o = 0;
    int blank = 1;
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f || c == ' ') {
            if (!blank)
                s[o++] = ' ';
            blank = 1;
        } else {
            s[o++] = (char)c;
            blank = 0;
        }
    }
    while (o > 0 && s[o - 1] == ' ')
        o--;
    s[o] = '\0';
    if (o > max) {
        memcpy(s + max - 3, "...", 4);
    }
}

typedef struct run_result {
    int spawn_errno;  /* posix_spawnp failed with this */
    int timed_out;
    int too_big;
    int status;       /* waitpid status; valid when reaped */
    int reaped;       /* 0: someone else reaped the child (ECHILD) */
} run_result;

static void reap(pid_t pid, double deadline, run_result *rr)
{
    for (;;) {
        pid_t w = waitpid(pid, &rr->status, WNOHANG);
        if (w == pid) {
            rr->reaped = 1;
            return;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) { /* ECHILD: a SIGCHLD handler of the host (nginx) reaped it */
            rr->reaped = 0;
            return;
        }
        if (kinf_now() >= deadline) {
            rr->timed_out = 1;
            kill(pid, SIGKILL);
            while ((w = waitpid(pid, &rr->status, 0)) < 0 && errno == EINTR)
                ;
            rr->reaped = w == pid;
            return;
        }
        {
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

/* Runs the plugin, capturing stdout (up to EXEC_STDOUT_MAX) and stderr (first
 * EXEC_STDERR_KEEP bytes). KINF_ENOMEM or KINF_OK (then rr says how it went). */
static kinf_err spawn_and_collect(kinf_creds *cr, obuf *out, obuf *errb, run_result *rr)
{
    int op[2] = {-1, -1}, ep[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int fa_ok = 0, attr_ok = 0;
    char **envp = NULL;
    pid_t pid;
    double deadline;
    kinf_err err = KINF_ENOMEM;
    sigset_t none, defs;
    struct pollfd pfd[2];
    char chunk[4096];

    memset(rr, 0, sizeof(*rr));
    if (pipe2(op, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
        rr->spawn_errno = errno;
        err = KINF_OK;
        goto out;
    }
    if ((envp = plugin_env(cr)) == NULL)
        goto out;
    if (posix_spawn_file_actions_init(&fa) != 0)
        goto out;
    fa_ok = 1;
    if (posix_spawnattr_init(&attr) != 0)
        goto out;
    attr_ok = 1;
    sigemptyset(&none);
    sigemptyset(&defs);
    sigaddset(&defs, SIGPIPE);
    sigaddset(&defs, SIGCHLD);
    sigaddset(&defs, SIGINT);
    sigaddset(&defs, SIGQUIT);
    sigaddset(&defs, SIGTERM);
    sigaddset(&defs, SIGHUP);
    if (posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) != 0 ||
        posix_spawn_file_actions_adddup2(&fa, op[1], 1) != 0 ||
        posix_spawn_file_actions_adddup2(&fa, ep[1], 2) != 0 ||
        posix_spawnattr_setsigmask(&attr, &none) != 0 ||
        posix_spawnattr_setsigdefault(&attr, &defs) != 0 ||
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) != 0)
        goto out;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* The plugin gets stdin, stdout and stderr only: no socket or file of the host process
     * (LuaSocket, nginx and libcurl descriptors are not all close-on-exec). */
    if (posix_spawn_file_actions_addclosefrom_np(&fa, 3) != 0)
        goto out;
#endif
    cr->runs++;
    rr->spawn_errno = posix_spawnp(&pid, cr->argv[0], &fa, &attr, cr->argv, envp);
    err = KINF_OK;
    if (rr->spawn_errno != 0)
        goto out;
    close(op[1]);
    close(ep[1]);
    op[1] = ep[1] = -1;

    deadline = kinf_now() + cr->timeout;
    pfd[0].fd = op[0];
    pfd[1].fd = ep[0];
    while (pfd[0].fd >= 0 || pfd[1].fd >= 0) {
        double left = deadline - kinf_now();
        int rc;
        if (left <= 0) {
            rr->timed_out = 1;
            break;
        }
        pfd[0].events = pfd[1].events = POLLIN;
        rc = poll(pfd, 2, (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2 && rc > 0; i++) {
            ssize_t got;
            if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            got = read(pfd[i].fd, chunk, sizeof(chunk));
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) {
                /* Closed here and forgotten everywhere: closing it again at `out` could hit a
                 * descriptor another thread has opened since under the same number. */
                close(pfd[i].fd);
                pfd[i].fd = -1;
                if (i == 0)
                    op[0] = -1;
                else
                    ep[0] = -1;
                continue;
            }
            if (i == 0) {
                int a = obuf_add(out, chunk, (size_t)got, EXEC_STDOUT_MAX);
                if (a == -2)
                    err = KINF_ENOMEM;
                if (a != 0) {
                    rr->too_big = a == -1;
                    break;
                }
            } else if (errb->n < EXEC_STDERR_KEEP) {
                size_t room = EXEC_STDERR_KEEP - errb->n;
                if (obuf_add(errb, chunk, (size_t)got < room ? (size_t)got : room,
                             EXEC_STDERR_KEEP) == -2)
                    err = KINF_ENOMEM;
            }
        }
        if (rr->too_big || err != KINF_OK)
            break;
    }
    if (rr->timed_out || rr->too_big || err != KINF_OK)
        kill(pid, SIGKILL);
    reap(pid, rr->timed_out ? kinf_now() : deadline, rr);
    kinf_wipe(chunk, sizeof(chunk));
out:
    for (int i = 0; i < 2; i++) {
        if (op[i] >= 0)
            close(op[i]);
        if (ep[i] >= 0)
            close(ep[i]);
    }
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    free(envp);
    return err;
}

/* The command as shown in messages (never the arguments: they may carry secrets). */
static const char *cmd_name(const kinf_creds *cr)
{
    return cr->argv[0];
}

static kinf_err run_exec(kinf_creds *cr, char *errbuf, size_t errlen)
{
    obuf out = {0}, errb = {0};
    run_result rr;
    execcred e;
    size_t where = 0;
    kinf_err err;
    double expires = 0;
    int rc;

    memset(&e, 0, sizeof(e));
    err = spawn_and_collect(cr, &out, &errb, &rr);
    if (err != KINF_OK) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        goto out;
    }
    err = KINF_EIO;
    if (rr.spawn_errno == ENOENT) {
        kinf_errmsg(errbuf, errlen, "exec plugin: executable \"%s\" not found%s%s", cmd_name(cr),
                    cr->install_hint ? "; " : "", cr->install_hint ? cr->install_hint : "");
        goto out;
    }
    if (rr.spawn_errno != 0) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\": cannot run it: %s", cmd_name(cr),
                    strerror(rr.spawn_errno));
        goto out;
    }
    /* Parse stdout even on failure: a token in it must be redacted from the stderr shown. */
    if (out.n > 0) {
        rc = parse_execcred(out.p, out.n, &e, &where);
        if (rc == J_NOMEM) {
            kinf_errmsg(errbuf, errlen, "out of memory");
            err = KINF_ENOMEM;
            goto out;
        }
    } else {
        rc = J_BAD;
    }
    if (rr.reaped && WIFEXITED(rr.status) && WEXITSTATUS(rr.status) == 127 && out.n == 0 &&
        errb.n == 0) {
        /* How a spawn that could not exec shows where the failure is not reported to us
         * (older C libraries, emulators). */
        kinf_errmsg(errbuf, errlen, "exec plugin: executable \"%s\" not found or not executable "
                    "(exit code 127)%s%s", cmd_name(cr), cr->install_hint ? "; " : "",
                    cr->install_hint ? cr->install_hint : "");
        goto out;
    }
    if (rr.timed_out || rr.too_big || (rr.reaped && (!WIFEXITED(rr.status) ||
                                                     WEXITSTATUS(rr.status) != 0))) {
        char how[64];
        char *msg;
        size_t mlen;
        if (rr.timed_out)
            kinf_errmsg(how, sizeof(how), "did not finish within %g s", cr->timeout);
        else if (rr.too_big)
            kinf_errmsg(how, sizeof(how), "wrote more than %d bytes", EXEC_STDOUT_MAX);
        else if (WIFSIGNALED(rr.status))
            kinf_errmsg(how, sizeof(how), "was killed by signal %d", WTERMSIG(rr.status));
        else
            kinf_errmsg(how, sizeof(how), "failed with exit code %d", WEXITSTATUS(rr.status));
        if (errb.p != NULL)
            tidy_stderr(errb.p, 300);
        mlen = 160 + strlen(cmd_name(cr)) + (errb.p ? strlen(errb.p) : 0);
        if ((msg = malloc(mlen)) == NULL) {
            kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" %s", cmd_name(cr), how);
            goto out;
        }
        kinf_errmsg(msg, mlen, "exec plugin \"%s\" %s%s%s", cmd_name(cr), how,
                    errb.p && errb.p[0] ? ": " : "", errb.p ? errb.p : "");
        redact_one(msg, mlen, e.token);
        redact_one(msg, mlen, e.key);
        kinf_creds_redact(cr, msg, mlen);
        kinf_errmsg(errbuf, errlen, "%s", msg);
        kinf_wipe(msg, mlen);
        free(msg);
        goto out;
    }
    if (rc != J_OK) {
        if (out.n == 0)
            kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" wrote nothing on stdout",
                        cmd_name(cr));
        else
            kinf_errmsg(errbuf, errlen,
                        "exec plugin \"%s\" returned invalid output: malformed JSON at byte %zu",
                        cmd_name(cr), where);
        err = KINF_EPARSE;
        goto out;
    }
    err = KINF_EPARSE;
    if (e.kind == NULL || strcmp(e.kind, "ExecCredential") != 0) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned kind \"%.64s\", expected "
                    "ExecCredential", cmd_name(cr), e.kind ? e.kind : "");
        goto out;
    }
    if (e.api_version == NULL || strcmp(e.api_version, cr->api_version) != 0) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" is configured to use API version %s, "
                    "plugin returned version \"%.64s\"", cmd_name(cr), cr->api_version,
                    e.api_version ? e.api_version : "");
        goto out;
    }
    if (!e.has_status) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" didn't return a status field",
                    cmd_name(cr));
        goto out;
    }
    if ((e.cert && e.cert[0]) != (e.key && e.key[0])) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned only a certificate or a key, "
                    "not both", cmd_name(cr));
        goto out;
    }
    if (!(e.token && e.token[0]) && !(e.cert && e.cert[0])) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" didn't return a token or a client "
                    "certificate and key", cmd_name(cr));
        goto out;
    }
    if (e.token && e.token[0] && !token_ok(e.token)) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned a token with spaces or control "
                    "characters", cmd_name(cr));
        goto out;
    }
    if (e.expiry && e.expiry[0] && !parse_rfc3339(e.expiry, &expires)) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned a bad expirationTimestamp "
                    "\"%.64s\"", cmd_name(cr), e.expiry);
        goto out;
    }
    /* Take the new credential over. */
    kinf_wipe_free(cr->prev_token);
    cr->prev_token = cr->token;
    cr->token = (e.token && e.token[0]) ? e.token : NULL;
    if (cr->token == e.token)
        e.token = NULL;
    free(cr->cert_pem);
    kinf_wipe_free(cr->key_pem);
    cr->cert_pem = cr->key_pem = NULL;
    if (e.cert && e.cert[0]) {
        cr->cert_pem = e.cert;
        cr->key_pem = e.key;
        e.cert = e.key = NULL;
    }
    cr->expires = expires;
    cr->have_exec = 1;
    cr->stale = 0;
    cr->generation++;
    err = KINF_OK;
out:
    execcred_clear(&e);
    obuf_free(&out);
    obuf_free(&errb);
    return err;
}

/* ---- public ---- */

kinf_creds *kinf_creds_new(const kinf_creds_config *cfg, kinf_err *err, char *errbuf,
                           size_t errlen)
{
    kinf_creds *cr;
    int failed = 0, sources;
    const kinf_exec_config *x = cfg ? cfg->exec : NULL;

    sources = (cfg && cfg->token && cfg->token[0]) + (cfg && cfg->token_file) +
              (cfg && cfg->username) + (x != NULL);
    if (sources > 1) {
        kinf_errmsg(errbuf, errlen, "only one of token, token_file, username/password and exec "
                    "may be given");
        *err = KINF_EINVAL;
        return NULL;
    }
    if (cfg && cfg->password && !cfg->username) {
        kinf_errmsg(errbuf, errlen, "password needs a username");
        *err = KINF_EINVAL;
        return NULL;
    }
    if (cfg && cfg->token && cfg->token[0] && !token_ok(cfg->token)) {
        kinf_errmsg(errbuf, errlen, "token contains spaces or control characters");
        *err = KINF_EINVAL;
        return NULL;
    }
    if (x != NULL) {
        if (x->command == NULL || x->command[0] == '\0') {
            kinf_errmsg(errbuf, errlen, "exec: command is required");
            *err = KINF_EINVAL;
            return NULL;
        }
        if (x->api_version == NULL || (strcmp(x->api_version, KINF_EXEC_API_V1) != 0 &&
                                       strcmp(x->api_version, KINF_EXEC_API_V1BETA1) != 0)) {
            kinf_errmsg(errbuf, errlen, "exec: apiVersion must be %s or %s", KINF_EXEC_API_V1,
                        KINF_EXEC_API_V1BETA1);
            *err = KINF_EINVAL;
            return NULL;
        }
        for (const char *const *e = x->env; e && *e; e++) {
            if (strchr(*e, '=') == NULL || **e == '=') {
                kinf_errmsg(errbuf, errlen, "exec: env entries must be NAME=VALUE");
                *err = KINF_EINVAL;
                return NULL;
            }
        }
    }
    cr = calloc(1, sizeof(*cr));
    if (cr == NULL)
        goto nomem;
    cr->generation = 1;
    if (cfg && cfg->token && cfg->token[0]) {
        cr->kind = CR_TOKEN;
        cr->token = dup_or_null(cfg->token, &failed);
    } else if (cfg && cfg->token_file) {
        cr->kind = CR_TOKEN_FILE;
        cr->token_file = dup_or_null(cfg->token_file, &failed);
    } else if (cfg && cfg->username) {
        cr->kind = CR_BASIC;
        cr->username = dup_or_null(cfg->username, &failed);
        cr->password = dup_or_null(cfg->password ? cfg->password : "", &failed);
    } else if (x != NULL) {
        cr->kind = CR_EXEC;
        cr->argv = dup_vec(x->command, x->args, &failed);
        cr->env = dup_vec(NULL, x->env, &failed);
        cr->api_version = dup_or_null(x->api_version, &failed);
        cr->install_hint = dup_or_null(x->install_hint, &failed);
        cr->timeout = x->timeout > 0 ? x->timeout : EXEC_DEFAULT_TIMEOUT;
    }
    if (failed)
        goto nomem;
    if (cr->kind == CR_TOKEN_FILE) {
        *err = refresh_token_file(cr, errbuf, errlen);
        if (*err != KINF_OK) {
            kinf_creds_free(cr);
            return NULL;
        }
        cr->generation = 1;
    }
    *err = KINF_OK;
    return cr;
nomem:
    kinf_creds_free(cr);
    kinf_errmsg(errbuf, errlen, "out of memory");
    *err = KINF_ENOMEM;
    return NULL;
}

void kinf_creds_free(kinf_creds *cr)
{
    if (cr == NULL)
        return;
    kinf_wipe_free(cr->token);
    kinf_wipe_free(cr->prev_token);
    free(cr->username);
    kinf_wipe_free(cr->password);
    free(cr->token_file);
    free_vec(cr->argv, 1);
    free_vec(cr->env, 1);
    free(cr->api_version);
    free(cr->install_hint);
    free(cr->cert_pem);
    kinf_wipe_free(cr->key_pem);
    for (size_t i = 0; i < cr->nextra; i++)
        kinf_wipe_free(cr->extra[i]);
    free(cr->extra);
    free(cr);
}

kinf_err kinf_creds_add_secret(kinf_creds *cr, const char *secret)
{
    char **grown, *copy;
    if (cr == NULL || secret == NULL || secret[0] == '\0')
        return KINF_OK;
    if ((copy = strdup(secret)) == NULL)
        return KINF_ENOMEM;
    if ((grown = realloc(cr->extra, (cr->nextra + 1) * sizeof(*grown))) == NULL) {
        kinf_wipe_free(copy);
        return KINF_ENOMEM;
    }
    cr->extra = grown;
    cr->extra[cr->nextra++] = copy;
    return KINF_OK;
}

kinf_err kinf_creds_get(kinf_creds *cr, kinf_cred *out, char *errbuf, size_t errlen)
{
    kinf_err err = KINF_OK;

    memset(out, 0, sizeof(*out));
    if (cr == NULL)
        return KINF_OK;
    switch (cr->kind) {
    case CR_NONE:
        break;
    case CR_TOKEN:
        out->token = cr->token;
        break;
    case CR_BASIC:
        out->username = cr->username;
        out->password = cr->password;
        break;
    case CR_TOKEN_FILE:
        err = refresh_token_file(cr, errbuf, errlen);
        out->token = cr->token;
        break;
    case CR_EXEC:
        if (!cr->have_exec || cr->stale || (cr->expires > 0 && wall_now() >= cr->expires))
            err = run_exec(cr, errbuf, errlen);
        if (err == KINF_OK) {
            out->token = cr->token;
            out->cert_pem = cr->cert_pem;
            out->key_pem = cr->key_pem;
        }
        break;
    }
    if (err != KINF_OK) {
        memset(out, 0, sizeof(*out));
        return err;
    }
    out->generation = cr->generation;
    return KINF_OK;
}

void kinf_creds_invalidate(kinf_creds *cr, unsigned long gen)
{
    if (cr != NULL && gen == cr->generation &&
        (cr->kind == CR_TOKEN_FILE || cr->kind == CR_EXEC))
        cr->stale = 1;
}

int kinf_creds_refreshable(const kinf_creds *cr)
{
    return cr != NULL && (cr->kind == CR_TOKEN_FILE || cr->kind == CR_EXEC);
}

unsigned long kinf_creds_exec_runs(const kinf_creds *cr)
{
    return cr ? cr->runs : 0;
}
