/* The wire format (see wire.h). The decoder reads bytes from the network,
 * so it trusts nothing: every read is preceded by a length check, every
 * size is computed in 64 bits with overflow checks and compared with what
 * is actually there, and counts, ranks, dims and text are capped. The
 * encoder runs the same validation on the message it is given, so what it
 * writes is exactly what the decoder accepts. */
#include "net/wire.h"

#include <stdint.h>
#include <string.h>

#include "base/mem.h"

#define KC_WIRE_DESC_BYTES 8
/* Same cap as kc_shape_count: each dim and the element count <= 2^40. */
#define KC_WIRE_MAX_DIM ((int64_t)1 << 40)

/* ------------------------------------------------------------ byte order */

static uint16_t kc_wire_get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t kc_wire_get32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t kc_wire_get64(const unsigned char *p)
{
    return (uint64_t)kc_wire_get32(p) | ((uint64_t)kc_wire_get32(p + 4) << 32);
}

static void kc_wire_put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void kc_wire_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void kc_wire_put64(unsigned char *p, uint64_t v)
{
    kc_wire_put32(p, (uint32_t)v);
    kc_wire_put32(p + 4, (uint32_t)(v >> 32));
}

/* ------------------------------------------------------- shared validity */

static int kc_wire_dtype_valid(int dtype) { return dtype > KC_DTYPE_INVALID && dtype <= KC_BOOL; }

/* Element count of dims[0..rank): each dim in 0..2^40 and the product
 * <= 2^40; -1 (with an error naming tensor i) otherwise. */
static int64_t kc_wire_count(int i, int rank, const int64_t *dims)
{
    int64_t count = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0 || dims[d] > KC_WIRE_MAX_DIM) {
            kc_fail(KC_ERR_LIMIT, "wire message: tensor %d dim %d is %lld (allowed 0 to 2^40)", i,
                    d, (long long)dims[d]);
            return -1;
        }
        /* Both factors <= 2^40, so the product fits in 80 bits: check it. */
        if (kc_mul_overflows(count, dims[d], &count) || count > KC_MAX_ELEMENTS) {
            kc_fail(KC_ERR_LIMIT, "wire message: tensor %d has more than 2^40 elements", i);
            return -1;
        }
    }
    return count;
}

/* Byte length of a UTF-8 sequence starting with lead byte c whose
 * continuation bytes are checked by the caller; 0 if c cannot start one. */
static int kc_wire_utf8_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF);
 * offset of the first bad byte, or n if all good. */
static size_t kc_wire_utf8_check(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int len = kc_wire_utf8_len(s[i]);
        if (len == 0 || (size_t)len > n - i)
            return i;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
        /* The second byte's range rules out overlongs, surrogates and > U+10FFFF. */
        unsigned char c0 = s[i], c1 = s[i + 1 < n ? i + 1 : i];
        if ((c0 == 0xE0 && c1 < 0xA0) || (c0 == 0xED && c1 > 0x9F) || (c0 == 0xF0 && c1 < 0x90) ||
            (c0 == 0xF4 && c1 > 0x8F))
            return i;
        i += (size_t)len;
    }
    return n;
}

/* UTF-8, no NUL; an ERROR message is also a single line. */
static kc_status kc_wire_check_text(kc_wire_type type, const char *text, size_t n)
{
    if (n > KC_WIRE_MAX_TEXT)
        return kc_fail(KC_ERR_LIMIT, "wire message: text of %zu bytes exceeds the limit of %zu", n,
                       KC_WIRE_MAX_TEXT);
    if (n == 0)
        return KC_OK;
    if (!text)
        return kc_fail(KC_ERR_ARG, "wire message: text of %zu bytes has no data", n);
    const unsigned char *s = (const unsigned char *)text;
    size_t bad = kc_wire_utf8_check(s, n);
    if (bad < n)
        return kc_fail(KC_ERR_FORMAT, "wire message: text is not valid UTF-8 at byte %zu", bad);
    if (memchr(s, '\0', n))
        return kc_fail(KC_ERR_FORMAT, "wire message: text contains a NUL byte");
    if (type == KC_WIRE_ERROR && (memchr(s, '\n', n) || memchr(s, '\r', n)))
        return kc_fail(KC_ERR_FORMAT, "wire message: error text spans more than one line");
    return KC_OK;
}

static kc_status kc_wire_check_header(kc_wire_type type, uint64_t request_id, long long n_tensors)
{
    if ((int)type < KC_WIRE_STATUS || (int)type >= KC_WIRE_TYPE_END)
        return kc_fail(KC_ERR_FORMAT, "wire message: unknown type %d", (int)type);
    if (request_id == 0)
        return kc_fail(KC_ERR_FORMAT, "wire message: request id 0 (ids start at 1)");
    if (n_tensors < 0 || n_tensors > KC_WIRE_MAX_TENSORS)
        return kc_fail(KC_ERR_LIMIT, "wire message: %lld tensors (at most %d)", n_tensors,
                       KC_WIRE_MAX_TENSORS);
    return KC_OK;
}

/* ---------------------------------------------------------------- decode */

typedef struct kc_wire_reader {
    const unsigned char *p;
    size_t len;
    size_t off;
} kc_wire_reader;

static int kc_wire_has(const kc_wire_reader *r, size_t n) { return n <= r->len - r->off; }

/* One descriptor at r->off; fills t (without data) and advances. */
static kc_status kc_wire_read_desc(kc_wire_reader *r, int i, kc_wire_tensor *t)
{
    if (!kc_wire_has(r, KC_WIRE_DESC_BYTES))
        return kc_fail(KC_ERR_FORMAT, "wire message: truncated in tensor %d's descriptor", i);
    const unsigned char *p = r->p + r->off;
    int dtype = p[0], rank = p[1];
    if (!kc_wire_dtype_valid(dtype))
        return kc_fail(KC_ERR_FORMAT, "wire message: tensor %d has invalid dtype %d", i, dtype);
    if (rank > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "wire message: tensor %d has rank %d (at most %d)", i, rank,
                       KC_MAX_RANK);
    if (kc_wire_get16(p + 2) != 0 || kc_wire_get32(p + 4) != 0)
        return kc_fail(KC_ERR_FORMAT, "wire message: tensor %d has nonzero reserved bytes", i);
    r->off += KC_WIRE_DESC_BYTES;
    if (!kc_wire_has(r, 8 * (size_t)rank))
        return kc_fail(KC_ERR_FORMAT, "wire message: truncated in tensor %d's dims", i);
    t->dtype = (kc_dtype)dtype;
    t->shape.rank = rank;
    for (int d = 0; d < rank; d++)
        t->shape.dims[d] = (int64_t)kc_wire_get64(r->p + r->off + 8 * (size_t)d);
    r->off += 8 * (size_t)rank;
    int64_t count = kc_wire_count(i, rank, t->shape.dims);
    if (count < 0)
        return KC_ERR_LIMIT;
    /* count <= 2^40 and sizes <= 8: at most 2^43, no overflow. */
    t->bytes = (size_t)((uint64_t)count * kc_dtype_size(t->dtype));
    return KC_OK;
}

/* Text and tensor data after the descriptors: sizes must add up to
 * body_bytes, which must be exactly what is left. */
static kc_status kc_wire_read_body(kc_wire_reader *r, uint64_t body_bytes, uint32_t text_bytes,
                                   kc_wire_msg *out)
{
    uint64_t rest = (uint64_t)(r->len - r->off);
    if (body_bytes != rest)
        return kc_fail(KC_ERR_FORMAT,
                       "wire message: body_bytes says %llu but %llu bytes follow the descriptors",
                       (unsigned long long)body_bytes, (unsigned long long)rest);
    uint64_t need = text_bytes;
    for (int i = 0; i < out->n_tensors; i++)
        need += out->tensors[i].bytes; /* <= 2^20 + 64 * 2^43: no overflow */
    if (need != body_bytes)
        return kc_fail(KC_ERR_FORMAT,
                       "wire message: text and tensors take %llu bytes but body_bytes is %llu",
                       (unsigned long long)need, (unsigned long long)body_bytes);
    out->text = (const char *)(r->p + r->off);
    out->text_len = text_bytes;
    KC_TRY(kc_wire_check_text(out->type, out->text, out->text_len));
    r->off += text_bytes;
    for (int i = 0; i < out->n_tensors; i++) {
        out->tensors[i].data = r->p + r->off;
        r->off += out->tensors[i].bytes;
    }
    return KC_OK;
}

static kc_status kc_wire_decode_all(kc_wire_reader *r, size_t max_bytes, kc_wire_msg *out)
{
    if (r->len > max_bytes)
        return kc_fail(KC_ERR_LIMIT, "wire message: %zu bytes exceeds the limit of %zu", r->len,
                       max_bytes);
    if (r->len < KC_WIRE_HEADER_BYTES)
        return kc_fail(KC_ERR_FORMAT, "wire message: %zu bytes, shorter than the %d-byte header",
                       r->len, KC_WIRE_HEADER_BYTES);
    const unsigned char *h = r->p;
    if (kc_wire_get32(h) != KC_WIRE_MAGIC)
        return kc_fail(KC_ERR_FORMAT, "wire message: bad magic (not a kerasc message)");
    if (kc_wire_get16(h + 4) != KC_WIRE_VERSION)
        return kc_fail(KC_ERR_UNSUPPORTED, "wire message: version %u (this kerasc speaks %d)",
                       kc_wire_get16(h + 4), KC_WIRE_VERSION);
    uint32_t n_tensors = kc_wire_get32(h + 20);
    out->type = (kc_wire_type)kc_wire_get16(h + 6);
    out->request_id = kc_wire_get64(h + 8);
    out->stage = kc_wire_get32(h + 16);
    out->flags = kc_wire_get32(h + 32);
    KC_TRY(kc_wire_check_header(out->type, out->request_id, n_tensors));
    uint32_t text_bytes = kc_wire_get32(h + 36);
    if (text_bytes > KC_WIRE_MAX_TEXT)
        return kc_fail(KC_ERR_LIMIT, "wire message: text of %u bytes exceeds the limit of %zu",
                       text_bytes, KC_WIRE_MAX_TEXT);
    r->off = KC_WIRE_HEADER_BYTES;
    out->n_tensors = (int)n_tensors;
    for (int i = 0; i < out->n_tensors; i++)
        KC_TRY(kc_wire_read_desc(r, i, &out->tensors[i]));
    return kc_wire_read_body(r, kc_wire_get64(h + 24), text_bytes, out);
}

kc_status kc_wire_decode(const void *buf, size_t len, size_t max_bytes, kc_wire_msg *out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "wire message: no output");
    memset(out, 0, sizeof *out);
    if (!buf && len)
        return kc_fail(KC_ERR_ARG, "wire message: no buffer");
    kc_wire_reader r = {buf, len, 0};
    kc_status st = kc_wire_decode_all(&r, max_bytes, out);
    if (st != KC_OK)
        memset(out, 0, sizeof *out);
    return st;
}

/* ---------------------------------------------------------------- encode */

/* Validate msg as the decoder would; its encoded size into *size. */
static kc_status kc_wire_validate(const kc_wire_msg *msg, uint64_t *size)
{
    KC_TRY(kc_wire_check_header(msg->type, msg->request_id, msg->n_tensors));
    KC_TRY(kc_wire_check_text(msg->type, msg->text, msg->text_len));
    uint64_t total = KC_WIRE_HEADER_BYTES + (uint64_t)msg->text_len;
    for (int i = 0; i < msg->n_tensors; i++) {
        const kc_wire_tensor *t = &msg->tensors[i];
        if (!kc_wire_dtype_valid((int)t->dtype))
            return kc_fail(KC_ERR_ARG, "wire message: tensor %d has invalid dtype %d", i,
                           (int)t->dtype);
        if (t->shape.rank < 0 || t->shape.rank > KC_MAX_RANK)
            return kc_fail(KC_ERR_ARG, "wire message: tensor %d has rank %d (0 to %d)", i,
                           t->shape.rank, KC_MAX_RANK);
        int64_t count = kc_wire_count(i, t->shape.rank, t->shape.dims);
        if (count < 0)
            return KC_ERR_LIMIT;
        uint64_t bytes = (uint64_t)count * kc_dtype_size(t->dtype);
        if (bytes != (uint64_t)t->bytes)
            return kc_fail(KC_ERR_ARG, "wire message: tensor %d says %zu bytes, its shape %llu", i,
                           t->bytes, (unsigned long long)bytes);
        if (bytes && !t->data)
            return kc_fail(KC_ERR_ARG, "wire message: tensor %d has no data", i);
        total += KC_WIRE_DESC_BYTES + 8 * (uint64_t)t->shape.rank + bytes;
    }
    if (total > SIZE_MAX)
        return kc_fail(KC_ERR_LIMIT, "wire message: %llu bytes do not fit in memory",
                       (unsigned long long)total);
    *size = total;
    return KC_OK;
}

size_t kc_wire_size(const kc_wire_msg *msg)
{
    uint64_t size = 0;
    if (!msg || kc_wire_validate(msg, &size) != KC_OK)
        return 0;
    return (size_t)size;
}

static size_t kc_wire_put_desc(unsigned char *p, const kc_wire_tensor *t)
{
    p[0] = (unsigned char)t->dtype;
    p[1] = (unsigned char)t->shape.rank;
    memset(p + 2, 0, 6);
    for (int d = 0; d < t->shape.rank; d++)
        kc_wire_put64(p + 8 + 8 * (size_t)d, (uint64_t)t->shape.dims[d]);
    return KC_WIRE_DESC_BYTES + 8 * (size_t)t->shape.rank;
}

size_t kc_wire_encode(const kc_wire_msg *msg, void *buf, size_t size)
{
    uint64_t total = 0;
    if (!msg || kc_wire_validate(msg, &total) != KC_OK)
        return 0;
    if (!buf || size < total) {
        kc_fail(KC_ERR_ARG, "wire message: buffer of %zu bytes, %llu needed", size,
                (unsigned long long)total);
        return 0;
    }
    unsigned char *p = buf;
    size_t off = KC_WIRE_HEADER_BYTES;
    for (int i = 0; i < msg->n_tensors; i++)
        off += kc_wire_put_desc(p + off, &msg->tensors[i]);
    kc_wire_put32(p, KC_WIRE_MAGIC);
    kc_wire_put16(p + 4, KC_WIRE_VERSION);
    kc_wire_put16(p + 6, (uint16_t)msg->type);
    kc_wire_put64(p + 8, msg->request_id);
    kc_wire_put32(p + 16, msg->stage);
    kc_wire_put32(p + 20, (uint32_t)msg->n_tensors);
    kc_wire_put64(p + 24, total - off);
    kc_wire_put32(p + 32, msg->flags);
    kc_wire_put32(p + 36, (uint32_t)msg->text_len);
    if (msg->text_len)
        memcpy(p + off, msg->text, msg->text_len);
    off += msg->text_len;
    for (int i = 0; i < msg->n_tensors; i++) {
        if (msg->tensors[i].bytes)
            memcpy(p + off, msg->tensors[i].data, msg->tensors[i].bytes);
        off += msg->tensors[i].bytes;
    }
    return off;
}

/* ----------------------------------------------------------------- check */

static kc_status kc_wire_check_one(int i, const kc_wire_tensor *t, const kc_wire_expect *e,
                                   int64_t max_batch)
{
    char want[256], got[256];
    kc_shape_format(&e->shape, want, sizeof want);
    kc_shape_format(&t->shape, got, sizeof got);
    if (t->dtype != e->dtype)
        return kc_fail(KC_ERR_SHAPE, "tensor %d: dtype %s, the stage expects %s", i,
                       kc_dtype_name(t->dtype), kc_dtype_name(e->dtype));
    if (t->shape.rank != e->shape.rank)
        return kc_fail(KC_ERR_SHAPE, "tensor %d: rank %d %s, the stage expects rank %d %s", i,
                       t->shape.rank, got, e->shape.rank, want);
    for (int d = 0; d < e->shape.rank; d++)
        if (e->shape.dims[d] >= 0 && t->shape.dims[d] != e->shape.dims[d])
            return kc_fail(KC_ERR_SHAPE,
                           "tensor %d: dim %d is %lld, the stage expects %lld (%s vs %s)", i, d,
                           (long long)t->shape.dims[d], (long long)e->shape.dims[d], got, want);
    /* The cap is on the free batch dim; a fixed dims[0] was matched above. */
    if (max_batch > 0 && t->shape.rank > 0 && e->shape.dims[0] < 0 && t->shape.dims[0] > max_batch)
        return kc_fail(KC_ERR_LIMIT, "tensor %d: batch %lld exceeds the limit of %lld", i,
                       (long long)t->shape.dims[0], (long long)max_batch);
    return KC_OK;
}

kc_status kc_wire_check(const kc_wire_msg *msg, const kc_wire_expect *expect, int n_expect,
                        int64_t max_batch)
{
    if (!msg || n_expect < 0 || (n_expect > 0 && !expect))
        return kc_fail(KC_ERR_ARG, "wire check: missing argument");
    if (msg->n_tensors != n_expect)
        return kc_fail(KC_ERR_SHAPE, "wire message has %d tensors, the stage expects %d",
                       msg->n_tensors, n_expect);
    int batch_from = -1;
    for (int i = 0; i < n_expect; i++) {
        const kc_wire_expect *e = &expect[i];
        if (e->shape.rank < 0 || e->shape.rank > KC_MAX_RANK)
            return kc_fail(KC_ERR_ARG, "wire check: expected rank %d for tensor %d", e->shape.rank,
                           i);
        KC_TRY(kc_wire_check_one(i, &msg->tensors[i], e, max_batch));
        /* Inputs with a free batch dim share one batch: a stage cannot mix. */
        if (e->shape.rank == 0 || e->shape.dims[0] >= 0)
            continue;
        if (batch_from < 0)
            batch_from = i;
        else if (msg->tensors[i].shape.dims[0] != msg->tensors[batch_from].shape.dims[0])
            return kc_fail(KC_ERR_SHAPE, "tensor %d: batch %lld differs from tensor %d's %lld", i,
                           (long long)msg->tensors[i].shape.dims[0], batch_from,
                           (long long)msg->tensors[batch_from].shape.dims[0]);
    }
    return KC_OK;
}

/* ---------------------------------------------------------------- replay */

int kc_wire_replay_accept(kc_wire_replay *r, uint64_t request_id)
{
    if (!r || request_id <= r->last_id)
        return 0;
    r->last_id = request_id;
    return 1;
}
