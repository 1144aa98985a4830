/*
 * credentials.c - bearer token, token file, basic auth and exec credential plugins (contract in
 * credentials.h).
 *
 * Why in C: credentials that must be refreshed (a rotated token file, an expired plugin token,
 * a 401) are needed on the client's I/O thread, which never touches a Lua state.
 *
 * This file keeps the credential sources, their cache and refresh rules, and redaction; one
 * run of an exec plugin (its process and its ExecCredential output) is exec_credential.c.
 * Limits: a token file at 64 KiB (a larger one is refused, never cut); the plugin's limits are in
 * exec_credential.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2: close-on-exec from the start, no window for a concurrent spawn */
#endif
#include "credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "exec_credential.h"

#define TOKEN_FILE_MAX (64 * 1024)
#define EXEC_DEFAULT_TIMEOUT 30.0
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
    int cancel[2];          /* a pipe, non-blocking; a byte in it ends plugin runs
                               (kinf_creds_interrupt); -1 without exec */

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

/* A new current token; the old one is kept (for redaction) and the generation moves on. */
static void set_token(kinf_creds *cr, char *tok)
{
    kinf_wipe_free(cr->prev_token);
    cr->prev_token = cr->token;
    cr->token = tok;
    cr->generation++;
}

/* ---- token file ---- */

/* Reads the file into a fresh trimmed string. KINF_EIO with a message on failure; *bad is set
 * when the path holds no token file at all (not a regular file, larger than TOKEN_FILE_MAX, a
 * NUL byte or a space in the token) rather than one that cannot be read now (missing,
 * unreadable, empty: a rotation may be under way). The open never blocks: a FIFO, a device or a socket put at the path is
 * refused before any read, so the I/O thread cannot hang in open() or read() for a writer. */
static kinf_err read_token_file(const char *path, char **out, struct stat *st, int *bad,
                                char *errbuf, size_t errlen)
{
    char *buf = NULL;
    size_t n = 0;
    ssize_t got;
    kinf_err err = KINF_EIO;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

    *out = NULL;
    *bad = 1;
    if (fd < 0) {
        kinf_errmsg(errbuf, errlen, "token file %s: %s", path, strerror(errno));
        *bad = 0;
        return KINF_EIO;
    }
    if (fstat(fd, st) != 0) {
        kinf_errmsg(errbuf, errlen, "token file %s: %s", path, strerror(errno));
        *bad = 0;
        goto out;
    }
    if (!S_ISREG(st->st_mode)) {
        kinf_errmsg(errbuf, errlen, "token file %s: not a regular file", path);
        goto out;
    }
    if (st->st_size > TOKEN_FILE_MAX) {
        kinf_errmsg(errbuf, errlen, "token file %s: larger than %d KiB", path,
                    TOKEN_FILE_MAX / 1024);
        goto out;
    }
    if ((buf = malloc(TOKEN_FILE_MAX + 2)) == NULL) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        err = KINF_ENOMEM;
        goto out;
    }
    /* One byte more than the limit: a file that grew since fstat is refused, never cut. */
    while (n <= TOKEN_FILE_MAX && (got = read(fd, buf + n, TOKEN_FILE_MAX + 1 - n)) != 0) {
        if (got < 0) {
            if (errno == EINTR)
                continue;
            kinf_errmsg(errbuf, errlen, "token file %s: %s", path, strerror(errno));
            *bad = 0;
            goto out;
        }
        n += (size_t)got;
    }
    if (n > TOKEN_FILE_MAX) {
        kinf_errmsg(errbuf, errlen, "token file %s: larger than %d KiB", path,
                    TOKEN_FILE_MAX / 1024);
        goto out;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        kinf_errmsg(errbuf, errlen, "token file %s: contains a NUL byte", path);
        goto out;
    }
    trim(buf);
    if (buf[0] == '\0') {
        kinf_errmsg(errbuf, errlen, "token file %s is empty", path);
        *bad = 0;
        goto out;
    }
    if (!kinf_token_ok(buf)) {
        kinf_errmsg(errbuf, errlen, "token file %s: the token contains spaces or control characters",
                    path);
        goto out;
    }
    *out = buf;
    buf = NULL;
    *bad = 0;
    err = KINF_OK;
out:
    if (buf != NULL) {
        kinf_wipe(buf, TOKEN_FILE_MAX + 2);
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
    int bad;

    if (!cr->stale && stat(cr->token_file, &st) == 0 && same_file(cr, &st))
        return KINF_OK;
    err = read_token_file(cr->token_file, &tok, &st, &bad, errbuf, errlen);
    /* A file that cannot be read now (a rotation under way) keeps the last good token in use,
     * as client-go does. One that is no token file any more fails the request, so the error
     * shows in the caller's status instead of an old token going out unnoticed. */
    if (err != KINF_OK)
        return cr->token != NULL && err == KINF_EIO && !bad ? KINF_OK : err;
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

/* kinf_exec_redact_fn for the plugin's messages: the run's own secrets, then everything the
 * credentials know. */
static void redact_exec_message(void *ud, char *msg, size_t len, const char *token,
                                const char *key)
{
    redact_one(msg, len, token);
    redact_one(msg, len, key);
    kinf_creds_redact(ud, msg, len);
}

/* Runs the plugin and takes its credential over. */
static kinf_err run_exec(kinf_creds *cr, char *errbuf, size_t errlen)
{
    kinf_exec_plugin p = {cr->argv, cr->env, cr->api_version, cr->install_hint, cr->timeout,
                          cr->cancel[0]};
    kinf_exec_credential c;
    kinf_err err = kinf_exec_credential_run(&p, redact_exec_message, cr, &c, errbuf, errlen);

    cr->runs += (unsigned long)c.spawned;
    if (err != KINF_OK)
        return err;
    kinf_wipe_free(cr->prev_token);
    cr->prev_token = cr->token;
    cr->token = c.token;
    free(cr->cert_pem);
    kinf_wipe_free(cr->key_pem);
    cr->cert_pem = c.cert_pem;
    cr->key_pem = c.key_pem;
    cr->expires = c.expires;
    cr->have_exec = 1;
    cr->stale = 0;
    cr->generation++;
    return KINF_OK;
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
    if (cfg && cfg->token && cfg->token[0] && !kinf_token_ok(cfg->token)) {
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
    cr->cancel[0] = cr->cancel[1] = -1;
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
        if (pipe2(cr->cancel, O_CLOEXEC | O_NONBLOCK) != 0) {
            cr->cancel[0] = cr->cancel[1] = -1;
            failed = 1;
        }
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
    for (int i = 0; i < 2; i++)
        if (cr->cancel[i] >= 0)
            close(cr->cancel[i]);
    free(cr);
}

void kinf_creds_interrupt(kinf_creds *cr, int on)
{
    char b[64];
    if (cr == NULL || cr->cancel[1] < 0)
        return;
    if (on) {
        /* Full pipe (EAGAIN): it is readable anyway. */
        while (write(cr->cancel[1], "x", 1) < 0 && errno == EINTR)
            ;
    } else {
        for (;;) {
            ssize_t n = read(cr->cancel[0], b, sizeof(b));
            if (n > 0 || (n < 0 && errno == EINTR))
                continue;
            break;
        }
    }
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
