/* test_jsonspan.c - top-level member spans: nesting, strings with escaped quotes, scalars,
 * duplicates (last wins), escaped keys, and malformed or truncated input at every length. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "jsonspan.h"

static int find(const char *json, const char *key, char *out, size_t cap)
{
    kinf_str v;
    int rc = kinf_json_find_member(json, strlen(json), key, strlen(key), &v);
    if (rc == 1) {
        size_t n = v.len < cap - 1 ? v.len : cap - 1;
        memcpy(out, v.ptr, n);
        out[n] = '\0';
    }
    return rc;
}

static void members(void)
{
    const char *j = " { \"kind\" : \"Pod\", \"metadata\":{\"name\":\"a\",\"x\":[1,{\"}\":\"]\"}]},"
                    "\"spec\":{\"s\":\"q\\\"}\"},\"n\":-1.5e3,\"t\":true,\"z\":null} ";
    char v[128];
    CHECK(find(j, "kind", v, sizeof(v)) == 1);
    CHECK_STR(v, "\"Pod\"");
    CHECK(find(j, "metadata", v, sizeof(v)) == 1);
    CHECK_STR(v, "{\"name\":\"a\",\"x\":[1,{\"}\":\"]\"}]}");
    CHECK(find(j, "spec", v, sizeof(v)) == 1);
    CHECK_STR(v, "{\"s\":\"q\\\"}\"}");
    CHECK(find(j, "n", v, sizeof(v)) == 1);
    CHECK_STR(v, "-1.5e3");
    CHECK(find(j, "t", v, sizeof(v)) == 1);
    CHECK_STR(v, "true");
    CHECK(find(j, "z", v, sizeof(v)) == 1);
    CHECK_STR(v, "null");
    CHECK(find(j, "name", v, sizeof(v)) == 0); /* nested keys are not members */
    CHECK(find(j, "status", v, sizeof(v)) == 0);
    CHECK(find("{}", "a", v, sizeof(v)) == 0);
}

static void iteration(void)
{
    const char *j = "{\"a\":1,\"b\":[2,3],\"c\":\"\\\\\"}";
    const char *keys[] = {"a", "b", "c"};
    const char *vals[] = {"1", "[2,3]", "\"\\\\\""};
    kinf_json_member m;
    size_t pos = 0;
    int i = 0, rc;
    while ((rc = kinf_json_next_member(j, strlen(j), &pos, &m)) == 1) {
        CHECK(i < 3);
        if (i >= 3)
            break;
        CHECK(m.key.len == strlen(keys[i]) && memcmp(m.key.ptr, keys[i], m.key.len) == 0);
        CHECK(m.value.len == strlen(vals[i]) && memcmp(m.value.ptr, vals[i], m.value.len) == 0);
        CHECK(!m.key_escaped);
        i++;
    }
    CHECK(rc == 0);
    CHECK(i == 3);
}

static void duplicates_and_escapes(void)
{
    char v[64];
    CHECK(find("{\"a\":1,\"a\":2}", "a", v, sizeof(v)) == 1);
    CHECK_STR(v, "2");
    /* An escaped key may spell the one asked for: the caller must decode. */
    CHECK(find("{\"\\u0061\":1}", "a", v, sizeof(v)) == -1);
    CHECK(find("{\"a\\\"b\":1}", "x", v, sizeof(v)) == -1);
}

static void malformed(void)
{
    const char *bad[] = {"", "[]", "\"a\"", "{", "{\"a\"", "{\"a\":", "{\"a\":}", "{\"a\":1",
                         "{\"a\":{\"b\":1}", "{\"a\":\"x}", "{a:1}", "{\"a\" 1}", "{\"a\":]}"};
    char v[16];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(find(bad[i], "zz", v, sizeof(v)) == -1);
}

/* Every prefix of a valid object is handled in bounds (ASan checks) and never found whole. */
static void truncations(void)
{
    const char *j = "{\"metadata\":{\"name\":\"a\\\"b\",\"l\":[1,2]},\"spec\":{\"x\":\"}\"}}";
    size_t len = strlen(j);
    for (size_t n = 0; n < len; n++) {
        char *copy = malloc(n ? n : 1);
        kinf_str v;
        memcpy(copy, j, n);
        CHECK(kinf_json_find_member(copy, n, "spec", 4, &v) == -1);
        free(copy);
    }
}

/* Values longer than the 16-byte blocks the skipping loops read: an escaped quote, escaped
 * backslashes and braces inside strings at every offset, brackets across block edges; then
 * every prefix, so a backslash as the last byte is read in bounds too. */
static void long_values(void)
{
    char json[512], want[400], v[400], pad[41];
    for (size_t off = 0; off < 40; off++) {
        memset(pad, 'x', off);
        pad[off] = '\0';
        snprintf(want, sizeof(want),
                 "{\"s\":\"%s\\\"}]\\\\\",\"l\":[[%s],{\"k\":\"%s{[\"}],\"t\":\"%s\"}", pad,
                 "1,2,3,4,5,6,7,8,9", pad, pad);
        snprintf(json, sizeof(json), "{\"%skey\":1,\"spec\":%s,\"z\":\"%s\\\\\"}", pad, want,
                 pad);
        CHECK(find(json, "spec", v, sizeof(v)) == 1);
        CHECK_STR(v, want);
        CHECK(find(json, "z", v, sizeof(v)) == 1);
        for (size_t n = 0; n < strlen(json); n++) {
            kinf_str span;
            char *copy = malloc(n ? n : 1);
            memcpy(copy, json, n);
            CHECK(kinf_json_find_member(copy, n, "z", 1, &span) == -1);
            free(copy);
        }
    }
}

TEST_MAIN(TEST(members), TEST(iteration), TEST(duplicates_and_escapes), TEST(malformed),
          TEST(truncations), TEST(long_values))
