/*
 * fuzz_labelselector.c - libFuzzer target for label selectors: the parser on any bytes, the
 * matcher on any labels "JSON" (the matcher is meant for validated records, but must stay in
 * bounds on anything).
 *
 * Input layout: the selector, then '\n', then the labels object (no '\n': the whole input is
 * the selector, matched against no labels). Both are copied to heap blocks of their exact size,
 * so AddressSanitizer catches any read past either.
 *
 * Invariants checked (any violation aborts, so libFuzzer keeps the input):
 *   - parse returns KINF_OK with a selector, or KINF_EINVAL with no selector, a non-empty
 *     message and a position within [0, len]; parsing again gives the same outcome;
 *   - a selector that parses matches the same way twice (records are immutable);
 *   - the same selector with blanks doubled around every comma parses and matches the same way
 *     (blanks are never significant outside tokens);
 *   - the empty selector matches everything.
 * Build and run: `make fuzz-labelselector FUZZ_SECONDS=60` (mk/fuzz.mk).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzzbuf.h"
#include "labelselector.h"

#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "fuzz_labelselector invariant: " __VA_ARGS__);                             \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

static char *copy(const uint8_t *p, size_t n)
{
    char *c = malloc(n ? n : 1);
    if (c == NULL)
        abort();
    if (n)
        memcpy(c, p, n);
    return c;
}

/* Parses s[0..n): -1 for a bad selector, else whether it matches labels[0..ln). */
static int run(const char *s, size_t n, const char *labels, size_t ln, char *msg, size_t msglen,
               size_t *pos)
{
    kinf_labelselector *sel = NULL;
    kinf_err e = kinf_labelselector_parse(s, n, &sel, pos, msg, msglen);
    int m;
    if (e == KINF_EINVAL) {
        if (sel != NULL || msg[0] == '\0' || *pos > n)
            DIE("bad selector: sel %p, message '%s', position %zu of %zu", (void *)sel, msg, *pos, n);
        return -1;
    }
    if (e != KINF_OK || sel == NULL)
        DIE("parse returned %d", (int)e);
    m = kinf_labelselector_matches_json(sel, labels, ln);
    if (m != kinf_labelselector_matches_json(sel, labels, ln))
        DIE("matching twice differs");
    if (kinf_labelselector_len(sel) == 0 && !m)
        DIE("the empty selector did not match");
    kinf_labelselector_free(sel);
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t n = nl ? (size_t)(nl - data) : size, ln = nl ? size - n - 1 : 0;
    char *sel = copy(data, n), *labels = nl ? copy(nl + 1, ln) : NULL;
    char msg[1024], msg2[1024];
    size_t pos = 0, pos2 = 0;
    buf spaced = {0};
    int a, b;

    a = run(sel, n, labels, ln, msg, sizeof(msg), &pos);
    b = run(sel, n, labels, ln, msg2, sizeof(msg2), &pos2);
    if (a != b || (a < 0 && (pos != pos2 || strcmp(msg, msg2) != 0)))
        DIE("parsing twice differs");
    for (size_t i = 0; i < n; i++) {
        if (sel[i] == ',')
            buf_add(&spaced, " , ", 3);
        else
            buf_add(&spaced, sel + i, 1);
    }
    if (a >= 0) {
        b = run(spaced.p ? spaced.p : "", spaced.len, labels, ln, msg2, sizeof(msg2), &pos2);
        if (b != a)
            DIE("blanks around commas changed the outcome: %d then %d (%s)", a, b, msg2);
    }
    free(spaced.p);
    free(sel);
    free(labels);
    return 0;
}
