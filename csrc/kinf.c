/* kinf.c - error strings shared by the core (see kinf.h). */
#include "kinf.h"

#include <stdarg.h>
#include <stdio.h>

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
    }
    return "unknown error";
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
