/* The C reader: the fast path of a piece's parse (tracedb/parse/pieces.py).

   parse(data, base) reads a piece (whole events, each a JSON object, with
   commas between them) and returns its columns as Arrow buffers, or, when
   anything in it is out of the common case, why (a str): then pieces.py
   parses the piece with the reference reader (reader.py), whose value rules
   (values.py) this file mirrors. benchmarks/declines.py counts the reasons
   on real traces.

   It takes only what it reads exactly as the reference does, and declines
   the rest:
   - JSON that is valid (RFC 8259, UTF-8): anything else is declined, and
     the reference says what is wrong;
   - every event an object with a string "ph" other than "B", "E", "C"
     (pairs and counters: the reference's row rule);
   - ts and dur: null, or numbers without an exponent, within +-2**62 ns
     (exact from the text, no double; past 1 ns rounded half to even);
   - cat, name, bp: null or strings without escapes; pid, tid, id, bind_id:
     null, strings without escapes, or integers (their text, "-0" aside);
   - args: an object (or null), its text without the whitespace outside
     strings; its keys without escapes, those of the typed columns once
     each, with values of the column's type or null (integers within int64;
     a list of them);
   - no key escaped or twice at an event's top level, no "\u" escape of a
     surrogate anywhere, no number with a fraction or an exponent past a
     double's range (the reference writes it as null), nesting at most 64
     deep.

   _fastjson.h is the JSON reader; this file puts values into columns.
   Nothing here knows Arrow beyond its buffer layout: validity bitmaps
   (LSB first), int32 offsets, little-endian values. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_fastjson.h"

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

/* n bytes from src to dst, most of them few (a key, a number, a name):
   up to 16 copied as two overlapping words here, not by a call to memcpy. */
static inline void copy_short(char *dst, const char *src, size_t n) {
    if (n >= 8 && n <= 16) {
        uint64_t head, tail;
        memcpy(&head, src, 8);
        memcpy(&tail, src + n - 8, 8);
        memcpy(dst, &head, 8);
        memcpy(dst + n - 8, &tail, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t head, tail;
        memcpy(&head, src, 4);
        memcpy(&tail, src + n - 4, 4);
        memcpy(dst, &head, 4);
        memcpy(dst + n - 4, &tail, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            dst[i] = src[i];
    } else {
        memcpy(dst, src, n);
    }
}

/* buf_put of text (copy_short) */
static inline int buf_put_text(Buf *b, const char *src, size_t n) {
    if (b->len + n > b->cap && buf_grow(b, n))
        return -1;
    copy_short(b->p + b->len, src, n);
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
        return -2; /* declined: the reference takes it */
    int32_t o = (int32_t)at;
    return buf_put(&c->offs, &o, 4);
}

/* Rows up to ``row`` (not yet put) as nulls, at once. A typed args column
   is null for most events: its value is put where the event has the key,
   and the rows before it are padded here (zero bits and values, the last
   offset repeated), as a null put for each would have written them. */
static int col_pad(Col *c, int64_t row) {
    int64_t k = row - c->n;
    if (k <= 0)
        return 0;
    size_t bytes = (size_t)((row + 7) >> 3);
    if (bytes > c->valid.len) {
        if (buf_grow(&c->valid, bytes - c->valid.len))
            return -1;
        memset(c->valid.p + c->valid.len, 0, bytes - c->valid.len);
        c->valid.len = bytes;
    }
    if (c->kind == K_I64 || c->kind == K_F64) {
        size_t n = (size_t)k * 8;
        if (buf_grow(&c->data, n))
            return -1;
        memset(c->data.p + c->data.len, 0, n);
        c->data.len += n;
    } else {
        size_t n = (size_t)k * 4;
        if (buf_grow(&c->offs, n))
            return -1;
        char *at = c->offs.p + c->offs.len;
        for (int64_t i = 0; i < k; i++)
            memcpy(at + 4 * (size_t)i, at - 4, 4);
        c->offs.len += n;
    }
    c->nulls += k;
    c->n = row;
    return 0;
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
    if (s && buf_put_text(&c->data, s, n))
        return -1;
    return col_offset(c);
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
        /* "-0" is "0" as Python writes it */
        if (!v->is_int || (v->e - v->s == 2 && v->s[0] == '-' && v->s[1] == '0'))
            return -2;
        return put_str(c, v->s, (size_t)(v->e - v->s));
    }
    return put_text(c, v);
}

/* -- the typed args columns --------------------------------------------- */

/* The order and types of schema.ARG_COLUMNS (checked by pieces.py). */
#define ARG_LIST(X) \
    X("correlation", K_I64) \
    X("External id", K_I64) \
    X("device", K_I64) \
    X("stream", K_I64) \
    X("grid", K_LIST) \
    X("block", K_LIST) \
    X("bytes", K_I64) \
    X("memory bandwidth (GB/s)", K_F64) \
    X("Collective name", K_STR) \
    X("In msg nelems", K_I64) \
    X("Out msg nelems", K_I64) \
    X("Group size", K_I64) \
    X("dtype", K_STR) \
    X("Process Group Name", K_STR) \
    X("Process Group Description", K_STR) \
    X("Process Group Ranks", K_STR) \
    X("Sequence number", K_I64)

typedef struct {
    const char *key;
    int kind;
} ArgKey;

static const ArgKey ARG_KEYS[] = {
#define ARG_KEY(key, kind) {key, kind},
    ARG_LIST(ARG_KEY)
#undef ARG_KEY
};
#define N_ARGS ((int)(sizeof ARG_KEYS / sizeof ARG_KEYS[0]))

/* The typed column of an args key, or -1: each key's length and bytes
   compared as constants (the compiler's inline compares, not a call to
   memcmp for each key of each event). */
static int arg_index(const char *s, size_t n) {
    int i = 0;
#define ARG_IS(key, kind)                                                    \
    if (n == sizeof key - 1 && memcmp(s, key, sizeof key - 1) == 0)         \
        return i;                                                            \
    i++;
    ARG_LIST(ARG_IS)
#undef ARG_IS
    return -1;
}

/* A string in an int64 column, as values.as_int reads it (Python's int()):
   1 with its value, 0 where it reads as null, -1 to decline (what int()
   may read that this does not: signs, underscores, spaces, non-ASCII). */
static int str_int(const Val *v, int64_t *out) {
    if (v->escaped)
        return -1;
    const char *p = v->s;
    int plain = p < v->e;
    for (const char *q = p; q < v->e; q++) {
        unsigned char ch = (unsigned char)*q;
        if (ch >= 0x80 || ch == '+' || ch == '_' || ch == ' ')
            return -1;
        if (!(is_digit((char)ch) || (ch == '-' && q == p && q + 1 < v->e)))
            plain = 0;
    }
    if (!plain)
        return 0;
    return int_value(v, out) ? 0 : 1; /* past int64: null */
}

/* A typed args column's value, by values.ARG_CONVERTERS: 0, -2 (declined)
   or -1 (no memory). */
static int put_arg(Col *c, const Val *v) {
    int64_t x;
    switch (c->kind) {
    case K_I64:
        if (v->type == V_NUM) {
            if (!v->is_int)
                return -2;
            return int_value(v, &x) ? put_i64(c, 0, 0) : put_i64(c, 1, x); /* past int64: null */
        }
        if (v->type == V_STR) {
            int got = str_int(v, &x);
            return got < 0 ? -2 : put_i64(c, got, x);
        }
        return put_i64(c, 0, 0); /* null, a boolean, an object or array */
    case K_F64:
        if (v->type != V_NUM)
            return put_f64(c, 0, 0); /* not a number: null */
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
        if (v->type != V_ARR) { /* not a list: null */
            if (col_bit(c, 0))
                return -1;
            return col_offset(c);
        }
        {
            Reader r = {v->s + 1, v->e - 1, 0, NULL};
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

#ifdef __SSE2__
/* Copies the run at *p to *out, 16 bytes at a time, to the first quote and
   the first whitespace (outside a string) or backslash (``in_string``), or
   to the last 16 bytes before e: each block stored whole, the output then
   moved past the bytes before that one. The output is never ahead of the
   input (buf_compact), so 16 more bytes fit while the input has 16. */
static inline void copy_run16(const char **pp, const char *e, char **outp, int in_string) {
    const char *p = *pp;
    char *out = *outp;
    while (e - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i stop = in_string ? _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')) : ws16(v);
        unsigned at = (unsigned)_mm_movemask_epi8(_mm_or_si128(stop, _mm_cmpeq_epi8(v, _mm_set1_epi8('"'))));
        _mm_storeu_si128((__m128i *)out, v);
        if (at) {
            out += __builtin_ctz(at);
            p += __builtin_ctz(at);
            break;
        }
        out += 16;
        p += 16;
    }
    *pp = p;
    *outp = out;
}
#endif

/* JSON text (valid: the reader took it) appended to b without the
   whitespace outside strings */
static int buf_compact(Buf *b, const char *s, const char *e) {
    if (buf_grow(b, (size_t)(e - s)))
        return -1;
    char *out = b->p + b->len;
    const char *p = s;
    while (p < e) {
#ifdef __SSE2__
        copy_run16(&p, e, &out, 0);
        if (p >= e)
            break;
#endif
        char ch = *p++;
        if (is_ws(ch)) {
            p = ws_run_end(p, e);
            continue;
        }
        *out++ = ch;
        if (ch != '"')
            continue;
        /* a string, to its closing quote, copied as it is */
        for (;;) {
#ifdef __SSE2__
            copy_run16(&p, e, &out, 1);
#endif
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
    b->len = (size_t)(out - b->p);
    return 0;
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

/* The events' lanes (schema.EVENT_LANES): each event's row goes to its
   category's lane, each lane a batch of its own (its own buffers), so that
   finalize writes row groups of one lane without moving rows and holds no
   other lane's rows with a lane's (store.py). Lane 0 has the categories
   not listed. */
#define N_LANES 4
static const struct {
    const char *cat;
    int lane;
} LANE_CATS[] = {
    {"cpu_op", 1}, {"cuda_runtime", 2}, {"cuda_driver", 2},
    {"kernel", 3}, {"gpu_memcpy", 3}, {"gpu_memset", 3}, {"gpu_user_annotation", 3},
};
#define N_LANE_CATS ((int)(sizeof LANE_CATS / sizeof LANE_CATS[0]))

static int lane_of(const Val *cat) {
    if (cat->type != V_STR || cat->escaped)
        return 0;
    size_t n = (size_t)(cat->e - cat->s);
    for (int i = 0; i < N_LANE_CATS; i++)
        if (strlen(LANE_CATS[i].cat) == n && memcmp(LANE_CATS[i].cat, cat->s, n) == 0)
            return LANE_CATS[i].lane;
    return 0;
}

/* -- self time's slices ------------------------------------------------ */

/* A thread as the events write it: its pid and tid text (pointers into the
   piece, which the parse holds), numbered in the order first seen. */
typedef struct {
    const char *pid, *tid;
    size_t np, nt;
    uint64_t hash;
} Thread;

typedef struct {
    Thread *all;       /* in the order first seen */
    int32_t n, cap;
    int32_t *slots;    /* open addressing: a thread's number + 1, 0 empty */
    uint32_t nslots;   /* a power of 2, at least twice n */
    int32_t last;      /* the thread found last (events come in runs), -1 none */
} Threads;

static uint64_t fnv(const char *s, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* Short texts (ids): compared here, not by a call to memcmp for each event. */
static inline int same_text(const char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static int thread_is(const Thread *t, const char *pid, size_t np, const char *tid, size_t nt) {
    return t->np == np && t->nt == nt && same_text(t->pid, pid, np) && same_text(t->tid, tid, nt);
}

static int threads_grow(Threads *t) {
    uint32_t nslots = t->nslots ? t->nslots * 2 : 64;
    int32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return -1;
    for (int32_t k = 0; k < t->n; k++) {
        uint32_t i = (uint32_t)t->all[k].hash & (nslots - 1);
        while (slots[i])
            i = (i + 1) & (nslots - 1);
        slots[i] = k + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 0;
}

/* The number of the thread (pid, tid): their text as staged (put_id_text's),
   so that threads are the staged columns' pairs. -1 when memory ran out. */
static int32_t thread_of(Threads *t, const Val *pid, const Val *tid) {
    size_t np = (size_t)(pid->e - pid->s), nt = (size_t)(tid->e - tid->s);
    if (t->last >= 0 && thread_is(&t->all[t->last], pid->s, np, tid->s, nt))
        return t->last;
    if ((uint32_t)(t->n + 1) * 2 > t->nslots && threads_grow(t))
        return -1;
    uint64_t h = fnv(tid->s, nt, fnv(pid->s, np, UINT64_C(0xcbf29ce484222325)) * 31 + np);
    uint32_t i = (uint32_t)h & (t->nslots - 1);
    for (; t->slots[i]; i = (i + 1) & (t->nslots - 1)) {
        Thread *c = &t->all[t->slots[i] - 1];
        if (c->hash == h && thread_is(c, pid->s, np, tid->s, nt))
            return t->last = t->slots[i] - 1;
    }
    if (t->n == t->cap) {
        int32_t cap = t->cap ? t->cap * 2 : 16;
        Thread *all = realloc(t->all, (size_t)cap * sizeof *all);
        if (!all)
            return -1;
        t->all = all;
        t->cap = cap;
    }
    t->all[t->n] = (Thread){pid->s, tid->s, np, nt, h};
    t->slots[i] = t->n + 1;
    return t->last = t->n++;
}

/* The piece's slices for self time's stream (store._SumsStream), as
   store._slice_rows picks them from a staged part: ph X with a start, a
   duration of 0 or more, a pid and a tid; in event order. */
typedef struct {
    Buf ts, dur, eid; /* int64 */
    Buf thread;       /* int32: the number in Threads */
    Threads threads;
} Slices;

static int add_slice(Slices *sl, int64_t index, int64_t ts, int64_t dur, const Val *pid, const Val *tid) {
    int32_t k = thread_of(&sl->threads, pid, tid);
    if (k < 0)
        return -1;
    return buf_put(&sl->ts, &ts, 8) || buf_put(&sl->dur, &dur, 8) || buf_put(&sl->eid, &index, 8) ||
           buf_put(&sl->thread, &k, 4) ? -1 : 0;
}

static void slices_free(Slices *sl) {
    free(sl->ts.p);
    free(sl->dur.p);
    free(sl->eid.p);
    free(sl->thread.p);
    free(sl->threads.all);
    free(sl->threads.slots);
}

typedef struct {
    Col ev[N_LANES][N_ECOLS];
    Col fl[N_LCOLS];
    Slices slices;
    int64_t count;
    int has_span;
    int64_t lo, hi;
    Buf args;      /* the event's args as written to its column (read_args) */
    char why[128]; /* why the piece was declined */
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

/* What a value is, for a reason to decline it. */
static const char *val_kind(const Val *v) {
    switch (v->type) {
    case V_STR:
        return v->escaped ? "a string with escapes" : "a string";
    case V_NUM:
        return v->exp ? "a number with an exponent" : !v->is_int ? "a number with a fraction" : "an integer";
    case V_TRUE:
    case V_FALSE:
        return "a boolean";
    case V_OBJ:
        return "an object";
    case V_ARR:
        return "an array (or one with an item not an int64)";
    default:
        return "null";
    }
}

/* Declines the event for the value of ``key``: o->why says so. */
static int decline(Out *o, const char *key, const Val *v) {
    snprintf(o->why, sizeof o->why, "%s: %s", key, val_kind(v));
    return -2;
}

/* Declines the event for a time time_of does not take. */
static int decline_time(Out *o, const char *key, const Val *v) {
    if (v->type == V_NUM && !v->exp) {
        snprintf(o->why, sizeof o->why, "%s: past +-2**62 ns", key);
        return -2;
    }
    return decline(o, key, v);
}

/* A column's value from ``v`` (the value of ``key``); 0, -2 (declined, with
   o->why) or -1 (no memory). */
#define PUT(call, key, v)                                                    \
    do {                                                                     \
        int rc_ = (call);                                                    \
        if (rc_ == -2)                                                       \
            return col_past_offsets(o) ? -2 : decline(o, (key), (v));        \
        if (rc_)                                                             \
            return rc_;                                                      \
    } while (0)

/* Whether a column outgrew int32 offsets (col_offset's -2). */
static int col_past_offsets(Out *o) {
    for (int l = 0; l < N_LANES; l++)
        for (int i = 0; i < N_ECOLS; i++)
            if (o->ev[l][i].offs.len && o->ev[l][i].data.len > INT32_MAX) goto past;
    for (int i = 0; i < N_LCOLS; i++)
        if (o->fl[i].offs.len && o->fl[i].data.len > INT32_MAX) goto past;
    return 0;
past:
    snprintf(o->why, sizeof o->why, "a column past 2 GiB");
    return 1;
}

/* One event's rows from its fields: 0, -2 (declined, with o->why) or -1
   (no memory). */
static int emit(Out *o, int64_t index, Val *f, Val *args) {
    Val *ph = &f[F_PH];
    if (ph->type == V_ABSENT)
        return snprintf(o->why, sizeof o->why, "an event without a phase"), -2;
    if (ph->type != V_STR || ph->escaped)
        return decline(o, "ph", ph);
    size_t phn = (size_t)(ph->e - ph->s);
    if (phn == 1 && (ph->s[0] == 'B' || ph->s[0] == 'E' || ph->s[0] == 'C'))
        return snprintf(o->why, sizeof o->why, "phase %c", ph->s[0]), -2;
    int ts_ok, dur_ok;
    int64_t ts, dur;
    if (time_of(&f[F_TS], &ts_ok, &ts))
        return decline_time(o, "ts", &f[F_TS]);
    if (time_of(&f[F_DUR], &dur_ok, &dur))
        return decline_time(o, "dur", &f[F_DUR]);
    if (phn == 1 && (ph->s[0] == 's' || ph->s[0] == 't' || ph->s[0] == 'f')) {
        Col *c = o->fl;
        Val *id = f[F_ID].type != V_ABSENT ? &f[F_ID] : &f[F_BIND_ID];
        PUT(put_i64(&c[L_ID], 1, index), "event_id", id);
        PUT(put_i64(&c[L_TS], ts_ok, ts), "ts", &f[F_TS]);
        PUT(put_text(&c[L_PH], ph), "ph", ph);
        PUT(put_id_text(&c[L_EID], id), "id", id);
        PUT(put_text(&c[L_CAT], &f[F_CAT]), "cat", &f[F_CAT]);
        PUT(put_text(&c[L_NAME], &f[F_NAME]), "name", &f[F_NAME]);
        PUT(put_id_text(&c[L_PID], &f[F_PID]), "pid", &f[F_PID]);
        PUT(put_id_text(&c[L_TID], &f[F_TID]), "tid", &f[F_TID]);
        PUT(put_text(&c[L_BP], &f[F_BP]), "bp", &f[F_BP]);
    } else {
        Col *c = o->ev[lane_of(&f[F_CAT])];
        int is_x = phn == 1 && ph->s[0] == 'X';
        PUT(put_i64(&c[E_ID], 1, index), "event_id", ph);
        PUT(put_i64(&c[E_TS], ts_ok, ts), "ts", &f[F_TS]);
        PUT(put_i64(&c[E_DUR], is_x && dur_ok, dur), "dur", &f[F_DUR]);
        PUT(put_text(&c[E_PH], ph), "ph", ph);
        PUT(put_text(&c[E_CAT], &f[F_CAT]), "cat", &f[F_CAT]);
        PUT(put_text(&c[E_NAME], &f[F_NAME]), "name", &f[F_NAME]);
        PUT(put_id_text(&c[E_PID], &f[F_PID]), "pid", &f[F_PID]);
        PUT(put_id_text(&c[E_TID], &f[F_TID]), "tid", &f[F_TID]);
        PUT(put_id_text(&c[E_EID], &f[F_ID]), "id", &f[F_ID]);
        /* the typed args the event has; the rows between are padded (col_pad) */
        int64_t row = c[E_ID].n - 1;
        for (int i = 0; i < N_ARGS; i++) {
            if (args[i].type == V_ABSENT)
                continue;
            if (col_pad(&c[E_ARG0 + i], row))
                return -1;
            PUT(put_arg(&c[E_ARG0 + i], &args[i]), ARG_KEYS[i].key, &args[i]);
        }
        Val *a = &f[F_ARGS];
        if (a->type == V_OBJ)
            PUT(put_str(&c[E_ARGS], o->args.p, o->args.len), "args", a);
        else
            PUT(put_str(&c[E_ARGS], NULL, 0), "args", a);
        /* put_id_text took pid and tid: present, each is an integer's or a string's text */
        Val *pid = &f[F_PID], *tid = &f[F_TID];
        if (is_x && ts_ok && dur_ok && dur >= 0 && pid->type != V_ABSENT && pid->type != V_NULL &&
            tid->type != V_ABSENT && tid->type != V_NULL && add_slice(&o->slices, index, ts, dur, pid, tid))
            return -1;
    }
    widen(o, ts_ok, ts, dur_ok, dur);
    return 0;
}

/* The args object, at its "{": its span, the values of the typed keys,
   and its text without the whitespace outside strings, in ``text``: each
   key and scalar value copied as read, a container compacted
   (buf_compact), instead of a second pass over the whole object. */
static int read_args(Reader *r, Val *whole, Val *args, Buf *text) {
    Val key;
    whole->type = V_OBJ;
    whole->s = r->p;
    text->len = 0;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        whole->e = r->p;
        return buf_put(text, "{}", 2) ? (r->nomem = 1, -1) : 0;
    }
    int more;
    char sep = '{';
    do {
        if (read_key(r, &key) || key.escaped)
            return fail(r, "an args key with escapes");
        int i = arg_index(key.s, (size_t)(key.e - key.s));
        Val tmp;
        Val *v = i >= 0 ? &args[i] : &tmp;
        if (i >= 0 && v->type != V_ABSENT)
            return fail(r, "a typed args key twice");
        /* the separator, then the key with its quotes and a colon */
        size_t nk = (size_t)(key.e - key.s) + 2;
        if (buf_grow(text, nk + 2))
            return r->nomem = 1, -1;
        text->p[text->len++] = sep;
        copy_short(text->p + text->len, key.s - 1, nk);
        text->len += nk;
        text->p[text->len++] = ':';
        sep = ',';
        const char *at = r->p;
        if (skip_value(r, v, 2))
            return -1;
        if (v->type == V_OBJ || v->type == V_ARR ? buf_compact(text, at, r->p)
                                                 : buf_put_text(text, at, (size_t)(r->p - at)))
            return r->nomem = 1, -1;
    } while ((more = next_member(r, '}')) > 0);
    if (more == 0 && buf_put(text, "}", 1))
        return r->nomem = 1, -1;
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
        return fail(r, "an event without a phase");
    int more;
    do {
        if (read_key(r, &key) || key.escaped)
            return fail(r, "an event key with escapes");
        int i = field_index(key.s, (size_t)(key.e - key.s));
        if (i >= 0 && f[i].type != V_ABSENT)
            return fail(r, "an event key twice");
        if (i == F_ARGS && r->p < r->end && *r->p == '{') {
            if (read_args(r, &f[F_ARGS], args, &o->args))
                return -1;
        } else if (skip_value(r, i >= 0 ? &f[i] : &tmp, 1)) {
            return -1;
        }
    } while ((more = next_member(r, '}')) > 0);
    if (more < 0)
        return -1;
    if (f[F_ARGS].type != V_ABSENT && f[F_ARGS].type != V_OBJ && f[F_ARGS].type != V_NULL)
        return fail(r, "args neither an object nor null");
    int rc = emit(o, index, f, args);
    if (rc == -2)
        return fail(r, o->why);
    if (rc) {
        r->nomem = 1;
        return -1;
    }
    return 0;
}

/* Each lane's typed args columns padded with nulls to its last row
   (col_pad); -1 when memory ran out. */
static int pad_args(Out *o) {
    for (int l = 0; l < N_LANES; l++)
        for (int i = 0; i < N_ARGS; i++)
            if (col_pad(&o->ev[l][E_ARG0 + i], o->ev[l][E_ID].n))
                return -1;
    return 0;
}

/* -- into Python ---------------------------------------------------------- */

/* A column's buffer handed to Python as it is: a read-only buffer object
   that owns the memory the reader wrote (freed with it), so that Arrow
   wraps it (pa.py_buffer) without a copy. A copy into bytes was a second
   write of every byte, on freshly faulted pages, with the GIL held. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Owned;

static int owned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Owned *o = (Owned *)self;
    static char empty[1];
    return PyBuffer_FillInfo(view, self, o->p ? o->p : empty, o->len, 1, flags);
}

static void owned_dealloc(PyObject *self) {
    free(((Owned *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static Py_ssize_t owned_length(PyObject *self) {
    return ((Owned *)self)->len;
}

static PyBufferProcs owned_as_buffer = {owned_getbuffer, NULL};
static PySequenceMethods owned_as_sequence = {.sq_length = owned_length};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_fastparse.Buffer",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_as_sequence = &owned_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column buffer the C reader wrote (read-only; the buffer protocol; len() in bytes).",
};

/* The buffer's memory goes to a new Owned (b is left empty), trimmed to
   what was written. */
static PyObject *buf_take(Buf *b) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o)
        return NULL;
    o->p = b->p;
    o->len = (Py_ssize_t)b->len;
    if (b->p && b->len < b->cap) {
        char *p = realloc(b->p, b->len ? b->len : 1);
        if (p)
            o->p = p;
    }
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

/* (null count, validity or None, values, offsets or None) */
static PyObject *col_tuple(Col *c) {
    PyObject *valid = c->nulls ? buf_take(&c->valid) : (Py_INCREF(Py_None), Py_None);
    PyObject *data = buf_take(&c->data);
    PyObject *offs = (c->kind == K_STR || c->kind == K_LIST) ? buf_take(&c->offs) : (Py_INCREF(Py_None), Py_None);
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

/* (threads: [(pid, tid)], thread, ts, dur, event_id): each slice's thread
   number (int32) into threads, and its int64 values */
static PyObject *slices_tuple(Slices *sl) {
    PyObject *threads = PyList_New(sl->threads.n);
    for (int32_t k = 0; threads && k < sl->threads.n; k++) {
        Thread *t = &sl->threads.all[k];
        PyObject *pair = Py_BuildValue("(s#s#)", t->pid, (Py_ssize_t)t->np, t->tid, (Py_ssize_t)t->nt);
        if (!pair)
            Py_CLEAR(threads);
        else
            PyList_SET_ITEM(threads, k, pair);
    }
    if (!threads)
        return NULL;
    return Py_BuildValue("(NNNNN)", threads, buf_take(&sl->thread), buf_take(&sl->ts), buf_take(&sl->dur),
                         buf_take(&sl->eid));
}

static int out_init(Out *o) {
    memset(o, 0, sizeof *o);
    o->slices.threads.last = -1;
    static const int ekinds[E_ARG0] = {K_I64, K_I64, K_I64, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR};
    for (int l = 0; l < N_LANES; l++) {
        Col *ev = o->ev[l];
        for (int i = 0; i < E_ARG0; i++)
            if (col_init(&ev[i], ekinds[i])) return -1;
        for (int i = 0; i < N_ARGS; i++)
            if (col_init(&ev[E_ARG0 + i], ARG_KEYS[i].kind)) return -1;
        if (col_init(&ev[E_ARGS], K_STR)) return -1;
    }
    static const int lkinds[N_LCOLS] = {K_I64, K_I64, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR};
    for (int i = 0; i < N_LCOLS; i++)
        if (col_init(&o->fl[i], lkinds[i])) return -1;
    return 0;
}

static void out_free(Out *o) {
    slices_free(&o->slices);
    free(o->args.p);
    for (int l = 0; l < N_LANES; l++)
        for (int i = 0; i < N_ECOLS; i++)
            col_free(&o->ev[l][i]);
    for (int i = 0; i < N_LCOLS; i++)
        col_free(&o->fl[i]);
}

static const char PARSE_DOC[] =
    "parse(data, base) -> (count, event lanes, flow columns, span, slices), or why it declines (str)\n\n"
    "A piece of whole events (objects, commas between them) as Arrow buffers:\n"
    "each column (null count, validity bitmap or None, values, offsets or None),\n"
    "in the order of EVENT_SCHEMA and FLOW_SCHEMA; the events' columns once for\n"
    "each lane (LANES: (cat, lane) pairs; lane 0 the rest), each in event order;\n"
    "span (min ts, max ts + dur)\n"
    "or None; slices, self time's (slices_tuple). A str (the reason) when the piece is out of the common case (see\n"
    "the source): values.py's rules apply to it, in Python.";

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
    int declined = 0;
    Py_BEGIN_ALLOW_THREADS
    skip_ws(&r);
    int64_t index = base;
    while (r.p < r.end) {
        if (*r.p != '{') {
            declined = fail(&r, "an item that is not an object");
            break;
        }
        if (read_event(&r, o, index)) {
            declined = -1;
            break;
        }
        index++;
        skip_ws(&r);
        if (r.p >= r.end)
            break;
        if (*r.p != ',') {
            declined = fail(&r, "not JSON (expected ',' between events)");
            break;
        }
        r.p++;
        skip_ws(&r);
        if (r.p >= r.end) {
            declined = fail(&r, "a trailing comma");
            break;
        }
    }
    o->count = index - base;
    if (!declined && pad_args(o)) {
        r.nomem = 1;
        declined = -1;
    }
    Py_END_ALLOW_THREADS
    PyObject *res = NULL;
    if (r.nomem) {
        PyErr_NoMemory();
    } else if (declined) {
        res = PyUnicode_FromString(r.why ? r.why : "declined");
    } else {
        PyObject *ev = PyList_New(N_LANES);
        for (int l = 0; ev && l < N_LANES; l++) {
            PyObject *lane = cols_list(o->ev[l], N_ECOLS);
            if (!lane) {
                Py_CLEAR(ev);
                break;
            }
            PyList_SET_ITEM(ev, l, lane);
        }
        PyObject *fl = ev ? cols_list(o->fl, N_LCOLS) : NULL;
        PyObject *span = o->has_span ? Py_BuildValue("(LL)", (long long)o->lo, (long long)o->hi)
                                     : (Py_INCREF(Py_None), Py_None);
        PyObject *sl = slices_tuple(&o->slices); /* its threads' text is in the piece: before the release */
        if (ev && fl && span && sl)
            res = Py_BuildValue("(LNNNN)", (long long)o->count, ev, fl, span, sl);
        else {
            Py_XDECREF(ev);
            Py_XDECREF(fl);
            Py_XDECREF(span);
            Py_XDECREF(sl);
        }
    }
    PyBuffer_Release(&view);
    out_free(o);
    free(o);
    return res;
}

static const char COUNT_DOC[] =
    "count(data, sep) -> int\n\n"
    "How many times sep occurs in data, without overlaps: bytes.count, found\n"
    "by memchr on sep's last byte (a brace, a few times an event) instead of\n"
    "compared at every byte.";

static PyObject *fp_count(PyObject *self, PyObject *args) {
    Py_buffer data, sep;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &sep))
        return NULL;
    if (sep.len == 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&sep);
        PyErr_SetString(PyExc_ValueError, "empty separator");
        return NULL;
    }
    Py_ssize_t n = 0, k = sep.len;
    const char *s = sep.buf, *end = (const char *)data.buf + data.len;
    Py_BEGIN_ALLOW_THREADS
    /* q: where the last byte of a match would be; after a match, the next
       one starts past it. */
    const char *q = data.len >= k ? (const char *)data.buf + k - 1 : end;
    while (q < end && (q = memchr(q, s[k - 1], (size_t)(end - q))) != NULL) {
        if (memcmp(q - (k - 1), s, (size_t)k) == 0) {
            n++;
            q += k;
        } else {
            q++;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&sep);
    return PyLong_FromSsize_t(n);
}

/* Where a piece of an event array written on one line (no newline before
   each event, as json.dumps writes it) may end. From its start, at an item,
   the bytes are walked without being parsed: strings followed to their
   closing quote (past escapes), braces and brackets counted. A comma at the
   array's depth ends an item; the array's "]" ends the array. With SSE2, 16
   bytes at once: only the bytes that can change that state (quotes,
   backslashes, braces, brackets, commas) are looked at, by their bits. */
typedef struct {
    Py_ssize_t end;   /* just past the last comma at the array's depth, or the "]" */
    Py_ssize_t count; /* items before end */
    int closed;       /* end is the array's "]" */
    const char *bad;  /* why the bytes are not JSON: a close with nothing open, a comma before "]" */
} Cut;

#ifdef __SSE2__
static inline unsigned cut_stops16(__m128i v) {
    /* '[' and ']' are '{' and '}' with the 0x20 bit clear */
    __m128i low = _mm_or_si128(v, _mm_set1_epi8(0x20));
    __m128i braces = _mm_or_si128(_mm_cmpeq_epi8(low, _mm_set1_epi8('{')), _mm_cmpeq_epi8(low, _mm_set1_epi8('}')));
    __m128i other = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                 _mm_cmpeq_epi8(v, _mm_set1_epi8(',')));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(braces, other));
}
#endif

typedef struct {
    Py_ssize_t commas;
    int depth, in_string, escaped, pending; /* pending: an item begun since the last comma */
} CutState;

/* The byte at q (one that can change the state; not an escaped one).
   1 when the walk ends there (the array's "]", or a bad close). */
static inline int cut_byte(Cut *c, CutState *st, const char *s, const char *q) {
    char ch = *q;
    if (st->in_string) {
        if (ch == '"')
            st->in_string = 0;
        else if (ch == '\\')
            st->escaped = 1;
        return 0;
    }
    switch (ch) {
    case '"':
        st->in_string = 1;
        st->pending = 1;
        return 0;
    case '{':
    case '[':
        st->depth++;
        st->pending = 1;
        return 0;
    case '}':
    case ']':
        if (st->depth > 0) {
            st->depth--;
            return 0;
        }
        if (ch == '}') {
            c->bad = "a '}' that closes nothing";
        } else if (!st->pending) { /* nothing after the last comma (the data begins after one) */
            c->bad = "a comma before the array's ']'";
        } else {
            c->end = q - s;
            c->count = st->commas + 1;
            c->closed = 1;
        }
        return 1;
    case ',':
        if (st->depth == 0) {
            st->commas++;
            c->end = q + 1 - s;
            c->count = st->commas;
            st->pending = 0;
        }
        return 0;
    default:
        return 0;
    }
}

static void cut_scan(const char *s, const char *end, Cut *c) {
    CutState st = {0, 0, 0, 0, 0};
    const char *p = s;
#ifdef __SSE2__
    for (; end - p >= 16; p += 16) {
        unsigned m = cut_stops16(_mm_loadu_si128((const __m128i *)p));
        if (st.escaped) { /* a backslash ended the last 16 */
            m &= ~1u;
            st.escaped = 0;
        }
        while (m) {
            int i = __builtin_ctz(m);
            m &= m - 1;
            if (cut_byte(c, &st, s, p + i))
                return;
            if (st.escaped && i < 15) {
                m &= ~(1u << (i + 1));
                st.escaped = 0;
            }
        }
    }
#endif
    for (; p < end; p++) {
        if (st.escaped) {
            st.escaped = 0;
            continue;
        }
        if (cut_byte(c, &st, s, p))
            return;
    }
}

static const char CUT_DOC[] =
    "cut(data) -> (end, count, closed)\n\n"
    "Where a piece of an event array on one line can end. data begins at an\n"
    "item of the array; end is just past the last comma between items at the\n"
    "array's depth, count the items before it, closed False; or, when the\n"
    "array's closing ']' is in data, end is its offset, count the items before\n"
    "it and closed True. (0, 0, False): no comma at the array's depth yet.\n"
    "ValueError: not JSON (a '}' closes what was not opened; a comma before\n"
    "the ']', where data begins at an item).";

static PyObject *fp_cut(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    Cut c = {0, 0, 0, NULL};
    Py_BEGIN_ALLOW_THREADS
    cut_scan((const char *)view.buf, (const char *)view.buf + view.len, &c);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (c.bad) {
        PyErr_SetString(PyExc_ValueError, c.bad);
        return NULL;
    }
    return Py_BuildValue("(nnO)", c.end, c.count, c.closed ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"parse", fp_parse, METH_VARARGS, PARSE_DOC},
    {"count", fp_count, METH_VARARGS, COUNT_DOC},
    {"cut", fp_cut, METH_VARARGS, CUT_DOC},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastparse", "The common case of a piece's parse, in C.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__fastparse(void) {
    if (PyType_Ready(&OwnedType) < 0)
        return NULL;
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
    PyObject *lanes = PyTuple_New(N_LANE_CATS);
    for (int i = 0; lanes && i < N_LANE_CATS; i++) {
        PyObject *t = Py_BuildValue("(si)", LANE_CATS[i].cat, LANE_CATS[i].lane);
        if (!t) {
            Py_CLEAR(lanes);
            break;
        }
        PyTuple_SET_ITEM(lanes, i, t);
    }
    if (!lanes || PyModule_AddObject(m, "LANES", lanes)) {
        Py_XDECREF(lanes);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
