/*
 * lua_encode.c - Lua values -> JSON for everything kinformer writes: objects a user built (store
 * and FIFO writes, transforms' results), request bodies and patches (core.encode). Contract in
 * lua_kinf.h (kl_encode).
 *
 * It encodes as lua-cjson's encode does, with one difference: numbers are exact. lua-cjson writes
 * 14 significant digits (and refuses more): 1234567890123456 would reach the server as
 * 1234567890123500. Here a Lua 5.4 integer is written as such; a float that is integral and
 * below 2^53 in magnitude is written as an integer (no exponent); any other float in the
 * shortest of %.15g, %.16g and %.17g that strtod reads back as the same double (%.17g always
 * does). NaN and infinities are refused, as lua-cjson refuses them. Read back by kl_decode on
 * Lua 5.4, an integer stays an integer and an integral float written without an exponent
 * (3.0 as "3") becomes one: the API server's integer fields refuse "3.0".
 *
 * Tables, as lua-cjson decides: a table whose keys are all positive integers is an array
 * (holes are null) unless it is excessively sparse (highest index over twice the number of
 * items, and over 10), which is an error; any other table is an object whose keys must be
 * strings or numbers (a number key is written as a string); an empty table is {}. cjson.null
 * (a NULL light userdata) is null. Where the runtime's lua-cjson has them (OpenResty's),
 * cjson.empty_array is [], a table with cjson.array_mt is an array of its length and an empty
 * table with cjson.empty_array_mt is []. Strings pass through as bytes (no UTF-8 check), with
 * '"', '\\', control characters and DEL escaped; '/' is not escaped (lua-cjson writes "\/":
 * the same JSON string).
 *
 * Tables kinformer made from records (lazily decoded objects and their metadata, lua_lazy.c)
 * are written as their record's JSON bytes, wherever they sit in the value: their members are
 * decoded on first read, so walking them would see only what was read so far.
 *
 * Limits: nesting deeper than MAX_DEPTH tables, a table that contains itself, functions,
 * userdata, threads and other light userdata are errors that name the value's type and where
 * it sits (e.g. "at spec.template.containers[1]", Lua indices). The output buffer is kept per
 * Lua state between calls (up to KEEP_MAX bytes) so the write path does not allocate per call.
 * Never calls Lua code (no metamethods: raw access only), so it cannot be re-entered.
 * Threads: the thread that owns the Lua state only.
 */
#include <math.h> /* signbit, a macro: no libm */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_object_impl.h"

#define MAX_DEPTH 1000       /* lua-cjson's default */
#define KEEP_MAX (1u << 18)  /* a bigger buffer is freed after the call */
#define PATH_MAX_TEXT 160    /* the "at ..." part of an error message */
#define TWO_53 9007199254740992.0

#define ENC_MT "kinformer.encoder"

/* Registry keys: the addresses are unique; the bytes never change. */
static const char ENC_KEY = 0;            /* the state's encoder (userdata) */
static const char ARRAY_MT_KEY = 0;       /* cjson.array_mt, when the runtime's cjson has it */
static const char EMPTY_ARRAY_MT_KEY = 0; /* cjson.empty_array_mt, likewise */

/* Where the encoder is, for error messages: the key or index that leads to each level. */
typedef struct step {
    int kind; /* STEP_KEY (key, len), STEP_INDEX (index), STEP_NUMBER (number key) */
    const char *key;
    size_t len;
    double index;
} step;
enum { STEP_KEY, STEP_INDEX, STEP_NUMBER };

/* The encoder: one userdata per Lua state (registry[ENC_KEY]), kept between calls: its output
 * buffer, one malloc'd block freed by __gc, and its path, too big for the C stack of a handler
 * deep in Lua calls. */
typedef struct enc {
    char *p;             /* the output buffer */
    size_t len, cap;
    lua_State *L;        /* the running call's */
    int depth;
    int has_compat;      /* the runtime's cjson has array_mt / empty_array_mt / empty_array */
    void *empty_array;   /* cjson.empty_array, or NULL */
    kinf_err err;
    char *errbuf;
    size_t errlen;
    const void *tables[MAX_DEPTH]; /* the tables being written, outermost first */
    step path[MAX_DEPTH + 1];      /* path[d]: how level d was reached (d >= 1) */
} enc;

/* ---- the buffer ---- */

static int grow(enc *e, size_t need)
{
    size_t cap = e->cap ? e->cap : 1024;
    char *p;
    if (need > ((size_t)-1) / 2 - e->len) {
        e->err = KINF_ENOMEM;
        return 0;
    }
    while (cap < e->len + need)
        cap *= 2;
    p = realloc(e->p, cap);
    if (p == NULL) {
        e->err = KINF_ENOMEM;
        return 0;
    }
    e->p = p;
    e->cap = cap;
    return 1;
}

/* Room for n more bytes. */
static inline int reserve(enc *e, size_t n)
{
    return e->cap - e->len >= n || grow(e, n);
}

static inline int put(enc *e, const char *s, size_t n)
{
    if (!reserve(e, n))
        return 0;
    memcpy(e->p + e->len, s, n);
    e->len += n;
    return 1;
}

static inline int put_char(enc *e, char c)
{
    if (!reserve(e, 1))
        return 0;
    e->p[e->len++] = c;
    return 1;
}

static int enc_gc(lua_State *L)
{
    enc *e = luaL_checkudata(L, 1, ENC_MT);
    free(e->p);
    e->p = NULL;
    e->len = e->cap = 0;
    return 0;
}

/* ---- errors ---- */

/* Appends the path to level `depth` to out (size n), e.g. "spec.containers[1].name". */
static void path_text(const enc *e, int depth, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    if (depth == 0) {
        snprintf(out, n, "the top level");
        return;
    }
    for (int d = 1; d <= depth && used < n; d++) {
        const step *s = &e->path[d];
        int w;
        if (s->kind == STEP_KEY)
            w = snprintf(out + used, n - used, "%s%.*s", d > 1 ? "." : "",
                         (int)(s->len > 64 ? 64 : s->len), s->key);
        else
            w = snprintf(out + used, n - used, "[%.17g]", s->index);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (used >= n && n > 4)
        memcpy(out + n - 4, "...", 4);
}

/* Fails with KINF_EINVAL: "cannot encode <what> at <path>". */
static int fail(enc *e, const char *what)
{
    char where[PATH_MAX_TEXT];
    path_text(e, e->depth, where, sizeof(where));
    e->err = KINF_EINVAL;
    kinf_errmsg(e->errbuf, e->errlen, "cannot encode %s at %s", what, where);
    return 0;
}

/* ---- scalars ---- */

/* Whether finite v has no fraction (without libm: the module links no math library). */
static inline int integral(double v)
{
    double a = v < 0 ? -v : v;
    return a >= TWO_53 || v == (double)(long long)v; /* from 2^53 on every double is integral */
}

/* Writes v in decimal to out (room for 21 bytes); returns the length. */
static size_t format_integer(char *out, long long v)
{
    char tmp[24];
    size_t n = 0, len = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[len++] = '-';
    while (n)
        out[len++] = tmp[--n];
    return len;
}

/* Writes finite v so that strtod reads back exactly v (room for 32 bytes); returns the length. */
static size_t format_double(char *out, double v)
{
    int n = 0;
    if ((v < 0 ? -v : v) < TWO_53 && integral(v)) {
        if (v == 0 && signbit(v)) {
            memcpy(out, "-0", 2);
            return 2;
        }
        return format_integer(out, (long long)v);
    }
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(out, 32, "%.*g", prec, v);
        if (prec == 17 || strtod(out, NULL) == v)
            break;
    }
    /* A locale with a decimal comma (os.setlocale) writes and reads one: JSON has a point. */
    for (int i = 0; i < n; i++)
        if (out[i] == ',')
            out[i] = '.';
    return (size_t)n;
}

/* The number at idx (into out, room for 32 bytes); 0 with a failure for NaN and infinities. */
static size_t format_number(enc *e, int idx, char *out)
{
    double v;
    if (kl_isinteger(e->L, idx))
        return format_integer(out, (long long)lua_tointeger(e->L, idx));
    v = (double)lua_tonumber(e->L, idx);
    if (v != v || v - v != 0) { /* NaN, or an infinity (inf - inf is NaN) */
        fail(e, v != v ? "NaN (not a number)" : "an infinite number");
        return 0;
    }
    return format_double(out, v);
}

static int number(enc *e, int idx)
{
    char tmp[32];
    size_t n = format_number(e, idx, tmp);
    return n > 0 && put(e, tmp, n);
}

/* What a byte becomes in a JSON string: 0 itself, 1 \u00XX, else the letter after '\'. */
static const unsigned char ESCAPE[256] = {
    1, 1, 1, 1, 1, 1, 1, 1, 'b', 't', 'n', 1, 'f', 'r', 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, '"', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ['\\'] = '\\', [0x7f] = 1,
};

static int string(enc *e, const char *s, size_t len)
{
    static const char HEX[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s, *end = p + len, *run;
    if (!reserve(e, len + 2))
        return 0;
    e->p[e->len++] = '"';
    for (;;) {
        run = p;
        while (p < end && !ESCAPE[*p])
            p++;
        if (!put(e, (const char *)run, (size_t)(p - run)))
            return 0;
        if (p == end)
            break;
        if (!reserve(e, 6))
            return 0;
        {
            char *o = e->p + e->len;
            o[0] = '\\';
            if (ESCAPE[*p] == 1) {
                memcpy(o + 1, "u00", 3);
                o[4] = HEX[*p >> 4];
                o[5] = HEX[*p & 15];
                e->len += 6;
            } else {
                o[1] = (char)ESCAPE[*p];
                e->len += 2;
            }
        }
        p++;
    }
    return put_char(e, '"');
}

/* ---- tables ---- */

static int value(enc *e, int idx);

/* A positive integer key's value (as a double), or 0 when the key is anything else. */
static double array_key(lua_State *L, int idx)
{
    double k;
    if (lua_type(L, idx) != LUA_TNUMBER)
        return 0;
    if (kl_isinteger(L, idx)) {
        lua_Integer i = lua_tointeger(L, idx);
        return i >= 1 ? (double)i : 0;
    }
    k = (double)lua_tonumber(L, idx);
    /* NaN fails k >= 1; an infinity is no index (the object key then fails as a number) */
    return k >= 1 && k < 9.2e18 && integral(k) ? k : 0;
}

/* lua-cjson's choice for the table at t: its array length (0 for an empty table: an object),
 * -1 for an object, -2 with a failure for an excessively sparse array. */
static double array_length(enc *e, int t)
{
    lua_State *L = e->L;
    double max = 0, items = 0, k;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        k = array_key(L, -2);
        lua_pop(L, 1);
        if (k == 0) {
            lua_pop(L, 1);
            return -1;
        }
        if (k > max)
            max = k;
        items++;
    }
    if (max > items * 2 && max > 10) {
        char what[96];
        snprintf(what, sizeof(what), "an excessively sparse array (%.0f of %.0f indices set)",
                 items, max);
        fail(e, what);
        return -2;
    }
    return max;
}

static int array(enc *e, int t, double len)
{
    lua_State *L = e->L;
    step *s = &e->path[e->depth];
    if (!put_char(e, '['))
        return 0;
    s->kind = STEP_INDEX;
    for (double i = 1; i <= len; i++) {
        if (i > 1 && !put_char(e, ','))
            return 0;
        s->index = i;
        lua_rawgeti(L, t, (lua_Integer)i);
        if (!value(e, lua_gettop(L)))
            return 0;
        lua_pop(L, 1);
    }
    return put_char(e, ']');
}

static int object(enc *e, int t)
{
    lua_State *L = e->L;
    step *s = &e->path[e->depth];
    int first = 1;
    if (!put_char(e, '{'))
        return 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        int kt = lua_type(L, -2);
        if (!first && !put_char(e, ','))
            return 0;
        first = 0;
        if (kt == LUA_TSTRING) {
            s->kind = STEP_KEY;
            s->key = lua_tolstring(L, -2, &s->len);
            if (!string(e, s->key, s->len))
                return 0;
        } else if (kt == LUA_TNUMBER) {
            char tmp[32];
            size_t n;
            e->depth--; /* a bad key is reported where its table is */
            n = format_number(e, lua_gettop(L) - 1, tmp);
            e->depth++;
            if (n == 0 || !put_char(e, '"') || !put(e, tmp, n) || !put_char(e, '"'))
                return 0;
            s->kind = STEP_NUMBER;
            s->index = (double)lua_tonumber(L, -2);
        } else {
            char what[64];
            snprintf(what, sizeof(what), "a table key of type %s", lua_typename(L, kt));
            e->depth--;
            fail(e, what);
            return 0;
        }
        if (!put_char(e, ':') || !value(e, lua_gettop(L)))
            return 0;
        lua_pop(L, 1);
    }
    return put_char(e, '}');
}

/* A table with a metatable: 1 when written here (a record's bytes, or [] by cjson's
 * empty_array_mt), 0 to write it as a plain table (*as_array: an array of its length, by
 * cjson's array_mt), -1 on a failure. */
static int special_table(enc *e, int t, int *as_array)
{
    lua_State *L = e->L;
    box *b = kl_lazy_box(L, t, &kl_records_key);
    if (b == NULL)
        b = kl_lazy_box(L, t, &kl_subs_key);
    if (b != NULL)
        return put(e, b->json, b->json_len) ? 1 : -1;
    if (!e->has_compat)
        return 0;
    lua_getmetatable(L, t);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &ARRAY_MT_KEY);
    if (lua_rawequal(L, -1, -2)) {
        lua_pop(L, 2);
        *as_array = 1;
        return 0;
    }
    lua_pop(L, 1);
    kl_rawgetp(L, LUA_REGISTRYINDEX, &EMPTY_ARRAY_MT_KEY);
    if (lua_rawequal(L, -1, -2)) {
        lua_pop(L, 2);
        lua_pushnil(L);
        if (!lua_next(L, t))
            return put(e, "[]", 2) ? 1 : -1;
        lua_pop(L, 2);
        return 0;
    }
    lua_pop(L, 2);
    return 0;
}

static int table(enc *e, int t)
{
    lua_State *L = e->L;
    const void *p = lua_topointer(L, t);
    int as_array = 0, rc;
    double len;

    if (e->depth == MAX_DEPTH)
        return fail(e, "a table nested deeper than 1000 tables");
    for (int d = 0; d < e->depth; d++)
        if (e->tables[d] == p)
            return fail(e, "a table that contains itself");
    if (!lua_checkstack(L, 8)) {
        e->err = KINF_ENOMEM;
        kinf_errmsg(e->errbuf, e->errlen, "cannot encode: no room on the Lua stack");
        return 0;
    }
    if (lua_getmetatable(L, t)) {
        lua_pop(L, 1);
        rc = special_table(e, t, &as_array);
        if (rc != 0)
            return rc > 0;
    }
    if (as_array) {
        len = (double)kl_rawlen(L, t);
    } else {
        len = array_length(e, t);
        if (len == -2)
            return 0;
    }
    e->tables[e->depth++] = p;
    rc = len > 0 || as_array ? array(e, t, len) : object(e, t);
    e->depth--;
    return rc;
}

static int value(enc *e, int idx)
{
    lua_State *L = e->L;
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        return string(e, s, len);
    }
    case LUA_TNUMBER:
        return number(e, idx);
    case LUA_TTABLE:
        return table(e, idx);
    case LUA_TBOOLEAN:
        return lua_toboolean(L, idx) ? put(e, "true", 4) : put(e, "false", 5);
    case LUA_TNIL:
        return put(e, "null", 4);
    case LUA_TLIGHTUSERDATA: {
        void *u = lua_touserdata(L, idx);
        if (u == NULL)
            return put(e, "null", 4);
        if (u == e->empty_array)
            return put(e, "[]", 2);
        return fail(e, "a light userdata value");
    }
    default: {
        char what[64];
        snprintf(what, sizeof(what), "a %s value", luaL_typename(L, idx));
        return fail(e, what);
    }
    }
}

/* ---- entry points ---- */

kinf_err kl_encode(lua_State *L, int idx, char *errbuf, size_t errlen)
{
    int top = lua_gettop(L), ok;
    enc *e;

    idx = kl_absindex(L, idx);
    if (errlen > 0)
        errbuf[0] = '\0';
    if (!lua_checkstack(L, 8)) {
        kinf_errmsg(errbuf, errlen, "cannot encode: no room on the Lua stack");
        return KINF_ENOMEM;
    }
    kl_rawgetp(L, LUA_REGISTRYINDEX, &ENC_KEY);
    e = lua_touserdata(L, -1);
    lua_pop(L, 1); /* the registry keeps it */
    e->L = L;
    e->depth = 0;
    e->err = KINF_OK;
    e->errbuf = errbuf;
    e->errlen = errlen;
    e->len = 0;
    ok = value(e, idx);
    lua_settop(L, top);
    if (ok)
        lua_pushlstring(L, e->p, e->len); /* may raise (memory): the buffer stays owned */
    else if (e->err == KINF_ENOMEM && errlen > 0 && errbuf[0] == '\0')
        kinf_errmsg(errbuf, errlen, "cannot encode: out of memory");
    if (e->cap > KEEP_MAX) {
        free(e->p);
        e->p = NULL;
        e->len = e->cap = 0;
    }
    return ok ? KINF_OK : e->err;
}

void kl_open_encode(lua_State *L, int cjson)
{
    enc *e;
    cjson = kl_absindex(L, cjson);
    e = lua_newuserdata(L, sizeof(*e));
    memset(e, 0, sizeof(*e));
    luaL_newmetatable(L, ENC_MT);
    lua_pushcfunction(L, enc_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);

    /* OpenResty's lua-cjson's ways to say "array"; Debian's has none of them. */
    lua_getfield(L, cjson, "array_mt");
    e->has_compat = lua_istable(L, -1);
    kl_rawsetp(L, LUA_REGISTRYINDEX, &ARRAY_MT_KEY);
    lua_getfield(L, cjson, "empty_array_mt");
    e->has_compat |= lua_istable(L, -1);
    kl_rawsetp(L, LUA_REGISTRYINDEX, &EMPTY_ARRAY_MT_KEY);
    lua_getfield(L, cjson, "empty_array");
    if (lua_type(L, -1) == LUA_TLIGHTUSERDATA)
        e->empty_array = lua_touserdata(L, -1);
    lua_pop(L, 1);

    kl_rawsetp(L, LUA_REGISTRYINDEX, &ENC_KEY);
}
