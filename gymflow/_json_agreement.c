/* One pass over a JSON text telling whether msgspec's typed decoding of it can only agree with
 * orjson.loads (msgspec_agrees), and a stricter pass that also holds the text to JSON's grammar
 * and finds the values of a few top-level members of an object (object_members); see
 * gymflow/_json_agreement.pyi for both contracts.
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

/* The end of the escape at p (p[0] == '\\'), or NULL when msgspec and orjson might differ on it
 * or both refuse it. */
static const unsigned char *escape_end(const unsigned char *p, const unsigned char *end) {
    if (end - p < 2) {
        return NULL;
    }
    if (p[1] != 'u') {
        return p[1] != 0 && strchr("\"\\/bfnrt", p[1]) != NULL ? p + 2 : NULL; /* both refuse another */
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

/* ---- object_members: one strict pass that validates a JSON object text and finds members ---- */

#define MAX_NAMES 16

static const unsigned char *skip_space(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
        p++;
    }
    return p;
}

/* The end of the number at p, or NULL when it breaks JSON's grammar or number_end's ranges. */
static const unsigned char *strict_number_end(const unsigned char *p, const unsigned char *end) {
    const unsigned char *start = p;
    p += p < end && *p == '-';
    if (p >= end || *p < '0' || *p > '9') {
        return NULL;
    }
    if (*p == '0') {
        p++;
    } else {
        digits(&p, end);
    }
    if (p < end && *p == '.') {
        p++;
        if (digits(&p, end) == 0) {
            return NULL;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        if (digits(&p, end) == 0) {
            return NULL;
        }
    }
    return number_end(start, end, 0) == p ? p : NULL;
}

static const unsigned char *literal_end(const unsigned char *p, const unsigned char *end, const char *word) {
    size_t length = strlen(word);
    return (size_t)(end - p) >= length && memcmp(p, word, length) == 0 ? p + length : NULL;
}

typedef struct {
    const char *name;
    Py_ssize_t length;
} Name;

/* Which of names the key from start to end is (its bytes as they are), or -1. */
static int named(const unsigned char *start, const unsigned char *end, const Name *names, int count) {
    Py_ssize_t length = end - start;
    for (int i = 0; i < count; i++) {
        if (names[i].length == length && memcmp(names[i].name, start, (size_t)length) == 0) {
            return i;
        }
    }
    return -1;
}

enum { VALUE, VALUE_OR_CLOSE, KEY, KEY_OR_CLOSE, AFTER_VALUE };

/* Whether the text from p to end is one JSON object that orjson.loads accepts and on which
 * msgspec_agrees holds (its rules, plus JSON's grammar), with no escape in a top-level key; if so,
 * found[i] holds the offsets of the value of the last top-level member named names[i] ({-1, -1}
 * when there is none). */
static int object_members_of(const unsigned char *text, const unsigned char *end, const Name *names, int count,
                             Py_ssize_t (*found)[2]) {
    unsigned char stack[MAX_DEPTH];
    const unsigned char *p = skip_space(text, end);
    if (p >= end || *p != '{') {
        return 0;
    }
    stack[0] = '{';
    int depth = 1;
    int member = -1;
    const unsigned char *value_start = NULL;
    int state = KEY_OR_CLOSE;
    p++;
    for (;;) {
        p = skip_space(p, end);
        if (p >= end) {
            return 0;
        }
        unsigned char c = *p;
        if (state == KEY || state == KEY_OR_CLOSE) {
            if (c == '}' && state == KEY_OR_CLOSE) {
                depth--;
                p++;
            } else {
                if (c != '"') {
                    return 0;
                }
                const unsigned char *key = p + 1;
                p = string_end(key, end);
                if (p == NULL) {
                    return 0;
                }
                if (depth == 1) {
                    if (memchr(key, '\\', (size_t)(p - 1 - key)) != NULL) {
                        return 0; /* a key spelled with escapes may be one of names */
                    }
                    member = named(key, p - 1, names, count);
                }
                p = skip_space(p, end);
                if (p >= end || *p != ':') {
                    return 0;
                }
                p++;
                state = VALUE;
                continue;
            }
        } else if (state == AFTER_VALUE) {
            unsigned char open = stack[depth - 1];
            if (c == ',') {
                p++;
                state = open == '{' ? KEY : VALUE;
                continue;
            }
            if (c != (open == '{' ? '}' : ']')) {
                return 0;
            }
            depth--;
            p++;
        } else if (c == ']' && state == VALUE_OR_CLOSE) {
            depth--;
            p++;
        } else {
            if (depth == 1) {
                value_start = p;
            }
            if (c == '{' || c == '[') {
                if (depth >= MAX_DEPTH) {
                    return 0;
                }
                stack[depth++] = c;
                p++;
                state = c == '{' ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
                continue;
            }
            if (c == '"') {
                p = string_end(p + 1, end);
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                p = strict_number_end(p, end);
            } else if (c == 't') {
                p = literal_end(p, end, "true");
            } else if (c == 'f') {
                p = literal_end(p, end, "false");
            } else if (c == 'n') {
                p = literal_end(p, end, "null");
            } else {
                return 0;
            }
            if (p == NULL) {
                return 0;
            }
        }
        /* A value ended at p: a scalar, or the container just closed. */
        if (depth == 0) {
            return skip_space(p, end) == end;
        }
        if (depth == 1 && member >= 0) {
            found[member][0] = value_start - text;
            found[member][1] = p - text;
            member = -1;
        }
        state = AFTER_VALUE;
    }
}

static PyObject *object_members(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "object_members takes a JSON text and a tuple of member names");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(args[1]);
    if (count > MAX_NAMES) {
        PyErr_Format(PyExc_ValueError, "object_members finds at most %d members", MAX_NAMES);
        return NULL;
    }
    Name names[MAX_NAMES];
    Py_ssize_t found[MAX_NAMES][2];
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(args[1], i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "object_members: each member name is bytes");
            return NULL;
        }
        names[i].name = PyBytes_AS_STRING(name);
        names[i].length = PyBytes_GET_SIZE(name);
        found[i][0] = found[i][1] = -1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)view.buf;
    int ok = object_members_of(data, data + view.len, names, (int)count, found);
    PyBuffer_Release(&view);
    if (!ok) {
        Py_RETURN_NONE;
    }
    PyObject *result = PyTuple_New(count);
    if (result == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item;
        if (found[i][0] < 0) {
            item = Py_NewRef(Py_None);
        } else {
            PyObject *start = PyLong_FromSsize_t(found[i][0]);
            PyObject *stop = PyLong_FromSsize_t(found[i][1]);
            item = start != NULL && stop != NULL ? PySlice_New(start, stop, NULL) : NULL;
            Py_XDECREF(start);
            Py_XDECREF(stop);
            if (item == NULL) {
                Py_DECREF(result);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(result, i, item);
    }
    return result;
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
    {"object_members", (PyCFunction)(void (*)(void))object_members, METH_FASTCALL,
     "object_members(text, names, /)\n--\n\nThe slices of text holding the values of the top-level members "
     "named (bytes), or None when text is not one JSON object that orjson.loads reads as msgspec_agrees "
     "requires."},
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
