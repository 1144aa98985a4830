/* test_labelselector.c - label selectors from C: every operator, blanks, the empty selector,
 * value sets, apimachinery's error messages with their positions, key and value validation,
 * matching raw JSON (escapes, duplicates, non-string values, more than 64 requirements), and
 * records (the cached labels offset, read by racing threads under TSan). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "labelselector.h"

static kinf_labelselector *parse(const char *s)
{
    kinf_labelselector *sel = NULL;
    char msg[1024];
    size_t pos;
    kinf_err e = kinf_labelselector_parse(s, strlen(s), &sel, &pos, msg, sizeof(msg));
    if (e != KINF_OK)
        fprintf(stderr, "parse(\"%s\"): %s (at %zu)\n", s, msg, pos);
    CHECK(e == KINF_OK && sel != NULL);
    return sel;
}

/* Whether selector s matches the labels object json. */
static int match(const char *s, const char *json)
{
    kinf_labelselector *sel = parse(s);
    int m = sel ? kinf_labelselector_matches_json(sel, json, json ? strlen(json) : 0) : -1;
    kinf_labelselector_free(sel);
    return m;
}

/* The error for s, as "POS: message" (POS the 0-based offset). */
static const char *error_of(const char *s, size_t len)
{
    static char out[2200];
    kinf_labelselector *sel = NULL;
    char msg[2048];
    size_t pos = 99999;
    kinf_err e = kinf_labelselector_parse(s, len, &sel, &pos, msg, sizeof(msg));
    if (e != KINF_EINVAL || sel != NULL) {
        kinf_labelselector_free(sel);
        return "(parsed)";
    }
    snprintf(out, sizeof(out), "%zu: %s", pos, msg);
    return out;
}

#define ERR(s) error_of((s), strlen(s))

static void empty_selector_matches_everything(void)
{
    const char *empties[] = {"", "   ", " \t\r\n "};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        kinf_labelselector *sel = parse(empties[i]);
        CHECK(sel != NULL && kinf_labelselector_len(sel) == 0);
        if (sel != NULL) {
            CHECK(kinf_labelselector_matches_json(sel, "{\"a\":\"b\"}", 9));
            CHECK(kinf_labelselector_matches_json(sel, "{}", 2));
            CHECK(kinf_labelselector_matches_json(sel, NULL, 0));
        }
        kinf_labelselector_free(sel);
    }
}

static void equality_operators(void)
{
    const char *web = "{\"app\":\"web\",\"tier\":\"front\"}";
    CHECK(match("app=web", web));
    CHECK(match("app==web", web));
    CHECK(!match("app=db", web));
    CHECK(!match("app=web", "{}"));
    CHECK(!match("app=web", NULL));
    CHECK(match("app!=db", web));
    CHECK(!match("app!=web", web));
    CHECK(match("app!=web", "{\"tier\":\"x\"}")); /* absent: != holds */
    CHECK(match("app=web,tier=front", web));     /* comma = AND */
    CHECK(!match("app=web,tier=back", web));
    /* an empty value: "key=" and "key==" */
    CHECK(match("app=", "{\"app\":\"\"}"));
    CHECK(!match("app=", web));
    CHECK(match("app==,tier", "{\"app\":\"\",\"tier\":\"x\"}"));
    CHECK(match("app!=", web));
}

static void set_operators(void)
{
    const char *web = "{\"app\":\"web\"}";
    CHECK(match("app in (web,db)", web));
    CHECK(match("app in (db,web)", web));
    CHECK(!match("app in (db,cache)", web));
    CHECK(!match("app in (web)", "{}"));
    CHECK(match("app notin (db,cache)", web));
    CHECK(!match("app notin (db,web)", web));
    CHECK(match("app notin (web)", "{}")); /* absent: notin holds */
    /* empty values inside a set, as apimachinery reads them */
    CHECK(match("app in (a,,b)", "{\"app\":\"\"}"));
    CHECK(match("app in (a,)", "{\"app\":\"\"}"));
    CHECK(match("app in (,a)", "{\"app\":\"a\"}"));
    CHECK(match("app in (,a)", "{\"app\":\"\"}"));
    CHECK(!match("app in (a,b)", "{\"app\":\"\"}"));
    /* "in ()" is the set {""}: kubectl accepts it */
    CHECK(match("app in ()", "{\"app\":\"\"}"));
    CHECK(!match("app in ()", web));
    CHECK(!match("app in ()", "{}"));
    CHECK(match("app notin ()", web));
    CHECK(!match("app notin ()", "{\"app\":\"\"}"));
    /* duplicates in a set are one value */
    CHECK(match("app in (web,web,web)", web));
    /* "in" and "notin" are values (and keys) where a value (key) is expected */
    CHECK(match("app in (in,notin)", "{\"app\":\"notin\"}"));
    CHECK(match("in=notin", "{\"in\":\"notin\"}"));
    CHECK(match("notin in (in)", "{\"notin\":\"in\"}"));
    CHECK(match("app=in", "{\"app\":\"in\"}"));
    CHECK(match("in", "{\"in\":\"x\"}"));
}

static void existence_operators(void)
{
    CHECK(match("app", "{\"app\":\"\"}"));
    CHECK(!match("app", "{\"tier\":\"x\"}"));
    CHECK(!match("app", NULL));
    CHECK(match("!app", "{\"tier\":\"x\"}"));
    CHECK(match("!app", NULL));
    CHECK(!match("!app", "{\"app\":\"x\"}"));
    CHECK(match("tier,!app", "{\"tier\":\"x\"}"));
    CHECK(match("example.com/role", "{\"example.com/role\":\"x\"}"));
}

static void numeric_operators(void)
{
    CHECK(match("n>5", "{\"n\":\"6\"}"));
    CHECK(!match("n>5", "{\"n\":\"5\"}"));
    CHECK(match("n<5", "{\"n\":\"4\"}"));
    CHECK(match("n<5", "{\"n\":\"-40\"}"));
    CHECK(!match("n<5", "{\"n\":\"5\"}"));
    CHECK(!match("n>5", "{}"));
    CHECK(!match("n<5", "{\"n\":\"x\"}"));
    CHECK(!match("n<5", "{\"n\":\"\"}"));
    CHECK(match("n>9223372036854775806", "{\"n\":\"9223372036854775807\"}"));
    CHECK(!match("n>1", "{\"n\":\"9223372036854775808\"}")); /* out of range: not an integer */
    CHECK(match("n<0", "{\"n\":\"-9223372036854775808\"}"));
    CHECK(match("n>1,n<3", "{\"n\":\"2\"}"));
}

static void blanks_around_tokens(void)
{
    const char *labels = "{\"app\":\"web\",\"tier\":\"front\",\"x\":\"1\"}";
    CHECK(match("  app = web  ,  tier  in  (  front  ,  back  )  ", labels));
    CHECK(match("app\t==\tweb,\ntier notin(back),\r\n x", labels));
    CHECK(match("app!=db , ! zone", labels));
    CHECK(match("app in(web)", labels));
    CHECK(match("app=web,x>0,x < 2", labels));
}

static void duplicate_keys_are_anded(void)
{
    const char *web = "{\"app\":\"web\"}";
    CHECK(!match("app=web,app=db", web));
    CHECK(match("app,app!=db", web));
    CHECK(match("app in (web,db),app notin (db)", web));
    CHECK(!match("app,!app", web));
}

static void record_json_details(void)
{
    /* escaped keys and values (lua-cjson writes "/" as "\/") */
    CHECK(match("app.kubernetes.io/name=web", "{\"app.kubernetes.io\\/name\":\"web\"}"));
    CHECK(match("app=web", "{\"\\u0061pp\":\"w\\u0065b\"}"));
    CHECK(!match("app=web", "{\"app\":\"w\\\"eb\"}"));
    CHECK(match("app!=web", "{\"app\":\"w\\\"eb\"}"));
    /* the last of duplicate keys wins, as lua-cjson decodes */
    CHECK(match("app=web", "{\"app\":\"db\",\"app\":\"web\"}"));
    CHECK(!match("app=db", "{\"app\":\"db\",\"app\":\"web\"}"));
    /* a non-string value exists but equals nothing and is no integer */
    CHECK(match("app", "{\"app\":5}"));
    CHECK(!match("app=5", "{\"app\":5}"));
    CHECK(match("app!=5", "{\"app\":5}"));
    CHECK(!match("app>1", "{\"app\":5}"));
    CHECK(match("app", "{\"app\":null}"));
    /* labels that are not an object: none */
    CHECK(match("!app", "null"));
    CHECK(!match("app", "[\"app\"]"));
    /* blanks in the JSON, and bytes after the object are not read */
    CHECK(match("app=web", " { \"app\" : \"web\" } ,\"tail\"garbage"));
}

static void many_requirements(void)
{
    /* more than one walk over the labels (64 requirements each) */
    char sel[4096] = "", labels[4096] = "{";
    for (int i = 0; i < 150; i++) {
        char part[32];
        snprintf(part, sizeof(part), "%sk%d=v%d", i ? "," : "", i, i);
        strcat(sel, part);
        snprintf(part, sizeof(part), "%s\"k%d\":\"v%d\"", i ? "," : "", i, i);
        strcat(labels, part);
    }
    strcat(labels, "}");
    CHECK(match(sel, labels));
    {
        char *p = strstr(labels, "\"v149\"");
        p[4] = '8'; /* k149 = v148 */
        CHECK(!match(sel, labels));
        p[4] = '9';
        CHECK(match(sel, labels));
        p = strstr(labels, "\"v3\"");
        p[2] = '4';
        CHECK(!match(sel, labels));
    }
}

static void syntax_errors_with_positions(void)
{
    CHECK_STR(ERR("app in (a"), "9: unable to parse requirement: found '', expected: ',' or ')'");
    CHECK_STR(ERR("app=web,"), "8: found '', expected: identifier after ','");
    CHECK_STR(ERR("app=web, ,x"), "9: found ',', expected: identifier after ','");
    CHECK_STR(ERR(",app"), "0: found ',', expected: !, identifier, or 'end of string'");
    CHECK_STR(ERR("=web"), "0: found '=', expected: !, identifier, or 'end of string'");
    CHECK_STR(ERR("app web"),
              "4: unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, gt, lt");
    CHECK_STR(ERR("app in a"), "7: unable to parse requirement: found 'a' expected: '('");
    CHECK_STR(ERR("app in"), "6: unable to parse requirement: found '' expected: '('");
    CHECK_STR(ERR("app in (a b)"), "10: unable to parse requirement: found 'b', expected: ',' or ')'");
    CHECK_STR(ERR("app in (=)"),
              "8: unable to parse requirement: found '=', expected: ',', ')' or identifier");
    CHECK_STR(ERR("app in (,,)"),
              "10: unable to parse requirement: found ')', expected: ',', or identifier");
    CHECK_STR(ERR("app=web tier"), "8: found 'tier', expected: ',' or 'end of string'");
    CHECK_STR(ERR("app=web)"), "7: found ')', expected: ',' or 'end of string'");
    CHECK_STR(ERR("!app=web"), "4: found '=', expected: ',' or 'end of string'");
    CHECK_STR(ERR("!"), "1: unable to parse requirement: found '', expected: identifier");
    CHECK_STR(ERR("!!app"), "1: unable to parse requirement: found '!', expected: identifier");
    CHECK_STR(ERR("app=(x)"), "4: unable to parse requirement: found '(', expected: identifier");
    CHECK_STR(ERR("app===x"), "5: unable to parse requirement: found '=', expected: identifier");
    CHECK_STR(ERR("app=x=y"), "5: found '=', expected: ',' or 'end of string'");
}

static void key_validation(void)
{
    char key64[80];
    const char *rule = "must consist of alphanumeric characters, '-', '_' or '.', and must start "
                       "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                       "'123-abc', regex used for validation is "
                       "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    char want[1200];

    snprintf(want, sizeof(want),
             "0: unable to parse requirement: <nil>: Invalid value: \"-app\": name part %s", rule);
    CHECK_STR(ERR("-app=x"), want);
    snprintf(want, sizeof(want),
             "2: unable to parse requirement: <nil>: Invalid value: \"a_\": name part %s", rule);
    CHECK_STR(ERR("x,a_"), want);
    snprintf(want, sizeof(want),
             "0: unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name %s "
             "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')", rule);
    CHECK_STR(ERR("a/b/c=x"), want);
    CHECK_STR(ERR("/a"), "0: unable to parse requirement: <nil>: Invalid value: \"/a\": prefix "
                         "part must be non-empty");
    snprintf(want, sizeof(want),
             "1: unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be "
             "non-empty; name part %s", rule);
    CHECK_STR(ERR("!a/"), want);
    CHECK_STR(ERR("Example.com/a"),
              "0: unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix "
              "part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
              "characters, '-' or '.', and must start and end with an alphanumeric character "
              "(e.g. 'example.com', regex used for validation is "
              "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
    CHECK(strstr(ERR("a..b/x"), "prefix part a lowercase RFC 1123") != NULL);
    CHECK_STR(ERR("a.b-c.d/x_y.Z"), "(parsed)");
    memset(key64, 'k', 64);
    key64[64] = '\0';
    snprintf(want, sizeof(want),
             "0: unable to parse requirement: <nil>: Invalid value: \"%s\": name part must be no "
             "more than 63 characters", key64);
    CHECK_STR(ERR(key64), want);
    key64[63] = '\0';
    CHECK_STR(ERR(key64), "(parsed)");
    /* quoting as Go's %q: quotes, backslashes, control bytes; a NUL is an invalid byte */
    CHECK(strstr(ERR("a\"b"), "Invalid value: \"a\\\"b\"") != NULL);
    CHECK(strstr(ERR("a\\b"), "Invalid value: \"a\\\\b\"") != NULL);
    CHECK(strstr(ERR("a\x01" "b"), "Invalid value: \"a\\x01b\"") != NULL);
    CHECK(strstr(error_of("a\0b=c", 5), "Invalid value: \"a\\x00b\"") != NULL);
    CHECK(strstr(ERR("caf\xc3\xa9"), "Invalid value: \"caf\xc3\xa9\"") != NULL);
    CHECK(strstr(ERR("x\xff"), "Invalid value: \"x\\xff\"") != NULL);
}

static void value_validation(void)
{
    const char *rule = "a valid label must be an empty string or consist of alphanumeric "
                       "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                       "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
                       "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    char want[3000], v64[80];

    snprintf(want, sizeof(want),
             "4: unable to parse requirement: values[0][app]: Invalid value: \"-web\": %s", rule);
    CHECK_STR(ERR("app=-web"), want);
    /* several bad values: sorted as a set, aggregated in brackets; the position is the first
     * reported value's */
    snprintf(want, sizeof(want),
             "12: unable to parse requirement: [values[1][app]: Invalid value: \"a-\": %s, "
             "values[2][app]: Invalid value: \"b-\": %s]", rule, rule);
    CHECK_STR(ERR("app in (b-, a-, a)"), want);
    memset(v64, 'v', 64);
    memcpy(v64, "a=", 2);
    v64[66] = '\0';
    memset(v64 + 2, 'v', 64);
    snprintf(want, sizeof(want),
             "2: unable to parse requirement: values[0][a]: Invalid value: \"%s\": must be no more "
             "than 63 characters", v64 + 2);
    CHECK_STR(ERR(v64), want);
    v64[65] = '\0';
    CHECK_STR(ERR(v64), "(parsed)");
    CHECK_STR(ERR("n>a"), "2: unable to parse requirement: values[0]: Invalid value: \"a\": for "
                          "'Gt', 'Lt' operators, the value must be an integer");
    CHECK_STR(ERR("n<"), "2: unable to parse requirement: values[0]: Invalid value: \"\": for "
                         "'Gt', 'Lt' operators, the value must be an integer");
    snprintf(want, sizeof(want),
             "2: unable to parse requirement: [values[0]: Invalid value: \"a-\": for 'Gt', 'Lt' "
             "operators, the value must be an integer, values[0][n]: Invalid value: \"a-\": %s]",
             rule);
    CHECK_STR(ERR("n>a-"), want);
    snprintf(want, sizeof(want),
             "2: unable to parse requirement: values[0][n]: Invalid value: \"-1\": %s", rule);
    CHECK_STR(ERR("n>-1"), want);
    CHECK_STR(ERR("app in (My_Value-1.x,12345)"), "(parsed)");
}

static void truncated_messages_stay_terminated(void)
{
    kinf_labelselector *sel = NULL;
    char small[16];
    size_t pos;
    CHECK(kinf_labelselector_parse("app in (a", 9, &sel, &pos, small, sizeof(small)) == KINF_EINVAL);
    CHECK(sel == NULL && strlen(small) == sizeof(small) - 1 && pos == 9);
    CHECK(kinf_labelselector_parse("app in (a", 9, &sel, &pos, NULL, 0) == KINF_EINVAL);
}

static kinf_object *record(const char *json)
{
    kinf_err err;
    kinf_meta meta = {{"ns", 2}, {"p", 1}, {"", 0}, {"1", 1}};
    kinf_object *o = kinf_object_new(json, strlen(json), &meta, &err);
    CHECK(o != NULL);
    return o;
}

static void records_and_the_cached_labels_offset(void)
{
    kinf_labelselector *sel = parse("app=web,!gone");
    kinf_object *a = record("{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"labels\":{\"app\":"
                            "\"web\"},\"annotations\":{\"labels\":\"x\"}},\"spec\":{\"labels\":{}}}");
    kinf_object *b = record("{\"metadata\":{\"name\":\"p\"},\"labels\":{\"app\":\"web\"}}");
    kinf_object *c = record("{\"metadata\":{\"name\":\"p\",\"labels\":null}}");
    kinf_object *d = record("{\"metadata\":{\"labels\":{\"app\":\"db\"}},\"metadata\":{\"name\":"
                            "\"p\",\"labels\":{\"app\":\"web\"}}}");
    kinf_object *e = record("{\"meta\\u0064ata\":{\"name\":\"p\",\"labels\":{\"app\":\"web\"}}}");
    kinf_err err;
    kinf_object *t = kinf_tombstone_new("ns/p", 4, a, &err);
    size_t at = 0;

    for (int round = 0; round < 2; round++) { /* the second round reads the cached offsets */
        CHECK(kinf_labelselector_matches(sel, a));
        CHECK(!kinf_labelselector_matches(sel, b)); /* top-level "labels" are not metadata's */
        CHECK(!kinf_labelselector_matches(sel, c));
        CHECK(kinf_labelselector_matches(sel, d));  /* the last "metadata" counts */
        CHECK(kinf_labelselector_matches(sel, e));
        CHECK(!kinf_labelselector_matches(sel, t));
        CHECK(kinf_object_labels_at(a, &at) == 1 && strncmp(a->json + at, "{\"app\"", 6) == 0);
        CHECK(kinf_object_labels_at(b, &at) == 0);
        CHECK(kinf_object_labels_at(c, &at) == 0);
    }
    kinf_labelselector_free(sel);
    sel = parse("");
    CHECK(kinf_labelselector_matches(sel, b)); /* no requirements: everything */
    kinf_labelselector_free(sel);
    kinf_object_unref(t);
    kinf_object_unref(a);
    kinf_object_unref(b);
    kinf_object_unref(c);
    kinf_object_unref(d);
    kinf_object_unref(e);
}

struct race {
    kinf_labelselector *sel;
    kinf_object **objs;
    size_t n, hits;
};

static void *match_all(void *arg)
{
    struct race *r = arg;
    for (size_t i = 0; i < r->n; i++)
        r->hits += (size_t)kinf_labelselector_matches(r->sel, r->objs[i]);
    return NULL;
}

static void threads_share_a_selector_and_fill_the_cache(void)
{
    enum { N = 200, T = 4 };
    kinf_object *objs[N];
    struct race r[T];
    pthread_t th[T];
    kinf_labelselector *sel = parse("app in (web,db),tier!=cache");

    for (size_t i = 0; i < N; i++) {
        char json[160];
        snprintf(json, sizeof(json), "{\"metadata\":{\"name\":\"p\",\"labels\":{\"app\":\"%s\","
                                     "\"tier\":\"%s\"}}}",
                 i % 3 == 0 ? "web" : i % 3 == 1 ? "db" : "x", i % 2 ? "cache" : "front");
        objs[i] = record(json);
    }
    for (int t = 0; t < T; t++) {
        r[t] = (struct race){sel, objs, N, 0};
        CHECK(pthread_create(&th[t], NULL, match_all, &r[t]) == 0);
    }
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        CHECK(r[t].hits == 67); /* i % 6 in {0, 4}: 34 + 33 */
    }
    for (size_t i = 0; i < N; i++)
        kinf_object_unref(objs[i]);
    kinf_labelselector_free(sel);
}

TEST_MAIN(TEST(empty_selector_matches_everything), TEST(equality_operators), TEST(set_operators),
          TEST(existence_operators), TEST(numeric_operators), TEST(blanks_around_tokens),
          TEST(duplicate_keys_are_anded), TEST(record_json_details), TEST(many_requirements),
          TEST(syntax_errors_with_positions), TEST(key_validation), TEST(value_validation),
          TEST(truncated_messages_stay_terminated), TEST(records_and_the_cached_labels_offset),
          TEST(threads_share_a_selector_and_fill_the_cache))
