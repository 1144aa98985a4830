/*
 * labelselector_impl.h - what the label selector's parser (labelselector.c) and matcher
 * (labelmatch.c) share: the parsed form. Nothing else includes it. The public contract is
 * labelselector.h.
 */
#ifndef KINF_LABELSELECTOR_IMPL_H
#define KINF_LABELSELECTOR_IMPL_H

#include <limits.h>
#include <stddef.h>

#include "labelselector.h"

enum op { OP_EXISTS, OP_NOT_EXISTS, OP_IN, OP_NOT_IN, OP_EQ, OP_DEQ, OP_NEQ, OP_GT, OP_LT };

typedef struct ls_req {
    enum op op;
    kinf_str key;
    const kinf_str *vals; /* a set: sorted, no duplicates */
    size_t nvals;
    long long num;        /* OP_GT, OP_LT: the value as an integer */
} ls_req;

struct kinf_labelselector {
    size_t n;
    ls_req reqs[];
};

/* Go's strconv.ParseInt(s, 10, 64). */
static inline int kinf_ls_parse_int64(const char *s, size_t n, long long *out)
{
    unsigned long long x = 0, limit;
    int neg = 0;
    size_t i = 0;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n)
        return 0;
    limit = neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
    for (; i < n; i++) {
        unsigned d = (unsigned)(unsigned char)s[i] - '0';
        if (d > 9 || x > (limit - d) / 10)
            return 0;
        x = x * 10 + d;
    }
    *out = neg ? (x == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)x)
               : (long long)x;
    return 1;
}

#endif
