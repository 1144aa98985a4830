/*
 * kinf.h - what every part of the kinformer C core shares: the error values and a few small
 * helpers (a monotonic clock, random seeds, wiping secrets, UTF-8 output).
 *
 * Contract: core functions report failure by returning a kinf_err (never by
 * exit(), abort() or a longjmp); where more detail helps they also fill a
 * caller-provided message buffer. KINF_OK is 0 so `if (err)` reads naturally.
 * kinf_strerror() returns a static, human-readable string for each value, kinf_errname() its
 * stable short name.
 * No core header includes lua.h: the core is a plain C library.
 */
#ifndef KINF_H
#define KINF_H

#include <stddef.h>

typedef enum kinf_err {
    KINF_OK = 0,
    KINF_ENOMEM,     /* an allocation failed; nothing was changed */
    KINF_EINVAL,     /* a bad argument or option */
    KINF_ENOKEY,     /* the object has no metadata.name, or a key is malformed */
    KINF_ECLOSED,    /* the queue is closed (and drained) */
    KINF_ETIMEDOUT,  /* a wait ran out */
    KINF_EBUSY,      /* a call that would deadlock (re-entry) was refused */
    KINF_EEXIST,     /* the name is already taken (e.g. indexer conflict) */
    KINF_ENOTFOUND,  /* no such index / item */
    KINF_EINDEX,     /* an index function failed; the write itself went through */
    KINF_EPARSE,     /* malformed input (JSON) */
    KINF_ETOOBIG,    /* input over a configured size limit */
    KINF_EIO,        /* transport failure */
    KINF_ECORRUPT,   /* shared memory that does not hold what its writer wrote (a stray write) */
    KINF_ECANCELED   /* the caller cancelled the operation (a call, call.h) */
} kinf_err;

const char *kinf_strerror(kinf_err err);
/* The value's short stable name ("ENOMEM", "EINVAL", ...: the enum name without KINF_), static;
 * "OK" for KINF_OK and "EUNKNOWN" for a value outside the enum. Code matches on these, never on
 * kinf_strerror's text. */
const char *kinf_errname(kinf_err err);

/* Copies a formatted message into buf (always NUL-terminated when len > 0). */
void kinf_errmsg(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Seconds on the monotonic clock (durations and deadlines; never wall time). Any thread. */
double kinf_now(void);

/* 64 random bits from the operating system (getrandom), for seeding: two seeds drawn at the
 * same moment differ. Falls back to the clock mixed with a counter if the OS has none. Never 0. */
unsigned long long kinf_random_seed(void);

/* Overwrites n bytes with zeros in a way the compiler keeps (secrets before free). */
void kinf_wipe(void *p, size_t n);
/* Wipes the NUL-terminated string s, then frees it; accepts NULL. */
void kinf_wipe_free(char *s);

/* 4 hex digits at p (not past end) into *v: 1 when complete, 0 when the input ends first, -1 on
 * a byte that is not a hex digit. */
int kinf_hex4(const unsigned char *p, const unsigned char *end, unsigned *v);
/* Writes code point cp (at most 0x10FFFF) as UTF-8 at o (room for 4 bytes); returns the length. */
int kinf_utf8_put(unsigned char *o, unsigned cp);
/* The JSON escape at s (s[0] is the backslash; nothing read at or past end): the code point it
 * stands for in *cp, a \u surrogate pair joined into one. Returns the bytes it takes (2, 6 or
 * 12), or 0 when it is malformed, cut by end, or a lone surrogate. */
size_t kinf_json_escape(const unsigned char *s, const unsigned char *end, unsigned *cp);

#endif
