/* test_reflector_hostile.c - the reflector against bodies a broken or hostile server sends,
 * played through a scripted transport (scripted_transport.h): a list response that is not a
 * list, and a bad watch line on a stream that then goes quiet. Bodies are fed whole and one
 * byte at a time, which must give the same result. */
#include "reflector_fixture.h"

static fx fx_new(void)
{
    kinf_reflector_config rc = {0};
    rc.path = PATH;
    return fx_new_cfg(&rc);
}

static void expect_request(fx *f, sc_req want)
{
    const char *q = NULL;
    CHECK(sc_request(f->sc, &q) == want);
}

static void respond_str(fx *f, const char *body, int bytewise, int end)
{
    fx_respond(f, body, strlen(body), bytewise, end);
}

#define POD(name, rv) "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"t\",\"resourceVersion\":\"" rv "\"}}"
#define EV(type, obj) "{\"type\":\"" type "\",\"object\":" obj "}\n"
#define LIST(rv, items) "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"" rv "\"},\"items\":[" items "]}"

/* A relist answered with something that is not a list must not replace the cache with
 * nothing (every object deleted): it is an error, the queue is untouched, the list is retried.
 * "items": null is an empty list (client-go decodes it so). */
static void relist_that_is_not_a_list(void)
{
    static const char *const bad[] = {
        "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"20\"},"
        "\"items\":{}}",
        "{\"kind\":\"Namespace\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"t\","
        "\"resourceVersion\":\"20\"}}",
        "{}",
        "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"20\"},\"items\":\"none\"}",
    };
    for (size_t i = 0; i <= sizeof(bad) / sizeof(bad[0]); i++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            fx f = fx_new();
            kinf_reflector_status st;
            kinf_delta_type t = KINF_DELTA_SYNC;
            expect_request(&f, SC_LIST);
            respond_str(&f, LIST("10", POD("a", "5") "," POD("b", "6")), bytewise, 1);
            expect_request(&f, SC_WATCH);
            respond_str(&f, EV("ERROR", "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}"),
                        bytewise, 1);
            expect_request(&f, SC_LIST);
            if (i == sizeof(bad) / sizeof(bad[0])) {
                respond_str(&f, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":"
                                "{\"resourceVersion\":\"20\"},\"items\":null}", bytewise, 1);
                kinf_reflector_status_get(f.r, &st);
                CHECK(st.lists == 2 && st.errors == 1);
                (void)newest(&f, "t/a", &t);
                CHECK(t == KINF_DELTA_DELETED); /* an empty list: a is gone */
                expect_request(&f, SC_WATCH);
                fx_free(&f);
                continue;
            }
            respond_str(&f, bad[i], bytewise, 1);
            kinf_reflector_status_get(f.r, &st);
            CHECK(st.lists == 1 && st.errors == 2);
            CHECK(strstr(st.last_error, "not a list: no \"items\" array") != NULL);
            CHECK_STR(newest(&f, "t/a", &t), "5");
            CHECK(t == KINF_DELTA_REPLACED); /* no deletion queued */
            CHECK_STR(newest(&f, "t/b", &t), "6");
            CHECK(t == KINF_DELTA_REPLACED);
            expect_request(&f, SC_LIST); /* retried after the backoff */
            fx_free(&f);
        }
    }
}

/* A complete watch line that is bad (garbage, an unknown type, an ERROR without its Status)
 * or an ERROR event, on a stream that then sends nothing more: the reflector acts on it at its
 * next tick (the scanner thread wakes the I/O thread), not when a next byte or the idle
 * timeout comes. The transfer is still open here: nothing ends it but the reflector. */
static void bad_line_on_a_quiet_watch(void)
{
    static const struct {
        const char *line, *error;
        int code;
    } cases[] = {
        {"this is not JSON\n", "bad event", 200},
        {EV("WHATEVER", POD("c", "11")), "bad event", 200},
        {"{\"type\":\"ERROR\"}\n", "bad event", 200},
        {EV("ERROR", "{\"kind\":\"Status\",\"code\":500,\"reason\":\"InternalError\"}"),
         "error event: 500", 500},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            fx f = fx_new();
            kinf_reflector_status st;
            expect_request(&f, SC_LIST);
            respond_str(&f, LIST("10", POD("a", "5")), bytewise, 1);
            expect_request(&f, SC_WATCH);
            respond_str(&f, EV("ADDED", POD("b", "11")) "", bytewise, 0);
            respond_str(&f, cases[i].line, bytewise, 0);
            CHECK(f.sc->cur != NULL); /* the stream is quiet, not over */
            (void)kinf_reflector_io_tick(f.r, f.sc->clock);
            CHECK(f.sc->cur == NULL); /* ended by the reflector */
            kinf_reflector_status_get(f.r, &st);
            CHECK(st.errors == 1 && st.events == 1);
            CHECK(strstr(st.last_error, cases[i].error) != NULL);
            CHECK(st.last_error_code == cases[i].code);
            expect_request(&f, SC_LIST); /* after the backoff: a relist */
            fx_free(&f);
        }
    }
}

TEST_MAIN(TEST(relist_that_is_not_a_list), TEST(bad_line_on_a_quiet_watch))
