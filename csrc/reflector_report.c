/*
 * reflector_report.c - what a reflector tells about its failures: status()'s last_error and
 * error count, and the bounded queue of log lines its owner drains (contract in reflector.h,
 * "Log lines").
 *
 * Kinds: two failures are of the same kind when their HTTP code, Status reason and message
 * with every digit left out are equal (an outage's "connection refused" retries, a 403 loop, a
 * run of very short watches whose durations differ). A kind is logged when it differs from the
 * previous failure's, and again at most every LOG_REPEAT seconds while it repeats; a success
 * (note_success) after a logged failure queues one "recovered" line. The kind outlives the
 * success: a watch that fails the same way after each relist (a list succeeds, the watch
 * fails again) logs two lines per LOG_REPEAT, not two per retry.
 *
 * Threads: record_error and note_success run on the I/O thread or the scanner thread (a
 * WatchList's end bookmark, a repeated watch event); kinf_reflector_log_next on the owner's.
 * Everything here is under the reflector's mu; log_pending lets the drain skip the lock when
 * nothing waits.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "reflector_impl.h"

#define LOG_REPEAT 60.0 /* seconds before the same kind of failure is logged again */

/* Makes s fit for a log line and status(), in place: control characters (C0, DEL, C1) become
 * spaces, bytes that are not valid UTF-8 become '?', and a sequence cut by truncation at the
 * end is dropped. Messages carry what the server sent (a Status message, an event type). */
void clean_text(char *s)
{
    unsigned char *in = (unsigned char *)s, *out = in;
    while (*in) {
        unsigned c = *in, need, cp, i;
        if (c < 0x80) {
            *out++ = (c < 0x20 || c == 0x7f) ? ' ' : (unsigned char)c;
            in++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3, cp = c & 0x07;
        else
            need = 0, cp = 0;
        for (i = 1; need && i <= need; i++) {
            if ((in[i] & 0xC0) != 0x80)
                break;
            cp = (cp << 6) | (in[i] & 0x3F);
        }
        if (need && i > need &&
            !((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
              (cp >= 0xD800 && cp <= 0xDFFF))) {
            if (cp < 0xA0) {
                *out++ = ' '; /* C1 control */
            } else {
                memmove(out, in, need + 1);
                out += need + 1;
            }
            in += need + 1;
        } else if (need && in[i] == '\0' && i <= need) {
            break; /* cut by truncation */
        } else {
            *out++ = '?';
            in++;
        }
    }
    *out = '\0';
}

/* FNV-1a over code, reason and the message without its digits; never 0. */
static uint64_t failure_kind(int code, const char *reason, const char *msg)
{
    uint64_t h = 1469598103934665603ULL;
    char c[16];
    int n = snprintf(c, sizeof(c), "%d|", code);
    for (int i = 0; i < n; i++)
        h = (h ^ (unsigned char)c[i]) * 1099511628211ULL;
    for (const char *p = reason; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ '|') * 1099511628211ULL;
    for (const char *p = msg; *p; p++)
        if (*p < '0' || *p > '9')
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h ? h : 1;
}

static void queue_line_locked(kinf_reflector *r, const char *level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void queue_line_locked(kinf_reflector *r, const char *level, const char *fmt, ...)
{
    va_list ap;
    log_line *l;
    if (r->nlog == LOG_QUEUE)
        return; /* nobody drains: drop rather than grow */
    l = &r->logq[r->nlog++];
    l->level = level;
    va_start(ap, fmt);
    vsnprintf(l->msg, sizeof(l->msg), fmt, ap);
    va_end(ap);
    clean_text(l->msg); /* a cut may have split a character */
    atomic_store_explicit(&r->log_pending, 1, memory_order_release);
}

/* After st.last_error was set: queues a warn line when this failure's kind is due one. */
static void log_failure_locked(kinf_reflector *r, double now)
{
    uint64_t kind = failure_kind(r->st.last_error_code, r->st.last_error_reason,
                                 r->st.last_error);
    r->fail_run++;
    if (kind == r->fail_kind && now - r->fail_logged_at < LOG_REPEAT) {
        r->fail_unlogged++;
        return;
    }
    if (kind == r->fail_kind && r->fail_unlogged > 0)
        queue_line_locked(r, "warn", "%s (%lu more like it in the last %.0f s)",
                          r->st.last_error, r->fail_unlogged, now - r->fail_logged_at);
    else
        queue_line_locked(r, "warn", "%s", r->st.last_error);
    r->fail_kind = kind;
    r->fail_logged_at = now;
    r->fail_unlogged = 0;
    r->fail_warned = 1;
}

void record_error(kinf_reflector *r, int code, const char *reason, const char *fmt, ...)
{
    va_list ap;
    double now = kinf_now();
    pthread_mutex_lock(&r->mu);
    va_start(ap, fmt);
    vsnprintf(r->st.last_error, sizeof(r->st.last_error), fmt, ap);
    va_end(ap);
    clean_text(r->st.last_error);
    r->st.last_error_code = code;
    snprintf(r->st.last_error_reason, sizeof(r->st.last_error_reason), "%s", reason ? reason : "");
    clean_text(r->st.last_error_reason);
    r->st.last_error_time = now;
    r->st.errors++;
    log_failure_locked(r, now);
    pthread_mutex_unlock(&r->mu);
}

void note_success_locked(kinf_reflector *r, const char *what)
{
    if (r->fail_warned)
        queue_line_locked(r, "info", "%s %s: recovered after %lu failure%s", what, r->path,
                          r->fail_run, r->fail_run == 1 ? "" : "s");
    r->fail_warned = 0;
    r->fail_run = 0;
}

void note_success(kinf_reflector *r, const char *what)
{
    pthread_mutex_lock(&r->mu);
    note_success_locked(r, what);
    pthread_mutex_unlock(&r->mu);
}

int kinf_reflector_log_next(kinf_reflector *r, const char **level, char *buf, size_t len)
{
    int got = 0;
    if (!atomic_load_explicit(&r->log_pending, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&r->mu);
    if (r->nlog > 0) {
        *level = r->logq[0].level;
        snprintf(buf, len, "%s", r->logq[0].msg);
        memmove(&r->logq[0], &r->logq[1], (r->nlog - 1) * sizeof(r->logq[0]));
        r->nlog--;
        got = 1;
    }
    atomic_store_explicit(&r->log_pending, r->nlog > 0, memory_order_release);
    pthread_mutex_unlock(&r->mu);
    return got;
}
