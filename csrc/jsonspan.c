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

/* i is just past an opening quote: returns the index of the closing quote, or len. *escaped
 * (when given) is set when the string contains a backslash. */
static size_t string_end(const char *s, size_t len, size_t i, int *escaped)
{
    size_t start = i;
    while (i < len) {
        const char *q = memchr(s + i, '"', len - i);
        size_t j, bs = 0;
        if (q == NULL)
            return len;
        j = (size_t)(q - s);
        /* A quote preceded by an odd number of backslashes is escaped. */
        while (j - bs > start && s[j - bs - 1] == '\\')
            bs++;
        if ((bs & 1) == 0) {
            if (escaped != NULL)
                *escaped = memchr(s + start, '\\', j - start) != NULL;
            return j;
        }
        i = j + 1;
    }
    return len;
}

/* Returns the index just past the value starting at i, or len + 1 on malformed input. */
static size_t value_end(const char *s, size_t len, size_t i)
{
    size_t depth = 0;
    if (i >= len)
        return len + 1;
    if (s[i] != '{' && s[i] != '[' && s[i] != '"') {
        /* A scalar: runs to the next delimiter. */
        while (i < len && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' &&
               s[i] != '\n' && s[i] != '\r' && s[i] != '\t')
            i++;
        return i;
    }
    while (i < len) {
        char c = s[i];
        if (c == '"') {
            i = string_end(s, len, i + 1, NULL);
            if (i >= len)
                return len + 1;
            i++;
            if (depth == 0)
                return i;
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return len + 1;
            if (--depth == 0)
                return i + 1;
        }
        i++;
    }
    return len + 1;
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
