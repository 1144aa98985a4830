/*
 * fuzz_jsonscan.c - libFuzzer target for the streaming JSON scanner.
 *
 * Input layout: byte 0 selects the run (bit 0: list mode, bit 1: strip
 * managedFields, bit 2: inject kind, bit 3: a small max_object_bytes), byte 1
 * seeds the chunking, the rest is the body. Seeds in corpus/jsonscan start
 * with two printable bytes, e.g. "0a" (watch, no flags) or "7x" (list, strip +
 * inject).
 *
 * Invariants checked (any violation aborts, so libFuzzer keeps the input):
 *   - the same callbacks, error and message whether the body comes whole, in
 *     random chunks (each a separate heap copy, freed after the feed) or, for
 *     short bodies, one byte at a time;
 *   - every emitted object is accepted by an independent recursive reference
 *     validator (RFC 8259 + UTF-8), and a body the scanner accepts is valid
 *     JSON for the reference too (differential check of the validator); with
 *     the strip flag the reference only frames a dropped metadata.managedFields
 *     array or object, by the rules jsonscan.h states for it;
 *   - without flags, an emitted object is exactly the input bytes at its offset;
 *   - an emitted object re-scans cleanly inside a watch event with the same
 *     strip flag, giving the same bytes (stripping is idempotent), metadata
 *     and kind.
 * Build and run: `make fuzz FUZZ_SECONDS=60` (see mk/jsonscan.mk).
 */
#include "jsonscan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzbuf.h"

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "fuzz_jsonscan invariant: " __VA_ARGS__);                                  \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)


static void buf_str(buf *b, kinf_str s)
{
    uint32_t n = (uint32_t)s.len;
    buf_add(b, &n, sizeof n);
    buf_add(b, s.ptr, s.len);
}

/* One emitted item, kept for the invariants. */
typedef struct item {
    char *json;
    size_t len;
    uint64_t offset;
    buf meta; /* name, ns, uid, rv, kind serialized */
} item;

typedef struct run {
    buf log;
    item *items;
    size_t n, cap;
    kinf_err err;
    char msg[400];
    char early[KINF_SCAN_MAX_CONTINUE]; /* kinf_scanner_list_continue after the last feed */
    size_t early_len;
    int have_early;
} run;

static void meta_ser(buf *b, const kinf_scan_item *it)
{
    buf_str(b, it->meta.namespace_);
    buf_str(b, it->meta.name);
    buf_str(b, it->meta.uid);
    buf_str(b, it->meta.resource_version);
    buf_str(b, it->kind);
    buf_str(b, it->api_version);
    buf_add(b, &it->initial_events_end, sizeof it->initial_events_end);
}

static kinf_err on_item(void *ud, const kinf_scan_item *it)
{
    run *r = ud;
    item *x;
    if (it->json == NULL || it->json_len == 0 || it->json[0] != '{' ||
        it->json[it->json_len - 1] != '}')
        DIE("emitted object is not {...}");
    buf_add(&r->log, "I", 1);
    buf_add(&r->log, &it->type, sizeof it->type);
    buf_add(&r->log, &it->offset, sizeof it->offset);
    buf_add(&r->log, &it->json_len, sizeof it->json_len);
    buf_add(&r->log, it->json, it->json_len);
    meta_ser(&r->log, it);
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 8;
        r->items = realloc(r->items, r->cap * sizeof *r->items);
        if (r->items == NULL)
            abort();
    }
    x = &r->items[r->n++];
    memset(x, 0, sizeof *x);
    x->json = malloc(it->json_len);
    if (x->json == NULL)
        abort();
    memcpy(x->json, it->json, it->json_len);
    x->len = it->json_len;
    x->offset = it->offset;
    meta_ser(&x->meta, it);
    return KINF_OK;
}

static kinf_err on_end(void *ud, const kinf_scan_list_end *e)
{
    run *r = ud;
    if (r->have_early && (e->continue_.len != r->early_len ||
                          memcmp(e->continue_.ptr, r->early, r->early_len) != 0))
        DIE("on_list_end's continue differs from kinf_scanner_list_continue's");
    buf_add(&r->log, "E", 1);
    buf_str(&r->log, e->kind);
    buf_str(&r->log, e->api_version);
    buf_str(&r->log, e->resource_version);
    buf_str(&r->log, e->continue_);
    buf_add(&r->log, &e->remaining_item_count, sizeof e->remaining_item_count);
    buf_add(&r->log, &e->items, sizeof e->items);
    buf_add(&r->log, &e->is_status, sizeof e->is_status);
    buf_add(&r->log, e->status, sizeof *e->status);
    if (strlen(e->status->message) >= KINF_STATUS_MESSAGE_MAX ||
        strlen(e->status->reason) >= KINF_STATUS_REASON_MAX)
        DIE("status strings not terminated");
    return KINF_OK;
}

static void run_free(run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->items[i].json);
        free(r->items[i].meta.p);
    }
    free(r->items);
    free(r->log.p);
}

static uint32_t rng(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* kinf_scanner_list_continue between feeds: list mode only, a bounded non-empty token, which
 * on_list_end must report if nothing changes it before the end. */
static void early_check(kinf_scanner *s, kinf_scan_mode mode, kinf_err e, run *r)
{
    kinf_str tok;
    r->have_early = kinf_scanner_list_continue(s, &tok);
    if (!r->have_early)
        return;
    if (mode != KINF_SCAN_LIST || e != KINF_OK)
        DIE("a continue token outside a good list");
    if (tok.len == 0 || tok.len > sizeof r->early)
        DIE("continue token length out of bounds");
    memcpy(r->early, tok.ptr, tok.len);
    r->early_len = tok.len;
}

/* chunking: 0 whole, 1 one byte at a time, 2 random sizes from seed */
static void do_run(kinf_scan_mode mode, unsigned flags, size_t max, const uint8_t *d, size_t n,
                   int chunking, uint32_t seed, run *r)
{
    kinf_scan_options o;
    kinf_scanner *s;
    kinf_err e = KINF_OK;
    size_t pos = 0;
    memset(r, 0, sizeof *r);
    memset(&o, 0, sizeof o);
    o.on_item = on_item;
    o.on_list_end = on_end;
    o.ud = r;
    o.flags = flags;
    o.max_object_bytes = max;
    s = kinf_scanner_new(mode, &o, &e);
    if (s == NULL)
        DIE("kinf_scanner_new failed");
    seed |= 1;
    while (pos < n && e == KINF_OK) {
        size_t k = n - pos;
        char *chunk;
        if (chunking == 1)
            k = 1;
        else if (chunking == 2) {
            uint32_t x = rng(&seed);
            size_t c = (x & 3) == 0 ? 1 + (x >> 8) % 3 : 1 + (x >> 8) % 64;
            if (c < k)
                k = c;
        }
        chunk = malloc(k);
        if (chunk == NULL)
            abort();
        memcpy(chunk, d + pos, k);
        e = kinf_scanner_feed(s, chunk, k);
        free(chunk);
        pos += k;
        early_check(s, mode, e, r);
    }
    if (e == KINF_OK)
        e = kinf_scanner_finish(s);
    r->err = e;
    snprintf(r->msg, sizeof r->msg, "%s", kinf_scanner_error(s));
    if (e != KINF_OK) {
        if ((e == KINF_EPARSE || e == KINF_ETOOBIG) && r->msg[0] == '\0')
            DIE("error without a message");
        if (kinf_scanner_feed(s, "{", 1) != e || kinf_scanner_finish(s) != e)
            DIE("failed scanner did not stay failed");
    }
    kinf_scanner_free(s);
}

/* ---- reference validator (recursive, small inputs only) ------------------ */

typedef struct ref {
    const uint8_t *p, *end;
    int depth;
    int strip; /* frame, not validate, a dropped managedFields array or object */
} ref;

/* What a value is to the scanner, as far as stripping goes. */
enum { REF_NONE, REF_EVENT, REF_LIST, REF_ITEMS, REF_OBJECT, REF_META };

static void ref_ws(ref *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int ref_hex(ref *r)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c;
        if (r->p >= r->end)
            return -1;
        c = *r->p++;
        if (c >= '0' && c <= '9')
            v = v * 16 + (c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v * 16 + (c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v = v * 16 + (c - 'A' + 10);
        else
            return -1;
    }
    return v;
}

static int ref_string(ref *r)
{
    r->p++; /* '"' */
    while (r->p < r->end) {
        uint8_t c = *r->p++;
        if (c == '"')
            return 1;
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (r->p >= r->end)
                return 0;
            c = *r->p++;
            if (c == 'u') {
                int v = ref_hex(r);
                if (v < 0 || (v >= 0xDC00 && v <= 0xDFFF))
                    return 0;
                if (v >= 0xD800 && v <= 0xDBFF) {
                    int w;
                    if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
                        return 0;
                    r->p += 2;
                    w = ref_hex(r);
                    if (w < 0xDC00 || w > 0xDFFF)
                        return 0;
                }
            } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
                return 0;
            }
        } else if (c >= 0x80) {
            /* decode and check the code point (a different method than the scanner's) */
            uint32_t cp;
            int need;
            if ((c & 0xE0) == 0xC0)
                cp = c & 0x1F, need = 1;
            else if ((c & 0xF0) == 0xE0)
                cp = c & 0x0F, need = 2;
            else if ((c & 0xF8) == 0xF0)
                cp = c & 0x07, need = 3;
            else
                return 0;
            for (int i = 0; i < need; i++) {
                if (r->p >= r->end || (*r->p & 0xC0) != 0x80)
                    return 0;
                cp = (cp << 6) | (*r->p++ & 0x3F);
            }
            if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
                (need == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return 0;
        }
    }
    return 0;
}

static int ref_value(ref *r, int role);

/* A key, checked like any string, then decoded again (simple escapes and \\u00XX suffice to
 * compare with the few ASCII keys the scanner looks at; anything else just differs). */
static int ref_key(ref *r, char *out, size_t cap)
{
    const uint8_t *start = r->p + 1;
    size_t n = 0;
    if (!ref_string(r))
        return 0;
    for (const uint8_t *q = start; q < r->p - 1 && n + 1 < cap; q++) {
        uint8_t c = *q;
        if (c == '\\') {
            c = *++q;
            if (c == 'u') {
                int v = 0;
                for (int i = 1; i <= 4; i++)
                    v = v * 16 + (q[i] <= '9' ? q[i] - '0' : (q[i] | 0x20) - 'a' + 10);
                q += 4;
                c = v > 0 && v < 0x80 ? (uint8_t)v : 0xFF; /* 0xFF: no key of ours */
            } else if (c == 'n' || c == 't' || c == 'r' || c == 'b' || c == 'f') {
                c = 0xFF;
            }
        }
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return 1;
}

/* jsonscan.h's rules for a dropped value: strings end and hold no raw control byte (also
 * right after a backslash); outside them no backslash, no control byte but whitespace, no
 * byte >= 0x80; brackets counted, not matched, nesting no deeper than the limit. */
static int ref_frame(ref *r)
{
    int d = 0;
    while (r->p < r->end) {
        uint8_t c = *r->p++;
        if (c == '"') {
            for (;;) {
                if (r->p >= r->end)
                    return 0;
                c = *r->p++;
                if (c == '"')
                    break;
                if (c < 0x20)
                    return 0;
                if (c == '\\') {
                    if (r->p >= r->end || *r->p < 0x20)
                        return 0;
                    r->p++;
                }
            }
        } else if (c == '{' || c == '[') {
            if (r->depth + ++d > KINF_SCAN_MAX_DEPTH)
                return 0;
        } else if (c == '}' || c == ']') {
            if (--d == 0)
                return 1;
        } else if (c == '\\' || c >= 0x80 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r')) {
            return 0;
        }
    }
    return 0;
}

/* The role of the value of member `key` in an object of role `role`. */
static int ref_member_role(const ref *r, int role, const char *key)
{
    if (role == REF_EVENT && strcmp(key, "object") == 0)
        return REF_OBJECT;
    if (role == REF_LIST && strcmp(key, "items") == 0)
        return REF_ITEMS;
    if (role == REF_OBJECT && strcmp(key, "metadata") == 0)
        return REF_META;
    if (role == REF_META && r->strip && strcmp(key, "managedFields") == 0)
        return -1; /* dropped */
    return REF_NONE;
}

static int ref_number(ref *r)
{
    const uint8_t *s = r->p;
    if (r->p < r->end && *r->p == '-')
        r->p++;
    if (r->p >= r->end)
        return 0;
    if (*r->p == '0') {
        r->p++;
    } else if (*r->p >= '1' && *r->p <= '9') {
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    } else {
        return 0;
    }
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        if (r->p >= r->end || !(*r->p >= '0' && *r->p <= '9'))
            return 0;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            r->p++;
        if (r->p >= r->end || !(*r->p >= '0' && *r->p <= '9'))
            return 0;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    }
    return r->p > s;
}

static int ref_lit(ref *r, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0)
        return 0;
    r->p += n;
    return 1;
}

static int ref_value(ref *r, int role)
{
    ref_ws(r);
    if (r->p >= r->end)
        return 0;
    if (role == -1 && (*r->p == '{' || *r->p == '['))
        return ref_frame(r);
    switch (*r->p) {
    case '{':
        if (++r->depth > KINF_SCAN_MAX_DEPTH)
            return 0;
        r->p++;
        ref_ws(r);
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            r->depth--;
            return 1;
        }
        for (;;) {
            char key[64];
            ref_ws(r);
            if (r->p >= r->end || *r->p != '"' || !ref_key(r, key, sizeof key))
                return 0;
            ref_ws(r);
            if (r->p >= r->end || *r->p++ != ':')
                return 0;
            if (!ref_value(r, ref_member_role(r, role, key)))
                return 0;
            ref_ws(r);
            if (r->p >= r->end)
                return 0;
            if (*r->p == ',') {
                r->p++;
                continue;
            }
            if (*r->p++ != '}')
                return 0;
            r->depth--;
            return 1;
        }
    case '[':
        if (++r->depth > KINF_SCAN_MAX_DEPTH)
            return 0;
        r->p++;
        ref_ws(r);
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            r->depth--;
            return 1;
        }
        for (;;) {
            if (!ref_value(r, role == REF_ITEMS ? REF_OBJECT : REF_NONE))
                return 0;
            ref_ws(r);
            if (r->p >= r->end)
                return 0;
            if (*r->p == ',') {
                r->p++;
                continue;
            }
            if (*r->p++ != ']')
                return 0;
            r->depth--;
            return 1;
        }
    case '"':
        return ref_string(r);
    case 't':
        return ref_lit(r, "true");
    case 'f':
        return ref_lit(r, "false");
    case 'n':
        return ref_lit(r, "null");
    default:
        return ref_number(r);
    }
}

/* Whitespace-separated JSON values (at least one when `one`), nothing else. */
static int ref_stream(const uint8_t *p, size_t n, int one, int strip)
{
    ref r = {p, p + n, 0, strip};
    int count = 0;
    for (;;) {
        ref_ws(&r);
        if (r.p == r.end)
            return one ? count == 1 : 1;
        if (!ref_value(&r, !strip ? REF_NONE : one ? REF_LIST : REF_EVENT))
            return 0;
        count++;
        /* two numbers need whitespace between them; our streams hold objects only */
    }
}

/* ---- the target ------------------------------------------------------------ */

static int same_run(const run *a, const run *b)
{
    return a->err == b->err && strcmp(a->msg, b->msg) == 0 && a->log.len == b->log.len &&
           (a->log.len == 0 || memcmp(a->log.p, b->log.p, a->log.len) == 0);
}

static void check_item(const item *x, unsigned flags, kinf_scan_mode mode, const uint8_t *d,
                       size_t n)
{
    run rr;
    buf ev = {0};
    if (!ref_stream((const uint8_t *)x->json, x->len, 1, 0))
        DIE("emitted object rejected by the reference validator");
    if (flags == 0) {
        if (x->offset > n || x->len > n - x->offset || memcmp(d + x->offset, x->json, x->len) != 0)
            DIE("emitted object differs from the input bytes at its offset");
    }
    /* re-scan inside a watch event with the same strip flag */
    buf_add(&ev, "{\"type\":\"ADDED\",\"object\":", 25);
    buf_add(&ev, x->json, x->len);
    buf_add(&ev, "}\n", 2);
    do_run(KINF_SCAN_WATCH, flags & KINF_SCAN_STRIP_MANAGED_FIELDS, 0, (const uint8_t *)ev.p,
           ev.len, 0, 0, &rr);
    if (rr.err != KINF_OK) {
        /* a name/kind at its cap can only be over it after injection: never; anything else fails */
        fprintf(stderr, "rescan error: %s\n", rr.msg);
        DIE("emitted object does not re-scan");
    }
    if (rr.n != 1 || rr.items[0].len != x->len || memcmp(rr.items[0].json, x->json, x->len) != 0)
        DIE("re-scan changed the object (strip not idempotent?)");
    if (rr.items[0].meta.len != x->meta.len ||
        memcmp(rr.items[0].meta.p, x->meta.p, x->meta.len) != 0) {
        /* initial_events_end and the rest must agree; kind too (injected kind is in the json) */
        DIE("re-scan gave different metadata");
    }
    (void)mode;
    run_free(&rr);
    free(ev.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run whole, part;
    kinf_scan_mode mode;
    unsigned flags;
    size_t max;
    uint32_t seed;
    if (size < 2)
        return 0;
    mode = (data[0] & 1) ? KINF_SCAN_LIST : KINF_SCAN_WATCH;
    flags = (data[0] >> 1) & 3;
    max = (data[0] & 8) ? 8 + (size_t)data[1] % 128 : 0;
    seed = (uint32_t)data[1] * 2654435761u + (uint32_t)size;
    data += 2;
    size -= 2;

    do_run(mode, flags, max, data, size, 0, 0, &whole);
    do_run(mode, flags, max, data, size, 2, seed, &part);
    if (!same_run(&whole, &part)) {
        fprintf(stderr, "whole: %d %s\nsplit: %d %s\n", whole.err, whole.msg, part.err, part.msg);
        DIE("chunked run differs from the whole run");
    }
    run_free(&part);
    if (size <= 96) {
        do_run(mode, flags, max, data, size, 1, 0, &part);
        if (!same_run(&whole, &part))
            DIE("1-byte run differs from the whole run");
        run_free(&part);
    }
    for (size_t i = 0; i < whole.n; i++)
        check_item(&whole.items[i], flags, mode, data, size);
    if (whole.err == KINF_OK) {
        /* what the scanner accepted is valid JSON: one object (list) or a stream of values */
        if (!ref_stream(data, size, mode == KINF_SCAN_LIST,
                        (flags & KINF_SCAN_STRIP_MANAGED_FIELDS) != 0))
            DIE("scanner accepted input the reference validator rejects");
    }
    run_free(&whole);
    return 0;
}
