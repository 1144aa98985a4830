/*
 * exec_credential.h - one run of an exec credential plugin (client-go's exec authenticator):
 * spawn the command, collect its stdout and stderr within a deadline, parse the ExecCredential
 * JSON it prints and check it. Internal to credentials.c, which caches the result, decides when
 * to run again and owns redaction.
 *
 * Guarantees: the child gets no stdin, its stdout is capped at 1 MiB (more is an error) and
 * the stderr kept for messages at 4 KiB. It runs in a process group of its own: a plugin that
 * outlives its timeout, or whose run is cancelled (cancel_fd readable), is killed with that
 * whole group (SIGKILL: what it started in the background too) and reaped; a cancel ends the
 * run within a few milliseconds. Every buffer that held plugin output is wiped before it is freed. A message that
 * quotes the plugin's stderr goes through the caller's redact function (with the secrets of
 * this run's own output) before it is cut to errbuf's size, so no cut can split a secret.
 * Threads: any thread; a run blocks its caller until the plugin ends or times out. The
 * ExecCredential reader is a small strict JSON parser (RFC 8259 grammar, depth 64) that keeps
 * only the fields it needs; it is not the streaming scanner of jsonscan.c.
 */
#ifndef KINF_EXEC_CREDENTIAL_H
#define KINF_EXEC_CREDENTIAL_H

#include <stddef.h>

#include "kinf.h"

/* The plugin as configured (all borrowed for the duration of a run). */
typedef struct kinf_exec_plugin {
    char *const *argv;        /* command + args, NULL-terminated */
    char *const *env;         /* NAME=VALUE replacing inherited variables; NULL-terminated or NULL */
    const char *api_version;  /* the ExecCredential apiVersion expected back */
    const char *install_hint; /* appended to "not found" messages, or NULL */
    double timeout;           /* seconds */
    int cancel_fd;            /* readable: end the run now (-1: none) */
} kinf_exec_plugin;

/* A run's credential: a token, or a client certificate and key, or both. Owned by the caller
 * once returned (kinf_exec_credential_clear wipes and frees what it still holds). */
typedef struct kinf_exec_credential {
    char *token;     /* NULL or non-empty, no spaces or control characters */
    char *cert_pem;  /* both NULL or both non-empty */
    char *key_pem;
    double expires;  /* wall-clock seconds; 0: no expiry */
    int spawned;     /* the command was started (counts a run, even a failed one) */
} kinf_exec_credential;

/* Redacts secrets in msg (len bytes of room, NUL-terminated) in place: the caller's own, and
 * this run's token and key (either may be NULL). */
typedef void (*kinf_exec_redact_fn)(void *ud, char *msg, size_t len, const char *token,
                                    const char *key);

/* Runs the plugin once. KINF_OK fills *out; otherwise errbuf says why: KINF_EIO (not found,
 * not runnable, failed, timed out, too much output), KINF_EPARSE (not an ExecCredential of the
 * configured version, or incomplete), KINF_ENOMEM. out->spawned is set either way. */
kinf_err kinf_exec_credential_run(const kinf_exec_plugin *p, kinf_exec_redact_fn redact, void *ud,
                                  kinf_exec_credential *out, char *errbuf, size_t errlen);

/* Wipes and frees what c holds; accepts a zeroed struct. */
void kinf_exec_credential_clear(kinf_exec_credential *c);

/* A token goes into an HTTP header: no control characters (header injection), no spaces. */
static inline int kinf_token_ok(const char *t)
{
    if (t == NULL || t[0] == '\0')
        return 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++)
        if (*p < 0x21 || *p == 0x7f)
            return 0;
    return 1;
}

#endif
