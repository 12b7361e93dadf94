/* The values that ``sorted(values)`` holds at a few ranks, for a buffer of float64 ("d") or int64
 * ("q") values, without building the sorted list: a selection over a copy of the buffer (8 bytes a
 * value, not a Python object each), expected linear time.
 *
 * Exactly ``sorted``'s answer: Python's sort is stable and ``-0.0 == 0.0``, so a rank that falls
 * among the zeros holds the zero that comes at that place in input order, with its sign. A NaN
 * has no place in a sort's order: such a buffer raises ValueError, and the caller sorts.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SELECT(NAME, T, COMPARE)                                                                   \
    static int COMPARE(const void *left, const void *right) {                                      \
        T a = *(const T *)left, b = *(const T *)right;                                             \
        return (a > b) - (a < b);                                                                  \
    }                                                                                              \
    static void NAME(T *a, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t k) {                           \
        /* Place the k-th smallest of a[lo..hi] at a[k]: smaller-or-equal values before it,     \
         * greater-or-equal after (Hoare partitions around a median of three; past a bound on    \
         * the rounds, which only crafted orders reach, the rest is sorted). */                    \
        int rounds = 0;                                                                            \
        while (hi > lo) {                                                                          \
            if (++rounds > 128) {                                                                  \
                qsort(a + lo, (size_t)(hi - lo + 1), sizeof(T), COMPARE);                          \
                return;                                                                            \
            }                                                                                      \
            Py_ssize_t mid = lo + (hi - lo) / 2;                                                   \
            T x = a[lo], y = a[mid], z = a[hi], pivot;                                             \
            if (x < y) {                                                                           \
                pivot = y < z ? y : (x < z ? z : x);                                               \
            } else {                                                                               \
                pivot = x < z ? x : (y < z ? z : y);                                               \
            }                                                                                      \
            Py_ssize_t i = lo, j = hi;                                                             \
            while (i <= j) {                                                                       \
                while (a[i] < pivot) i++;                                                          \
                while (pivot < a[j]) j--;                                                          \
                if (i <= j) {                                                                      \
                    T t = a[i];                                                                    \
                    a[i] = a[j];                                                                   \
                    a[j] = t;                                                                      \
                    i++;                                                                           \
                    j--;                                                                           \
                }                                                                                  \
            }                                                                                      \
            if (k <= j) {                                                                          \
                hi = j;                                                                            \
            } else if (k >= i) {                                                                   \
                lo = i;                                                                            \
            } else {                                                                               \
                return; /* j < k < i: a[k] equals the pivot, in place */                           \
            }                                                                                      \
        }                                                                                          \
    }

SELECT(select_double, double, compare_double)
SELECT(select_int64, int64_t, compare_int64)

static int compare_rank(const void *left, const void *right) {
    Py_ssize_t a = *(const Py_ssize_t *)left, b = *(const Py_ssize_t *)right;
    return (a > b) - (a < b);
}

/* Select each of the sorted ranks in turn: after a selection, everything right of it is >= it. */
#define SELECT_ALL(FUNCTION, COPY, N, SORTED, COUNT)                                               \
    do {                                                                                           \
        Py_ssize_t start = 0;                                                                      \
        for (Py_ssize_t r = 0; r < (COUNT); r++) {                                                 \
            if ((SORTED)[r] >= start) {                                                            \
                FUNCTION((COPY), start, (N) - 1, (SORTED)[r]);                                     \
                start = (SORTED)[r] + 1;                                                           \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* The zero that a stable sort puts at ``rank``: the (rank - negatives)-th zero in input order. */
static double zero_at(const double *values, Py_ssize_t n, Py_ssize_t rank) {
    Py_ssize_t below = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        below += values[i] < 0.0;
    }
    Py_ssize_t wanted = rank - below, seen = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (values[i] == 0.0) {
            if (seen == wanted) {
                return values[i];
            }
            seen++;
        }
    }
    return 0.0; /* not reached: the rank holds a zero */
}

static PyObject *at_ranks(PyObject *module, PyObject *args) {
    PyObject *values_object, *ranks_object;
    if (!PyArg_ParseTuple(args, "OO!:at_ranks", &values_object, &PyTuple_Type, &ranks_object)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(values_object, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t *ranks = NULL, *sorted = NULL;
    void *copy = NULL;
    int is_double = view.format != NULL && strcmp(view.format, "d") == 0 && view.itemsize == 8;
    int is_int64 = view.format != NULL && strcmp(view.format, "q") == 0 && view.itemsize == 8;
    if (!is_double && !is_int64) {
        PyErr_SetString(PyExc_TypeError, "at_ranks needs a buffer of float64 ('d') or int64 ('q')");
        goto done;
    }
    Py_ssize_t n = view.len / 8, count = PyTuple_GET_SIZE(ranks_object);
    ranks = PyMem_Malloc(sizeof(Py_ssize_t) * (count ? count : 1));
    sorted = PyMem_Malloc(sizeof(Py_ssize_t) * (count ? count : 1));
    if (ranks == NULL || sorted == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < count; r++) {
        Py_ssize_t rank = PyLong_AsSsize_t(PyTuple_GET_ITEM(ranks_object, r));
        if (rank == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (rank < 0 || rank >= n) {
            PyErr_Format(PyExc_IndexError, "rank %zd of %zd values", rank, n);
            goto done;
        }
        ranks[r] = sorted[r] = rank;
    }
    qsort(sorted, (size_t)count, sizeof(Py_ssize_t), compare_rank);
    copy = PyMem_Malloc((size_t)(n ? n : 1) * 8);
    if (copy == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(copy, view.buf, (size_t)n * 8);
    result = PyTuple_New(count);
    if (result == NULL) {
        goto done;
    }
    if (is_double) {
        double *a = copy;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (a[i] != a[i]) {
                Py_CLEAR(result);
                PyErr_SetString(PyExc_ValueError, "NaN has no place in a sorted order");
                goto done;
            }
        }
        Py_BEGIN_ALLOW_THREADS
        SELECT_ALL(select_double, a, n, sorted, count);
        Py_END_ALLOW_THREADS
        for (Py_ssize_t r = 0; r < count; r++) {
            double value = a[ranks[r]];
            if (value == 0.0) {
                value = zero_at(view.buf, n, ranks[r]);
            }
            PyObject *item = PyFloat_FromDouble(value);
            if (item == NULL) {
                Py_CLEAR(result);
                goto done;
            }
            PyTuple_SET_ITEM(result, r, item);
        }
    } else {
        int64_t *a = copy;
        Py_BEGIN_ALLOW_THREADS
        SELECT_ALL(select_int64, a, n, sorted, count);
        Py_END_ALLOW_THREADS
        for (Py_ssize_t r = 0; r < count; r++) {
            PyObject *item = PyLong_FromLongLong(a[ranks[r]]);
            if (item == NULL) {
                Py_CLEAR(result);
                goto done;
            }
            PyTuple_SET_ITEM(result, r, item);
        }
    }
done:
    PyMem_Free(copy);
    PyMem_Free(ranks);
    PyMem_Free(sorted);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"at_ranks", at_ranks, METH_VARARGS,
     "at_ranks(values, ranks) -> tuple: sorted(values)[rank] for each rank, for a buffer of\n"
     "float64 ('d') or int64 ('q') values. ValueError for a NaN, IndexError for a rank outside."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ranks", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ranks(void) { return PyModule_Create(&module); }
