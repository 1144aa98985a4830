/* test_reflector_body.c - the reflector's handling of list and watch responses, played through
 * a scripted transport (scripted_transport.h): no server, no threads. Most bodies are fed
 * whole and one byte at a time, which must give the same result. Several cases are regressions
 * of what csrc/fuzz/fuzz_reflector.c found (their seeds are in csrc/fuzz/corpus/reflector). */
#include "reflector_fixture.h"

static fx fx_new(int watch_list)
{
    kinf_reflector_config rc = {0};
    rc.path = PATH;
    rc.watch_list = watch_list;
    rc.page_size = 2;
    return fx_new_cfg(&rc);
}

/* The request the reflector waits for; its kind must be `want`. Returns the query. */
static const char *expect_request(fx *f, sc_req want)
{
    const char *q = NULL;
    CHECK(sc_request(f->sc, &q) == want);
    CHECK(q != NULL);
    return q ? q : "";
}

static void respond(fx *f, const char *body, size_t len, int bytewise)
{
    fx_respond(f, body, len, bytewise, 1);
}

static void respond_str(fx *f, const char *body, int bytewise)
{
    respond(f, body, strlen(body), bytewise);
}

static int clean(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 0;
    return 1;
}

#define POD(name, rv) "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"t\",\"resourceVersion\":\"" rv "\"}}"
#define EV(type, obj) "{\"type\":\"" type "\",\"object\":" obj "}\n"
#define LIST(rv, items) "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"" rv "\"},\"items\":[" items "]}"

static void list_then_watch(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx f = fx_new(0);
        kinf_reflector_status st;
        kinf_delta_type t = KINF_DELTA_SYNC;
        const char *q = expect_request(&f, SC_LIST);
        CHECK_STR(q, PATH "?resourceVersion=0&limit=2");
        respond_str(&f, LIST("10", POD("a", "5") "," POD("b", "6")), bytewise);
        q = expect_request(&f, SC_WATCH);
        CHECK(strstr(q, "?watch=true&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=") != NULL);
        CHECK_STR(newest(&f, "t/a", &t), "5");
        CHECK(t == KINF_DELTA_REPLACED);
        respond_str(&f,
                    EV("ADDED", POD("c", "11")) EV("MODIFIED", POD("a", "12"))
                        EV("DELETED", POD("b", "13"))
                            EV("BOOKMARK", "{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"14\"}}"),
                    bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 0 && st.events == 3 && st.lists == 1);
        CHECK_STR(st.resource_version, "14");
        CHECK_STR(newest(&f, "t/a", &t), "12");
        CHECK(t == KINF_DELTA_UPDATED);
        CHECK_STR(newest(&f, "t/b", &t), "13");
        CHECK(t == KINF_DELTA_DELETED);
        CHECK_STR(newest(&f, "t/c", &t), "11");
        CHECK(t == KINF_DELTA_ADDED);
        /* the server ended the watch: watch again from the bookmark's rv, no relist */
        q = expect_request(&f, SC_WATCH);
        CHECK(strstr(q, "&resourceVersion=14&") != NULL);
        fx_free(&f);
    }
}

/* Found by the fuzzer: a Status message with a newline went into last_error as it was. */
static void error_messages_are_clean(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx f = fx_new(0);
        kinf_reflector_status st;
        char body[4096];
        expect_request(&f, SC_LIST);
        respond_str(&f, LIST("10", ""), bytewise);
        expect_request(&f, SC_WATCH);
        /* newline, tab, DEL, C1 (U+0085): one space each; then a message long enough that last_error
         * (512 bytes) cuts it inside a 3-byte character */
        snprintf(body, sizeof body,
                 EV("ERROR", "{\"kind\":\"Status\",\"code\":500,\"reason\":\"Bad\\nReason\","
                             "\"message\":\"line1\\nline2\\t\\u007f\\u0085 %s\"}"),
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"
                 "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad");
        respond_str(&f, body, bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 1 && st.last_error_code == 500);
        CHECK(clean(st.last_error));
        CHECK(clean(st.last_error_reason));
        CHECK_STR(st.last_error_reason, "Bad Reason");
        CHECK(strncmp(st.last_error,
                      "watch " PATH ": error event: 500 Bad Reason: line1 line2    \xe4\xb8\xad",
                      strlen("watch " PATH ": error event: 500 Bad Reason: line1 line2    "
                             "\xe4\xb8\xad")) == 0);
        {
            /* ends on a whole character: the cut one was dropped */
            size_t n = strlen(st.last_error);
            CHECK(n >= 3 && memcmp(st.last_error + n - 3, "\xe4\xb8\xad", 3) == 0);
        }
        expect_request(&f, SC_LIST); /* ERROR 500: relist */
        fx_free(&f);
    }
}

/* Found by the fuzzer: a WatchList's MODIFIED / DELETED during the initial events went to the
 * FIFO directly, and the end bookmark's replace then put the older ADDED object back. */
static void watch_list_initial_state(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx f = fx_new(1);
        kinf_reflector_status st;
        kinf_delta_type t = KINF_DELTA_SYNC;
        const char *q = expect_request(&f, SC_WATCH);
        CHECK(strstr(q, "sendInitialEvents=true") != NULL);
        respond_str(&f,
                    EV("ADDED", POD("a", "5")) EV("ADDED", POD("b", "6")) EV("ADDED", POD("d", "6"))
                        EV("MODIFIED", POD("a", "7")) EV("DELETED", POD("b", "8"))
                            EV("ADDED", POD("c", "9")) EV("DELETED", POD("x", "9"))
                                EV("BOOKMARK", "{\"metadata\":{\"resourceVersion\":\"10\","
                                               "\"annotations\":{\"k8s.io/initial-events-end\":"
                                               "\"true\"}}}")
                                    EV("MODIFIED", POD("c", "11")),
                    bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 0 && st.listed && st.lists == 1);
        CHECK_STR(st.resource_version, "11");
        CHECK_STR(newest(&f, "t/a", &t), "7");
        CHECK(t == KINF_DELTA_REPLACED);
        CHECK_STR(newest(&f, "t/b", &t), "-");
        CHECK_STR(newest(&f, "t/d", &t), "6");
        CHECK(t == KINF_DELTA_REPLACED);
        CHECK_STR(newest(&f, "t/c", &t), "11");
        CHECK(t == KINF_DELTA_UPDATED);
        CHECK(kinf_fifo_len(f.fifo) == 3);
        fx_free(&f);
    }
}

/* Found by the fuzzer: an event that failed (no metadata.name) still advanced the rv, and
 * status() showed it or not depending on how the body was chunked. Also: the reason given by
 * the reflector ("... has no metadata.name") was replaced by the scanner's generic one. */
static void rv_advances_only_with_applied_events(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx f = fx_new(0);
        kinf_reflector_status st;
        const char *q;
        expect_request(&f, SC_LIST);
        respond_str(&f, LIST("10", ""), bytewise);
        expect_request(&f, SC_WATCH);
        respond_str(&f,
                    EV("ADDED", POD("c", "11"))
                        EV("MODIFIED", "{\"metadata\":{\"namespace\":\"t\",\"resourceVersion\":\"12\"}}"),
                    bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 1 && st.events == 1);
        CHECK_STR(st.resource_version, "11");
        CHECK(strstr(st.last_error, "MODIFIED event object has no metadata.name") != NULL);
        q = expect_request(&f, SC_LIST); /* a bad event: relist from the last good rv */
        CHECK_STR(q, PATH "?resourceVersion=11");
        fx_free(&f);
    }
}

/* Found while writing the fuzzer's invariants (its seeds long_rv, long_continue and rv_nul now
 * cover them): resourceVersions over 255 bytes were cut (the scanner accepts 1024), a continue
 * token was cut when its percent-encoding passed 12 KiB, and an rv holding \u0000 was cut at
 * the NUL. */
static void long_rv_and_continue_token(void)
{
    size_t rvlen = 1024, toklen = 8192;
    char *rv = malloc(rvlen + 1), *tok = malloc(toklen + 1), *body = malloc(20000);
    char *want = malloc(40000);
    const char *q;
    kinf_reflector_status st;
    fx f = fx_new(0);
    memset(rv, '7', rvlen);
    rv[rvlen] = '\0';
    for (size_t i = 0; i < toklen; i++)
        tok[i] = "ab/+="[i % 5];
    tok[toklen] = '\0';
    expect_request(&f, SC_LIST);
    snprintf(body, 20000,
             "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"%s\",\"continue\":\"%s\"},"
             "\"items\":[" POD("a", "1") "]}",
             rv, tok);
    respond_str(&f, body, 0);
    q = expect_request(&f, SC_LIST);
    {
        size_t n = (size_t)snprintf(want, 40000, PATH "?limit=2&continue=");
        for (size_t i = 0; i < toklen; i++) {
            if (tok[i] == '/')
                n += (size_t)snprintf(want + n, 40000 - n, "%%2F");
            else if (tok[i] == '+')
                n += (size_t)snprintf(want + n, 40000 - n, "%%2B");
            else if (tok[i] == '=')
                n += (size_t)snprintf(want + n, 40000 - n, "%%3D");
            else
                want[n++] = tok[i];
        }
        want[n] = '\0';
    }
    CHECK_STR(q, want);
    snprintf(body, 20000,
             "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"%s\"},\"items\":[]}", rv);
    respond_str(&f, body, 0);
    kinf_reflector_status_get(f.r, &st);
    CHECK(st.errors == 0 && st.lists == 1);
    CHECK_STR(st.resource_version, rv);
    q = expect_request(&f, SC_WATCH);
    snprintf(want, 40000, "&resourceVersion=%s&", rv);
    CHECK(strstr(q, want) != NULL);
    /* an rv holding a NUL (the scanner allows \u0000) is refused, not cut */
    respond_str(&f, EV("ADDED", "{\"metadata\":{\"name\":\"z\",\"resourceVersion\":\"1\\u00002\"}}"),
                0);
    kinf_reflector_status_get(f.r, &st);
    CHECK(st.errors == 1 && st.events == 0);
    CHECK(strstr(st.last_error, "resourceVersion holds a NUL byte") != NULL);
    CHECK_STR(st.resource_version, rv);
    fx_free(&f);
    free(rv);
    free(tok);
    free(body);
    free(want);
}

static void http_errors_and_continuation(void)
{
    fx f = fx_new(0);
    kinf_reflector_status st;
    const char *q;
    expect_request(&f, SC_LIST);
    respond_str(&f, LIST("10", POD("a", "5")), 0);
    expect_request(&f, SC_WATCH);
    sc_response(f.sc, 410, 0);
    (void)sc_body(f.sc, "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Gone\"}", 44);
    sc_end(f.sc, KINF_XFER_OK, "", 1.0);
    kinf_reflector_status_get(f.r, &st);
    CHECK(st.errors == 1 && st.last_error_code == 410);
    CHECK_STR(st.last_error_reason, "Gone");
    q = expect_request(&f, SC_LIST);
    CHECK_STR(q, PATH "?resourceVersion=10");
    /* a page with a continue token: the next page carries it, without an rv */
    respond_str(&f,
                "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"20\",\"continue\":\"c1\"},"
                "\"items\":[" POD("a", "5") "]}",
                1);
    q = expect_request(&f, SC_LIST);
    CHECK_STR(q, PATH "?limit=2&continue=c1");
    kinf_reflector_status_get(f.r, &st);
    CHECK(st.lists == 1); /* not complete yet */
    respond_str(&f, LIST("20", POD("b", "6")), 1);
    kinf_reflector_status_get(f.r, &st);
    CHECK(st.lists == 2 && st.relists == 1);
    CHECK_STR(st.resource_version, "20");
    expect_request(&f, SC_WATCH);
    fx_free(&f);
}

/* An expired continuation falls back to one full list at the first page's rv, even when the
 * pages before held nothing (with selectors a page can be empty and still carry a token); a
 * continue token in that full list is not followed (client-go's pager). Found while looking into
 * a fuzzer report (the harness expected the token to be followed; the reflector skipped the full
 * list when the earlier pages were empty). */
static void expired_continuation_after_an_empty_page(void)
{
    fx f = fx_new(0);
    kinf_reflector_status st;
    const char *q;
    expect_request(&f, SC_LIST);
    respond_str(&f,
                "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"30\",\"continue\":\"c1\"},"
                "\"items\":[]}",
                0);
    q = expect_request(&f, SC_LIST);
    CHECK_STR(q, PATH "?limit=2&continue=c1");
    sc_response(f.sc, 410, 0);
    sc_end(f.sc, KINF_XFER_OK, "", 1.0);
    q = expect_request(&f, SC_LIST);
    CHECK_STR(q, PATH "?resourceVersion=0"); /* the first page's rv, no limit */
    respond_str(&f,
                "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"31\",\"continue\":\"c2\"},"
                "\"items\":[" POD("a", "5") "]}",
                1);
    kinf_reflector_status_get(f.r, &st);
    CHECK(st.lists == 1 && st.errors == 1);
    CHECK_STR(st.resource_version, "31");
    expect_request(&f, SC_WATCH);
    fx_free(&f);
}

/* The full list after an expired continuation fails without a response (timeout): the next
 * list starts over, paginated (client-go's pager returns that error to the reflector). Found by
 * fuzz_reflector (the reflector kept asking for the unpaginated list). */
static void failed_full_list_starts_over(void)
{
    fx f = fx_new(0);
    const char *q;
    expect_request(&f, SC_LIST);
    respond_str(&f,
                "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"30\",\"continue\":\"c1\"},"
                "\"items\":[" POD("a", "5") "]}",
                0);
    expect_request(&f, SC_LIST);
    sc_response(f.sc, 410, 0);
    sc_end(f.sc, KINF_XFER_OK, "", 1.0);
    q = expect_request(&f, SC_LIST);
    CHECK_STR(q, PATH "?resourceVersion=0"); /* the full list */
    sc_end(f.sc, KINF_XFER_TIMEDOUT, "no data for 90 s", 100);
    q = expect_request(&f, SC_LIST);
    CHECK(q != NULL && strstr(q, "limit=2") != NULL && strstr(q, "continue=") == NULL);
    fx_free(&f);
}

/* Pipelined pages: a page whose continue token was scanned before its end has the next page
 * asked for when its transfer ends, before its end is checked. A page found bad only there
 * (here the body stops inside the items, in a transfer that ended well) fails the list when the
 * next response ends, with its own error; the next page's objects are dropped and the list
 * starts over. */
static void page_bad_at_its_end(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx f = fx_new(0);
        kinf_reflector_status st;
        kinf_delta_type t;
        const char *q;
        expect_request(&f, SC_LIST);
        respond_str(&f,
                    "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"30\",\"continue\":"
                    "\"c1\"},\"items\":[" POD("a", "5"),
                    bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 0); /* not known yet */
        q = expect_request(&f, SC_LIST);
        CHECK_STR(q, PATH "?limit=2&continue=c1");
        respond_str(&f, LIST("30", POD("b", "6")), bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 1 && st.lists == 0 && st.last_error_code == 200);
        CHECK(strstr(st.last_error, "list " PATH ": bad response: ") == st.last_error);
        /* page 1's error: its body is 142 bytes and ends inside the items */
        CHECK(strstr(st.last_error, "at byte 142: body ended after a value, before the end of "
                                    "the list object") != NULL);
        CHECK_STR(newest(&f, "t/a", &t), "-");
        CHECK_STR(newest(&f, "t/b", &t), "-");
        q = expect_request(&f, SC_LIST);
        CHECK_STR(q, PATH "?resourceVersion=0&limit=2");
        respond_str(&f, LIST("31", POD("a", "5")), bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.lists == 1);
        CHECK_STR(newest(&f, "t/a", &t), "5");
        fx_free(&f);
    }
}

/* A uid or resourceVersion holding \u0000 would be cut in the record (C strings) and differ from
 * the object's JSON: a list item or a watch event carrying one is refused. Found by fuzz_reflector
 * (a list item's rv; watch events' rvs were already refused). */
static void nul_in_uid_or_rv_is_refused(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx f = fx_new(0);
        kinf_reflector_status st;
        kinf_delta_type t;
        expect_request(&f, SC_LIST);
        respond_str(&f,
                    LIST("10", POD("a", "5") ",{\"metadata\":{\"name\":\"b\",\"namespace\":\"t\","
                                              "\"resourceVersion\":\"1\\u00002\"}}"),
                    bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 1 && st.lists == 0);
        CHECK(strstr(st.last_error, "list item #2: metadata.uid or resourceVersion holds a NUL "
                                    "byte") != NULL);
        CHECK_STR(newest(&f, "t/a", &t), "-");
        expect_request(&f, SC_LIST);
        respond_str(&f, LIST("10", POD("a", "5")), bytewise);
        expect_request(&f, SC_WATCH);
        respond_str(&f,
                    EV("ADDED", "{\"metadata\":{\"name\":\"c\",\"namespace\":\"t\",\"uid\":\"u"
                                "\\u0000v\",\"resourceVersion\":\"11\"}}"),
                    bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 2 && st.events == 0);
        CHECK(strstr(st.last_error, "ADDED event: metadata.uid or resourceVersion holds a NUL "
                                    "byte") != NULL);
        CHECK_STR(newest(&f, "t/c", &t), "-");
        fx_free(&f);
    }
}

/* Reflectors created together drew the same random numbers (their RNG was seeded from the
 * clock and their address): 8 informers on one client asked for the same timeoutSeconds and
 * retried within milliseconds of each other after an outage. Each now seeds from the OS. */
static void reflectors_made_together_draw_apart(void)
{
    fx f[8];
    long timeouts[8];
    double waits[8];
    int same_timeout = 1, same_wait = 1;
    for (int i = 0; i < 8; i++)
        f[i] = fx_new(0);
    for (int i = 0; i < 8; i++) {
        const char *q;
        double t0;
        expect_request(&f[i], SC_LIST);
        respond_str(&f[i], LIST("10", ""), 0);
        q = strstr(expect_request(&f[i], SC_WATCH), "timeoutSeconds=");
        CHECK(q != NULL);
        timeouts[i] = q ? atol(q + strlen("timeoutSeconds=")) : 0;
        CHECK(timeouts[i] >= 300 && timeouts[i] < 600);
        /* the watch fails: the retry waits for the backoff (0.8 s plus a jitter of up to 100%) */
        sc_response(f[i].sc, 500, 0);
        sc_end(f[i].sc, KINF_XFER_OK, "", 1.0);
        t0 = f[i].sc->clock;
        expect_request(&f[i], SC_LIST);
        waits[i] = f[i].sc->clock - t0;
        CHECK(waits[i] >= 0.8 && waits[i] < 1.6);
    }
    for (int i = 1; i < 8; i++) {
        same_timeout &= timeouts[i] == timeouts[0];
        same_wait &= waits[i] > waits[0] - 0.02 && waits[i] < waits[0] + 0.02;
    }
    CHECK(!same_timeout);
    CHECK(!same_wait);
    for (int i = 0; i < 8; i++)
        fx_free(&f[i]);
}

/* A watch stream that ends cleanly in the middle of an event (a truncated last line) is
 * re-watched from the last applied event's rv, as client-go does; it used to leave no trace
 * but watch_restarts. Now it is an error (last_error, errors), and nothing of the cut line is
 * applied. Fed whole and byte by byte. */
static void watch_cut_at_a_clean_end_is_reported(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        fx f = fx_new(0);
        kinf_reflector_status st;
        kinf_delta_type t;
        const char *q;
        expect_request(&f, SC_LIST);
        respond_str(&f, LIST("10", ""), bytewise);
        expect_request(&f, SC_WATCH);
        respond_str(&f, EV("ADDED", POD("c", "11")) "{\"type\":\"ADDED\",\"object\":{\"metadata\"",
                    bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 1 && st.events == 1 && st.watch_restarts == 1 && st.relists == 0);
        CHECK(strstr(st.last_error, "watch " PATH ": stream ended inside an event") ==
              st.last_error);
        CHECK_STR(st.resource_version, "11");
        CHECK_STR(newest(&f, "t/c", &t), "11");
        q = expect_request(&f, SC_WATCH); /* no relist: from the last good rv */
        CHECK(strstr(q, "&resourceVersion=11&") != NULL);
        /* a stream that ends between lines is no error */
        respond_str(&f, EV("ADDED", POD("d", "12")), bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(st.errors == 1 && st.events == 2);
        fx_free(&f);
    }
}

static int next_line(fx *f, const char **level, char *buf, size_t len)
{
    *level = "";
    buf[0] = '\0';
    return kinf_reflector_log_next(f->r, level, buf, len);
}

/* Failures were only in status(): nothing was logged. The reflector now queues a warn line for
 * a failure of a new kind (not for the same one again within a minute) and one info line when
 * a list completes after a logged failure. */
static void failures_queue_log_lines(void)
{
    fx f = fx_new(0);
    const char *level;
    char line[KINF_REFLECTOR_LOG_MAX];
    const char *forbidden = "{\"kind\":\"Status\",\"code\":403,\"reason\":\"Forbidden\","
                            "\"message\":\"pods is forbidden: User \\\"x\\\" cannot list\"}";
    CHECK(next_line(&f, &level, line, sizeof line) == 0);
    for (int i = 0; i < 3; i++) {
        expect_request(&f, SC_LIST);
        sc_response(f.sc, 403, 0);
        (void)sc_body(f.sc, forbidden, strlen(forbidden));
        sc_end(f.sc, KINF_XFER_OK, "", 0.1);
    }
    CHECK(next_line(&f, &level, line, sizeof line) == 1);
    CHECK_STR(level, "warn");
    CHECK_STR(line, "list " PATH ": 403 pods is forbidden: User \"x\" cannot list");
    CHECK(next_line(&f, &level, line, sizeof line) == 0); /* the two repeats: not logged */
    /* another kind: logged */
    expect_request(&f, SC_LIST);
    sc_end(f.sc, KINF_XFER_FAILED, "Couldn't connect to server", 0.1);
    CHECK(next_line(&f, &level, line, sizeof line) == 1);
    CHECK_STR(level, "warn");
    CHECK_STR(line, "list " PATH ": Couldn't connect to server");
    expect_request(&f, SC_LIST);
    respond_str(&f, LIST("10", ""), 0);
    CHECK(next_line(&f, &level, line, sizeof line) == 1);
    CHECK_STR(level, "info");
    CHECK_STR(line, "list " PATH ": recovered after 4 failures");
    CHECK(next_line(&f, &level, line, sizeof line) == 0);
    /* the watch served: no second "recovered" */
    expect_request(&f, SC_WATCH);
    respond_str(&f, EV("ADDED", POD("c", "11")), 0);
    CHECK(next_line(&f, &level, line, sizeof line) == 0);
    /* the watch's own failure is a kind of its own: logged; its repeat within the minute not */
    expect_request(&f, SC_WATCH);
    sc_end(f.sc, KINF_XFER_FAILED, "Couldn't connect to server", 0.1);
    CHECK(next_line(&f, &level, line, sizeof line) == 1);
    CHECK_STR(line, "watch " PATH ": Couldn't connect to server");
    expect_request(&f, SC_WATCH);
    sc_end(f.sc, KINF_XFER_FAILED, "Couldn't connect to server", 0.1);
    CHECK(next_line(&f, &level, line, sizeof line) == 0);
    fx_free(&f);
}

#define META(name, rv) "{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"name\":\"" name "\",\"namespace\":\"t\",\"resourceVersion\":\"" rv "\"}}"
#define META_LIST(rv, items) "{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"" rv "\"},\"items\":[" items "]}"

/* The newest delta of key's object JSON ("-" when not queued). */
static const char *newest_json(fx *f, const char *key)
{
    static char json[512];
    kinf_deltas d;
    if (kinf_fifo_get_by_key(f->fifo, key, strlen(key), &d) != KINF_OK)
        return "-";
    snprintf(json, sizeof json, "%s", d.v[d.n - 1].obj->json);
    kinf_deltas_clear(&d);
    return json;
}

static int accept_is(fx *f, const char *want)
{
    const char *a = sc_accept(f->sc);
    return want == NULL ? a == NULL : a != NULL && strcmp(a, want) == 0;
}

static void metadata_only_forms(void)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        kinf_reflector_config rc = {0};
        kinf_reflector_status st;
        kinf_delta_type t = KINF_DELTA_SYNC;
        fx f;
        rc.path = PATH;
        rc.page_size = 2;
        rc.metadata_only = 1;
        f = fx_new_cfg(&rc);
        expect_request(&f, SC_LIST);
        CHECK(accept_is(&f, KINF_ACCEPT_METADATA_LIST));
        /* an item without kind gets the list's item kind, as one with it */
        respond_str(&f, META_LIST("10", POD("a", "5") "," META("b", "6")), bytewise);
        CHECK_STR(newest_json(&f, "t/a"),
                  "{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\","
                  "\"metadata\":{\"name\":\"a\",\"namespace\":\"t\",\"resourceVersion\":\"5\"}}");
        CHECK_STR(newest_json(&f, "t/b"), META("b", "6"));
        expect_request(&f, SC_WATCH);
        CHECK(accept_is(&f, KINF_ACCEPT_METADATA_WATCH));
        respond_str(&f, EV("MODIFIED", META("a", "12")) EV("DELETED", META("b", "13")), bytewise);
        CHECK_STR(newest(&f, "t/a", &t), "12");
        CHECK(t == KINF_DELTA_UPDATED);
        CHECK_STR(newest(&f, "t/b", &t), "13");
        CHECK(t == KINF_DELTA_DELETED);
        /* a whole object (a server that ignored the Accept) is refused, not cached */
        expect_request(&f, SC_WATCH);
        respond_str(&f, EV("ADDED", "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"c\",\"namespace\":\"t\",\"resourceVersion\":\"14\"},\"spec\":{}}"), bytewise);
        CHECK_STR(newest(&f, "t/c", &t), "-");
        kinf_reflector_status_get(f.r, &st);
        CHECK(strstr(st.last_error, "the ADDED event's object is a \"Pod\", not a PartialObjectMetadata") != NULL);
        expect_request(&f, SC_LIST);
        CHECK(accept_is(&f, KINF_ACCEPT_METADATA_LIST));
        respond_str(&f, LIST("20", POD("a", "15")), bytewise);
        kinf_reflector_status_get(f.r, &st);
        CHECK(strstr(st.last_error, "list item #1 is a \"Pod\", not a PartialObjectMetadata") != NULL);
        CHECK(st.lists == 1);
        fx_free(&f);
    }
    {
        /* without metadata_only: the transport's default Accept */
        fx f = fx_new(0);
        expect_request(&f, SC_LIST);
        CHECK(accept_is(&f, NULL));
        respond_str(&f, LIST("10", POD("a", "5")), 0);
        expect_request(&f, SC_WATCH);
        CHECK(accept_is(&f, NULL));
        fx_free(&f);
    }
}

/* gzip is asked for on every list page (pipelined ones too), never on a watch or a WatchList
 * stream, and only when configured. */
static void gzip_for_lists_only(void)
{
    for (int on = 0; on < 2; on++) {
        kinf_reflector_config rc = {0};
        fx f;
        rc.path = PATH;
        rc.page_size = 2;
        rc.gzip = on;
        f = fx_new_cfg(&rc);
        expect_request(&f, SC_LIST);
        CHECK(sc_gzip(f.sc) == on);
        respond_str(&f, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{"
                        "\"resourceVersion\":\"10\",\"continue\":\"next\"},\"items\":["
                        POD("a", "5") "," POD("b", "6") "]}", 0);
        CHECK(strstr(expect_request(&f, SC_LIST), "continue=next") != NULL);
        CHECK(sc_gzip(f.sc) == on);
        respond_str(&f, LIST("10", POD("c", "7")), 0);
        expect_request(&f, SC_WATCH);
        CHECK(sc_gzip(f.sc) == 0);
        fx_free(&f);

        rc.watch_list = 1;
        f = fx_new_cfg(&rc);
        CHECK(strstr(expect_request(&f, SC_WATCH), "sendInitialEvents=true") != NULL);
        CHECK(sc_gzip(f.sc) == 0);
        fx_free(&f);
    }
}

TEST_MAIN(TEST(list_then_watch), TEST(error_messages_are_clean), TEST(watch_list_initial_state),
          TEST(rv_advances_only_with_applied_events), TEST(long_rv_and_continue_token),
          TEST(http_errors_and_continuation), TEST(expired_continuation_after_an_empty_page),
          TEST(failed_full_list_starts_over), TEST(page_bad_at_its_end),
          TEST(nul_in_uid_or_rv_is_refused), TEST(reflectors_made_together_draw_apart),
          TEST(watch_cut_at_a_clean_end_is_reported), TEST(failures_queue_log_lines),
          TEST(metadata_only_forms), TEST(gzip_for_lists_only))
