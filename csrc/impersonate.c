/*
 * impersonate.c - the Impersonate-* request headers (contract in impersonate.h).
 *
 * Everything is checked before the first header is appended, so a refused configuration
 * leaves the list as it was.
 */
#include "impersonate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A header value: not empty, no control character but tab (CR LF would inject headers). */
static int value_ok(const char *v)
{
    if (v[0] == '\0')
        return 0;
    for (; *v; v++)
        if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f)
            return 0;
    return 1;
}

/* The HTTP token characters (RFC 7230) less '%': what client-go leaves unescaped in a key. */
static int key_char(unsigned char b)
{
    return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
           (b != 0 && strchr("!#$&'*+-.^_`|~", b) != NULL);
}

/* Appends "NAME[escaped key]: value". */
static kinf_err append(struct curl_slist **headers, const char *name, const char *key,
                       const char *value)
{
    size_t n = strlen(name) + (key ? 3 * strlen(key) : 0) + strlen(value) + 3;
    char *line = malloc(n), *p;
    struct curl_slist *more;

    if (line == NULL)
        return KINF_ENOMEM;
    p = line + snprintf(line, n, "%s", name);
    for (; key != NULL && *key; key++) {
        unsigned char b = (unsigned char)*key;
        if (key_char(b))
            *p++ = (char)b;
        else
            p += snprintf(p, 4, "%%%02X", b);
    }
    snprintf(p, n - (size_t)(p - line), ": %s", value);
    more = curl_slist_append(*headers, line);
    free(line);
    if (more == NULL)
        return KINF_ENOMEM;
    *headers = more;
    return KINF_OK;
}

static kinf_err check(const kinf_impersonation *imp, const char *user, const char *uid,
                      char *errbuf, size_t errlen)
{
    const char *const *groups = imp->groups, *const *extra = imp->extra;
    if (user == NULL) {
        if (uid != NULL || (groups != NULL && groups[0] != NULL) ||
            (extra != NULL && extra[0] != NULL)) {
            kinf_errmsg(errbuf, errlen, "impersonating a uid, groups or extra needs "
                                        "impersonate_user");
            return KINF_EINVAL;
        }
        return KINF_OK;
    }
    if (!value_ok(user) || (uid != NULL && !value_ok(uid))) {
        kinf_errmsg(errbuf, errlen, "impersonate_%s must not contain control characters",
                    value_ok(user) ? "uid" : "user");
        return KINF_EINVAL;
    }
    for (size_t i = 0; groups != NULL && groups[i] != NULL; i++) {
        if (!value_ok(groups[i])) {
            kinf_errmsg(errbuf, errlen, "impersonate_groups: group %zu is empty or holds a "
                                        "control character", i + 1);
            return KINF_EINVAL;
        }
    }
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i += 2) {
        if (extra[i][0] == '\0' || extra[i + 1] == NULL || !value_ok(extra[i + 1])) {
            kinf_errmsg(errbuf, errlen, "impersonate_extra: key \"%.100s\" is empty, has no "
                        "value, or its value is empty or holds a control character", extra[i]);
            return KINF_EINVAL;
        }
    }
    return KINF_OK;
}

kinf_err kinf_impersonation_headers(const kinf_impersonation *imp, struct curl_slist **headers,
                                    char *errbuf, size_t errlen)
{
    const char *user = imp->user && imp->user[0] ? imp->user : NULL;
    const char *uid = imp->uid && imp->uid[0] ? imp->uid : NULL;
    const char *const *groups = imp->groups, *const *extra = imp->extra;
    kinf_err err = check(imp, user, uid, errbuf, errlen);

    if (err != KINF_OK || user == NULL)
        return err;
    err = append(headers, "Impersonate-User", NULL, user);
    if (err == KINF_OK && uid != NULL)
        err = append(headers, "Impersonate-Uid", NULL, uid);
    for (size_t i = 0; err == KINF_OK && groups != NULL && groups[i] != NULL; i++)
        err = append(headers, "Impersonate-Group", NULL, groups[i]);
    for (size_t i = 0; err == KINF_OK && extra != NULL && extra[i] != NULL; i += 2)
        err = append(headers, "Impersonate-Extra-", extra[i], extra[i + 1]);
    if (err != KINF_OK)
        kinf_errmsg(errbuf, errlen, "out of memory");
    return err;
}
