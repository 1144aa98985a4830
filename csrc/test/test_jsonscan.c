/*
 * test_jsonscan.c - the streaming JSON scanner (jsonscan.h).
 *
 * Every input is fed whole, in 1-byte chunks, split in two at every byte
 * offset and split at random places; all of these must give the same
 * callbacks (type, json bytes, metadata, offsets) and the same final error
 * and message. Each chunk is a fresh heap copy freed right after the feed,
 * so ASan catches a scanner that keeps a pointer into a chunk.
 * JSON literals are written with ' for " (see J()).
 */
#include "jsonscan.h"
#include "ctest.h"

#include <stdarg.h>
#include <stdint.h>

/* ---- helpers ------------------------------------------------------------ */

typedef struct strbuf {
    char *p;
    size_t len, cap;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        char *np;
        while (nc < b->len + n + 1)
            nc *= 2;
        np = realloc(b->p, nc);
        if (np == NULL) {
            fprintf(stderr, "out of memory in test\n");
            exit(2);
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Appends bytes with C-style escapes for anything unprintable. */
static void sb_esc(strbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            sb_add(b, "\\n", 2);
        else if (c < 0x20 || c == 0x7f)
            sb_printf(b, "\\x%02x", c);
        else
            sb_add(b, (const char *)&c, 1);
    }
}

/* ' -> " so JSON fits in C literals. Returns a heap string the caller frees. */
static char *J(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(n + 1);
    if (o == NULL)
        exit(2);
    for (size_t i = 0; i <= n; i++)
        o[i] = s[i] == '\'' ? '"' : s[i];
    return o;
}

typedef struct rec {
    strbuf full;  /* everything, with offsets */
    strbuf plain; /* without offsets: compared with expected literals */
    int items;
    kinf_err fail_with; /* on_item returns this (once items > fail_after) */
    int fail_after;
    kinf_scanner *s;    /* for the re-entrancy test */
    kinf_err reenter_err;
} rec;

static kinf_err rec_item(void *ud, const kinf_scan_item *it)
{
    rec *r = ud;
    strbuf line = {0};
    sb_printf(&line, "%s|", kinf_event_type_name(it->type));
    sb_esc(&line, it->kind.ptr, it->kind.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, it->api_version.ptr, it->api_version.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, it->meta.namespace_.ptr, it->meta.namespace_.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, it->meta.name.ptr, it->meta.name.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, it->meta.uid.ptr, it->meta.uid.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, it->meta.resource_version.ptr, it->meta.resource_version.len);
    sb_printf(&line, "|%d|", it->initial_events_end);
    sb_esc(&line, it->json, it->json_len);
    sb_add(&line, "\n", 1);
    sb_add(&r->plain, line.p, line.len);
    sb_printf(&r->full, "@%llu ", (unsigned long long)it->offset);
    sb_add(&r->full, line.p, line.len);
    free(line.p);
    r->items++;
    if (r->s)
        r->reenter_err = kinf_scanner_feed(r->s, "{}", 2);
    if (r->fail_with && r->items > r->fail_after)
        return r->fail_with;
    return KINF_OK;
}

static kinf_err rec_end(void *ud, const kinf_scan_list_end *e)
{
    rec *r = ud;
    strbuf line = {0};
    sb_add(&line, "END|", 4);
    sb_esc(&line, e->kind.ptr, e->kind.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, e->api_version.ptr, e->api_version.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, e->resource_version.ptr, e->resource_version.len);
    sb_add(&line, "|", 1);
    sb_esc(&line, e->continue_.ptr, e->continue_.len);
    sb_printf(&line, "|%lld|%zu|%d|%d|%d|%s|", e->remaining_item_count, e->items, e->has_items,
              e->is_status, e->status->code, e->status->reason);
    sb_esc(&line, e->status->message, strlen(e->status->message));
    sb_printf(&line, "|%d\n", e->status->too_large_resource_version);
    sb_add(&r->plain, line.p, line.len);
    sb_add(&r->full, line.p, line.len);
    free(line.p);
    return KINF_OK;
}

typedef struct result {
    char *full, *plain;
    kinf_err err;
    char msg[400];
} result;

static void result_free(result *r)
{
    free(r->full);
    free(r->plain);
}

/* Feeds in[0..len) cut at cuts[0..ncuts) (non-decreasing), then finishes. */
static void run_cuts(kinf_scan_mode mode, unsigned flags, size_t max, const char *in, size_t len,
                     const size_t *cuts, size_t ncuts, result *out)
{
    rec r;
    kinf_scan_options o;
    kinf_scanner *s;
    kinf_err e = KINF_OK;
    size_t pos = 0;

    memset(&r, 0, sizeof r);
    memset(&o, 0, sizeof o);
    memset(out, 0, sizeof *out);
    o.on_item = rec_item;
    o.on_list_end = rec_end;
    o.ud = &r;
    o.flags = flags;
    o.max_object_bytes = max;
    s = kinf_scanner_new(mode, &o, &e);
    CHECK(s != NULL && e == KINF_OK);
    if (s == NULL)
        return;
    for (size_t i = 0; i <= ncuts && e == KINF_OK; i++) {
        size_t next = i < ncuts ? cuts[i] : len;
        size_t n = next - pos;
        char *chunk = malloc(n ? n : 1);
        if (chunk == NULL)
            exit(2);
        memcpy(chunk, in + pos, n);
        e = kinf_scanner_feed(s, chunk, n);
        free(chunk);
        pos = next;
    }
    if (e == KINF_OK)
        e = kinf_scanner_finish(s);
    out->err = e;
    snprintf(out->msg, sizeof out->msg, "%s", kinf_scanner_error(s));
    if (e != KINF_OK) {
        /* failed stays failed */
        CHECK(kinf_scanner_feed(s, "{", 1) == e);
        CHECK(kinf_scanner_finish(s) == e);
        CHECK(strcmp(kinf_scanner_error(s), out->msg) == 0);
    } else {
        CHECK(out->msg[0] == '\0');
    }
    kinf_scanner_free(s);
    out->full = r.full.p ? r.full.p : calloc(1, 1);
    out->plain = r.plain.p ? r.plain.p : calloc(1, 1);
}

static uint64_t rng_next(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *st = x;
    return x;
}

static int same(const result *a, const result *b, const char *how, size_t at)
{
    if (a->err == b->err && strcmp(a->full, b->full) == 0 && strcmp(a->msg, b->msg) == 0)
        return 1;
    fprintf(stderr, "  mismatch (%s %zu): err %d vs %d\n  msg  [%s]\n  vs   [%s]\n  log  [%s]\n  vs   [%s]\n",
            how, at, a->err, b->err, a->msg, b->msg, a->full, b->full);
    return 0;
}

/*
 * Runs `in` whole, 1 byte at a time, split at every offset and at random
 * places; every run must match the whole run. Checks the whole run against
 * expected (plain log, NULL: not checked), the error and a message substring.
 */
static void check_ex(kinf_scan_mode mode, unsigned flags, size_t max, const char *in, size_t len,
                     const char *expected, kinf_err want_err, const char *msg_sub)
{
    result whole, r;
    size_t *cuts;
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ len;
    int bad = 0;

    run_cuts(mode, flags, max, in, len, NULL, 0, &whole);
    if (expected) {
        CHECK_STR(whole.plain, expected);
    }
    if (whole.err != want_err)
        fprintf(stderr, "  got error %d (%s), want %d; message: %s\n", whole.err,
                kinf_strerror(whole.err), want_err, whole.msg);
    CHECK(whole.err == want_err);
    if (msg_sub && strstr(whole.msg, msg_sub) == NULL) {
        fprintf(stderr, "  message [%s] lacks [%s]\n", whole.msg, msg_sub);
        CHECK(0);
    }

    cuts = malloc((len + 16) * sizeof *cuts);
    if (cuts == NULL)
        exit(2);
    for (size_t i = 0; i + 1 < len; i++)
        cuts[i] = i + 1;
    run_cuts(mode, flags, max, in, len, cuts, len ? len - 1 : 0, &r);
    bad += !same(&whole, &r, "1-byte chunks", 0);
    result_free(&r);

    for (size_t k = 0; k <= len && bad < 3; k++) {
        cuts[0] = k;
        run_cuts(mode, flags, max, in, len, cuts, 1, &r);
        bad += !same(&whole, &r, "split at", k);
        result_free(&r);
    }
    for (int t = 0; t < 40 && bad < 3 && len > 0; t++) {
        size_t nc = 2 + rng_next(&seed) % 9;
        for (size_t i = 0; i < nc; i++)
            cuts[i] = rng_next(&seed) % (len + 1);
        for (size_t i = 1; i < nc; i++) /* insertion sort */
            for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
                size_t tmp = cuts[j];
                cuts[j] = cuts[j - 1];
                cuts[j - 1] = tmp;
            }
        run_cuts(mode, flags, max, in, len, cuts, nc, &r);
        bad += !same(&whole, &r, "random splits", (size_t)t);
        result_free(&r);
    }
    CHECK(bad == 0);
    free(cuts);
    result_free(&whole);
}

/* in and expected use ' for ". */
/* Like check_ex, with expected written with ' for ". */
static void check_exq(kinf_scan_mode mode, unsigned flags, size_t max, const char *in,
                      size_t len, const char *exp_q, kinf_err want_err, const char *msg_sub)
{
    char *exp = J(exp_q);
    check_ex(mode, flags, max, in, len, exp, want_err, msg_sub);
    free(exp);
}

static void check_ok(kinf_scan_mode mode, unsigned flags, const char *in_q, const char *exp_q)
{
    char *in = J(in_q), *exp = exp_q ? J(exp_q) : NULL;
    check_ex(mode, flags, 0, in, strlen(in), exp, KINF_OK, NULL);
    free(in);
    free(exp);
}

static void check_err(kinf_scan_mode mode, unsigned flags, const char *in_q, kinf_err err,
                      const char *msg_sub)
{
    char *in = J(in_q);
    check_ex(mode, flags, 0, in, strlen(in), NULL, err, msg_sub);
    free(in);
}

#define W KINF_SCAN_WATCH
#define L KINF_SCAN_LIST
#define STRIP KINF_SCAN_STRIP_MANAGED_FIELDS
#define INJECT KINF_SCAN_INJECT_KIND

/* ---- watch mode --------------------------------------------------------- */

static void test_watch_basic(void)
{
    check_ok(W, 0,
             "{'type':'ADDED','object':{'kind':'Pod','apiVersion':'v1','metadata':{'name':'a',"
             "'namespace':'ns','uid':'u1','resourceVersion':'10'},'spec':{'x':[1,2.5e3,-0.5,true,"
             "false,null]}}}\n"
             "{'type':'MODIFIED','object':{'kind':'Pod','metadata':{'name':'a','namespace':'ns',"
             "'resourceVersion':'11'}}}\n"
             "{'type':'DELETED','object':{'metadata':{'name':'b'}}}\n",
             "ADDED|Pod|v1|ns|a|u1|10|0|{'kind':'Pod','apiVersion':'v1','metadata':{'name':'a',"
             "'namespace':'ns','uid':'u1','resourceVersion':'10'},'spec':{'x':[1,2.5e3,-0.5,true,"
             "false,null]}}\n"
             "MODIFIED|Pod||ns|a||11|0|{'kind':'Pod','metadata':{'name':'a','namespace':'ns',"
             "'resourceVersion':'11'}}\n"
             "DELETED||||b|||0|{'metadata':{'name':'b'}}\n");
}

static void test_watch_key_order_whitespace(void)
{
    /* object before type, extra envelope members, CRLF, blank lines, no newline at all */
    check_ok(W, 0,
             "\r\n\r\n  {'object':{'metadata':{'resourceVersion':'5','name':'x'}},'type':'ADDED'}"
             "\r\n\n\t{ 'extra' : {'type':'nope','object':1} , 'type' : 'BOOKMARK' , 'object' : "
             "{ 'metadata' : { 'resourceVersion' : '6' } } }{'type':'ADDED','object':{}}  \r\n",
             "ADDED||||x||5|0|{'metadata':{'resourceVersion':'5','name':'x'}}\n"
             "BOOKMARK||||||6|0|{ 'metadata' : { 'resourceVersion' : '6' } }\n"
             "ADDED|||||||0|{}\n");
    /* empty stream and whitespace-only stream are fine */
    check_ok(W, 0, "", "");
    check_ok(W, 0, " \r\n\n", "");
}

static void test_watch_escapes(void)
{
    /* escapes are unescaped in metadata, kept as they are in the json bytes */
    check_ok(W, 0,
             "{'type':'ADDED','object':{'metadata':{'n\\u0061me':'\\u0041b\\n\\/\\\\\\'x',"
             "'namespace':'caf\\u00e9-\xc3\xa9','uid':'\\ud83d\\ude00\xf0\x9f\x98\x80',"
             "'resourceVersion':'1\\t2'}}}\n",
             "ADDED|||caf\xc3\xa9-\xc3\xa9|Ab\\n/\\'x|\xf0\x9f\x98\x80\xf0\x9f\x98\x80|1\\x092|0|"
             "{'metadata':{'n\\u0061me':'\\u0041b\\n\\/\\\\\\'x','namespace':'caf\\u00e9-\xc3\xa9',"
             "'uid':'\\ud83d\\ude00\xf0\x9f\x98\x80','resourceVersion':'1\\t2'}}\n");
    /* escaped keys in the envelope and in kind */
    check_ok(W, 0, "{'t\\u0079pe':'\\u0041DDED','object':{'\\u006bind':'P\\u006fd'}}",
             "ADDED|Pod||||||0|{'\\u006bind':'P\\u006fd'}\n");
}

static void test_watch_error_event(void)
{
    const char *in_q =
        "{'type':'ERROR','object':{'kind':'Status','apiVersion':'v1','metadata':{},"
        "'status':'Failure','message':'too old resource version: 1 (5)','reason':'Expired',"
        "'code':410}}\n";
    char *in = J(in_q);
    const char *obj = strstr(in, "\"object\":") + 9;
    kinf_status st;
    check_ok(W, 0, in_q,
             "ERROR|Status|v1|||||0|{'kind':'Status','apiVersion':'v1','metadata':{},"
             "'status':'Failure','message':'too old resource version: 1 (5)','reason':'Expired',"
             "'code':410}\n");
    CHECK(kinf_status_parse(obj, strlen(obj) - 2, &st) == KINF_OK);
    CHECK(st.is_status == 1);
    CHECK(st.code == 410);
    CHECK_STR(st.reason, "Expired");
    CHECK_STR(st.message, "too old resource version: 1 (5)");
    CHECK(st.too_large_resource_version == 0);
    free(in);
}

static void test_watch_bookmark_initial_events_end(void)
{
    check_ok(W, 0,
             "{'type':'BOOKMARK','object':{'kind':'Pod','apiVersion':'v1','metadata':{"
             "'resourceVersion':'100','annotations':{'a':'b','k8s.io/initial-events-end':'true'}}}}\n"
             "{'type':'BOOKMARK','object':{'kind':'Pod','metadata':{'annotations':{"
             "'k8s.io/initial-events-end':'false'},'resourceVersion':'101'}}}\n"
             "{'type':'BOOKMARK','object':{'kind':'Pod','metadata':{'annotations':{"
             "'k8s.io/initial-events-end':true},'resourceVersion':'102'}}}\n"
             /* not the object's own metadata: does not count */
             "{'type':'BOOKMARK','object':{'spec':{'metadata':{'annotations':{"
             "'k8s.io/initial-events-end':'true'}}},'metadata':{'resourceVersion':'103'}}}\n",
             "BOOKMARK|Pod|v1||||100|1|{'kind':'Pod','apiVersion':'v1','metadata':{"
             "'resourceVersion':'100','annotations':{'a':'b','k8s.io/initial-events-end':'true'}}}\n"
             "BOOKMARK|Pod|||||101|0|{'kind':'Pod','metadata':{'annotations':{"
             "'k8s.io/initial-events-end':'false'},'resourceVersion':'101'}}\n"
             "BOOKMARK|Pod|||||102|0|{'kind':'Pod','metadata':{'annotations':{"
             "'k8s.io/initial-events-end':true},'resourceVersion':'102'}}\n"
             "BOOKMARK||||||103|0|{'spec':{'metadata':{'annotations':{"
             "'k8s.io/initial-events-end':'true'}}},'metadata':{'resourceVersion':'103'}}\n");
}

static void test_watch_nested_and_duplicate_metadata(void)
{
    /* a Deployment's template metadata must not be taken for the object's */
    check_ok(W, 0,
             "{'type':'ADDED','object':{'kind':'Deployment','spec':{'template':{'metadata':{"
             "'name':'tmpl','namespace':'t'}}},'metadata':{'name':'d','namespace':'ns'},"
             "'status':{'metadata':{'name':'no'}}}}",
             "ADDED|Deployment||ns|d|||0|{'kind':'Deployment','spec':{'template':{'metadata':{"
             "'name':'tmpl','namespace':'t'}}},'metadata':{'name':'d','namespace':'ns'},"
             "'status':{'metadata':{'name':'no'}}}\n");
    /* duplicate keys: the last wins (as lua-cjson); a second metadata replaces the first */
    check_ok(W, 0,
             "{'type':'ADDED','object':{'metadata':{'name':'a','namespace':'x','name':'b'},"
             "'kind':1,'kind':'K'}}"
             "{'type':'ADDED','object':{'metadata':{'name':'a','namespace':'x'},'metadata':{"
             "'name':'c'}}}"
             "{'type':'ADDED','object':{'metadata':{'name':'a'},'metadata':null}}",
             "ADDED|K||x|b|||0|{'metadata':{'name':'a','namespace':'x','name':'b'},'kind':1,"
             "'kind':'K'}\n"
             "ADDED||||c|||0|{'metadata':{'name':'a','namespace':'x'},'metadata':{'name':'c'}}\n"
             "ADDED|||||||0|{'metadata':{'name':'a'},'metadata':null}\n");
    /* non-string metadata values count as absent */
    check_ok(W, 0, "{'type':'ADDED','object':{'metadata':{'name':5,'uid':null,'namespace':{}}}}",
             "ADDED|||||||0|{'metadata':{'name':5,'uid':null,'namespace':{}}}\n");
}

static void test_watch_many_events_one_chunk(void)
{
    strbuf in = {0}, exp = {0};
    for (int i = 0; i < 50; i++) {
        sb_printf(&in, "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"p%d\","
                       "\"resourceVersion\":\"%d\"}}}\n", i, 1000 + i);
        sb_printf(&exp, "MODIFIED||||p%d||%d|0|{\"metadata\":{\"name\":\"p%d\","
                        "\"resourceVersion\":\"%d\"}}\n", i, 1000 + i, i, 1000 + i);
    }
    check_ex(W, 0, 0, in.p, in.len, exp.p, KINF_OK, NULL);
    free(in.p);
    free(exp.p);
}

/* ---- managedFields -------------------------------------------------------- */

static void strip_case(const char *meta_in, const char *meta_out)
{
    strbuf in = {0}, exp = {0};
    char *mi = J(meta_in), *mo = J(meta_out);
    sb_printf(&in, "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":");
    sb_add(&in, mi, strlen(mi)); /* not through sb_printf, whose buffer is 512 bytes */
    sb_printf(&in, ",\"x\":1}}\n");
    sb_printf(&exp, "ADDED|Pod||||||0|{\"kind\":\"Pod\",\"metadata\":");
    sb_esc(&exp, mo, strlen(mo));
    sb_printf(&exp, ",\"x\":1}\n");
    check_ex(W, STRIP, 0, in.p, in.len, exp.p, KINF_OK, NULL);
    /* without the flag the bytes stay as they are */
    free(exp.p);
    exp.p = NULL;
    exp.len = exp.cap = 0;
    sb_printf(&exp, "ADDED|Pod||||||0|{\"kind\":\"Pod\",\"metadata\":");
    sb_esc(&exp, mi, strlen(mi));
    sb_printf(&exp, ",\"x\":1}\n");
    check_ex(W, 0, 0, in.p, in.len, exp.p, KINF_OK, NULL);
    free(in.p);
    free(exp.p);
    free(mi);
    free(mo);
}

static void test_strip_managed_fields(void)
{
    const char *mf = "[{'manager':'kubelet','operation':'Update','fieldsV1':{'f:status':{"
                     "'f:conditions':{'.':{},'k:{\\'type\\':\\'Ready\\'}':{}}}}}]";
    char in[512], out[512];
    /* first, middle, last, only */
    snprintf(in, sizeof in, "{'managedFields':%s,'zz':'u'}", mf);
    strip_case(in, "{'zz':'u'}");
    snprintf(in, sizeof in, "{'zz':'u','managedFields':%s,'yy':'1'}", mf);
    strip_case(in, "{'zz':'u','yy':'1'}");
    snprintf(in, sizeof in, "{'zz':'u','yy':'1','managedFields':%s}", mf);
    strip_case(in, "{'zz':'u','yy':'1'}");
    snprintf(in, sizeof in, "{'managedFields':%s}", mf);
    strip_case(in, "{}");
    /* whitespace everywhere */
    strip_case("{ 'zz' : 'u' , 'managedFields' : [ 1 , 2 ] , 'yy' : '1' }",
               "{ 'zz' : 'u'  , 'yy' : '1' }");
    strip_case("{ 'managedFields' : [ ] ,\n 'zz' : 'u' }", "{ \n 'zz' : 'u' }");
    strip_case("{ 'managedFields' : [ ]\n }", "{ }");
    strip_case("{ 'zz' : 'u' ,\n'managedFields' : {} \n}", "{ 'zz' : 'u'  \n}");
    /* scalar values, escaped key, duplicates, two in a row */
    strip_case("{'managedFields':null,'zz':'u'}", "{'zz':'u'}");
    strip_case("{'zz':'u','managedFields':'str'}", "{'zz':'u'}");
    strip_case("{'zz':'u','managedFields':-12.5e3}", "{'zz':'u'}");
    strip_case("{'zz':'u','managedFields':123,'a':1}", "{'zz':'u','a':1}");
    strip_case("{'managed\\u0046ields':[],'zz':'u'}", "{'zz':'u'}");
    strip_case("{'managedFields':[],'managedFields':{},'zz':'u'}", "{'zz':'u'}");
    strip_case("{'zz':'u','managedFields':[],'managedFields':{}}", "{'zz':'u'}");
    strip_case("{'managedFields':[],'managedFields':{}}", "{}");
    strip_case("{'a':1,'managedFields':[],'b':2,'managedFields':{},'c':3}", "{'a':1,'b':2,'c':3}");
    /* not the object's metadata: stays */
    strip_case("{'annotations':{'managedFields':'x'},'labels':{'managedFields':'y'}}",
               "{'annotations':{'managedFields':'x'},'labels':{'managedFields':'y'}}");
    strip_case("{'managedfields':1,'managedFieldsX':2}", "{'managedfields':1,'managedFieldsX':2}");
    /* nested managedFields elsewhere in the object stays */
    snprintf(in, sizeof in,
             "{'type':'ADDED','object':{'spec':{'managedFields':[1],'metadata':{"
             "'managedFields':[2]}},'metadata':{'name':'n','managedFields':%s}}}",
             mf);
    snprintf(out, sizeof out,
             "ADDED||||n|||0|{'spec':{'managedFields':[1],'metadata':{'managedFields':[2]}},"
             "'metadata':{'name':'n'}}\n");
    check_ok(W, STRIP, in, out);
    /* metadata given twice: both are stripped, the last one's values count */
    check_ok(W, STRIP,
             "{'type':'ADDED','object':{'metadata':{'managedFields':[],'name':'a'},'metadata':{"
             "'name':'b','managedFields':[]}}}",
             "ADDED||||b|||0|{'metadata':{'name':'a'},'metadata':{'name':'b'}}\n");
}

/* A stripped managedFields array or object is framed, not validated (jsonscan.h): the framing
 * must be exact for valid JSON wherever the escapes, quotes and brackets fall relative to the
 * scanner's 64-byte blocks and the chunks, and the checks it does make must hold. */
static void test_strip_framing(void)
{
    /* escaped quotes and backslashes, brackets in strings, non-ASCII text, whitespace */
    const char *tricky = "{'k:{\\'a\\':\\'[}\\'}':{},'s':'\\\\\\\\','t':'\\\\\\\\\\\\\\'],[','u':"
                         "'x\\\\\\\\\\\\\\\\','v':'\xc3\xa9\\\\u00e9'}\n,\t['\\\\\\\\\\\\\\\\\\\\',"
                         "{'':[[],{}]}]";
    char in[512];
    for (int k = 0; k <= 70; k++) {
        /* k spaces move everything after them across the block boundaries */
        snprintf(in, sizeof in, "{'zz':'u','managedFields':[%*s%s,%s],'yy':'1'}", k, "", tricky,
                 tricky);
        strip_case(in, "{'zz':'u','yy':'1'}");
    }
    /* backslash runs of every length up to 9, ending at every position of a block */
    for (int run = 1; run <= 9; run++) {
        for (int k = 0; k < 64; k += 7) {
            char bs[32];
            memset(bs, '\\', (size_t)run);
            bs[run] = '\0';
            /* an odd run escapes the quote after it: close the string with one more quote */
            snprintf(in, sizeof in, "{'managedFields':{'%*s%s%s':[]},'zz':'u'}", k, "", bs,
                     run % 2 ? "'" : "");
            strip_case(in, "{'zz':'u'}");
        }
    }
    /* a long dropped value, and dropped values one after another */
    {
        strbuf b = {0};
        sb_add(&b, "{'managedFields':[", 18);
        for (int i = 0; i < 200; i++)
            sb_printf(&b, "%s{'f:%d':{'.':{},'k:{\\'n\\':\\'%d\\'}':{}}}", i ? "," : "", i, i);
        sb_add(&b, "],'zz':'u'}", 11);
        strip_case(b.p, "{'zz':'u'}");
        free(b.p);
    }
    check_ok(W, STRIP,
             "{'type':'ADDED','object':{'metadata':{'managedFields':[{}],'name':'a'}}}"
             "{'type':'ADDED','object':{'metadata':{'name':'b','managedFields':{'x':[]}}}}",
             "ADDED||||a|||0|{'metadata':{'name':'a'}}\nADDED||||b|||0|{'metadata':{'name':'b'}}\n");

    /* what it checks */
    check_err(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':['a\x01']}}}",
              KINF_EPARSE, "at byte 57: raw control character 0x01 in string (must be escaped) "
                           "in metadata.managedFields");
    check_err(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':[1,\x80]}}}",
              KINF_EPARSE, "at byte 57: unexpected byte 0x80 in metadata.managedFields");
    check_err(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':[\x1f]}}}",
              KINF_EPARSE, "unexpected byte 0x1f in metadata.managedFields");
    check_err(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':[\\\\]}}}",
              KINF_EPARSE, "'\\' outside a string in metadata.managedFields");
    check_err(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':[{'a':'}]}}}",
              KINF_EPARSE, "stream ended inside metadata.managedFields");
    check_err(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':[[1]",
              KINF_EPARSE, "stream ended inside metadata.managedFields");
    /* the first error wins, wherever the blocks and chunks fall */
    check_err(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':"
                        "['                                                            \x02',\x80]}}}",
              KINF_EPARSE, "raw control character 0x02");
    {
        strbuf b = {0};
        sb_add(&b, "{'type':'ADDED','object':{'metadata':{'managedFields':", 54);
        for (int i = 0; i < KINF_SCAN_MAX_DEPTH; i++)
            sb_add(&b, "[", 1);
        check_err(W, STRIP, b.p, KINF_EPARSE, "nesting deeper than 512 levels");
        free(b.p);
    }
    {
        /* max_object_bytes holds inside a dropped value */
        char *ev = J("{'type':'ADDED','object':{'metadata':{'managedFields':['0123456789012345678"
                     "9012345678901234567890123456789012345678901234567890123456789'],'name':'a'}}}\n");
        check_ex(W, STRIP, 80, ev, strlen(ev), "", KINF_ETOOBIG, "larger than max_object_bytes");
        free(ev);
    }
    /* what it does not check: the grammar between strings and brackets is dropped unread */
    check_ok(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':[1 2],'zz':'u'}}}",
             "ADDED|||||||0|{'metadata':{'zz':'u'}}\n");
    check_ok(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':{'a' 1 x}}}}",
             "ADDED|||||||0|{'metadata':{}}\n");
    check_ok(W, STRIP, "{'type':'ADDED','object':{'metadata':{'managedFields':[},'zz':'u'}}}",
             "ADDED|||||||0|{'metadata':{'zz':'u'}}\n");
    check_ok(W, STRIP,
             "{'type':'ADDED','object':{'metadata':{'managedFields':['\\x','\xff'],'zz':'u'}}}",
             "ADDED|||||||0|{'metadata':{'zz':'u'}}\n");
    /* ... but without the flag nothing is skipped */
    check_err(W, 0, "{'type':'ADDED','object':{'metadata':{'managedFields':[1 2]}}}", KINF_EPARSE,
              "expected ',' or ']'");
    check_err(W, 0, "{'type':'ADDED','object':{'metadata':{'managedFields':['\xff']}}}",
              KINF_EPARSE, "invalid UTF-8");
}

/* ---- list mode ---------------------------------------------------------- */

static void test_list_basic(void)
{
    const char *body =
        "{'kind':'PodList','apiVersion':'v1','metadata':{'resourceVersion':'123','continue':"
        "'tok==','remainingItemCount':5},'items':[{'metadata':{'name':'a','namespace':'n1',"
        "'uid':'u1','resourceVersion':'7'},'spec':{}},{'kind':'Pod','apiVersion':'v1',"
        "'metadata':{'name':'b'}} , { } ]}";
    check_ok(L, 0, body,
             "LIST_ITEM|||n1|a|u1|7|0|{'metadata':{'name':'a','namespace':'n1','uid':'u1',"
             "'resourceVersion':'7'},'spec':{}}\n"
             "LIST_ITEM|Pod|v1||b|||0|{'kind':'Pod','apiVersion':'v1','metadata':{'name':'b'}}\n"
             "LIST_ITEM|||||||0|{ }\n"
             "END|PodList|v1|123|tok==|5|3|1|0|0|||0\n");
    check_ok(L, INJECT, body,
             "LIST_ITEM|Pod|v1|n1|a|u1|7|0|{'kind':'Pod','apiVersion':'v1','metadata':{'name':'a',"
             "'namespace':'n1','uid':'u1','resourceVersion':'7'},'spec':{}}\n"
             "LIST_ITEM|Pod|v1||b|||0|{'kind':'Pod','apiVersion':'v1','metadata':{'name':'b'}}\n"
             "LIST_ITEM|Pod|v1|||||0|{'kind':'Pod','apiVersion':'v1' }\n"
             "END|PodList|v1|123|tok==|5|3|1|0|0|||0\n");
}

static void test_list_metadata_after_items(void)
{
    check_ok(L, INJECT,
             "{'items':[{'metadata':{'name':'a'}}],'metadata':{'continue':'c2',"
             "'resourceVersion':'9'},'kind':'ConfigMapList','apiVersion':'v1'}",
             /* kind after items: nothing injected (documented) */
             "LIST_ITEM||||a|||0|{'metadata':{'name':'a'}}\n"
             "END|ConfigMapList|v1|9|c2|-1|1|1|0|0|||0\n");
}

static void test_list_inject_variants(void)
{
    /* only one of the two missing; group apiVersion; escapes in the list kind */
    check_ok(L, INJECT,
             "{'apiVersion':'apps/v1','kind':'Deploy\\u006dentList','items':[{'kind':'X'},"
             "{'apiVersion':'a/b','metadata':{'name':'n'}},{'z':1}]}",
             "LIST_ITEM|X|apps/v1|||||0|{'apiVersion':'apps/v1','kind':'X'}\n"
             "LIST_ITEM|Deployment|a/b||n|||0|{'kind':'Deployment','apiVersion':'a/b',"
             "'metadata':{'name':'n'}}\n"
             "LIST_ITEM|Deployment|apps/v1|||||0|{'kind':'Deployment','apiVersion':'apps/v1',"
             "'z':1}\n"
             "END|DeploymentList|apps/v1|||-1|3|1|0|0|||0\n");
    /* a list kind without the List suffix injects apiVersion only */
    check_ok(L, INJECT, "{'kind':'Table','apiVersion':'meta.k8s.io/v1','items':[{}]}",
             "LIST_ITEM||meta.k8s.io/v1|||||0|{'apiVersion':'meta.k8s.io/v1'}\n"
             "END|Table|meta.k8s.io/v1|||-1|1|1|0|0|||0\n");
    /* kind needing escapes when re-emitted */
    check_ok(L, INJECT, "{'kind':'A\\'B\\\\List','items':[{}]}",
             "LIST_ITEM|A'B\\||||||0|{'kind':'A\\'B\\\\'}\n"
             "END|A'B\\List||||-1|1|1|0|0|||0\n");
    /* inject + strip */
    check_ok(L, INJECT | STRIP,
             "{'kind':'PodList','apiVersion':'v1','metadata':{'managedFields':[1]},'items':[{"
             "'metadata':{'managedFields':[{'a':1}],'name':'p'}},{'metadata':{'name':'q',"
             "'managedFields':[]},'kind':'Pod'}]}",
             "LIST_ITEM|Pod|v1||p|||0|{'kind':'Pod','apiVersion':'v1','metadata':{'name':'p'}}\n"
             "LIST_ITEM|Pod|v1||q|||0|{'apiVersion':'v1','metadata':{'name':'q'},'kind':'Pod'}\n"
             "END|PodList|v1|||-1|2|1|0|0|||0\n");
}

static void test_list_empty_and_null_items(void)
{
    check_ok(L, INJECT, "{'kind':'PodList','apiVersion':'v1','metadata':{'resourceVersion':'5'},"
                        "'items':[]}\n",
             "END|PodList|v1|5||-1|0|1|0|0|||0\n");
    check_ok(L, 0, " {'kind':'PodList','items':null,'metadata':{}} \r\n",
             "END|PodList||||-1|0|0|0|0|||0\n");
}

static void test_list_status_body(void)
{
    check_ok(L, 0,
             "{'kind':'Status','apiVersion':'v1','metadata':{},'status':'Failure','message':"
             "'continue token expired','reason':'Expired','code':410,'details':{"
             "'retryAfterSeconds':3}}",
             "END|Status|v1|||-1|0|0|1|410|Expired|continue token expired|0\n");
    check_ok(L, 0,
             "{'kind':'Status','code':504,'reason':'Timeout','message':'Timeout: Too large "
             "resource version: 10, current: 5','details':{'causes':[{'reason':"
             "'ResourceVersionTooLarge','message':'Too large resource version'}]}}",
             "END|Status||||-1|0|0|1|504|Timeout|Timeout: Too large resource version: 10, current: "
             "5|1\n");
}

static kinf_err count_item(void *ud, const kinf_scan_item *it)
{
    (void)it;
    (*(int *)ud)++;
    return KINF_OK;
}

static void test_list_streams_items(void)
{
    /* each item is reported as soon as its '}' is fed */
    char *body = J("{'kind':'PodList','items':[{'metadata':{'name':'a'}},{'metadata':{'name':"
                   "'b'}}],'metadata':{'resourceVersion':'1'}}");
    const char *first_end = strstr(body, "}},") + 2, *second_end = strstr(body, "}}]") + 2;
    int n = 0;
    kinf_scan_options o = {count_item, NULL, &n, 0, 0};
    kinf_err e;
    kinf_scanner *s = kinf_scanner_new(L, &o, &e);
    CHECK(s != NULL);
    CHECK(kinf_scanner_feed(s, body, (size_t)(first_end - body) - 1) == KINF_OK);
    CHECK(n == 0);
    CHECK(kinf_scanner_feed(s, first_end - 1, 1) == KINF_OK);
    CHECK(n == 1);
    CHECK(kinf_scanner_feed(s, first_end, (size_t)(second_end - first_end)) == KINF_OK);
    CHECK(n == 2);
    CHECK(kinf_scanner_feed(s, second_end, strlen(second_end)) == KINF_OK);
    CHECK(kinf_scanner_finish(s) == KINF_OK);
    /* finished: finish again is a no-op, feed is refused */
    CHECK(kinf_scanner_finish(s) == KINF_OK);
    CHECK(kinf_scanner_feed(s, " ", 1) == KINF_EINVAL);
    /* reset: reusable, also in the other mode */
    kinf_scanner_reset(s, W);
    n = 0;
    CHECK(kinf_scanner_feed(s, "{\"type\":\"ADDED\",\"object\":{}}", 28) == KINF_OK);
    CHECK(kinf_scanner_finish(s) == KINF_OK);
    CHECK(n == 1);
    kinf_scanner_free(s);
    free(body);
}

/* Feeds body one byte at a time; after each byte, kinf_scanner_list_continue must give `token`
 * exactly when the first `ready` bytes have been fed (ready 0: never). Returns the scanner. */
static kinf_scanner *feed_checking_continue(kinf_scan_mode mode, const char *body, size_t ready,
                                            const char *token)
{
    kinf_err e;
    kinf_scanner *s = kinf_scanner_new(mode, NULL, &e);
    kinf_str got;
    CHECK(s != NULL);
    CHECK(kinf_scanner_list_continue(s, &got) == 0);
    for (size_t i = 0; body[i]; i++) {
        int want = ready > 0 && i + 1 >= ready, have;
        CHECK(kinf_scanner_feed(s, body + i, 1) == KINF_OK);
        have = kinf_scanner_list_continue(s, &got);
        if (have != want)
            fprintf(stderr, "    after %zu bytes: %d, want %d\n", i + 1, have, want);
        CHECK(have == want);
        if (have)
            CHECK(got.len == strlen(token) && memcmp(got.ptr, token, got.len) == 0);
    }
    return s;
}

static kinf_err check_end_continue(void *ud, const kinf_scan_list_end *e)
{
    const char *want = ud;
    CHECK(e->continue_.len == strlen(want) && memcmp(e->continue_.ptr, want, e->continue_.len) == 0);
    return KINF_OK;
}

static void test_list_continue_early(void)
{
    /* The token is there once the list's metadata object closes, before the items. */
    char *body = J("{'kind':'PodList','metadata':{'continue':'t\\u00e9k','resourceVersion':'7'},"
                   "'items':[{'metadata':{'name':'a','continue':'not-this'}}]}");
    kinf_scanner *s =
        feed_checking_continue(L, body, (size_t)(strstr(body, "},") - body) + 1, "t\xc3\xa9k");
    kinf_str got;
    CHECK(kinf_scanner_finish(s) == KINF_OK);
    kinf_scanner_reset(s, L);
    CHECK(kinf_scanner_list_continue(s, &got) == 0);
    kinf_scanner_free(s);
    free(body);

    /* No continue, an empty one, metadata that is not an object, a watch stream: never. */
    const char *never[] = {"{'kind':'PodList','metadata':{'resourceVersion':'7'},'items':[]}",
                           "{'kind':'PodList','metadata':{'continue':''},'items':[]}",
                           "{'kind':'PodList','metadata':'x','items':[]}"};
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
        body = J(never[i]);
        kinf_scanner_free(feed_checking_continue(L, body, 0, ""));
        free(body);
    }
    body = J("{'type':'ADDED','object':{'metadata':{'name':'a','continue':'c'}}}\n");
    kinf_scanner_free(feed_checking_continue(W, body, 0, ""));
    free(body);

    /* A second "metadata" member: nothing while it is open, then its token, which is also
     * the one on_list_end reports. */
    body = J("{'metadata':{'continue':'one'},'items':[],'metadata':{'continue':'two'}}");
    {
        const char *second = strstr(body, "],") + 2;
        size_t open = (size_t)(strchr(second, '{') - body) + 1, close = strlen(body) - 1;
        kinf_scan_options o = {NULL, check_end_continue, "two", 0, 0};
        kinf_err e;
        s = kinf_scanner_new(L, &o, &e);
        CHECK(s != NULL);
        for (size_t i = 0; body[i]; i++) {
            int want = (i + 1 >= (size_t)(strchr(body, '}') - body) + 1 && i + 1 < open) ||
                       i + 1 >= close;
            const char *tok = i + 1 >= close ? "two" : "one";
            CHECK(kinf_scanner_feed(s, body + i, 1) == KINF_OK);
            CHECK(kinf_scanner_list_continue(s, &got) == want);
            if (want)
                CHECK(got.len == 3 && memcmp(got.ptr, tok, 3) == 0);
        }
        CHECK(kinf_scanner_finish(s) == KINF_OK);
        kinf_scanner_free(s);
    }
    free(body);

    /* After an error: nothing. */
    body = J("{'metadata':{'continue':'c'},'items':[x]}");
    {
        kinf_err e;
        s = kinf_scanner_new(L, NULL, &e);
        CHECK(s != NULL);
        CHECK(kinf_scanner_feed(s, body, strlen(body)) == KINF_EPARSE);
        CHECK(kinf_scanner_list_continue(s, &got) == 0);
        kinf_scanner_free(s);
    }
    free(body);
}

/* ---- malformed input ------------------------------------------------------ */

static void test_malformed_watch(void)
{
    const char *ev = "{'type':'ADDED','object':{'metadata':{'name':'ok'}}}\n";
    char buf[512];
    check_err(W, 0, "{'type':'ADDED','object':{'a':'xy", KINF_EPARSE, "inside a string");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'x\\", KINF_EPARSE,
              "inside an escape sequence");
    check_err(W, 0, "{'type':'ADDED','object':{'a':1", KINF_EPARSE, "stream ended");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\\x'}}", KINF_EPARSE, "bad escape");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\\u12G4'}}", KINF_EPARSE, "4 hex digits");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\\ud800x'}}", KINF_EPARSE, "low surrogate");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\\ud800\\u0041'}}", KINF_EPARSE,
              "low surrogate");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\\udc00'}}", KINF_EPARSE, "lone");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'a\tb'}}", KINF_EPARSE,
              "raw control character 0x09");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\xc0\x80'}}", KINF_EPARSE, "invalid UTF-8");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\xed\xa0\x80'}}", KINF_EPARSE,
              "invalid UTF-8");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\xf4\x90\x80\x80'}}", KINF_EPARSE,
              "invalid UTF-8");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\xe2\x82'}}", KINF_EPARSE, "invalid UTF-8");
    check_err(W, 0, "{'type':'ADDED','object':{'a':'\xff'}}", KINF_EPARSE, "invalid UTF-8");
    check_err(W, 0, "{'type':'ADDED','object':{'\x80':1}}", KINF_EPARSE, "invalid UTF-8");
    check_err(W, 0, "{'type':'ADDED','object':{'a':1,}}", KINF_EPARSE, "expected '\"'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':[1,]}}", KINF_EPARSE, "expected a value");
    check_err(W, 0, "{'type':'ADDED','object':{'a' 1}}", KINF_EPARSE, "expected ':'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':1 'b':2}}", KINF_EPARSE, "expected ',' or '}'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':[1 2]}}", KINF_EPARSE, "expected ',' or ']'");
    check_err(W, 0, "{'type':'ADDED','object':{a:1}}", KINF_EPARSE, "an object key");
    check_err(W, 0, "{'type':'ADDED','object':{'a':01}}", KINF_EPARSE, "found '1'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':1.}}", KINF_EPARSE, "digit after '.'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':-}}", KINF_EPARSE, "digit after '-'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':1e}}", KINF_EPARSE, "exponent");
    check_err(W, 0, "{'type':'ADDED','object':{'a':1e+}}", KINF_EPARSE, "exponent");
    check_err(W, 0, "{'type':'ADDED','object':{'a':.5}}", KINF_EPARSE, "expected a value");
    check_err(W, 0, "{'type':'ADDED','object':{'a':+1}}", KINF_EPARSE, "expected a value");
    check_err(W, 0, "{'type':'ADDED','object':{'a':tru}}", KINF_EPARSE, "expected 'true'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':nul1}}", KINF_EPARSE, "expected 'null'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':truex}}", KINF_EPARSE, "expected ',' or '}'");
    check_err(W, 0, "{'type':'ADDED','object':{'a':True}}", KINF_EPARSE, "expected a value");
    check_err(W, 0, "{'type':'ADDED','object':{}]", KINF_EPARSE, "expected ',' or '}'");
    check_err(W, 0, "{'type':'FOO','object':{}}", KINF_EPARSE, "unknown watch event type \"FOO\"");
    check_err(W, 0, "{'type':'added','object':{}}", KINF_EPARSE, "unknown watch event type");
    check_err(W, 0, "{'type':'ADDEDADDEDADDEDADDEDADDED','object':{}}", KINF_EPARSE,
              "unknown watch event type");
    check_err(W, 0, "{'type':1,'object':{}}", KINF_EPARSE, "not a string");
    check_err(W, 0, "{'type':'ADDED'}", KINF_EPARSE, "without \"object\"");
    check_err(W, 0, "{'object':{}}", KINF_EPARSE, "without \"type\"");
    check_err(W, 0, "{'type':'ADDED','object':[]}", KINF_EPARSE, "the watch event's object");
    check_err(W, 0, "{'type':'ADDED','object':null}", KINF_EPARSE, "the watch event's object");
    check_err(W, 0, "{'type':'ADDED','type':'ADDED','object':{}}", KINF_EPARSE, "two \"type\"");
    check_err(W, 0, "{'type':'ADDED','object':{},'object':{}}", KINF_EPARSE, "two \"object\"");
    check_err(W, 0, "[]", KINF_EPARSE, "start of a watch event");
    /* a garbage line between good events: the first is reported, then the error */
    snprintf(buf, sizeof buf, "%sgarbage\n%s", ev, ev);
    {
        char *in = J(buf);
        check_exq(W, 0, 0, in, strlen(in), "ADDED||||ok|||0|{'metadata':{'name':'ok'}}\n",
                 KINF_EPARSE, "expected '{' (the start of a watch event), found 'g'");
        free(in);
    }
    /* offsets count from the start of the stream */
    check_err(W, 0, "{'type':'ADDED','object':{}}\n{'type':'ADDED','object':{'a':x}}",
              KINF_EPARSE, "at byte 59: expected a value, found 'x'");
}

static void test_malformed_list(void)
{
    check_err(L, 0, "", KINF_EPARSE, "empty body");
    check_err(L, 0, "  \n", KINF_EPARSE, "empty body");
    check_err(L, 0, "[]", KINF_EPARSE, "start of the list body");
    check_err(L, 0, "{'items':[]}{}", KINF_EPARSE, "end of the body");
    check_err(L, 0, "{'items':[]} x", KINF_EPARSE, "end of the body");
    check_err(L, 0, "{'items':[1]}", KINF_EPARSE, "(a list item)");
    check_err(L, 0, "{'items':[{}, 'x']}", KINF_EPARSE, "(a list item)");
    check_err(L, 0, "{'items':[{},{'a':1}", KINF_EPARSE, "before the end of the list object");
    check_err(L, 0, "{'kind':'PodList'", KINF_EPARSE, "before the end of the list object");
}

static kinf_err leak_check_item(void *ud, const kinf_scan_item *it)
{
    (void)ud;
    (void)it;
    return KINF_OK;
}

static void test_depth_bomb(void)
{
    size_t n = 100000;
    char *in = malloc(n + 64);
    kinf_scan_options o = {leak_check_item, NULL, NULL, 0, 0};
    kinf_err e;
    kinf_scanner *s;
    strcpy(in, "{\"type\":\"ADDED\",\"object\":{\"a\":");
    memset(in + strlen(in), '[', n);
    s = kinf_scanner_new(W, &o, &e);
    CHECK(kinf_scanner_feed(s, in, n) == KINF_EPARSE);
    CHECK(strstr(kinf_scanner_error(s), "nesting deeper than 512") != NULL);
    kinf_scanner_free(s);
    /* exactly at the limit is fine: 512 levels in total */
    {
        strbuf b = {0};
        const char *pre = "{\"type\":\"ADDED\",\"object\":{\"a\":"; /* depths 1, 2 */
        size_t plen = strlen(pre);
        sb_add(&b, pre, plen);
        for (int i = 0; i < 510; i++)
            sb_add(&b, "[", 1); /* 3 .. 512 */
        for (int i = 0; i < 510; i++)
            sb_add(&b, "]", 1);
        sb_add(&b, "}}", 2);
        s = kinf_scanner_new(W, &o, &e);
        CHECK(kinf_scanner_feed(s, b.p, b.len) == KINF_OK);
        CHECK(kinf_scanner_finish(s) == KINF_OK);
        kinf_scanner_reset(s, W);
        /* one more level fails */
        b.len = plen;
        for (int i = 0; i < 511; i++)
            sb_add(&b, "[", 1);
        CHECK(kinf_scanner_feed(s, b.p, b.len) == KINF_EPARSE);
        kinf_scanner_free(s);
        free(b.p);
    }
    free(in);
}

static void test_too_big(void)
{
    char *in = J("{'type':'ADDED','object':{'metadata':{'name':'a'},'data':'0123456789'}}\n"
                 "{'type':'ADDED','object':{'metadata':{'name':'b'},'data':'0123456789012345678901234567890123456789'}}\n");
    size_t first = strchr(in, '\n') - in; /* the first event's size */
    /* a limit the first event just fits: the second is too big, whatever the chunking */
    check_exq(W, 0, first, in, strlen(in),
              "ADDED||||a|||0|{'metadata':{'name':'a'},'data':'0123456789'}\n", KINF_ETOOBIG,
             "larger than max_object_bytes");
    check_ex(W, 0, first - 1, in, strlen(in), "", KINF_ETOOBIG, "at byte 0: watch event");
    free(in);
    /* list: the limit is per item, not for the body */
    in = J("{'kind':'PodList','items':[{'a':'0123456789'},{'a':'0123456789'},{'a':'01234567890'}]}");
    check_exq(L, 0, 18, in, strlen(in),
              "LIST_ITEM|||||||0|{'a':'0123456789'}\nLIST_ITEM|||||||0|{'a':'0123456789'}\n",
             KINF_ETOOBIG, "list item is larger than max_object_bytes (18)");
    free(in);
}

static void test_meta_too_long(void)
{
    strbuf b = {0};
    kinf_scan_options o = {leak_check_item, NULL, NULL, 0, 0};
    kinf_err e;
    kinf_scanner *s = kinf_scanner_new(W, &o, &e);
    const char *pre = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"";
    sb_add(&b, pre, strlen(pre));
    for (int i = 0; i < KINF_SCAN_MAX_META; i++)
        sb_add(&b, "x", 1);
    sb_add(&b, "\"}}}", 4);
    CHECK(kinf_scanner_feed(s, b.p, b.len) == KINF_OK); /* exactly the cap: fine */
    kinf_scanner_reset(s, W);
    b.len -= 4;
    sb_add(&b, "y\"}}}", 5);
    CHECK(kinf_scanner_feed(s, b.p, b.len) == KINF_ETOOBIG);
    CHECK(strstr(kinf_scanner_error(s), "metadata.name is longer than 1024 bytes") != NULL);
    kinf_scanner_free(s);
    free(b.p);
}

static kinf_err huge_item(void *ud, const kinf_scan_item *it)
{
    const char *want = ud;
    CHECK(it->json_len == strlen(want));
    CHECK(memcmp(it->json, want, it->json_len) == 0);
    CHECK(it->meta.name.len == 3 && memcmp(it->meta.name.ptr, "big", 3) == 0);
    return KINF_OK;
}

static void test_20mb_object(void)
{
    size_t big = 20u << 20;
    const char *pre = "{\"type\":\"MODIFIED\",\"object\":";
    const char *obj_pre = "{\"metadata\":{\"name\":\"big\",\"annotations\":{\"x\":\"";
    const char *obj_post = "\"}},\"spec\":{}}";
    size_t plen = strlen(pre), olen = strlen(obj_pre) + big + strlen(obj_post);
    char *in = malloc(plen + olen + 3), *obj = in + plen;
    kinf_scan_options o = {huge_item, NULL, NULL, 0, 0};
    kinf_err e;
    kinf_scanner *s;
    size_t total;
    memcpy(in, pre, plen);
    memcpy(obj, obj_pre, strlen(obj_pre));
    for (size_t i = 0; i < big; i++)
        obj[strlen(obj_pre) + i] = (char)('a' + i % 26);
    memcpy(obj + strlen(obj_pre) + big, obj_post, strlen(obj_post));
    memcpy(in + plen + olen, "}\n", 3);
    total = plen + olen + 2;
    {
        char *want = malloc(olen + 1);
        memcpy(want, obj, olen);
        want[olen] = '\0';
        o.ud = want;
        /* whole, 16 KiB chunks, odd chunks */
        for (size_t step = total; step >= 1000; step = step == total ? 16384 : step == 16384 ? 4093 : 0) {
            s = kinf_scanner_new(W, &o, &e);
            for (size_t pos = 0; pos < total; pos += step)
                CHECK(kinf_scanner_feed(s, in + pos, pos + step > total ? total - pos : step) ==
                      KINF_OK);
            CHECK(kinf_scanner_finish(s) == KINF_OK);
            kinf_scanner_free(s);
            if (step < 16384)
                break;
        }
        /* a 1 MiB limit rejects it */
        o.max_object_bytes = 1 << 20;
        s = kinf_scanner_new(W, &o, &e);
        CHECK(kinf_scanner_feed(s, in, total) == KINF_ETOOBIG);
        kinf_scanner_free(s);
        free(want);
    }
    free(in);
}

static void test_callback_error_and_reentry(void)
{
    char *in = J("{'type':'ADDED','object':{}}{'type':'ADDED','object':{}}{'type':'ADDED','object':{}}");
    rec r;
    kinf_scan_options o;
    kinf_err e;
    kinf_scanner *s;
    memset(&r, 0, sizeof r);
    memset(&o, 0, sizeof o);
    o.on_item = rec_item;
    o.ud = &r;
    r.fail_with = KINF_ENOMEM;
    r.fail_after = 1;
    s = kinf_scanner_new(W, &o, &e);
    r.s = s;
    CHECK(kinf_scanner_feed(s, in, strlen(in)) == KINF_ENOMEM);
    CHECK(r.items == 2);
    CHECK(r.reenter_err == KINF_EBUSY);
    CHECK(strstr(kinf_scanner_error(s), "item callback failed") != NULL);
    CHECK(kinf_scanner_feed(s, "{}", 2) == KINF_ENOMEM);
    CHECK(kinf_scanner_finish(s) == KINF_ENOMEM);
    kinf_scanner_reset(s, W);
    r.fail_with = KINF_OK;
    r.s = NULL;
    CHECK(kinf_scanner_feed(s, in, strlen(in)) == KINF_OK);
    CHECK(kinf_scanner_finish(s) == KINF_OK);
    CHECK(r.items == 5);
    kinf_scanner_free(s);
    free(r.full.p);
    free(r.plain.p);
    free(in);
}

static void test_api_misuse(void)
{
    kinf_err e = KINF_OK;
    kinf_scan_options o = {NULL, NULL, NULL, 0x80, 0};
    CHECK(kinf_scanner_new(W, &o, &e) == NULL && e == KINF_EINVAL);
    CHECK(kinf_scanner_new((kinf_scan_mode)7, NULL, &e) == NULL && e == KINF_EINVAL);
    kinf_scanner_free(NULL);
    CHECK(kinf_scanner_feed(NULL, "x", 1) == KINF_EINVAL);
    CHECK(kinf_scanner_finish(NULL) == KINF_EINVAL);
    {
        kinf_scanner *s = kinf_scanner_new(L, NULL, &e);
        CHECK(s != NULL);
        CHECK(kinf_scanner_feed(s, NULL, 0) == KINF_OK);
        CHECK(kinf_scanner_feed(s, "{\"items\":[{}]}", 14) == KINF_OK); /* no callbacks: fine */
        CHECK(kinf_scanner_finish(s) == KINF_OK);
        CHECK(strcmp(kinf_scanner_error(s), "") == 0);
        kinf_scanner_free(s);
    }
    CHECK_STR(kinf_event_type_name(KINF_EV_BOOKMARK), "BOOKMARK");
}

/* ---- kinf_status_parse -------------------------------------------------- */

static void test_status_parse(void)
{
    kinf_status st;
    char *in;
    strbuf b = {0};

    in = J("{'kind':'Status','apiVersion':'v1','metadata':{},'status':'Failure','message':"
           "'the server has asked for the client to provide credentials','reason':"
           "'Unauthorized','code':401}");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_OK);
    CHECK(st.is_status && st.code == 401 && !st.too_large_resource_version);
    CHECK_STR(st.reason, "Unauthorized");
    CHECK_STR(st.message, "the server has asked for the client to provide credentials");
    free(in);

    /* the modern too-large cause */
    in = J("{'kind':'Status','code':504,'reason':'Timeout','details':{'causes':[{'reason':"
           "'Other'},{'reason':'ResourceVersionTooLarge','message':'x'}],'retryAfterSeconds':2}}");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_OK);
    CHECK(st.too_large_resource_version == 1 && st.retry_after_seconds == 2 && st.code == 504);
    free(in);
    /* 1.17-1.18.5: the cause message, with a timeout */
    in = J("{'kind':'Status','code':504,'reason':'Timeout','details':{'causes':[{'message':"
           "'Too large resource version'}]}}");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_OK && st.too_large_resource_version);
    free(in);
    /* before 1.17: only the message, with a timeout */
    in = J("{'kind':'Status','code':504,'reason':'Timeout','message':'Timeout: Too large "
           "resource version: 5, current: 3'}");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_OK && st.too_large_resource_version);
    free(in);
    /* message without a timeout does not count (client-go) */
    in = J("{'kind':'Status','code':500,'reason':'InternalError','message':'Too large "
           "resource version'}");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_OK && !st.too_large_resource_version);
    free(in);
    /* escapes, non-integer code, negative, not a Status */
    in = J("{'kind':'Status','code':410.0,'reason':'Ex\\u0070ired','message':'a\\nb'}");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_OK);
    CHECK(st.code == 0);
    CHECK_STR(st.reason, "Expired");
    CHECK_STR(st.message, "a\nb");
    free(in);
    in = J("{'kind':'Pod','code':99999999999}");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_OK);
    CHECK(!st.is_status && st.code == 0);
    free(in);
    /* malformed */
    CHECK(kinf_status_parse("<html>", 6, &st) == KINF_EPARSE);
    CHECK(kinf_status_parse("", 0, &st) == KINF_EPARSE);
    in = J("{'kind':'Status','code':429,'reason':'TooManyRequests'");
    CHECK(kinf_status_parse(in, strlen(in), &st) == KINF_EPARSE);
    CHECK(st.code == 429); /* what was read before the error */
    free(in);
    /* long message: truncated at a UTF-8 boundary */
    sb_add(&b, "{\"kind\":\"Status\",\"message\":\"", 28);
    for (int i = 0; i < KINF_STATUS_MESSAGE_MAX - 2; i++)
        sb_add(&b, "m", 1);
    sb_add(&b, "\xc3\xa9tail\",\"code\":500}", 19); /* 2-byte char across the cut */
    CHECK(kinf_status_parse(b.p, b.len, &st) == KINF_OK);
    CHECK(strlen(st.message) == KINF_STATUS_MESSAGE_MAX - 2);
    CHECK(st.code == 500);
    free(b.p);
}

TEST_MAIN(TEST(test_watch_basic), TEST(test_watch_key_order_whitespace), TEST(test_watch_escapes),
          TEST(test_watch_error_event), TEST(test_watch_bookmark_initial_events_end),
          TEST(test_watch_nested_and_duplicate_metadata), TEST(test_watch_many_events_one_chunk),
          TEST(test_strip_managed_fields), TEST(test_strip_framing), TEST(test_list_basic),
          TEST(test_list_metadata_after_items), TEST(test_list_inject_variants),
          TEST(test_list_empty_and_null_items), TEST(test_list_status_body),
          TEST(test_list_streams_items), TEST(test_list_continue_early), TEST(test_malformed_watch), TEST(test_malformed_list),
          TEST(test_depth_bomb), TEST(test_too_big), TEST(test_meta_too_long),
          TEST(test_20mb_object), TEST(test_callback_error_and_reentry), TEST(test_api_misuse),
          TEST(test_status_parse))
