/* Sums of float64 buffers with numpy's rounding, and the statistics of a few values built on them.
 *
 * ``numpy.add.reduce`` of a contiguous float64
 * array is 0.0 plus a pairwise sum (runs of fewer than 8 values added left to right; up to 128
 * values, eight partial sums over every 8th value, combined as ((0+1)+(2+3))+((4+5)+(6+7)), then
 * the tail; beyond 128, the halves, split at a multiple of 8). ``squared_deviation_sum`` is that
 * sum over the squares ``(center - value) ** 2`` that numpy's two-pass standard deviation adds,
 * each square rounded on its own (no fused multiply-add: contraction is off below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define BLOCK 128

#define PAIRWISE(NAME, TERM)                                                                       \
    static double NAME(const double *a, Py_ssize_t n, double c) {                                  \
        (void)c;                                                                                   \
        if (n < 8) {                                                                               \
            double total = 0.0;                                                                    \
            for (Py_ssize_t i = 0; i < n; i++) {                                                   \
                total += TERM(a[i], c);                                                            \
            }                                                                                      \
            return total;                                                                          \
        }                                                                                          \
        if (n <= BLOCK) {                                                                          \
            double r[8];                                                                           \
            for (int j = 0; j < 8; j++) {                                                          \
                r[j] = TERM(a[j], c);                                                              \
            }                                                                                      \
            Py_ssize_t i = 8;                                                                      \
            for (; i < n - (n % 8); i += 8) {                                                      \
                for (int j = 0; j < 8; j++) {                                                      \
                    r[j] += TERM(a[i + j], c);                                                     \
                }                                                                                  \
            }                                                                                      \
            double total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));      \
            for (; i < n; i++) {                                                                   \
                total += TERM(a[i], c);                                                            \
            }                                                                                      \
            return total;                                                                          \
        }                                                                                          \
        Py_ssize_t half = n / 2;                                                                   \
        half -= half % 8;                                                                          \
        return NAME(a, half, c) + NAME(a + half, n - half, c);                                     \
    }

static inline double value_term(double value, double center) {
    (void)center;
    return value;
}

static inline double square_term(double value, double center) {
    double deviation = center - value;
    double square = deviation * deviation;
    return square;
}

PAIRWISE(pairwise_values, value_term)
PAIRWISE(pairwise_squares, square_term)

/* The float64 values of a C-contiguous buffer whose items are doubles ("d"); -1 with an error set
 * otherwise. */
static int get_doubles(PyObject *source, Py_buffer *view) {
    if (PyObject_GetBuffer(source, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    if (view->itemsize != (Py_ssize_t)sizeof(double) || view->format == NULL ||
        strcmp(view->format, "d") != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "a buffer of float64 ('d') values is required");
        return -1;
    }
    return 0;
}

static PyObject *pairwise_sum(PyObject *self, PyObject *source) {
    (void)self;
    Py_buffer view;
    if (get_doubles(source, &view) < 0) {
        return NULL;
    }
    double total = 0.0 + pairwise_values((const double *)view.buf, view.len / (Py_ssize_t)sizeof(double), 0.0);
    PyBuffer_Release(&view);
    return PyFloat_FromDouble(total);
}

static PyObject *squared_deviation_sum(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *source;
    double center;
    if (!PyArg_ParseTuple(args, "Od", &source, &center)) {
        return NULL;
    }
    Py_buffer view;
    if (get_doubles(source, &view) < 0) {
        return NULL;
    }
    double total =
        0.0 + pairwise_squares((const double *)view.buf, view.len / (Py_ssize_t)sizeof(double), center);
    PyBuffer_Release(&view);
    return PyFloat_FromDouble(total);
}

/* The statistics of 1 to 7 numbers (``gymflow.aggregate._stats``): mean, max, min, median and
 * std (None for one value). Below 8 values numpy adds left to right, from 0.0. max and min are
 * the first largest and smallest values in order, kept as they are for an integral field, else
 * as floats; the median comes from a stable sort. None (the caller computes them in Python) for
 * anything but ints and floats, a NaN (sorting and comparing it follow other rules), or an
 * integer beyond 2**53, whose comparisons with floats a double cannot settle. */
#define SMALL 7
#define EXACT_INT (1LL << 53)

static PyObject *small_statistics(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values;
    int integral;
    if (!PyArg_ParseTuple(args, "Op", &values, &integral)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(values, "a sequence is required");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    double f[SMALL];
    if (n < 1 || n > SMALL) {
        goto decline;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = items[i];
        if (PyFloat_CheckExact(item)) {
            f[i] = PyFloat_AS_DOUBLE(item);
            if (isnan(f[i])) {
                goto decline;
            }
        } else if (PyLong_CheckExact(item) || PyBool_Check(item)) {
            int overflow = 0;
            long long whole = PyLong_AsLongLongAndOverflow(item, &overflow);
            if (whole == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                goto decline;
            }
            if (overflow || whole > EXACT_INT || whole < -EXACT_INT) {
                goto decline;
            }
            f[i] = (double)whole;
        } else {
            goto decline;
        }
    }
    double total = 0.0;
    Py_ssize_t high = 0, low = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        total += f[i];
        if (f[i] > f[high]) {
            high = i;
        }
        if (f[i] < f[low]) {
            low = i;
        }
    }
    double average = total / (double)n;
    double sorted[SMALL];
    for (Py_ssize_t i = 0; i < n; i++) {
        double value = f[i];
        Py_ssize_t j = i;
        while (j > 0 && value < sorted[j - 1]) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = value;
    }
    Py_ssize_t middle = n / 2;
    double median = n % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2.0;
    PyObject *std;
    if (n < 2) {
        std = Py_NewRef(Py_None);
    } else {
        double spread = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double deviation = average - f[i];
            spread += deviation * deviation;
        }
        std = PyFloat_FromDouble(sqrt(spread / (double)(n - 1)));
    }
    PyObject *highest = integral ? Py_NewRef(items[high]) : PyFloat_FromDouble(f[high]);
    PyObject *lowest = integral ? Py_NewRef(items[low]) : PyFloat_FromDouble(f[low]);
    Py_DECREF(seq);
    if (std == NULL || highest == NULL || lowest == NULL) {
        Py_XDECREF(std);
        Py_XDECREF(highest);
        Py_XDECREF(lowest);
        return NULL;
    }
    return Py_BuildValue("(dNNdN)", average, highest, lowest, median, std);
decline:
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pairwise_sum", pairwise_sum, METH_O,
     "pairwise_sum(values, /)\n--\n\nnumpy.add.reduce of a float64 buffer, with its rounding."},
    {"squared_deviation_sum", squared_deviation_sum, METH_VARARGS,
     "squared_deviation_sum(values, center, /)\n--\n\nnumpy.add.reduce of (center - values) ** 2."},
    {"small_statistics", small_statistics, METH_VARARGS,
     "small_statistics(values, integral, /)\n--\n\nmean, max, min, median, std of 1 to 7 numbers, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sums", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sums(void) { return PyModule_Create(&module); }
