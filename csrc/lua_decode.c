/*
 * lua_decode.c - JSON -> Lua values for the bytes of records, which are valid JSON already (the
 * reflector's scanner validated them, or kinformer encoded them), and for core.decode (REST
 * response bodies among them). Contract in lua_kinf.h.
 *
 * It makes what lua-cjson's decode makes (null is cjson.null, a NULL light userdata; empty
 * objects and arrays are empty tables without a metatable; the last of duplicate keys wins), with
 * one difference, kinformer's number rule: on Lua 5.4 a number written without a fraction and
 * without an exponent that fits in a signed 64-bit integer is a Lua integer ("3", "-4",
 * "9007199254740993" exactly); any other number is a float ("1.0", "1e3", "1e400", and integers
 * beyond 64 bits). lua-cjson makes every number a float. On LuaJIT every number is a double, as
 * lua-cjson makes it. It is also faster: a string without escapes is pushed straight from the
 * input (lua-cjson copies every string into a buffer first), and a table is created at its final
 * size from the members left on the Lua stack (lua-cjson grows every table by rehashing).
 *
 * For input that is not valid JSON it takes what lua-cjson takes (lua-cjson is lenient with
 * numbers: "+1" and "01", integers by the rule above, "1." a float; raw control bytes in strings
 * but NUL) and refuses the rest, so kinformer's core.decode reads any string as lua-cjson would.
 *
 * It never reports an error itself: on anything it does not expect (malformed input, nesting
 * deeper than MAX_DEPTH, lua-cjson's limit too, a non-integer number strtod does not take whole,
 * e.g. under a locale with a decimal comma, or no room on the Lua stack) it restores the stack
 * and returns 0, and the caller decodes with lua-cjson, which gives the error or the value (then
 * with lua-cjson's floats: valid JSON gets there only on LuaJIT, whose stack of 65500 slots a
 * document nested some 500 deep with wide objects at every level can exhaust). Never raises;
 * allocation failures inside the Lua API raise as usual (memory errors).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "lua_kinf.h"

#define MAX_DEPTH 1000 /* lua-cjson's limit: deeper, its error */
#define BATCH 64       /* members kept on the stack before a big table gets them */
#define MAX_NUMBER 64  /* longer number tokens: lua-cjson's turn */

typedef struct dec {
    lua_State *L;
    const unsigned char *p, *end;
    int depth;
} dec;

static int value(dec *d);

static void skip_ws(dec *d)
{
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\n' || *d->p == '\r' || *d->p == '\t'))
        d->p++;
}

/* Appends code point cp as UTF-8. */
static void add_utf8(luaL_Buffer *b, unsigned cp)
{
    unsigned char u[4];
    luaL_addlstring(b, (const char *)u, (size_t)kinf_utf8_put(u, cp));
}

/* d->p is just past an opening quote: pushes the string. */
static int string(dec *d)
{
    const unsigned char *s = d->p, *q = s;
    luaL_Buffer b;

    while (q < d->end && *q != '"' && *q != '\\' && *q != '\0')
        q++;
    if (q == d->end || *q == '\0') /* lua-cjson ends a string at a NUL byte: its call */
        return 0;
    if (*q == '"') {
        lua_pushlstring(d->L, (const char *)s, (size_t)(q - s));
        d->p = q + 1;
        return 1;
    }
    luaL_buffinit(d->L, &b);
    for (;;) {
        luaL_addlstring(&b, (const char *)s, (size_t)(q - s));
        if (q == d->end || *q == '\0')
            return 0;
        if (*q == '"')
            break;
        /* a backslash */
        {
            unsigned cp;
            size_t used = kinf_json_escape(q, d->end, &cp);
            if (used == 0)
                return 0; /* malformed, or a surrogate without its other half */
            add_utf8(&b, cp);
            q += used;
        }
        s = q;
        while (q < d->end && *q != '"' && *q != '\\' && *q != '\0')
            q++;
    }
    luaL_pushresult(&b);
    d->p = q + 1;
    return 1;
}

/* Pushes the integer of token s[0..n), an optional sign and digits only, and returns 1; 0 when it
 * does not fit in a lua_Integer (64 bits): then it is a float. */
static int push_integer(lua_State *L, const unsigned char *s, size_t n)
{
    const unsigned char *end = s + n;
    int neg = *s == '-';
    /* the magnitude's limit: 2^63 for a negative number, 2^63 - 1 else */
    unsigned long long u = 0, max = neg ? (unsigned long long)LLONG_MAX + 1 : LLONG_MAX;

    if (*s == '-' || *s == '+')
        s++;
    for (; s < end; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (u > (max - d) / 10)
            return 0;
        u = u * 10 + d;
    }
    /* -2^63 as an unsigned magnitude: negating it in unsigned arithmetic is exact */
    lua_pushinteger(L, neg ? (lua_Integer)(0ULL - u) : (lua_Integer)u);
    return 1;
}

static int number(dec *d)
{
    const unsigned char *s = d->p, *q = s;
    char tok[MAX_NUMBER + 1], *endp;
    int digits = 0, other = 0; /* digits, and anything but a leading sign */
    double v;

    while (q < d->end && ((*q >= '0' && *q <= '9') || *q == '-' || *q == '+' || *q == '.' ||
                          *q == 'e' || *q == 'E')) {
        if (*q >= '0' && *q <= '9')
            digits++;
        else if (q != s)
            other++;
        q++;
    }
    if (q == s || q - s > MAX_NUMBER)
        return 0;
    if (KL_HAS_INTEGERS && digits > 0 && other == 0 && push_integer(d->L, s, (size_t)(q - s))) {
        d->p = q;
        return 1;
    }
    memcpy(tok, s, (size_t)(q - s));
    tok[q - s] = '\0';
    v = strtod(tok, &endp);
    if (endp != tok + (q - s))
        return 0;
    lua_pushnumber(d->L, (lua_Number)v);
    d->p = q;
    return 1;
}

static int literal(dec *d, const char *word, size_t n)
{
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0)
        return 0;
    d->p += n;
    return 1;
}

/* Moves the `pending` values (arrays) or key/value pairs (objects) above the table at t into
 * it, in order (so the last of duplicate keys wins), and pops them. *next_index: arrays. */
static void flush(lua_State *L, int t, int is_array, int pending, lua_Integer *next_index)
{
    int first = t + 1;
    if (is_array) {
        for (int i = 0; i < pending; i++) {
            lua_pushvalue(L, first + i);
            lua_rawseti(L, t, (*next_index)++);
        }
    } else {
        for (int i = 0; i < pending; i++) {
            lua_pushvalue(L, first + 2 * i);
            lua_pushvalue(L, first + 2 * i + 1);
            lua_rawset(L, t);
        }
    }
    lua_settop(L, t);
}

/* d->p is on '{' or '[': pushes the table. */
static int container(dec *d)
{
    lua_State *L = d->L;
    int is_array = *d->p == '[', base = lua_gettop(L), t = 0, pending = 0;
    unsigned char close = is_array ? ']' : '}';
    lua_Integer next_index = 1;

    if (++d->depth > MAX_DEPTH)
        return 0;
    d->p++;
    skip_ws(d);
    if (d->p < d->end && *d->p == close) {
        d->p++;
        lua_createtable(L, 0, 0);
        d->depth--;
        return 1;
    }
    for (;;) {
        if (!lua_checkstack(L, 8))
            return 0;
        skip_ws(d);
        if (!is_array) {
            if (d->p == d->end || *d->p != '"')
                return 0;
            d->p++;
            if (!string(d))
                return 0;
            skip_ws(d);
            if (d->p == d->end || *d->p != ':')
                return 0;
            d->p++;
            skip_ws(d);
        }
        if (!value(d))
            return 0;
        if (++pending == BATCH) {
            if (t == 0) {
                /* Big: make the table now, sized for this batch, and move the batch in. */
                lua_createtable(L, is_array ? 2 * BATCH : 0, is_array ? 0 : 2 * BATCH);
                lua_insert(L, base + 1);
                t = base + 1;
            }
            flush(L, t, is_array, pending, &next_index);
            pending = 0;
        }
        skip_ws(d);
        if (d->p == d->end)
            return 0;
        if (*d->p == ',') {
            d->p++;
            continue;
        }
        if (*d->p != close)
            return 0;
        d->p++;
        break;
    }
    if (t == 0) {
        lua_createtable(L, is_array ? pending : 0, is_array ? 0 : pending);
        lua_insert(L, base + 1);
        t = base + 1;
    }
    flush(L, t, is_array, pending, &next_index);
    d->depth--;
    return 1;
}

static int value(dec *d)
{
    if (d->p == d->end)
        return 0;
    switch (*d->p) {
    case '"':
        d->p++;
        return string(d);
    case '{':
    case '[':
        return container(d);
    case 't':
        if (!literal(d, "true", 4))
            return 0;
        lua_pushboolean(d->L, 1);
        return 1;
    case 'f':
        if (!literal(d, "false", 5))
            return 0;
        lua_pushboolean(d->L, 0);
        return 1;
    case 'n':
        if (!literal(d, "null", 4))
            return 0;
        lua_pushlightuserdata(d->L, NULL); /* cjson.null */
        return 1;
    default:
        /* lua-cjson also takes "+1" and "01"; anything else (".5", "NaN", "0x10") is its call */
        if (*d->p == '-' || *d->p == '+' || (*d->p >= '0' && *d->p <= '9'))
            return number(d);
        return 0;
    }
}

int kl_decode(lua_State *L, const char *json, size_t len)
{
    int top = lua_gettop(L);
    dec d;

    if (!lua_checkstack(L, 8))
        return 0;
    d.L = L;
    d.p = (const unsigned char *)json;
    d.end = d.p + len;
    d.depth = 0;
    skip_ws(&d);
    if (value(&d)) {
        skip_ws(&d);
        if (d.p == d.end)
            return 1;
    }
    lua_settop(L, top);
    return 0;
}
