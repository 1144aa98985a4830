/* testobj.h - building object records in C tests. */
#ifndef KINF_TESTOBJ_H
#define KINF_TESTOBJ_H

#include <stdio.h>
#include <string.h>

#include "object.h"

/* A record for ns/name whose JSON carries a "node" field and a resourceVersion. */
static inline kinf_object *mkobj(const char *ns, const char *name, const char *node, const char *rv)
{
    char json[256];
    kinf_err err;
    kinf_meta meta = {{ns, strlen(ns)}, {name, strlen(name)}, {"", 0}, {rv, strlen(rv)}};
    int n = snprintf(json, sizeof(json),
                     "{\"metadata\":{\"namespace\":\"%s\",\"name\":\"%s\",\"resourceVersion\":\"%s\"},"
                     "\"node\":\"%s\"}",
                     ns, name, rv, node);
    return kinf_object_new(json, (size_t)n, &meta, &err);
}

/* The "node" field of a record made by mkobj (points into its JSON). */
static inline kinf_str node_of(const kinf_object *obj)
{
    kinf_str s = {"", 0};
    const char *p = strstr(obj->json, "\"node\":\"");
    if (p != NULL) {
        s.ptr = p + 8;
        s.len = (size_t)(strchr(s.ptr, '"') - s.ptr);
    }
    return s;
}

#endif
