/* Self time's children, in C: store._Slices.solve's inner loop.

   The rule is store.py's (and tests/test_self_time.py's _by_rule): slices in
   (thread, start, longer first, event_id) order; a slice's depth is how many
   earlier slices of its thread end after it starts; its parent is the latest
   earlier slice of its thread at one depth less. One pass: a min-heap of the
   open slices' ends (those ended by a start never count again, as starts
   rise within a thread) and the latest slice at each depth. numpy's batched
   form of the same rule (store._Threads) takes 0.65-0.8 s of a core for a
   1 GiB trace's 3M slices, after numpy's lexsort, 0.37. The sort here is a
   counting sort by thread, then each thread's insertion sort: a trace lists
   most slices of a thread in order. Optional, like _fastparse: where it
   does not compile, store.py sorts and solves with numpy. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <sys/mman.h>
#endif

/* The sort's two arrays of n rows (a 1 GiB trace: 12 MB each a thread),
   mapped and unmapped whole where the system can: from malloc, on a thread
   of its own, glibc keeps them in that thread's arena after free (its mmap
   threshold rises past them), 50 MiB that the summaries' threads then do
   not reuse. */
static int64_t *rows_alloc(Py_ssize_t n) {
    size_t size = (size_t)(n ? n : 1) * sizeof(int64_t);
#ifdef MAP_ANONYMOUS
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
#else
    return malloc(size);
#endif
}

static void rows_free(int64_t *p, Py_ssize_t n) {
    if (!p)
        return;
#ifdef MAP_ANONYMOUS
    munmap(p, (size_t)(n ? n : 1) * sizeof(int64_t));
#else
    free(p);
#endif
}

/* A contiguous buffer of signed integers of ``size`` bytes each. */
static int get_ints(PyObject *obj, Py_buffer *view, Py_ssize_t size, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (view->itemsize != size || f[0] == '\0' || f[1] != '\0' || !strchr(size == 1 ? "?bB" : "bhilq", f[0])) {
        PyErr_Format(PyExc_TypeError, "%s: expected %zd-byte integers, got format '%s'", name, size,
                     view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Vec;

static int vec_fit(Vec *a, Py_ssize_t n) {
    if (n <= a->cap)
        return 0;
    Py_ssize_t cap = a->cap ? a->cap * 2 : 64;
    while (cap < n)
        cap *= 2;
    int64_t *v = realloc(a->v, (size_t)cap * sizeof(int64_t));
    if (!v)
        return -1;
    a->v = v;
    a->cap = cap;
    return 0;
}

static void heap_push(Vec *h, int64_t x) {
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (h->v[up] <= x)
            break;
        h->v[i] = h->v[up];
        i = up;
    }
    h->v[i] = x;
}

static void heap_pop(Vec *h) {
    int64_t x = h->v[--h->n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c])
            c++;
        if (h->v[c] >= x)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = x;
}

enum { DONE, OVERFLOW, BAD_ROW, NO_MEMORY };

/* A slice's end as numpy computes it (store._Threads): past 2^63 - 1, that;
   wrapping as numpy's int64 does. */
static inline int64_t slice_end(int64_t ts, int64_t dur) {
    int64_t room = (int64_t)((uint64_t)INT64_MAX - (uint64_t)ts);
    return (int64_t)((uint64_t)ts + (uint64_t)(dur < room ? dur : room));
}

/* Slice a comes before slice b of the same thread: earlier start, then
   longer, then the lower event_id. */
static inline int before(int64_t a, int64_t b, const int64_t *ts, const int64_t *dur) {
    if (ts[a] != ts[b])
        return ts[a] < ts[b];
    if (dur[a] != dur[b])
        return dur[a] > dur[b];
    return a < b;
}

static void merge_sort(int64_t *a, int64_t *tmp, Py_ssize_t n, const int64_t *ts, const int64_t *dur) {
    for (Py_ssize_t width = 1; width < n; width *= 2) {
        for (Py_ssize_t lo = 0; lo < n; lo += 2 * width) {
            Py_ssize_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            Py_ssize_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = before(a[j], a[i], ts, dur) ? a[j++] : a[i++];
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, (size_t)n * sizeof(int64_t));
    }
}

/* One thread's slices in order. A trace lists most of a thread's slices in
   order already (a 1 GiB trace's 3M: 2,750 out of place), so insertion sort
   first, linear on such input; past a budget of moves, merge sort. */
static void sort_thread(int64_t *a, int64_t *tmp, Py_ssize_t n, const int64_t *ts, const int64_t *dur) {
    Py_ssize_t budget = 8 * n + 64;
    for (Py_ssize_t i = 1; i < n; i++) {
        int64_t x = a[i];
        Py_ssize_t j = i;
        while (j > 0 && before(x, a[j - 1], ts, dur)) {
            a[j] = a[j - 1];
            j--;
            if (--budget == 0) {
                a[j] = x;
                merge_sort(a, tmp, n, ts, dur);
                return;
            }
        }
        a[j] = x;
    }
}

/* ``rows`` by thread (a counting sort: codes are small and dense), then
   each thread's in order; ``out`` gets them. */
static int sort_rows(const int64_t *rows, Py_ssize_t n, const int32_t *code, const int64_t *ts, const int64_t *dur,
                     Py_ssize_t events, int64_t *out, int64_t *tmp) {
    int32_t top = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (rows[k] < 0 || rows[k] >= events || code[rows[k]] < 0)
            return BAD_ROW;
        if (code[rows[k]] > top)
            top = code[rows[k]];
    }
    Py_ssize_t *at = calloc((size_t)top + 2, sizeof(Py_ssize_t));
    if (!at)
        return NO_MEMORY;
    for (Py_ssize_t k = 0; k < n; k++)
        at[code[rows[k]] + 1]++;
    for (int32_t c = 0; c <= top; c++)
        at[c + 1] += at[c];
    for (Py_ssize_t k = 0; k < n; k++)
        out[at[code[rows[k]]]++] = rows[k];
    /* at[c] is now where thread c + 1 starts */
    Py_ssize_t lo = 0;
    for (int32_t c = 0; c <= top; c++) {
        sort_thread(out + lo, tmp, at[c] - lo, ts, dur);
        lo = at[c];
    }
    free(at);
    return DONE;
}

static int solve(const int64_t *given, Py_ssize_t n, const int32_t *code, const int64_t *ts, const int64_t *dur,
                 int64_t *child_ns, uint8_t *has, Py_ssize_t events) {
    int64_t *rows = rows_alloc(n), *tmp = rows_alloc(n);
    if (!rows || !tmp) {
        rows_free(rows, n);
        rows_free(tmp, n);
        return NO_MEMORY;
    }
    int out = sort_rows(given, n, code, ts, dur, events, rows, tmp);
    rows_free(tmp, n);
    if (out != DONE) {
        rows_free(rows, n);
        return out;
    }
    Vec open = {0}, last = {0};
    int32_t thread = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t r = rows[k];
        if (k == 0 || code[r] != thread) {
            thread = code[r];
            open.n = last.n = 0;
        }
        int64_t t = ts[r], d = dur[r];
        int64_t end = slice_end(t, d);
        while (open.n && open.v[0] <= t)
            heap_pop(&open);
        Py_ssize_t depth = open.n;
        if (depth > 0) { /* the open slices are at most the depths seen: last has depth - 1 */
            int64_t p = last.v[depth - 1];
            if (__builtin_add_overflow(child_ns[p], d, &child_ns[p])) {
                out = OVERFLOW;
                break;
            }
            has[p] = 1;
        }
        if (vec_fit(&last, depth + 1) || vec_fit(&open, open.n + 1)) {
            out = NO_MEMORY;
            break;
        }
        last.v[depth] = r;
        if (last.n < depth + 1)
            last.n = depth + 1;
        heap_push(&open, end);
    }
    free(open.v);
    free(last.v);
    rows_free(rows, n);
    return out;
}

/* The same rule over a stream: slices given in any order that is close to
   (start, longer first, event_id) within each thread (a trace's own order:
   the 4.5 GB bench trace lists each slice at most 8,554 places after its
   place), fed as the parse stages each piece (store._SumsStream): no sort
   of the whole trace, and no array of it.
   Each thread holds back its latest slices: when 2 x window are held, they
   are sorted, the first window are solved and the rest kept. A slice that
   comes after one solved before it should have been ends the stream
   (DISORDER), as does holding more than max_bytes: the caller sorts the
   trace another way. A parent's sum is final, and given out, once a later
   slice of its thread takes its depth or one above it (no later slice can
   then be its child), or at the end. Memory: the slices held and the
   nesting depth of each thread, not the trace. */

typedef struct {
    int64_t ts, dur, eid;
} Slice;

typedef struct {
    int64_t eid, sum;
    int has;
} Level;

typedef struct {
    Slice *held;
    Py_ssize_t n, cap, kept; /* held[0:kept] sorted (kept by the last flush) */
    int solved_any;
    Slice last; /* the last slice solved */
    Vec open;   /* the open slices' ends, a min-heap */
    Level *levels;
    Py_ssize_t depths, levels_cap;
} Thread;

enum { DISORDER = NO_MEMORY + 1, TOO_BIG };

typedef struct {
    PyObject_HEAD Thread *threads;
    Py_ssize_t nthreads;
    Py_ssize_t window;
    size_t held_bytes, max_bytes;
    Slice *scratch;
    Py_ssize_t scratch_cap;
    Vec out_eid, out_sum;
    int state;
} Stream;

static inline int slice_before(const Slice *a, const Slice *b) {
    if (a->ts != b->ts)
        return a->ts < b->ts;
    if (a->dur != b->dur)
        return a->dur > b->dur;
    return a->eid < b->eid;
}

/* a[0:n] in order; tmp has room for n. Insertion sort while it is cheap
   (held slices are mostly in order), else a bottom-up merge sort. */
static void sort_slices(Slice *a, Slice *tmp, Py_ssize_t n) {
    Py_ssize_t budget = 8 * n + 64, i;
    for (i = 1; i < n; i++) {
        Slice x = a[i];
        Py_ssize_t j = i;
        while (j > 0 && slice_before(&x, &a[j - 1]) && budget > 0) {
            a[j] = a[j - 1];
            j--;
            budget--;
        }
        a[j] = x;
        if (budget == 0)
            break;
    }
    if (i >= n)
        return;
    for (Py_ssize_t width = 1; width < n; width *= 2) {
        for (Py_ssize_t lo = 0; lo < n; lo += 2 * width) {
            Py_ssize_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            Py_ssize_t p = lo, q = mid, k = lo;
            while (p < mid && q < hi)
                tmp[k++] = slice_before(&a[q], &a[p]) ? a[q++] : a[p++];
            while (p < mid)
                tmp[k++] = a[p++];
            while (q < hi)
                tmp[k++] = a[q++];
        }
        memcpy(a, tmp, (size_t)n * sizeof(Slice));
    }
}

static int give_out(Stream *s, int64_t eid, int64_t sum) {
    if (vec_fit(&s->out_eid, s->out_eid.n + 1) || vec_fit(&s->out_sum, s->out_sum.n + 1))
        return NO_MEMORY;
    s->out_eid.v[s->out_eid.n++] = eid;
    s->out_sum.v[s->out_sum.n++] = sum;
    return DONE;
}

/* Levels from ``depth`` down are final: given out where they have children. */
static int close_levels(Stream *s, Thread *t, Py_ssize_t depth) {
    for (Py_ssize_t i = depth; i < t->depths; i++)
        if (t->levels[i].has && give_out(s, t->levels[i].eid, t->levels[i].sum))
            return NO_MEMORY;
    t->depths = depth < t->depths ? depth : t->depths;
    return DONE;
}

/* One slice, in the thread's order: store._Slices.solve's loop. */
static int solve_one(Stream *s, Thread *t, const Slice *x) {
    int64_t end = slice_end(x->ts, x->dur);
    while (t->open.n && t->open.v[0] <= x->ts)
        heap_pop(&t->open);
    Py_ssize_t depth = t->open.n;
    if (depth > 0) {
        Level *p = &t->levels[depth - 1];
        if (__builtin_add_overflow(p->sum, x->dur, &p->sum))
            return OVERFLOW;
        p->has = 1;
    }
    if (close_levels(s, t, depth))
        return NO_MEMORY;
    if (depth + 1 > t->levels_cap) {
        Py_ssize_t cap = t->levels_cap ? t->levels_cap * 2 : 16;
        Level *l = realloc(t->levels, (size_t)cap * sizeof(Level));
        if (!l)
            return NO_MEMORY;
        t->levels = l;
        t->levels_cap = cap;
    }
    t->levels[depth] = (Level){x->eid, 0, 0};
    t->depths = depth + 1;
    if (vec_fit(&t->open, t->open.n + 1))
        return NO_MEMORY;
    heap_push(&t->open, end);
    return DONE;
}

/* Sort what the thread holds, solve all but the last ``keep``, keep those. */
static int flush(Stream *s, Thread *t, Py_ssize_t keep) {
    Py_ssize_t n = t->n;
    if (s->scratch_cap < n) {
        Slice *m = realloc(s->scratch, (size_t)n * sizeof(Slice));
        if (!m)
            return NO_MEMORY;
        s->scratch = m;
        s->scratch_cap = n;
    }
    Slice *h = t->held, *tmp = s->scratch;
    sort_slices(h + t->kept, tmp, n - t->kept);
    /* merge the kept (sorted) and the new (sorted now) */
    Py_ssize_t p = 0, q = t->kept, k = 0;
    while (p < t->kept && q < n)
        tmp[k++] = slice_before(&h[q], &h[p]) ? h[q++] : h[p++];
    while (p < t->kept)
        tmp[k++] = h[p++];
    while (q < n)
        tmp[k++] = h[q++];
    Py_ssize_t upto = n > keep ? n - keep : 0;
    if (upto && t->solved_any && slice_before(&tmp[0], &t->last))
        return DISORDER;
    for (Py_ssize_t i = 0; i < upto; i++) {
        int out = solve_one(s, t, &tmp[i]);
        if (out != DONE)
            return out;
    }
    if (upto) {
        t->last = tmp[upto - 1];
        t->solved_any = 1;
    }
    memcpy(h, tmp + upto, (size_t)(n - upto) * sizeof(Slice));
    t->n = t->kept = n - upto;
    return DONE;
}

static int hold(Stream *s, int32_t code, Slice x) {
    if (code < 0)
        return BAD_ROW;
    if (code >= s->nthreads) {
        Py_ssize_t m = s->nthreads ? s->nthreads : 8;
        while (m <= code)
            m *= 2;
        Thread *ts = realloc(s->threads, (size_t)m * sizeof(Thread));
        if (!ts)
            return NO_MEMORY;
        memset(ts + s->nthreads, 0, (size_t)(m - s->nthreads) * sizeof(Thread));
        s->threads = ts;
        s->nthreads = m;
    }
    Thread *t = &s->threads[code];
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 64;
        if (cap > 2 * s->window)
            cap = 2 * s->window;
        s->held_bytes += (size_t)(cap - t->cap) * sizeof(Slice);
        if (s->held_bytes > s->max_bytes)
            return TOO_BIG;
        Slice *h = realloc(t->held, (size_t)cap * sizeof(Slice));
        if (!h)
            return NO_MEMORY;
        t->held = h;
        t->cap = cap;
    }
    t->held[t->n++] = x;
    return t->n == 2 * s->window ? flush(s, t, s->window) : DONE;
}

static void stream_free_threads(Stream *s) {
    for (Py_ssize_t i = 0; i < s->nthreads; i++) {
        free(s->threads[i].held);
        free(s->threads[i].open.v);
        free(s->threads[i].levels);
    }
    free(s->threads);
    free(s->scratch);
    s->threads = NULL;
    s->scratch = NULL;
    s->nthreads = s->scratch_cap = 0;
    s->held_bytes = 0;
}

static void stream_dealloc(Stream *s) {
    stream_free_threads(s);
    free(s->out_eid.v);
    free(s->out_sum.v);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int stream_init(Stream *s, PyObject *args, PyObject *kw) {
    static char *names[] = {"window", "max_bytes", NULL};
    Py_ssize_t window, max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nn", names, &window, &max_bytes))
        return -1;
    if (window < 1 || max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "window must be positive and max_bytes not negative");
        return -1;
    }
    stream_free_threads(s);
    s->out_eid.n = s->out_sum.n = 0;
    s->window = window;
    s->max_bytes = (size_t)max_bytes;
    s->state = DONE;
    return 0;
}

static PyObject *stream_result(Stream *s, int out) {
    s->state = out;
    if (out == BAD_ROW) {
        PyErr_SetString(PyExc_ValueError, "a negative thread code");
        return NULL;
    }
    if (out == NO_MEMORY)
        return PyErr_NoMemory();
    if (out != DONE)
        stream_free_threads(s); /* the caller gives up on the stream */
    return PyBool_FromLong(out == DONE);
}

static PyObject *stream_feed(Stream *s, PyObject *args) {
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3]))
        return NULL;
    if (s->state != DONE)
        return PyBool_FromLong(0);
    static const char *names[] = {"code", "ts", "dur", "eid"};
    static const Py_ssize_t sizes[] = {4, 8, 8, 8};
    Py_buffer b[4];
    int got = 0;
    for (; got < 4; got++)
        if (get_ints(objs[got], &b[got], sizes[got], 0, names[got]) < 0)
            break;
    PyObject *result = NULL;
    if (got == 4) {
        Py_ssize_t n = b[0].len / 4;
        if (b[1].len / 8 != n || b[2].len / 8 != n || b[3].len / 8 != n) {
            PyErr_SetString(PyExc_ValueError, "code, ts, dur and eid must be of one length");
        } else {
            const int32_t *code = b[0].buf;
            const int64_t *ts = b[1].buf, *dur = b[2].buf, *eid = b[3].buf;
            int out = DONE;
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t k = 0; k < n && out == DONE; k++)
                out = hold(s, code[k], (Slice){ts[k], dur[k], eid[k]});
            Py_END_ALLOW_THREADS
            result = stream_result(s, out);
        }
    }
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&b[i]);
    return result;
}

static PyObject *stream_finish(Stream *s, PyObject *unused) {
    if (s->state != DONE)
        return PyBool_FromLong(0);
    int out = DONE;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < s->nthreads && out == DONE; i++) {
        Thread *t = &s->threads[i];
        out = flush(s, t, 0);
        if (out == DONE)
            out = close_levels(s, t, 0);
    }
    Py_END_ALLOW_THREADS
    PyObject *result = stream_result(s, out);
    if (out == DONE)
        stream_free_threads(s);
    return result;
}

static PyObject *stream_take(Stream *s, PyObject *unused) {
    PyObject *eid = PyBytes_FromStringAndSize((const char *)s->out_eid.v, s->out_eid.n * 8);
    PyObject *sum = eid ? PyBytes_FromStringAndSize((const char *)s->out_sum.v, s->out_sum.n * 8) : NULL;
    if (!sum) {
        Py_XDECREF(eid);
        return NULL;
    }
    s->out_eid.n = s->out_sum.n = 0;
    return Py_BuildValue("(NN)", eid, sum);
}

static PyObject *stream_get_why(Stream *s, void *unused) {
    static const char *why[] = {"", "a sum past 2^63 - 1", "", "", "slices too far from their order",
                                "more slices held than max_bytes"};
    return PyUnicode_FromString(why[s->state]);
}

static PyMethodDef stream_methods[] = {
    {"feed", (PyCFunction)stream_feed, METH_VARARGS,
     "feed(code, ts, dur, eid) -> bool\n\nHolds slices (int32 thread codes, int64 start, duration, event_id),\n"
     "solving those that the window passes. False once the stream cannot be\n"
     "finished (``why``). The GIL is let go."},
    {"finish", (PyCFunction)stream_finish, METH_NOARGS,
     "finish() -> bool\n\nSolves every slice held; False if the stream cannot be finished."},
    {"take", (PyCFunction)stream_take, METH_NOARGS,
     "take() -> (bytes, bytes)\n\nThe final sums given out since the last take: parents' event_ids and\n"
     "their children's summed durations, as int64s, in no order (each parent once)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef stream_getset[] = {
    {"why", (getter)stream_get_why, NULL, "Why the stream stopped, or ''.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracedb._selftime.Stream",
    .tp_basicsize = sizeof(Stream),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Stream(window, max_bytes): child sums of slices given in about their order.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)stream_init,
    .tp_dealloc = (destructor)stream_dealloc,
    .tp_methods = stream_methods,
    .tp_getset = stream_getset,
};

static PyObject *st_child_sums(PyObject *self, PyObject *args) {
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    static const char *names[] = {"rows", "code", "ts", "dur", "child_ns", "has"};
    static const Py_ssize_t sizes[] = {8, 4, 8, 8, 8, 1};
    Py_buffer b[6];
    int got = 0;
    for (; got < 6; got++)
        if (get_ints(objs[got], &b[got], sizes[got], got >= 4, names[got]) < 0)
            break;
    int out = NO_MEMORY;
    if (got == 6) {
        Py_ssize_t events = b[1].len / 4;
        if (b[2].len / 8 != events || b[3].len / 8 != events || b[4].len / 8 != events || b[5].len != events) {
            PyErr_SetString(PyExc_ValueError, "code, ts, dur, child_ns and has must be of one length");
        } else {
            Py_BEGIN_ALLOW_THREADS
            out = solve(b[0].buf, b[0].len / 8, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, events);
            Py_END_ALLOW_THREADS
            if (out == BAD_ROW)
                PyErr_SetString(PyExc_ValueError, "a row past the arrays");
            else if (out == NO_MEMORY)
                PyErr_NoMemory();
        }
    }
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&b[i]);
    if (PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(out == DONE);
}

static const char CHILD_SUMS_DOC[] =
    "child_sums(rows, code, ts, dur, child_ns, has) -> bool\n\n"
    "Adds each slice's duration to its parent's child_ns and sets its has.\n"
    "rows: int64 event_ids of whole threads, in any order (sorted here by\n"
    "thread, start, longer first, event_id); code (int32 thread codes), ts,\n"
    "dur, child_ns (int64) and has (bool): indexed by event_id.\n"
    "False where a sum would pass 2^63 - 1 (child_ns is then partly summed). The GIL is let go: calls on rows of different\n"
    "threads can run at once.";

static PyMethodDef methods[] = {
    {"child_sums", st_child_sums, METH_VARARGS, CHILD_SUMS_DOC},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_selftime", "Self time's children, in C.", -1, methods};

PyMODINIT_FUNC PyInit__selftime(void) {
    if (PyType_Ready(&StreamType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddObjectRef(m, "Stream", (PyObject *)&StreamType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
