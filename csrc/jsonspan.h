/*
 * jsonspan.h - the top-level members of a JSON object, as spans, without decoding anything.
 *
 * For lazy decoding: the Lua binding decodes only the members a reader touches (a handler that
 * reads obj.metadata never pays for spec and status). Records are validated JSON already (the
 * reflector's scanner or lua-cjson made them), so this walks the bytes fast and only checks
 * what it needs to stay in bounds; on anything unexpected it reports failure and the caller
 * falls back to decoding the whole object.
 *
 * Keys are returned raw (between the quotes, escapes not decoded); key_escaped says whether the
 * key contains a backslash, so a caller comparing keys can tell when raw bytes are not enough.
 * Pure functions: no allocation, no state, any thread.
 */
#ifndef KINF_JSONSPAN_H
#define KINF_JSONSPAN_H

#include <stddef.h>

#include "object.h"

typedef struct kinf_json_member {
    kinf_str key;    /* raw key bytes */
    int key_escaped; /* the raw key contains a backslash escape */
    kinf_str value;  /* the value's bytes, exactly as in the input */
} kinf_json_member;

/*
 * Iterates the members of the object json[0..len). Start with *pos = 0. Returns 1 and fills m
 * for each member, 0 after the last one, -1 when the input is not an object or is malformed
 * where it was looked at.
 */
int kinf_json_next_member(const char *json, size_t len, size_t *pos, kinf_json_member *m);

/* Finds the member whose raw key is `key` (a key written with escapes never matches): 1 and the
 * value's span, 0 when absent, -1 on malformed input or an escaped key (compare them decoded). */
int kinf_json_find_member(const char *json, size_t len, const char *key, size_t key_len,
                          kinf_str *value);

#endif
