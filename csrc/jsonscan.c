/*
 * jsonscan.c - streaming, validating JSON scanner for watch streams and list
 * bodies (contract in jsonscan.h).
 *
 * How it works. scan() is one resumable state machine: it runs the function of
 * the current state (st_value, st_after, ...), which consumes what that state
 * expects and returns the next one, and jumps to that one's function. The state
 * functions are inlined into scan(), so the position lives in registers and
 * each transition compiles to a direct jump; a state is only stored (s->state)
 * when a chunk runs out, so inside a chunk control goes straight from token to
 * token.
 * Containers live on an explicit stack of small frames (no recursion). Each
 * frame has a role (R_NONE for everything the scanner does not care about,
 * which is nearly all of an object: spec, status, labels, ...); only frames
 * with a role look at their keys, so the hot path is plain validation: SSE2
 * (or a table loop) to skip string bodies, a digit loop for numbers, a switch
 * for structure.
 *
 * Tokens split by a chunk boundary: strings and numbers resume in place (their
 * state says where); escapes, UTF-8 sequences and literals (at most 12
 * bytes) are accumulated in s->carry and decoded once complete.
 *
 * Output ("capture"): the bytes of the object being emitted are not copied
 * while they stay in the caller's chunk. `cp` points at the first byte not yet
 * copied; at the end of a chunk [cp, end) is appended to s->obuf, and an
 * object that starts and ends inside one chunk without a transform is handed
 * to the callback in place. Dropping metadata.managedFields copies what
 * precedes the member, truncates back to where the member (with its comma)
 * began when the cut point was already copied, and resumes copying after the
 * value (cp == NULL while skipping). Output positions are "vout" offsets:
 * obuf_len + (p - cp).
 *
 * Size limit: while an event (watch) or an item (list) is in flight, `end` is
 * pulled in to the byte where the value would exceed max_object_bytes; running
 * into that end is KINF_ETOOBIG. So the error does not depend on chunking and
 * obuf never grows past the limit.
 */
#include "jsonscan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Scanner states (where to resume when the next chunk arrives). */
enum {
    ST_TOP,       /* between top-level values */
    ST_VALUE,     /* expecting a value */
    ST_OBJ_OPEN,  /* after '{' */
    ST_OBJ_NEXT,  /* after ',' in an object */
    ST_COLON,     /* after a key */
    ST_AFTER,     /* after a value in a container */
    ST_ARR_OPEN,  /* after '[' */
    ST_KEY,       /* inside a key */
    ST_STR,       /* inside a string value */
    ST_STR_ESC,   /* inside an escape sequence (carry) */
    ST_STR_U8,    /* inside a UTF-8 sequence (carry) */
    ST_NUM_MINUS, /* number states, named after what was read last */
    ST_NUM_ZERO,
    ST_NUM_INT,
    ST_NUM_DOT,
    ST_NUM_FRAC,
    ST_NUM_E,
    ST_NUM_ESIGN,
    ST_NUM_EXP,
    ST_LIT,       /* inside true/false/null (carry) */
    ST_SKIP,      /* inside a dropped value (skip_value) */
    ST_END,       /* list mode: after the body */
    ST_FAILED
};

static const char *const state_what[] = {
    "between values", "before a value", "after '{'", "after ','", "after a key",
    "after a value", "after '['", "inside a string", "inside a string",
    "inside an escape sequence", "inside a UTF-8 sequence", "inside a number", "inside a number",
    "inside a number", "inside a number", "inside a number", "inside a number",
    "inside a number", "inside a number", "inside a literal", "inside metadata.managedFields",
    "after the body", "failed"};

/* Frame roles: what a container means to the scanner. */
enum {
    R_NONE,
    R_ENVELOPE, /* watch event {"type","object"} */
    R_OBJ,      /* an emitted object (watch "object", list item) */
    R_META,     /* its metadata */
    R_ANNOT,    /* its metadata.annotations */
    R_LIST,     /* list body (also a Status body) */
    R_LMETA,    /* list metadata */
    R_ITEMS,    /* list items array */
    R_DETAILS,  /* Status details */
    R_CAUSES,   /* Status details.causes array */
    R_CAUSE     /* one cause */
};

/* Value slots: what the member value being scanned means (frame.vslot). The
 * first ones capture a string (or number) into a sink. */
enum {
    V_NONE,
    /* string sinks */
    V_TYPE, V_KIND, V_APIV, V_NAME, V_NS, V_UID, V_RV, V_IEE,
    V_LKIND, V_LAPIV, V_LRV, V_LCONT, V_SREASON, V_SMESSAGE, V_CREASON, V_CMESSAGE,
    /* number sinks */
    V_LREMAIN, V_SCODE, V_SRETRY,
    V__SINKS,
    /* structure */
    V_OBJECT = V__SINKS, V_ITEM, V_METADATA, V_ANNOT, V_STRIP, V_LMETA, V_ITEMS,
    V_SDETAILS, V_SCAUSES, V_CAUSE
};

#define NUM_CAP 32
#define CAUSE_CAP 64
#define KEY_CAP 64
#define PFX_CAP (KINF_SCAN_MAX_KIND * 6 + 32)
#define OBUF_MIN 16384
#define OBUF_KEEP ((size_t)1 << 20) /* larger buffers are released after use */

/* A bounded capture buffer. Keeps the first cap bytes, sets `over` if more came. */
typedef struct sink {
    char *buf;
    size_t len, cap;
    unsigned char over;
} sink;

typedef struct frame {
    unsigned char is_obj, role, vslot;
} frame;

struct kinf_scanner {
    kinf_scan_mode mode;
    kinf_scan_options opt;
    size_t max;          /* max_object_bytes */
    int strip, inject;   /* flags */

    kinf_err err;
    char errmsg[320];
    int in_cb, finished, seen_top;

    uint64_t off;               /* stream offset of the current chunk */
    const unsigned char *chunk; /* the current chunk (for offsets) */
    int state;
    int str_key;                /* the escape or UTF-8 sequence in carry is in a key */
    int vtype;                  /* first byte of the slot value being scanned */
    uint64_t vstart;            /* and its offset (for messages) */
    sink *snk;                  /* where string / number bytes go, or NULL */
    unsigned char carry[16];
    unsigned carry_len;
    unsigned char lit;          /* 't', 'f' or 'n' */
    unsigned skip_depth;        /* skip_value: brackets open in the dropped value */
    unsigned char skip_instr;   /* ... the next byte is inside a string */
    unsigned char skip_esc;     /* ... the next byte is escaped */

    unsigned depth;
    frame stk[KINF_SCAN_MAX_DEPTH];

    /* in-flight value (watch: event, list: item) for the size limit */
    int val_active;
    uint64_t val_start;

    /* capture of the emitted object */
    int cap, cap_paused;
    unsigned char *obuf;
    size_t obuf_cap, obuf_len, obase; /* data lives at obuf + obase */
    uint64_t obj_off;
    const unsigned char *out_ptr;     /* completed output: in the chunk (out_direct) ... */
    size_t out_len;
    int out_direct;                   /* ... or at obuf + obase */

    /* per object */
    int has_kind, has_av, iee;
    unsigned obj_members;
    size_t mf_key_vout, mf_comma_vout; /* strip bookkeeping in metadata */
    unsigned meta_out_members;
    int strip_first_pending;

    /* per event */
    int have_type, have_object, ev_type;

    /* list */
    size_t items;
    int has_items;
    int items_null;             /* "items": null (client-go decodes it as an empty list) */
    int lmeta_done;             /* the list's "metadata" object is complete */
    int inj_kind, inj_av;
    char pfx_kind[PFX_CAP], pfx_av[PFX_CAP];
    size_t pfx_kind_len, pfx_av_len;
    int cause_rv, cause_msg;
    kinf_status status;

    sink key;
    sink sk[V__SINKS];
    char b_key[KEY_CAP], b_type[16], b_kind[KINF_SCAN_MAX_KIND], b_apiv[KINF_SCAN_MAX_KIND];
    char b_name[KINF_SCAN_MAX_META], b_ns[KINF_SCAN_MAX_META], b_uid[KINF_SCAN_MAX_META];
    char b_rv[KINF_SCAN_MAX_META], b_iee[8];
    char b_lkind[KINF_SCAN_MAX_KIND], b_lapiv[KINF_SCAN_MAX_KIND], b_lrv[KINF_SCAN_MAX_META];
    char b_lcont[KINF_SCAN_MAX_CONTINUE], b_sreason[KINF_STATUS_REASON_MAX];
    char b_smessage[KINF_STATUS_MESSAGE_MAX], b_creason[CAUSE_CAP], b_cmessage[CAUSE_CAP];
    char b_lremain[NUM_CAP], b_scode[NUM_CAP], b_sretry[NUM_CAP];
};

/* ---- character classes ------------------------------------------------ */

/* Non-zero for bytes that end a fast run inside a string. */
static const unsigned char str_special_tab[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

static inline int is_ws(unsigned char c)
{
    /* one compare and a bit test instead of four compares */
    return c <= ' ' && ((1ull << c) & ((1ull << ' ') | (1ull << '\n') | (1ull << '\r') |
                                       (1ull << '\t'))) != 0;
}

/* The one-character escapes after a backslash. */
static inline int esc_simple(unsigned char c)
{
    return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
           c == 't';
}

static inline int is_digit(unsigned char c)
{
    return (unsigned)(c - '0') < 10u;
}

/* ---- errors -------------------------------------------------------------- */

static kinf_err failv(kinf_scanner *s, kinf_err e, uint64_t off, const char *fmt, va_list ap)
{
    int n;
    s->err = e;
    s->state = ST_FAILED;
    n = snprintf(s->errmsg, sizeof s->errmsg, "%sat byte %llu: ",
                 e == KINF_EPARSE ? "malformed JSON " : "", (unsigned long long)off);
    if (n > 0 && (size_t)n < sizeof s->errmsg)
        vsnprintf(s->errmsg + n, sizeof s->errmsg - (size_t)n, fmt, ap);
    return e;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static kinf_err failf(kinf_scanner *s, kinf_err e, uint64_t off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    failv(s, e, off, fmt, ap);
    va_end(ap);
    return e;
}

static uint64_t off_of(const kinf_scanner *s, const unsigned char *p)
{
    return s->off + (uint64_t)(p - s->chunk);
}

/* "expected WHAT, found X" at p (p is inside the chunk). */
static kinf_err expect(kinf_scanner *s, const unsigned char *p, const char *what)
{
    unsigned char c = *p;
    if (c >= 0x20 && c < 0x7f)
        return failf(s, KINF_EPARSE, off_of(s, p), "expected %s, found '%c'", what, c);
    return failf(s, KINF_EPARSE, off_of(s, p), "expected %s, found byte 0x%02x", what, c);
}

/* ---- buffers ------------------------------------------------------------- */

static inline void sink_add(sink *k, const void *src, size_t n)
{
    size_t room = k->cap - k->len;
    if (n > room) {
        k->over = 1;
        n = room;
    }
    memcpy(k->buf + k->len, src, n);
    k->len += n;
}

static int sink_eq(const sink *k, const char *lit)
{
    size_t n = strlen(lit);
    return !k->over && k->len == n && memcmp(k->buf, lit, n) == 0;
}

static kinf_err obuf_reserve(kinf_scanner *s, size_t n)
{
    size_t need = s->obase + s->obuf_len + n, ncap;
    unsigned char *nb;
    if (need < n)
        return KINF_ENOMEM;
    if (need <= s->obuf_cap)
        return KINF_OK;
    ncap = s->obuf_cap ? s->obuf_cap : OBUF_MIN;
    while (ncap < need)
        ncap = ncap * 2 > ncap ? ncap * 2 : need;
    nb = realloc(s->obuf, ncap);
    if (nb == NULL)
        return KINF_ENOMEM;
    s->obuf = nb;
    s->obuf_cap = ncap;
    return KINF_OK;
}

static kinf_err obuf_add(kinf_scanner *s, const unsigned char *src, size_t n)
{
    if (n == 0)
        return KINF_OK;
    if (obuf_reserve(s, n))
        return failf(s, KINF_ENOMEM, s->obj_off, "out of memory buffering an object (%zu bytes)",
                     s->obuf_len + n);
    memcpy(s->obuf + s->obase + s->obuf_len, src, n);
    s->obuf_len += n;
    return KINF_OK;
}

/* After an object was handed out: forget it; give back an unusually large buffer. */
static void obuf_done(kinf_scanner *s)
{
    s->obuf_len = 0;
    s->out_ptr = NULL;
    s->out_len = 0;
    s->out_direct = 0;
    if (s->obuf_cap > OBUF_KEEP) {
        free(s->obuf);
        s->obuf = NULL;
        s->obuf_cap = 0;
    }
}

/* Output offset of chunk position p while capturing. */
static inline size_t vout(const kinf_scanner *s, const unsigned char *p, const unsigned char *cp)
{
    return s->obuf_len + (cp ? (size_t)(p - cp) : 0);
}

/* ---- token helpers ----------------------------------------------------- */


enum { ESC_EBAD = -1, ESC_EHEX = -2, ESC_EHIGH = -3, ESC_ELOW = -4 };

/*
 * The escape sequence at p (p[0] == '\\'): returns the bytes it takes (2, 6 or
 * 12) and its UTF-8 in out (outlen bytes); 0 when the input ends before the sequence
 * is complete and nothing seen so far is wrong; ESC_E* on an error. Decides as
 * early as possible, so feeding it one more byte at a time works.
 */
static int esc_decode(const unsigned char *p, const unsigned char *end, unsigned char out[4],
                      int *outlen)
{
    unsigned hi, lo;
    int r;
    if (end - p < 2)
        return 0;
    switch (p[1]) {
    case '"': out[0] = '"'; break;
    case '\\': out[0] = '\\'; break;
    case '/': out[0] = '/'; break;
    case 'b': out[0] = '\b'; break;
    case 'f': out[0] = '\f'; break;
    case 'n': out[0] = '\n'; break;
    case 'r': out[0] = '\r'; break;
    case 't': out[0] = '\t'; break;
    case 'u':
        r = kinf_hex4(p + 2, end, &hi);
        if (r <= 0)
            return r < 0 ? ESC_EHEX : 0;
        if (hi >= 0xDC00 && hi <= 0xDFFF)
            return ESC_ELOW;
        if (hi < 0xD800 || hi > 0xDBFF) {
            *outlen = kinf_utf8_put(out, hi);
            return 6;
        }
        if (end - p < 7)
            return 0;
        if (p[6] != '\\')
            return ESC_EHIGH;
        if (end - p < 8)
            return 0;
        if (p[7] != 'u')
            return ESC_EHIGH;
        r = kinf_hex4(p + 8, end, &lo);
        if (r <= 0)
            return r < 0 ? ESC_EHEX : 0;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return ESC_EHIGH;
        *outlen = kinf_utf8_put(out, 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
        return 12;
    default:
        return ESC_EBAD;
    }
    *outlen = 1;
    return 2;
}

static const char *esc_error(int r)
{
    switch (r) {
    case ESC_EHEX: return "4 hex digits after \\u";
    case ESC_EHIGH: return "a low surrogate \\uDC00-\\uDFFF after a high surrogate";
    case ESC_ELOW: return "a high surrogate before a low surrogate (lone \\uDC00-\\uDFFF)";
    default: return "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX";
    }
}

/* The UTF-8 sequence at p (p[0] >= 0x80): its length, 0 if the input ends
 * first (so far valid), -1 if invalid (RFC 3629: no overlongs, surrogates or
 * code points above U+10FFFF). */
static int utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    int n;
    ptrdiff_t avail = end - p;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c == 0xE0)
        n = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
        n = 3;
    else if (c == 0xED)
        n = 3, hi = 0x9F;
    else if (c == 0xF0)
        n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
        n = 4;
    else if (c == 0xF4)
        n = 4, hi = 0x8F;
    else
        return -1;
    if (avail < 2)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return -1;
    for (int i = 2; i < n; i++) {
        if (avail <= i)
            return 0;
        if ((p[i] & 0xC0) != 0x80)
            return -1;
    }
    return n;
}

static int ev_type_of(const sink *k)
{
    if (sink_eq(k, "ADDED")) return KINF_EV_ADDED;
    if (sink_eq(k, "MODIFIED")) return KINF_EV_MODIFIED;
    if (sink_eq(k, "DELETED")) return KINF_EV_DELETED;
    if (sink_eq(k, "BOOKMARK")) return KINF_EV_BOOKMARK;
    if (sink_eq(k, "ERROR")) return KINF_EV_ERROR;
    return -1;
}

const char *kinf_event_type_name(kinf_event_type type)
{
    switch (type) {
    case KINF_EV_ADDED: return "ADDED";
    case KINF_EV_MODIFIED: return "MODIFIED";
    case KINF_EV_DELETED: return "DELETED";
    case KINF_EV_BOOKMARK: return "BOOKMARK";
    case KINF_EV_ERROR: return "ERROR";
    case KINF_EV_LIST_ITEM: return "LIST_ITEM";
    }
    return "?";
}

/* Parses an integer sink (JSON number bytes); 0 and *ok = 0 when not an integer in range. */
static long long sink_int(const sink *k, long long lo, long long hi, int *ok)
{
    long long v = 0;
    size_t i = 0;
    int neg = 0;
    *ok = 0;
    if (k->over || k->len == 0)
        return 0;
    if (k->buf[0] == '-')
        neg = 1, i = 1;
    if (i == k->len)
        return 0;
    for (; i < k->len; i++) {
        unsigned char c = (unsigned char)k->buf[i];
        if (!is_digit(c))
            return 0; /* fraction or exponent: not an integer */
        if (v > (hi - (c - '0')) / 10)
            return 0;
        v = v * 10 + (c - '0');
    }
    if (neg)
        v = -v;
    if (v < lo)
        return 0;
    *ok = 1;
    return v;
}

/* JSON string text for raw (already valid UTF-8) bytes: "..." with escapes. */
static size_t json_quote(char *out, const char *in, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            memcpy(out + o, "\\u00", 4);
            out[o + 4] = hex[c >> 4];
            out[o + 5] = hex[c & 15];
            o += 6;
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    return o;
}

/* ---- role hooks (called only for frames with a role: the cold path) --------- */

static void reset_object(kinf_scanner *s)
{
    s->has_kind = s->has_av = s->iee = 0;
    s->obj_members = 0;
    s->sk[V_KIND].len = s->sk[V_APIV].len = 0;
    s->sk[V_NAME].len = s->sk[V_NS].len = s->sk[V_UID].len = s->sk[V_RV].len = 0;
}

static void key_start_hook(kinf_scanner *s, const frame *fr, const unsigned char *p,
                           const unsigned char *cp)
{
    s->key.len = 0;
    s->key.over = 0;
    s->snk = &s->key;
    if (fr->role == R_META && s->strip)
        s->mf_key_vout = vout(s, p, cp);
}

#define KEY_IS(lit) sink_eq(&s->key, lit)

/* p is just past the key's closing quote. */
static kinf_err key_done_hook(kinf_scanner *s, frame *fr, const unsigned char *p,
                              const unsigned char **cpp)
{
    unsigned char v = V_NONE;
    s->snk = NULL;
    switch (fr->role) {
    case R_ENVELOPE:
        if (KEY_IS("type")) {
            if (s->have_type)
                return failf(s, KINF_EPARSE, off_of(s, p), "watch event with two \"type\" members");
            v = V_TYPE;
        } else if (KEY_IS("object")) {
            if (s->have_object)
                return failf(s, KINF_EPARSE, off_of(s, p),
                             "watch event with two \"object\" members");
            v = V_OBJECT;
        }
        break;
    case R_OBJ:
        s->obj_members++;
        if (KEY_IS("kind")) {
            v = V_KIND;
        } else if (KEY_IS("apiVersion")) {
            v = V_APIV;
        } else if (KEY_IS("metadata")) {
            v = V_METADATA;
            s->sk[V_NAME].len = s->sk[V_NS].len = s->sk[V_UID].len = s->sk[V_RV].len = 0;
            s->iee = 0;
        }
        break;
    case R_META:
        if (KEY_IS("name")) {
            v = V_NAME;
        } else if (KEY_IS("namespace")) {
            v = V_NS;
        } else if (KEY_IS("uid")) {
            v = V_UID;
        } else if (KEY_IS("resourceVersion")) {
            v = V_RV;
        } else if (KEY_IS("annotations")) {
            v = V_ANNOT;
            s->iee = 0;
        } else if (s->strip && KEY_IS("managedFields")) {
            /* Cut from the preceding comma (or, for the first member, from the
             * key) and stop copying until the value is over. */
            const unsigned char *cp = *cpp;
            size_t cut = s->meta_out_members ? s->mf_comma_vout : s->mf_key_vout;
            if (cut >= s->obuf_len) {
                if (cp && obuf_add(s, cp, cut - s->obuf_len))
                    return s->err;
            } else {
                s->obuf_len = cut;
            }
            *cpp = NULL;
            v = V_STRIP;
        }
        break;
    case R_ANNOT:
        if (KEY_IS("k8s.io/initial-events-end"))
            v = V_IEE;
        break;
    case R_LIST:
        if (KEY_IS("kind")) v = V_LKIND;
        else if (KEY_IS("apiVersion")) v = V_LAPIV;
        else if (KEY_IS("metadata")) v = V_LMETA;
        else if (KEY_IS("items")) v = V_ITEMS;
        else if (KEY_IS("code")) v = V_SCODE;
        else if (KEY_IS("reason")) v = V_SREASON;
        else if (KEY_IS("message")) v = V_SMESSAGE;
        else if (KEY_IS("details")) v = V_SDETAILS;
        break;
    case R_LMETA:
        if (KEY_IS("resourceVersion")) v = V_LRV;
        else if (KEY_IS("continue")) v = V_LCONT;
        else if (KEY_IS("remainingItemCount")) v = V_LREMAIN;
        break;
    case R_DETAILS:
        if (KEY_IS("causes")) v = V_SCAUSES;
        else if (KEY_IS("retryAfterSeconds")) v = V_SRETRY;
        break;
    case R_CAUSE:
        if (KEY_IS("reason")) v = V_CREASON;
        else if (KEY_IS("message")) v = V_CMESSAGE;
        break;
    default:
        break;
    }
    fr->vslot = v;
    return KINF_OK;
}

static void build_prefixes(kinf_scanner *s)
{
    const sink *k = &s->sk[V_LKIND], *a = &s->sk[V_LAPIV];
    s->inj_kind = s->inj_av = 0;
    s->pfx_kind_len = s->pfx_av_len = 0;
    s->obase = 0;
    if (!s->inject)
        return;
    if (k->len > 4 && memcmp(k->buf + k->len - 4, "List", 4) == 0) {
        memcpy(s->pfx_kind, "\"kind\":", 7);
        s->pfx_kind_len = 7 + json_quote(s->pfx_kind + 7, k->buf, k->len - 4);
        s->inj_kind = 1;
    }
    if (a->len > 0) {
        memcpy(s->pfx_av, "\"apiVersion\":", 13);
        s->pfx_av_len = 13 + json_quote(s->pfx_av + 13, a->buf, a->len);
        s->inj_av = 1;
    }
    if (s->inj_kind || s->inj_av)
        s->obase = 1 + s->pfx_kind_len + 1 + s->pfx_av_len + 1;
}

/* A value starts at p in a member/element with a slot. Sets the sink or the
 * role of the container about to be pushed (*nrole). */
static kinf_err value_begin_hook(kinf_scanner *s, frame *fr, const unsigned char *p,
                                 const unsigned char **cpp, unsigned char *nrole)
{
    unsigned char v = fr->vslot, c = *p;
    s->vtype = c;
    s->vstart = off_of(s, p);
    if (v < V__SINKS) {
        int num = v >= V_LREMAIN;
        if (num ? (c == '-' || is_digit(c)) : c == '"') {
            s->snk = &s->sk[v];
            s->snk->len = 0;
            s->snk->over = 0;
        }
        return KINF_OK;
    }
    switch (v) {
    case V_OBJECT:
    case V_ITEM:
        if (c != '{')
            return expect(s, p, v == V_OBJECT ? "'{' (the watch event's object)"
                                                : "'{' (a list item)");
        *nrole = R_OBJ;
        *cpp = p;
        s->cap = 1;
        s->cap_paused = 0;
        s->obuf_len = 0;
        s->obj_off = off_of(s, p);
        reset_object(s);
        if (v == V_ITEM) {
            s->val_active = 1;
            s->val_start = s->obj_off;
        }
        break;
    case V_METADATA:
        if (c == '{') {
            *nrole = R_META;
            s->meta_out_members = 0;
            s->strip_first_pending = 0;
        }
        break;
    case V_ANNOT:
        if (c == '{')
            *nrole = R_ANNOT;
        break;
    case V_LMETA:
        s->lmeta_done = 0;
        if (c == '{')
            *nrole = R_LMETA;
        break;
    case V_ITEMS:
        if (c == '[') {
            *nrole = R_ITEMS;
            s->has_items = 1;
            build_prefixes(s);
        } else if (c == 'n') {
            s->items_null = 1;
        }
        break;
    case V_SDETAILS:
        if (c == '{')
            *nrole = R_DETAILS;
        break;
    case V_SCAUSES:
        if (c == '[')
            *nrole = R_CAUSES;
        break;
    case V_CAUSE:
        if (c == '{')
            *nrole = R_CAUSE;
        break;
    default:
        break;
    }
    return KINF_OK;
}

/* A string slot that must not be truncated. */
static kinf_err meta_string(kinf_scanner *s, unsigned char v, const char *what)
{
    sink *k = &s->sk[v];
    if (s->vtype != '"') {
        k->len = 0;
        return KINF_OK;
    }
    if (k->over)
        return failf(s, KINF_ETOOBIG, s->vstart, "%s is longer than %zu bytes", what, k->cap);
    return KINF_OK;
}

/* The member value of fr ended; p is just past it. */
static kinf_err value_done_hook(kinf_scanner *s, frame *fr, const unsigned char *p,
                                const unsigned char **cpp)
{
    unsigned char v = fr->vslot;
    int t;
    fr->vslot = V_NONE;
    s->snk = NULL;
    if (fr->role == R_META && v != V_STRIP)
        s->meta_out_members++;
    switch (v) {
    case V_NONE:
        break;
    case V_TYPE:
        t = s->vtype == '"' ? ev_type_of(&s->sk[V_TYPE]) : -1;
        if (t < 0) {
            if (s->vtype != '"')
                return failf(s, KINF_EPARSE, s->vstart, "watch event \"type\" is not a string");
            return failf(s, KINF_EPARSE, s->vstart, "unknown watch event type \"%.*s%s\"",
                         (int)s->sk[V_TYPE].len, s->sk[V_TYPE].buf,
                         s->sk[V_TYPE].over ? "..." : "");
        }
        s->ev_type = t;
        s->have_type = 1;
        break;
    case V_OBJECT:
        s->have_object = 1;
        break;
    case V_KIND:
        s->has_kind = 1;
        return meta_string(s, v, "kind");
    case V_APIV:
        s->has_av = 1;
        return meta_string(s, v, "apiVersion");
    case V_NAME: return meta_string(s, v, "metadata.name");
    case V_NS: return meta_string(s, v, "metadata.namespace");
    case V_UID: return meta_string(s, v, "metadata.uid");
    case V_RV: return meta_string(s, v, "metadata.resourceVersion");
    case V_LKIND: return meta_string(s, v, "list kind");
    case V_LAPIV: return meta_string(s, v, "list apiVersion");
    case V_LRV: return meta_string(s, v, "list metadata.resourceVersion");
    case V_LCONT: return meta_string(s, v, "list metadata.continue");
    case V_IEE:
        s->iee = s->vtype == '"' && sink_eq(&s->sk[V_IEE], "true");
        break;
    case V_STRIP:
        if (s->meta_out_members)
            *cpp = p; /* resume right after the value: what follows is ',' or '}' */
        else
            s->strip_first_pending = 1; /* resume after the next ',' (or at '}') */
        break;
    case V_SREASON:
    case V_SMESSAGE:
        if (s->vtype != '"')
            s->sk[v].len = 0;
        break;
    case V_CREASON:
        if (s->vtype == '"' && sink_eq(&s->sk[v], "ResourceVersionTooLarge"))
            s->cause_rv = 1;
        break;
    case V_CMESSAGE:
        if (s->vtype == '"' && sink_eq(&s->sk[v], "Too large resource version"))
            s->cause_msg = 1;
        break;
    case V_LREMAIN:
    case V_SCODE:
    case V_SRETRY:
        if (s->vtype != '-' && !is_digit((unsigned char)s->vtype))
            s->sk[v].len = 0;
        break;
    default:
        break;
    }
    return KINF_OK;
}

/* ',' at p in a frame with a role. */
static void comma_hook(kinf_scanner *s, const unsigned char *p, const unsigned char **cpp)
{
    if (s->strip_first_pending) {
        s->strip_first_pending = 0;
        *cpp = p + 1; /* the comma after a stripped first member goes too */
    } else {
        s->mf_comma_vout = vout(s, p, *cpp);
    }
}

static kinf_err emit(kinf_scanner *s, kinf_event_type type, const unsigned char *json, size_t len,
                     int inj_kind)
{
    kinf_scan_item it;
    kinf_err e;
    const sink *k = &s->sk[V_KIND], *a = &s->sk[V_APIV];
    if (s->opt.on_item == NULL)
        return KINF_OK;
    it.type = type;
    it.json = (const char *)json;
    it.json_len = len;
    it.meta.namespace_.ptr = s->sk[V_NS].buf;
    it.meta.namespace_.len = s->sk[V_NS].len;
    it.meta.name.ptr = s->sk[V_NAME].buf;
    it.meta.name.len = s->sk[V_NAME].len;
    it.meta.uid.ptr = s->sk[V_UID].buf;
    it.meta.uid.len = s->sk[V_UID].len;
    it.meta.resource_version.ptr = s->sk[V_RV].buf;
    it.meta.resource_version.len = s->sk[V_RV].len;
    if (inj_kind & 1) {
        it.kind.ptr = s->sk[V_LKIND].buf;
        it.kind.len = s->sk[V_LKIND].len - 4;
    } else {
        it.kind.ptr = k->buf;
        it.kind.len = k->len;
    }
    if (inj_kind & 2)
        a = &s->sk[V_LAPIV];
    it.api_version.ptr = a->buf;
    it.api_version.len = a->len;
    it.initial_events_end = s->iee;
    it.offset = s->obj_off;
    s->in_cb = 1;
    e = s->opt.on_item(s->opt.ud, &it);
    s->in_cb = 0;
    if (e)
        return failf(s, e, s->obj_off, "the item callback failed (%s)", kinf_strerror(e));
    return KINF_OK;
}

/* The object that began at s->obj_off ended (p just past its '}'). */
static kinf_err object_done(kinf_scanner *s, const unsigned char *p, const unsigned char **cpp)
{
    const unsigned char *cp = *cpp;
    if (cp && s->obuf_len == 0) {
        s->out_ptr = cp;
        s->out_len = (size_t)(p - cp);
        s->out_direct = 1;
    } else {
        if (cp && obuf_add(s, cp, (size_t)(p - cp)))
            return s->err;
        s->out_ptr = NULL;
        s->out_len = s->obuf_len;
        s->out_direct = 0;
    }
    *cpp = NULL;
    s->cap = s->cap_paused = 0;
    return KINF_OK;
}

/* Copies an output still in the caller's chunk into obuf. */
static kinf_err materialize(kinf_scanner *s)
{
    const unsigned char *src = s->out_ptr;
    size_t n = s->out_len;
    s->out_direct = 0;
    s->obuf_len = 0;
    if (obuf_add(s, src, n))
        return s->err;
    s->out_ptr = NULL;
    return KINF_OK;
}

static kinf_err item_done(kinf_scanner *s)
{
    int need_kind = s->inj_kind && !s->has_kind, need_av = s->inj_av && !s->has_av;
    const unsigned char *json;
    size_t len;
    kinf_err e;
    if (need_kind || need_av) {
        unsigned char *dst;
        size_t plen = 1 + (need_kind ? s->pfx_kind_len : 0) + (need_kind && need_av) +
                      (need_av ? s->pfx_av_len : 0) + (s->obj_members ? 1 : 0);
        if (s->out_direct && materialize(s))
            return s->err;
        /* obase reserved room for the longest prefix: it ends where '{' was. */
        dst = s->obuf + s->obase + 1 - plen;
        json = dst;
        len = s->obuf_len + plen - 1;
        *dst++ = '{';
        if (need_kind) {
            memcpy(dst, s->pfx_kind, s->pfx_kind_len);
            dst += s->pfx_kind_len;
        }
        if (need_kind && need_av)
            *dst++ = ',';
        if (need_av) {
            memcpy(dst, s->pfx_av, s->pfx_av_len);
            dst += s->pfx_av_len;
        }
        if (s->obj_members)
            *dst++ = ',';
    } else {
        json = s->out_direct ? s->out_ptr : s->obuf + s->obase;
        len = s->out_len;
    }
    s->items++;
    e = emit(s, KINF_EV_LIST_ITEM, json, len, (need_kind ? 1 : 0) | (need_av ? 2 : 0));
    obuf_done(s);
    s->val_active = 0;
    return e;
}

/* A container with a role closed (f is the popped frame, p just past the bracket). */
static kinf_err pop_hook(kinf_scanner *s, const frame *f, const unsigned char *p,
                         const unsigned char **cpp)
{
    kinf_err e;
    switch (f->role) {
    case R_OBJ:
        if (object_done(s, p, cpp))
            return s->err;
        if (s->mode == KINF_SCAN_LIST)
            return item_done(s);
        return KINF_OK;
    case R_LMETA:
        s->lmeta_done = 1;
        return KINF_OK;
    case R_META:
        if (s->strip_first_pending) {
            s->strip_first_pending = 0;
            *cpp = p - 1; /* keep the '}' */
        }
        return KINF_OK;
    case R_ENVELOPE:
        if (!s->have_type)
            return failf(s, KINF_EPARSE, s->val_start, "watch event without \"type\"");
        if (!s->have_object)
            return failf(s, KINF_EPARSE, s->val_start, "watch event without \"object\"");
        e = emit(s, (kinf_event_type)s->ev_type,
                 s->out_direct ? s->out_ptr : s->obuf + s->obase, s->out_len, 0);
        obuf_done(s);
        s->val_active = 0;
        return e;
    default:
        return KINF_OK;
    }
}

/* ---- dropping a value: framed, not validated ---------------------------------------------- *
 *
 * A stripped metadata.managedFields array or object is about half of a pod's bytes, and its
 * fieldsV1 is the densest JSON an API server sends (a bracket every 9 bytes, escaped quotes in
 * every "k:{...}" key): validating it token by token cost more than the rest of the object.
 * Nothing of it is kept, so skip_value only frames it, 64 bytes at a time, from bitmaps: the
 * escaped bytes, the strings (a prefix XOR of the unescaped quotes) and the brackets outside
 * strings, whose count finds where the value ends. What it checks: strings end and hold no raw
 * control character; outside strings there is no backslash, no control character other than
 * whitespace, no byte >= 0x80; brackets nest no deeper than KINF_SCAN_MAX_DEPTH (counted, not
 * matched: "[}" closes). What it does not check is the grammar between those (a missing comma,
 * a bad number or escape, invalid UTF-8): such a value is dropped like a good one. The framing
 * is exact for valid JSON, and everything after the value is validated as usual.
 */
typedef struct skip_masks {
    uint64_t quote, bslash, open, close, low; /* low: bytes < 0x20 or >= 0x80 */
} skip_masks;

#if defined(__SSE2__) && defined(__GNUC__) && !defined(KINF_SCAN_SCALAR)
/* 16 bytes' worth of each mask, placed at bit 16 * k. */
#define SKIP_MASKS16(k)                                                                            \
    do {                                                                                           \
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(b + 16 * (k)));                \
        /* '[' | 0x20 == '{' and ']' | 0x20 == '}'; no other byte folds onto them */              \
        __m128i f = _mm_or_si128(x, v20);                                                          \
        quote |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vq)) << (16 * (k));      \
        bslash |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vb)) << (16 * (k));     \
        open |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(f, vo)) << (16 * (k));       \
        close |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(f, vc)) << (16 * (k));      \
        /* signed compare: < 0x20 holds for control bytes and for every byte >= 0x80 */          \
        low |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmplt_epi8(x, v20)) << (16 * (k));       \
    } while (0)
#endif

static inline void skip_masks_of(const unsigned char *b, skip_masks *m)
{
    uint64_t quote = 0, bslash = 0, open = 0, close = 0, low = 0;
#if defined(__SSE2__) && defined(__GNUC__) && !defined(KINF_SCAN_SCALAR)
    const __m128i vq = _mm_set1_epi8('"'), vb = _mm_set1_epi8('\\'), v20 = _mm_set1_epi8(0x20),
                  vo = _mm_set1_epi8('{'), vc = _mm_set1_epi8('}');
    SKIP_MASKS16(0);
    SKIP_MASKS16(1);
    SKIP_MASKS16(2);
    SKIP_MASKS16(3);
#else
    for (int i = 0; i < 64; i++) {
        unsigned char c = b[i];
        uint64_t bit = (uint64_t)1 << i;
        if (c == '"')
            quote |= bit;
        else if (c == '\\')
            bslash |= bit;
        else if (c == '{' || c == '[')
            open |= bit;
        else if (c == '}' || c == ']')
            close |= bit;
        else if (c < 0x20 || c >= 0x80)
            low |= bit;
    }
#endif
    m->quote = quote;
    m->bslash = bslash;
    m->open = open;
    m->close = close;
    m->low = low;
}

/* Bit i set when an odd number of bits at or below i are set in x. */
static inline uint64_t prefix_xor(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/*
 * The escaped bytes of a block: those right after an odd-length run of backslashes. `carry`
 * says whether the block's byte 0 is escaped (a run that ended the previous block) and is set
 * to the same for the next block. Branch-free: subtracting each run's first backslash from the
 * odd bit positions lets the borrow ripple through the run, and the parity of where it stops
 * is the parity of the run's length.
 */
static inline uint64_t skip_escaped(uint64_t bslash, unsigned *carry)
{
    const uint64_t odd = 0xAAAAAAAAAAAAAAAAull;
    uint64_t in = *carry, escapes = bslash & ~in, code;
    code = (((escapes << 1) | odd) - escapes) ^ odd;
    *carry = (unsigned)((code & bslash) >> 63);
    return code ^ (bslash | in);
}

static inline unsigned popcount64(uint64_t x)
{
#if defined(__POPCNT__)
    return (unsigned)__builtin_popcountll(x);
#else
    /* the x86-64 baseline has no popcnt instruction, and libgcc's is a call */
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
#endif
}

/* The bytes of `low` (< 0x20 or >= 0x80) that are not allowed where they stand. Rare: compact
 * JSON has none outside strings, and only non-ASCII text inside them. */
static uint64_t skip_bad_low(const unsigned char *b, uint64_t low, uint64_t instr)
{
    uint64_t bad = 0;
    while (low) {
        unsigned i = (unsigned)__builtin_ctzll(low);
        uint64_t bit = low & (0 - low);
        unsigned char c = b[i];
        low &= low - 1;
        if (instr & bit) {
            if (c < 0x20)
                bad |= bit;
        } else if (c >= 0x80 || (c != '\t' && c != '\n' && c != '\r')) {
            bad |= bit;
        }
    }
    return bad;
}

/* Fails at the first bad byte of `bad` (in block b, which starts at stream offset off). */
static kinf_err skip_fail(kinf_scanner *s, const unsigned char *b, uint64_t bad, uint64_t instr,
                          uint64_t off)
{
    unsigned i = (unsigned)__builtin_ctzll(bad);
    unsigned char c = b[i];
    off += i;
    if ((instr >> i) & 1)
        return failf(s, KINF_EPARSE, off,
                     "raw control character 0x%02x in string (must be escaped) in "
                     "metadata.managedFields", c);
    if (c == '\\')
        return failf(s, KINF_EPARSE, off, "'\\' outside a string in metadata.managedFields");
    return failf(s, KINF_EPARSE, off, "unexpected byte 0x%02x in metadata.managedFields", c);
}

/*
 * Skips the array or object that starts at *pp (first call: *pp at its '[' or '{', skip state
 * zeroed), stopping at end. Returns 1 with *pp just past the value, 0 with *pp == end when the
 * input ran out first (the state is kept in s for the next chunk), -1 after failf.
 */
static int skip_value(kinf_scanner *s, const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *p = *pp;
    unsigned char tmp[64];

    while (p < end) {
        size_t nvalid = (size_t)(end - p) < 64 ? (size_t)(end - p) : 64;
        const unsigned char *b = p;
        uint64_t valid = nvalid == 64 ? ~(uint64_t)0 : ((uint64_t)1 << nvalid) - 1;
        uint64_t esc, instr, open, close, bad, done = 0;
        unsigned esc_out = s->skip_esc;
        skip_masks m;

        if (nvalid < 64) { /* pad with spaces, which are nothing to the masks */
            memcpy(tmp, p, nvalid);
            memset(tmp + nvalid, ' ', 64 - nvalid);
            b = tmp;
        }
        skip_masks_of(b, &m);
        esc = skip_escaped(m.bslash, &esc_out);
        instr = prefix_xor(m.quote & ~esc) ^ (s->skip_instr ? ~(uint64_t)0 : 0);
        open = m.open & ~instr & valid;
        close = m.close & ~instr & valid;
        bad = m.bslash & ~instr;
        if (m.low & valid)
            bad |= skip_bad_low(b, m.low & valid, instr);

        if (s->depth + s->skip_depth + 64 <= KINF_SCAN_MAX_DEPTH) {
            /* The limit is out of reach in this block. The depth can reach zero only if the
             * block has that many closing brackets; then follow it, without a branch on the
             * kind of bracket, to where it does. */
            unsigned d = s->skip_depth, nclose = popcount64(close);
            if (nclose < d) {
                d = d + popcount64(open) - nclose;
            } else {
                for (uint64_t br = open | close; br; br &= br - 1) {
                    uint64_t bit = br & (0 - br);
                    d += (open & bit) ? 1u : (unsigned)-1;
                    if (d == 0) {
                        done = bit;
                        break;
                    }
                }
            }
            s->skip_depth = d;
        } else {
            for (uint64_t br = open | close; br; br &= br - 1) {
                uint64_t bit = br & (0 - br);
                if (open & bit) {
                    if (s->depth + ++s->skip_depth > KINF_SCAN_MAX_DEPTH) {
                        if (bad & (bit - 1))
                            break; /* an earlier error wins */
                        failf(s, KINF_EPARSE,
                              s->off + (uint64_t)(p - s->chunk) + (uint64_t)__builtin_ctzll(bit),
                              "nesting deeper than %d levels", KINF_SCAN_MAX_DEPTH);
                        return -1;
                    }
                } else if (--s->skip_depth == 0) {
                    done = bit;
                    break;
                }
            }
        }
        if (done)
            bad &= done | (done - 1);
        if (bad & valid) {
            skip_fail(s, b, bad & valid, instr, s->off + (uint64_t)(p - s->chunk));
            return -1;
        }
        if (done) {
            *pp = p + __builtin_ctzll(done) + 1;
            return 1;
        }
        s->skip_instr = (unsigned char)((instr >> (nvalid - 1)) & 1);
        s->skip_esc = (unsigned char)(nvalid == 64 ? esc_out : (esc >> nvalid) & 1);
        p += nvalid;
    }
    *pp = p;
    return 0;
}

/* ---- the scanner ------------------------------------------------------- */

/* Where scan() stands in the chunk. It lives in registers only while its address never leaves
 * scan() and the state functions inlined into it: the helpers they call get copies of its
 * fields, never &cur->x (one such address puts the whole cursor in memory). */
typedef struct cursor {
    const unsigned char *p;        /* the next byte */
    const unsigned char *end;      /* the chunk's end, or where the value in flight exceeds max */
    const unsigned char *real_end; /* the chunk's end */
    const unsigned char *cp;       /* first byte not yet copied to the output; NULL: not copying */
    const unsigned char *q;        /* first byte of the number not yet in s->snk */
    frame *fr;                     /* the innermost open container; NULL between values */
} cursor;

/* What a state function returns besides the next state: a step of scan()'s own. The value and
 * the container that ended are steps, not part of every state that can end them, so that their
 * hooks are inlined once. */
enum {
    STEP_VALUE_DONE = ST_FAILED + 1, /* a value ended: value_done() */
    STEP_POP,                        /* a closing bracket was consumed: pop() */
    STEP_PAUSE,                      /* the chunk ran out; s->state says where to resume */
    STEP_FAIL                        /* failf was called */
};

/*
 * Every state function must be inlined into scan(): only then does the cursor stay in registers,
 * and each constant `return ST_X` fold, in the switch after the call (GO in scan()), into a
 * direct jump to ST_X's code. Left to itself, GCC 12 at -O2 keeps st_string and st_number
 * (inlined at several places) out of line; the cursor's address then leaves scan(), the cursor
 * lives in memory and scanning costs about 45% more instructions. Hence always_inline.
 * The register allocation of the inlined whole is touchy: edits that change no behaviour here
 * (dropping a local copy of cur->fr, say) have moved the instruction count by up to 4%, so
 * count instructions (callgrind on build/bench/jsonscan_bench) after editing a state function.
 */
#if defined(__GNUC__)
#define STATE static inline __attribute__((always_inline)) int
#else
#define STATE static inline int
#endif

static int paused(kinf_scanner *s, int state)
{
    s->state = state;
    return STEP_PAUSE;
}

static int failed_expect(kinf_scanner *s, const unsigned char *p, const char *what)
{
    expect(s, p, what);
    return STEP_FAIL;
}

static inline void skip_ws(cursor *cur)
{
    while (cur->p < cur->end && is_ws(*cur->p))
        cur->p++;
}

/* Opens a container at cur->p (its bracket); 0 after failf when nesting is too deep. */
static inline int push(kinf_scanner *s, cursor *cur, unsigned char is_obj, unsigned char role)
{
    if (s->depth == KINF_SCAN_MAX_DEPTH) {
        failf(s, KINF_EPARSE, off_of(s, cur->p), "nesting deeper than %d levels",
              KINF_SCAN_MAX_DEPTH);
        return 0;
    }
    cur->fr = &s->stk[s->depth++];
    cur->fr->is_obj = is_obj;
    cur->fr->role = role;
    cur->fr->vslot = V_NONE;
    return 1;
}

/* A value just ended (cur->p is past it): tell its container, go on after it. */
STATE value_done(kinf_scanner *s, cursor *cur)
{
    if (cur->fr->role) {
        const unsigned char *cp = cur->cp;
        if (value_done_hook(s, cur->fr, cur->p, &cp))
            return STEP_FAIL;
        cur->cp = cp;
    }
    return ST_AFTER;
}

/* A key just ended (cur->p is past its closing quote): tell its object, go on to the ':'. */
STATE key_done(kinf_scanner *s, cursor *cur)
{
    if (cur->fr->role) {
        const unsigned char *cp = cur->cp;
        if (key_done_hook(s, cur->fr, cur->p, &cp))
            return STEP_FAIL;
        cur->cp = cp;
    }
    return ST_COLON;
}

/* The bracket before cur->p closed the innermost container: drop its frame. */
STATE pop(kinf_scanner *s, cursor *cur)
{
    frame f = *cur->fr;
    unsigned depth = --s->depth;
    cur->fr = depth ? &s->stk[depth - 1] : NULL;
    if (f.role) {
        const unsigned char *cp = cur->cp;
        if (pop_hook(s, &f, cur->p, &cp))
            return STEP_FAIL;
        cur->cp = cp;
        if (!s->val_active)
            cur->end = cur->real_end;
    }
    if (depth)
        return STEP_VALUE_DONE;
    return s->mode == KINF_SCAN_WATCH ? ST_TOP : ST_END;
}

/* ST_TOP: whitespace, then the '{' that opens a watch event or the list body. */
STATE st_top(kinf_scanner *s, cursor *cur)
{
    const unsigned char *p;
    skip_ws(cur);
    if (cur->p == cur->end)
        return paused(s, ST_TOP);
    p = cur->p;
    if (*p != '{')
        return failed_expect(s, p, s->mode == KINF_SCAN_WATCH
                                       ? "'{' (the start of a watch event)"
                                       : "'{' (the start of the list body)");
    s->seen_top = 1;
    if (s->mode == KINF_SCAN_WATCH) {
        if (!push(s, cur, 1, R_ENVELOPE))
            return STEP_FAIL;
        s->have_type = s->have_object = 0;
        s->val_active = 1;
        s->val_start = off_of(s, p);
        s->obj_off = s->val_start;
        reset_object(s);
        if ((size_t)(cur->real_end - p) > s->max)
            cur->end = p + s->max;
    } else if (!push(s, cur, 1, R_LIST)) {
        return STEP_FAIL;
    }
    cur->p = p + 1;
    return ST_OBJ_OPEN;
}

/* ST_VALUE: whitespace, then the first byte of a value, which picks the state to go on in. */
STATE st_value(kinf_scanner *s, cursor *cur)
{
    const unsigned char *p;
    unsigned char c, nrole = R_NONE;
    frame *fr = cur->fr;
    if (cur->p == cur->end)
        return paused(s, ST_VALUE);
    c = *cur->p;
    if (is_ws(c)) {
        skip_ws(cur);
        if (cur->p == cur->end)
            return paused(s, ST_VALUE);
        c = *cur->p;
    }
    p = cur->p;
    if (fr->vslot) {
        const unsigned char *cp = cur->cp;
        if (value_begin_hook(s, fr, p, &cp, &nrole))
            return STEP_FAIL;
        cur->cp = cp;
        if (nrole == R_OBJ && s->mode == KINF_SCAN_LIST && (size_t)(cur->real_end - p) > s->max)
            cur->end = p + s->max;
        if (fr->vslot == V_STRIP && (c == '[' || c == '{')) {
            s->skip_depth = 0;
            s->skip_instr = s->skip_esc = 0;
            return ST_SKIP;
        }
    }
    if (c == '"') { /* the most common value first */
        cur->p = p + 1;
        return ST_STR;
    }
    if (c == '{') {
        /* "{}" is everywhere in managedFields' fieldsV1: no frame for it */
        if (cur->end - p >= 2 && p[1] == '}' && nrole == R_NONE &&
            s->depth < KINF_SCAN_MAX_DEPTH) {
            cur->p = p + 2;
            return STEP_VALUE_DONE;
        }
        if (!push(s, cur, 1, nrole))
            return STEP_FAIL;
        cur->p = p + 1;
        return ST_OBJ_OPEN;
    }
    switch (c) {
    case '[':
        if (!push(s, cur, 0, nrole))
            return STEP_FAIL;
        cur->p = p + 1;
        return ST_ARR_OPEN;
    case '-':
        cur->q = p;
        cur->p = p + 1;
        return ST_NUM_MINUS;
    case '0':
        cur->q = p;
        cur->p = p + 1;
        return ST_NUM_ZERO;
    case 't':
    case 'f':
    case 'n':
        s->lit = c;
        s->carry_len = 0;
        return ST_LIT;
    default:
        if (is_digit(c)) {
            cur->q = p;
            cur->p = p + 1;
            return ST_NUM_INT;
        }
        return failed_expect(s, p, "a value");
    }
}

/* Structural states test for the expected byte first and skip whitespace only when the byte
 * is not it: compact JSON (what API servers send) never pays for whitespace. */

/* At a key's opening quote (cur->p). */
STATE key_start(kinf_scanner *s, cursor *cur)
{
    if (cur->fr->role)
        key_start_hook(s, cur->fr, cur->p, cur->cp);
    cur->p++;
    return ST_KEY;
}

/* ST_OBJ_OPEN: whitespace, then '}' or the opening quote of the first key. */
STATE st_obj_open(kinf_scanner *s, cursor *cur)
{
    for (;;) {
        unsigned char c;
        if (cur->p == cur->end)
            return paused(s, ST_OBJ_OPEN);
        c = *cur->p;
        if (c == '"')
            return key_start(s, cur);
        if (c == '}') {
            cur->p++;
            return STEP_POP;
        }
        if (!is_ws(c))
            return failed_expect(s, cur->p, "'\"' (an object key) or '}'");
        skip_ws(cur);
    }
}

/* ST_OBJ_NEXT: whitespace, then the opening quote of the key after a ','. */
STATE st_obj_next(kinf_scanner *s, cursor *cur)
{
    for (;;) {
        unsigned char c;
        if (cur->p == cur->end)
            return paused(s, ST_OBJ_NEXT);
        c = *cur->p;
        if (c == '"')
            return key_start(s, cur);
        if (!is_ws(c))
            return failed_expect(s, cur->p, "'\"' (an object key)");
        skip_ws(cur);
    }
}

/* ST_COLON: whitespace, then the ':' after a key. */
STATE st_colon(kinf_scanner *s, cursor *cur)
{
    for (;;) {
        unsigned char c;
        if (cur->p == cur->end)
            return paused(s, ST_COLON);
        c = *cur->p;
        if (c == ':') {
            cur->p++;
            return ST_VALUE;
        }
        if (!is_ws(c))
            return failed_expect(s, cur->p, "':' after an object key");
        skip_ws(cur);
    }
}

/* ST_ARR_OPEN: whitespace, then ']' or (left to ST_VALUE) the first element. */
STATE st_arr_open(kinf_scanner *s, cursor *cur)
{
    for (;;) {
        unsigned char c;
        if (cur->p == cur->end)
            return paused(s, ST_ARR_OPEN);
        c = *cur->p;
        if (c == ']') {
            cur->p++;
            return STEP_POP;
        }
        if (!is_ws(c))
            break;
        skip_ws(cur);
    }
    if (cur->fr->role == R_ITEMS)
        cur->fr->vslot = V_ITEM;
    else if (cur->fr->role == R_CAUSES)
        cur->fr->vslot = V_CAUSE;
    return ST_VALUE;
}

/* ST_AFTER: whitespace, then the ',' or the closing bracket after a container's member. */
STATE st_after(kinf_scanner *s, cursor *cur)
{
    frame *fr = cur->fr;
    for (;;) {
        unsigned char c;
        if (cur->p == cur->end)
            return paused(s, ST_AFTER);
        c = *cur->p;
        if (c == ',') {
            if (fr->role == R_META) {
                const unsigned char *cp = cur->cp;
                comma_hook(s, cur->p, &cp);
                cur->cp = cp;
            }
            cur->p++;
            if (fr->is_obj)
                return ST_OBJ_NEXT;
            if (fr->role == R_ITEMS)
                fr->vslot = V_ITEM;
            else if (fr->role == R_CAUSES)
                fr->vslot = V_CAUSE;
            return ST_VALUE;
        }
        if (c == (fr->is_obj ? '}' : ']')) {
            cur->p++;
            return STEP_POP;
        }
        if (!is_ws(c))
            return failed_expect(s, cur->p, fr->is_obj ? "',' or '}'" : "',' or ']'");
        skip_ws(cur);
    }
}

/* The first byte in [p, end) that ends a fast run inside a string ('"', '\\', a control byte,
 * a byte >= 0x80), or end. */
static inline const unsigned char *str_run(const unsigned char *p, const unsigned char *end)
{
#if defined(__SSE2__) && defined(__GNUC__)
    const __m128i vq = _mm_set1_epi8('"'), vb = _mm_set1_epi8('\\'), vc = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* signed compare: < 0x20 catches control bytes and every byte >= 0x80 */
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(x, vq), _mm_cmpeq_epi8(x, vb)), _mm_cmplt_epi8(x, vc)));
        if (mask)
            return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    while (p < end && !str_special_tab[*p])
        p++;
    return p;
}

/* ST_KEY (key = 1) and ST_STR: the rest of a key or of a string value, up to and including its
 * closing quote. One copy for each (key is a constant), so the quote goes straight on. */
STATE st_string(kinf_scanner *s, cursor *cur, int key)
{
    const unsigned char *p = cur->p, *end = cur->end, *q = p;
    unsigned char c, u[4];
    int n, ul;
    for (;;) {
        p = str_run(p, end);
        if (p == end) {
            if (s->snk)
                sink_add(s->snk, q, (size_t)(p - q));
            cur->p = p;
            return paused(s, key ? ST_KEY : ST_STR);
        }
        c = *p;
        if (c == '"') {
            if (s->snk)
                sink_add(s->snk, q, (size_t)(p - q));
            cur->p = p + 1;
            return key ? key_done(s, cur) : STEP_VALUE_DONE;
        }
        if (c == '\\') {
            /* \" \\ \/ \n ... when nothing is captured: stay in the run */
            if (s->snk == NULL && end - p >= 2 && esc_simple(p[1])) {
                p += 2;
                continue;
            }
            if (s->snk)
                sink_add(s->snk, q, (size_t)(p - q));
            n = esc_decode(p, end, u, &ul);
            if (n > 0) {
                if (s->snk)
                    sink_add(s->snk, u, (size_t)ul);
                p += n;
                q = p;
                continue;
            }
            if (n < 0) {
                failf(s, KINF_EPARSE, off_of(s, p), "bad escape in string: expected %s",
                      esc_error(n));
                return STEP_FAIL;
            }
            s->carry_len = (unsigned)(end - p);
            memcpy(s->carry, p, s->carry_len);
            s->str_key = key;
            cur->p = end;
            return paused(s, ST_STR_ESC);
        }
        if (c < 0x20) {
            failf(s, KINF_EPARSE, off_of(s, p),
                  "raw control character 0x%02x in string (must be escaped)", c);
            return STEP_FAIL;
        }
        n = utf8_seq(p, end);
        if (n > 0) {
            p += n;
            continue;
        }
        if (n < 0) {
            failf(s, KINF_EPARSE, off_of(s, p), "invalid UTF-8 in string (byte 0x%02x)", c);
            return STEP_FAIL;
        }
        if (s->snk)
            sink_add(s->snk, q, (size_t)(p - q));
        s->carry_len = (unsigned)(end - p);
        memcpy(s->carry, p, s->carry_len);
        s->str_key = key;
        cur->p = end;
        return paused(s, ST_STR_U8);
    }
}

/* ST_STR_ESC: the rest of an escape sequence that a chunk boundary split (begun in s->carry). */
STATE st_str_esc(kinf_scanner *s, cursor *cur)
{
    unsigned char u[4];
    int n, ul;
    while (cur->p < cur->end) {
        s->carry[s->carry_len++] = *cur->p++;
        n = esc_decode(s->carry, s->carry + s->carry_len, u, &ul);
        if (n > 0) {
            if (s->snk)
                sink_add(s->snk, u, (size_t)ul);
            return s->str_key ? ST_KEY : ST_STR;
        }
        if (n < 0) {
            failf(s, KINF_EPARSE, off_of(s, cur->p) - s->carry_len,
                  "bad escape in string: expected %s", esc_error(n));
            return STEP_FAIL;
        }
    }
    return paused(s, ST_STR_ESC);
}

/* ST_STR_U8: the rest of a UTF-8 sequence that a chunk boundary split (begun in s->carry). */
STATE st_str_u8(kinf_scanner *s, cursor *cur)
{
    int n;
    while (cur->p < cur->end) {
        s->carry[s->carry_len++] = *cur->p++;
        n = utf8_seq(s->carry, s->carry + s->carry_len);
        if (n > 0) {
            if (s->snk)
                sink_add(s->snk, s->carry, s->carry_len);
            return s->str_key ? ST_KEY : ST_STR;
        }
        if (n < 0) {
            failf(s, KINF_EPARSE, off_of(s, cur->p) - s->carry_len,
                  "invalid UTF-8 in string (byte 0x%02x)", s->carry[0]);
            return STEP_FAIL;
        }
    }
    return paused(s, ST_STR_U8);
}

/* ST_NUM_*: the rest of a number; `state` names what was read last. The number's bytes from
 * cur->q go to s->snk when it ends or the chunk does. A small DFA, so written as one. */
STATE st_number(kinf_scanner *s, cursor *cur, int state)
{
    const unsigned char *p = cur->p, *end = cur->end;
    unsigned char c;

#define NUM_NEED(st)                                                                               \
    do {                                                                                           \
        if (p == end) {                                                                            \
            state = (st);                                                                          \
            goto chunk_end;                                                                        \
        }                                                                                          \
    } while (0)

    switch (state) {
    case ST_NUM_MINUS: goto minus;
    case ST_NUM_ZERO: goto zero;
    case ST_NUM_INT: goto integer;
    case ST_NUM_DOT: goto dot;
    case ST_NUM_FRAC: goto frac;
    case ST_NUM_E: goto e;
    case ST_NUM_ESIGN: goto esign;
    default: goto exp;
    }
minus:
    NUM_NEED(ST_NUM_MINUS);
    c = *p;
    if (c == '0') {
        p++;
        goto zero;
    }
    if (!is_digit(c))
        return failed_expect(s, p, "a digit after '-'");
    p++;
integer:
    while (p < end && is_digit(*p))
        p++;
    NUM_NEED(ST_NUM_INT);
    /* fall through to what may follow the integer part */
zero:
    NUM_NEED(ST_NUM_ZERO);
    c = *p;
    if (c == '.') {
        p++;
        goto dot;
    }
    if ((c | 0x20) == 'e') {
        p++;
        goto e;
    }
    goto done;
dot:
    NUM_NEED(ST_NUM_DOT);
    if (!is_digit(*p))
        return failed_expect(s, p, "a digit after '.'");
    p++;
frac:
    while (p < end && is_digit(*p))
        p++;
    NUM_NEED(ST_NUM_FRAC);
    if ((*p | 0x20) == 'e') {
        p++;
        goto e;
    }
    goto done;
e:
    NUM_NEED(ST_NUM_E);
    c = *p;
    if (c == '+' || c == '-') {
        p++;
        goto esign;
    }
    if (!is_digit(c))
        return failed_expect(s, p, "a digit or sign in the exponent");
    p++;
    goto exp;
esign:
    NUM_NEED(ST_NUM_ESIGN);
    if (!is_digit(*p))
        return failed_expect(s, p, "a digit in the exponent");
    p++;
exp:
    while (p < end && is_digit(*p))
        p++;
    NUM_NEED(ST_NUM_EXP);
done:
    if (s->snk)
        sink_add(s->snk, cur->q, (size_t)(p - cur->q));
    cur->p = p;
    return STEP_VALUE_DONE;
chunk_end:
    if (s->snk)
        sink_add(s->snk, cur->q, (size_t)(p - cur->q));
    cur->p = p;
    return paused(s, state);
#undef NUM_NEED
}

/* ST_LIT: the rest of true, false or null (s->lit is its first letter, s->carry_len how many
 * letters are read). */
STATE st_lit(kinf_scanner *s, cursor *cur)
{
    const char *w = s->lit == 't' ? "true" : s->lit == 'f' ? "false" : "null";
    unsigned wl = s->lit == 'f' ? 5 : 4;
    while (s->carry_len < wl) {
        if (cur->p == cur->end)
            return paused(s, ST_LIT);
        if (*cur->p != (unsigned char)w[s->carry_len]) {
            if (s->carry_len == 0)
                return failed_expect(s, cur->p, "a value");
            failf(s, KINF_EPARSE, off_of(s, cur->p), "expected '%s'", w);
            return STEP_FAIL;
        }
        s->carry_len++;
        cur->p++;
    }
    return STEP_VALUE_DONE;
}

/* ST_SKIP: the rest of a dropped metadata.managedFields array or object (skip_value). */
STATE st_skip(kinf_scanner *s, cursor *cur)
{
    const unsigned char *p = cur->p;
    int n = skip_value(s, &p, cur->end);
    cur->p = p;
    if (n < 0)
        return STEP_FAIL;
    if (n == 0)
        return paused(s, ST_SKIP);
    return STEP_VALUE_DONE;
}

/* ST_END (list mode, after the body): whitespace only. */
STATE st_end(kinf_scanner *s, cursor *cur)
{
    skip_ws(cur);
    if (cur->p == cur->end)
        return paused(s, ST_END);
    return failed_expect(s, cur->p, "the end of the body after the list object");
}

/* The chunk ran out (cur->p == cur->end): enforce the size limit, keep what the output needs
 * (the caller's chunk is gone after this call). */
static kinf_err chunk_done(kinf_scanner *s, const cursor *cur, size_t len)
{
    if (cur->end != cur->real_end) {
        failf(s, KINF_ETOOBIG, s->val_start, "%s is larger than max_object_bytes (%zu)",
              s->mode == KINF_SCAN_WATCH ? "watch event" : "list item", s->max);
        return s->err;
    }
    if (s->cap) {
        if (cur->cp) {
            if (obuf_add(s, cur->cp, (size_t)(cur->end - cur->cp)))
                return s->err;
            s->cap_paused = 0;
        } else {
            s->cap_paused = 1;
        }
    }
    if (s->out_direct && materialize(s))
        return s->err;
    s->off += len;
    return KINF_OK;
}

static kinf_err scan(kinf_scanner *s, const unsigned char *buf, size_t len)
{
    cursor cur;

    cur.p = cur.q = buf;
    cur.end = cur.real_end = buf + len;
    cur.cp = s->cap && !s->cap_paused ? buf : NULL;
    cur.fr = s->depth ? &s->stk[s->depth - 1] : NULL;
    s->chunk = buf;
    if (s->val_active && s->val_start + s->max < s->off + len)
        cur.end = buf + (s->val_start + s->max - s->off);

    /* GO(call) runs a state function and jumps to the state it returns. Each call has a switch
     * of its own rather than all sharing one in a loop: the constant a state function returns
     * then folds into a direct jump with clang too (GCC threads a shared switch, clang 14 does
     * not, which costs 35-47% more instructions). */
#define GO(call)                                                                                   \
    do {                                                                                           \
        switch (call) {                                                                            \
        case ST_TOP: goto top;                                                                     \
        case ST_VALUE: goto value;                                                                 \
        case ST_OBJ_OPEN: goto obj_open;                                                           \
        case ST_OBJ_NEXT: goto obj_next;                                                           \
        case ST_COLON: goto colon;                                                                 \
        case ST_AFTER: goto after;                                                                 \
        case ST_ARR_OPEN: goto arr_open;                                                           \
        case ST_KEY: goto key;                                                                     \
        case ST_STR: goto str;                                                                     \
        case ST_STR_ESC: goto str_esc;                                                             \
        case ST_STR_U8: goto str_u8;                                                               \
        case ST_NUM_MINUS: goto num_minus;                                                         \
        case ST_NUM_ZERO: goto num_zero;                                                           \
        case ST_NUM_INT: goto num_int;                                                             \
        case ST_NUM_DOT: goto num_dot;                                                             \
        case ST_NUM_FRAC: goto num_frac;                                                           \
        case ST_NUM_E: goto num_e;                                                                 \
        case ST_NUM_ESIGN: goto num_esign;                                                         \
        case ST_NUM_EXP: goto num_exp;                                                             \
        case ST_LIT: goto lit;                                                                     \
        case ST_SKIP: goto skip;                                                                   \
        case ST_END: goto end;                                                                     \
        case STEP_VALUE_DONE: goto value_done;                                                     \
        case STEP_POP: goto pop;                                                                   \
        case STEP_PAUSE: goto pause;                                                               \
        case STEP_FAIL: goto fail;                                                                 \
        default: return s->err ? s->err : KINF_EINVAL; /* ST_FAILED */                             \
        }                                                                                          \
    } while (0)

    GO(s->state);
top:        GO(st_top(s, &cur));
value:      GO(st_value(s, &cur));
obj_open:   GO(st_obj_open(s, &cur));
obj_next:   GO(st_obj_next(s, &cur));
colon:      GO(st_colon(s, &cur));
after:      GO(st_after(s, &cur));
arr_open:   GO(st_arr_open(s, &cur));
key:        GO(st_string(s, &cur, 1));
str:        GO(st_string(s, &cur, 0));
str_esc:    GO(st_str_esc(s, &cur));
str_u8:     GO(st_str_u8(s, &cur));
num_minus:  GO(st_number(s, &cur, ST_NUM_MINUS));
num_zero:   GO(st_number(s, &cur, ST_NUM_ZERO));
num_int:    GO(st_number(s, &cur, ST_NUM_INT));
num_dot:    GO(st_number(s, &cur, ST_NUM_DOT));
num_frac:   GO(st_number(s, &cur, ST_NUM_FRAC));
num_e:      GO(st_number(s, &cur, ST_NUM_E));
num_esign:  GO(st_number(s, &cur, ST_NUM_ESIGN));
num_exp:    GO(st_number(s, &cur, ST_NUM_EXP));
lit:        GO(st_lit(s, &cur));
skip:       GO(st_skip(s, &cur));
end:        GO(st_end(s, &cur));
value_done: GO(value_done(s, &cur));
pop:        GO(pop(s, &cur));
pause:
    if (chunk_done(s, &cur, len) == KINF_OK)
        return KINF_OK;
    /* fall through: chunk_done failed */
fail:
    s->state = ST_FAILED;
    return s->err;
#undef GO
}

#undef STATE

/* ---- public API ---------------------------------------------------------- */

static void init_sinks(kinf_scanner *s)
{
    struct {
        int v;
        char *buf;
        size_t cap;
    } map[] = {
        {V_TYPE, s->b_type, sizeof s->b_type},
        {V_KIND, s->b_kind, sizeof s->b_kind},
        {V_APIV, s->b_apiv, sizeof s->b_apiv},
        {V_NAME, s->b_name, sizeof s->b_name},
        {V_NS, s->b_ns, sizeof s->b_ns},
        {V_UID, s->b_uid, sizeof s->b_uid},
        {V_RV, s->b_rv, sizeof s->b_rv},
        {V_IEE, s->b_iee, sizeof s->b_iee},
        {V_LKIND, s->b_lkind, sizeof s->b_lkind},
        {V_LAPIV, s->b_lapiv, sizeof s->b_lapiv},
        {V_LRV, s->b_lrv, sizeof s->b_lrv},
        {V_LCONT, s->b_lcont, sizeof s->b_lcont},
        {V_SREASON, s->b_sreason, sizeof s->b_sreason},
        {V_SMESSAGE, s->b_smessage, sizeof s->b_smessage},
        {V_CREASON, s->b_creason, sizeof s->b_creason},
        {V_CMESSAGE, s->b_cmessage, sizeof s->b_cmessage},
        {V_LREMAIN, s->b_lremain, sizeof s->b_lremain},
        {V_SCODE, s->b_scode, sizeof s->b_scode},
        {V_SRETRY, s->b_sretry, sizeof s->b_sretry},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        s->sk[map[i].v].buf = map[i].buf;
        s->sk[map[i].v].cap = map[i].cap;
    }
    s->sk[V_NONE].buf = s->b_type; /* never written: V_NONE has no sink */
    s->key.buf = s->b_key;
    s->key.cap = sizeof s->b_key;
}

void kinf_scanner_reset(kinf_scanner *s, kinf_scan_mode mode)
{
    if (s == NULL || s->in_cb)
        return;
    s->mode = mode;
    s->err = KINF_OK;
    s->errmsg[0] = '\0';
    s->finished = s->seen_top = 0;
    s->off = 0;
    s->chunk = NULL;
    s->state = ST_TOP;
    s->snk = NULL;
    s->carry_len = 0;
    s->depth = 0;
    s->val_active = 0;
    s->val_start = 0;
    s->cap = s->cap_paused = 0;
    s->obase = 0;
    obuf_done(s);
    s->have_type = s->have_object = 0;
    s->items = 0;
    s->has_items = 0;
    s->items_null = 0;
    s->lmeta_done = 0;
    s->inj_kind = s->inj_av = 0;
    s->cause_rv = s->cause_msg = 0;
    s->strip_first_pending = 0;
    for (int i = 0; i < V__SINKS; i++) {
        s->sk[i].len = 0;
        s->sk[i].over = 0;
    }
    reset_object(s);
}

kinf_scanner *kinf_scanner_new(kinf_scan_mode mode, const kinf_scan_options *opts, kinf_err *err)
{
    kinf_scanner *s;
    kinf_err dummy;
    if (err == NULL)
        err = &dummy;
    if ((mode != KINF_SCAN_WATCH && mode != KINF_SCAN_LIST) ||
        (opts && (opts->flags & ~(KINF_SCAN_STRIP_MANAGED_FIELDS | KINF_SCAN_INJECT_KIND)))) {
        *err = KINF_EINVAL;
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        *err = KINF_ENOMEM;
        return NULL;
    }
    if (opts)
        s->opt = *opts;
    s->max = s->opt.max_object_bytes ? s->opt.max_object_bytes : KINF_SCAN_DEFAULT_MAX_OBJECT;
    s->strip = (s->opt.flags & KINF_SCAN_STRIP_MANAGED_FIELDS) != 0;
    s->inject = (s->opt.flags & KINF_SCAN_INJECT_KIND) != 0;
    init_sinks(s);
    kinf_scanner_reset(s, mode);
    *err = KINF_OK;
    return s;
}

void kinf_scanner_free(kinf_scanner *s)
{
    if (s == NULL)
        return;
    free(s->obuf);
    free(s);
}

int kinf_scanner_list_continue(const kinf_scanner *s, kinf_str *out)
{
    const sink *k = &s->sk[V_LCONT];
    if (s->mode != KINF_SCAN_LIST || !s->lmeta_done || s->err != KINF_OK || k->over ||
        k->len == 0)
        return 0;
    out->ptr = k->buf;
    out->len = k->len;
    return 1;
}

const char *kinf_scanner_error(const kinf_scanner *s)
{
    return s ? s->errmsg : "";
}

kinf_err kinf_scanner_feed(kinf_scanner *s, const char *buf, size_t len)
{
    if (s == NULL)
        return KINF_EINVAL;
    if (s->in_cb)
        return KINF_EBUSY;
    if (s->err)
        return s->err;
    if (s->finished)
        return KINF_EINVAL;
    if (len == 0)
        return KINF_OK;
    if (buf == NULL)
        return KINF_EINVAL;
    return scan(s, (const unsigned char *)buf, len);
}

/* Copies a sink into a NUL-terminated buffer of size cap, cutting at a UTF-8 boundary. */
static void copy_trunc(char *dst, size_t cap, const sink *k)
{
    size_t n = k->len;
    if (n > cap - 1) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)k->buf[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, k->buf, n);
    dst[n] = '\0';
}

static void status_fill(kinf_scanner *s, kinf_status *st)
{
    int ok, timeout;
    memset(st, 0, sizeof *st);
    st->is_status = sink_eq(&s->sk[V_LKIND], "Status");
    st->code = (int)sink_int(&s->sk[V_SCODE], -2147483647LL - 1, 2147483647LL, &ok);
    st->retry_after_seconds = (long)sink_int(&s->sk[V_SRETRY], 0, 2147483647LL, &ok);
    copy_trunc(st->reason, sizeof st->reason, &s->sk[V_SREASON]);
    copy_trunc(st->message, sizeof st->message, &s->sk[V_SMESSAGE]);
    timeout = strcmp(st->reason, "Timeout") == 0 || st->code == 504;
    st->too_large_resource_version =
        s->cause_rv ||
        (timeout && (s->cause_msg || strstr(st->message, "Too large resource version") != NULL));
}

kinf_err kinf_scanner_finish(kinf_scanner *s)
{
    kinf_scan_list_end le;
    kinf_err e = KINF_OK;
    int ok;
    if (s == NULL)
        return KINF_EINVAL;
    if (s->in_cb)
        return KINF_EBUSY;
    if (s->err)
        return s->err;
    if (s->finished)
        return KINF_OK;
    if (s->mode == KINF_SCAN_WATCH) {
        if (s->state != ST_TOP)
            return failf(s, KINF_EPARSE, s->off,
                         "stream ended %s of the watch event that started at byte %llu",
                         state_what[s->state], (unsigned long long)s->val_start);
        s->finished = 1;
        return KINF_OK;
    }
    if (s->state != ST_END) {
        if (!s->seen_top)
            return failf(s, KINF_EPARSE, s->off, "empty body: expected a JSON object");
        return failf(s, KINF_EPARSE, s->off, "body ended %s, before the end of the list object",
                     state_what[s->state]);
    }
    s->finished = 1;
    status_fill(s, &s->status);
    le.kind.ptr = s->sk[V_LKIND].buf;
    le.kind.len = s->sk[V_LKIND].len;
    le.api_version.ptr = s->sk[V_LAPIV].buf;
    le.api_version.len = s->sk[V_LAPIV].len;
    le.resource_version.ptr = s->sk[V_LRV].buf;
    le.resource_version.len = s->sk[V_LRV].len;
    le.continue_.ptr = s->sk[V_LCONT].buf;
    le.continue_.len = s->sk[V_LCONT].len;
    le.remaining_item_count = sink_int(&s->sk[V_LREMAIN], 0, 0x7fffffffffffffffLL, &ok);
    if (!ok)
        le.remaining_item_count = -1;
    le.items = s->items;
    le.has_items = s->has_items;
    le.items_null = s->items_null;
    le.is_status = s->status.is_status;
    le.status = &s->status;
    if (s->opt.on_list_end) {
        s->in_cb = 1;
        e = s->opt.on_list_end(s->opt.ud, &le);
        s->in_cb = 0;
        if (e)
            return failf(s, e, s->off, "the list end callback failed (%s)", kinf_strerror(e));
    }
    return KINF_OK;
}

static kinf_err status_cb(void *ud, const kinf_scan_list_end *end)
{
    *(kinf_status *)ud = *end->status;
    return KINF_OK;
}

kinf_err kinf_status_parse(const char *json, size_t len, kinf_status *out)
{
    kinf_scan_options o;
    kinf_scanner *s;
    kinf_err e;
    memset(out, 0, sizeof *out);
    memset(&o, 0, sizeof o);
    o.on_list_end = status_cb;
    o.ud = out;
    s = kinf_scanner_new(KINF_SCAN_LIST, &o, &e);
    if (s == NULL)
        return e;
    e = kinf_scanner_feed(s, json, len);
    if (e == KINF_OK)
        e = kinf_scanner_finish(s);
    if (e)
        status_fill(s, out);
    kinf_scanner_free(s);
    return e;
}
