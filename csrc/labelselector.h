/*
 * labelselector.h - Kubernetes label selectors (k8s.io/apimachinery labels.Parse, kubectl's -l):
 * parsed once into requirements, then matched against object records' metadata.labels straight
 * from their JSON bytes, without decoding the objects.
 *
 * Syntax, as labels.Parse reads it: requirements separated by ',' (all must hold):
 *   key=value  key==value  key!=value  key in (v1,v2)  key notin (v1,v2)  key  !key  key>n  key<n
 * Blanks (space, tab, CR, LF) may stand around any token. Keys are qualified names (an optional
 * DNS-subdomain prefix and '/', then at most 63 characters of [A-Za-z0-9._-] that start and end
 * alphanumeric); values are empty or at most 63 such characters. An empty (or all-blank) selector
 * has no requirements and matches every object. Value lists are sets: `in (a,,b)` holds "a", ""
 * and "b", and `in ()` is the set {""} (kubectl accepts it). A NUL byte is an ordinary byte here
 * (labels.Parse would end the token there) and so always fails key or value validation.
 *
 * Errors carry apimachinery's message text (e.g. "unable to parse requirement: found '',
 * expected: ',' or ')'"), and the byte offset of the token it is about, which kubectl does not
 * give.
 *
 * Matching (labels.Requirement.Matches): `=` `==` `in`: the label exists and its value is in the
 * set; `!=` `notin`: the label is absent or its value is not in the set; `key` / `!key`: present /
 * absent; `>` `<`: the label exists and its value and the selector's are base-10 64-bit integers
 * that compare so. With duplicate keys in the JSON the last one counts (as lua-cjson decodes
 * it). A label whose JSON value is not a string (an API server never sends one; a Lua table
 * may hold one) exists, equals no value and is no integer.
 *
 * Ownership and threads: kinf_labelselector_parse returns ONE allocation owned by the caller,
 * freed with kinf_labelselector_free, which is free(): a binding may keep it as any malloc'd
 * block. A selector is immutable; any number of threads may match with it at once. Matching
 * never allocates. The only state written is a record's labels_at cache (object.h), atomically.
 */
#ifndef KINF_LABELSELECTOR_H
#define KINF_LABELSELECTOR_H

#include <stddef.h>

#include "kinf.h"
#include "object.h"

typedef struct kinf_labelselector kinf_labelselector;

/*
 * Parses sel[0..len). KINF_OK with *out set; KINF_EINVAL for a bad selector, with the message in
 * errbuf and in *errpos the byte offset of the token it is about (len when that token is the end
 * of the string); KINF_ENOMEM. *out is NULL on failure.
 */
kinf_err kinf_labelselector_parse(const char *sel, size_t len, kinf_labelselector **out,
                                  size_t *errpos, char *errbuf, size_t errlen);
void kinf_labelselector_free(kinf_labelselector *sel);

/* How many requirements sel has (0: it matches everything). */
size_t kinf_labelselector_len(const kinf_labelselector *sel);

/* Whether the labels object whose JSON starts at labels[0] (bytes after its closing brace are
 * ignored; labels may be NULL or not an object: no labels) satisfies every requirement. */
int kinf_labelselector_matches_json(const kinf_labelselector *sel, const char *labels, size_t len);

/* Whether obj's metadata.labels satisfy sel. A tombstone never matches. */
int kinf_labelselector_matches(const kinf_labelselector *sel, const kinf_object *obj);

/*
 * Where obj's metadata.labels object starts in obj->json: 1 and *at (the offset of its '{'),
 * or 0 when obj has none (absent, null, not an object, a tombstone). Found by one walk over the
 * record's JSON the first time, then remembered in the record.
 */
int kinf_object_labels_at(const kinf_object *obj, size_t *at);

#endif
