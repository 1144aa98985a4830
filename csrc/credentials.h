/*
 * credentials.h - what a client authenticates with, kept current on the client's I/O thread.
 *
 * Contract:
 * - A credential source is one of: none, a static bearer token, a bearer token file,
 *   username/password (HTTP basic), or an exec credential plugin speaking
 *   client.authentication.k8s.io/v1 or v1beta1 (an ExecCredential on its stdout carrying a
 *   token, or a client certificate and key, optionally an expirationTimestamp).
 * - kinf_creds_get returns the credential to send now:
 *     token file: re-read when its identity (device, inode, size, mtime) changes, and after
 *       kinf_creds_invalidate; if a re-read fails because the file is missing, unreadable or
 *       empty (a rotation under way), the last good token stays in use; a path that holds no
 *       token file (not a regular file: a FIFO is never opened for a blocking read; larger
 *       than 64 KiB: never cut; a NUL or a space in the token) fails the get with the cause;
 *     exec: the plugin runs on first use, when the cached credential's expirationTimestamp has
 *       passed (wall clock; no expiry: cached until invalidated), and after
 *       kinf_creds_invalidate. The plugin is started with posix_spawnp: argv as configured, no
 *       shell, stdin /dev/null, the process environment plus the configured variables, its
 *       stdout and stderr captured (bounded), killed after the timeout.
 * - Each distinct credential has a generation number. kinf_creds_invalidate(gen) (a response
 *   was 401) forces a refresh only when gen is still the current generation, so several
 *   transfers rejected with the same credential cause one refresh, not one each.
 * - Secrets (tokens, password, private key, plugin output) never appear in a message this
 *   module writes. kinf_creds_redact removes the known secrets from any other message.
 *
 * Threads: new and free from any thread; kinf_creds_interrupt from any thread at any time;
 * everything else from one thread at a time (the client's I/O thread once the client is
 * running). No locks, no global state. Running a plugin blocks the calling thread for up to
 * its timeout, or until kinf_creds_interrupt.
 *
 * Ownership: kinf_creds_new copies everything it is given. The pointers in a kinf_cred stay
 * valid until the next get / invalidate / free on the same object; copy what you keep
 * (libcurl's setopt copies strings and CURL_BLOB_COPY blobs).
 */
#ifndef KINF_CREDENTIALS_H
#define KINF_CREDENTIALS_H

#include <stddef.h>

#include "kinf.h"

#define KINF_EXEC_API_V1 "client.authentication.k8s.io/v1"
#define KINF_EXEC_API_V1BETA1 "client.authentication.k8s.io/v1beta1"

typedef struct kinf_creds kinf_creds;

typedef struct kinf_exec_config {
    const char *command;      /* program; looked up in PATH unless it contains a '/' */
    const char *const *args;  /* argv[1..], NULL-terminated; NULL for none */
    const char *const *env;   /* "NAME=VALUE" entries added to (or replacing in) the process
                                 environment, NULL-terminated; NULL for none */
    const char *api_version;  /* KINF_EXEC_API_V1 or KINF_EXEC_API_V1BETA1 */
    const char *install_hint; /* added to the "not found" error, or NULL */
    double timeout;           /* seconds; 0: 30 */
} kinf_exec_config;

/* At most one source: token, token_file, username (+ password) or exec. */
typedef struct kinf_creds_config {
    const char *token;             /* static bearer token */
    const char *token_file;        /* bearer token file (read now: must exist and be non-empty) */
    const char *username;          /* HTTP basic */
    const char *password;
    const kinf_exec_config *exec;  /* exec plugin, or NULL */
} kinf_creds_config;

typedef struct kinf_cred {
    const char *token;             /* bearer token or NULL */
    const char *username;          /* basic auth or NULL */
    const char *password;
    const char *cert_pem;          /* client certificate from the plugin (PEM) or NULL */
    const char *key_pem;           /* its private key (PEM) or NULL */
    unsigned long generation;      /* give it back to kinf_creds_invalidate */
} kinf_cred;

/* From any thread, no lock needed (it only touches a pipe made at creation): on = 1 makes a
 * plugin run in progress, and every run started until on = 0, end at once with an error (its
 * process group killed and reaped); on = 0 lets runs go ahead again. A client sets it while a
 * reflector detaches or the client stops, so neither waits for a hanging plugin. Nothing for
 * sources other than exec. */
void kinf_creds_interrupt(kinf_creds *cr, int on);

/* Copies cfg; validates it (KINF_EINVAL with a message) and reads a token file (KINF_EIO). */
kinf_creds *kinf_creds_new(const kinf_creds_config *cfg, kinf_err *err, char *errbuf,
                           size_t errlen);
void kinf_creds_free(kinf_creds *cr); /* accepts NULL; wipes the secrets it held */

/* The credential to use now, refreshing it as the contract says. On failure (plugin not
 * found, failing, timing out, bad output; unreadable token file with no previous token)
 * returns KINF_EIO / KINF_EPARSE / KINF_ENOMEM with a message free of secrets, and leaves
 * *out zeroed. */
kinf_err kinf_creds_get(kinf_creds *cr, kinf_cred *out, char *errbuf, size_t errlen);

/* A request sent with generation `gen` was rejected (401): refresh before the next get. */
void kinf_creds_invalidate(kinf_creds *cr, unsigned long gen);

/* Whether the source is refreshable (token file or exec). */
int kinf_creds_refreshable(const kinf_creds *cr);

/* Replaces every known secret (current and previous token, password, private key) and
 * anything after "Bearer " in msg with "[redacted]", in place, keeping it NUL-terminated
 * within len bytes. */
void kinf_creds_redact(const kinf_creds *cr, char *msg, size_t len);

/* Registers one more string for kinf_creds_redact (e.g. a proxy password); copied. */
kinf_err kinf_creds_add_secret(kinf_creds *cr, const char *secret);

/* Test hook: how many times the plugin was started. */
unsigned long kinf_creds_exec_runs(const kinf_creds *cr);

#endif
