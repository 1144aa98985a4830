/*
 * labelselector.c - label selectors: labels.Parse's grammar and messages, matching from record
 * bytes. Contract in labelselector.h.
 *
 * The parser follows apimachinery's recursive descent step for step (one token of lookahead over
 * a lexer that runs on demand), because its messages, and which input gets which of them, are
 * what kubectl users know. It fills growable scratch arrays; the result is then packed into one
 * allocation: the requirements, their value spans and a copy of the text the spans point into.
 */
#include "labelselector.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "labelselector_impl.h"

/* ---- messages ---- */

/* apimachinery's validation texts (k8s.io/apimachinery/pkg/util/validation), as kubectl 1.32
 * prints them; RegexError's examples really are joined with two spaces before "or". */
#define QNAME_RULE                                                                              \
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an " \
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "      \
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
#define MSG_QNAME_SLASHES                                                                      \
    "a qualified name " QNAME_RULE " with an optional DNS subdomain prefix and '/' (e.g. "     \
    "'example.com/MyName')"
#define MSG_SUBDOMAIN                                                                          \
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "  \
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "      \
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"       \
    "[a-z0-9])?)*')"
#define MSG_LABEL_VALUE                                                                        \
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "   \
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "      \
    "'my_value',  or '12345', regex used for validation is "                                   \
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
#define MSG_OPERATORS "in, notin, =, ==, !=, gt, lt"

/* A bounded string builder: text past the end is dropped, the buffer stays terminated. */
typedef struct sbuf {
    char *p;
    size_t cap, len;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->cap == 0)
        return;
    if (n > b->cap - 1 - b->len)
        n = b->cap - 1 - b->len;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_fmt(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char tmp[400];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (k == 0 || k > n || s[0] > 0xF4)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    }
    return k;
}

/* s quoted as Go's %q does (for the bytes a selector token can hold). */
static void sb_quote(sbuf *b, const char *s, size_t n)
{
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        size_t k;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sb_put(b, esc, 2);
        } else if (c >= 0x20 && c < 0x7f) {
            sb_put(b, s + i, 1);
        } else if (c >= 0x80 && (k = utf8_len((const unsigned char *)s + i, n - i)) != 0) {
            sb_put(b, s + i, k);
            i += k - 1;
        } else {
            static const char named[] = "abtnvfr"; /* \a (7) .. \r (13) */
            if (c >= 7 && c <= 13)
                sb_fmt(b, "\\%c", named[c - 7]);
            else
                sb_fmt(b, "\\x%02x", c);
        }
    }
    sb_put(b, "\"", 1);
}

/* ---- validation (IsQualifiedName, IsValidLabelValue) ---- */

static int is_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9] */
static int is_qname(const char *s, size_t n)
{
    if (n == 0 || !is_alnum((unsigned char)s[0]) || !is_alnum((unsigned char)s[n - 1]))
        return 0;
    for (size_t i = 1; i + 1 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_alnum(c) && c != '-' && c != '_' && c != '.')
            return 0;
    }
    return 1;
}

static int is_lower_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)* */
static int is_subdomain(const char *s, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.')
            continue;
        if (i == start || !is_lower_alnum((unsigned char)s[start]) ||
            !is_lower_alnum((unsigned char)s[i - 1]))
            return 0;
        for (size_t j = start + 1; j + 1 < i; j++) {
            if (!is_lower_alnum((unsigned char)s[j]) && s[j] != '-')
                return 0;
        }
        start = i + 1;
    }
    return 1;
}

/* Appends IsQualifiedName's complaints about key joined by "; "; returns how many. */
static int key_errors(sbuf *b, const char *key, size_t n)
{
    const char *slash = memchr(key, '/', n), *name = key;
    size_t name_len = n;
    int errs = 0;
#define KEY_ERR(text) (sb_str(b, errs++ ? "; " : ""), sb_str(b, text))
    if (slash != NULL) {
        size_t plen = (size_t)(slash - key);
        if (memchr(slash + 1, '/', n - plen - 1) != NULL) {
            KEY_ERR(MSG_QNAME_SLASHES);
            return errs;
        }
        name = slash + 1;
        name_len = n - plen - 1;
        if (plen == 0) {
            KEY_ERR("prefix part must be non-empty");
        } else {
            if (plen > 253)
                KEY_ERR("prefix part must be no more than 253 characters");
            if (!is_subdomain(key, plen))
                KEY_ERR("prefix part " MSG_SUBDOMAIN);
        }
    }
    if (name_len == 0)
        KEY_ERR("name part must be non-empty");
    else if (name_len > 63)
        KEY_ERR("name part must be no more than 63 characters");
    if (!is_qname(name, name_len))
        KEY_ERR("name part " QNAME_RULE);
#undef KEY_ERR
    return errs;
}

static int value_errors(sbuf *b, const char *v, size_t n)
{
    int errs = 0;
    if (n > 63) {
        sb_str(b, "must be no more than 63 characters");
        errs++;
    }
    if (n > 0 && !is_qname(v, n)) {
        sb_str(b, errs++ ? "; " MSG_LABEL_VALUE : MSG_LABEL_VALUE);
    }
    return errs;
}

/* ---- lexer ---- */

enum tok { T_EOS, T_CLOSE, T_COMMA, T_NOT, T_DEQ, T_EQ, T_GT, T_ID, T_IN, T_LT, T_NEQ, T_NOTIN,
           T_OPEN };

typedef struct token {
    enum tok t;
    size_t pos, len; /* the literal: sel[pos .. pos + len) */
} token;

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int is_special(char c)
{
    return c == '=' || c == '!' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<';
}

static token lex(const char *s, size_t len, size_t *pos)
{
    size_t i = *pos;
    token t;
    while (i < len && is_blank(s[i]))
        i++;
    t.pos = i;
    if (i >= len) {
        t.t = T_EOS;
        t.len = 0;
    } else if (is_special(s[i])) {
        /* The longest operator: "!=" and "==" are the only two-byte ones. */
        t.len = 1;
        if ((s[i] == '!' || s[i] == '=') && i + 1 < len && s[i + 1] == '=') {
            t.t = s[i] == '!' ? T_NEQ : T_DEQ;
            t.len = 2;
        } else {
            switch (s[i]) {
            case '=': t.t = T_EQ; break;
            case '!': t.t = T_NOT; break;
            case '(': t.t = T_OPEN; break;
            case ')': t.t = T_CLOSE; break;
            case ',': t.t = T_COMMA; break;
            case '>': t.t = T_GT; break;
            default: t.t = T_LT; break;
            }
        }
    } else {
        while (i < len && !is_special(s[i]) && !is_blank(s[i]))
            i++;
        t.len = i - t.pos;
        t.t = T_ID;
        if (t.len == 2 && memcmp(s + t.pos, "in", 2) == 0)
            t.t = T_IN;
        else if (t.len == 5 && memcmp(s + t.pos, "notin", 5) == 0)
            t.t = T_NOTIN;
    }
    *pos = t.pos + t.len;
    return t;
}

/* ---- parser ---- */

enum ctx { KEY_AND_OPERATOR, VALUES }; /* in VALUES, "in" and "notin" are identifiers */

typedef struct pval {
    kinf_str v;
    size_t pos;
} pval;

typedef struct preq {
    enum op op;
    kinf_str key;
    size_t first, n; /* its values: vals[first .. first + n) */
    long long num;
} preq;

typedef struct parser {
    const char *s;
    size_t len, lexpos;
    int peeked;
    token next;
    preq *reqs;
    size_t nreqs, capreqs;
    pval *vals;
    size_t nvals, capvals;
    int in_requirement; /* errors get "unable to parse requirement: " */
    int nomem;
    sbuf err;
    size_t errpos;
} parser;

static token peek(parser *p, enum ctx c)
{
    token t;
    if (!p->peeked) {
        p->next = lex(p->s, p->len, &p->lexpos);
        p->peeked = 1;
    }
    t = p->next;
    if (c == VALUES && (t.t == T_IN || t.t == T_NOTIN))
        t.t = T_ID;
    return t;
}

static token consume(parser *p, enum ctx c)
{
    token t = peek(p, c);
    p->peeked = 0;
    return t;
}

/* Records a syntax error "found '<tok>'<rest>" at tok's position; returns -1. */
static int found(parser *p, token t, const char *rest)
{
    p->errpos = t.pos;
    if (p->in_requirement)
        sb_str(&p->err, "unable to parse requirement: ");
    sb_str(&p->err, "found '");
    sb_put(&p->err, p->s + t.pos, t.len);
    sb_str(&p->err, "'");
    sb_str(&p->err, rest);
    return -1;
}

static int add_value(parser *p, token t)
{
    if (p->nvals == p->capvals) {
        size_t cap = p->capvals ? p->capvals * 2 : 16;
        pval *grown = realloc(p->vals, cap * sizeof(*grown));
        if (grown == NULL) {
            p->nomem = 1;
            return -1;
        }
        p->vals = grown;
        p->capvals = cap;
    }
    p->vals[p->nvals].v.ptr = p->s + t.pos;
    p->vals[p->nvals].v.len = t.t == T_ID ? t.len : 0; /* "" comes from a ',' or ')' */
    p->vals[p->nvals].pos = t.pos;
    p->nvals++;
    return 0;
}

/* parseValues / parseIdentifiersList: "(" values ")". */
static int parse_values(parser *p)
{
    token t = consume(p, VALUES);
    if (t.t != T_OPEN)
        return found(p, t, " expected: '('"); /* sic: no comma in apimachinery's text */
    t = peek(p, VALUES);
    if (t.t == T_CLOSE) {
        consume(p, VALUES);
        return add_value(p, t); /* "()" is the set {""} */
    }
    if (t.t != T_ID && t.t != T_COMMA)
        return found(p, t, ", expected: ',', ')' or identifier");
    for (;;) {
        token u = consume(p, VALUES), w;
        if (u.t == T_ID) {
            if (add_value(p, u) < 0)
                return -1;
            w = peek(p, VALUES);
            if (w.t == T_CLOSE)
                break;
            if (w.t != T_COMMA)
                return found(p, w, ", expected: ',' or ')'");
        } else if (u.t == T_COMMA) {
            /* An empty value before, between or after commas: "(,a" "(a,,b" "(a,)". */
            size_t before = p->nvals;
            if (p->reqs[p->nreqs].first == before && add_value(p, u) < 0)
                return -1;
            w = peek(p, VALUES);
            if (w.t == T_CLOSE) {
                if (add_value(p, w) < 0)
                    return -1;
                break;
            }
            if (w.t == T_COMMA) {
                consume(p, VALUES);
                if (add_value(p, w) < 0)
                    return -1;
            }
        } else {
            return found(p, u, ", expected: ',', or identifier");
        }
    }
    consume(p, VALUES); /* the ')' seen above */
    return 0;
}

static int by_value(const void *a, const void *b)
{
    const pval *x = a, *y = b;
    size_t n = x->v.len < y->v.len ? x->v.len : y->v.len;
    int c = memcmp(x->v.ptr, y->v.ptr, n);
    if (c != 0)
        return c;
    return x->v.len < y->v.len ? -1 : x->v.len > y->v.len;
}

/* NewRequirement's checks on the values of the requirement being built (sorted into a set
 * first, as sets.String.List() hands them over); messages aggregated as utilerrors does. */
static int check_values(parser *p, preq *r)
{
    pval *v = p->vals + r->first;
    size_t k = 0, nerr = 0, first_pos = 0;
    char one[1024], all[2048];
    sbuf agg = {all, sizeof(all), 0};

    if (r->n > 1)
        qsort(v, r->n, sizeof(*v), by_value);
    for (size_t i = 0; i < r->n; i++) {
        if (k == 0 || by_value(&v[k - 1], &v[i]) != 0)
            v[k++] = v[i];
    }
    p->nvals = r->first + k;
    r->n = k;
    for (size_t i = 0; i <= k; i++) {
        sbuf msg = {one, sizeof(one), 0};
        size_t pos;
        if (i == 0) { /* the operator's own rule comes first */
            if ((r->op != OP_GT && r->op != OP_LT) || kinf_ls_parse_int64(v[0].v.ptr, v[0].v.len, &r->num))
                continue;
            sb_str(&msg, "values[0]: Invalid value: ");
            sb_quote(&msg, v[0].v.ptr, v[0].v.len);
            sb_str(&msg, ": for 'Gt', 'Lt' operators, the value must be an integer");
            pos = v[0].pos;
        } else {
            size_t at;
            sb_fmt(&msg, "values[%zu][", i - 1);
            sb_put(&msg, r->key.ptr, r->key.len);
            sb_str(&msg, "]: Invalid value: ");
            sb_quote(&msg, v[i - 1].v.ptr, v[i - 1].v.len);
            sb_str(&msg, ": ");
            at = msg.len;
            if (value_errors(&msg, v[i - 1].v.ptr, v[i - 1].v.len) == 0 && msg.len == at)
                continue;
            pos = v[i - 1].pos;
        }
        /* Each message names its own values[i]: none repeats, so utilerrors drops none. */
        if (nerr++ == 0)
            first_pos = pos;
        else
            sb_str(&agg, ", ");
        sb_str(&agg, one);
    }
    if (nerr == 0)
        return 0;
    p->errpos = first_pos;
    sb_str(&p->err, "unable to parse requirement: ");
    if (nerr > 1)
        sb_str(&p->err, "[");
    sb_str(&p->err, all);
    if (nerr > 1)
        sb_str(&p->err, "]");
    return -1;
}

/* parseRequirement, with parseKeyAndInferOperator, parseOperator and parseExactValue. */
static int parse_requirement(parser *p)
{
    char keymsg[1536];
    sbuf kb = {keymsg, sizeof(keymsg), 0};
    preq *r;
    token t, w;
    int not = 0;

    if (p->nreqs == p->capreqs) {
        size_t cap = p->capreqs ? p->capreqs * 2 : 8;
        preq *grown = realloc(p->reqs, cap * sizeof(*grown));
        if (grown == NULL) {
            p->nomem = 1;
            return -1;
        }
        p->reqs = grown;
        p->capreqs = cap;
    }
    r = &p->reqs[p->nreqs]; /* counted in nreqs once complete */
    r->first = p->nvals;
    r->n = 0;
    r->num = 0;
    t = consume(p, VALUES);
    if (t.t == T_NOT) {
        not = 1;
        t = consume(p, VALUES);
    }
    if (t.t != T_ID)
        return found(p, t, ", expected: identifier");
    r->key.ptr = p->s + t.pos;
    r->key.len = t.len;
    if (key_errors(&kb, r->key.ptr, r->key.len) > 0) {
        p->errpos = t.pos;
        sb_str(&p->err, "unable to parse requirement: <nil>: Invalid value: ");
        sb_quote(&p->err, r->key.ptr, r->key.len);
        sb_str(&p->err, ": ");
        sb_str(&p->err, keymsg);
        return -1;
    }
    w = peek(p, VALUES);
    if (not || w.t == T_EOS || w.t == T_COMMA) {
        /* "!key" followed by anything else is still "!key": the caller then rejects the token. */
        r->op = not ? OP_NOT_EXISTS : OP_EXISTS;
        p->nreqs++;
        return 0;
    }
    t = consume(p, KEY_AND_OPERATOR);
    switch (t.t) {
    case T_IN: r->op = OP_IN; break;
    case T_NOTIN: r->op = OP_NOT_IN; break;
    case T_EQ: r->op = OP_EQ; break;
    case T_DEQ: r->op = OP_DEQ; break;
    case T_NEQ: r->op = OP_NEQ; break;
    case T_GT: r->op = OP_GT; break;
    case T_LT: r->op = OP_LT; break;
    default: return found(p, t, ", expected: " MSG_OPERATORS);
    }
    if (r->op == OP_IN || r->op == OP_NOT_IN) {
        if (parse_values(p) < 0)
            return -1;
    } else {
        w = peek(p, VALUES);
        if (w.t == T_EOS || w.t == T_COMMA) {
            if (add_value(p, w) < 0) /* "key=" : the empty value */
                return -1;
        } else {
            t = consume(p, VALUES);
            if (t.t != T_ID)
                return found(p, t, ", expected: identifier");
            if (add_value(p, t) < 0)
                return -1;
        }
    }
    r = &p->reqs[p->nreqs];
    r->n = p->nvals - r->first;
    if (check_values(p, r) < 0)
        return -1;
    p->nreqs++;
    return 0;
}

/* Parser.parse: requirements separated by commas, up to the end of the string. */
static int parse_all(parser *p)
{
    for (;;) {
        token t = peek(p, VALUES);
        if (t.t == T_EOS)
            return 0;
        if (t.t != T_ID && t.t != T_NOT)
            return found(p, t, ", expected: !, identifier, or 'end of string'");
        p->in_requirement = 1;
        if (parse_requirement(p) < 0)
            return -1;
        p->in_requirement = 0;
        t = consume(p, VALUES);
        if (t.t == T_EOS)
            return 0;
        if (t.t != T_COMMA)
            return found(p, t, ", expected: ',' or 'end of string'");
        t = peek(p, VALUES);
        if (t.t != T_ID && t.t != T_NOT)
            return found(p, t, ", expected: identifier after ','");
    }
}

kinf_err kinf_labelselector_parse(const char *sel, size_t len, kinf_labelselector **out,
                                  size_t *errpos, char *errbuf, size_t errlen)
{
    parser p;
    kinf_labelselector *ls = NULL;
    kinf_str *vals;
    char *text;
    size_t size;
    kinf_err e = KINF_OK;

    memset(&p, 0, sizeof(p));
    p.s = sel != NULL ? sel : "";
    p.len = sel != NULL ? len : 0;
    p.err.p = errbuf;
    p.err.cap = errbuf != NULL ? errlen : 0;
    if (p.err.cap)
        errbuf[0] = '\0';
    *out = NULL;
    *errpos = 0;
    if (parse_all(&p) < 0) {
        e = p.nomem ? KINF_ENOMEM : KINF_EINVAL;
        *errpos = p.errpos;
        goto out;
    }
    /* One block: header, requirements, value spans, then the text they point into. */
    size = sizeof(*ls) + p.nreqs * sizeof(ls_req) + p.nvals * sizeof(kinf_str) + p.len + 1;
    if (size < p.len || (ls = malloc(size)) == NULL) {
        e = KINF_ENOMEM;
        goto out;
    }
    vals = (kinf_str *)(void *)(ls->reqs + p.nreqs);
    text = (char *)(vals + p.nvals);
    if (p.len)
        memcpy(text, p.s, p.len);
    text[p.len] = '\0';
    ls->n = p.nreqs;
    for (size_t i = 0; i < p.nvals; i++) {
        vals[i].ptr = text + (p.vals[i].v.ptr - p.s);
        vals[i].len = p.vals[i].v.len;
    }
    for (size_t i = 0; i < p.nreqs; i++) {
        const preq *r = &p.reqs[i];
        ls->reqs[i].op = r->op;
        ls->reqs[i].key.ptr = text + (r->key.ptr - p.s);
        ls->reqs[i].key.len = r->key.len;
        ls->reqs[i].vals = vals + r->first;
        ls->reqs[i].nvals = r->n;
        ls->reqs[i].num = r->num;
    }
    *out = ls;
out:
    free(p.reqs);
    free(p.vals);
    return e;
}

void kinf_labelselector_free(kinf_labelselector *sel)
{
    free(sel);
}

size_t kinf_labelselector_len(const kinf_labelselector *sel)
{
    return sel->n;
}
