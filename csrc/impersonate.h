/*
 * impersonate.h - the Impersonate-* request headers (client-go's ImpersonationConfig and its
 * impersonating round tripper; kubectl's --as, --as-uid, --as-group, --as-user-extra).
 *
 * Contract:
 * - kinf_impersonation_headers appends to *headers, for a user: "Impersonate-User: USER", then
 *   "Impersonate-Uid: UID" when a uid is given, one "Impersonate-Group: G" per group in order,
 *   and one "Impersonate-Extra-KEY: VALUE" per extra pair in order, KEY percent-encoded (%XX,
 *   upper case) wherever a byte is not an HTTP token character, and '%' itself, exactly as
 *   client-go's headerKeyEscape (kube-apiserver lowercases and unescapes it). Without a user
 *   (NULL or "") it appends nothing.
 * - KINF_EINVAL, with a message and nothing appended: a uid, groups or extras without a user;
 *   an empty group, extra key or extra value; an odd extra list; a control character (but tab)
 *   in any value, which would inject headers. KINF_ENOMEM when out of memory: *headers then
 *   holds what was appended so far (the caller frees the list either way).
 *
 * Threads: any; nothing is kept. Ownership: *headers is the caller's curl_slist (it may be
 * NULL); the strings are copied into it.
 */
#ifndef KINF_IMPERSONATE_H
#define KINF_IMPERSONATE_H

#include <curl/curl.h>
#include <stddef.h>

#include "kinf.h"

typedef struct kinf_impersonation {
    const char *user;
    const char *uid;
    const char *const *groups; /* NULL-terminated, or NULL */
    const char *const *extra;  /* NULL-terminated pairs: key, value, key, value... or NULL */
} kinf_impersonation;

kinf_err kinf_impersonation_headers(const kinf_impersonation *imp, struct curl_slist **headers,
                                    char *errbuf, size_t errlen);

#endif
