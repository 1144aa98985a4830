/* kinf.c - error strings and the small helpers the whole core shares (see kinf.h). */
#include "kinf.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

const char *kinf_strerror(kinf_err err)
{
    switch (err) {
    case KINF_OK:        return "ok";
    case KINF_ENOMEM:    return "out of memory";
    case KINF_EINVAL:    return "invalid argument";
    case KINF_ENOKEY:    return "object has no key";
    case KINF_ECLOSED:   return "closed";
    case KINF_ETIMEDOUT: return "timeout";
    case KINF_EBUSY:     return "call would deadlock";
    case KINF_EEXIST:    return "already exists";
    case KINF_ENOTFOUND: return "not found";
    case KINF_EINDEX:    return "index function failed";
    case KINF_EPARSE:    return "malformed input";
    case KINF_ETOOBIG:   return "input too large";
    case KINF_EIO:       return "i/o error";
    case KINF_ECORRUPT:  return "the shared memory is corrupt";
    case KINF_ECANCELED: return "cancelled";
    }
    return "unknown error";
}

const char *kinf_errname(kinf_err err)
{
    switch (err) {
    case KINF_OK:        return "OK";
    case KINF_ENOMEM:    return "ENOMEM";
    case KINF_EINVAL:    return "EINVAL";
    case KINF_ENOKEY:    return "ENOKEY";
    case KINF_ECLOSED:   return "ECLOSED";
    case KINF_ETIMEDOUT: return "ETIMEDOUT";
    case KINF_EBUSY:     return "EBUSY";
    case KINF_EEXIST:    return "EEXIST";
    case KINF_ENOTFOUND: return "ENOTFOUND";
    case KINF_EINDEX:    return "EINDEX";
    case KINF_EPARSE:    return "EPARSE";
    case KINF_ETOOBIG:   return "ETOOBIG";
    case KINF_EIO:       return "EIO";
    case KINF_ECORRUPT:  return "ECORRUPT";
    case KINF_ECANCELED: return "ECANCELED";
    }
    return "EUNKNOWN";
}

void kinf_errmsg(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    if (buf == NULL || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

double kinf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* splitmix64's finaliser: spreads a counter or a clock reading over all 64 bits. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

unsigned long long kinf_random_seed(void)
{
    static atomic_ullong counter;
    uint64_t seed = 0;

    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = mix64((uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^
                     mix64(atomic_fetch_add(&counter, 1) + 0x9e3779b97f4a7c15ULL));
    }
    return seed ? seed : 0x9e3779b97f4a7c15ULL;
}

void kinf_wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--)
        *v++ = 0;
}

void kinf_wipe_free(char *s)
{
    if (s != NULL) {
        kinf_wipe(s, strlen(s));
        free(s);
    }
}

static int hexval(unsigned c)
{
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return (int)(c - 'a' + 10);
    return -1;
}

int kinf_hex4(const unsigned char *p, const unsigned char *end, unsigned *v)
{
    unsigned x = 0;
    for (int i = 0; i < 4; i++) {
        int h;
        if (p + i >= end)
            return 0;
        h = hexval(p[i]);
        if (h < 0)
            return -1;
        x = (x << 4) | (unsigned)h;
    }
    *v = x;
    return 1;
}

int kinf_utf8_put(unsigned char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t kinf_json_escape(const unsigned char *s, const unsigned char *end, unsigned *cp)
{
    unsigned lo;
    if (end - s < 2)
        return 0;
    switch (s[1]) {
    case '"': case '\\': case '/': *cp = s[1]; return 2;
    case 'b': *cp = '\b'; return 2;
    case 'f': *cp = '\f'; return 2;
    case 'n': *cp = '\n'; return 2;
    case 'r': *cp = '\r'; return 2;
    case 't': *cp = '\t'; return 2;
    case 'u':
        break;
    default:
        return 0;
    }
    if (kinf_hex4(s + 2, end, cp) != 1)
        return 0;
    if (*cp >= 0xDC00 && *cp < 0xE000)
        return 0; /* a low surrogate alone */
    if (*cp < 0xD800 || *cp >= 0xDC00)
        return 6;
    if (end - s < 12 || s[6] != '\\' || s[7] != 'u' || kinf_hex4(s + 8, end, &lo) != 1 ||
        lo < 0xDC00 || lo >= 0xE000)
        return 0;
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    return 12;
}
