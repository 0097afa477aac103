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
        /* The end as numpy computes it (store._Threads): past 2^63 - 1, that;
           wrapping as numpy's int64 does. */
        int64_t room = (int64_t)((uint64_t)INT64_MAX - (uint64_t)t);
        int64_t end = (int64_t)((uint64_t)t + (uint64_t)(d < room ? d : room));
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

PyMODINIT_FUNC PyInit__selftime(void) { return PyModule_Create(&module); }
