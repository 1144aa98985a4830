/*
 * labelmatch.c - matching label selectors against records' metadata.labels, from the JSON bytes
 * (contract in labelselector.h; the parser is labelselector.c).
 *
 * A record's labels object is found once, by a walk over its top-level members and then
 * metadata's (the last of duplicate keys wins, as lua-cjson decodes), and its offset is kept in
 * the record (labels_at). Each match then walks only the labels object, once per 64
 * requirements, comparing raw key bytes; escaped keys and values are decoded into stack
 * buffers. Nothing allocates, so a store may match under its read lock.
 */
#include <stdatomic.h>
#include <string.h>

#include "jsonspan.h"
#include "labelselector_impl.h"

/* Keys a selector can hold are at most 253 + 1 + 63 bytes; values at most 63. A label whose
 * decoded key or value is longer cannot equal any of them. */
#define KEY_BUF 320
#define VALUE_BUF 128
#define CHUNK 64 /* requirements looked up per walk over the labels */

/* Decodes the body of a JSON string (between its quotes) into out: the length, or
 * (size_t)-1 when it does not fit or an escape is malformed or a lone surrogate. */
static size_t json_unescape(const char *raw, size_t len, char *out, size_t cap)
{
    const unsigned char *s = (const unsigned char *)raw, *end = s + len;
    size_t o = 0;
    while (s < end) {
        unsigned cp;
        size_t used;
        if (*s != '\\') {
            if (o == cap)
                return (size_t)-1;
            out[o++] = (char)*s++;
            continue;
        }
        if ((used = kinf_json_escape(s, end, &cp)) == 0 || cap - o < 4)
            return (size_t)-1;
        s += used;
        o += (size_t)kinf_utf8_put((unsigned char *)out + o, cp);
    }
    return o;
}

/* The string a label's JSON value holds (decoded into buf when escaped): 1, or 0 when the
 * value is not a string or cannot equal any selector value. */
static int label_string(const kinf_str *v, char *buf, size_t cap, kinf_str *out)
{
    const char *raw;
    size_t n;
    if (v->len < 2 || v->ptr[0] != '"')
        return 0;
    raw = v->ptr + 1;
    n = v->len - 2;
    if (memchr(raw, '\\', n) == NULL) {
        out->ptr = raw;
        out->len = n;
        return 1;
    }
    n = json_unescape(raw, n, buf, cap);
    if (n == (size_t)-1)
        return 0;
    out->ptr = buf;
    out->len = n;
    return 1;
}

static int in_set(const ls_req *r, const kinf_str *s)
{
    for (size_t i = 0; i < r->nvals; i++) {
        if (r->vals[i].len == s->len && memcmp(r->vals[i].ptr, s->ptr, s->len) == 0)
            return 1;
    }
    return 0;
}

/* Requirement.Matches; v is the label's JSON value, NULL when the label is absent. */
static int req_matches(const ls_req *r, const kinf_str *v)
{
    char buf[VALUE_BUF];
    kinf_str s;
    long long x;

    switch (r->op) {
    case OP_EXISTS:
        return v != NULL;
    case OP_NOT_EXISTS:
        return v == NULL;
    case OP_IN:
    case OP_EQ:
    case OP_DEQ:
        return v != NULL && label_string(v, buf, sizeof(buf), &s) && in_set(r, &s);
    case OP_NOT_IN:
    case OP_NEQ:
        return v == NULL || !label_string(v, buf, sizeof(buf), &s) || !in_set(r, &s);
    case OP_GT:
    case OP_LT:
        if (v == NULL || !label_string(v, buf, sizeof(buf), &s) || !kinf_ls_parse_int64(s.ptr, s.len, &x))
            return 0;
        return r->op == OP_GT ? x > r->num : x < r->num;
    }
    return 0;
}

int kinf_labelselector_matches_json(const kinf_labelselector *sel, const char *labels, size_t len)
{
    for (size_t base = 0; base < sel->n; base += CHUNK) {
        size_t n = sel->n - base < CHUNK ? sel->n - base : CHUNK;
        const ls_req *reqs = sel->reqs + base;
        kinf_str seen[CHUNK];
        kinf_json_member m;
        size_t pos = 0;
        int rc = -1;

        for (size_t i = 0; i < n; i++)
            seen[i].ptr = NULL;
        /* One walk over the labels finds every requirement's key; the last duplicate wins. */
        while (labels != NULL && (rc = kinf_json_next_member(labels, len, &pos, &m)) == 1) {
            char kbuf[KEY_BUF];
            kinf_str key = m.key;
            if (m.key_escaped) {
                key.len = json_unescape(m.key.ptr, m.key.len, kbuf, sizeof(kbuf));
                if (key.len == (size_t)-1)
                    continue;
                key.ptr = kbuf;
            }
            for (size_t i = 0; i < n; i++) {
                if (reqs[i].key.len == key.len && memcmp(reqs[i].key.ptr, key.ptr, key.len) == 0)
                    seen[i] = m.value;
            }
        }
        if (rc < 0) { /* no labels, or not an object: nothing is set */
            for (size_t i = 0; i < n; i++)
                seen[i].ptr = NULL;
        }
        for (size_t i = 0; i < n; i++) {
            if (!req_matches(&reqs[i], seen[i].ptr ? &seen[i] : NULL))
                return 0;
        }
    }
    return 1;
}

/* Whether member m's key is name (decoding an escaped key). */
static int key_is(const kinf_json_member *m, const char *name, size_t n)
{
    char buf[16];
    size_t len;
    if (!m->key_escaped)
        return m->key.len == n && memcmp(m->key.ptr, name, n) == 0;
    len = json_unescape(m->key.ptr, m->key.len, buf, sizeof(buf));
    return len == n && memcmp(buf, name, n) == 0;
}

/* The offset in json of the object value of the last member `name` of the object at json[0]:
 * 1 and *at, or 0 (absent, not an object, malformed). */
static int member_object(const char *json, size_t len, const char *name, size_t n, size_t *at)
{
    kinf_json_member m;
    size_t pos = 0;
    int rc, has = 0;
    while ((rc = kinf_json_next_member(json, len, &pos, &m)) == 1) {
        if (key_is(&m, name, n)) {
            has = m.value.ptr[0] == '{';
            *at = (size_t)(m.value.ptr - json);
        }
    }
    return rc == 0 && has;
}

int kinf_object_labels_at(const kinf_object *obj, size_t *at)
{
    atomic_uint *cache = (atomic_uint *)&obj->labels_at; /* the record's one mutable field */
    unsigned known = atomic_load_explicit(cache, memory_order_relaxed);
    size_t meta, labels;
    int has;

    if (known == 1 || obj->json == NULL)
        return 0;
    if (known != 0) {
        *at = known;
        return 1;
    }
    has = member_object(obj->json, obj->json_len, "metadata", 8, &meta) &&
          member_object(obj->json + meta, obj->json_len - meta, "labels", 6, &labels);
    if (has)
        labels += meta;
    /* The labels' '{' is never at offset 0 or 1: it sits inside metadata's object, inside the
     * record's, so those two values are free for "not looked up" and "none". Records of 4 GiB
     * and more are walked every time. */
    if (obj->json_len < UINT_MAX)
        atomic_store_explicit(cache, has ? (unsigned)labels : 1u, memory_order_relaxed);
    if (has)
        *at = labels;
    return has;
}

int kinf_labelselector_matches(const kinf_labelselector *sel, const kinf_object *obj)
{
    size_t at;
    if (kinf_object_is_tombstone(obj))
        return 0;
    if (sel->n == 0)
        return 1;
    if (!kinf_object_labels_at(obj, &at))
        return kinf_labelselector_matches_json(sel, NULL, 0);
    return kinf_labelselector_matches_json(sel, obj->json + at, obj->json_len - at);
}
