/* Images for `kerasc predict`: JPEG/PNG decoding (tests/data/images, made
 * by tools/make_image_fixtures.py; PIL's convert("RGB") gives the same
 * pixels), rejection of truncated/corrupt/oversized files, resizing with
 * hand-computed values for every interpolation, the preprocessing modes on
 * known pixels, batching, top-k order, and label files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/tensor.h"
#include "image/image.h"
#include "kerasc.h"

#define IMG_DATA KC_TEST_DATA "/images/"
/* data/ of the source tree, from tests/data. */
#define KC_SOURCE_DATA KC_TEST_DATA "/../../data"

/* ------------------------------------------------------------ helpers */

static kc_img decode_ok(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s%s", IMG_DATA, name);
    kc_img img;
    kc_status st = kc_img_decode_file(path, &img);
    if (st != KC_OK)
        fail_msg("%s: %s", name, kc_last_error());
    assert_non_null(img.pixels);
    return img;
}

static void assert_pixel(const kc_img *img, int x, int y, int r, int g, int b)
{
    const uint8_t *p = img->pixels + ((size_t)y * img->width + x) * 3;
    if (p[0] != r || p[1] != g || p[2] != b)
        fail_msg("pixel (%d, %d) = (%d, %d, %d), expected (%d, %d, %d)", x, y, p[0], p[1], p[2],
                 r, g, b);
}

/* Lossy JPEG blocks of one solid color decode within a step or two. */
static void assert_pixel_near(const kc_img *img, int x, int y, int r, int g, int b)
{
    const uint8_t *p = img->pixels + ((size_t)y * img->width + x) * 3;
    if (abs(p[0] - r) > 2 || abs(p[1] - g) > 2 || abs(p[2] - b) > 2)
        fail_msg("pixel (%d, %d) = (%d, %d, %d), expected about (%d, %d, %d)", x, y, p[0], p[1],
                 p[2], r, g, b);
}

/* A failed decode: the status, a one-line message naming the file and
 * holding `what`, and a zeroed image. */
static void assert_decode_fails(const char *name, kc_status want, const char *what)
{
    char path[1024];
    snprintf(path, sizeof path, "%s%s", IMG_DATA, name);
    kc_img img = {1, 1, (uint8_t *)&img};
    kc_status st = kc_img_decode_file(path, &img);
    assert_int_equal(st, want);
    assert_null(img.pixels);
    assert_int_equal(img.width, 0);
    const char *err = kc_last_error();
    if (strncmp(err, path, strlen(path)) != 0 || !strstr(err, what) || strchr(err, '\n'))
        fail_msg("%s: message '%s' should name the file and say '%s'", name, err, what);
}

static unsigned char *read_fixture(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s%s", IMG_DATA, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *buf = malloc(1 << 16);
    assert_non_null(buf);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

/* A 2x2 RGB image whose three channels are v, v + 1, v + 2 for the
 * per-pixel values v = a, b / c, d. */
static kc_img make_2x2(uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
    kc_img img = {2, 2, malloc(12)};
    assert_non_null(img.pixels);
    const uint8_t v[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        for (int ch = 0; ch < 3; ch++)
            img.pixels[i * 3 + ch] = (uint8_t)(v[i] + ch);
    return img;
}

static void assert_plane(const float *rgb, int n, const float *want, float tol)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < 3; ch++) {
            float got = rgb[i * 3 + ch], exp = want[i] + (float)ch;
            if (fabsf(got - exp) > tol)
                fail_msg("value %d channel %d = %.6f, expected %.6f", i, ch, (double)got,
                         (double)exp);
        }
}

static void tmp_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/image_%ld_%s", KC_TEST_TMP, (long)getpid(), name);
}

static void write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* ------------------------------------------------------------ decoding */

static void test_detect(void **state)
{
    (void)state;
    assert_int_equal(kc_img_detect("\xFF\xD8\xFF\xE0", 4), KC_IMG_FORMAT_JPEG);
    assert_int_equal(kc_img_detect("\x89PNG\r\n\x1a\n", 8), KC_IMG_FORMAT_PNG);
    assert_int_equal(kc_img_detect("\x89PNG\r\n\x1a", 7), KC_IMG_FORMAT_UNKNOWN);
    assert_int_equal(kc_img_detect("GIF89a", 6), KC_IMG_FORMAT_UNKNOWN);
    assert_int_equal(kc_img_detect(NULL, 0), KC_IMG_FORMAT_UNKNOWN);
}

static void test_png_rgb(void **state)
{
    (void)state;
    kc_img img = decode_ok("rgb_2x2.png");
    assert_int_equal(img.width, 2);
    assert_int_equal(img.height, 2);
    assert_pixel(&img, 0, 0, 255, 0, 0);
    assert_pixel(&img, 1, 0, 0, 255, 0);
    assert_pixel(&img, 0, 1, 0, 0, 255);
    assert_pixel(&img, 1, 1, 10, 20, 30);
    kc_img_free(&img);
    assert_null(img.pixels);
}

static void test_png_gray(void **state)
{
    (void)state;
    kc_img img = decode_ok("gray_3x2.png");
    assert_int_equal(img.width, 3);
    assert_int_equal(img.height, 2);
    const int v[6] = {0, 100, 255, 7, 128, 254};
    for (int i = 0; i < 6; i++)
        assert_pixel(&img, i % 3, i / 3, v[i], v[i], v[i]);
    kc_img_free(&img);
    img = decode_ok("gray2_4x1.png"); /* 2-bit levels scale to 0, 85, 170, 255 */
    for (int i = 0; i < 4; i++)
        assert_pixel(&img, i, 0, 85 * i, 85 * i, 85 * i);
    kc_img_free(&img);
}

/* Palette expanded; index 0 is transparent (tRNS), which convert("RGB")
 * ignores. */
static void test_png_palette(void **state)
{
    (void)state;
    kc_img img = decode_ok("palette_2x2.png");
    assert_pixel(&img, 0, 0, 255, 0, 0);
    assert_pixel(&img, 1, 0, 0, 255, 0);
    assert_pixel(&img, 0, 1, 0, 0, 255);
    assert_pixel(&img, 1, 1, 10, 20, 30);
    kc_img_free(&img);
}

/* Alpha is dropped, not composited onto a background. */
static void test_png_alpha(void **state)
{
    (void)state;
    kc_img img = decode_ok("rgba_2x2.png");
    assert_pixel(&img, 0, 0, 255, 0, 0); /* alpha 0 */
    assert_pixel(&img, 1, 0, 0, 255, 0);
    assert_pixel(&img, 0, 1, 0, 0, 255);
    assert_pixel(&img, 1, 1, 10, 20, 30);
    kc_img_free(&img);
    img = decode_ok("gray_alpha_2x1.png");
    assert_pixel(&img, 0, 0, 50, 50, 50);
    assert_pixel(&img, 1, 0, 200, 200, 200);
    kc_img_free(&img);
}

/* 16-bit samples keep their high byte (PIL's "RGB;16B"). */
static void test_png_16bit(void **state)
{
    (void)state;
    kc_img img = decode_ok("rgb16_2x1.png");
    assert_pixel(&img, 0, 0, 0x12, 0xAB, 0xFF);
    assert_pixel(&img, 1, 0, 0x00, 0x80, 0xFF);
    kc_img_free(&img);
    img = decode_ok("gray16_2x1.png");
    assert_pixel(&img, 0, 0, 1, 1, 1);
    assert_pixel(&img, 1, 0, 254, 254, 254);
    kc_img_free(&img);
}

static void test_png_interlaced(void **state)
{
    (void)state;
    kc_img img = decode_ok("interlaced_3x3.png");
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 3; x++)
            assert_pixel(&img, x, y, 10 * x, 10 * y, 50);
    kc_img_free(&img);
}

static void test_jpeg_rgb(void **state)
{
    (void)state;
    const char *names[] = {"rgb_16x16.jpg", "progressive_16x16.jpg"};
    for (int i = 0; i < 2; i++) {
        kc_img img = decode_ok(names[i]);
        assert_int_equal(img.width, 16);
        assert_int_equal(img.height, 16);
        assert_pixel_near(&img, 3, 3, 255, 0, 0);
        assert_pixel_near(&img, 12, 3, 0, 255, 0);
        assert_pixel_near(&img, 3, 12, 0, 0, 255);
        assert_pixel_near(&img, 12, 12, 128, 128, 128);
        kc_img_free(&img);
    }
}

static void test_jpeg_gray_cmyk(void **state)
{
    (void)state;
    kc_img img = decode_ok("gray_16x16.jpg");
    assert_pixel_near(&img, 3, 3, 0, 0, 0);
    assert_pixel_near(&img, 12, 3, 60, 60, 60);
    assert_pixel_near(&img, 3, 12, 180, 180, 180);
    assert_pixel_near(&img, 12, 12, 255, 255, 255);
    kc_img_free(&img);
    /* Adobe CMYK (inverted ink values) as PIL converts it. */
    img = decode_ok("cmyk_16x16.jpg");
    assert_pixel_near(&img, 3, 3, 255, 0, 0);
    assert_pixel_near(&img, 12, 3, 0, 255, 0);
    assert_pixel_near(&img, 3, 12, 0, 0, 255);
    assert_pixel_near(&img, 12, 12, 0, 0, 0);
    kc_img_free(&img);
}

static void test_decode_errors(void **state)
{
    (void)state;
    /* libjpeg would pad a truncated file with gray and only warn. */
    assert_decode_fails("truncated.jpg", KC_ERR_FORMAT, "JPEG: Premature end of JPEG file");
    assert_decode_fails("truncated.png", KC_ERR_FORMAT, "PNG: file is truncated");
    assert_decode_fails("bad_crc.png", KC_ERR_FORMAT, "CRC");
    assert_decode_fails("tiny.gif", KC_ERR_UNSUPPORTED, "GIF image");
    assert_decode_fails("missing.png", KC_ERR_IO, "cannot open");

    kc_img img;
    assert_int_equal(kc_img_decode_memory("hello world", 11, "x.txt", 0, &img), KC_ERR_FORMAT);
    assert_string_equal(kc_last_error(), "x.txt: not a JPEG or PNG image");
    assert_int_equal(kc_img_decode_memory("", 0, "empty.jpg", 0, &img), KC_ERR_FORMAT);
    /* Magic alone: each decoder fails on the missing header. */
    assert_int_equal(kc_img_decode_memory("\xFF\xD8\xFF", 3, "m.jpg", 0, &img), KC_ERR_FORMAT);
    assert_int_equal(kc_img_decode_memory("\x89PNG\r\n\x1a\n", 8, "m.png", 0, &img),
                     KC_ERR_FORMAT);
    assert_null(img.pixels);
}

/* Every prefix of a valid file fails cleanly or (for JPEG/PNG that lost
 * only their trailer) decodes: never crashes, never leaks. */
static void test_decode_prefixes(void **state)
{
    (void)state;
    const char *names[] = {"rgb_16x16.jpg", "progressive_16x16.jpg", "interlaced_3x3.png",
                           "palette_2x2.png"};
    for (int n = 0; n < 4; n++) {
        size_t len;
        unsigned char *data = read_fixture(names[n], &len);
        for (size_t cut = 0; cut < len; cut++) {
            kc_img img;
            if (kc_img_decode_memory(data, cut, names[n], 0, &img) == KC_OK)
                kc_img_free(&img);
            else
                assert_null(img.pixels);
        }
        free(data);
    }
}

/* The declared size is checked before any allocation. */
static void test_decode_limits(void **state)
{
    (void)state;
    size_t len;
    unsigned char *jpg = read_fixture("rgb_16x16.jpg", &len);
    kc_img img;
    assert_int_equal(kc_img_decode_memory(jpg, len, "a.jpg", 255, &img), KC_ERR_LIMIT);
    assert_non_null(strstr(kc_last_error(), "a.jpg: JPEG: image is 16 x 16 pixels, above"));
    assert_int_equal(kc_img_decode_memory(jpg, len, "a.jpg", 256, &img), KC_OK);
    kc_img_free(&img);
    /* SOF0 rewritten to 40000 x 40000. */
    for (size_t i = 0; i + 9 < len; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
            jpg[i + 5] = 40000 >> 8, jpg[i + 6] = 40000 & 255;
            jpg[i + 7] = 40000 >> 8, jpg[i + 8] = 40000 & 255;
            break;
        }
    assert_int_equal(kc_img_decode_memory(jpg, len, "big.jpg", 0, &img), KC_ERR_LIMIT);
    assert_non_null(strstr(kc_last_error(), "40000 x 40000"));
    free(jpg);

    /* A PNG of 20000 x 20000 (4 * 10^8 pixels > 2^28): a valid IHDR, so
     * that the CRC check passes and the size check is what refuses it. */
    unsigned char *png = read_fixture("rgb_2x2.png", &len);
    static const unsigned char ihdr_big[] = {0x00, 0x00, 0x4E, 0x20, 0x00, 0x00, 0x4E, 0x20,
                                             0x08, 0x02, 0x00, 0x00, 0x00};
    memcpy(png + 16, ihdr_big, sizeof ihdr_big);
    /* CRC-32 of "IHDR" + the 13 bytes above (zlib.crc32). */
    static const unsigned char crc[4] = {0x6C, 0x12, 0xD1, 0x6E};
    memcpy(png + 29, crc, 4);
    assert_int_equal(kc_img_decode_memory(png, len, "big.png", 0, &img), KC_ERR_LIMIT);
    assert_non_null(strstr(kc_last_error(), "big.png: PNG: image is 20000 x 20000 pixels"));
    free(png);
}

/* ------------------------------------------------------------ resizing */

/* 2x2 -> 4x4, half-pixel centers: per axis the taps are (0, 0, w 0),
 * (0, 1, .25), (0, 1, .75), (1, 1, 0). With a = 0, b = 100 / c = 200,
 * d = 40: top row 0, 25, 75, 100; bottom row 200, 160, 80, 40; the middle
 * rows blend them by .25 and .75. */
static void test_resize_bilinear(void **state)
{
    (void)state;
    kc_img img = make_2x2(0, 100, 200, 40);
    float out[4 * 4 * 3];
    assert_int_equal(kc_img_resize(&img, 4, 4, KC_IMG_BILINEAR, out), KC_OK);
    const float want[16] = {0,   25,     75,    100, /* */
                            50,  58.75f, 76.25f, 85, /* */
                            150, 126.25f, 78.75f, 55, /* */
                            200, 160,    80,    40};
    assert_plane(out, 16, want, 0.0f);
    kc_img_free(&img);
}

/* PIL NEAREST: src = floor((dst + 0.5) * in/out) = 0, 0, 1, 1. */
static void test_resize_nearest(void **state)
{
    (void)state;
    kc_img img = make_2x2(0, 100, 200, 40);
    float out[4 * 4 * 3];
    assert_int_equal(kc_img_resize(&img, 4, 4, KC_IMG_NEAREST, out), KC_OK);
    const float want[16] = {0, 0, 100, 100, 0, 0, 100, 100, 200, 200, 40, 40, 200, 200, 40, 40};
    assert_plane(out, 16, want, 0.0f);
    /* 4 -> 2 downscale picks 1 and 3: floor(0.5 * 2), floor(1.5 * 2). */
    kc_img big = {4, 1, malloc(12)};
    assert_non_null(big.pixels);
    for (int i = 0; i < 12; i++)
        big.pixels[i] = (uint8_t)(10 * (i / 3) + i % 3);
    float down[2 * 3];
    assert_int_equal(kc_img_resize(&big, 1, 2, KC_IMG_NEAREST, down), KC_OK);
    const float want_down[2] = {10, 30};
    assert_plane(down, 2, want_down, 0.0f);
    kc_img_free(&big);
    kc_img_free(&img);
}

/* align_corners: src = dst * (2-1)/(4-1) = 0, 1/3, 2/3, 1. */
static void test_resize_align_corners(void **state)
{
    (void)state;
    kc_img img = make_2x2(0, 100, 200, 40);
    float out[4 * 4 * 3];
    assert_int_equal(kc_img_resize(&img, 4, 4, KC_IMG_BILINEAR_ALIGN_CORNERS, out), KC_OK);
    const float t = 100.0f / 3.0f;
    const float want[16] = {0,          t,           2 * t,       100, /* */
                            200.0f / 3, 640.0f / 9,  680.0f / 9,  80,  /* */
                            400.0f / 3, 980.0f / 9,  760.0f / 9,  60,  /* */
                            200,        440.0f / 3,  280.0f / 3,  40};
    assert_plane(out, 16, want, 1e-4f);
    kc_img_free(&img);
}

/* Same size is the identity in every mode; bad sizes are refused. */
static void test_resize_identity_and_args(void **state)
{
    (void)state;
    kc_img img = decode_ok("interlaced_3x3.png");
    float out[3 * 3 * 3];
    for (int m = 0; m < 3; m++) {
        assert_int_equal(kc_img_resize(&img, 3, 3, (kc_img_interp)m, out), KC_OK);
        for (int i = 0; i < 27; i++)
            assert_true(out[i] == (float)img.pixels[i]);
    }
    assert_int_equal(kc_img_resize(&img, 0, 3, KC_IMG_BILINEAR, out), KC_ERR_LIMIT);
    assert_int_equal(kc_img_resize(&img, 3, KC_IMG_MAX_SIDE + 1, KC_IMG_BILINEAR, out),
                     KC_ERR_LIMIT);
    assert_int_equal(kc_img_resize(NULL, 3, 3, KC_IMG_BILINEAR, out), KC_ERR_ARG);
    kc_img_free(&img);
}

static void test_mode_names(void **state)
{
    (void)state;
    const char *preps[] = {"tf", "caffe", "torch", "none", "unit"};
    for (int i = 0; i < 5; i++) {
        kc_img_prep p;
        assert_int_equal(kc_img_prep_parse(preps[i], &p), KC_OK);
        assert_string_equal(kc_img_prep_name(p), preps[i]);
    }
    const char *interps[] = {"bilinear", "nearest", "bilinear-align-corners"};
    for (int i = 0; i < 3; i++) {
        kc_img_interp m;
        assert_int_equal(kc_img_interp_parse(interps[i], &m), KC_OK);
        assert_string_equal(kc_img_interp_name(m), interps[i]);
    }
    kc_img_prep p;
    kc_img_interp m;
    assert_int_equal(kc_img_prep_parse("TF", &p), KC_ERR_ARG);
    assert_int_equal(kc_img_prep_parse(NULL, &p), KC_ERR_ARG);
    assert_int_equal(kc_img_interp_parse("bicubic", &m), KC_ERR_ARG);
    assert_non_null(strstr(kc_last_error(), "bicubic"));
}

/* ------------------------------------------------------- preprocessing */

/* Pixel (255, 128, 0) in each mode; Keras's values (float32 NumPy). */
static void test_preprocess_modes(void **state)
{
    (void)state;
    static const struct {
        kc_img_prep prep;
        float want[3];
    } cases[] = {
        {KC_IMG_PREP_TF, {1.0f, 0.0039215684f, -1.0f}},
        /* BGR order: 0 - 103.939, 128 - 116.779, 255 - 123.68 */
        {KC_IMG_PREP_CAFFE, {-103.939f, 11.221f, 131.32f}},
        /* (1 - .485)/.229, (128/255 - .456)/.224, (0 - .406)/.225 */
        {KC_IMG_PREP_TORCH, {2.2489083f, 0.2051821f, -1.8044444f}},
        {KC_IMG_PREP_NONE, {255.0f, 128.0f, 0.0f}},
        {KC_IMG_PREP_UNIT, {1.0f, 0.5019608f, 0.0f}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float px[6] = {255, 128, 0, 255, 128, 0};
        kc_img_preprocess(px, 2, cases[i].prep);
        for (int c = 0; c < 6; c++)
            if (fabsf(px[c] - cases[i].want[c % 3]) > 1e-5f)
                fail_msg("%s channel %d: %.7f, expected %.7f", kc_img_prep_name(cases[i].prep),
                         c, (double)px[c], (double)cases[i].want[c % 3]);
    }
    /* tf is exact at the ends and the center bin. */
    float ends[3] = {0, 255, 127.5f};
    kc_img_preprocess(ends, 1, KC_IMG_PREP_TF);
    assert_true(ends[0] == -1.0f && ends[1] == 1.0f && ends[2] == 0.0f);
}

static void test_to_tensor(void **state)
{
    (void)state;
    kc_img imgs[2] = {make_2x2(0, 100, 200, 40), decode_ok("rgb_2x2.png")};
    kc_tensor *t = NULL;
    assert_int_equal(kc_img_to_tensor(imgs, 2, 4, 4, KC_IMG_NEAREST, KC_IMG_PREP_UNIT, &t), KC_OK);
    assert_int_equal(kc_tensor_dtype(t), KC_F32);
    assert_int_equal(kc_tensor_rank(t), 4);
    assert_int_equal(kc_tensor_dim(t, 0), 2);
    assert_int_equal(kc_tensor_dim(t, 1), 4);
    assert_int_equal(kc_tensor_dim(t, 2), 4);
    assert_int_equal(kc_tensor_dim(t, 3), 3);
    const float *d = kc_tensor_cdata(t);
    assert_true(d[3 * 2] == 100.0f / 255.0f);          /* image 0, (0, 2), R */
    assert_true(d[48 + 0] == 1.0f && d[48 + 1] == 0.0f); /* image 1, (0, 0): red */
    assert_true(d[48 + 3 * 15 + 0] == 10.0f / 255.0f);   /* image 1, (3, 3) */
    kc_tensor_free(t);
    assert_int_equal(kc_img_to_tensor(imgs, 0, 4, 4, KC_IMG_NEAREST, KC_IMG_PREP_TF, &t),
                     KC_ERR_ARG);
    assert_null(t);
    kc_img_free(&imgs[0]);
    kc_img_free(&imgs[1]);
}

/* -------------------------------------------------------------- top-k */

static void test_topk(void **state)
{
    (void)state;
    const float scores[7] = {0.1f, 0.5f, 0.5f, NAN, 0.9f, -1.0f, 0.5f};
    int idx[7];
    assert_int_equal(kc_img_topk(scores, 7, 4, idx), KC_OK);
    const int want4[4] = {4, 1, 2, 6}; /* ties by lower index */
    for (int i = 0; i < 4; i++)
        assert_int_equal(idx[i], want4[i]);
    assert_int_equal(kc_img_topk(scores, 7, 7, idx), KC_OK);
    const int want7[7] = {4, 1, 2, 6, 0, 5, 3}; /* NaN last */
    for (int i = 0; i < 7; i++)
        assert_int_equal(idx[i], want7[i]);
    assert_int_equal(kc_img_topk(scores, 7, 0, NULL), KC_OK);
    assert_int_equal(kc_img_topk(scores, 7, 8, idx), KC_ERR_ARG);
    assert_int_equal(kc_img_topk(scores, 7, -1, idx), KC_ERR_ARG);
    const float one = -INFINITY;
    assert_int_equal(kc_img_topk(&one, 1, 1, idx), KC_OK);
    assert_int_equal(idx[0], 0);
}

/* ------------------------------------------------------------- labels */

static void test_labels_parse(void **state)
{
    (void)state;
    kc_img_labels l;
    const char text[] = "\xEF\xBB\xBF" "cat\r\ndog\ttail\nfish";
    assert_int_equal(kc_img_labels_parse(text, sizeof text - 1, "t.txt", &l), KC_OK);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.names[0], "cat");
    assert_string_equal(l.names[1], "dog\ttail");
    assert_string_equal(l.names[2], "fish");
    kc_img_labels_free(&l);
    assert_int_equal(l.count, 0);
    /* A final newline ends the last label; it does not add one. */
    assert_int_equal(kc_img_labels_parse("a\nb\n", 4, "t.txt", &l), KC_OK);
    assert_int_equal(l.count, 2);
    kc_img_labels_free(&l);
    /* Escape sequences are neutralised. */
    assert_int_equal(kc_img_labels_parse("a\x1b[2Jb", 6, "t.txt", &l), KC_OK);
    assert_string_equal(l.names[0], "a?[2Jb");
    kc_img_labels_free(&l);

    assert_int_equal(kc_img_labels_parse("a\n\nb", 4, "t.txt", &l), KC_ERR_FORMAT);
    assert_string_equal(kc_last_error(),
                        "t.txt: line 2 is empty (one label per line, in class index order)");
    assert_null(l.names);
    assert_int_equal(kc_img_labels_parse("a\r\n\r\n", 6, "t.txt", &l), KC_ERR_FORMAT);
    assert_int_equal(kc_img_labels_parse("", 0, "t.txt", &l), KC_ERR_FORMAT);
    assert_int_equal(kc_img_labels_parse("a\0b", 3, "t.txt", &l), KC_ERR_FORMAT);
    assert_non_null(strstr(kc_last_error(), "NUL"));
}

static void test_labels_files(void **state)
{
    (void)state;
    char path[1024];
    tmp_path(path, sizeof path, "labels.txt");
    mkdir(KC_TEST_TMP, 0755);
    write_text(path, "zero\none\ntwo\n", 13);
    kc_img_labels l;
    assert_int_equal(kc_img_labels_open(path, &l), KC_OK);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.names[2], "two");
    kc_img_labels_free(&l);
    unlink(path);
    assert_int_equal(kc_img_labels_open(path, &l), KC_ERR_IO);
    assert_non_null(strstr(kc_last_error(), path));
    assert_int_equal(kc_img_labels_open("", &l), KC_ERR_ARG);
}

static void test_labels_builtin(void **state)
{
    (void)state;
    kc_img_labels l;
    assert_int_equal(kc_img_labels_open("nsfwjs", &l), KC_OK);
    assert_int_equal(l.count, 5);
    const char *want[5] = {"Drawing", "Hentai", "Neutral", "Porn", "Sexy"};
    for (int i = 0; i < 5; i++)
        assert_string_equal(l.names[i], want[i]);
    kc_img_labels_free(&l);

    assert_int_equal(setenv("KERASC_DATA", KC_SOURCE_DATA, 1), 0);
    assert_int_equal(kc_img_labels_open("imagenet", &l), KC_OK);
    assert_int_equal(l.count, 1000);
    assert_string_equal(l.names[0], "tench, Tinca tinca");
    assert_string_equal(l.names[281], "tabby, tabby cat");
    assert_string_equal(l.names[999], "toilet tissue, toilet paper, bathroom tissue");
    kc_img_labels_free(&l);

    /* Not found anywhere: the message says where it looked. */
    assert_int_equal(setenv("KERASC_DATA", KC_TEST_TMP "/no-such-dir", 1), 0);
    char path[256];
    kc_status st = kc_img_data_path("labels/no-such-set.txt", path, sizeof path);
    assert_int_equal(st, KC_ERR_IO);
    assert_non_null(strstr(kc_last_error(), "KERASC_DATA=" KC_TEST_TMP "/no-such-dir"));
    unsetenv("KERASC_DATA");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_png_rgb),
        cmocka_unit_test(test_png_gray),
        cmocka_unit_test(test_png_palette),
        cmocka_unit_test(test_png_alpha),
        cmocka_unit_test(test_png_16bit),
        cmocka_unit_test(test_png_interlaced),
        cmocka_unit_test(test_jpeg_rgb),
        cmocka_unit_test(test_jpeg_gray_cmyk),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_decode_prefixes),
        cmocka_unit_test(test_decode_limits),
        cmocka_unit_test(test_resize_bilinear),
        cmocka_unit_test(test_resize_nearest),
        cmocka_unit_test(test_resize_align_corners),
        cmocka_unit_test(test_resize_identity_and_args),
        cmocka_unit_test(test_mode_names),
        cmocka_unit_test(test_preprocess_modes),
        cmocka_unit_test(test_to_tensor),
        cmocka_unit_test(test_topk),
        cmocka_unit_test(test_labels_parse),
        cmocka_unit_test(test_labels_files),
        cmocka_unit_test(test_labels_builtin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
