/*
 * fuzz_reflector.c - libFuzzer target for the reflector's handling of list and watch responses
 * (the framing above the scanner): list pages, metadata.resourceVersion / continue, Status
 * bodies, watch events ADDED / MODIFIED / DELETED / BOOKMARK / ERROR, the WatchList
 * initial-events-end bookmark, HTTP errors, and the objects that reach the DeltaFIFO. It plays
 * the API server through a scripted transport (csrc/test/scripted_transport.h): no curl, no
 * threads, a clock of its own.
 *
 * Input layout: byte 0 chooses the reflector (bit 0 watch_list, bit 1 strip managedFields,
 * bit 2 max_object_bytes 300, bit 3 a consumer: the FIFO has a store of known objects and
 * everything queued is popped into it after each response, as an informer does), byte 1 seeds
 * the chunking, the rest is a sequence of responses. A response starts at "@@X" at the start
 * of the rest or after a '\n'; X picks the status and the way the transfer ends:
 *   '2' 200, ends normally, lasted 5 s    'd' 200, connection dropped (KINF_XFER_FAILED)
 *   's' 200, ends after 0.2 s (short)     't' 200, no byte for idle_timeout
 *   'g' 410   'r' 429 Retry-After 1   'u' 503   'e' 500   'f' 403   'x' 504
 *   'c' no response: connection refused   'i' no response: no header for idle_timeout
 *   other: as '2'
 * Its body is everything after X up to the next marker. Without a leading marker the first
 * response is a '2'. At most 16 responses. Each body is answered to whatever the reflector
 * asks for (a list page or a watch), so a seed is "list body, then watch bodies".
 * Seeds: csrc/fuzz/corpus/reflector.
 *
 * Invariants checked (a violation aborts, so libFuzzer keeps the input):
 *   - the same requests, statuses, errors and FIFO deltas whether each body comes whole, in
 *     random chunks (each a separate heap copy) or, for inputs under 256 bytes, one byte
 *     at a time;
 *   - every failure is counted and leaves a clean message: non-empty, valid UTF-8, no control
 *     characters, starting with "list /..." or "watch /...";
 *   - requests are well formed: the path, then only percent-encoded parameters; a watch asks
 *     for the rv status() reports, a continuation page for exactly the continue token the
 *     previous page gave (percent-decoded), without a resourceVersion;
 *   - a model of the response, computed by a reference scan of the same body: a complete list
 *     sets status.resource_version to the list's rv and queues each listed key with the last
 *     listed object; a watch counts exactly the events before the first failure, advances
 *     the rv to the last applied event's, leaves each touched key's newest delta matching its
 *     last event (type and bytes), reports a stream that ends cleanly inside an event; a
 *     WatchList applies its initial events (ADDED, MODIFIED, DELETED) to a temporary state
 *     that replaces the FIFO's at the end bookmark;
 *   - every queued or stored object has a key equal to namespace/name (or name), a
 *     non-empty name, the metadata of its own JSON bytes, and the FIFO's get_by_key agrees
 *     with its list.
 * Build and run: `make fuzz FUZZ_SECONDS=60` (mk/fuzz.mk).
 */
#include "reflector.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonscan.h"
#include "fuzzbuf.h"
#include "store.h"
#include "test/scripted_transport.h"

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "fuzz_reflector invariant: " __VA_ARGS__);                                 \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#define PATH "/api/v1/namespaces/fuzz/pods"
#define MAX_RESPONSES 16
#define SMALL_MAX 300

/* ---- small helpers ---- */


/* Logs are text (length-prefixed strings) so that a mismatch can be shown. */
static void buf_str(buf *b, const char *s, size_t n)
{
    char k[32];
    buf_add(b, k, (size_t)snprintf(k, sizeof k, " %zu:", n));
    buf_add(b, s, n);
}

static void buf_cstr(buf *b, const char *s)
{
    buf_str(b, s, strlen(s));
}

static void buf_num(buf *b, unsigned long long v)
{
    char k[32];
    buf_add(b, k, (size_t)snprintf(k, sizeof k, " %llu", v));
}

static char *dup_bytes(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p == NULL)
        abort();
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static uint32_t rng(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Valid UTF-8 without control characters (what a log line or status() may carry). */
static int clean_text(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int need;
        uint32_t cp;
        if (c < 0x20 || c == 0x7f)
            return 0;
        if (c < 0x80) {
            p++;
            continue;
        }
        if ((c & 0xE0) == 0xC0)
            cp = c & 0x1F, need = 1;
        else if ((c & 0xF0) == 0xE0)
            cp = c & 0x0F, need = 2;
        else if ((c & 0xF8) == 0xF0)
            cp = c & 0x07, need = 3;
        else
            return 0;
        p++;
        for (int i = 0; i < need; i++, p++) {
            if ((*p & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (*p & 0x3F);
        }
        if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) ||
            (need == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ||
            (cp >= 0x80 && cp < 0xA0))
            return 0;
    }
    return 1;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The query's parameter `name`, percent-decoded into *out (malloc'd); 0 when absent. Aborts
 * when the query is not "PATH?k=v&k=v..." with every byte unreserved or %XX. */
static int query_param(const char *q, const char *name, char **out, size_t *outlen)
{
    size_t plen = strlen(PATH), nlen = strlen(name);
    const char *p;
    int found = 0;
    if (strncmp(q, PATH, plen) != 0 || (q[plen] != '?' && q[plen] != '\0'))
        DIE("request %s does not start with the path", q);
    p = q[plen] ? q + plen + 1 : q + plen;
    while (*p) {
        const char *eq = strchr(p, '='), *amp;
        const char *v;
        if (eq == NULL)
            DIE("parameter without '=' in %s", q);
        amp = strchr(eq, '&');
        if (amp == NULL)
            amp = eq + strlen(eq);
        v = eq + 1;
        for (const char *c = v; c < amp; c++) {
            if (*c == '%') {
                if (hexval(c[1]) < 0 || hexval(c[2]) < 0)
                    DIE("bad percent-encoding in %s", q);
                c += 2;
            } else if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                         (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.' ||
                         *c == '~')) {
                DIE("unencoded byte 0x%02x in %s", (unsigned char)*c, q);
            }
        }
        if ((size_t)(eq - p) == nlen && memcmp(p, name, nlen) == 0) {
            buf d = {0};
            if (found)
                DIE("parameter %s twice in %s", name, q);
            found = 1;
            buf_add(&d, "", 0);
            for (const char *c = v; c < amp; c++) {
                char ch = *c;
                if (ch == '%') {
                    ch = (char)(hexval(c[1]) * 16 + hexval(c[2]));
                    c += 2;
                }
                buf_add(&d, &ch, 1);
            }
            *out = d.p;
            *outlen = d.len;
        }
        p = *amp ? amp + 1 : amp;
    }
    return found;
}

/* ---- reference model of one body (a separate scan of the same bytes) ---- */

typedef struct mobj {
    char *key;
    size_t key_len;
    char *json; /* NULL: deleted */
    size_t json_len;
    int type; /* kinf_event_type of the last event for the key */
} mobj;

typedef struct mset {
    mobj *v;
    size_t n, cap;
} mset;

static mobj *mset_find(mset *s, const char *key, size_t len)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].key_len == len && memcmp(s->v[i].key, key, len) == 0)
            return &s->v[i];
    return NULL;
}

/* Sets key's entry (json NULL: deleted), adding it at the end when new. */
static void mset_put(mset *s, const char *key, size_t klen, const char *json, size_t jlen,
                     int type)
{
    mobj *o = mset_find(s, key, klen);
    if (o == NULL) {
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 8;
            s->v = realloc(s->v, s->cap * sizeof(*s->v));
            if (s->v == NULL)
                abort();
        }
        o = &s->v[s->n++];
        o->key = dup_bytes(key, klen);
        o->key_len = klen;
    } else {
        free(o->json);
    }
    o->json = json ? dup_bytes(json, jlen) : NULL;
    o->json_len = jlen;
    o->type = type;
}

static void mset_free(mset *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].key);
        free(s->v[i].json);
    }
    free(s->v);
    memset(s, 0, sizeof(*s));
}

typedef struct model {
    int initial;          /* the watch is a WatchList still collecting its initial state */
    int ended_initial;    /* the end bookmark came in this body */
    mset temp;            /* WatchList: the initial state so far */
    mset fifo;            /* keys this body queued and their last state */
    mset listed;          /* list: the items of this page */
    unsigned long events; /* events applied */
    char rv[KINF_SCAN_MAX_META + 1];
    int have_rv;
    char start_rv[KINF_SCAN_MAX_META + 1]; /* the reflector's rv before this body */
    int error_event;
    int cut_end; /* watch: the body ends inside an event */
    kinf_status status;
    /* list end */
    int list_ok;
    char *list_rv, *cont;
    size_t list_rv_len, cont_len;
    /* the continue token known once the whole body was fed, before its end was checked: the
     * reflector asks for the next page with it before it finishes the page (pipelined pages) */
    char *early;
    size_t early_len;
} model;

static void key_of(const kinf_meta *m, buf *k)
{
    k->len = 0;
    buf_add(k, "", 0);
    if (m->namespace_.len) {
        buf_add(k, m->namespace_.ptr, m->namespace_.len);
        buf_add(k, "/", 1);
    }
    buf_add(k, m->name.ptr, m->name.len);
}

/* resourceVersions compared as decimal numbers: -1, 0, 1, or 2 when either is not one (written
 * apart from the reflector's rv_compare, as the model's reference). */
static int model_rv_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c;
    for (int side = 0; side < 2; side++) {
        const char *p = side ? b : a;
        size_t n = side ? blen : alen;
        if (n == 0 || (n > 1 && p[0] == '0'))
            return 2;
        for (size_t i = 0; i < n; i++)
            if (p[i] < '0' || p[i] > '9')
                return 2;
    }
    if (alen != blen)
        return alen < blen ? -1 : 1;
    c = memcmp(a, b, alen);
    return c < 0 ? -1 : c > 0;
}

static kinf_err model_item(void *ud, const kinf_scan_item *it)
{
    model *m = ud;
    buf k = {0};
    if (it->type == KINF_EV_ERROR) {
        (void)kinf_status_parse(it->json, it->json_len, &m->status);
        m->error_event = 1;
        return KINF_EIO;
    }
    /* A record keeps uid and rv as C strings: one holding a NUL would be cut, so it is refused. */
    if (memchr(it->meta.resource_version.ptr, 0, it->meta.resource_version.len) ||
        memchr(it->meta.uid.ptr, 0, it->meta.uid.len))
        return KINF_EPARSE;
    if (it->type != KINF_EV_LIST_ITEM && !m->initial) {
        /* Watch order: an older bookmark is ignored, a repeated event dropped, an older event
         * ends the watch (docs/reflector.md). */
        const char *cur = m->have_rv ? m->rv : m->start_rv;
        int c = model_rv_cmp(it->meta.resource_version.ptr, it->meta.resource_version.len, cur,
                             strlen(cur));
        if (it->type == KINF_EV_BOOKMARK && c == -1)
            return KINF_OK;
        if (it->type != KINF_EV_BOOKMARK && c == 0)
            return KINF_OK;
        if (it->type != KINF_EV_BOOKMARK && c == -1)
            return KINF_EPARSE;
    }
    if (it->type != KINF_EV_BOOKMARK && it->meta.name.len == 0)
        return KINF_ENOKEY;
    if (it->meta.resource_version.len) {
        memcpy(m->rv, it->meta.resource_version.ptr, it->meta.resource_version.len);
        m->rv[it->meta.resource_version.len] = '\0';
        m->have_rv = 1;
    }
    key_of(&it->meta, &k);
    if (it->type == KINF_EV_LIST_ITEM) {
        mset_put(&m->listed, k.p, k.len, it->json, it->json_len, it->type);
    } else if (it->type == KINF_EV_BOOKMARK) {
        if (m->initial && it->initial_events_end) {
            /* The temporary state replaces the FIFO's (keys not in it: deleted or absent). */
            for (size_t i = 0; i < m->fifo.n; i++)
                if (mset_find(&m->temp, m->fifo.v[i].key, m->fifo.v[i].key_len) == NULL)
                    mset_put(&m->fifo, m->fifo.v[i].key, m->fifo.v[i].key_len, NULL, 0,
                             KINF_EV_DELETED);
            for (size_t i = 0; i < m->temp.n; i++)
                if (m->temp.v[i].json)
                    mset_put(&m->fifo, m->temp.v[i].key, m->temp.v[i].key_len, m->temp.v[i].json,
                             m->temp.v[i].json_len, KINF_EV_LIST_ITEM);
            m->initial = 0;
            m->ended_initial = 1;
        }
        m->events += 0;
    } else if (m->initial) {
        mset_put(&m->temp, k.p, k.len, it->type == KINF_EV_DELETED ? NULL : it->json,
                 it->json_len, it->type);
    } else {
        mset_put(&m->fifo, k.p, k.len, it->type == KINF_EV_DELETED ? NULL : it->json,
                 it->json_len, it->type);
    }
    if (it->type != KINF_EV_BOOKMARK)
        m->events++;
    free(k.p);
    return KINF_OK;
}

static kinf_err model_end(void *ud, const kinf_scan_list_end *e)
{
    model *m = ud;
    if (e->is_status || memchr(e->resource_version.ptr, 0, e->resource_version.len) ||
        memchr(e->continue_.ptr, 0, e->continue_.len))
        return KINF_EPARSE; /* an rv or a token with a NUL would be cut: refused */
    if (!e->has_items && !e->items_null)
        return KINF_EPARSE; /* not a list: it must not replace the FIFO's content */
    m->list_rv = dup_bytes(e->resource_version.ptr, e->resource_version.len);
    m->list_rv_len = e->resource_version.len;
    m->cont = dup_bytes(e->continue_.ptr, e->continue_.len);
    m->cont_len = e->continue_.len;
    return KINF_OK;
}

/* Scans body as the reflector would; returns the scan's result. */
static kinf_err model_scan(model *m, kinf_scan_mode mode, unsigned flags, size_t max,
                           const char *body, size_t len)
{
    kinf_scan_options o;
    kinf_scanner *s;
    kinf_err e;
    memset(&o, 0, sizeof o);
    o.on_item = model_item;
    o.on_list_end = model_end;
    o.ud = m;
    o.flags = flags;
    o.max_object_bytes = max;
    s = kinf_scanner_new(mode, &o, &e);
    if (s == NULL)
        DIE("scanner_new");
    e = kinf_scanner_feed(s, body, len);
    if (e == KINF_OK && mode == KINF_SCAN_LIST) {
        kinf_str tok;
        if (kinf_scanner_list_continue(s, &tok) && !memchr(tok.ptr, '\0', tok.len)) {
            m->early = dup_bytes(tok.ptr, tok.len);
            m->early_len = tok.len;
        }
    }
    /* A watch that ends inside an event is a dropped connection, not a bad body: the watch
     * resumes, but a clean end there is reported (cut_end). */
    if (e == KINF_OK && mode == KINF_SCAN_LIST)
        e = kinf_scanner_finish(s);
    else if (e == KINF_OK)
        m->cut_end = kinf_scanner_finish(s) != KINF_OK;
    kinf_scanner_free(s);
    if (mode == KINF_SCAN_LIST)
        m->list_ok = e == KINF_OK;
    return e;
}

static void model_free(model *m)
{
    mset_free(&m->temp);
    mset_free(&m->fifo);
    mset_free(&m->listed);
    free(m->list_rv);
    free(m->cont);
    free(m->early);
}

/* ---- consistency of the FIFO and the store ---- */

/* The object's metadata, read back from its own bytes, must be what the record says. */
typedef struct recheck {
    const kinf_object *obj;
    int seen;
} recheck;

static int span_is(kinf_str s, const char *c)
{
    return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

static kinf_err recheck_item(void *ud, const kinf_scan_item *it)
{
    recheck *rc = ud;
    const kinf_object *o = rc->obj;
    rc->seen++;
    /* name/namespace may hold a NUL (\u0000): compare the key, which keeps it. */
    if (it->meta.name.len == 0 || !span_is(it->meta.resource_version, o->resource_version) ||
        !span_is(it->meta.uid, o->uid))
        DIE("record %.*s: metadata differs from its JSON", (int)o->key_len, o->key);
    {
        buf k = {0};
        key_of(&it->meta, &k);
        if (k.len != o->key_len || memcmp(k.p, o->key, k.len) != 0)
            DIE("record key %.*s is not the namespace/name of its JSON", (int)o->key_len, o->key);
        free(k.p);
    }
    return KINF_OK;
}

static recheck *recheck_current; /* the object check_object is looking at */

static kinf_err recheck_cb(void *ud, const kinf_scan_item *it)
{
    (void)ud;
    return recheck_item(recheck_current, it);
}

static void check_object(const kinf_object *o)
{
    static const char pre[] = "{\"type\":\"ADDED\",\"object\":";
    static kinf_scanner *s; /* one for the process: a scanner is 24 KiB to set up */
    recheck rc = {o, 0};
    kinf_err e;

    if (kinf_object_is_tombstone(o)) {
        if (o->key == NULL || o->key_len == 0)
            DIE("tombstone without a key");
        if (o->inner)
            check_object(o->inner);
        return;
    }
    if (o->name == NULL || o->key_len == 0 || o->json == NULL || o->json_len < 2 ||
        o->json[0] != '{' || o->json[o->json_len - 1] != '}')
        DIE("record without a name, a key or object bytes");
    if (s == NULL) {
        kinf_scan_options so;
        memset(&so, 0, sizeof so);
        so.on_item = recheck_cb;
        if ((s = kinf_scanner_new(KINF_SCAN_WATCH, &so, &e)) == NULL)
            DIE("scanner_new");
    }
    kinf_scanner_reset(s, KINF_SCAN_WATCH);
    recheck_current = &rc;
    e = kinf_scanner_feed(s, pre, sizeof pre - 1);
    if (e == KINF_OK)
        e = kinf_scanner_feed(s, o->json, o->json_len);
    if (e == KINF_OK)
        e = kinf_scanner_feed(s, "}", 1);
    if (e == KINF_OK)
        e = kinf_scanner_finish(s);
    if (e != KINF_OK || rc.seen != 1)
        DIE("record %.*s does not re-scan: %s", (int)o->key_len, o->key, kinf_scanner_error(s));
}

static void check_fifo(kinf_fifo *f)
{
    kinf_object **objs = NULL;
    size_t n = 0;
    if (kinf_fifo_list(f, &objs, &n) != KINF_OK)
        DIE("fifo_list");
    if (n != kinf_fifo_len(f))
        DIE("fifo_list gives %zu keys, fifo_len %zu", n, kinf_fifo_len(f));
    for (size_t i = 0; i < n; i++) {
        kinf_deltas d;
        check_object(objs[i]);
        if (kinf_fifo_get_by_key(f, objs[i]->key, objs[i]->key_len, &d) != KINF_OK || d.n == 0)
            DIE("listed key %.*s has no deltas", (int)objs[i]->key_len, objs[i]->key);
        if (kinf_deltas_newest(&d) != objs[i])
            DIE("key %.*s: newest delta is not the listed object", (int)objs[i]->key_len,
                objs[i]->key);
        for (size_t j = 0; j < d.n; j++) {
            check_object(d.v[j].obj);
            if (d.v[j].obj->key_len != objs[i]->key_len ||
                memcmp(d.v[j].obj->key, objs[i]->key, objs[i]->key_len) != 0)
                DIE("a delta of key %.*s has another key", (int)objs[i]->key_len, objs[i]->key);
        }
        kinf_deltas_clear(&d);
    }
    kinf_objects_free(objs, n);
}

/* Compares key's newest delta with the model's expectation. */
static void check_expect(kinf_fifo *f, const mobj *m, int consumer)
{
    kinf_deltas d;
    kinf_err e = kinf_fifo_get_by_key(f, m->key, m->key_len, &d);
    const kinf_delta *last;
    if (m->json == NULL) {
        /* Deleted: queued as a deletion, or not queued (nothing to report). */
        if (e == KINF_OK) {
            if (d.v[d.n - 1].type != KINF_DELTA_DELETED)
                DIE("key %.*s: deleted but its newest delta is %s", (int)m->key_len, m->key,
                    kinf_delta_type_name(d.v[d.n - 1].type));
            kinf_deltas_clear(&d);
        }
        return;
    }
    if (e != KINF_OK)
        DIE("key %.*s is not queued after its %s", (int)m->key_len, m->key,
            kinf_event_type_name((kinf_event_type)m->type));
    last = &d.v[d.n - 1];
    if (last->obj->json_len != m->json_len || memcmp(last->obj->json, m->json, m->json_len) != 0)
        DIE("key %.*s: newest delta does not hold the last object", (int)m->key_len, m->key);
    switch (m->type) {
    case KINF_EV_ADDED:
        if (last->type != KINF_DELTA_ADDED)
            DIE("key %.*s: ADDED gave %s", (int)m->key_len, m->key,
                kinf_delta_type_name(last->type));
        break;
    case KINF_EV_MODIFIED:
        if (last->type != KINF_DELTA_UPDATED)
            DIE("key %.*s: MODIFIED gave %s", (int)m->key_len, m->key,
                kinf_delta_type_name(last->type));
        break;
    default: /* listed */
        if (last->type != KINF_DELTA_REPLACED)
            DIE("key %.*s: listed but newest delta is %s", (int)m->key_len, m->key,
                kinf_delta_type_name(last->type));
    }
    (void)consumer;
    kinf_deltas_clear(&d);
}

static void check_store(kinf_store *s)
{
    kinf_object **objs = NULL;
    size_t n = 0;
    if (s == NULL)
        return;
    if (kinf_store_list(s, &objs, &n) != KINF_OK)
        DIE("store_list");
    for (size_t i = 0; i < n; i++)
        check_object(objs[i]);
    kinf_objects_free(objs, n);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Pops everything, logging each key's deltas; with a store, applies them to it (as an
 * informer). The keys are logged sorted: a replace queues the deletions of known objects in
 * the store's hash order, which is seeded per store. */
static void drain(kinf_fifo *f, kinf_store *store, buf *log)
{
    kinf_deltas d;
    int initial;
    char **lines = NULL;
    size_t n = 0, cap = 0;
    while (kinf_fifo_pop(f, 0, NULL, NULL, &d, &initial) == KINF_OK) {
        buf l = {0};
        buf_add(&l, "\nP", 2);
        buf_num(&l, (unsigned long long)initial);
        for (size_t i = 0; i < d.n; i++) {
            kinf_object *o = d.v[i].obj;
            buf_num(&l, d.v[i].type);
            buf_str(&l, o->key, o->key_len);
            if (kinf_object_is_tombstone(o)) {
                buf_cstr(&l, o->inner ? o->inner->resource_version : "-");
            } else {
                buf_cstr(&l, o->resource_version);
                buf_str(&l, o->json, o->json_len);
            }
        }
        for (size_t i = 0; i < l.len; i++)
            if (l.p[i] == '\0')
                l.p[i] = '0'; /* keys may hold NULs; strcmp sorts the rest */
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            lines = realloc(lines, cap * sizeof(*lines));
            if (lines == NULL)
                abort();
        }
        lines[n++] = l.p;
        if (store != NULL && d.n > 0) {
            kinf_delta *last = &d.v[d.n - 1];
            kinf_object *old = NULL;
            char msg[256];
            if (last->type == KINF_DELTA_DELETED) {
                (void)kinf_store_delete(store, last->obj->key, last->obj->key_len, &old);
            } else if (kinf_store_add(store, last->obj, &old, msg, sizeof msg) != KINF_OK) {
                DIE("store_add failed: %s", msg);
            }
            kinf_object_unref(old);
        }
        kinf_deltas_clear(&d);
    }
    if (n > 1)
        qsort(lines, n, sizeof(*lines), cmp_str);
    for (size_t i = 0; i < n; i++) {
        buf_add(log, lines[i], strlen(lines[i]));
        free(lines[i]);
    }
    free(lines);
}

/* ---- one run of the whole sequence ---- */

typedef struct resp {
    char code;
    const char *body;
    size_t len;
} resp;

static int split(const uint8_t *d, size_t n, resp *out)
{
    int k = 0;
    size_t i = 0, start;
    char code = '2';
    if (n >= 3 && d[0] == '@' && d[1] == '@') {
        code = (char)d[2];
        i = 3;
    }
    start = i;
    for (; i + 2 < n && k < MAX_RESPONSES - 1; i++) {
        if (d[i] == '\n' && d[i + 1] == '@' && d[i + 2] == '@' && i + 3 < n) {
            out[k].code = code;
            out[k].body = (const char *)d + start;
            out[k].len = i + 1 - start;
            k++;
            code = (char)d[i + 3];
            i += 3;
            start = i + 1;
        }
    }
    out[k].code = code;
    out[k].body = (const char *)d + start;
    out[k].len = n - start;
    return k + 1;
}

static void status_log(buf *log, const kinf_reflector_status *st)
{
    buf_add(log, "\nS", 2);
    buf_num(log, (unsigned long long)st->running);
    buf_num(log, (unsigned long long)st->listed);
    buf_cstr(log, st->phase);
    buf_cstr(log, st->resource_version);
    buf_cstr(log, st->last_error);
    buf_num(log, (unsigned long long)st->last_error_code);
    buf_cstr(log, st->last_error_reason);
    buf_num(log, st->lists);
    buf_num(log, st->relists);
    buf_num(log, st->watches);
    buf_num(log, st->watch_restarts);
    buf_num(log, st->events);
    buf_num(log, st->errors);
    /* not bytes: an aborted body is counted up to the chunk where it was aborted */
}

/* Logs the query without its random timeoutSeconds (checked for range instead). */
static void query_log(buf *log, const char *q)
{
    const char *t = strstr(q, "timeoutSeconds=");
    char *v = NULL;
    size_t vl = 0;
    buf_add(log, "\nQ", 2);
    if (t == NULL) {
        buf_cstr(log, q);
        return;
    }
    if (!query_param(q, "timeoutSeconds", &v, &vl))
        DIE("timeoutSeconds");
    if (atol(v) < 300 || atol(v) >= 600)
        DIE("timeoutSeconds %s outside [300, 600)", v);
    free(v);
    buf_str(log, q, (size_t)(t - q));
}

static int trace; /* FUZZ_REFLECTOR_TRACE set: one line per response on stderr */

static void check_error(const kinf_reflector_status *st, const kinf_reflector_status *before)
{
    if (st->errors == before->errors)
        return;
    if (st->last_error[0] == '\0')
        DIE("error counted without a message");
    if (!clean_text(st->last_error))
        DIE("unclean error message: %s", st->last_error);
    if (!clean_text(st->last_error_reason))
        DIE("unclean error reason: %s", st->last_error_reason);
    if (strncmp(st->last_error, "list " PATH, strlen("list " PATH)) != 0 &&
        strncmp(st->last_error, "watch " PATH, strlen("watch " PATH)) != 0)
        DIE("error message does not say which request failed: %s", st->last_error);
}

static void run(unsigned opts, uint32_t seed, const resp *rs, int nr, int chunking, buf *log)
{
    kinf_reflector_config rc = {0};
    kinf_store *store = NULL;
    kinf_fifo *fifo;
    kinf_reflector *r;
    kinf_err err;
    char msg[256];
    scripted sc = {0};
    kinf_transport tr;
    unsigned flags = (opts & 2) ? KINF_SCAN_STRIP_MANAGED_FIELDS : 0u;
    size_t max = (opts & 4) ? SMALL_MAX : 0;
    int consumer = (opts & 8) != 0;
    mset pages = {0}; /* list items of the pages so far (a list in progress) */
    char *want_continue = NULL;
    int cont_expired = 0; /* a continuation page just expired: the next list is the full one */
    int page_failed_pending = 0; /* a page failed at its end after the next one was asked for */
    size_t want_continue_len = 0;

    if (consumer && (store = kinf_store_new(1, &err)) == NULL)
        DIE("store_new");
    fifo = kinf_fifo_new(store, KINF_FIFO_EMIT_REPLACED, &err);
    if (fifo == NULL)
        DIE("fifo_new");
    rc.path = PATH;
    rc.label_selector = "app in (a,b),tier!=x y";
    rc.watch_list = opts & 1;
    rc.strip_managed_fields = (opts & 2) != 0;
    rc.page_size = 2;
    rc.max_object_bytes = max;
    sc.clock = 1000;
    tr = sc_transport(&sc);
    r = kinf_reflector_new(&tr, fifo, &rc, &err, msg, sizeof msg);
    if (r == NULL)
        DIE("reflector_new: %s", msg);
    if (kinf_reflector_start(r) != KINF_OK)
        DIE("start");
    seed |= 1;

    for (int i = 0; i < nr; i++) {
        const resp *p = &rs[i];
        const char *q;
        sc_req req = sc_request(&sc, &q);
        kinf_reflector_status before, st;
        long code = 200;
        double retry = 0, lasted = 5;
        kinf_xfer_result result = KINF_XFER_OK;
        const char *why = "";
        size_t pos = 0;
        int aborted = 0, initial, is_cont, full_list;
        char *param = NULL;
        size_t plen = 0;
        model m;

        if (req == SC_NONE || q == NULL)
            DIE("the reflector asks for nothing");
        query_log(log, q);
        if (query_param(q, "labelSelector", &param, &plen)) {
            if (strcmp(param, rc.label_selector) != 0)
                DIE("labelSelector %s", param);
            free(param);
        } else {
            DIE("no labelSelector in %s", q);
        }
        is_cont = req == SC_LIST && strstr(q, "&continue=") != NULL;
        full_list = req == SC_LIST && cont_expired;
        cont_expired = 0;
        /* The fallback after an expired continuation: one list without limit (client-go's pager
         * FullListIfExpired), whose continue token, if any, is not followed. */
        if (full_list && chunking == 0 && (strstr(q, "limit=") || strstr(q, "continue=")))
            DIE("the full list after an expired continue token is paginated: %s", q);
        /* A continuation page asks for exactly the token of the page before, without rv. */
        if (want_continue != NULL) {
            if (req != SC_LIST || !query_param(q, "continue", &param, &plen))
                DIE("no continuation page after a continue token: %s", q);
            if (plen != want_continue_len || memcmp(param, want_continue, plen) != 0)
                DIE("continue token changed on its way to the request");
            free(param);
            if (query_param(q, "resourceVersion", &param, &plen))
                DIE("continuation page with a resourceVersion");
        } else if (req == SC_LIST && chunking == 0) {
            if (query_param(q, "continue", &param, &plen))
                DIE("continue parameter without a continue token");
            mset_free(&pages);
        }
        free(want_continue);
        want_continue = NULL;
        initial = req == SC_WATCH && strstr(q, "sendInitialEvents=true") != NULL;
        if (req == SC_WATCH) {
            kinf_reflector_status_get(r, &st);
            if (!initial || st.resource_version[0]) {
                if (!query_param(q, "resourceVersion", &param, &plen) ||
                    strcmp(param, st.resource_version) != 0 || plen != strlen(param))
                    DIE("watch from an rv that is not status()'s %s: %s", st.resource_version, q);
                free(param);
            }
        }

        switch (p->code) {
        case 'd': result = KINF_XFER_FAILED; why = "Transferred a partial file"; break;
        case 's': lasted = 0.2; break;
        case 't': result = KINF_XFER_TIMEDOUT; why = "no data for 90 s"; lasted = 100; break;
        case 'g': code = 410; break;
        case 'r': code = 429; retry = 1; break;
        case 'u': code = 503; retry = 2; break;
        case 'e': code = 500; break;
        case 'f': code = 403; break;
        case 'x': code = 504; break;
        case 'c': code = 0; result = KINF_XFER_FAILED; why = "Couldn't connect to server";
                  lasted = 0.01; break;
        case 'i': code = 0; result = KINF_XFER_TIMEDOUT; why = "no data for 90 s"; lasted = 100;
                  break;
        default: break;
        }
        kinf_reflector_status_get(r, &before);
        sc_response(&sc, code, retry);
        while (pos < p->len && !aborted) {
            size_t k = p->len - pos;
            char *chunk;
            if (chunking == 1) {
                k = 1;
            } else if (chunking == 2) {
                uint32_t x = rng(&seed);
                size_t c = (x & 3) == 0 ? 1 + (x >> 8) % 3 : 1 + (x >> 8) % 97;
                if (c < k)
                    k = c;
            }
            chunk = dup_bytes(p->body + pos, k);
            if (sc_body(&sc, chunk, k) == 0)
                aborted = 1;
            free(chunk);
            pos += k;
        }
        if (aborted)
            sc_end(&sc, KINF_XFER_FAILED, "Failed writing received data to disk/application",
                   lasted);
        else
            sc_end(&sc, result, why, lasted);
        kinf_reflector_status_get(r, &st);
        status_log(log, &st);
        check_error(&st, &before);
        if (aborted ? st.bytes > before.bytes + p->len : st.bytes != before.bytes + p->len)
            DIE("bytes counted %llu, sent %zu", st.bytes - before.bytes, p->len);
        /* The chunked runs must give the same log as this one: the costly checks (FIFO
         * content, model) need only run once. */
        if (chunking != 0) {
            if (consumer)
                drain(fifo, store, log);
            continue;
        }
        check_fifo(fifo);

        if (trace)
            fprintf(stderr, "[%d] %s %c (%zu bytes%s) -> errors %lu events %lu rv '%s' %s\n", i,
                    req == SC_LIST ? "list" : "watch", p->code, p->len,
                    aborted ? ", aborted" : "", st.errors, st.events, st.resource_version,
                    st.errors != before.errors ? st.last_error : "");
        if (page_failed_pending) {
            /* The page before was found bad at its end after the reflector had asked for this
             * one (pipelined pages): this response, whatever it is, only reports that. */
            page_failed_pending = 0;
            if (st.errors == before.errors || st.lists != before.lists)
                DIE("a pipelined page's failure was not reported with the next response");
            if (consumer)
                drain(fifo, store, log);
            check_store(store);
            continue;
        }
        /* The model of this response. */
        memset(&m, 0, sizeof m);
        m.initial = initial;
        snprintf(m.start_rv, sizeof(m.start_rv), "%s", before.resource_version);
        if (code == 200) {
            kinf_err me = model_scan(&m, req == SC_LIST ? KINF_SCAN_LIST : KINF_SCAN_WATCH,
                                     flags | (req == SC_LIST ? KINF_SCAN_INJECT_KIND : 0u),
                                     max, p->body, p->len);
            if (req == SC_LIST) {
                for (size_t j = 0; j < m.listed.n; j++)
                    mset_put(&pages, m.listed.v[j].key, m.listed.v[j].key_len,
                             m.listed.v[j].json, m.listed.v[j].json_len, KINF_EV_LIST_ITEM);
                if (result == KINF_XFER_OK && !aborted && m.early != NULL && !full_list) {
                    /* Pipelined: the next page is asked for with the token known before the
                     * page's end was checked; a page that fails there (or whose token then
                     * differs: a second "metadata") is reported with the next response. */
                    want_continue = dup_bytes(m.early, m.early_len);
                    want_continue_len = m.early_len;
                    if (st.errors != before.errors || st.lists != before.lists)
                        DIE("a pipelined page: error or list counted before the next page");
                    page_failed_pending = me != KINF_OK || m.cont_len != m.early_len ||
                                          memcmp(m.cont, m.early, m.early_len) != 0;
                } else if (me != KINF_OK || result != KINF_XFER_OK) {
                    if (st.errors == before.errors)
                        DIE("a failed list page was not reported");
                } else if (m.cont_len && !full_list) {
                    if (st.errors != before.errors || st.lists != before.lists)
                        DIE("a good page with a continue token: error or list counted");
                    want_continue = dup_bytes(m.cont, m.cont_len);
                    want_continue_len = m.cont_len;
                } else {
                    if (st.errors != before.errors || st.lists != before.lists + 1)
                        DIE("a good last page did not complete the list: %s", st.last_error);
                    if (strlen(st.resource_version) != m.list_rv_len ||
                        memcmp(st.resource_version, m.list_rv, m.list_rv_len) != 0)
                        DIE("listed at rv %s, status says %s", m.list_rv, st.resource_version);
                    for (size_t j = 0; j < pages.n; j++)
                        check_expect(fifo, &pages.v[j], consumer);
                    mset_free(&pages);
                }
            } else {
                if (st.events != before.events + m.events)
                    DIE("watch applied %lu events, the model %lu",
                        st.events - before.events, m.events);
                if (m.have_rv && strcmp(st.resource_version, m.rv) != 0)
                    DIE("watch rv %s, the last event's %s", st.resource_version, m.rv);
                for (size_t j = 0; j < m.fifo.n; j++)
                    check_expect(fifo, &m.fifo.v[j], consumer);
                if (m.error_event && st.last_error_code != m.status.code)
                    DIE("ERROR event code %d reported as %d", m.status.code, st.last_error_code);
                if ((me != KINF_OK || m.initial) && st.errors == before.errors)
                    DIE("a failed watch was not reported");
                if (m.cut_end && result == KINF_XFER_OK && !aborted && st.errors == before.errors)
                    DIE("a watch that ended cleanly inside an event was not reported");
            }
        } else if (st.errors == before.errors) {
            DIE("HTTP %ld (0: no response) not reported", code);
        }
        if (is_cont && code != 0 && (code < 200 || code >= 300)) {
            kinf_status es;
            (void)kinf_status_parse(p->body, p->len, &es);
            cont_expired = code == 410 || strcmp(es.reason, "Expired") == 0 ||
                           strcmp(es.reason, "Gone") == 0;
        }
        model_free(&m);
        if (consumer)
            drain(fifo, store, log);
        check_store(store);
    }
    drain(fifo, store, log);
    check_store(store);
    free(want_continue);
    mset_free(&pages);
    kinf_reflector_free(r);
    if (sc.refs != 0 || sc.cur != NULL)
        DIE("the reflector kept a transfer or a transport reference after free");
    kinf_fifo_unref(fifo);
    kinf_store_unref(store);
}

static void same(const buf *a, const buf *b, const char *what)
{
    size_t i = 0;
    if (a->len == b->len && memcmp(a->p, b->p, a->len) == 0)
        return;
    while (i < a->len && i < b->len && a->p[i] == b->p[i])
        i++;
    i = i > 80 ? i - 80 : 0;
    fprintf(stderr, "whole body:  ...%.300s\n%s: ...%.300s\n", a->p + i, what, b->p + i);
    if (getenv("FUZZ_REFLECTOR_LOGS")) { /* FUZZ_REFLECTOR_LOGS=prefix: both logs in files */
        char name[512];
        FILE *f;
        snprintf(name, sizeof name, "%s.whole", getenv("FUZZ_REFLECTOR_LOGS"));
        if ((f = fopen(name, "wb")) != NULL) {
            fwrite(a->p, 1, a->len, f);
            fclose(f);
        }
        snprintf(name, sizeof name, "%s.chunked", getenv("FUZZ_REFLECTOR_LOGS"));
        if ((f = fopen(name, "wb")) != NULL) {
            fwrite(b->p, 1, b->len, f);
            fclose(f);
        }
    }
    DIE("%s changed the outcome", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    resp rs[MAX_RESPONSES];
    buf a = {0}, b = {0}, c = {0};
    unsigned opts;
    uint32_t seed;
    int nr;

    if (size < 2)
        return 0;
    trace = getenv("FUZZ_REFLECTOR_TRACE") != NULL;
    opts = data[0];
    seed = data[1] * 2654435761u;
    nr = split(data + 2, size - 2, rs);
    run(opts, seed, rs, nr, 0, &a);
    run(opts, seed, rs, nr, 2, &b);
    same(&a, &b, "random chunks");
    if (size < 256) {
        run(opts, seed, rs, nr, 1, &c);
        same(&a, &c, "one-byte chunks");
    }
    free(a.p);
    free(b.p);
    free(c.p);
    return 0;
}
