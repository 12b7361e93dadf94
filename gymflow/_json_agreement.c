/* One pass over a JSON text telling whether msgspec's typed decoding of it can only agree with
 * orjson.loads (see gymflow/_json_agreement.pyi for the contract).
 *
 * msgspec skips the values a Struct does not declare without checking their UTF-8 or the range of
 * their numbers, and decodes an integer beyond 64 bits as an int where orjson gives a float. A text
 * passes only when none of that can happen: every string is valid UTF-8 with paired surrogate
 * escapes, no float overflows, every integer lies in [-2**63, 2**64 - 1] (unless the caller's
 * reader keeps wider ones exact too) and nothing nests deeper than MAX_DEPTH. Any other text is
 * left to the caller's exact reader, which decides; so a false "no" costs time, never a result.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_DEPTH 200
#define MAX_FLOAT_TEXT 400

/* 1 for the bytes a string may hold as they are: printable ASCII except '"' and '\\'. */
static unsigned char plain[256];

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

#if !defined(__SSE2__)
/* Nonzero when one of the 8 bytes of x is not plain (a quote, a backslash, a control byte or
 * a byte >= 0x80); exact as a yes or no, which is all it is used for. */
static inline uint64_t has_special(uint64_t x) {
    uint64_t quote = x ^ (ONES * '"');
    uint64_t backslash = x ^ (ONES * '\\');
    return (((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash) | ((x - ONES * 0x20) & ~x) | x) & HIGHS;
}
#endif

static int is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static unsigned hex4(const unsigned char *p) {
    unsigned value = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        value = value * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return value;
}

/* The end of the escape at p (p[0] == '\\'), or NULL when msgspec and orjson might differ on it. */
static const unsigned char *escape_end(const unsigned char *p, const unsigned char *end) {
    if (end - p < 2) {
        return NULL;
    }
    if (p[1] != 'u') {
        return p + 2; /* both reject an unknown escape */
    }
    if (end - p < 6 || !is_hex(p[2]) || !is_hex(p[3]) || !is_hex(p[4]) || !is_hex(p[5])) {
        return NULL;
    }
    unsigned unit = hex4(p + 2);
    if (unit < 0xD800 || unit > 0xDFFF) {
        return p + 6;
    }
    if (unit > 0xDBFF || end - p < 12 || p[6] != '\\' || p[7] != 'u' || !is_hex(p[8]) || !is_hex(p[9]) ||
        !is_hex(p[10]) || !is_hex(p[11])) {
        return NULL;
    }
    unsigned low = hex4(p + 8);
    return (low >= 0xDC00 && low <= 0xDFFF) ? p + 12 : NULL;
}

/* The end of the UTF-8 sequence at p (p[0] >= 0x80), or NULL when it is not valid UTF-8. */
static const unsigned char *utf8_end(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) {
        return (left >= 2 && (p[1] & 0xC0) == 0x80) ? p + 2 : NULL;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) {
            return NULL;
        }
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F)) {
            return NULL; /* overlong, or a surrogate */
        }
        return p + 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) {
            return NULL;
        }
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F)) {
            return NULL; /* overlong, or beyond U+10FFFF */
        }
        return p + 4;
    }
    return NULL;
}

/* The first byte from p on that is not plain, or end. */
static const unsigned char *skip_plain(const unsigned char *p, const unsigned char *end) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    while (p + 16 <= end) {
        __m128i chunk = _mm_loadu_si128((const __m128i *)p);
        /* signed: a byte >= 0x80 is negative, so below 0x20 too */
        __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(chunk, quote), _mm_cmpeq_epi8(chunk, backslash)),
                                       _mm_cmplt_epi8(chunk, space));
        int mask = _mm_movemask_epi8(special);
        if (mask != 0) {
            return p + __builtin_ctz((unsigned)mask);
        }
        p += 16;
    }
#else
    uint64_t chunk;
    while (p + 8 <= end && (memcpy(&chunk, p, 8), !has_special(chunk))) {
        p += 8;
    }
#endif
    while (p < end && plain[*p]) {
        p++;
    }
    return p;
}

/* The end of the string whose opening quote is at p[-1], or NULL. */
static const unsigned char *string_end(const unsigned char *p, const unsigned char *end) {
    for (;;) {
        p = skip_plain(p, end);
        if (p >= end) {
            return NULL;
        }
        unsigned char c = *p;
        if (c == '"') {
            return p + 1;
        }
        if (c == '\\') {
            p = escape_end(p, end);
        } else if (c >= 0x80) {
            p = utf8_end(p, end);
        } else {
            return NULL; /* a control character: both reject it */
        }
        if (p == NULL) {
            return NULL;
        }
    }
}

static Py_ssize_t digits(const unsigned char **p, const unsigned char *end) {
    const unsigned char *start = *p;
    while (*p < end && **p >= '0' && **p <= '9') {
        (*p)++;
    }
    return *p - start;
}

/* Whether the integer of n digits at p (no sign, no leading zero) is at most the bound's digits. */
static int at_most(const unsigned char *p, Py_ssize_t n, const char *bound) {
    Py_ssize_t width = (Py_ssize_t)strlen(bound);
    return n < width || (n == width && memcmp(p, bound, (size_t)width) <= 0);
}

/* Whether the float text from start to end overflows a double (orjson rejects it, and msgspec
 * does not look at the numbers it skips); a text too long to check counts as overflowing. */
static int overflows(const unsigned char *start, const unsigned char *end) {
    char text[MAX_FLOAT_TEXT + 1];
    size_t length = (size_t)(end - start);
    if (length > MAX_FLOAT_TEXT) {
        return 1;
    }
    memcpy(text, start, length);
    text[length] = '\0';
    return isinf(strtod(text, NULL));
}

/* The end of the number at p, or NULL when it might decode differently: a float that overflows,
 * or (unless wide_integers) an integer orjson would make a float (outside [-2**63, 2**64 - 1];
 * msgspec keeps it an int). */
static const unsigned char *number_end(const unsigned char *p, const unsigned char *end, int wide_integers) {
    const unsigned char *start = p;
    int negative = *p == '-';
    p += negative;
    const unsigned char *whole_start = p;
    Py_ssize_t whole = digits(&p, end);
    int fraction = p < end && *p == '.';
    if (fraction) {
        p++;
        digits(&p, end);
    }
    Py_ssize_t exponent = -1;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        exponent = digits(&p, end);
    }
    if (!fraction && exponent < 0) {
        if (whole <= 18 || (wide_integers && whole <= 200)) {
            return p; /* a wide integer, finite as a float too (the exact rule refuses one that is not) */
        }
        return at_most(whole_start, whole, negative ? "9223372036854775808" : "18446744073709551615") ? p : NULL;
    }
    if (exponent <= 2 && whole <= 200) {
        return p; /* below 10**(200 + 99): finite */
    }
    return overflows(start, p) ? NULL : p;
}

static int agrees(const unsigned char *p, const unsigned char *end, int wide_integers) {
    int depth = 0;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            p = string_end(p + 1, end);
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            p = number_end(p, end, wide_integers);
        } else if (c == '[' || c == '{') {
            if (++depth > MAX_DEPTH) {
                return 0;
            }
            p++;
        } else if (c == ']' || c == '}') {
            depth--;
            p++;
        } else if (c >= 0x80) {
            return 0;
        } else {
            p++;
        }
        if (p == NULL) {
            return 0;
        }
    }
    return 1;
}

static PyObject *msgspec_agrees(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "msgspec_agrees takes a JSON text and, optionally, wide_integers");
        return NULL;
    }
    int wide_integers = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (wide_integers < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    int result = agrees(data, data + view.len, wide_integers);
    PyBuffer_Release(&view);
    return PyBool_FromLong(result);
}

static PyMethodDef methods[] = {
    {"msgspec_agrees", (PyCFunction)(void (*)(void))msgspec_agrees, METH_FASTCALL,
     "msgspec_agrees(text, wide_integers=False, /)\n--\n\nTrue when msgspec's typed decoding of the JSON text "
     "can only agree with orjson.loads (wide_integers: with a reader that keeps integers beyond 64 bits)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_json_agreement", NULL, 0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__json_agreement(void) {
    for (int c = 0x20; c < 0x80; c++) {
        plain[c] = c != '"' && c != '\\';
    }
    return PyModule_Create(&module);
}
