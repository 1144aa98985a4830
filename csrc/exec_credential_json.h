/*
 * exec_credential_json.h - the ExecCredential JSON an exec credential plugin prints, read into
 * its fields (internal to exec_credential.c, apart so each file stays one concern).
 *
 * Only what client-go reads is kept: apiVersion, kind, and status.{token, clientCertificateData,
 * clientKeyData, expirationTimestamp}; every other member is skipped (at most 64 levels deep).
 * Secrets (token, key) are wiped when freed. Any thread; no shared state.
 */
#ifndef KINF_EXEC_CREDENTIAL_JSON_H
#define KINF_EXEC_CREDENTIAL_JSON_H

#include <stddef.h>

typedef struct kinf_execcred {
    char *api_version, *kind;
    int has_status;
    char *token, *cert, *key, *expiry;
} kinf_execcred;

enum { KINF_J_OK = 0, KINF_J_BAD = -1, KINF_J_NOMEM = -2 };

/* Reads json into *e (zeroed first; the caller frees it with kinf_execcred_clear, whatever the
 * result): KINF_J_OK, KINF_J_BAD (not such an object; *where = the byte offset it failed at) or
 * KINF_J_NOMEM. */
int kinf_execcred_parse(const char *json, size_t len, kinf_execcred *e, size_t *where);
/* Frees e's strings (secrets wiped) and zeroes it. */
void kinf_execcred_clear(kinf_execcred *e);

/* RFC 3339 (YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)) -> seconds since the epoch in *out: 1,
 * or 0 for anything else. */
int kinf_parse_rfc3339(const char *s, double *out);

#endif
