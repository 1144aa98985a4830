/*
 * warning.c - Warning response headers and a client's record of them (contract in warning.h).
 *
 * The parser follows client-go's ParseWarningHeader: leading blanks tolerated, a 3-digit code,
 * an agent without blanks, a quoted text with backslash escapes, an optional quoted date, then
 * the end or a comma and the next warning. Only code 299 (what the API server sends) reaches
 * the callback, as only 299 reaches client-go's default handler. RFC 2047 encoded words are
 * passed on as they are (the API server never sends them).
 *
 * The record keeps the distinct texts in a small array scanned linearly with a hash first:
 * warnings are rare (a few per request that uses a deprecated API) and the array is bounded.
 */
#include "warning.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int control(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

size_t kinf_warning_parse(const char *s, size_t len, kinf_warning_fn fn, void *ud)
{
    char text[KINF_WARNING_MAX];
    size_t i = 0, n = 0;

    for (;;) {
        size_t tlen = 0, code;
        int escaping = 0, closed = 0;

        while (i < len && blank(s[i]))
            i++;
        if (i == len)
            return n;
        /* warn-code: three digits, then one space */
        if (len - i < 4 || s[i] < '0' || s[i] > '9' || s[i + 1] < '0' || s[i + 1] > '9' ||
            s[i + 2] < '0' || s[i + 2] > '9' || s[i + 3] != ' ')
            return n;
        code = (size_t)(s[i] - '0') * 100 + (size_t)(s[i + 1] - '0') * 10 + (size_t)(s[i + 2] - '0');
        i += 4;
        /* warn-agent: at least one byte, no blank nor control character, then one space */
        if (i == len || s[i] == ' ')
            return n;
        while (i < len && s[i] != ' ') {
            if (control((unsigned char)s[i]))
                return n;
            i++;
        }
        if (i == len)
            return n;
        i++;
        /* warn-text: a quoted string with backslash escapes */
        if (i == len || s[i] != '"')
            return n;
        for (i++; i < len; i++) {
            char c = s[i];
            if (!escaping && c == '"') {
                closed = 1;
                i++;
                break;
            }
            if (!escaping && c == '\\') {
                escaping = 1;
                continue;
            }
            escaping = 0;
            if (control((unsigned char)c))
                return n;
            if (tlen < sizeof(text) - 1)
                text[tlen++] = c; /* a longer text is cut */
        }
        if (!closed)
            return n;
        while (i < len && blank(s[i]))
            i++;
        /* warn-date: optional, quoted, no escapes */
        if (i < len && s[i] == '"') {
            const char *end = memchr(s + i + 1, '"', len - i - 1);
            if (end == NULL)
                return n;
            i = (size_t)(end - s) + 1;
            while (i < len && blank(s[i]))
                i++;
        }
        if (i < len && s[i] != ',')
            return n;
        if (code == 299 && tlen > 0) {
            text[tlen] = '\0';
            fn(ud, text, tlen);
            n++;
        }
        if (i == len)
            return n;
        i++; /* the comma */
    }
}

typedef struct seen_text {
    uint64_t hash;
    char *text;
} seen_text;

struct kinf_warnings {
    pthread_mutex_t mu;
    kinf_warnings_counts counts;            /* [mu] */
    seen_text seen[KINF_WARNINGS_DISTINCT]; /* [mu] counts.distinct of them */
    char *pending[KINF_WARNINGS_PENDING];   /* [mu] a ring: npending from first */
    size_t first, npending;
};

kinf_warnings *kinf_warnings_new(void)
{
    kinf_warnings *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

void kinf_warnings_free(kinf_warnings *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->counts.distinct; i++)
        free(w->seen[i].text);
    for (size_t i = 0; i < w->npending; i++)
        free(w->pending[(w->first + i) % KINF_WARNINGS_PENDING]);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static char *copy_text(const char *text, size_t len)
{
    char *p = malloc(len + 1);
    if (p != NULL) {
        memcpy(p, text, len);
        p[len] = '\0';
    }
    return p;
}

/* One parsed warning: counted, remembered and queued when new. Called with mu held. */
static void note_one_locked(void *ud, const char *text, size_t len)
{
    kinf_warnings *w = ud;
    uint64_t h = fnv1a(text, len);
    char *queued;

    w->counts.total++;
    for (size_t i = 0; i < w->counts.distinct; i++)
        if (w->seen[i].hash == h && strcmp(w->seen[i].text, text) == 0)
            return; /* logged once already */
    if (w->counts.distinct < KINF_WARNINGS_DISTINCT) {
        char *kept = copy_text(text, len);
        if (kept == NULL) {
            w->counts.dropped++;
            return;
        }
        w->seen[w->counts.distinct].hash = h;
        w->seen[w->counts.distinct].text = kept;
        w->counts.distinct++;
    }
    if (w->npending == KINF_WARNINGS_PENDING || (queued = copy_text(text, len)) == NULL) {
        w->counts.dropped++;
        return;
    }
    w->pending[(w->first + w->npending) % KINF_WARNINGS_PENDING] = queued;
    w->npending++;
}

size_t kinf_warnings_note(kinf_warnings *w, const char *value, size_t len)
{
    size_t n;
    if (w == NULL)
        return 0;
    pthread_mutex_lock(&w->mu);
    n = kinf_warning_parse(value, len, note_one_locked, w);
    pthread_mutex_unlock(&w->mu);
    return n;
}

int kinf_warnings_next(kinf_warnings *w, char *buf, size_t len)
{
    char *text = NULL;
    if (w == NULL)
        return 0;
    pthread_mutex_lock(&w->mu);
    if (w->npending > 0) {
        text = w->pending[w->first];
        w->pending[w->first] = NULL;
        w->first = (w->first + 1) % KINF_WARNINGS_PENDING;
        w->npending--;
    }
    pthread_mutex_unlock(&w->mu);
    if (text == NULL)
        return 0;
    if (len > 0) {
        size_t n = strlen(text);
        if (n >= len)
            n = len - 1;
        memcpy(buf, text, n);
        buf[n] = '\0';
    }
    free(text);
    return 1;
}

void kinf_warnings_get_counts(kinf_warnings *w, kinf_warnings_counts *out)
{
    memset(out, 0, sizeof(*out));
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    *out = w->counts;
    pthread_mutex_unlock(&w->mu);
}
