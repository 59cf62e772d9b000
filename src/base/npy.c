/* NumPy .npy read/write.
 *
 * Layout: "\x93NUMPY", major, minor, a little-endian header length (2 bytes
 * in 1.0, 4 in 2.0/3.0), the header (a Python dict literal padded with
 * spaces and '\n'), then the raw C-order data.
 *
 * The header comes from the file, so it is parsed as hostile input: a small
 * hand-written parser that accepts exactly the literal shapes NumPy writes
 * (plus whitespace, key order, quote style and trailing commas) and never
 * evaluates anything. Every size is checked before anything is allocated,
 * and the data must be exactly count * itemsize bytes. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fileno, fstat, fsync, open flags */
#endif

#include "npy.h"

#include "base/fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "mem.h"
#include "tensor.h"

#define KC_NPY_MAGIC "\x93NUMPY"
#define KC_NPY_MAGIC_LEN 6
#define KC_NPY_PREFIX_LEN 8 /* magic + major + minor */
#define KC_NPY_ALIGN 64     /* NumPy's ARRAY_ALIGN */
/* NumPy leaves room to rewrite the first dimension in place with up to 21
 * digits (GROWTH_AXIS_MAX_DIGITS); we pad the same way to match its bytes. */
#define KC_NPY_GROWTH_DIGITS 21
#define KC_NPY_DESCR_CAP 32

typedef struct kc_npy_header {
    kc_dtype dtype;
    int fortran_order;
    kc_shape shape;
} kc_npy_header;

typedef struct kc_npy_lexer {
    const char *start;
    const char *p;
    const char *end;
} kc_npy_lexer;

enum { KC_NPY_KEY_DESCR = 1, KC_NPY_KEY_FORTRAN = 2, KC_NPY_KEY_SHAPE = 4 };

/* ------------------------------------------------------------ preamble */

/* Checks magic and version in the first n bytes; *len_field gets the size
 * of the header-length field that follows them. */
static kc_status kc_npy_check_preamble(const unsigned char *p, size_t n, size_t *len_field)
{
    if (n < KC_NPY_MAGIC_LEN || memcmp(p, KC_NPY_MAGIC, KC_NPY_MAGIC_LEN) != 0)
        return kc_fail(KC_ERR_FORMAT, "not a .npy file (bad magic)");
    if (n < KC_NPY_PREFIX_LEN)
        return kc_fail(KC_ERR_FORMAT, "npy preamble truncated");
    unsigned major = p[6], minor = p[7];
    if (minor != 0 || major < 1 || major > 3)
        return kc_fail(KC_ERR_UNSUPPORTED,
                       "npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", major,
                       minor);
    *len_field = major == 1 ? 2 : 4;
    return KC_OK;
}

static kc_status kc_npy_header_len(const unsigned char *field, size_t len_field, size_t *hlen)
{
    uint32_t v = 0;
    for (size_t i = len_field; i-- > 0;)
        v = (v << 8) | field[i];
    if (v > KC_NPY_MAX_HEADER)
        return kc_fail(KC_ERR_LIMIT, "npy header length %lu exceeds the %zu-byte limit",
                       (unsigned long)v, KC_NPY_MAX_HEADER);
    *hlen = v;
    return KC_OK;
}

/* ------------------------------------------------------------- lexing */

static int kc_npy_peek(const kc_npy_lexer *lx)
{
    return lx->p < lx->end ? (unsigned char)*lx->p : -1;
}

static int kc_npy_is_digit(int c) { return c >= '0' && c <= '9'; }

/* Python allows any of these between tokens inside a dict literal. */
static void kc_npy_skip_ws(kc_npy_lexer *lx)
{
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r'))
        lx->p++;
}

static kc_status kc_npy_unexpected(const kc_npy_lexer *lx, const char *wanted)
{
    size_t offset = (size_t)(lx->p - lx->start);
    int c = kc_npy_peek(lx);
    if (c < 0)
        return kc_fail(KC_ERR_FORMAT, "expected %s at offset %zu, found the end of the header",
                       wanted, offset);
    if (c >= 0x20 && c < 0x7f)
        return kc_fail(KC_ERR_FORMAT, "expected %s at offset %zu, found '%c'", wanted, offset, c);
    return kc_fail(KC_ERR_FORMAT, "expected %s at offset %zu, found byte 0x%02x", wanted, offset,
                   c);
}

static kc_status kc_npy_expect(kc_npy_lexer *lx, char c, const char *wanted)
{
    if (kc_npy_peek(lx) != (unsigned char)c)
        return kc_npy_unexpected(lx, wanted);
    lx->p++;
    return KC_OK;
}

/* A quoted string of printable ASCII. Escapes are refused rather than
 * decoded: NumPy never writes them, and accepting them would only widen
 * what a hostile header can express. */
static kc_status kc_npy_string(kc_npy_lexer *lx, char *buf, size_t cap, const char *wanted)
{
    int quote = kc_npy_peek(lx);
    if (quote != '\'' && quote != '"')
        return kc_npy_unexpected(lx, wanted);
    lx->p++;
    size_t n = 0;
    for (; lx->p < lx->end && *lx->p != quote; lx->p++) {
        unsigned char c = (unsigned char)*lx->p;
        if (c == '\\')
            return kc_fail(KC_ERR_FORMAT, "backslash escapes are not accepted in header strings");
        if (c < 0x20 || c > 0x7e)
            return kc_fail(KC_ERR_FORMAT, "byte 0x%02x inside a header string", c);
        if (n + 1 >= cap)
            return kc_fail(KC_ERR_FORMAT, "header string longer than %zu bytes", cap - 1);
        buf[n++] = (char)c;
    }
    if (lx->p == lx->end)
        return kc_fail(KC_ERR_FORMAT, "unterminated string in the header");
    lx->p++;
    buf[n] = '\0';
    return KC_OK;
}

static int kc_npy_match_word(kc_npy_lexer *lx, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, word, n) != 0)
        return 0;
    /* "Truex" is a name, not True. */
    if ((size_t)(lx->end - lx->p) > n) {
        char next = lx->p[n];
        if (next == '_' || kc_npy_is_digit(next) || (next >= 'a' && next <= 'z') ||
            (next >= 'A' && next <= 'Z'))
            return 0;
    }
    lx->p += n;
    return 1;
}

static kc_status kc_npy_bool(kc_npy_lexer *lx, int *value)
{
    if (kc_npy_match_word(lx, "True"))
        *value = 1;
    else if (kc_npy_match_word(lx, "False"))
        *value = 0;
    else
        return kc_npy_unexpected(lx, "True or False for 'fortran_order'");
    return KC_OK;
}

/* A decimal int64, optionally negative (reported later, as a shape error)
 * and optionally with the 'L' suffix Python 2 NumPy wrote for longs. */
static kc_status kc_npy_int(kc_npy_lexer *lx, int64_t *value)
{
    int negative = 0;
    if (kc_npy_peek(lx) == '-') {
        negative = 1;
        lx->p++;
    }
    const char *digits = lx->p;
    if (!kc_npy_is_digit(kc_npy_peek(lx)))
        return kc_npy_unexpected(lx, "a dimension (a decimal integer)");
    if (*lx->p == '0' && lx->p + 1 < lx->end && kc_npy_is_digit(lx->p[1]))
        return kc_fail(KC_ERR_FORMAT, "shape dimension with a leading zero is not a Python int");
    int64_t v = 0;
    for (; kc_npy_is_digit(kc_npy_peek(lx)); lx->p++) {
        int d = *lx->p - '0';
        /* The header text is not NUL-terminated: print a bounded prefix. */
        if (v > (INT64_MAX - d) / 10)
            return kc_fail(KC_ERR_LIMIT, "shape dimension %.*s... does not fit in 64 bits",
                           (int)(lx->p - digits), digits);
        v = v * 10 + d;
    }
    if (kc_npy_peek(lx) == 'L')
        lx->p++;
    *value = negative ? -v : v;
    return KC_OK;
}

/* ------------------------------------------------------------- values */

static kc_status kc_npy_shape(kc_npy_lexer *lx, kc_shape *shape)
{
    if (kc_npy_peek(lx) == '[')
        return kc_fail(KC_ERR_FORMAT, "shape is a list; NumPy writes a tuple");
    KC_TRY(kc_npy_expect(lx, '(', "'(' opening the shape tuple"));
    int n = 0, trailing_comma = 0;
    int64_t negative = 0;
    kc_npy_skip_ws(lx);
    while (kc_npy_peek(lx) != ')') {
        int64_t d = 0;
        KC_TRY(kc_npy_int(lx, &d));
        if (n < KC_MAX_RANK)
            shape->dims[n] = d;
        if (d < 0 && negative == 0)
            negative = d;
        n++; /* bounded: the header is at most KC_NPY_MAX_HEADER bytes */
        kc_npy_skip_ws(lx);
        trailing_comma = kc_npy_peek(lx) == ',';
        if (trailing_comma) {
            lx->p++;
            kc_npy_skip_ws(lx);
        } else if (kc_npy_peek(lx) != ')') {
            return kc_npy_unexpected(lx, "',' or ')' in the shape tuple");
        }
    }
    lx->p++;
    /* In Python "(3)" is the int 3, which NumPy rejects as a shape. */
    if (n == 1 && !trailing_comma)
        return kc_fail(KC_ERR_FORMAT, "shape (%lld) is an int, not a tuple (NumPy writes (%lld,))",
                       (long long)shape->dims[0], (long long)shape->dims[0]);
    if (n > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "shape has %d dimensions (max %d)", n, KC_MAX_RANK);
    if (negative < 0)
        return kc_fail(KC_ERR_FORMAT, "shape has a negative dimension (%lld)", (long long)negative);
    shape->rank = n;
    return KC_OK;
}

/* "O", "|O", "<O8", "object": NumPy stores such arrays as pickles. */
static int kc_npy_is_object_descr(const char *s)
{
    if (*s && strchr("<>|=", *s))
        s++;
    if (strcmp(s, "object") == 0)
        return 1;
    if (*s++ != 'O')
        return 0;
    while (kc_npy_is_digit(*s))
        s++;
    return *s == '\0';
}

/* Skips a quoted string inside a structured descr, where field names may
 * be long or escaped; 1 if it is an object descr. The file is refused
 * either way, so this only has to find the closing quote. */
static kc_status kc_npy_skip_string(kc_npy_lexer *lx, int *is_object)
{
    int quote = kc_npy_peek(lx);
    const char *start = ++lx->p;
    for (; lx->p < lx->end && *lx->p != quote; lx->p++)
        if (*lx->p == '\\' && lx->p + 1 < lx->end)
            lx->p++;
    if (lx->p == lx->end)
        return kc_fail(KC_ERR_FORMAT, "unterminated string in the header");
    size_t n = (size_t)(lx->p++ - start);
    char text[KC_NPY_DESCR_CAP];
    *is_object = 0;
    if (n < sizeof text) {
        memcpy(text, start, n);
        text[n] = '\0';
        *is_object = kc_npy_is_object_descr(text);
    }
    return KC_OK;
}

/* A structured dtype (descr is a list of fields) is never loaded; scan it
 * only to tell an object field (pickles: refused) from plain fields
 * (unsupported). A field named like an object descr is misread as one,
 * which only changes which refusal is reported. */
static kc_status kc_npy_structured(kc_npy_lexer *lx)
{
    char closers[32];
    int depth = 0, has_object = 0;
    do {
        int c = kc_npy_peek(lx);
        if (c < 0)
            return kc_fail(KC_ERR_FORMAT, "unterminated structured descr list");
        if (c == '\'' || c == '"') {
            int is_object = 0;
            KC_TRY(kc_npy_skip_string(lx, &is_object));
            has_object |= is_object;
            continue;
        }
        if (c == '[' || c == '(') {
            if (depth == (int)sizeof closers)
                return kc_fail(KC_ERR_FORMAT, "structured descr nested too deeply");
            closers[depth++] = c == '[' ? ']' : ')';
        } else if (c == ']' || c == ')') {
            if (c != closers[depth - 1])
                return kc_npy_unexpected(lx, "a matching bracket in the structured descr");
            depth--;
        }
        lx->p++;
    } while (depth > 0);
    if (has_object)
        return kc_fail(
            KC_ERR_REFUSED,
            "structured dtype with object fields: pickled object arrays are never loaded");
    return kc_fail(KC_ERR_UNSUPPORTED, "structured dtypes (descr is a list) are not supported");
}

static kc_dtype kc_npy_kind_dtype(char kind, unsigned size)
{
    static const struct {
        char kind;
        unsigned size;
        kc_dtype dtype;
    } table[] = {
        {'f', 2, KC_F16}, {'f', 4, KC_F32}, {'f', 8, KC_F64}, {'i', 1, KC_I8},
        {'i', 2, KC_I16}, {'i', 4, KC_I32}, {'i', 8, KC_I64}, {'u', 1, KC_U8},
        {'u', 2, KC_U16}, {'u', 4, KC_U32}, {'u', 8, KC_U64}, {'b', 1, KC_BOOL},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].kind == kind && table[i].size == size)
            return table[i].dtype;
    return KC_DTYPE_INVALID;
}

static int kc_npy_host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* "<f4" -> KC_F32. The byte order only matters for multi-byte types:
 * '<' is required there ('=' and '|' would depend on the writer's
 * machine); 1-byte types accept any order character or none. */
static kc_status kc_npy_descr_dtype(const char *descr, kc_dtype *dtype)
{
    const char *s = descr;
    char order = '=';
    if (*s && strchr("<>|=", *s))
        order = *s++;
    if (kc_npy_is_object_descr(descr))
        return kc_fail(KC_ERR_REFUSED,
                       "descr '%s' is an object array: pickled object arrays are never loaded",
                       descr);
    /* s is "<kind><size>", e.g. "f4"; '?' is NumPy's one-letter bool. */
    unsigned size = 0;
    size_t ndigits = 0;
    while (*s && ndigits < 3 && kc_npy_is_digit(s[1 + ndigits]))
        size = size * 10 + (unsigned)(s[1 + ndigits++] - '0');
    kc_dtype dt = KC_DTYPE_INVALID;
    if (strcmp(s, "?") == 0) {
        dt = KC_BOOL;
        size = 1;
    } else if (*s && ndigits > 0 && s[1 + ndigits] == '\0') {
        dt = kc_npy_kind_dtype(s[0], size);
    }
    if (dt == KC_DTYPE_INVALID) {
        /* Well-formed ("c8", "U3", "V") but not ours: unsupported; any
         * other text is not a dtype at all. */
        int well_formed = *s && s[1 + ndigits] == '\0';
        if (well_formed && strchr("biufcmMSUVa?", s[0]))
            return kc_fail(KC_ERR_UNSUPPORTED,
                           "dtype '%s' is not supported (float16/32/64, int8..64, uint8..64 "
                           "and bool are)",
                           descr);
        return kc_fail(KC_ERR_FORMAT, "descr '%s' is not a NumPy dtype", descr);
    }
    if (size > 1 && order == '>')
        return kc_fail(KC_ERR_UNSUPPORTED,
                       "big-endian dtype '%s' is not supported (convert with a.astype('<%s'))",
                       descr, s);
    if (size > 1 && order != '<')
        return kc_fail(KC_ERR_UNSUPPORTED, "dtype '%s' has no explicit byte order (expected '<%s')",
                       descr, s);
    if (size > 1 && !kc_npy_host_is_little_endian())
        return kc_fail(KC_ERR_UNSUPPORTED, "little-endian .npy data on a big-endian host");
    *dtype = dt;
    return KC_OK;
}

static kc_status kc_npy_descr(kc_npy_lexer *lx, kc_dtype *dtype)
{
    if (kc_npy_peek(lx) == '[')
        return kc_npy_structured(lx);
    char descr[KC_NPY_DESCR_CAP];
    KC_TRY(kc_npy_string(lx, descr, sizeof descr, "a dtype string for 'descr'"));
    return kc_npy_descr_dtype(descr, dtype);
}

/* ------------------------------------------------------------- header */

static kc_status kc_npy_entry(kc_npy_lexer *lx, kc_npy_header *h, unsigned *seen)
{
    char key[KC_NPY_DESCR_CAP];
    KC_TRY(kc_npy_string(lx, key, sizeof key, "a quoted key"));
    unsigned bit = strcmp(key, "descr") == 0           ? KC_NPY_KEY_DESCR
                   : strcmp(key, "fortran_order") == 0 ? KC_NPY_KEY_FORTRAN
                   : strcmp(key, "shape") == 0         ? KC_NPY_KEY_SHAPE
                                                       : 0;
    if (bit == 0)
        return kc_fail(KC_ERR_FORMAT, "unknown key '%s'", key);
    if (*seen & bit)
        return kc_fail(KC_ERR_FORMAT, "duplicate key '%s'", key);
    *seen |= bit;
    kc_npy_skip_ws(lx);
    KC_TRY(kc_npy_expect(lx, ':', "':' after a key"));
    kc_npy_skip_ws(lx);
    if (bit == KC_NPY_KEY_DESCR)
        return kc_npy_descr(lx, &h->dtype);
    if (bit == KC_NPY_KEY_FORTRAN)
        return kc_npy_bool(lx, &h->fortran_order);
    return kc_npy_shape(lx, &h->shape);
}

static kc_status kc_npy_dict(const char *text, size_t len, kc_npy_header *h)
{
    kc_npy_lexer lx = {text, text, text + len};
    unsigned seen = 0;
    memset(h, 0, sizeof *h);
    kc_npy_skip_ws(&lx);
    KC_TRY(kc_npy_expect(&lx, '{', "'{' opening the header dict"));
    for (;;) {
        kc_npy_skip_ws(&lx);
        if (kc_npy_peek(&lx) == '}')
            break;
        KC_TRY(kc_npy_entry(&lx, h, &seen));
        kc_npy_skip_ws(&lx);
        if (kc_npy_peek(&lx) == ',')
            lx.p++;
        else if (kc_npy_peek(&lx) != '}')
            return kc_npy_unexpected(&lx, "',' or '}' after a value");
    }
    lx.p++;
    kc_npy_skip_ws(&lx);
    if (lx.p != lx.end)
        return kc_npy_unexpected(&lx, "only padding after the header dict");
    static const char *const names[] = {"descr", "fortran_order", "shape"};
    for (unsigned i = 0; i < 3; i++)
        if (!(seen & (1u << i)))
            return kc_fail(KC_ERR_FORMAT, "key '%s' is missing", names[i]);
    return KC_OK;
}

/* Fortran and C order lay out the same bytes when at most one dimension
 * is longer than 1 (or the array is empty), so such files load fine. */
static int kc_npy_layout_is_c(const kc_shape *shape)
{
    int long_dims = 0;
    for (int i = 0; i < shape->rank; i++) {
        if (shape->dims[i] == 0)
            return 1;
        long_dims += shape->dims[i] > 1;
    }
    return long_dims <= 1;
}

static kc_status kc_npy_check_header(const kc_npy_header *h, size_t *nbytes)
{
    int64_t count = kc_shape_count(&h->shape);
    int64_t bytes;
    if (count < 0 || kc_mul_overflows(count, (int64_t)kc_dtype_size(h->dtype), &bytes) ||
        (uint64_t)bytes > SIZE_MAX) {
        char text[256];
        kc_shape_format(&h->shape, text, sizeof text);
        return kc_fail(KC_ERR_LIMIT, "shape %s has more than 2^40 elements", text);
    }
    if (h->fortran_order && !kc_npy_layout_is_c(&h->shape))
        return kc_fail(KC_ERR_UNSUPPORTED,
                       "fortran_order True is not supported (save np.ascontiguousarray(a))");
    *nbytes = (size_t)bytes;
    return KC_OK;
}

/* Parses and validates the header text; errors get the "npy header"
 * prefix here so every caller reports them the same way. */
static kc_status kc_npy_parse_header(const char *text, size_t len, kc_npy_header *h, size_t *nbytes)
{
    kc_status status = kc_npy_dict(text, len, h);
    if (status == KC_OK)
        status = kc_npy_check_header(h, nbytes);
    return status == KC_OK ? KC_OK : kc_fail_context(status, "npy header");
}

static kc_status kc_npy_check_data_size(const kc_npy_header *h, size_t need, uint64_t have)
{
    if (have == need)
        return KC_OK;
    char text[256];
    kc_shape_format(&h->shape, text, sizeof text);
    if (have < need)
        return kc_fail(KC_ERR_FORMAT,
                       "npy data truncated: %s %s needs %zu bytes, the file holds %llu",
                       kc_dtype_name(h->dtype), text, need, (unsigned long long)have);
    return kc_fail(KC_ERR_FORMAT, "npy data: %llu trailing bytes after the %zu that %s %s needs",
                   (unsigned long long)(have - need), need, kc_dtype_name(h->dtype), text);
}

/* Any nonzero byte is True to NumPy; store 0/1 so code reading kc bools
 * never sees other values. */
static void kc_npy_normalize_bools(kc_tensor *t, size_t nbytes)
{
    if (t->dtype != KC_BOOL)
        return;
    unsigned char *p = t->data;
    for (size_t i = 0; i < nbytes; i++)
        p[i] = p[i] != 0;
}

kc_status kc_npy_parse(const void *buf, size_t len, kc_tensor **out)
{
    const unsigned char *p = buf;
    size_t len_field = 0, hlen = 0, nbytes = 0;
    kc_npy_header h = {0};
    if (!out)
        return kc_fail(KC_ERR_ARG, "kc_npy_parse: out is NULL");
    *out = NULL;
    if (!buf && len)
        return kc_fail(KC_ERR_ARG, "kc_npy_parse: buffer is NULL");
    KC_TRY(kc_npy_check_preamble(p, len, &len_field));
    if (len < KC_NPY_PREFIX_LEN + len_field)
        return kc_fail(KC_ERR_FORMAT, "npy preamble truncated");
    KC_TRY(kc_npy_header_len(p + KC_NPY_PREFIX_LEN, len_field, &hlen));
    size_t offset = KC_NPY_PREFIX_LEN + len_field;
    if (hlen > len - offset)
        return kc_fail(KC_ERR_FORMAT,
                       "npy header length %zu runs past the end of the data (%zu bytes)", hlen,
                       len);
    KC_TRY(kc_npy_parse_header((const char *)p + offset, hlen, &h, &nbytes));
    offset += hlen;
    KC_TRY(kc_npy_check_data_size(&h, nbytes, len - offset));
    kc_tensor *t = NULL;
    KC_TRY(kc_tensor_new(h.dtype, h.shape.rank, h.shape.dims, &t));
    if (nbytes)
        memcpy(t->data, p + offset, nbytes);
    kc_npy_normalize_bools(t, nbytes);
    *out = t;
    return KC_OK;
}

/* ---------------------------------------------------------- file load */

static kc_status kc_npy_read_failed(FILE *f, const char *what)
{
    if (ferror(f))
        return kc_fail(KC_ERR_IO, "read error in the %s: %s", what, strerror(errno));
    return kc_fail(KC_ERR_FORMAT, "npy %s truncated", what);
}

/* Size of a regular file, or -1 (pipes, devices) when only reading to the
 * end can tell. */
static int64_t kc_npy_stream_size(FILE *f)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        return -1;
    return (int64_t)st.st_size;
}

/* Reads and parses preamble and header; *data_offset gets where the data
 * starts. */
static kc_status kc_npy_read_header(FILE *f, int64_t fsize, kc_npy_header *h, size_t *nbytes,
                                    uint64_t *data_offset)
{
    unsigned char pre[KC_NPY_PREFIX_LEN + 4];
    size_t len_field = 0, hlen = 0;
    size_t got = fread(pre, 1, KC_NPY_PREFIX_LEN, f);
    if (got < KC_NPY_PREFIX_LEN && ferror(f))
        return kc_npy_read_failed(f, "preamble");
    KC_TRY(kc_npy_check_preamble(pre, got, &len_field));
    if (fread(pre + KC_NPY_PREFIX_LEN, 1, len_field, f) != len_field)
        return kc_npy_read_failed(f, "preamble");
    KC_TRY(kc_npy_header_len(pre + KC_NPY_PREFIX_LEN, len_field, &hlen));
    /* Checked before allocating so a lying length costs nothing. */
    uint64_t offset = KC_NPY_PREFIX_LEN + len_field;
    if (fsize >= 0 && hlen > (uint64_t)fsize - offset)
        return kc_fail(KC_ERR_FORMAT,
                       "npy header length %zu runs past the end of the file (%lld bytes)", hlen,
                       (long long)fsize);
    char *text = kc_calloc(hlen + 1, 1);
    if (!text)
        return KC_ERR_NOMEM;
    kc_status status = fread(text, 1, hlen, f) == hlen ? kc_npy_parse_header(text, hlen, h, nbytes)
                                                       : kc_npy_read_failed(f, "header");
    free(text);
    *data_offset = offset + hlen;
    return status;
}

static kc_status kc_npy_read_data(FILE *f, const kc_npy_header *h, size_t nbytes, kc_tensor **out)
{
    kc_tensor *t = NULL;
    KC_TRY(kc_tensor_new(h->dtype, h->shape.rank, h->shape.dims, &t));
    size_t got = fread(t->data, 1, nbytes, f);
    kc_status status = KC_OK;
    if (got != nbytes)
        status = ferror(f) ? kc_npy_read_failed(f, "data") : kc_npy_check_data_size(h, nbytes, got);
    else if (fgetc(f) != EOF) /* the file grew, or is not a regular file */
        status = kc_fail(KC_ERR_FORMAT, "npy data: trailing bytes after the %zu announced", nbytes);
    if (status != KC_OK) {
        kc_tensor_free(t);
        return status;
    }
    kc_npy_normalize_bools(t, nbytes);
    *out = t;
    return KC_OK;
}

static kc_status kc_npy_load_stream(FILE *f, kc_tensor **out)
{
    kc_npy_header h = {0};
    size_t nbytes = 0;
    int64_t fsize = kc_npy_stream_size(f);
    uint64_t offset = 0;
    KC_TRY(kc_npy_read_header(f, fsize, &h, &nbytes, &offset));
    /* Checked before allocating, so a header announcing terabytes in a
     * small file fails as a format error without touching memory. */
    if (fsize >= 0) {
        uint64_t size = (uint64_t)fsize;
        KC_TRY(kc_npy_check_data_size(&h, nbytes, size > offset ? size - offset : 0));
    }
    return kc_npy_read_data(f, &h, nbytes, out);
}

kc_status kc_tensor_load_npy(const char *path, kc_tensor **out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "kc_tensor_load_npy: out is NULL");
    *out = NULL;
    if (!path)
        return kc_fail(KC_ERR_ARG, "kc_tensor_load_npy: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f)
        return kc_fail(KC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    kc_status status = kc_npy_load_stream(f, out);
    fclose(f);
    return status == KC_OK ? KC_OK : kc_fail_context(status, "%s", path);
}

/* ---------------------------------------------------------------- save */

static const char *kc_npy_dtype_descr(kc_dtype dtype)
{
    switch (dtype) {
    case KC_F16: return "<f2";
    case KC_F32: return "<f4";
    case KC_F64: return "<f8";
    case KC_I8: return "|i1";
    case KC_I16: return "<i2";
    case KC_I32: return "<i4";
    case KC_I64: return "<i8";
    case KC_U8: return "|u1";
    case KC_U16: return "<u2";
    case KC_U32: return "<u4";
    case KC_U64: return "<u8";
    case KC_BOOL: return "|b1";
    case KC_BF16: /* NumPy has no bfloat16; ml_dtypes' is not portable */
    case KC_DTYPE_INVALID: break;
    }
    return NULL;
}

size_t kc_npy_wrap_header(const char *dict, size_t dict_len, unsigned char *out, size_t cap)
{
    for (unsigned major = 1; major <= 2; major++) {
        size_t len_field = major == 1 ? 2 : 4;
        size_t prefix = KC_NPY_PREFIX_LEN + len_field;
        /* NumPy pads 1..64 bytes (a full 64 when already aligned). */
        size_t pad = KC_NPY_ALIGN - (prefix + dict_len + 1) % KC_NPY_ALIGN;
        if (dict_len > UINT32_MAX - pad - 1)
            return 0;
        size_t hlen = dict_len + pad + 1;
        if (major == 1 && hlen > 0xffff)
            continue;
        if (prefix + hlen > cap)
            return 0;
        memcpy(out, KC_NPY_MAGIC, KC_NPY_MAGIC_LEN);
        out[6] = (unsigned char)major;
        out[7] = 0;
        for (size_t i = 0; i < len_field; i++)
            out[KC_NPY_PREFIX_LEN + i] = (unsigned char)(hlen >> (8 * i));
        memcpy(out + prefix, dict, dict_len);
        memset(out + prefix + dict_len, ' ', pad);
        out[prefix + hlen - 1] = '\n';
        return prefix + hlen;
    }
    return 0;
}

kc_status kc_npy_encode_header(const kc_tensor *t, unsigned char *out, size_t cap, size_t *len)
{
    const char *descr = kc_npy_dtype_descr(t->dtype);
    if (!descr)
        return kc_fail(t->dtype == KC_BF16 ? KC_ERR_UNSUPPORTED : KC_ERR_ARG,
                       "dtype %s cannot be stored in a .npy file", kc_dtype_name(t->dtype));
    int64_t count = kc_shape_count(&t->shape);
    if (count == -1)
        return kc_fail(KC_ERR_ARG, "cannot save a tensor with an unknown dimension");
    if (count < 0)
        return KC_ERR_LIMIT;
    /* Rank <= 8 with 19-digit dims keeps the dict far below this. */
    char dict[512];
    int n =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->shape.rank; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", i ? ", " : "",
                      (long long)t->shape.dims[i]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->shape.rank == 1 ? "," : "");
    if (t->shape.rank > 0) {
        int digits = snprintf(NULL, 0, "%lld", (long long)t->shape.dims[0]);
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%*s", KC_NPY_GROWTH_DIGITS - digits, "");
    }
    *len = kc_npy_wrap_header(dict, (size_t)n, out, cap);
    return *len ? KC_OK : kc_fail(KC_ERR_LIMIT, "npy header does not fit in %zu bytes", cap);
}

/* A fresh temporary next to the destination (same file system, so rename
 * is atomic). open() with 0666 lets the umask set the final mode, unlike
 * mkstemp's 0600. */
static kc_status kc_npy_open_temp(const char *path, char **tmp_path, int *fd)
{
    static atomic_uint counter;
    size_t cap = strlen(path) + 64;
    char *tmp = kc_calloc(cap, 1);
    if (!tmp)
        return KC_ERR_NOMEM;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
        *fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (*fd >= 0) {
            *tmp_path = tmp;
            return KC_OK;
        }
        if (errno != EEXIST)
            break;
    }
    kc_status status =
        kc_fail(KC_ERR_IO, "cannot create temporary file %s: %s", tmp, strerror(errno));
    free(tmp);
    return status;
}

static kc_status kc_npy_write_file(const kc_tensor *t, const unsigned char *header, size_t hlen,
                                   size_t nbytes, const char *path)
{
    char *tmp = NULL;
    int fd = -1;
    KC_TRY(kc_npy_open_temp(path, &tmp, &fd));
    kc_status status = kc_write_full(fd, header, hlen, path);
    if (status == KC_OK)
        status = kc_write_full(fd, t->data, nbytes, path);
    /* fsync before rename: otherwise a crash can leave the new name
     * pointing at a file whose data never reached the disk. */
    if (status == KC_OK && fsync(fd) != 0)
        status = kc_fail(KC_ERR_IO, "fsync failed: %s", strerror(errno));
    if (close(fd) != 0 && status == KC_OK)
        status = kc_fail(KC_ERR_IO, "close failed: %s", strerror(errno));
    if (status == KC_OK && rename(tmp, path) != 0)
        status = kc_fail(KC_ERR_IO, "cannot rename %s into place: %s", tmp, strerror(errno));
    if (status != KC_OK)
        unlink(tmp);
    free(tmp);
    return status;
}

kc_status kc_tensor_save_npy(const kc_tensor *tensor, const char *path)
{
    if (!tensor || !path)
        return kc_fail(KC_ERR_ARG, "kc_tensor_save_npy: %s is NULL", tensor ? "path" : "tensor");
    unsigned char header[1024];
    size_t hlen = 0;
    kc_status status = kc_npy_encode_header(tensor, header, sizeof header, &hlen);
    if (status != KC_OK)
        return kc_fail_context(status, "%s", path);
    /* The count was validated by kc_npy_encode_header (<= 2^40). */
    size_t nbytes = (size_t)kc_shape_count(&tensor->shape) * kc_dtype_size(tensor->dtype);
    if (nbytes > 0 && !tensor->data)
        return kc_fail(KC_ERR_ARG, "%s: tensor has no data", path);
    status = kc_npy_write_file(tensor, header, hlen, nbytes, path);
    return status == KC_OK ? KC_OK : kc_fail_context(status, "%s", path);
}
