/* NumPy .npy read/write: round trips, files written by real NumPy
 * (tests/data/npy, made by tools/make_npy_fixtures.py), and rejection of
 * malformed or unsupported files with the right status and a one-line
 * message naming the file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/npy.h"
#include "base/tensor.h"
#include "kerasc.h"

#define NPY_DATA KC_TEST_DATA "/npy/"

/* Every dtype .npy can hold (all but bfloat16). */
static const kc_dtype kc_npy_test_dtypes[] = {KC_F16, KC_F32, KC_F64, KC_I8,  KC_I16, KC_I32,
                                              KC_I64, KC_U8,  KC_U16, KC_U32, KC_U64, KC_BOOL};
#define KC_NPY_TEST_NDTYPES (sizeof kc_npy_test_dtypes / sizeof kc_npy_test_dtypes[0])

/* ------------------------------------------------------------ helpers */

static void tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/npy_%ld_%s", KC_TEST_TMP, (long)getpid(), name);
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Whole file into a malloc'd buffer. */
static unsigned char *read_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len == cap) {
            cap = cap ? cap * 2 : 4096;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + *len, 1, cap - *len, f);
        if (got == 0)
            break;
        *len += got;
    }
    fclose(f);
    return buf;
}

/* The value make_npy_fixtures.py's value() puts at flat index k. */
static double fixture_value(kc_dtype dtype, int64_t k)
{
    switch (dtype) {
    case KC_F16:
    case KC_F32:
    case KC_F64: return (double)k * 0.5 - 1.0;
    case KC_I8:
    case KC_I16:
    case KC_I32:
    case KC_I64: return (double)(k - 3);
    case KC_U8:
    case KC_U16:
    case KC_U32:
    case KC_U64: return (double)(k * 40);
    case KC_BOOL: return k % 3 == 0;
    default: fail_msg("unexpected dtype %d", (int)dtype);
    }
    return 0;
}

static double element(const kc_tensor *t, int64_t k)
{
    const unsigned char *p =
        (const unsigned char *)kc_tensor_cdata(t) + k * (int64_t)kc_dtype_size(kc_tensor_dtype(t));
    union {
        uint16_t h;
        float f;
        double d;
        int8_t i8;
        int16_t i16;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        uint32_t u32;
        uint64_t u64;
    } v;
    memcpy(&v, p, kc_dtype_size(kc_tensor_dtype(t)));
    switch (kc_tensor_dtype(t)) {
    case KC_F16: return kc_half_to_float(v.h);
    case KC_F32: return v.f;
    case KC_F64: return v.d;
    case KC_I8: return v.i8;
    case KC_I16: return v.i16;
    case KC_I32: return v.i32;
    case KC_I64: return (double)v.i64;
    case KC_U8:
    case KC_BOOL: return v.u8;
    case KC_U16: return v.h;
    case KC_U32: return v.u32;
    case KC_U64: return (double)v.u64;
    default: fail_msg("unexpected dtype");
    }
    return 0;
}

static void check_shape(const kc_tensor *t, int rank, const int64_t *dims)
{
    assert_int_equal(kc_tensor_rank(t), rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(kc_tensor_dim(t, i), dims[i]);
}

static void check_fixture_values(const kc_tensor *t)
{
    for (int64_t k = 0; k < kc_tensor_count(t); k++)
        if (element(t, k) != fixture_value(kc_tensor_dtype(t), k))
            fail_msg("%s element %lld is %g, expected %g", kc_dtype_name(kc_tensor_dtype(t)),
                     (long long)k, element(t, k), fixture_value(kc_tensor_dtype(t), k));
}

/* A .npy image from a header dict and data bytes (via the writer's own
 * framing, so the cases below differ only in what they mean to test). */
static size_t build(const char *dict, const void *data, size_t data_len, unsigned char *out,
                    size_t cap)
{
    size_t n = kc_npy_wrap_header(dict, strlen(dict), out, cap);
    assert_true(n > 0 && n + data_len <= cap);
    if (data_len)
        memcpy(out + n, data, data_len);
    return n + data_len;
}

static void check_error_message(const char *what, const char *needle)
{
    const char *err = kc_last_error();
    if (err[0] == '\0')
        fail_msg("%s: empty error message", what);
    if (strchr(err, '\n'))
        fail_msg("%s: multi-line error message: %s", what, err);
    if (needle && !strstr(err, needle))
        fail_msg("%s: error \"%s\" lacks \"%s\"", what, err, needle);
}

/* The bytes must fail with `want` both as a file (message naming it) and
 * from memory. */
static void expect_reject(const char *name, const unsigned char *bytes, size_t len, kc_status want,
                          const char *needle)
{
    char path[512];
    tmp_path(path, sizeof path, name);
    write_bytes(path, bytes, len);

    kc_tensor *t = (kc_tensor *)&t; /* must be reset to NULL */
    kc_error_clear();
    kc_status st = kc_tensor_load_npy(path, &t);
    if (st != want)
        fail_msg("%s: load gave %s, expected %s (%s)", name, kc_status_name(st),
                 kc_status_name(want), kc_last_error());
    assert_null(t);
    check_error_message(name, needle);
    check_error_message(name, path);

    t = (kc_tensor *)&t;
    kc_error_clear();
    st = kc_npy_parse(bytes, len, &t);
    if (st != want)
        fail_msg("%s: parse gave %s, expected %s (%s)", name, kc_status_name(st),
                 kc_status_name(want), kc_last_error());
    assert_null(t);
    check_error_message(name, needle);
    unlink(path);
}

static void expect_reject_dict(const char *name, const char *dict, size_t data_len, kc_status want,
                               const char *needle)
{
    static unsigned char buf[1 << 17];
    static const unsigned char zeros[256];
    assert_true(data_len <= sizeof zeros);
    expect_reject(name, buf, build(dict, zeros, data_len, buf, sizeof buf), want, needle);
}

/* A fixture file must be rejected as it is. */
static void expect_reject_fixture(const char *name, kc_status want, const char *needle)
{
    char path[512];
    snprintf(path, sizeof path, "%s%s", NPY_DATA, name);
    size_t len;
    unsigned char *bytes = read_bytes(path, &len);
    expect_reject(name, bytes, len, want, needle);
    free(bytes);
}

/* -------------------------------------------------------------- tests */

static void fill_pattern(kc_tensor *t)
{
    unsigned char *p = kc_tensor_data(t);
    size_t n = (size_t)kc_tensor_count(t) * kc_dtype_size(kc_tensor_dtype(t));
    for (size_t i = 0; i < n; i++)
        p[i] = kc_tensor_dtype(t) == KC_BOOL ? (unsigned char)(i % 3 == 0)
                                             : (unsigned char)(i * 37 + 11);
}

static void test_round_trip_every_dtype_and_rank(void **state)
{
    (void)state;
    static const int64_t dims[3][3] = {{0}, {5}, {2, 3, 4}};
    static const int ranks[3] = {0, 1, 3};
    char path[512];
    tmp_path(path, sizeof path, "roundtrip.npy");
    for (size_t d = 0; d < KC_NPY_TEST_NDTYPES; d++) {
        for (int r = 0; r < 3; r++) {
            kc_tensor *t, *back;
            assert_int_equal(kc_tensor_new(kc_npy_test_dtypes[d], ranks[r], dims[r], &t), KC_OK);
            fill_pattern(t);
            assert_int_equal(kc_tensor_save_npy(t, path), KC_OK);
            if (kc_tensor_load_npy(path, &back) != KC_OK)
                fail_msg("%s rank %d: %s", kc_dtype_name(kc_npy_test_dtypes[d]), ranks[r],
                         kc_last_error());
            assert_int_equal(kc_tensor_dtype(back), kc_npy_test_dtypes[d]);
            check_shape(back, ranks[r], dims[r]);
            size_t n = (size_t)kc_tensor_count(t) * kc_dtype_size(kc_tensor_dtype(t));
            assert_memory_equal(kc_tensor_cdata(back), kc_tensor_cdata(t), n);

            /* Data starts on a 64-byte boundary, after a '\n'. */
            size_t len;
            unsigned char *bytes = read_bytes(path, &len);
            size_t offset = 10 + (size_t)(bytes[8] | bytes[9] << 8);
            assert_int_equal(bytes[6], 1);
            assert_int_equal(offset % 64, 0);
            assert_int_equal(bytes[offset - 1], '\n');
            assert_int_equal(len, offset + n);
            free(bytes);
            kc_tensor_free(t);
            kc_tensor_free(back);
        }
    }
    unlink(path);
}

static void test_round_trip_empty(void **state)
{
    (void)state;
    static const int64_t dims[2] = {0, 3};
    char path[512];
    tmp_path(path, sizeof path, "empty.npy");
    kc_tensor *t, *back;
    assert_int_equal(kc_tensor_new(KC_F32, 2, dims, &t), KC_OK);
    assert_int_equal(kc_tensor_save_npy(t, path), KC_OK);
    assert_int_equal(kc_tensor_load_npy(path, &back), KC_OK);
    check_shape(back, 2, dims);
    assert_int_equal(kc_tensor_count(back), 0);
    kc_tensor_free(t);
    kc_tensor_free(back);
    unlink(path);
}

static const char *const kc_npy_test_numpy_2x3[] = {
    "float16_2x3.npy", "float32_2x3.npy", "float64_2x3.npy", "int8_2x3.npy",
    "int16_2x3.npy",   "int32_2x3.npy",   "int64_2x3.npy",   "uint8_2x3.npy",
    "uint16_2x3.npy",  "uint32_2x3.npy",  "uint64_2x3.npy",  "bool_2x3.npy",
};

static void test_reads_numpy_files(void **state)
{
    (void)state;
    static const int64_t dims23[2] = {2, 3};
    char path[512];
    for (size_t i = 0; i < KC_NPY_TEST_NDTYPES; i++) {
        kc_tensor *t;
        snprintf(path, sizeof path, "%s%s", NPY_DATA, kc_npy_test_numpy_2x3[i]);
        if (kc_tensor_load_npy(path, &t) != KC_OK)
            fail_msg("%s", kc_last_error());
        assert_int_equal(kc_tensor_dtype(t), kc_npy_test_dtypes[i]);
        check_shape(t, 2, dims23);
        check_fixture_values(t);
        kc_tensor_free(t);
    }
}

static void test_reads_numpy_ranks(void **state)
{
    (void)state;
    static const int64_t dims3[3] = {2, 3, 4}, dims1[1] = {5}, dims0x3[2] = {0, 3};
    kc_tensor *t;

    assert_int_equal(kc_tensor_load_npy(NPY_DATA "f8_scalar.npy", &t), KC_OK);
    assert_int_equal(kc_tensor_dtype(t), KC_F64);
    check_shape(t, 0, NULL);
    assert_int_equal(kc_tensor_count(t), 1);
    assert_true(element(t, 0) == 3.25);
    kc_tensor_free(t);

    assert_int_equal(kc_tensor_load_npy(NPY_DATA "i4_2x3x4.npy", &t), KC_OK);
    assert_int_equal(kc_tensor_dtype(t), KC_I32);
    check_shape(t, 3, dims3);
    check_fixture_values(t);
    kc_tensor_free(t);

    assert_int_equal(kc_tensor_load_npy(NPY_DATA "u1_5.npy", &t), KC_OK);
    assert_int_equal(kc_tensor_dtype(t), KC_U8);
    check_shape(t, 1, dims1);
    check_fixture_values(t);
    kc_tensor_free(t);

    assert_int_equal(kc_tensor_load_npy(NPY_DATA "f4_0x3.npy", &t), KC_OK);
    check_shape(t, 2, dims0x3);
    assert_int_equal(kc_tensor_count(t), 0);
    kc_tensor_free(t);
}

/* Saving what NumPy wrote gives NumPy's bytes back, padding included. */
static void test_save_matches_numpy_bytes(void **state)
{
    (void)state;
    static const char *const more[] = {"f8_scalar.npy", "i4_2x3x4.npy", "u1_5.npy", "f4_0x3.npy"};
    char src[512], dst[512];
    tmp_path(dst, sizeof dst, "resave.npy");
    for (size_t i = 0; i < KC_NPY_TEST_NDTYPES + 4; i++) {
        const char *name =
            i < KC_NPY_TEST_NDTYPES ? kc_npy_test_numpy_2x3[i] : more[i - KC_NPY_TEST_NDTYPES];
        snprintf(src, sizeof src, "%s%s", NPY_DATA, name);
        kc_tensor *t;
        assert_int_equal(kc_tensor_load_npy(src, &t), KC_OK);
        assert_int_equal(kc_tensor_save_npy(t, dst), KC_OK);
        size_t a_len, b_len;
        unsigned char *a = read_bytes(src, &a_len), *b = read_bytes(dst, &b_len);
        if (a_len != b_len || memcmp(a, b, a_len) != 0)
            fail_msg("%s: saved bytes differ from NumPy's", name);
        free(a);
        free(b);
        kc_tensor_free(t);
    }
    unlink(dst);
}

static void test_reads_format_2_and_3(void **state)
{
    (void)state;
    static const int64_t dims3[1] = {3}, dims2[1] = {2};
    kc_tensor *t;
    assert_int_equal(kc_tensor_load_npy(NPY_DATA "i2_3_v2.npy", &t), KC_OK);
    assert_int_equal(kc_tensor_dtype(t), KC_I16);
    check_shape(t, 1, dims3);
    check_fixture_values(t);
    kc_tensor_free(t);

    assert_int_equal(kc_tensor_load_npy(NPY_DATA "f4_2_v3.npy", &t), KC_OK);
    assert_int_equal(kc_tensor_dtype(t), KC_F32);
    check_shape(t, 1, dims2);
    check_fixture_values(t);
    kc_tensor_free(t);
}

/* A dict too long for the 16-bit length of format 1.0 is framed as 2.0. */
static void test_wrap_header_versions(void **state)
{
    (void)state;
    static unsigned char out[80000];
    static char dict[70001];
    memset(dict, ' ', sizeof dict - 1);
    memcpy(dict, "{}", 2);

    size_t n = kc_npy_wrap_header(dict, 100, out, sizeof out);
    assert_int_equal(out[6], 1);
    assert_int_equal(n % 64, 0);
    assert_int_equal(10 + (size_t)(out[8] | out[9] << 8), n);

    n = kc_npy_wrap_header(dict, 70000, out, sizeof out);
    assert_int_equal(out[6], 2);
    assert_int_equal(out[7], 0);
    assert_int_equal(n % 64, 0);
    assert_int_equal(12 + ((size_t)out[8] | (size_t)out[9] << 8 | (size_t)out[10] << 16), n);
    assert_int_equal(out[11], 0);
    assert_int_equal(out[n - 1], '\n');
    assert_memory_equal(out + 12, dict, 70000);

    assert_int_equal(kc_npy_wrap_header(dict, 70000, out, 1000), 0); /* too small */
}

/* Headers NumPy could have written or read in another spelling. */
static void test_header_spellings(void **state)
{
    (void)state;
    static const char *const dicts[] = {
        "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }",
        "{\"shape\": (2,3), \"descr\": \"<i2\", \"fortran_order\": False}",
        "{ 'fortran_order' : False ,\n 'shape' : ( 2 , 3 , ) ,\t'descr' : '<i2' }",
        "{'descr': '<i2', 'fortran_order': False, 'shape': (2L, 3L), }",
        /* Fortran order is the same bytes when one axis is longer than 1. */
        "{'descr': '<i2', 'fortran_order': True, 'shape': (1, 6), }",
    };
    static const int64_t dims[2][2] = {{2, 3}, {1, 6}};
    static const int16_t data[6] = {1, 2, 3, 4, 5, 6};
    unsigned char buf[512];
    for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
        kc_tensor *t;
        size_t len = build(dicts[i], data, sizeof data, buf, sizeof buf);
        if (kc_npy_parse(buf, len, &t) != KC_OK)
            fail_msg("%s: %s", dicts[i], kc_last_error());
        assert_int_equal(kc_tensor_dtype(t), KC_I16);
        check_shape(t, 2, dims[i == 4]);
        assert_memory_equal(kc_tensor_cdata(t), data, sizeof data);
        kc_tensor_free(t);
    }

    /* '|' and '=' are fine where byte order is meaningless. */
    static const char *const one_byte[] = {"'<u1'", "'=u1'", "'>u1'", "'u1'", "'|b1'", "'?'"};
    for (size_t i = 0; i < sizeof one_byte / sizeof one_byte[0]; i++) {
        char dict[128];
        kc_tensor *t;
        snprintf(dict, sizeof dict, "{'descr': %s, 'fortran_order': False, 'shape': (3,), }",
                 one_byte[i]);
        size_t len = build(dict, "\1\0\1", 3, buf, sizeof buf);
        if (kc_npy_parse(buf, len, &t) != KC_OK)
            fail_msg("%s: %s", dict, kc_last_error());
        kc_tensor_free(t);
    }
}

static void test_bools_are_normalized(void **state)
{
    (void)state;
    unsigned char buf[256];
    kc_tensor *t;
    size_t len = build("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", "\0\2\377", 3,
                       buf, sizeof buf);
    assert_int_equal(kc_npy_parse(buf, len, &t), KC_OK);
    assert_memory_equal(kc_tensor_cdata(t), "\0\1\1", 3);
    kc_tensor_free(t);
}

/* The rejections the file format can throw at us, one per cause. */
static void test_rejects_preamble(void **state)
{
    (void)state;
    unsigned char buf[512];
    size_t len = build("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                       "\0\0\0\0\0\0\0\0", 8, buf, sizeof buf);
    unsigned char bad[512];

    memcpy(bad, buf, len);
    bad[1] = 'X';
    expect_reject("bad_magic.npy", bad, len, KC_ERR_FORMAT, "magic");
    expect_reject("empty.npy", buf, 0, KC_ERR_FORMAT, "magic");
    expect_reject("short_preamble.npy", buf, 7, KC_ERR_FORMAT, "truncated");
    expect_reject("short_len.npy", buf, 9, KC_ERR_FORMAT, "truncated");

    memcpy(bad, buf, len);
    bad[6] = 4;
    expect_reject("version4.npy", bad, len, KC_ERR_UNSUPPORTED, "version 4.0");

    /* Header length claims 1000 bytes in a file far shorter. */
    memcpy(bad, buf, len);
    bad[8] = 0xe8;
    bad[9] = 0x03;
    expect_reject("header_past_eof.npy", bad, len, KC_ERR_FORMAT, "past the end");

    /* 2.0 header length over the 64 KiB cap. */
    memcpy(bad, buf, 8);
    bad[6] = 2;
    memcpy(bad + 8, "\0\0\2\0", 4); /* 131072 */
    expect_reject("header_too_long.npy", bad, 12, KC_ERR_LIMIT, "limit");
}

static void test_rejects_data_size(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s%s", NPY_DATA, "float32_2x3.npy");
    size_t len;
    unsigned char *bytes = read_bytes(path, &len);
    unsigned char *longer = malloc(len + 1);
    assert_non_null(longer);
    memcpy(longer, bytes, len);
    longer[len] = 0;
    expect_reject("truncated.npy", bytes, len - 4, KC_ERR_FORMAT, "truncated");
    expect_reject("trailing.npy", longer, len + 1, KC_ERR_FORMAT, "trailing");
    expect_reject("header_only.npy", bytes, 128, KC_ERR_FORMAT, "truncated");
    expect_reject("cut_in_header.npy", bytes, 64, KC_ERR_FORMAT, "past the end");
    free(longer);
    free(bytes);
}

static void test_rejects_numpy_unsupported(void **state)
{
    (void)state;
    expect_reject_fixture("f4_2_bigendian.npy", KC_ERR_UNSUPPORTED, "big-endian");
    expect_reject_fixture("f4_2x3_fortran.npy", KC_ERR_UNSUPPORTED, "fortran_order");
    expect_reject_fixture("object.npy", KC_ERR_REFUSED, "pickled object arrays are never loaded");
}

static void test_rejects_shapes(void **state)
{
    (void)state;
    expect_reject_dict("negative_dim.npy",
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", 0,
                       KC_ERR_FORMAT, "negative");
    expect_reject_dict(
        "nine_dims.npy",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 1,
        KC_ERR_LIMIT, "npy header: shape has 9 dimensions (max 8)");
    expect_reject_dict("overflow_product.npy",
                       "{'descr': '<f8', 'fortran_order': False, "
                       "'shape': (4294967296, 4294967296, 4294967296), }",
                       0, KC_ERR_LIMIT, "2^40");
    expect_reject_dict("overflow_bytes.npy",
                       "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776, 2), }", 0,
                       KC_ERR_LIMIT, "2^40");
    expect_reject_dict(
        "overflow_dim.npy",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0,
        KC_ERR_LIMIT, "64 bits");
    /* Fits the limits but not the file: size checked before allocating. */
    expect_reject_dict("huge_in_small_file.npy",
                       "{'descr': '<f8', 'fortran_order': False, 'shape': (1048576, 1048576), }",
                       16, KC_ERR_FORMAT, "truncated");
    expect_reject_dict("int_not_tuple.npy",
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12,
                       KC_ERR_FORMAT, "not a tuple");
    expect_reject_dict("list_shape.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': [3], }",
                       12, KC_ERR_FORMAT, "list");
    expect_reject_dict("leading_zero.npy",
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (03,), }", 12,
                       KC_ERR_FORMAT, "leading zero");
}

static void test_rejects_dtypes(void **state)
{
    (void)state;
    static const struct {
        const char *name, *descr;
        kc_status want;
        const char *needle;
    } cases[] = {
        {"big_endian.npy", "'>f4'", KC_ERR_UNSUPPORTED, "big-endian"},
        {"native_order.npy", "'=f4'", KC_ERR_UNSUPPORTED, "byte order"},
        {"object.npy", "'|O'", KC_ERR_REFUSED, "pickled object arrays are never loaded"},
        {"object8.npy", "'<O8'", KC_ERR_REFUSED, "pickled"},
        {"complex.npy", "'<c8'", KC_ERR_UNSUPPORTED, "not supported"},
        {"unicode.npy", "'<U3'", KC_ERR_UNSUPPORTED, "not supported"},
        {"float128.npy", "'<f16'", KC_ERR_UNSUPPORTED, "not supported"},
        {"garbage.npy", "'zz'", KC_ERR_FORMAT, "not a NumPy dtype"},
        {"empty_descr.npy", "''", KC_ERR_FORMAT, "not a NumPy dtype"},
        {"order_only.npy", "'<'", KC_ERR_FORMAT, "not a NumPy dtype"},
        {"structured.npy", "[('a', '<f4'), ('b', '<i4')]", KC_ERR_UNSUPPORTED, "structured"},
        {"structured_obj.npy", "[('a', '<f4'), ('b', '|O')]", KC_ERR_REFUSED, "pickled"},
        {"structured_long.npy",
         "[('a_field_name_longer_than_thirty_two_bytes', '<f4'), ('Output', '<f8', (2,))]",
         KC_ERR_UNSUPPORTED, "structured"},
        {"structured_escaped.npy", "[('it\\'s', '<f4')]", KC_ERR_UNSUPPORTED, "structured"},
        {"unterminated_struct.npy", "[('a', '<f4')", KC_ERR_FORMAT, NULL},
        {"descr_int.npy", "4", KC_ERR_FORMAT, "descr"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dict[256];
        snprintf(dict, sizeof dict, "{'descr': %s, 'fortran_order': False, 'shape': (2,), }",
                 cases[i].descr);
        expect_reject_dict(cases[i].name, dict, 8, cases[i].want, cases[i].needle);
    }
}

static void test_rejects_dict_syntax(void **state)
{
    (void)state;
    static const struct {
        const char *name, *dict, *needle;
    } cases[] = {
        {"no_dict.npy", "", "'{'"},
        {"not_dict.npy", "[1, 2]", "'{'"},
        {"unclosed.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ",
         "end of the header"},
        {"unknown_key.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
         "unknown key 'x'"},
        {"dup_key.npy", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
         "duplicate key"},
        {"missing_shape.npy", "{'descr': '<f4', 'fortran_order': False}", "'shape' is missing"},
        {"missing_descr.npy", "{'fortran_order': False, 'shape': (2,)}", "'descr' is missing"},
        {"bad_bool.npy", "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}",
         "True or False"},
        {"escape.npy", "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", "backslash"},
        {"unterminated.npy", "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", NULL},
        {"double_comma.npy", "{'descr': '<f4',, 'fortran_order': False, 'shape': (2,)}", NULL},
        {"missing_colon.npy", "{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", "':'"},
        {"junk_after.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", "padding"},
        {"empty_tuple_comma.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
         "dimension"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_reject_dict(cases[i].name, cases[i].dict, 8, KC_ERR_FORMAT, cases[i].needle);

    /* A NUL byte inside the header. */
    unsigned char buf[512];
    size_t len = build("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                       "\0\0\0\0\0\0\0\0", 8, buf, sizeof buf);
    buf[20] = '\0';
    expect_reject("nul_in_header.npy", buf, len, KC_ERR_FORMAT, NULL);
}

static void test_load_missing_file(void **state)
{
    (void)state;
    kc_tensor *t = (kc_tensor *)&t;
    assert_int_equal(kc_tensor_load_npy(KC_TEST_TMP "/npy_does_not_exist.npy", &t), KC_ERR_IO);
    assert_null(t);
    check_error_message("missing", "npy_does_not_exist.npy");
    assert_int_equal(kc_tensor_load_npy(NULL, &t), KC_ERR_ARG);
    assert_int_equal(kc_tensor_load_npy("x.npy", NULL), KC_ERR_ARG);
}

static void test_save_rejects(void **state)
{
    (void)state;
    static const int64_t dims[1] = {4};
    char path[512];
    tmp_path(path, sizeof path, "rejected.npy");
    kc_tensor *t;

    assert_int_equal(kc_tensor_new(KC_BF16, 1, dims, &t), KC_OK);
    assert_int_equal(kc_tensor_save_npy(t, path), KC_ERR_UNSUPPORTED);
    check_error_message("bf16", "bfloat16");
    kc_tensor_free(t);

    kc_shape unknown = kc_shape_make(1, (const int64_t[]){-1});
    float data[1] = {0};
    t = kc_tensor_wrap(KC_F32, &unknown, data);
    assert_non_null(t);
    assert_int_equal(kc_tensor_save_npy(t, path), KC_ERR_ARG);
    check_error_message("unknown dim", "unknown");
    kc_tensor_free(t);

    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(kc_tensor_save_npy(NULL, path), KC_ERR_ARG);
}

static int count_temp_files(const char *prefix)
{
    DIR *dir = opendir(KC_TEST_TMP);
    assert_non_null(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strstr(e->d_name, ".tmp.");
    closedir(dir);
    return n;
}

/* When the final rename fails the destination is untouched and the
 * temporary file is removed. */
static void test_save_failure_leaves_no_file(void **state)
{
    (void)state;
    static const int64_t dims[1] = {4};
    char path[512], name[128];
    kc_tensor *t;
    assert_int_equal(kc_tensor_new(KC_F32, 1, dims, &t), KC_OK);

    /* A directory at the destination makes rename() fail. */
    tmp_path(path, sizeof path, "dest_is_dir.npy");
    assert_int_equal(mkdir(path, 0777) == 0 || errno == EEXIST, 1);
    assert_int_equal(kc_tensor_save_npy(t, path), KC_ERR_IO);
    check_error_message("rename", "dest_is_dir.npy");
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    snprintf(name, sizeof name, "npy_%ld_dest_is_dir.npy", (long)getpid());
    assert_int_equal(count_temp_files(name), 0);
    rmdir(path);

    /* A missing directory fails before anything is written. */
    assert_int_equal(kc_tensor_save_npy(t, KC_TEST_TMP "/npy_no_such_dir/x.npy"), KC_ERR_IO);
    check_error_message("no dir", "npy_no_such_dir/x.npy");

    /* Overwriting an existing file replaces it whole. */
    tmp_path(path, sizeof path, "overwrite.npy");
    write_bytes(path, "old", 3);
    assert_int_equal(kc_tensor_save_npy(t, path), KC_OK);
    kc_tensor *back;
    assert_int_equal(kc_tensor_load_npy(path, &back), KC_OK);
    assert_int_equal(kc_tensor_count(back), 4);
    kc_tensor_free(back);
    unlink(path);
    kc_tensor_free(t);
}

static int setup(void **state)
{
    (void)state;
    if (mkdir(KC_TEST_TMP, 0777) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_dtype_and_rank),
        cmocka_unit_test(test_round_trip_empty),
        cmocka_unit_test(test_reads_numpy_files),
        cmocka_unit_test(test_reads_numpy_ranks),
        cmocka_unit_test(test_save_matches_numpy_bytes),
        cmocka_unit_test(test_reads_format_2_and_3),
        cmocka_unit_test(test_wrap_header_versions),
        cmocka_unit_test(test_header_spellings),
        cmocka_unit_test(test_bools_are_normalized),
        cmocka_unit_test(test_rejects_preamble),
        cmocka_unit_test(test_rejects_data_size),
        cmocka_unit_test(test_rejects_numpy_unsupported),
        cmocka_unit_test(test_rejects_shapes),
        cmocka_unit_test(test_rejects_dtypes),
        cmocka_unit_test(test_rejects_dict_syntax),
        cmocka_unit_test(test_load_missing_file),
        cmocka_unit_test(test_save_rejects),
        cmocka_unit_test(test_save_failure_leaves_no_file),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
