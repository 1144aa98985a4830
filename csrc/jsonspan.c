/*
 * jsonspan.c - top-level members of a JSON object as spans. Contract in jsonspan.h.
 */
#include <string.h>

#include "jsonspan.h"

static size_t skip_ws(const char *s, size_t len, size_t i)
{
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>
#define SPAN_SSE2 1
#endif

/* Bit k set when s[k] (k < n <= 16) is '"' or '\\', or (with structure) '{', '}', '[' or ']'.
 * SSE2 for whole blocks of 16 where available. */
static unsigned special_mask(const char *s, size_t n, int structure)
{
    unsigned mask = 0;
#ifdef SPAN_SSE2
    if (n == 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                   _mm_cmpeq_epi8(x, _mm_set1_epi8('\\')));
        if (structure) {
            /* '[' | 0x20 == '{' and ']' | 0x20 == '}'; no other byte maps onto them. */
            __m128i folded = _mm_or_si128(x, _mm_set1_epi8(0x20));
            hit = _mm_or_si128(hit, _mm_or_si128(_mm_cmpeq_epi8(folded, _mm_set1_epi8('{')),
                                                 _mm_cmpeq_epi8(folded, _mm_set1_epi8('}'))));
        }
        return (unsigned)_mm_movemask_epi8(hit);
    }
#endif
    for (size_t k = 0; k < n; k++) {
        char c = s[k];
        if (c == '"' || c == '\\' ||
            (structure && (c == '{' || c == '}' || c == '[' || c == ']')))
            mask |= 1u << k;
    }
    return mask;
}

/* i is just past an opening quote: returns the index of the closing quote, or len. *escaped
 * (when given) is set when the string contains a backslash. */
static size_t string_end(const char *s, size_t len, size_t i, int *escaped)
{
    size_t skip_to = 0; /* a byte before this is escaped */
    if (escaped != NULL)
        *escaped = 0;
    for (; i < len; i += 16) {
        unsigned mask = special_mask(s + i, len - i < 16 ? len - i : 16, 0);
        while (mask) {
            size_t p = i + (size_t)__builtin_ctz(mask);
            mask &= mask - 1;
            if (p < skip_to)
                continue;
            if (s[p] == '"')
                return p;
            if (escaped != NULL)
                *escaped = 1;
            skip_to = p + 2; /* the backslash and the byte it escapes */
        }
    }
    return len;
}

/* s[i] is '{' or '[': returns the index just past the matching bracket, or len + 1 when the
 * input ends first or closes more than it opened. Walks blocks of 16 bytes and visits only the
 * quotes, backslashes and brackets in them. */
static size_t container_end(const char *s, size_t len, size_t i)
{
    size_t depth = 0, skip_to = 0;
    int in_string = 0;
    for (; i < len; i += 16) {
        unsigned mask = special_mask(s + i, len - i < 16 ? len - i : 16, 1);
        while (mask) {
            size_t p = i + (size_t)__builtin_ctz(mask);
            char c = s[p];
            mask &= mask - 1;
            if (p < skip_to)
                continue;
            if (in_string) {
                if (c == '\\')
                    skip_to = p + 2;
                else if (c == '"')
                    in_string = 0;
            } else if (c == '"') {
                in_string = 1;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (depth == 0)
                    return len + 1;
                if (--depth == 0)
                    return p + 1;
            }
        }
    }
    return len + 1;
}

/* Returns the index just past the value starting at i, or len + 1 on malformed input. */
static size_t value_end(const char *s, size_t len, size_t i)
{
    if (i >= len)
        return len + 1;
    if (s[i] == '"') {
        i = string_end(s, len, i + 1, NULL);
        return i >= len ? len + 1 : i + 1;
    }
    if (s[i] == '{' || s[i] == '[')
        return container_end(s, len, i);
    /* A scalar: runs to the next delimiter. */
    while (i < len && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n' &&
           s[i] != '\r' && s[i] != '\t')
        i++;
    return i;
}

int kinf_json_next_member(const char *json, size_t len, size_t *pos, kinf_json_member *m)
{
    size_t i = *pos, k, v;

    if (i == 0) {
        i = skip_ws(json, len, 0);
        if (i >= len || json[i] != '{')
            return -1;
        i++;
    }
    i = skip_ws(json, len, i);
    if (i < len && json[i] == ',')
        i = skip_ws(json, len, i + 1);
    if (i >= len)
        return -1;
    if (json[i] == '}') {
        *pos = i;
        return 0;
    }
    if (json[i] != '"')
        return -1;
    m->key_escaped = 0;
    k = string_end(json, len, i + 1, &m->key_escaped);
    if (k >= len)
        return -1;
    m->key.ptr = json + i + 1;
    m->key.len = k - i - 1;
    i = skip_ws(json, len, k + 1);
    if (i >= len || json[i] != ':')
        return -1;
    i = skip_ws(json, len, i + 1);
    v = value_end(json, len, i);
    if (v > len || v == i)
        return -1;
    m->value.ptr = json + i;
    m->value.len = v - i;
    *pos = v;
    return 1;
}

int kinf_json_find_member(const char *json, size_t len, const char *key, size_t key_len,
                          kinf_str *value)
{
    kinf_json_member m;
    size_t pos = 0;
    int rc, found = 0;

    /* Every member is looked at: with duplicate keys the last one wins, as in lua-cjson. */
    while ((rc = kinf_json_next_member(json, len, &pos, &m)) == 1) {
        if (m.key_escaped)
            return -1;
        if (m.key.len == key_len && memcmp(m.key.ptr, key, key_len) == 0) {
            *value = m.value;
            found = 1;
        }
    }
    return rc < 0 ? -1 : found;
}
