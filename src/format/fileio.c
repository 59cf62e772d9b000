/* Whole-file reads and the JS-wrapper adapter (see fileio.h).
 *
 * The adapter is a converter, not an interpreter: it recognises a small,
 * data-only subset of JavaScript (object/array literals, strings, numbers,
 * !0/!1, true/false/null, void 0) and refuses everything else, so a
 * hostile wrapper can at worst produce a format error. */
#include "format/fileio.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/mem.h"

/* Deeper literals than this are hostile: real model configs nest < 20. */
#define KC_JSWRAP_MAX_DEPTH 512
/* The JSON we emit can be up to 6x the literal (a raw control byte in a
 * string becomes \u00XX); never let that exceed 1 GiB. */
#define KC_JSWRAP_MAX_OUTPUT ((size_t)1 << 30)
/* How far into a file kc_jswrap_detect looks for "module.exports". */
#define KC_JSWRAP_DETECT_WINDOW 4096

/* ------------------------------------------------------------ file reads */

/* Reads to EOF, at most max_bytes. hint (the size fstat reported, 0 if
 * unknown) sizes the first allocation so a regular file is read in one
 * go; the loop still copes with files that grow or pipes. */
static kc_status kc_fileio_read_stream(FILE *f, const char *path, size_t max_bytes, size_t hint,
                                       char **data, size_t *len)
{
    /* +2: room for the NUL and one byte past the cap to detect overflow. */
    size_t cap = (hint < max_bytes ? hint : max_bytes) + 2, used = 0;
    char *buf = kc_realloc_array(NULL, cap, 1);
    if (!buf)
        return kc_fail_context(KC_ERR_NOMEM, "%s", path);
    for (;;) {
        if (cap - used < 2 && kc_grow((void **)&buf, &cap, used + 65536 + 2, 1) != KC_OK) {
            free(buf);
            return kc_fail_context(KC_ERR_NOMEM, "%s", path);
        }
        size_t want = cap - used - 1;
        size_t got = fread(buf + used, 1, want, f);
        used += got;
        if (used > max_bytes) {
            free(buf);
            return kc_fail(KC_ERR_LIMIT, "%s: file is larger than %zu bytes", path, max_bytes);
        }
        if (got < want) {
            if (ferror(f)) {
                free(buf);
                return kc_fail(KC_ERR_IO, "%s: read error: %s", path, strerror(errno));
            }
            break;
        }
    }
    buf[used] = '\0';
    *data = buf;
    *len = used;
    return KC_OK;
}

/* kc_read_file, also telling whether the file does not exist (errno is
 * not reliable once an error message has been formatted). */
static kc_status kc_fileio_read(const char *path, size_t max_bytes, char **data, size_t *len,
                                int *missing)
{
    *data = NULL;
    *len = 0;
    *missing = 0;
    if (!path || !*path)
        return kc_fail(KC_ERR_ARG, "empty file path");
    FILE *f = fopen(path, "rb");
    if (!f) {
        int err = errno;
        *missing = err == ENOENT;
        return kc_fail(KC_ERR_IO, "%s: cannot open: %s", path, strerror(err));
    }
    struct stat st;
    size_t hint = 0;
    if (fstat(fileno(f), &st) == 0) {
        /* Directories open fine on Linux but read as EISDIR: say so plainly. */
        if (S_ISDIR(st.st_mode)) {
            fclose(f);
            return kc_fail(KC_ERR_IO, "%s: is a directory, not a file", path);
        }
        /* Fail early on regular files; pipes are still capped while reading. */
        if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > max_bytes) {
            fclose(f);
            return kc_fail(KC_ERR_LIMIT, "%s: file is larger than %zu bytes", path, max_bytes);
        }
        if (S_ISREG(st.st_mode))
            hint = (size_t)st.st_size;
    }
    kc_status status = kc_fileio_read_stream(f, path, max_bytes, hint, data, len);
    fclose(f);
    return status;
}

kc_status kc_read_file(const char *path, size_t max_bytes, char **data, size_t *len)
{
    int missing;
    return kc_fileio_read(path, max_bytes, data, len, &missing);
}

/* --------------------------------------------------------------- detect */

static size_t kc_jswrap_skip_bom_space(const char *data, size_t len)
{
    size_t i = 0;
    if (len >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0)
        i = 3;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    return i;
}

/* Bounded substring search (memmem is a GNU extension). */
static const char *kc_jswrap_find(const char *data, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    if (n == 0 || len < n)
        return NULL;
    for (size_t i = 0; i + n <= len; i++)
        if (data[i] == needle[0] && memcmp(data + i, needle, n) == 0)
            return data + i;
    return NULL;
}

int kc_jswrap_detect(const char *data, size_t len)
{
    if (!data)
        return 0;
    size_t i = kc_jswrap_skip_bom_space(data, len);
    /* A JSON document is never a wrapper, even if a string inside it
     * mentions module.exports. */
    if (i < len && (data[i] == '{' || data[i] == '['))
        return 0;
    if (len - i >= 9 && memcmp(data + i, "!function", 9) == 0)
        return 1;
    size_t window = len < KC_JSWRAP_DETECT_WINDOW ? len : KC_JSWRAP_DETECT_WINDOW;
    return kc_jswrap_find(data, window, "module.exports") != NULL;
}

/* ---------------------------------------------------- literal converter */

typedef struct kc_jswrap_conv {
    const char *src;
    size_t len;
    size_t pos;
    char *out;
    size_t out_len;
    size_t out_cap;
    int depth;
    int pending_high; /* last string unit was a high surrogate escape */
} kc_jswrap_conv;

static kc_status kc_jswrap_error(const kc_jswrap_conv *c, const char *what)
{
    if (c->pos >= c->len)
        return kc_fail(KC_ERR_FORMAT, "JS payload: %s at end of input (offset %zu)", what, c->pos);
    unsigned char ch = (unsigned char)c->src[c->pos];
    if (ch >= 0x20 && ch < 0x7f)
        return kc_fail(KC_ERR_FORMAT, "JS payload: %s at offset %zu ('%c')", what, c->pos, ch);
    return kc_fail(KC_ERR_FORMAT, "JS payload: %s at offset %zu (byte 0x%02x)", what, c->pos, ch);
}

static int kc_jswrap_peek(const kc_jswrap_conv *c)
{
    return c->pos < c->len ? (unsigned char)c->src[c->pos] : -1;
}

static int kc_jswrap_peek_at(const kc_jswrap_conv *c, size_t ahead)
{
    return c->pos + ahead < c->len ? (unsigned char)c->src[c->pos + ahead] : -1;
}

static kc_status kc_jswrap_emit(kc_jswrap_conv *c, const char *s, size_t n)
{
    if (n > KC_JSWRAP_MAX_OUTPUT - c->out_len)
        return kc_fail(KC_ERR_LIMIT, "JS payload: converted JSON exceeds %zu bytes",
                       KC_JSWRAP_MAX_OUTPUT);
    /* +1 keeps room for the final NUL. */
    KC_TRY(kc_grow((void **)&c->out, &c->out_cap, c->out_len + n + 1, 1));
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
    return KC_OK;
}

static kc_status kc_jswrap_emit_str(kc_jswrap_conv *c, const char *s)
{
    return kc_jswrap_emit(c, s, strlen(s));
}

static kc_status kc_jswrap_emit_u16(kc_jswrap_conv *c, unsigned unit)
{
    char buf[8];
    snprintf(buf, sizeof buf, "\\u%04x", unit & 0xffffu);
    return kc_jswrap_emit(c, buf, 6);
}

/* A UTF-16 unit from an escape. JS strings may hold lone surrogates, but
 * JSON parsers (cJSON among them) reject them, and no model needs one. */
static kc_status kc_jswrap_emit_unit(kc_jswrap_conv *c, unsigned unit)
{
    int high = unit >= 0xD800 && unit <= 0xDBFF;
    int low = unit >= 0xDC00 && unit <= 0xDFFF;
    if (low != c->pending_high)
        return kc_jswrap_error(c, "unpaired surrogate escape in string");
    c->pending_high = high;
    return kc_jswrap_emit_u16(c, unit);
}

static int kc_jswrap_is_ident_start(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '$';
}

static int kc_jswrap_is_ident_char(int ch)
{
    return kc_jswrap_is_ident_start(ch) || (ch >= '0' && ch <= '9');
}

static int kc_jswrap_is_digit(int ch) { return ch >= '0' && ch <= '9'; }

static int kc_jswrap_hex_value(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Whitespace and comments: minified bundles have none inside the payload,
 * but hand-written wrappers may. */
static kc_status kc_jswrap_skip_space(kc_jswrap_conv *c)
{
    for (;;) {
        int ch = kc_jswrap_peek(c);
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f') {
            c->pos++;
        } else if (ch == '/' && kc_jswrap_peek_at(c, 1) == '/') {
            while (c->pos < c->len && c->src[c->pos] != '\n' && c->src[c->pos] != '\r')
                c->pos++;
        } else if (ch == '/' && kc_jswrap_peek_at(c, 1) == '*') {
            size_t start = c->pos;
            c->pos += 2;
            for (;;) {
                if (c->pos + 1 >= c->len) {
                    c->pos = start;
                    return kc_jswrap_error(c, "unterminated comment");
                }
                if (c->src[c->pos] == '*' && c->src[c->pos + 1] == '/')
                    break;
                c->pos++;
            }
            c->pos += 2;
        } else {
            return KC_OK;
        }
    }
}

static kc_status kc_jswrap_value(kc_jswrap_conv *c);

/* \u{X...}: up to 0x10FFFF, emitted as one or two JSON \u escapes. */
static kc_status kc_jswrap_code_point_escape(kc_jswrap_conv *c)
{
    uint32_t cp = 0;
    int digits = 0;
    c->pos += 2; /* 'u' '{' */
    for (;;) {
        int ch = kc_jswrap_peek(c);
        if (ch == '}')
            break;
        int v = kc_jswrap_hex_value(ch);
        if (v < 0)
            return kc_jswrap_error(c, "bad \\u{...} escape");
        cp = cp * 16 + (uint32_t)v;
        if (cp > 0x10FFFF)
            return kc_jswrap_error(c, "code point above U+10FFFF");
        digits++;
        c->pos++;
    }
    if (digits == 0)
        return kc_jswrap_error(c, "empty \\u{} escape");
    c->pos++;
    if (cp < 0x10000)
        return kc_jswrap_emit_unit(c, cp);
    cp -= 0x10000;
    KC_TRY(kc_jswrap_emit_unit(c, 0xD800 + (cp >> 10)));
    return kc_jswrap_emit_unit(c, 0xDC00 + (cp & 0x3FF));
}

/* \xHH or \uHHHH (n hex digits), re-emitted as a JSON \u escape. */
static kc_status kc_jswrap_hex_escape(kc_jswrap_conv *c, int n)
{
    unsigned v = 0;
    c->pos++; /* 'x' or 'u' */
    for (int i = 0; i < n; i++) {
        int h = kc_jswrap_hex_value(kc_jswrap_peek(c));
        if (h < 0)
            return kc_jswrap_error(c, "bad hex escape");
        v = v * 16 + (unsigned)h;
        c->pos++;
    }
    return kc_jswrap_emit_unit(c, v);
}

/* One escape; c->pos is on the character after the backslash. */
static kc_status kc_jswrap_escape(kc_jswrap_conv *c)
{
    int ch = kc_jswrap_peek(c);
    switch (ch) {
    case -1: return kc_jswrap_error(c, "unterminated string");
    case '"': c->pos++; return kc_jswrap_emit_str(c, "\\\"");
    case '\\': c->pos++; return kc_jswrap_emit_str(c, "\\\\");
    case 'b': c->pos++; return kc_jswrap_emit_str(c, "\\b");
    case 'f': c->pos++; return kc_jswrap_emit_str(c, "\\f");
    case 'n': c->pos++; return kc_jswrap_emit_str(c, "\\n");
    case 'r': c->pos++; return kc_jswrap_emit_str(c, "\\r");
    case 't': c->pos++; return kc_jswrap_emit_str(c, "\\t");
    case 'v': c->pos++; return kc_jswrap_emit_u16(c, 0x0b);
    case 'x': return kc_jswrap_hex_escape(c, 2);
    case 'u':
        if (kc_jswrap_peek_at(c, 1) == '{')
            return kc_jswrap_code_point_escape(c);
        return kc_jswrap_hex_escape(c, 4);
    case '\r': /* line continuations produce nothing */
        c->pos++;
        if (kc_jswrap_peek(c) == '\n')
            c->pos++;
        return KC_OK;
    case '\n': c->pos++; return KC_OK;
    default: break;
    }
    if (ch == '0' && !kc_jswrap_is_digit(kc_jswrap_peek_at(c, 1))) {
        c->pos++;
        return kc_jswrap_emit_u16(c, 0);
    }
    if (kc_jswrap_is_digit(ch)) /* legacy octal escapes: not worth the risk */
        return kc_jswrap_error(c, "octal escape in string");
    /* U+2028 / U+2029 after a backslash are line continuations too. */
    if (ch == 0xE2 && kc_jswrap_peek_at(c, 1) == 0x80 &&
        (kc_jswrap_peek_at(c, 2) == 0xA8 || kc_jswrap_peek_at(c, 2) == 0xA9)) {
        c->pos += 3;
        return KC_OK;
    }
    /* Identity escape (\' \/ \a ...): the character itself. Control bytes
     * would be invalid raw in JSON. */
    c->pos++;
    if (ch < 0x20)
        return kc_jswrap_emit_u16(c, (unsigned)ch);
    char one = (char)ch;
    return kc_jswrap_emit(c, &one, 1);
}

/* A '...' or "..." literal, re-emitted as a JSON string. */
static kc_status kc_jswrap_string(kc_jswrap_conv *c)
{
    int quote = kc_jswrap_peek(c);
    size_t start = c->pos;
    c->pos++;
    KC_TRY(kc_jswrap_emit_str(c, "\""));
    c->pending_high = 0;
    for (;;) {
        int ch = kc_jswrap_peek(c);
        if (ch == -1 || ch == '\n' || ch == '\r') {
            c->pos = start;
            return kc_jswrap_error(c, "unterminated string");
        }
        /* After a high surrogate only a \u escape (its low half) may come. */
        if (c->pending_high && !(ch == '\\' && kc_jswrap_peek_at(c, 1) == 'u'))
            return kc_jswrap_error(c, "unpaired surrogate escape in string");
        c->pos++;
        if (ch == quote)
            break;
        if (ch == '\\') {
            KC_TRY(kc_jswrap_escape(c));
        } else if (ch == '"') {
            KC_TRY(kc_jswrap_emit_str(c, "\\\""));
        } else if (ch < 0x20) {
            KC_TRY(kc_jswrap_emit_u16(c, (unsigned)ch));
        } else {
            /* Copy the run of plain bytes up to the next special one at once. */
            size_t run = c->pos - 1, end = c->pos;
            while (end < c->len) {
                unsigned char b = (unsigned char)c->src[end];
                if (b == quote || b == '\\' || b == '"' || b < 0x20)
                    break;
                end++;
            }
            KC_TRY(kc_jswrap_emit(c, c->src + run, end - run));
            c->pos = end;
        }
    }
    return kc_jswrap_emit_str(c, "\"");
}

static size_t kc_jswrap_digits(const kc_jswrap_conv *c, size_t from)
{
    size_t end = from;
    while (end < c->len && kc_jswrap_is_digit((unsigned char)c->src[end]))
        end++;
    return end - from;
}

/* 0x1F, 0o17, 0b101: converted to a decimal integer. */
static kc_status kc_jswrap_radix_number(kc_jswrap_conv *c)
{
    int kind = kc_jswrap_peek_at(c, 1) | 0x20;
    unsigned base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
    uint64_t value = 0;
    int digits = 0;
    c->pos += 2;
    for (;;) {
        int v = kc_jswrap_hex_value(kc_jswrap_peek(c));
        if (v < 0 || (unsigned)v >= base)
            break;
        /* Above 2^53 a double (what JS holds) would no longer be exact. */
        if (value > ((UINT64_C(1) << 53) - (uint64_t)v) / base)
            return kc_jswrap_error(c, "integer literal too large");
        value = value * base + (uint64_t)v;
        digits++;
        c->pos++;
    }
    if (digits == 0)
        return kc_jswrap_error(c, "malformed number");
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)value);
    return kc_jswrap_emit_str(c, buf);
}

/* Decimal literal: 12, 1.5, .5, 5., 1e-3, normalised to JSON form. */
static kc_status kc_jswrap_decimal_number(kc_jswrap_conv *c)
{
    size_t int_start = c->pos, int_n = kc_jswrap_digits(c, c->pos);
    if (int_n > 1 && c->src[int_start] == '0')
        return kc_jswrap_error(c, "legacy octal number");
    c->pos += int_n;
    size_t frac_start = c->pos, frac_n = 0;
    if (kc_jswrap_peek(c) == '.') {
        frac_start = ++c->pos;
        frac_n = kc_jswrap_digits(c, c->pos);
        c->pos += frac_n;
    }
    if (int_n + frac_n == 0)
        return kc_jswrap_error(c, "malformed number");
    KC_TRY(int_n ? kc_jswrap_emit(c, c->src + int_start, int_n) : kc_jswrap_emit_str(c, "0"));
    if (frac_n) {
        KC_TRY(kc_jswrap_emit_str(c, "."));
        KC_TRY(kc_jswrap_emit(c, c->src + frac_start, frac_n));
    }
    if ((kc_jswrap_peek(c) | 0x20) == 'e') {
        size_t exp_start = c->pos++;
        if (kc_jswrap_peek(c) == '+' || kc_jswrap_peek(c) == '-')
            c->pos++;
        size_t exp_n = kc_jswrap_digits(c, c->pos);
        if (exp_n == 0)
            return kc_jswrap_error(c, "malformed exponent");
        c->pos += exp_n;
        KC_TRY(kc_jswrap_emit(c, c->src + exp_start, c->pos - exp_start));
    }
    return KC_OK;
}

/* [+-] number. Rejects BigInt (1n), separators (1_0) and 3in-style junk. */
static kc_status kc_jswrap_number(kc_jswrap_conv *c)
{
    int sign = kc_jswrap_peek(c);
    if (sign == '-' || sign == '+') {
        c->pos++;
        KC_TRY(kc_jswrap_skip_space(c));
        if (sign == '-')
            KC_TRY(kc_jswrap_emit_str(c, "-"));
    }
    int ch = kc_jswrap_peek(c);
    if (!kc_jswrap_is_digit(ch) && ch != '.')
        return kc_jswrap_error(c, "expected a number");
    int next = kc_jswrap_peek_at(c, 1) | 0x20;
    if (ch == '0' && (next == 'x' || next == 'o' || next == 'b'))
        KC_TRY(kc_jswrap_radix_number(c));
    else
        KC_TRY(kc_jswrap_decimal_number(c));
    if (kc_jswrap_is_ident_char(kc_jswrap_peek(c)) || kc_jswrap_peek(c) == '.')
        return kc_jswrap_error(c, "malformed number");
    return KC_OK;
}

static size_t kc_jswrap_ident_len(const kc_jswrap_conv *c)
{
    size_t end = c->pos;
    if (end < c->len && kc_jswrap_is_ident_start((unsigned char)c->src[end]))
        while (end < c->len && kc_jswrap_is_ident_char((unsigned char)c->src[end]))
            end++;
    return end - c->pos;
}

static int kc_jswrap_ident_is(const kc_jswrap_conv *c, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(c->src + c->pos, word, n) == 0;
}

/* true / false / null / void 0; any other identifier is code, not data. */
static kc_status kc_jswrap_keyword(kc_jswrap_conv *c)
{
    size_t n = kc_jswrap_ident_len(c);
    static const char *const same[] = {"true", "false", "null"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        if (kc_jswrap_ident_is(c, n, same[i])) {
            c->pos += n;
            return kc_jswrap_emit_str(c, same[i]);
        }
    }
    if (kc_jswrap_ident_is(c, n, "void")) {
        c->pos += n;
        KC_TRY(kc_jswrap_skip_space(c));
        if (kc_jswrap_peek(c) != '0' || kc_jswrap_is_ident_char(kc_jswrap_peek_at(c, 1)) ||
            kc_jswrap_peek_at(c, 1) == '.')
            return kc_jswrap_error(c, "only 'void 0' is accepted");
        c->pos++;
        return kc_jswrap_emit_str(c, "null");
    }
    return kc_jswrap_error(c, "identifier as a value (code, not data)");
}

/* !0 -> true, !1 -> false: how minifiers spell booleans. */
static kc_status kc_jswrap_not(kc_jswrap_conv *c)
{
    c->pos++;
    KC_TRY(kc_jswrap_skip_space(c));
    int ch = kc_jswrap_peek(c);
    int next = kc_jswrap_peek_at(c, 1);
    if ((ch != '0' && ch != '1') || kc_jswrap_is_ident_char(next) || next == '.')
        return kc_jswrap_error(c, "only !0 and !1 are accepted");
    c->pos++;
    return kc_jswrap_emit_str(c, ch == '0' ? "true" : "false");
}

/* Property name: identifier, string, or a plain decimal integer (which JS
 * turns into the same digits as a string). */
static kc_status kc_jswrap_key(kc_jswrap_conv *c)
{
    int ch = kc_jswrap_peek(c);
    if (ch == '"' || ch == '\'')
        return kc_jswrap_string(c);
    size_t n = kc_jswrap_ident_len(c);
    if (n == 0 && kc_jswrap_is_digit(ch)) {
        n = kc_jswrap_digits(c, c->pos);
        if ((n > 1 && ch == '0') || n > 15 || kc_jswrap_is_ident_char(kc_jswrap_peek_at(c, n)) ||
            kc_jswrap_peek_at(c, n) == '.')
            return kc_jswrap_error(c, "unsupported numeric property name");
    }
    if (n == 0)
        return kc_jswrap_error(c, "expected a property name");
    KC_TRY(kc_jswrap_emit_str(c, "\""));
    KC_TRY(kc_jswrap_emit(c, c->src + c->pos, n));
    c->pos += n;
    return kc_jswrap_emit_str(c, "\"");
}

static kc_status kc_jswrap_member(kc_jswrap_conv *c)
{
    KC_TRY(kc_jswrap_key(c));
    KC_TRY(kc_jswrap_skip_space(c));
    /* ':' is required: shorthand {a}, methods a(){} and getters are code. */
    if (kc_jswrap_peek(c) != ':')
        return kc_jswrap_error(c, "expected ':' after property name");
    c->pos++;
    KC_TRY(kc_jswrap_emit_str(c, ":"));
    return kc_jswrap_value(c);
}

/* Shared loop of objects and arrays: items separated by ',', a trailing
 * comma allowed (JS permits it, JSON does not: it is dropped), holes
 * ([1,,2]) refused. */
static kc_status kc_jswrap_container(kc_jswrap_conv *c, char close, int is_object)
{
    if (++c->depth > KC_JSWRAP_MAX_DEPTH)
        return kc_fail(KC_ERR_LIMIT, "JS payload: nesting deeper than %d at offset %zu",
                       KC_JSWRAP_MAX_DEPTH, c->pos);
    char open = (char)c->src[c->pos++];
    KC_TRY(kc_jswrap_emit(c, &open, 1));
    int first = 1;
    for (;;) {
        KC_TRY(kc_jswrap_skip_space(c));
        if (kc_jswrap_peek(c) == close)
            break;
        if (!first)
            KC_TRY(kc_jswrap_emit_str(c, ","));
        KC_TRY(is_object ? kc_jswrap_member(c) : kc_jswrap_value(c));
        first = 0;
        KC_TRY(kc_jswrap_skip_space(c));
        if (kc_jswrap_peek(c) == close)
            break;
        if (kc_jswrap_peek(c) != ',')
            return kc_jswrap_error(c, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
        c->pos++;
    }
    c->pos++;
    c->depth--;
    return kc_jswrap_emit(c, &close, 1);
}

static kc_status kc_jswrap_value(kc_jswrap_conv *c)
{
    KC_TRY(kc_jswrap_skip_space(c));
    int ch = kc_jswrap_peek(c);
    if (ch == '{')
        return kc_jswrap_container(c, '}', 1);
    if (ch == '[')
        return kc_jswrap_container(c, ']', 0);
    if (ch == '"' || ch == '\'')
        return kc_jswrap_string(c);
    if (ch == '!')
        return kc_jswrap_not(c);
    if (kc_jswrap_is_digit(ch) || ch == '.' || ch == '-' || ch == '+')
        return kc_jswrap_number(c);
    if (kc_jswrap_is_ident_start(ch))
        return kc_jswrap_keyword(c);
    if (ch == '`')
        return kc_jswrap_error(c, "template literals are not supported");
    return kc_jswrap_error(c, "unexpected character in data literal");
}

static kc_status kc_jswrap_object_to_json(const char *data, size_t len, size_t start,
                                          char **payload, size_t *payload_len)
{
    kc_jswrap_conv c = {.src = data, .len = len, .pos = start};
    kc_status status = kc_jswrap_value(&c);
    if (status == KC_OK)
        status = kc_jswrap_emit(&c, "", 0); /* make sure a buffer exists */
    if (status != KC_OK) {
        free(c.out);
        return status;
    }
    c.out[c.out_len] = '\0';
    *payload = c.out;
    *payload_len = c.out_len;
    return KC_OK;
}

/* --------------------------------------------------------------- base64 */

/* Decoding table: 0..63 for the alphabet, -1 for anything else. Built once
 * on first use; a table lookup keeps a 30 MB shard at memory speed. */
static signed char kc_b64_table[256];
static pthread_once_t kc_b64_once = PTHREAD_ONCE_INIT;

static void kc_b64_init(void)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(kc_b64_table, -1, sizeof kc_b64_table);
    for (int i = 0; i < 64; i++)
        kc_b64_table[(unsigned char)alphabet[i]] = (signed char)i;
}

static int kc_jswrap_b64_value(unsigned char ch)
{
    pthread_once(&kc_b64_once, kc_b64_init);
    return kc_b64_table[ch];
}

/* Strict RFC 4648 base64 of text[0..n): padded, no whitespace, unused bits
 * zero. `base` is text's offset in the file, for messages. */
static kc_status kc_jswrap_b64_decode(const char *text, size_t n, size_t base,
                                      char **payload, size_t *payload_len)
{
    if (n % 4 != 0)
        return kc_fail(KC_ERR_FORMAT, "JS payload: base64 length %zu is not a multiple of 4 (offset %zu)",
                       n, base);
    size_t pad = 0;
    if (n >= 4 && text[n - 1] == '=')
        pad = text[n - 2] == '=' ? 2 : 1;
    size_t out_n = n / 4 * 3 - pad;
    unsigned char *out = kc_calloc(out_n + 1, 1);
    if (!out)
        return KC_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (size_t k = 0; k < 4; k++) {
            size_t at = i + k;
            v[k] = at >= n - pad ? 0 : kc_jswrap_b64_value((unsigned char)text[at]);
            if (v[k] < 0) {
                free(out);
                return kc_fail(KC_ERR_FORMAT, "JS payload: invalid base64 character at offset %zu",
                               base + at);
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        unsigned char bytes[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
        size_t take = i + 4 == n ? 3 - pad : 3;
        /* Non-zero bits under the padding mean a non-canonical encoding. */
        for (size_t k = take; k < 3; k++) {
            if (bytes[k] != 0) {
                free(out);
                return kc_fail(KC_ERR_FORMAT, "JS payload: non-canonical base64 padding at offset %zu",
                               base + n - pad - 1);
            }
        }
        memcpy(out + o, bytes, take);
        o += take;
    }
    out[o] = '\0';
    *payload = (char *)out;
    *payload_len = o;
    return KC_OK;
}

/* A quoted base64 literal at data[start]; escapes are never needed in
 * base64 and are refused. */
static kc_status kc_jswrap_base64_literal(const char *data, size_t len, size_t start,
                                          char **payload, size_t *payload_len)
{
    char quote = data[start];
    size_t i = start + 1;
    while (i < len && data[i] != quote) {
        if (data[i] == '\\' || data[i] == '\n' || data[i] == '\r')
            break;
        i++;
    }
    if (i >= len || data[i] != quote)
        return kc_fail(KC_ERR_FORMAT, "JS payload: unterminated or escaped base64 string at offset %zu",
                       start);
    return kc_jswrap_b64_decode(data + start + 1, i - start - 1, start + 1, payload, payload_len);
}

/* -------------------------------------------------------------- unwrap */

static size_t kc_jswrap_skip_blanks(const char *data, size_t len, size_t i)
{
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    return i;
}

/* Offset of the literal assigned by the first `.exports=` whose right-hand
 * side starts with '{' or a quote; the bundler's own `module.exports=e()`
 * is skipped that way. */
static int kc_jswrap_find_payload(const char *data, size_t len, size_t *start)
{
    static const char needle[] = ".exports";
    size_t n = sizeof needle - 1;
    for (size_t i = 0; i + n <= len; i++) {
        if (data[i] != '.' || memcmp(data + i, needle, n) != 0)
            continue;
        size_t j = kc_jswrap_skip_blanks(data, len, i + n);
        if (j >= len || data[j] != '=' || (j + 1 < len && data[j + 1] == '='))
            continue;
        j = kc_jswrap_skip_blanks(data, len, j + 1);
        if (j < len && (data[j] == '{' || data[j] == '"' || data[j] == '\'')) {
            *start = j;
            return 1;
        }
    }
    return 0;
}

kc_status kc_jswrap_unwrap_kind(const char *data, size_t len, char **payload, size_t *payload_len,
                                int *is_json)
{
    *payload = NULL;
    *payload_len = 0;
    *is_json = 0;
    if (!data)
        return kc_fail(KC_ERR_ARG, "kc_jswrap_unwrap: no data");
    size_t start;
    if (!kc_jswrap_find_payload(data, len, &start))
        return kc_fail(KC_ERR_FORMAT,
                       "JS payload: no `exports=` assignment of an object or string literal");
    if (data[start] == '{') {
        *is_json = 1;
        return kc_jswrap_object_to_json(data, len, start, payload, payload_len);
    }
    return kc_jswrap_base64_literal(data, len, start, payload, payload_len);
}

kc_status kc_jswrap_unwrap(const char *data, size_t len, char **payload, size_t *payload_len)
{
    int is_json;
    return kc_jswrap_unwrap_kind(data, len, payload, payload_len, &is_json);
}

/* -------------------------------------------------------- model files */

/* path, else path.min.js, else path.js: manifests name wrapped shards
 * without the extension the bundler added. */
static kc_status kc_fileio_open_variant(const char *path, size_t raw_cap, char **data, size_t *len)
{
    static const char *const suffixes[] = {".min.js", ".js"};
    int missing;
    kc_status status = kc_fileio_read(path, raw_cap, data, len, &missing);
    if (!missing)
        return status;
    /* Keep the first message: "x: No such file" is clearer than "x.js: ...". */
    char first_error[1024];
    snprintf(first_error, sizeof first_error, "%s", kc_last_error());
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t s = strlen(suffixes[i]);
        char *alt = kc_calloc(n + s + 1, 1);
        if (!alt)
            return KC_ERR_NOMEM;
        memcpy(alt, path, n);
        memcpy(alt + n, suffixes[i], s);
        status = kc_fileio_read(alt, raw_cap, data, len, &missing);
        free(alt);
        if (!missing)
            return status;
    }
    return kc_fail(KC_ERR_IO, "%s", first_error);
}

kc_status kc_read_model_file(const char *path, size_t max_bytes, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    /* A wrapped file is bigger than its payload (base64 is 4/3 of the
     * bytes, plus the bundler's prologue): allow twice the cap on disk and
     * apply max_bytes to what comes out. */
    size_t raw_cap = max_bytes > (SIZE_MAX - 65536) / 2 ? SIZE_MAX - 1 : max_bytes * 2 + 65536;
    char *raw = NULL;
    size_t raw_len = 0;
    KC_TRY(kc_fileio_open_variant(path, raw_cap, &raw, &raw_len));
    if (kc_jswrap_detect(raw, raw_len)) {
        char *payload = NULL;
        size_t payload_len = 0;
        kc_status status = kc_jswrap_unwrap(raw, raw_len, &payload, &payload_len);
        free(raw);
        if (status != KC_OK)
            return kc_fail_context(status, "%s", path);
        raw = payload;
        raw_len = payload_len;
    }
    if (raw_len > max_bytes) {
        free(raw);
        return kc_fail(KC_ERR_LIMIT, "%s: file is larger than %zu bytes", path, max_bytes);
    }
    *data = raw;
    *len = raw_len;
    return KC_OK;
}
