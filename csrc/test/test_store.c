/* test_store.c - the indexed store from C: index maintenance, failing and re-entrant index
 * functions, replace, add_indexers, filtered reads (kinf_store_select), and a writer racing
 * readers (run under TSan). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "store.h"
#include "testobj.h"

static kinf_err by_node(void *ud, kinf_object *obj, kinf_values **out, char *errbuf, size_t len)
{
    kinf_str node = node_of(obj);
    (void)ud;
    if (node.len == 4 && memcmp(node.ptr, "FAIL", 4) == 0) {
        kinf_errmsg(errbuf, len, "no node for you");
        return KINF_EINDEX;
    }
    if (node.len == 0) {
        *out = NULL;
        return KINF_OK;
    }
    *out = kinf_values_new(&node, 1);
    return *out ? KINF_OK : KINF_ENOMEM;
}

static kinf_store *new_store(void)
{
    kinf_err err;
    kinf_store *s = kinf_store_new(1, &err);
    kinf_indexer_def def = {"by_node", by_node, NULL};
    CHECK(s != NULL);
    CHECK(kinf_store_add_indexers(s, &def, 1, NULL, 0) == KINF_OK);
    return s;
}

static void add(kinf_store *s, const char *ns, const char *name, const char *node)
{
    kinf_object *o = mkobj(ns, name, node, "1");
    kinf_err err = kinf_store_add(s, o, NULL, NULL, 0);
    CHECK(err == KINF_OK || err == KINF_EINDEX);
    kinf_object_unref(o);
}

/* Keys under index/value, joined with ',' (sorted, as index_keys returns them). */
static const char *keys(kinf_store *s, const char *index, const char *value)
{
    static char buf[1024];
    kinf_object **objs;
    size_t n;
    buf[0] = '\0';
    if (kinf_store_index_keys(s, index, value, strlen(value), &objs, &n) != KINF_OK)
        return "(error)";
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(buf, ",");
        strcat(buf, objs[i]->key);
    }
    kinf_objects_free(objs, n);
    return buf;
}

static size_t nvalues(kinf_store *s, const char *index)
{
    kinf_values *v = NULL;
    size_t n;
    CHECK(kinf_store_index_values(s, index, &v) == KINF_OK);
    n = v ? v->n : 0;
    kinf_values_free(v);
    return n;
}

static void update_moves_keys_between_values(void)
{
    kinf_store *s = new_store();
    add(s, "a", "p1", "n1");
    add(s, "a", "p2", "n1");
    add(s, "b", "p3", "n2");
    CHECK_STR(keys(s, "by_node", "n1"), "a/p1,a/p2");
    CHECK_STR(keys(s, "namespace", "a"), "a/p1,a/p2");
    add(s, "a", "p1", "n2");
    CHECK_STR(keys(s, "by_node", "n1"), "a/p2");
    CHECK_STR(keys(s, "by_node", "n2"), "a/p1,b/p3");
    add(s, "a", "p2", "n3");
    CHECK_STR(keys(s, "by_node", "n1"), "");
    CHECK(nvalues(s, "by_node") == 2); /* n1 emptied and removed */
    CHECK(kinf_store_len(s) == 3);
    kinf_store_unref(s);
}

static void delete_removes_from_every_index(void)
{
    kinf_store *s = new_store();
    kinf_object *old = NULL;
    add(s, "a", "p1", "n1");
    add(s, "a", "p2", "n1");
    CHECK(kinf_store_delete(s, "a/p1", 4, &old) == KINF_OK);
    CHECK(old != NULL && strcmp(old->name, "p1") == 0);
    kinf_object_unref(old);
    CHECK_STR(keys(s, "by_node", "n1"), "a/p2");
    CHECK(kinf_store_delete(s, "a/p2", 4, NULL) == KINF_OK);
    CHECK(nvalues(s, "by_node") == 0);
    CHECK(nvalues(s, "namespace") == 0);
    CHECK(kinf_store_delete(s, "a/zz", 4, &old) == KINF_OK && old == NULL);
    CHECK(kinf_store_get(s, "a/p1", 4) == NULL);
    kinf_store_unref(s);
}

static void failing_index_function_keeps_store_consistent(void)
{
    kinf_store *s = new_store();
    kinf_object *o;
    char msg[256];
    unsigned long errors;

    add(s, "a", "p1", "n1");
    o = mkobj("a", "p1", "FAIL", "2");
    CHECK(kinf_store_add(s, o, NULL, msg, sizeof(msg)) == KINF_EINDEX);
    CHECK(strstr(msg, "by_node") != NULL && strstr(msg, "no node for you") != NULL);
    kinf_object_unref(o);
    o = kinf_store_get(s, "a/p1", 4);
    CHECK(o != NULL && strcmp(o->resource_version, "2") == 0); /* stored anyway */
    kinf_object_unref(o);
    CHECK_STR(keys(s, "by_node", "n1"), ""); /* no stale value from the old version */
    CHECK(nvalues(s, "by_node") == 0);
    CHECK_STR(keys(s, "namespace", "a"), "a/p1"); /* the other index is intact */
    errors = kinf_store_index_errors(s, msg, sizeof(msg));
    CHECK(errors == 1);
    CHECK(strstr(msg, "a/p1") != NULL);
    kinf_store_unref(s);
}

struct reentry {
    kinf_store *s;
    kinf_err inner;
};

static kinf_err reentrant_fn(void *ud, kinf_object *obj, kinf_values **out, char *eb, size_t el)
{
    struct reentry *r = ud;
    kinf_object *got;
    (void)eb;
    (void)el;
    *out = NULL;
    r->inner = kinf_store_add(r->s, obj, NULL, NULL, 0); /* must be refused, not deadlock */
    got = kinf_store_get(r->s, "x", 1);                   /* reads are fine */
    kinf_object_unref(got);
    return KINF_OK;
}

static void write_from_index_function_is_refused(void)
{
    kinf_err err;
    struct reentry r;
    kinf_indexer_def def = {"re", reentrant_fn, &r};
    kinf_object *o = mkobj("", "x", "n", "1");
    r.s = kinf_store_new(0, &err);
    r.inner = KINF_OK;
    CHECK(kinf_store_add_indexers(r.s, &def, 1, NULL, 0) == KINF_OK);
    CHECK(kinf_store_add(r.s, o, NULL, NULL, 0) == KINF_OK);
    CHECK(r.inner == KINF_EBUSY);
    kinf_object_unref(o);
    kinf_store_unref(r.s);
}

static void replace_rebuilds_indexes(void)
{
    kinf_store *s = new_store();
    kinf_object *objs[3];
    add(s, "a", "old", "n1");
    objs[0] = mkobj("a", "p1", "n2", "5");
    objs[1] = mkobj("b", "p2", "n2", "5");
    objs[2] = mkobj("a", "p1", "n3", "6"); /* a later duplicate wins */
    CHECK(kinf_store_replace(s, objs, 3, NULL, 0) == KINF_OK);
    CHECK(kinf_store_len(s) == 2);
    CHECK(kinf_store_get(s, "a/old", 5) == NULL);
    CHECK_STR(keys(s, "by_node", "n1"), "");
    CHECK_STR(keys(s, "by_node", "n2"), "b/p2");
    CHECK_STR(keys(s, "by_node", "n3"), "a/p1");
    CHECK_STR(keys(s, "namespace", "a"), "a/p1");
    for (int i = 0; i < 3; i++)
        kinf_object_unref(objs[i]);
    kinf_store_unref(s);
}

static void add_indexers_indexes_existing_items_and_detects_conflicts(void)
{
    kinf_err err;
    kinf_store *s = kinf_store_new(0, &err);
    kinf_indexer_def def = {"by_node", by_node, NULL};
    kinf_indexer_def two[2] = {{"x", by_node, NULL}, {"by_node", by_node, NULL}};
    char msg[128];
    add(s, "a", "p1", "n1");
    add(s, "a", "p2", "n2");
    CHECK(kinf_store_has_index(s, "namespace") == 0);
    CHECK(kinf_store_add_indexers(s, &def, 1, NULL, 0) == KINF_OK);
    CHECK_STR(keys(s, "by_node", "n1"), "a/p1");
    CHECK(kinf_store_add_indexers(s, two, 2, msg, sizeof(msg)) == KINF_EEXIST);
    CHECK_STR(msg, "indexer conflict: by_node");
    CHECK(kinf_store_has_index(s, "x") == 0); /* all or nothing */
    add(s, "a", "p1", "n2");                   /* items indexed before the indexer existed */
    CHECK_STR(keys(s, "by_node", "n2"), "a/p1,a/p2");
    kinf_store_unref(s);
}

static void index_unions_values_and_rejects_unknown_index(void)
{
    kinf_store *s = new_store();
    kinf_object *probe = mkobj("z", "probe", "n1", "1"), **objs;
    size_t n;
    add(s, "a", "p1", "n1");
    add(s, "b", "p2", "n1");
    add(s, "b", "p3", "n2");
    CHECK(kinf_store_index(s, "by_node", probe, &objs, &n, NULL, 0) == KINF_OK);
    CHECK(n == 2);
    kinf_objects_free(objs, n);
    CHECK(kinf_store_index(s, "nope", probe, &objs, &n, NULL, 0) == KINF_ENOTFOUND);
    CHECK(kinf_store_by_index(s, "nope", "x", 1, &objs, &n) == KINF_ENOTFOUND);
    kinf_object_unref(probe);
    kinf_store_unref(s);
}

static void tombstones_are_not_stored(void)
{
    kinf_store *s = new_store();
    kinf_err err;
    kinf_object *t = kinf_tombstone_new("a/b", 3, NULL, &err);
    CHECK(kinf_store_add(s, t, NULL, NULL, 0) == KINF_EINVAL);
    CHECK(kinf_store_replace(s, &t, 1, NULL, 0) == KINF_EINVAL);
    kinf_object_unref(t);
    kinf_store_unref(s);
}

/* ---- a writer racing readers (ThreadSanitizer reports any data race) ---- */

#define RACE_KEYS 200
/* ---- kinf_store_select ---- */

static kinf_err by_first(void *ud, kinf_object *obj, kinf_values **out, char *errbuf, size_t len)
{
    kinf_str v = {obj->name, 1};
    (void)ud, (void)errbuf, (void)len;
    *out = kinf_values_new(&v, 1);
    return *out ? KINF_OK : KINF_ENOMEM;
}

static int node_is(void *ud, const kinf_object *obj)
{
    kinf_str n = node_of(obj);
    return n.len == strlen(ud) && memcmp(n.ptr, ud, n.len) == 0;
}

static int by_key_cmp(const void *a, const void *b)
{
    return strcmp((*(kinf_object *const *)a)->key, (*(kinf_object *const *)b)->key);
}

/* The keys kinf_store_select returns (sorted, joined with ','): in namespace ns (NULL: all),
 * with index/value pairs (NULL-terminated), filtered to node (NULL: no filter). */
static const char *selected(kinf_store *s, const char *ns, const char *const *pairs,
                            const char *node)
{
    static char buf[1024];
    kinf_index_match m[16];
    kinf_store_query q;
    kinf_object **objs;
    size_t n, nm = 0, bad = 99;
    kinf_err e;

    while (pairs != NULL && pairs[2 * nm] != NULL) {
        m[nm].index = pairs[2 * nm];
        m[nm].value.ptr = pairs[2 * nm + 1];
        m[nm].value.len = strlen(pairs[2 * nm + 1]);
        nm++;
    }
    memset(&q, 0, sizeof(q));
    q.namespace_.ptr = ns;
    q.namespace_.len = ns ? strlen(ns) : 0;
    q.matches = m;
    q.nmatches = nm;
    q.filter = node ? node_is : NULL;
    q.ud = (void *)node;
    e = kinf_store_select(s, &q, &objs, &n, &bad);
    if (e == KINF_ENOTFOUND) {
        snprintf(buf, sizeof(buf), "(no index #%zu)", bad);
        return buf;
    }
    if (e != KINF_OK)
        return "(error)";
    qsort(objs, n, sizeof(*objs), by_key_cmp);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(buf, ",");
        strcat(buf, objs[i]->key);
    }
    kinf_objects_free(objs, n);
    return buf;
}

static void fill(kinf_store *s)
{
    add(s, "a", "p1", "n1");
    add(s, "a", "p2", "n1");
    add(s, "a", "q3", "n2");
    add(s, "b", "p4", "n1");
    add(s, "b", "q5", "n2");
    add(s, "c", "p6", "n1");
    add(s, "", "p7", "n1"); /* cluster-scoped */
}

static void select_narrows_by_namespace_and_indexes(void)
{
    kinf_store *s = new_store();
    kinf_indexer_def def = {"by_first", by_first, NULL};
    const char *n1[] = {"by_node", "n1", NULL};
    const char *n2_q[] = {"by_node", "n2", "by_first", "q", NULL};
    const char *n1_q[] = {"by_node", "n1", "by_first", "q", NULL};
    const char *none[] = {"by_node", "n9", NULL};
    const char *unknown[] = {"by_node", "n1", "nope", "x", NULL};
    const char *many[] = {"by_node", "n1", "by_node", "n1", "by_node", "n1", "by_node", "n1",
                          "by_node", "n1", "by_node", "n1", "by_node", "n1", "by_node", "n1",
                          "by_first", "p", "namespace", "a", NULL}; /* over the stack array */

    CHECK(kinf_store_add_indexers(s, &def, 1, NULL, 0) == KINF_OK);
    fill(s);
    CHECK_STR(selected(s, NULL, NULL, NULL), "a/p1,a/p2,a/q3,b/p4,b/q5,c/p6,p7");
    CHECK_STR(selected(s, "", NULL, NULL), "a/p1,a/p2,a/q3,b/p4,b/q5,c/p6,p7"); /* "" = all */
    CHECK_STR(selected(s, "a", NULL, NULL), "a/p1,a/p2,a/q3");
    CHECK_STR(selected(s, "zz", NULL, NULL), "");
    CHECK_STR(selected(s, "a", n1, NULL), "a/p1,a/p2");
    CHECK_STR(selected(s, NULL, n1, NULL), "a/p1,a/p2,b/p4,c/p6,p7");
    CHECK_STR(selected(s, NULL, n2_q, NULL), "a/q3,b/q5");
    CHECK_STR(selected(s, "b", n2_q, NULL), "b/q5");
    CHECK_STR(selected(s, NULL, n1_q, NULL), "");
    CHECK_STR(selected(s, NULL, none, NULL), "");
    CHECK_STR(selected(s, "a", NULL, "n2"), "a/q3");       /* the filter */
    CHECK_STR(selected(s, NULL, n1, "n2"), "");
    CHECK_STR(selected(s, NULL, unknown, NULL), "(no index #1)");
    CHECK_STR(selected(s, NULL, many, NULL), "a/p1,a/p2");
    kinf_store_unref(s);
}

static void select_without_the_builtin_namespace_index(void)
{
    kinf_err err;
    kinf_store *plain = kinf_store_new(0, &err);
    kinf_store *own = kinf_store_new(0, &err);
    /* A user's index that happens to be called "namespace" is not the namespace. */
    kinf_indexer_def def = {"namespace", by_node, NULL};

    CHECK(plain != NULL && own != NULL);
    CHECK(kinf_store_add_indexers(own, &def, 1, NULL, 0) == KINF_OK);
    fill(plain);
    fill(own);
    CHECK_STR(selected(plain, "a", NULL, NULL), "a/p1,a/p2,a/q3");
    CHECK_STR(selected(plain, "a", NULL, "n1"), "a/p1,a/p2");
    CHECK_STR(selected(own, "a", NULL, NULL), "a/p1,a/p2,a/q3");
    CHECK_STR(selected(own, "n2", NULL, NULL), "");
    {
        const char *ns_index[] = {"namespace", "n2", NULL};
        CHECK_STR(selected(own, NULL, ns_index, NULL), "a/q3,b/q5");
    }
    kinf_store_unref(plain);
    kinf_store_unref(own);
}

#define RACE_ROUNDS 30

static void *writer(void *arg)
{
    kinf_store *s = arg;
    char name[32], node[16];
    for (int r = 0; r < RACE_ROUNDS; r++) {
        for (int i = 0; i < RACE_KEYS; i++) {
            snprintf(name, sizeof(name), "p%d", i);
            snprintf(node, sizeof(node), "n%d", (i + r) % 7);
            add(s, "ns", name, node);
            if ((i + r) % 5 == 0) {
                char key[40];
                snprintf(key, sizeof(key), "ns/%s", name);
                CHECK(kinf_store_delete(s, key, strlen(key), NULL) == KINF_OK);
            }
        }
    }
    return NULL;
}

static void *reader(void *arg)
{
    kinf_store *s = arg;
    for (int r = 0; r < RACE_ROUNDS * 20; r++) {
        kinf_object **objs, *o;
        size_t n;
        char node[16];
        uint64_t sv = kinf_store_version(s), bv = 0, bv2 = 0;
        snprintf(node, sizeof(node), "n%d", r % 7);
        CHECK(kinf_store_index_version(s, "by_node", node, strlen(node), &bv) == KINF_OK);
        if (kinf_store_by_index(s, "by_node", node, strlen(node), &objs, &n) == KINF_OK) {
            for (size_t i = 0; i < n; i++) {
                kinf_str got = node_of(objs[i]);
                /* An object listed under a value must carry that value. */
                CHECK(got.len == strlen(node) && memcmp(got.ptr, node, got.len) == 0);
            }
            kinf_objects_free(objs, n);
        }
        /* Versions only grow (a value that comes back gets a new one). */
        CHECK(kinf_store_index_version(s, "by_node", node, strlen(node), &bv2) == KINF_OK);
        CHECK(bv2 == 0 || bv2 >= bv);
        CHECK(kinf_store_version(s) >= sv);
        o = kinf_store_get(s, "ns/p3", 5);
        kinf_object_unref(o);
        if (kinf_store_list(s, &objs, &n) == KINF_OK)
            kinf_objects_free(objs, n);
        {
            kinf_index_match m = {"by_node", {node, strlen(node)}};
            kinf_store_query q = {{"ns", 2}, &m, 1, node_is, node};
            if (kinf_store_select(s, &q, &objs, &n, NULL) == KINF_OK) {
                for (size_t i = 0; i < n; i++)
                    CHECK(strcmp(objs[i]->namespace_, "ns") == 0);
                kinf_objects_free(objs, n);
            }
        }
    }
    return NULL;
}

static void writer_races_readers(void)
{
    kinf_store *s = new_store();
    pthread_t w, r1, r2;
    kinf_object **objs;
    size_t n, total = 0;

    pthread_create(&w, NULL, writer, s);
    pthread_create(&r1, NULL, reader, s);
    pthread_create(&r2, NULL, reader, s);
    pthread_join(w, NULL);
    pthread_join(r1, NULL);
    pthread_join(r2, NULL);
    /* Every stored item is in exactly the by_node bucket of its node. */
    for (int v = 0; v < 7; v++) {
        char node[16];
        snprintf(node, sizeof(node), "n%d", v);
        CHECK(kinf_store_by_index(s, "by_node", node, strlen(node), &objs, &n) == KINF_OK);
        total += n;
        kinf_objects_free(objs, n);
    }
    CHECK(total == kinf_store_len(s));
    kinf_store_unref(s);
}

static uint64_t ixver(kinf_store *s, const char *index, const char *value)
{
    uint64_t v = 99;
    CHECK(kinf_store_index_version(s, index, value, strlen(value), &v) == KINF_OK);
    return v;
}

/* A cached by_index result stays valid exactly while its value's version is unchanged: every
 * write that changes what by_index returns changes the version, and no other value's. */
static void versions_change_with_what_by_index_returns(void)
{
    kinf_store *s = new_store();
    uint64_t v0 = kinf_store_version(s), n1, n2, a, gone;
    kinf_object *o;

    CHECK(ixver(s, "by_node", "n1") == 0); /* no object has it */
    CHECK(kinf_store_index_version(s, "nope", "x", 1, &n1) == KINF_ENOTFOUND);
    add(s, "a", "p1", "n1");
    add(s, "b", "p2", "n2");
    CHECK(kinf_store_version(s) > v0);
    n1 = ixver(s, "by_node", "n1");
    n2 = ixver(s, "by_node", "n2");
    a = ixver(s, "namespace", "a");
    CHECK(n1 != 0 && n2 != 0 && n2 > n1);

    /* The object of a key changes, its values do not: its buckets change, the others do not. */
    o = mkobj("a", "p1", "n1", "2");
    CHECK(kinf_store_add(s, o, NULL, NULL, 0) == KINF_OK);
    kinf_object_unref(o);
    CHECK(ixver(s, "by_node", "n1") > n1);
    CHECK(ixver(s, "namespace", "a") > a);
    CHECK(ixver(s, "by_node", "n2") == n2);

    /* A key moves from n1 to n2: both change; n1 is gone (0). */
    n2 = ixver(s, "by_node", "n2");
    add(s, "a", "p1", "n2");
    CHECK(ixver(s, "by_node", "n1") == 0);
    CHECK(ixver(s, "by_node", "n2") > n2);

    /* A value that comes back never has a version it had before. */
    gone = ixver(s, "by_node", "n2");
    CHECK(kinf_store_delete(s, "a/p1", 4, NULL) == KINF_OK);
    CHECK(kinf_store_delete(s, "b/p2", 4, NULL) == KINF_OK);
    CHECK(ixver(s, "by_node", "n2") == 0);
    add(s, "c", "p9", "n2");
    CHECK(ixver(s, "by_node", "n2") > gone);

    /* Deleting an absent key changes nothing. */
    v0 = kinf_store_version(s);
    CHECK(kinf_store_delete(s, "zz/zz", 5, NULL) == KINF_OK);
    CHECK(kinf_store_version(s) == v0);

    /* replace gives every value a new version; add_indexers moves the store version. */
    n2 = ixver(s, "by_node", "n2");
    o = mkobj("c", "p9", "n2", "3");
    CHECK(kinf_store_replace(s, &o, 1, NULL, 0) == KINF_OK);
    kinf_object_unref(o);
    CHECK(ixver(s, "by_node", "n2") > n2);
    CHECK(ixver(s, "by_node", "n2") == kinf_store_version(s));
    v0 = kinf_store_version(s);
    {
        kinf_indexer_def def = {"by_node2", by_node, NULL};
        CHECK(kinf_store_add_indexers(s, &def, 1, NULL, 0) == KINF_OK);
    }
    CHECK(kinf_store_version(s) > v0);
    CHECK(ixver(s, "by_node2", "n2") == kinf_store_version(s));
    kinf_store_unref(s);
}

/* Each index's values of key, "index=v1|v2;..." in index order (kinf_store_item_values). */
static const char *item_values(kinf_store *s, const char *key)
{
    static char buf[512];
    kinf_values *vals[4] = {NULL};
    size_t n = kinf_store_index_count(s);
    buf[0] = '\0';
    CHECK(n <= 4);
    if (kinf_store_item_values(s, key, strlen(key), vals, n) != KINF_OK)
        return "(error)";
    for (size_t i = 0; i < n; i++) {
        strcat(buf, i ? ";" : "");
        strcat(buf, kinf_store_index_name(s, i));
        strcat(buf, "=");
        for (size_t j = 0; vals[i] != NULL && j < vals[i]->n; j++) {
            strcat(buf, j ? "|" : "");
            strncat(buf, vals[i]->v[j].ptr, vals[i]->v[j].len);
        }
        kinf_values_free(vals[i]);
    }
    return buf;
}

/* The namespace index keeps no values per item (they come from the records): every write keeps
 * it right, with and without other indexes, before and after add_indexers and replace. */
static void namespace_values_come_from_the_records(void)
{
    kinf_err err;
    kinf_store *s = kinf_store_new(1, &err);
    kinf_indexer_def def = {"by_node", by_node, NULL};
    kinf_object *objs[2];

    add(s, "a", "p1", "n1");
    add(s, "b", "p2", "n1");
    add(s, "a", "p1", "n2"); /* an update */
    CHECK_STR(keys(s, "namespace", "a"), "a/p1");
    CHECK_STR(keys(s, "namespace", "b"), "b/p2");
    CHECK_STR(item_values(s, "a/p1"), "namespace=a");
    CHECK(kinf_store_delete(s, "b/p2", 4, NULL) == KINF_OK);
    CHECK_STR(keys(s, "namespace", "b"), "");
    CHECK(nvalues(s, "namespace") == 1);

    CHECK(kinf_store_add_indexers(s, &def, 1, NULL, 0) == KINF_OK);
    CHECK_STR(item_values(s, "a/p1"), "namespace=a;by_node=n2");
    add(s, "a", "p1", "n3");
    add(s, "c", "p3", "n3");
    CHECK_STR(item_values(s, "a/p1"), "namespace=a;by_node=n3");
    CHECK_STR(item_values(s, "c/p3"), "namespace=c;by_node=n3");
    CHECK_STR(keys(s, "by_node", "n3"), "a/p1,c/p3");
    CHECK_STR(keys(s, "namespace", "c"), "c/p3");
    CHECK(kinf_store_delete(s, "c/p3", 4, NULL) == KINF_OK);
    CHECK_STR(keys(s, "namespace", "c"), "");
    CHECK_STR(keys(s, "by_node", "n3"), "a/p1");

    objs[0] = mkobj("d", "p4", "n4", "7");
    objs[1] = mkobj("a", "p1", "", "8");
    CHECK(kinf_store_replace(s, objs, 2, NULL, 0) == KINF_OK);
    CHECK_STR(item_values(s, "d/p4"), "namespace=d;by_node=n4");
    CHECK_STR(item_values(s, "a/p1"), "namespace=a;by_node=");
    CHECK_STR(keys(s, "namespace", "a"), "a/p1");
    CHECK_STR(keys(s, "namespace", "d"), "d/p4");
    CHECK(nvalues(s, "namespace") == 2);
    add(s, "d", "p4", "n5");
    CHECK_STR(keys(s, "by_node", "n5"), "d/p4");
    CHECK_STR(keys(s, "namespace", "d"), "d/p4");
    for (int i = 0; i < 2; i++)
        kinf_object_unref(objs[i]);
    kinf_store_unref(s);

    /* Only the namespace index, through replace too. */
    s = kinf_store_new(1, &err);
    objs[0] = mkobj("e", "p5", "n1", "9");
    CHECK(kinf_store_replace(s, objs, 1, NULL, 0) == KINF_OK);
    CHECK_STR(item_values(s, "e/p5"), "namespace=e");
    add(s, "e", "p5", "n2");
    add(s, "f", "p6", "n2");
    CHECK_STR(keys(s, "namespace", "e"), "e/p5");
    CHECK_STR(keys(s, "namespace", "f"), "f/p6");
    kinf_object_unref(objs[0]);
    kinf_store_unref(s);
}

TEST_MAIN(TEST(update_moves_keys_between_values), TEST(delete_removes_from_every_index),
          TEST(failing_index_function_keeps_store_consistent),
          TEST(write_from_index_function_is_refused), TEST(replace_rebuilds_indexes),
          TEST(add_indexers_indexes_existing_items_and_detects_conflicts),
          TEST(index_unions_values_and_rejects_unknown_index), TEST(tombstones_are_not_stored),
          TEST(select_narrows_by_namespace_and_indexes),
          TEST(select_without_the_builtin_namespace_index), TEST(writer_races_readers),
          TEST(versions_change_with_what_by_index_returns),
          TEST(namespace_values_come_from_the_records))
