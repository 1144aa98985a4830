/*
 * fuzzbuf.h - a growable, NUL-terminated byte buffer for the fuzz targets (test code: an
 * allocation failure aborts, which libFuzzer reports).
 */
#ifndef KINF_FUZZBUF_H
#define KINF_FUZZBUF_H

#include <stdlib.h>
#include <string.h>

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static inline void buf_add(buf *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        b->p = realloc(b->p, nc);
        if (b->p == NULL)
            abort();
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

#endif
