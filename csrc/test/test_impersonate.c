/* test_impersonate.c - the Impersonate-* headers: their order, client-go's key escaping, and
 * the configurations refused before anything is appended. */
#include <string.h>

#include "ctest.h"
#include "impersonate.h"

static void headers_in_order_with_escaped_keys(void)
{
    const char *groups[] = {"devs", "system:authenticated", NULL};
    const char *extra[] = {"scopes", "view", "example.com/Team %", "blue", NULL};
    kinf_impersonation imp = {"jane", "u-1", groups, extra};
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json"), *p;
    const char *want[] = {"Accept: application/json", "Impersonate-User: jane",
                          "Impersonate-Uid: u-1", "Impersonate-Group: devs",
                          "Impersonate-Group: system:authenticated",
                          "Impersonate-Extra-scopes: view",
                          "Impersonate-Extra-example.com%2FTeam%20%25: blue", NULL};
    char msg[128];
    size_t i = 0;

    CHECK(kinf_impersonation_headers(&imp, &h, msg, sizeof(msg)) == KINF_OK);
    for (p = h; p != NULL; p = p->next, i++) {
        CHECK(want[i] != NULL);
        if (want[i] != NULL)
            CHECK_STR(p->data, want[i]);
    }
    CHECK(want[i] == NULL);
    curl_slist_free_all(h);
}

static void nothing_without_a_user(void)
{
    kinf_impersonation imp = {"", NULL, NULL, NULL};
    struct curl_slist *h = NULL;
    char msg[128];
    CHECK(kinf_impersonation_headers(&imp, &h, msg, sizeof(msg)) == KINF_OK);
    CHECK(h == NULL);
}

static void refuses_before_appending(void)
{
    const char *groups[] = {"g", NULL}, *empty_group[] = {"", NULL};
    const char *odd[] = {"k", NULL}, *empty_value[] = {"k", "", NULL};
    struct {
        kinf_impersonation imp;
        const char *msg;
    } cases[] = {
        {{NULL, NULL, groups, NULL}, "impersonating a uid, groups or extra needs impersonate_user"},
        {{NULL, "u", NULL, NULL}, "impersonating a uid, groups or extra needs impersonate_user"},
        {{"a\r\nX-Evil: 1", NULL, NULL, NULL}, "impersonate_user must not contain control characters"},
        {{"a", "u\n", NULL, NULL}, "impersonate_uid must not contain control characters"},
        {{"a", NULL, empty_group, NULL}, "impersonate_groups: group 1 is empty or holds a control character"},
        {{"a", NULL, NULL, odd}, "impersonate_extra: key \"k\" is empty, has no value, or its value is "
                                 "empty or holds a control character"},
        {{"a", NULL, NULL, empty_value}, "impersonate_extra: key \"k\" is empty, has no value, or its "
                                         "value is empty or holds a control character"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct curl_slist *h = NULL;
        char msg[160] = "";
        CHECK(kinf_impersonation_headers(&cases[i].imp, &h, msg, sizeof(msg)) == KINF_EINVAL);
        CHECK_STR(msg, cases[i].msg);
        CHECK(h == NULL);
    }
}

TEST_MAIN(TEST(headers_in_order_with_escaped_keys), TEST(nothing_without_a_user),
          TEST(refuses_before_appending))
