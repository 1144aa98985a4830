/* test_warning.c - Warning header parsing (client-go's cases) and the once-per-text record. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "warning.h"

typedef struct got {
    char texts[8][KINF_WARNING_MAX];
    size_t n;
} got;

static void collect(void *ud, const char *text, size_t len)
{
    got *g = ud;
    CHECK(strlen(text) == len);
    if (g->n < 8)
        snprintf(g->texts[g->n++], KINF_WARNING_MAX, "%s", text);
}

static size_t parse(const char *value, got *g)
{
    memset(g, 0, sizeof(*g));
    return kinf_warning_parse(value, strlen(value), collect, g);
}

static void parses_the_api_server_form(void)
{
    got g;
    CHECK(parse(" 299 - \"policy/v1beta1 PodDisruptionBudget is deprecated\"\r\n", &g) == 1);
    CHECK_STR(g.texts[0], "policy/v1beta1 PodDisruptionBudget is deprecated");
    /* escapes, a date, several warnings in one value */
    CHECK(parse("299 - \"a \\\"quoted\\\" \\\\ word\" \"Wed, 21 Oct 2015 07:28:00 GMT\", "
                "299 kube-apiserver \"second\"", &g) == 2);
    CHECK_STR(g.texts[0], "a \"quoted\" \\ word");
    CHECK_STR(g.texts[1], "second");
}

static void skips_other_codes_and_stops_at_malformed(void)
{
    got g;
    CHECK(parse("199 - \"misc\", 299 - \"kept\"", &g) == 1); /* only 299 is handed on */
    CHECK_STR(g.texts[0], "kept");
    CHECK(parse("299 - \"\"", &g) == 0);                    /* empty text */
    CHECK(parse("299 - \"first\", 29 - \"bad code\", 299 - \"after\"", &g) == 1);
    CHECK_STR(g.texts[0], "first");
    CHECK(parse("299 - \"unterminated", &g) == 0);
    CHECK(parse("299 -", &g) == 0);
    CHECK(parse("299  \"no agent\"", &g) == 0);
    CHECK(parse("299 - unquoted", &g) == 0);
    CHECK(parse("299 - \"a\" junk", &g) == 0);
    CHECK(parse("299 - \"ctl\x01\"", &g) == 0);
    CHECK(parse("", &g) == 0);
}

static void cuts_long_texts(void)
{
    static char value[3 * KINF_WARNING_MAX];
    got g;
    size_t n = 0;
    n += (size_t)snprintf(value, sizeof(value), "299 - \"");
    while (n < 2 * KINF_WARNING_MAX)
        value[n++] = 'x';
    value[n++] = '"';
    value[n] = '\0';
    CHECK(parse(value, &g) == 1);
    CHECK(strlen(g.texts[0]) == KINF_WARNING_MAX - 1);
}

static void records_each_text_once(void)
{
    kinf_warnings *w = kinf_warnings_new();
    kinf_warnings_counts c;
    char buf[64];
    const char *a = "299 - \"alpha\"", *b = "299 - \"beta\", 299 - \"alpha\"";

    CHECK(w != NULL);
    kinf_warnings_note(w, a, strlen(a));
    kinf_warnings_note(w, a, strlen(a));
    kinf_warnings_note(w, b, strlen(b));
    kinf_warnings_get_counts(w, &c);
    CHECK(c.total == 4);
    CHECK(c.distinct == 2);
    CHECK(c.dropped == 0);
    CHECK(kinf_warnings_next(w, buf, sizeof(buf)) == 1);
    CHECK_STR(buf, "alpha");
    CHECK(kinf_warnings_next(w, buf, 4) == 1); /* cut to the buffer */
    CHECK_STR(buf, "bet");
    CHECK(kinf_warnings_next(w, buf, sizeof(buf)) == 0);
    kinf_warnings_note(w, a, strlen(a)); /* seen: not queued again */
    CHECK(kinf_warnings_next(w, buf, sizeof(buf)) == 0);
    kinf_warnings_free(w);
    kinf_warnings_free(NULL);
}

static void bounds_the_queue_and_the_set(void)
{
    kinf_warnings *w = kinf_warnings_new();
    kinf_warnings_counts c;
    char value[64], buf[64];
    size_t queued = 0;

    for (int i = 0; i < KINF_WARNINGS_DISTINCT + 10; i++) {
        snprintf(value, sizeof(value), "299 - \"w%d\"", i);
        kinf_warnings_note(w, value, strlen(value));
    }
    kinf_warnings_get_counts(w, &c);
    CHECK(c.total == KINF_WARNINGS_DISTINCT + 10);
    CHECK(c.distinct == KINF_WARNINGS_DISTINCT);
    CHECK(c.dropped == KINF_WARNINGS_DISTINCT + 10 - KINF_WARNINGS_PENDING);
    while (kinf_warnings_next(w, buf, sizeof(buf)))
        queued++;
    CHECK(queued == KINF_WARNINGS_PENDING);
    CHECK_STR(buf, "w31");
    /* The set is full: a new text is queued each time it comes, never lost. */
    snprintf(value, sizeof(value), "299 - \"late\"");
    kinf_warnings_note(w, value, strlen(value));
    kinf_warnings_note(w, value, strlen(value));
    CHECK(kinf_warnings_next(w, buf, sizeof(buf)) == 1);
    CHECK(kinf_warnings_next(w, buf, sizeof(buf)) == 1);
    CHECK_STR(buf, "late");
    kinf_warnings_free(w);
}

TEST_MAIN(TEST(parses_the_api_server_form), TEST(skips_other_codes_and_stops_at_malformed),
          TEST(cuts_long_texts), TEST(records_each_text_once), TEST(bounds_the_queue_and_the_set))
