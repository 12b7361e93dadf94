/* Sums of float64 buffers with numpy's rounding: ``numpy.add.reduce`` of a contiguous float64
 * array is 0.0 plus a pairwise sum (runs of fewer than 8 values added left to right; up to 128
 * values, eight partial sums over every 8th value, combined as ((0+1)+(2+3))+((4+5)+(6+7)), then
 * the tail; beyond 128, the halves, split at a multiple of 8). ``squared_deviation_sum`` is that
 * sum over the squares ``(center - value) ** 2`` that numpy's two-pass standard deviation adds,
 * each square rounded on its own (no fused multiply-add: contraction is off below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static PyMethodDef methods[] = {
    {"pairwise_sum", pairwise_sum, METH_O,
     "pairwise_sum(values, /)\n--\n\nnumpy.add.reduce of a float64 buffer, with its rounding."},
    {"squared_deviation_sum", squared_deviation_sum, METH_VARARGS,
     "squared_deviation_sum(values, center, /)\n--\n\nnumpy.add.reduce of (center - values) ** 2."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sums", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sums(void) { return PyModule_Create(&module); }
