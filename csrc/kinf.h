/*
 * kinf.h - what every part of the kinformer C core shares: the error values.
 *
 * Contract: core functions report failure by returning a kinf_err (never by
 * exit(), abort() or a longjmp); where more detail helps they also fill a
 * caller-provided message buffer. KINF_OK is 0 so `if (err)` reads naturally.
 * kinf_strerror() returns a static, human-readable string for each value.
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
    KINF_EIO         /* transport failure */
} kinf_err;

const char *kinf_strerror(kinf_err err);

/* Copies a formatted message into buf (always NUL-terminated when len > 0). */
void kinf_errmsg(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
