/*
 * query.c - path + query builder (contract in query.h).
 */
#include "query.h"

#include <stdlib.h>
#include <string.h>

static void append(kinf_query *q, const char *bytes, size_t n)
{
    if (q->s == NULL)
        return;
    if (q->len + n + 1 > q->cap) {
        size_t cap = q->cap * 2 > q->len + n + 1 ? q->cap * 2 : q->len + n + 1;
        char *grown = realloc(q->s, cap);
        if (grown == NULL) {
            free(q->s);
            q->s = NULL;
            return;
        }
        q->s = grown;
        q->cap = cap;
    }
    memcpy(q->s + q->len, bytes, n);
    q->len += n;
    q->s[q->len] = '\0';
}

void kinf_query_init(kinf_query *q, const char *path)
{
    q->len = 0;
    q->cap = strlen(path) + 256;
    q->s = malloc(q->cap);
    if (q->s != NULL)
        q->s[0] = '\0';
    append(q, path, strlen(path));
}

void kinf_query_param(kinf_query *q, const char *key, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    append(q, q->s && strchr(q->s, '?') ? "&" : "?", 1);
    append(q, key, strlen(key));
    append(q, "=", 1);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            append(q, (const char *)p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            append(q, esc, 3);
        }
    }
}

void kinf_query_free(kinf_query *q)
{
    free(q->s);
    q->s = NULL;
    q->len = q->cap = 0;
}
