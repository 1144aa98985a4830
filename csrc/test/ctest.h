/*
 * ctest.h - the smallest test harness that does the job: CHECK records a failure with file:line
 * and goes on; TEST_MAIN runs the listed tests and prints "N passed, N failed" (the closing line
 * CI reads), exiting non-zero on any failure. Header-only, no global state beyond the counters.
 */
#ifndef KINF_CTEST_H
#define KINF_CTEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ctest_failures_;
static int ctest_checks_failed_in_test_;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
            ctest_checks_failed_in_test_++;                                           \
        }                                                                             \
    } while (0)

#define CHECK_STR(a, b)                                                               \
    do {                                                                              \
        const char *ca_ = (a), *cb_ = (b);                                            \
        if (ca_ == NULL || cb_ == NULL || strcmp(ca_, cb_) != 0) {                     \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s == \"%s\", expected \"%s\"\n", \
                    __FILE__, __LINE__, #a, ca_ ? ca_ : "(null)", cb_ ? cb_ : "(null)"); \
            ctest_checks_failed_in_test_++;                                           \
        }                                                                             \
    } while (0)

typedef struct ctest_case {
    const char *name;
    void (*fn)(void);
} ctest_case;

static inline int ctest_run(const ctest_case *cases, size_t n)
{
    int passed = 0;
    for (size_t i = 0; i < n; i++) {
        ctest_checks_failed_in_test_ = 0;
        cases[i].fn();
        if (ctest_checks_failed_in_test_) {
            fprintf(stderr, "FAIL %s\n", cases[i].name);
            ctest_failures_++;
        } else {
            passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, ctest_failures_);
    return ctest_failures_ ? 1 : 0;
}

#define TEST(name) {#name, name}
#define TEST_MAIN(...)                                                                \
    int main(void)                                                                    \
    {                                                                                 \
        static const ctest_case cases_[] = {__VA_ARGS__};                             \
        return ctest_run(cases_, sizeof(cases_) / sizeof(cases_[0]));                 \
    }

#endif
