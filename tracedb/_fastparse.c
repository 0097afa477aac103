/* The common case of chunked.py's piece parse, in C.

   parse(data, base) reads a piece (whole events, each a JSON object, with
   commas between them) and returns its columns as Arrow buffers, or None
   when anything in it is out of the common case: then chunked.py parses
   the piece as before (msgspec, orjson, ijson), which stays the reference.

   It takes only what it reads exactly as the Python paths do, and declines
   the rest:
   - JSON that is valid (RFC 8259, UTF-8): anything else is declined, and
     the Python paths say what is wrong;
   - every event an object with a string "ph" other than "B", "E", "C";
   - ts and dur: null, or numbers without an exponent and with at most
     3 decimals, within +-2**62 ns (exact from the text, no double);
   - cat, name, bp: null or strings without escapes; pid, tid, id, bind_id:
     null, strings without escapes, or integers (their text, "-0" aside);
   - args: an object (or null), its text without the whitespace outside
     strings (as msgspec.json.format(indent=-1) writes it); its keys without
     escapes, those of the typed columns once each, with values of the
     column's type or null (integers within int64; a list of them);
   - no key escaped or twice at an event's top level, no "\u" escape of a
     surrogate anywhere, no number with a fraction or an exponent past a
     double's range (msgspec refuses them), nesting at most 64 deep.

   Nothing here knows Arrow beyond its buffer layout: validity bitmaps
   (LSB first), int32 offsets, little-endian values. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define TIME_LIMIT_NS (INT64_C(1) << 62)

/* -- growable buffers and columns -------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0)
        return 0;
    if (b->len + n > b->cap && buf_grow(b, n))
        return -1;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

enum { K_I64, K_F64, K_STR, K_LIST };

typedef struct {
    int kind;
    int64_t n, nulls;
    Buf valid;  /* bitmap */
    Buf data;   /* values; string bytes; list items */
    Buf offs;   /* int32 offsets (strings, lists) */
} Col;

static inline int col_bit(Col *c, int ok) {
    if ((c->n & 7) == 0) {
        char z = 0;
        if (buf_put(&c->valid, &z, 1))
            return -1;
    }
    if (ok)
        c->valid.p[c->n >> 3] |= (char)(1 << (c->n & 7));
    else
        c->nulls++;
    c->n++;
    return 0;
}

static inline int col_offset(Col *c) {
    int64_t at = (int64_t)(c->kind == K_LIST ? c->data.len / 8 : c->data.len);
    if (at > INT32_MAX)
        return -2; /* declined: the Python paths take it */
    int32_t o = (int32_t)at;
    return buf_put(&c->offs, &o, 4);
}

static int col_init(Col *c, int kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    if (kind == K_STR || kind == K_LIST)
        return col_offset(c);
    return 0;
}

static void col_free(Col *c) {
    free(c->valid.p);
    free(c->data.p);
    free(c->offs.p);
}

static int put_i64(Col *c, int ok, int64_t v) {
    if (!ok)
        v = 0;
    return col_bit(c, ok) || buf_put(&c->data, &v, 8);
}

static int put_f64(Col *c, int ok, double v) {
    if (!ok)
        v = 0;
    return col_bit(c, ok) || buf_put(&c->data, &v, 8);
}

static int put_str(Col *c, const char *s, size_t n) {
    /* s NULL: a null */
    if (col_bit(c, s != NULL))
        return -1;
    if (s && buf_put(&c->data, s, n))
        return -1;
    return col_offset(c);
}

/* -- the reader ---------------------------------------------------------- */

typedef struct {
    const char *p, *end;
    int nomem; /* set with a return of -1 when memory ran out, not the text */
} Reader;

/* A value as read: where it starts and ends, and what it is. */
enum { V_ABSENT = 0, V_NULL, V_STR, V_NUM, V_TRUE, V_FALSE, V_OBJ, V_ARR };

typedef struct {
    int type;
    const char *s, *e;  /* the token (strings: without the quotes) */
    int escaped;        /* strings: holds a backslash */
    int is_int;         /* numbers: no fraction, no exponent */
    int exp;            /* numbers: has an exponent */
    int frac;           /* numbers: digits after the point */
} Val;

static inline int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static inline void skip_ws(Reader *r) {
    while (r->p < r->end && is_ws(*r->p))
        r->p++;
}

/* Out of the common case: the piece is declined. */
static int fail(Reader *r) {
    (void)r;
    return -1;
}

static inline int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/* Whether none of 8 bytes is a quote, a backslash, a control character or
   past ASCII (the bit tricks of "Bit Twiddling Hacks": a zero byte, a byte
   less than n). */
static inline int plain8(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    uint64_t hits = ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w;
    return (hits & HIGHS) == 0;
}

/* A string, at its opening quote: valid UTF-8, no control characters,
   valid escapes (no surrogate escapes). */
static int read_string(Reader *r, Val *v) {
    const unsigned char *p = (const unsigned char *)r->p + 1;
    const unsigned char *end = (const unsigned char *)r->end;
    v->type = V_STR;
    v->escaped = 0;
    v->s = (const char *)p;
    for (;;) {
        /* runs of plain ASCII first: 8 bytes at a time, then one by one */
        while (p + 8 <= end) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (plain8(w))
                p += 8;
            else
                break;
        }
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p >= end)
            return fail(r);
        unsigned char c = *p;
        if (c == '"') {
            v->e = (const char *)p;
            r->p = (const char *)p + 1;
            return 0;
        }
        if (c == '\\') {
            v->escaped = 1;
            if (p + 1 >= end)
                return fail(r);
            char x = (char)p[1];
            if (x == 'u') {
                if (p + 6 > end)
                    return fail(r);
                int h0 = hexval(p[2]), h1 = hexval(p[3]), h2 = hexval(p[4]), h3 = hexval(p[5]);
                if (h0 < 0 || h1 < 0 || h2 < 0 || h3 < 0)
                    return fail(r);
                int cp = (h0 << 12) | (h1 << 8) | (h2 << 4) | h3;
                if (cp >= 0xD800 && cp <= 0xDFFF)
                    return fail(r);
                p += 6;
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' || x == 'r' ||
                       x == 't') {
                p += 2;
            } else {
                return fail(r);
            }
            continue;
        }
        if (c < 0x20)
            return fail(r);
        /* UTF-8, as RFC 3629 has it */
        if (c >= 0xC2 && c <= 0xDF) {
            if (p + 1 >= end || (p[1] & 0xC0) != 0x80)
                return fail(r);
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (p + 2 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
                return fail(r);
            if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F))
                return fail(r);
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (p + 3 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
                return fail(r);
            if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F))
                return fail(r);
            p += 4;
        } else {
            return fail(r);
        }
    }
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A number's text as a double, by Python's own reading: correctly
   rounded, as msgspec's, and blind to the C locale (strtod is not). -1
   where it is long or past a double's range. */
static int read_double(const char *s, const char *e, double *out) {
    char tmp[64], *stop;
    size_t n = (size_t)(e - s);
    if (n >= sizeof tmp)
        return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    PyGILState_STATE gil = PyGILState_Ensure();
    *out = PyOS_string_to_double(tmp, &stop, NULL);
    int bad = PyErr_Occurred() != NULL || *stop != 0 || Py_IS_INFINITY(*out);
    PyErr_Clear();
    PyGILState_Release(gil);
    return bad ? -1 : 0;
}

static int past_double(const char *s, const char *e) {
    double d;
    return read_double(s, e, &d) != 0;
}

static int read_number(Reader *r, Val *v) {
    const char *p = r->p, *end = r->end;
    v->type = V_NUM;
    v->s = p;
    v->is_int = 1;
    v->exp = 0;
    v->frac = 0;
    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return fail(r);
    const char *digits = p;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && is_digit(*p))
            p++;
    }
    long magnitude = (long)(p - digits) - 1; /* about log10 of the value */
    if (p < end && *p == '.') {
        p++;
        const char *f = p;
        while (p < end && is_digit(*p))
            p++;
        if (p == f)
            return fail(r);
        v->frac = (int)(p - f);
        v->is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int minus = 0;
        if (p < end && (*p == '+' || *p == '-'))
            minus = *p++ == '-';
        const char *x = p;
        long e = 0;
        while (p < end && is_digit(*p)) {
            if (e < 100000)
                e = e * 10 + (*p - '0');
            p++;
        }
        if (p == x)
            return fail(r);
        magnitude += minus ? -e : e;
        v->exp = 1;
        v->is_int = 0;
    }
    /* A number past a double's range (1.8e308) that is not an integer,
       msgspec refuses: declined. */
    if (!v->is_int && (magnitude > 308 || (magnitude == 308 && past_double(v->s, p))))
        return fail(r);
    v->e = p;
    r->p = p;
    return 0;
}

/* A member's name, at its opening quote, and the colon after it. */
static inline int read_key(Reader *r, Val *key) {
    if (r->p >= r->end || *r->p != '"' || read_string(r, key))
        return fail(r);
    skip_ws(r);
    if (r->p >= r->end || *r->p != ':')
        return fail(r);
    r->p++;
    skip_ws(r);
    return 0;
}

/* After a member or an item: 1 past a comma (another follows), 0 past
   ``close`` (the container ends), -1 at anything else. */
static inline int next_member(Reader *r, char close) {
    skip_ws(r);
    if (r->p < r->end && *r->p == ',') {
        r->p++;
        skip_ws(r);
        return 1;
    }
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return 0;
    }
    return fail(r);
}

static int skip_value(Reader *r, Val *v, int depth);

static int skip_container(Reader *r, int depth, char close) {
    Val v;
    if (depth > MAX_DEPTH)
        return fail(r);
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return 0;
    }
    int more;
    do {
        if ((close == '}' && read_key(r, &v)) || skip_value(r, &v, depth + 1))
            return -1;
    } while ((more = next_member(r, close)) > 0);
    return more;
}

static int read_literal(Reader *r, const char *word, size_t n) {
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n))
        return fail(r);
    r->p += n;
    return 0;
}

/* Any value; ``v`` says what it was and where (containers: skipped, their
   span in s..e). */
static int skip_value(Reader *r, Val *v, int depth) {
    if (r->p >= r->end)
        return fail(r);
    v->s = r->p;
    switch (*r->p) {
    case '"':
        return read_string(r, v);
    case '{':
        v->type = V_OBJ;
        if (skip_container(r, depth, '}'))
            return -1;
        v->e = r->p;
        return 0;
    case '[':
        v->type = V_ARR;
        if (skip_container(r, depth, ']'))
            return -1;
        v->e = r->p;
        return 0;
    case 'n':
        v->type = V_NULL;
        return read_literal(r, "null", 4);
    case 't':
        v->type = V_TRUE;
        return read_literal(r, "true", 4);
    case 'f':
        v->type = V_FALSE;
        return read_literal(r, "false", 5);
    default:
        return read_number(r, v);
    }
}

/* -- values into columns ------------------------------------------------ */

/* An integer's text (validated) -> int64; -1 past int64. */
static int int_value(const Val *v, int64_t *out) {
    const char *p = v->s;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    uint64_t acc = 0;
    for (; p < v->e; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (acc > (UINT64_MAX - d) / 10)
            return -1;
        acc = acc * 10 + d;
    }
    if (neg) {
        if (acc > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    } else {
        if (acc > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)acc;
    }
    return 0;
}

/* Microseconds as written -> exact ns; -1 out of the common case. */
static int time_ns(const Val *v, int64_t *out) {
    if (v->exp || v->frac > 3)
        return -1;
    const char *p = v->s;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    int64_t whole = 0, frac = 0;
    int digits = 0;
    for (; p < v->e && *p != '.'; p++) {
        if (++digits > 16)
            return -1;
        whole = whole * 10 + (*p - '0');
    }
    if (whole > TIME_LIMIT_NS / 1000)
        return -1;
    int f = 0;
    if (p < v->e) {
        for (p++; p < v->e; p++, f++)
            frac = frac * 10 + (*p - '0');
    }
    for (; f < 3; f++)
        frac *= 10;
    int64_t ns = whole * 1000 + frac;
    if (ns > TIME_LIMIT_NS)
        return -1;
    *out = neg ? -ns : ns;
    return 0;
}

/* ts or dur -> (present, ns); -1 to decline */
static int time_of(const Val *v, int *ok, int64_t *ns) {
    *ok = 0;
    *ns = 0;
    if (v->type == V_ABSENT || v->type == V_NULL)
        return 0;
    if (v->type != V_NUM || time_ns(v, ns))
        return -1;
    *ok = 1;
    return 0;
}

/* cat, name, bp, ph: null or a string without escapes */
static int put_text(Col *c, const Val *v) {
    if (v->type == V_ABSENT || v->type == V_NULL)
        return put_str(c, NULL, 0);
    if (v->type != V_STR || v->escaped)
        return -2;
    return put_str(c, v->s, (size_t)(v->e - v->s));
}

/* pid, tid, id: as text, integers as written */
static int put_id_text(Col *c, const Val *v) {
    if (v->type == V_NUM) {
        /* "-0" is "0" as Python writes it; past 18 digits, msgspec may not
           read an integer */
        if (!v->is_int || v->e - v->s > 18 || (v->e - v->s == 2 && v->s[0] == '-' && v->s[1] == '0'))
            return -2;
        return put_str(c, v->s, (size_t)(v->e - v->s));
    }
    return put_text(c, v);
}

/* -- the typed args columns --------------------------------------------- */

typedef struct {
    const char *key;
    int kind;
    size_t len; /* set at import */
} ArgKey;

/* The order and types of schema.ARG_COLUMNS (checked by chunked.py). */
static ArgKey ARG_KEYS[] = {
    {"correlation", K_I64},
    {"External id", K_I64},
    {"device", K_I64},
    {"stream", K_I64},
    {"grid", K_LIST},
    {"block", K_LIST},
    {"bytes", K_I64},
    {"memory bandwidth (GB/s)", K_F64},
    {"Collective name", K_STR},
    {"In msg nelems", K_I64},
    {"Out msg nelems", K_I64},
    {"Group size", K_I64},
    {"dtype", K_STR},
    {"Process Group Name", K_STR},
    {"Process Group Description", K_STR},
    {"Process Group Ranks", K_STR},
    {"Sequence number", K_I64},
};
#define N_ARGS ((int)(sizeof ARG_KEYS / sizeof ARG_KEYS[0]))

static int arg_index(const char *s, size_t n) {
    for (int i = 0; i < N_ARGS; i++) {
        if (ARG_KEYS[i].len == n && memcmp(ARG_KEYS[i].key, s, n) == 0)
            return i;
    }
    return -1;
}

static int put_arg(Col *c, const Val *v) {
    if (v->type == V_ABSENT || v->type == V_NULL) {
        switch (c->kind) {
        case K_I64:
            return put_i64(c, 0, 0);
        case K_F64:
            return put_f64(c, 0, 0);
        case K_STR:
            return put_str(c, NULL, 0);
        default:
            if (col_bit(c, 0))
                return -1;
            return col_offset(c);
        }
    }
    int64_t x;
    switch (c->kind) {
    case K_I64:
        if (v->type != V_NUM || !v->is_int || int_value(v, &x))
            return -2;
        return put_i64(c, 1, x);
    case K_F64:
        if (v->type != V_NUM)
            return -2;
        if (v->is_int) {
            if (int_value(v, &x))
                return -2;
            return put_f64(c, 1, (double)x);
        } else {
            double d;
            return read_double(v->s, v->e, &d) ? -2 : put_f64(c, 1, d);
        }
    case K_STR:
        return put_text(c, v);
    default: /* a list of integers */
        if (v->type != V_ARR)
            return -2;
        {
            Reader r = {v->s + 1, v->e - 1, 0};
            Val item;
            skip_ws(&r);
            while (r.p < r.end) {
                if (skip_value(&r, &item, 0) || item.type != V_NUM || !item.is_int || int_value(&item, &x))
                    return -2;
                if (buf_put(&c->data, &x, 8))
                    return -1;
                skip_ws(&r);
                if (r.p < r.end && *r.p == ',') {
                    r.p++;
                    skip_ws(&r);
                }
            }
        }
        if (col_bit(c, 1))
            return -1;
        return col_offset(c);
    }
}

/* Whether none of 8 bytes is a quote or a backslash. */
static inline int unquoted8(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return ((((q - ONES) & ~q) | ((b - ONES) & ~b)) & HIGHS) == 0;
}

/* args' text without the whitespace outside strings (the text is valid
   JSON: read_args took it) */
static int put_compact(Col *c, const char *s, const char *e) {
    if (buf_grow(&c->data, (size_t)(e - s)) || col_bit(c, 1))
        return -1;
    char *out = c->data.p + c->data.len;
    const char *p = s;
    while (p < e) {
        char ch = *p++;
        if (is_ws(ch))
            continue;
        *out++ = ch;
        if (ch != '"')
            continue;
        /* a string, to its closing quote, copied as it is */
        for (;;) {
            while (p + 8 <= e) {
                uint64_t w;
                memcpy(&w, p, 8);
                if (!unquoted8(w))
                    break;
                memcpy(out, p, 8);
                out += 8;
                p += 8;
            }
            ch = *p++;
            *out++ = ch;
            if (ch == '\\')
                *out++ = *p++;
            else if (ch == '"')
                break;
        }
    }
    c->data.len = (size_t)(out - c->data.p);
    return col_offset(c);
}

/* -- events ---------------------------------------------------------------- */

enum { F_PH, F_TS, F_DUR, F_CAT, F_NAME, F_PID, F_TID, F_ID, F_BIND_ID, F_BP, F_ARGS, N_FIELDS };

static int field_index(const char *s, size_t n) {
    switch (n) {
    case 2:
        if (s[0] == 'p' && s[1] == 'h') return F_PH;
        if (s[0] == 't' && s[1] == 's') return F_TS;
        if (s[0] == 'i' && s[1] == 'd') return F_ID;
        if (s[0] == 'b' && s[1] == 'p') return F_BP;
        return -1;
    case 3:
        if (!memcmp(s, "dur", 3)) return F_DUR;
        if (!memcmp(s, "cat", 3)) return F_CAT;
        if (!memcmp(s, "pid", 3)) return F_PID;
        if (!memcmp(s, "tid", 3)) return F_TID;
        return -1;
    case 4:
        if (!memcmp(s, "name", 4)) return F_NAME;
        if (!memcmp(s, "args", 4)) return F_ARGS;
        return -1;
    case 7:
        if (!memcmp(s, "bind_id", 7)) return F_BIND_ID;
        return -1;
    default:
        return -1;
    }
}

/* Column numbers, as in schema.EVENT_SCHEMA and FLOW_SCHEMA. */
enum { E_ID, E_TS, E_DUR, E_PH, E_CAT, E_NAME, E_PID, E_TID, E_EID, E_ARG0 };
#define E_ARGS (E_ARG0 + N_ARGS)
#define N_ECOLS (E_ARGS + 1)
enum { L_ID, L_TS, L_PH, L_EID, L_CAT, L_NAME, L_PID, L_TID, L_BP, N_LCOLS };

typedef struct {
    Col ev[N_ECOLS];
    Col fl[N_LCOLS];
    int64_t count;
    int has_span;
    int64_t lo, hi;
} Out;

static void widen(Out *o, int ts_ok, int64_t ts, int dur_ok, int64_t dur) {
    if (!ts_ok)
        return;
    /* both within 2**62: wrapped as Arrow's add would at 2**63 */
    int64_t end = (int64_t)((uint64_t)ts + (uint64_t)(dur_ok ? dur : 0));
    if (!o->has_span) {
        o->has_span = 1;
        o->lo = ts;
        o->hi = end;
        return;
    }
    if (ts < o->lo) o->lo = ts;
    if (end > o->hi) o->hi = end;
}

/* Returns 0, -2 (declined) or another value (no memory). */
static int emit(Out *o, int64_t index, Val *f, Val *args) {
    Val *ph = &f[F_PH];
    if (ph->type != V_STR || ph->escaped)
        return -2;
    size_t phn = (size_t)(ph->e - ph->s);
    if (phn == 1 && (ph->s[0] == 'B' || ph->s[0] == 'E' || ph->s[0] == 'C'))
        return -2;
    int ts_ok, dur_ok;
    int64_t ts, dur;
    if (time_of(&f[F_TS], &ts_ok, &ts) || time_of(&f[F_DUR], &dur_ok, &dur))
        return -2;
    int rc;
    if (phn == 1 && (ph->s[0] == 's' || ph->s[0] == 't' || ph->s[0] == 'f')) {
        Col *c = o->fl;
        Val *id = f[F_ID].type != V_ABSENT ? &f[F_ID] : &f[F_BIND_ID];
        if ((rc = put_i64(&c[L_ID], 1, index)) || (rc = put_i64(&c[L_TS], ts_ok, ts)) ||
            (rc = put_text(&c[L_PH], ph)) || (rc = put_id_text(&c[L_EID], id)) ||
            (rc = put_text(&c[L_CAT], &f[F_CAT])) || (rc = put_text(&c[L_NAME], &f[F_NAME])) ||
            (rc = put_id_text(&c[L_PID], &f[F_PID])) || (rc = put_id_text(&c[L_TID], &f[F_TID])) ||
            (rc = put_text(&c[L_BP], &f[F_BP])))
            return rc;
    } else {
        Col *c = o->ev;
        int is_x = phn == 1 && ph->s[0] == 'X';
        if ((rc = put_i64(&c[E_ID], 1, index)) || (rc = put_i64(&c[E_TS], ts_ok, ts)) ||
            (rc = put_i64(&c[E_DUR], is_x && dur_ok, dur)) || (rc = put_text(&c[E_PH], ph)) ||
            (rc = put_text(&c[E_CAT], &f[F_CAT])) || (rc = put_text(&c[E_NAME], &f[F_NAME])) ||
            (rc = put_id_text(&c[E_PID], &f[F_PID])) || (rc = put_id_text(&c[E_TID], &f[F_TID])) ||
            (rc = put_id_text(&c[E_EID], &f[F_ID])))
            return rc;
        for (int i = 0; i < N_ARGS; i++) {
            if ((rc = put_arg(&c[E_ARG0 + i], &args[i])))
                return rc;
        }
        Val *a = &f[F_ARGS];
        if (a->type == V_OBJ)
            rc = put_compact(&c[E_ARGS], a->s, a->e);
        else
            rc = put_str(&c[E_ARGS], NULL, 0);
        if (rc)
            return rc;
    }
    widen(o, ts_ok, ts, dur_ok, dur);
    return 0;
}

/* The args object, at its "{": its span, and the values of the typed keys. */
static int read_args(Reader *r, Val *whole, Val *args) {
    Val key;
    whole->type = V_OBJ;
    whole->s = r->p;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        whole->e = r->p;
        return 0;
    }
    int more;
    do {
        if (read_key(r, &key) || key.escaped)
            return fail(r);
        int i = arg_index(key.s, (size_t)(key.e - key.s));
        Val tmp;
        Val *v = i >= 0 ? &args[i] : &tmp;
        if (i >= 0 && v->type != V_ABSENT)
            return fail(r); /* twice */
        if (skip_value(r, v, 2))
            return -1;
    } while ((more = next_member(r, '}')) > 0);
    whole->e = r->p;
    return more;
}

/* One event, at its "{". */
static int read_event(Reader *r, Out *o, int64_t index) {
    Val f[N_FIELDS];
    Val args[N_ARGS];
    Val key, tmp;
    for (int i = 0; i < N_FIELDS; i++)
        f[i].type = V_ABSENT;
    for (int i = 0; i < N_ARGS; i++)
        args[i].type = V_ABSENT;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}')
        return fail(r); /* no phase */
    int more;
    do {
        if (read_key(r, &key) || key.escaped)
            return fail(r);
        int i = field_index(key.s, (size_t)(key.e - key.s));
        if (i >= 0 && f[i].type != V_ABSENT)
            return fail(r); /* twice */
        if (i == F_ARGS && r->p < r->end && *r->p == '{') {
            if (read_args(r, &f[F_ARGS], args))
                return -1;
        } else if (skip_value(r, i >= 0 ? &f[i] : &tmp, 1)) {
            return -1;
        }
    } while ((more = next_member(r, '}')) > 0);
    if (more < 0)
        return -1;
    if (f[F_ARGS].type != V_ABSENT && f[F_ARGS].type != V_OBJ && f[F_ARGS].type != V_NULL)
        return fail(r);
    int rc = emit(o, index, f, args);
    if (rc == -2)
        return fail(r);
    if (rc) {
        r->nomem = 1;
        return -1;
    }
    return 0;
}

/* -- into Python ---------------------------------------------------------- */

static PyObject *buf_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->len);
}

/* (null count, validity or None, values, offsets or None) */
static PyObject *col_tuple(Col *c) {
    PyObject *valid = c->nulls ? buf_bytes(&c->valid) : (Py_INCREF(Py_None), Py_None);
    PyObject *data = buf_bytes(&c->data);
    PyObject *offs = (c->kind == K_STR || c->kind == K_LIST) ? buf_bytes(&c->offs) : (Py_INCREF(Py_None), Py_None);
    if (!valid || !data || !offs) {
        Py_XDECREF(valid);
        Py_XDECREF(data);
        Py_XDECREF(offs);
        return NULL;
    }
    return Py_BuildValue("(LNNN)", (long long)c->nulls, valid, data, offs);
}

static PyObject *cols_list(Col *cols, int n) {
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *t = col_tuple(&cols[i]);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static int out_init(Out *o) {
    memset(o, 0, sizeof *o);
    static const int ekinds[E_ARG0] = {K_I64, K_I64, K_I64, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR};
    for (int i = 0; i < E_ARG0; i++)
        if (col_init(&o->ev[i], ekinds[i])) return -1;
    for (int i = 0; i < N_ARGS; i++)
        if (col_init(&o->ev[E_ARG0 + i], ARG_KEYS[i].kind)) return -1;
    if (col_init(&o->ev[E_ARGS], K_STR)) return -1;
    static const int lkinds[N_LCOLS] = {K_I64, K_I64, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR};
    for (int i = 0; i < N_LCOLS; i++)
        if (col_init(&o->fl[i], lkinds[i])) return -1;
    return 0;
}

static void out_free(Out *o) {
    for (int i = 0; i < N_ECOLS; i++)
        col_free(&o->ev[i]);
    for (int i = 0; i < N_LCOLS; i++)
        col_free(&o->fl[i]);
}

static const char PARSE_DOC[] =
    "parse(data, base) -> (count, event columns, flow columns, span) or None\n\n"
    "A piece of whole events (objects, commas between them) as Arrow buffers:\n"
    "each column (null count, validity bitmap or None, values, offsets or None),\n"
    "in the order of EVENT_SCHEMA and FLOW_SCHEMA; span (min ts, max ts + dur)\n"
    "or None. None when the piece is out of the common case (see the source).";

static PyObject *fp_parse(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base;
    if (!PyArg_ParseTuple(args, "y*L", &view, &base))
        return NULL;
    Out *o = malloc(sizeof *o);
    if (!o || out_init(o)) {
        if (o) {
            out_free(o);
            free(o);
        }
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Reader r = {(const char *)view.buf, (const char *)view.buf + view.len, 0};
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    skip_ws(&r);
    int64_t index = base;
    while (r.p < r.end) {
        if (*r.p != '{' || read_event(&r, o, index)) {
            ok = 0;
            break;
        }
        index++;
        skip_ws(&r);
        if (r.p >= r.end)
            break;
        if (*r.p != ',') {
            ok = 0;
            break;
        }
        r.p++;
        skip_ws(&r);
        if (r.p >= r.end) { /* a trailing comma */
            ok = 0;
            break;
        }
    }
    o->count = index - base;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *res = NULL;
    if (r.nomem) {
        PyErr_NoMemory();
    } else if (!ok) {
        Py_INCREF(Py_None);
        res = Py_None;
    } else {
        PyObject *ev = cols_list(o->ev, N_ECOLS);
        PyObject *fl = ev ? cols_list(o->fl, N_LCOLS) : NULL;
        PyObject *span = o->has_span ? Py_BuildValue("(LL)", (long long)o->lo, (long long)o->hi)
                                     : (Py_INCREF(Py_None), Py_None);
        if (ev && fl && span)
            res = Py_BuildValue("(LNNN)", (long long)o->count, ev, fl, span);
        else {
            Py_XDECREF(ev);
            Py_XDECREF(fl);
            Py_XDECREF(span);
        }
    }
    out_free(o);
    free(o);
    return res;
}

static PyMethodDef methods[] = {
    {"parse", fp_parse, METH_VARARGS, PARSE_DOC},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastparse", "The common case of a piece's parse, in C.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__fastparse(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    PyObject *keys = PyTuple_New(N_ARGS);
    if (!keys) {
        Py_DECREF(m);
        return NULL;
    }
    static const char *kind_names[] = {"int64", "double", "string", "list<item: int64>"};
    for (int i = 0; i < N_ARGS; i++) {
        ARG_KEYS[i].len = strlen(ARG_KEYS[i].key);
        PyObject *t = Py_BuildValue("(ss)", ARG_KEYS[i].key, kind_names[ARG_KEYS[i].kind]);
        if (!t) {
            Py_DECREF(keys);
            Py_DECREF(m);
            return NULL;
        }
        PyTuple_SET_ITEM(keys, i, t);
    }
    if (PyModule_AddObject(m, "ARG_KEYS", keys)) {
        Py_DECREF(keys);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
