/*
 * exec_credential.c - one run of an exec credential plugin: its process (spawn, collect stdout
 * and stderr, deadline, reap), then the ExecCredential it printed checked (contract in
 * exec_credential.h; the JSON is read by exec_credential_json.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2: close-on-exec pipes with no window for a concurrent spawn */
#endif
#include "exec_credential.h"
#include "exec_credential_json.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define EXEC_STDOUT_MAX (1024 * 1024)
#define EXEC_STDERR_KEEP 4096

/* ---- the plugin's process ---- */

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

/* The environment for the plugin: environ with p->env applied (a NAME=... in p->env replaces
 * the inherited NAME). The strings are borrowed; only the array is allocated. */
static char **plugin_env(const kinf_exec_plugin *p)
{
    size_t n = 0, extra = 0, k = 0;
    char **envp;
    for (char **e = environ; e && *e; e++)
        n++;
    for (char *const *e = p->env; e && *e; e++)
        extra++;
    envp = calloc(n + extra + 1, sizeof(*envp));
    if (envp == NULL)
        return NULL;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t nl = eq ? (size_t)(eq - *e) : strlen(*e);
        int replaced = 0;
        for (char *const *x = p->env; x && *x && !replaced; x++)
            replaced = strncmp(*x, *e, nl) == 0 && (*x)[nl] == '=';
        if (!replaced)
            envp[k++] = *e;
    }
    for (char *const *x = p->env; x && *x; x++)
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
    int cancelled;    /* p->cancel_fd became readable */
    int too_big;
    int status;       /* waitpid status; valid when reaped */
    int reaped;       /* 0: someone else reaped the child (ECHILD) */
} run_result;

/* Whether cancel_fd (-1: none) is readable within ms milliseconds. */
static int cancel_seen(int cancel_fd, int ms)
{
    struct pollfd c = {cancel_fd, POLLIN, 0};
    if (cancel_fd < 0) {
        struct timespec ts = {0, (long)ms * 1000 * 1000};
        nanosleep(&ts, NULL);
        return 0;
    }
    return poll(&c, 1, ms) > 0 && (c.revents & POLLIN);
}

/* Waits for the plugin until deadline or a cancel; then SIGKILL to its whole process group
 * (what it started in the background too) and a blocking wait. The group is killed while its
 * leader is not reaped yet, so its id cannot have been reused. */
static void reap(pid_t pid, double deadline, int cancel_fd, run_result *rr)
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
        if (kinf_now() >= deadline || rr->cancelled || cancel_seen(cancel_fd, 5)) {
            if (!rr->cancelled && kinf_now() >= deadline)
                rr->timed_out = 1;
            else
                rr->cancelled = 1;
            kill(-pid, SIGKILL);
            while ((w = waitpid(pid, &rr->status, 0)) < 0 && errno == EINTR)
                ;
            rr->reaped = w == pid;
            return;
        }
    }
}

/* Runs the plugin, capturing stdout (up to EXEC_STDOUT_MAX) and stderr (first
 * EXEC_STDERR_KEEP bytes). KINF_ENOMEM or KINF_OK (then rr says how it went). */
static kinf_err spawn_and_collect(const kinf_exec_plugin *p, obuf *out, obuf *errb, run_result *rr,
                                  int *spawned)
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
    struct pollfd pfd[3];
    char chunk[4096];

    memset(rr, 0, sizeof(*rr));
    if (pipe2(op, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
        rr->spawn_errno = errno;
        err = KINF_OK;
        goto out;
    }
    if ((envp = plugin_env(p)) == NULL)
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
        posix_spawnattr_setpgroup(&attr, 0) != 0 || /* its own group: killed as a whole */
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                            POSIX_SPAWN_SETPGROUP) != 0)
        goto out;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* The plugin gets stdin, stdout and stderr only: no socket or file of the host process
     * (LuaSocket, nginx and libcurl descriptors are not all close-on-exec). */
    if (posix_spawn_file_actions_addclosefrom_np(&fa, 3) != 0)
        goto out;
#endif
    *spawned = 1;
    rr->spawn_errno = posix_spawnp(&pid, p->argv[0], &fa, &attr, p->argv, envp);
    err = KINF_OK;
    if (rr->spawn_errno != 0)
        goto out;
    close(op[1]);
    close(ep[1]);
    op[1] = ep[1] = -1;

    deadline = kinf_now() + p->timeout;
    pfd[0].fd = op[0];
    pfd[1].fd = ep[0];
    pfd[2].fd = p->cancel_fd;
    pfd[2].events = POLLIN;
    while (pfd[0].fd >= 0 || pfd[1].fd >= 0) {
        double left = deadline - kinf_now();
        int rc;
        if (left <= 0) {
            rr->timed_out = 1;
            break;
        }
        pfd[0].events = pfd[1].events = POLLIN;
        rc = poll(pfd, 3, (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc > 0 && pfd[2].fd >= 0 && (pfd[2].revents & POLLIN)) {
            rr->cancelled = 1;
            break;
        }
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
    if (rr->timed_out || rr->too_big || rr->cancelled || err != KINF_OK)
        kill(-pid, SIGKILL); /* the group: a child holding our pipes goes too */
    reap(pid, rr->timed_out ? kinf_now() : deadline, p->cancel_fd, rr);
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
static const char *cmd_name(const kinf_exec_plugin *p)
{
    return p->argv[0];
}

kinf_err kinf_exec_credential_run(const kinf_exec_plugin *p, kinf_exec_redact_fn redact, void *ud,
                                  kinf_exec_credential *cred, char *errbuf, size_t errlen)
{
    obuf out = {0}, errb = {0};
    run_result rr;
    kinf_execcred e;
    size_t where = 0;
    kinf_err err;
    double expires = 0;
    int rc;

    memset(&e, 0, sizeof(e));
    memset(cred, 0, sizeof(*cred));
    err = spawn_and_collect(p, &out, &errb, &rr, &cred->spawned);
    if (err != KINF_OK) {
        kinf_errmsg(errbuf, errlen, "out of memory");
        goto out;
    }
    err = KINF_EIO;
    if (rr.spawn_errno == ENOENT) {
        kinf_errmsg(errbuf, errlen, "exec plugin: executable \"%s\" not found%s%s", cmd_name(p),
                    p->install_hint ? "; " : "", p->install_hint ? p->install_hint : "");
        goto out;
    }
    if (rr.spawn_errno != 0) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\": cannot run it: %s", cmd_name(p),
                    strerror(rr.spawn_errno));
        goto out;
    }
    /* Parse stdout even on failure: a token in it must be redacted from the stderr shown. */
    if (out.n > 0) {
        rc = kinf_execcred_parse(out.p, out.n, &e, &where);
        if (rc == KINF_J_NOMEM) {
            kinf_errmsg(errbuf, errlen, "out of memory");
            err = KINF_ENOMEM;
            goto out;
        }
    } else {
        rc = KINF_J_BAD;
    }
    if (rr.reaped && WIFEXITED(rr.status) && WEXITSTATUS(rr.status) == 127 && out.n == 0 &&
        errb.n == 0) {
        /* How a spawn that could not exec shows where the failure is not reported to us
         * (older C libraries, emulators). */
        kinf_errmsg(errbuf, errlen, "exec plugin: executable \"%s\" not found or not executable "
                    "(exit code 127)%s%s", cmd_name(p), p->install_hint ? "; " : "",
                    p->install_hint ? p->install_hint : "");
        goto out;
    }
    if (rr.cancelled) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" was stopped before it finished: its "
                    "client is stopping", cmd_name(p));
        goto out;
    }
    if (rr.timed_out || rr.too_big || (rr.reaped && (!WIFEXITED(rr.status) ||
                                                     WEXITSTATUS(rr.status) != 0))) {
        char how[64];
        char *msg;
        size_t mlen;
        if (rr.timed_out)
            kinf_errmsg(how, sizeof(how), "did not finish within %g s", p->timeout);
        else if (rr.too_big)
            kinf_errmsg(how, sizeof(how), "wrote more than %d bytes", EXEC_STDOUT_MAX);
        else if (WIFSIGNALED(rr.status))
            kinf_errmsg(how, sizeof(how), "was killed by signal %d", WTERMSIG(rr.status));
        else
            kinf_errmsg(how, sizeof(how), "failed with exit code %d", WEXITSTATUS(rr.status));
        if (errb.p != NULL)
            tidy_stderr(errb.p, 300);
        mlen = 160 + strlen(cmd_name(p)) + (errb.p ? strlen(errb.p) : 0);
        if ((msg = malloc(mlen)) == NULL) {
            kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" %s", cmd_name(p), how);
            goto out;
        }
        kinf_errmsg(msg, mlen, "exec plugin \"%s\" %s%s%s", cmd_name(p), how,
                    errb.p && errb.p[0] ? ": " : "", errb.p ? errb.p : "");
        redact(ud, msg, mlen, e.token, e.key);
        kinf_errmsg(errbuf, errlen, "%s", msg);
        kinf_wipe(msg, mlen);
        free(msg);
        goto out;
    }
    if (rc != KINF_J_OK) {
        if (out.n == 0)
            kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" wrote nothing on stdout",
                        cmd_name(p));
        else
            kinf_errmsg(errbuf, errlen,
                        "exec plugin \"%s\" returned invalid output: malformed JSON at byte %zu",
                        cmd_name(p), where);
        err = KINF_EPARSE;
        goto out;
    }
    err = KINF_EPARSE;
    if (e.kind == NULL || strcmp(e.kind, "ExecCredential") != 0) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned kind \"%.64s\", expected "
                    "ExecCredential", cmd_name(p), e.kind ? e.kind : "");
        goto out;
    }
    if (e.api_version == NULL || strcmp(e.api_version, p->api_version) != 0) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" is configured to use API version %s, "
                    "plugin returned version \"%.64s\"", cmd_name(p), p->api_version,
                    e.api_version ? e.api_version : "");
        goto out;
    }
    if (!e.has_status) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" didn't return a status field",
                    cmd_name(p));
        goto out;
    }
    if ((e.cert && e.cert[0]) != (e.key && e.key[0])) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned only a certificate or a key, "
                    "not both", cmd_name(p));
        goto out;
    }
    if (!(e.token && e.token[0]) && !(e.cert && e.cert[0])) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" didn't return a token or a client "
                    "certificate and key", cmd_name(p));
        goto out;
    }
    if (e.token && e.token[0] && !kinf_token_ok(e.token)) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned a token with spaces or control "
                    "characters", cmd_name(p));
        goto out;
    }
    if (e.expiry && e.expiry[0] && !kinf_parse_rfc3339(e.expiry, &expires)) {
        kinf_errmsg(errbuf, errlen, "exec plugin \"%s\" returned a bad expirationTimestamp "
                    "\"%.64s\"", cmd_name(p), e.expiry);
        goto out;
    }
    /* Hand the credential over. */
    if (e.token && e.token[0]) {
        cred->token = e.token;
        e.token = NULL;
    }
    if (e.cert && e.cert[0]) {
        cred->cert_pem = e.cert;
        cred->key_pem = e.key;
        e.cert = e.key = NULL;
    }
    cred->expires = expires;
    err = KINF_OK;
out:
    kinf_execcred_clear(&e);
    obuf_free(&out);
    obuf_free(&errb);
    return err;
}

void kinf_exec_credential_clear(kinf_exec_credential *c)
{
    kinf_wipe_free(c->token);
    free(c->cert_pem);
    kinf_wipe_free(c->key_pem);
    memset(c, 0, sizeof(*c));
}
