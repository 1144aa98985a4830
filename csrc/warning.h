/*
 * warning.h - the API server's Warning response headers (RFC 7234 section 5.5: deprecated
 * APIs, admission warnings) and a client's record of them, as client-go's warning handler with
 * deduplication keeps it.
 *
 * Contract:
 * - kinf_warning_parse reads one header value. It may hold several comma-separated warnings,
 *   each `CODE AGENT "TEXT"` with an optional quoted date after the text (client-go's
 *   ParseWarningHeaders). For each well-formed warning with code 299 and a non-empty text free
 *   of control characters it calls fn with the unescaped text; the first malformed warning
 *   ends the value (those before it count). It returns how many it handed to fn.
 * - A kinf_warnings record counts every such warning (total) and remembers the distinct texts
 *   (at most KINF_WARNINGS_DISTINCT, each cut at KINF_WARNING_MAX - 1 bytes). A text not seen
 *   before is queued once for logging (at most KINF_WARNINGS_PENDING are queued; one that
 *   finds the queue full is counted as dropped). Once KINF_WARNINGS_DISTINCT texts are
 *   remembered, a new text is queued each time it comes (never lost, at worst repeated). An
 *   allocation failure counts the warning as dropped and never fails the request.
 * - kinf_warnings_next hands out the queued texts, oldest first, for the thread that logs them
 *   (the Lua thread: C has no logger).
 *
 * Threads: every function from any thread; the record has one mutex of its own, taken alone
 * (never with another lock held) and for a bounded time (a scan of the remembered texts).
 * Ownership: kinf_warnings_new returns the record; kinf_warnings_free frees it (NULL accepted).
 * Texts are copied in; nothing the caller passes is kept.
 */
#ifndef KINF_WARNING_H
#define KINF_WARNING_H

#include <stddef.h>

#define KINF_WARNING_MAX 1024       /* bytes of one text kept, NUL included */
#define KINF_WARNINGS_DISTINCT 256  /* distinct texts remembered */
#define KINF_WARNINGS_PENDING 32    /* texts waiting to be logged */

typedef void (*kinf_warning_fn)(void *ud, const char *text, size_t len);

/* value: one Warning header's value (the bytes after "Warning:"; CR LF allowed at its end). */
size_t kinf_warning_parse(const char *value, size_t len, kinf_warning_fn fn, void *ud);

typedef struct kinf_warnings kinf_warnings;

typedef struct kinf_warnings_counts {
    unsigned long total;    /* warnings received (code 299), repeats included */
    unsigned long distinct; /* distinct texts remembered */
    unsigned long dropped;  /* new texts that could not be queued for the log */
} kinf_warnings_counts;

kinf_warnings *kinf_warnings_new(void);
void kinf_warnings_free(kinf_warnings *w);
/* Notes every warning of one header value (kinf_warning_parse); returns how many it held. */
size_t kinf_warnings_note(kinf_warnings *w, const char *value, size_t len);
/* 1 and the oldest queued text in buf (NUL-terminated, cut to len), or 0 when none is queued. */
int kinf_warnings_next(kinf_warnings *w, char *buf, size_t len);
void kinf_warnings_get_counts(kinf_warnings *w, kinf_warnings_counts *out);

#endif
