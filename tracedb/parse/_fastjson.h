/* The JSON reader of the C reader (_fastparse.c): validates the text of a
   piece as it goes (RFC 8259, UTF-8), and says where each value is and
   what it is, without building anything. Its functions return 0, or -1
   with the reason in Reader.why when the piece is declined.

   A header of static functions, included by _fastparse.c alone: one
   translation unit, so the compiler inlines across both as before. */

#ifndef TRACEDB_FASTJSON_H
#define TRACEDB_FASTJSON_H

#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64
#define TIME_LIMIT_NS (INT64_C(1) << 62)

/* -- the reader ---------------------------------------------------------- */

typedef struct {
    const char *p, *end;
    int nomem;       /* set with a return of -1 when memory ran out, not the text */
    const char *why; /* set with a return of -1 when the piece is declined: why */
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

/* Past a run of whitespace, from p (before end). A pretty-printed trace
   has runs between most tokens: most are one space (after ':' and ','),
   looked at byte by byte (the C reader 2.5-4% faster on the bench's rank
   files and 1 GiB trace than with them in the loop below); the others
   (a line's indent) with SSE2, 16 bytes at once, the first not
   whitespace found by its bit, without a branch for each byte. */
#ifdef __SSE2__
/* 0xFF in each of 16 bytes that is whitespace, else 0 */
static inline __m128i ws16(__m128i v) {
    return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\n'))),
                        _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))));
}
#endif

static inline const char *ws_run_end(const char *p, const char *end) {
    if (p < end && !is_ws(*p))
        return p;
    if (p + 1 < end && !is_ws(p[1]))
        return p + 1;
#ifdef __SSE2__
    while (end - p >= 16) {
        unsigned other = ~(unsigned)_mm_movemask_epi8(ws16(_mm_loadu_si128((const __m128i *)p))) & 0xFFFFu;
        if (other)
            return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < end && is_ws(*p))
        p++;
    return p;
}

static inline void skip_ws(Reader *r) {
    r->p = ws_run_end(r->p, r->end);
}

/* Out of the common case: the piece is declined (the first reason stays). */
static int fail(Reader *r, const char *why) {
    if (!r->why)
        r->why = why;
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

#ifdef __SSE2__
/* A bit for each of 16 bytes where a string's plain run stops: a quote, a
   backslash, a control character or a byte past ASCII (both less than
   0x20 signed). */
static inline unsigned string_stops16(__m128i v) {
    __m128i stops = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                              _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                 _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return (unsigned)_mm_movemask_epi8(stops);
}
#endif

/* A string, at its opening quote: valid UTF-8, no control characters,
   valid escapes (no surrogate escapes). */
static int read_string_long(Reader *r, Val *v) {
    const unsigned char *p = (const unsigned char *)r->p + 1;
    const unsigned char *end = (const unsigned char *)r->end;
    v->type = V_STR;
    v->escaped = 0;
    v->s = (const char *)p;
    for (;;) {
        /* runs of plain ASCII first: 16 bytes at a time (SSE2: a byte past
           ASCII or a control character is less than 0x20 signed), 8, then
           one by one */
#ifdef __SSE2__
        while (end - p >= 16) {
            unsigned at = string_stops16(_mm_loadu_si128((const __m128i *)p));
            if (at) {
                p += __builtin_ctz(at);
                goto special; /* p is at it: the loops below would look at it again */
            }
            p += 16;
        }
#endif
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
#ifdef __SSE2__
    special:
#endif
        if (p >= end)
            return fail(r, "a string runs past the piece");
        unsigned char c = *p;
        if (c == '"') {
            v->e = (const char *)p;
            r->p = (const char *)p + 1;
            return 0;
        }
        if (c == '\\') {
            v->escaped = 1;
            if (p + 1 >= end)
                return fail(r, "a string runs past the piece");
            char x = (char)p[1];
            if (x == 'u') {
                if (p + 6 > end)
                    return fail(r, "a string runs past the piece");
                int h0 = hexval(p[2]), h1 = hexval(p[3]), h2 = hexval(p[4]), h3 = hexval(p[5]);
                if (h0 < 0 || h1 < 0 || h2 < 0 || h3 < 0)
                    return fail(r, "an invalid \\u escape");
                int cp = (h0 << 12) | (h1 << 8) | (h2 << 4) | h3;
                if (cp >= 0xD800 && cp <= 0xDFFF)
                    return fail(r, "a \\u escape of a surrogate");
                p += 6;
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' || x == 'r' ||
                       x == 't') {
                p += 2;
            } else {
                return fail(r, "an invalid escape");
            }
            continue;
        }
        if (c < 0x20)
            return fail(r, "a control character in a string");
        /* UTF-8, as RFC 3629 has it */
        if (c >= 0xC2 && c <= 0xDF) {
            if (p + 1 >= end || (p[1] & 0xC0) != 0x80)
                return fail(r, "invalid UTF-8");
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (p + 2 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
                return fail(r, "invalid UTF-8");
            if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F))
                return fail(r, "invalid UTF-8");
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (p + 3 >= end || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
                return fail(r, "invalid UTF-8");
            if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F))
                return fail(r, "invalid UTF-8");
            p += 4;
        } else {
            return fail(r, "invalid UTF-8");
        }
    }
}

/* read_string, inline where the string ends within its first 16 bytes
   with nothing in them to look at (an escape, a control character, a
   byte past ASCII): most keys and names. */
static inline int read_string(Reader *r, Val *v) {
#ifdef __SSE2__
    const char *p = r->p + 1;
    if (r->end - p >= 16) {
        unsigned at = string_stops16(_mm_loadu_si128((const __m128i *)p));
        if (at && p[__builtin_ctz(at)] == '"') {
            v->type = V_STR;
            v->escaped = 0;
            v->s = p;
            v->e = p + __builtin_ctz(at);
            r->p = v->e + 1;
            return 0;
        }
    }
#endif
    return read_string_long(r, v);
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Past a run of digits, from p (before end): 8 bytes at a time (a byte is
   a digit when, xor '0', it is 0-9: its high nibble stays 0, with 6 added
   too; a carry out of a byte that is not a digit reaches only the bytes
   after it), then one by one. */
static inline const char *digits_end(const char *p, const char *end) {
    while (end - p >= 8) {
        uint64_t w, x;
        memcpy(&w, p, 8);
        x = w ^ (ONES * '0');
        uint64_t other = (x | (x + ONES * 6)) & (ONES * 0xF0);
        if (other)
            return p + (__builtin_ctzll(other) >> 3);
        p += 8;
    }
    while (p < end && is_digit(*p))
        p++;
    return p;
}

/* A number's text as a double, by Python's own reading: correctly
   rounded, as float(Decimal(text)) in values.py, and blind to the C locale (strtod is not). -1
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
        return fail(r, "not JSON (expected a value)");
    const char *digits = p;
    if (*p == '0')
        p++;
    else
        p = digits_end(p, end);
    long magnitude = (long)(p - digits) - 1; /* about log10 of the value */
    if (p < end && *p == '.') {
        p++;
        const char *f = p;
        p = digits_end(p, end);
        if (p == f)
            return fail(r, "not JSON (a number without digits after the point)");
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
            return fail(r, "not JSON (an exponent without digits)");
        magnitude += minus ? -e : e;
        v->exp = 1;
        v->is_int = 0;
    }
    /* A number past a double's range (1.8e308) that is not an integer:
       the reference writes null for it in args, declined. */
    if (!v->is_int && (magnitude > 308 || (magnitude == 308 && past_double(v->s, p))))
        return fail(r, "a number with a fraction past a double's range");
    v->e = p;
    r->p = p;
    return 0;
}

/* A member's name, at its opening quote, and the colon after it. */
static inline int read_key(Reader *r, Val *key) {
    if (r->p >= r->end || *r->p != '"' || read_string(r, key))
        return fail(r, "not JSON (expected a key)");
    skip_ws(r);
    if (r->p >= r->end || *r->p != ':')
        return fail(r, "not JSON (expected ':')");
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
    return fail(r, "not JSON (expected ',' or the end of a container)");
}

static int skip_value(Reader *r, Val *v, int depth);

static int skip_container(Reader *r, int depth, char close) {
    Val v;
    if (depth > MAX_DEPTH)
        return fail(r, "nested deeper than 64 levels");
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
        return fail(r, "not JSON (expected a literal)");
    r->p += n;
    return 0;
}

/* Any value; ``v`` says what it was and where (containers: skipped, their
   span in s..e). */
static int skip_value(Reader *r, Val *v, int depth) {
    if (r->p >= r->end)
        return fail(r, "not JSON (the piece ends inside a value)");
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

/* Microseconds as written -> exact ns (a finer fraction rounded half to
   even, as values.to_ns does); -1 out of the common case. */
static int time_ns(const Val *v, int64_t *out) {
    if (v->exp)
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
    if (p < v->e)
        for (p++; p < v->e && f < 3; p++, f++)
            frac = frac * 10 + (*p - '0');
    for (; f < 3; f++)
        frac *= 10;
    int64_t ns = whole * 1000 + frac;
    if (p < v->e) { /* past ns: p at the first digit below 1 ns */
        int first = *p++ - '0', rest = 0;
        for (; p < v->e; p++)
            rest |= *p != '0';
        if (first > 5 || (first == 5 && (rest || (ns & 1))))
            ns++;
    }
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

#endif
