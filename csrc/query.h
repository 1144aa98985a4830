/*
 * query.h - a request's path and query string, built parameter by parameter.
 *
 * Contract:
 * - kinf_query_init copies the path; kinf_query_param appends "?key=value" (the first) or
 *   "&key=value", the value percent-encoded (everything but RFC 3986 unreserved bytes), the key
 *   as given (callers pass literal names). Nothing is ever cut: the buffer grows (a continue
 *   token of 8 KiB or long selectors fit).
 * - An allocation failure is remembered: q->s is then NULL, later calls do nothing, and the
 *   caller checks q->s once at the end.
 *
 * Ownership: q->s is malloc'd and belongs to the caller (kinf_query_free frees it; accepts a
 * query whose s is NULL). Threads: a query belongs to one thread.
 */
#ifndef KINF_QUERY_H
#define KINF_QUERY_H

#include <stddef.h>

typedef struct kinf_query {
    char *s;
    size_t len, cap;
} kinf_query;

void kinf_query_init(kinf_query *q, const char *path);
void kinf_query_param(kinf_query *q, const char *key, const char *value);
void kinf_query_free(kinf_query *q);

#endif
