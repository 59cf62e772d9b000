/* JPEG (libjpeg-turbo) and PNG (libpng) decoding to 8-bit RGB.
 *
 * Both libraries report fatal errors by calling a handler that must not
 * return; their default handlers print and exit(), which a library must
 * never do. Here each handler formats the message into the decode context
 * and longjmp()s back to the one function that set the jump point. All
 * state that the error path reads lives in that context (reached through a
 * pointer that is never modified after setjmp), so no local variable can
 * be clobbered by the jump. */
#include <stdio.h> /* jpeglib.h needs FILE */

#include "image/image.h"

#include <jerror.h>
#include <jpeglib.h>
#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "format/fileio.h"

#define KC_IMG_MSG_CAP 256

kc_img_format kc_img_detect(const void *data, size_t size)
{
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    const unsigned char *p = data;
    if (p && size >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        return KC_IMG_FORMAT_JPEG;
    if (p && size >= 8 && memcmp(p, png_sig, 8) == 0)
        return KC_IMG_FORMAT_PNG;
    return KC_IMG_FORMAT_UNKNOWN;
}

void kc_img_free(kc_img *img)
{
    if (!img)
        return;
    free(img->pixels);
    img->pixels = NULL;
    img->width = img->height = 0;
}

/* Checks the declared size before anything is allocated for it. */
static kc_status kc_img_check_size(const char *name, const char *kind, uint64_t w, uint64_t h,
                                   int64_t max_pixels)
{
    if (w == 0 || h == 0)
        return kc_fail(KC_ERR_FORMAT, "%s: %s: image is %llu x %llu pixels", name, kind,
                       (unsigned long long)w, (unsigned long long)h);
    if (w > KC_IMG_MAX_SIDE || h > KC_IMG_MAX_SIDE || (int64_t)(w * h) > max_pixels)
        return kc_fail(KC_ERR_LIMIT,
                       "%s: %s: image is %llu x %llu pixels, above kerasc's limit "
                       "(sides <= %d, at most %lld pixels)",
                       name, kind, (unsigned long long)w, (unsigned long long)h, KC_IMG_MAX_SIDE,
                       (long long)max_pixels);
    return KC_OK;
}

static kc_status kc_img_alloc(kc_img *img, int w, int h)
{
    img->pixels = kc_calloc((size_t)w * (size_t)h, 3);
    if (!img->pixels)
        return KC_ERR_NOMEM;
    img->width = w;
    img->height = h;
    return KC_OK;
}

/* ----------------------------------------------------------------- JPEG */

typedef struct kc_jpeg_ctx {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr err;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX + 64];
    kc_status status; /* what a jump means: FORMAT, or LIMIT/NOMEM set before it */
    const char *name;
    int64_t max_pixels;
    uint8_t *cmyk_row;
    kc_img img;
} kc_jpeg_ctx;

/* cinfo is the first member, so libjpeg's pointer is the context's. */
static kc_jpeg_ctx *kc_jpeg_ctx_of(j_common_ptr cinfo) { return (kc_jpeg_ctx *)(void *)cinfo; }

static void kc_jpeg_error_exit(j_common_ptr cinfo)
{
    kc_jpeg_ctx *ctx = kc_jpeg_ctx_of(cinfo);
    char text[JMSG_LENGTH_MAX];
    cinfo->err->format_message(cinfo, text);
    snprintf(ctx->message, sizeof ctx->message, "%s", text);
    longjmp(ctx->jump, 1);
}

/* Warnings are ignored (libjpeg warns about recoverable quirks that PIL
 * decodes too, such as extraneous bytes before a marker), except running
 * out of data: libjpeg would pad the image with gray and carry on, where
 * PIL raises "image file is truncated". */
static void kc_jpeg_emit_message(j_common_ptr cinfo, int msg_level)
{
    if (msg_level >= 0)
        return; /* trace messages */
    cinfo->err->num_warnings++;
    if (cinfo->err->msg_code == JWRN_JPEG_EOF)
        kc_jpeg_error_exit(cinfo);
}

static void kc_jpeg_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void kc_jpeg_progress(j_common_ptr cinfo)
{
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > KC_IMG_MAX_JPEG_SCANS) {
        kc_jpeg_ctx *ctx = kc_jpeg_ctx_of(cinfo);
        ctx->status = KC_ERR_LIMIT;
        snprintf(ctx->message, sizeof ctx->message,
                 "more than %d progressive scans (kerasc's limit)", KC_IMG_MAX_JPEG_SCANS);
        longjmp(ctx->jump, 1);
    }
}

/* PIL's MULDIV255: a*b/255 rounded, in integers. */
static int kc_img_muldiv255(int a, int b)
{
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/* CMYK/YCCK JPEGs (print workflows) as PIL reads them: Adobe files store
 * inverted ink values, and PIL's CMYK -> RGB is r = (255-k) - c*(255-k)/255. */
static void kc_jpeg_cmyk_to_rgb(const uint8_t *in, uint8_t *out, int width, int inverted)
{
    for (int x = 0; x < width; x++, in += 4, out += 3) {
        int k = inverted ? 255 - in[3] : in[3];
        int nk = 255 - k;
        for (int c = 0; c < 3; c++) {
            int ink = inverted ? 255 - in[c] : in[c];
            int v = nk - kc_img_muldiv255(ink, nk);
            out[c] = (uint8_t)(v < 0 ? 0 : v);
        }
    }
}

/* Picks the output color space; CMYK is converted by hand afterwards
 * because libjpeg cannot convert it to RGB. */
static kc_status kc_jpeg_choose_color(kc_jpeg_ctx *ctx)
{
    struct jpeg_decompress_struct *ci = &ctx->cinfo;
    switch (ci->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        ci->out_color_space = JCS_RGB;
        return KC_OK;
    case JCS_CMYK:
    case JCS_YCCK:
        ci->out_color_space = JCS_CMYK;
        return KC_OK;
    default:
        return kc_fail(KC_ERR_UNSUPPORTED, "%s: JPEG: unsupported color space with %d components",
                       ctx->name, ci->num_components);
    }
}

static kc_status kc_jpeg_read_rows(kc_jpeg_ctx *ctx)
{
    struct jpeg_decompress_struct *ci = &ctx->cinfo;
    int cmyk = ci->out_color_space == JCS_CMYK;
    if (cmyk) {
        ctx->cmyk_row = kc_calloc(ci->output_width, 4);
        if (!ctx->cmyk_row)
            return KC_ERR_NOMEM;
    }
    size_t stride = (size_t)ctx->img.width * 3;
    while (ci->output_scanline < ci->output_height) {
        uint8_t *dst = ctx->img.pixels + (size_t)ci->output_scanline * stride;
        JSAMPROW row = cmyk ? ctx->cmyk_row : dst;
        if (jpeg_read_scanlines(ci, &row, 1) != 1)
            return kc_fail(KC_ERR_FORMAT, "%s: JPEG: decoder returned no scanline", ctx->name);
        if (cmyk)
            kc_jpeg_cmyk_to_rgb(ctx->cmyk_row, dst, ctx->img.width, ci->saw_Adobe_marker);
    }
    return KC_OK;
}

/* Everything that may longjmp happens below the setjmp in this function. */
static kc_status kc_jpeg_run(kc_jpeg_ctx *ctx, const unsigned char *data, unsigned long size)
{
    struct jpeg_decompress_struct *ci = &ctx->cinfo;
    ci->err = jpeg_std_error(&ctx->err);
    ctx->err.error_exit = kc_jpeg_error_exit;
    ctx->err.emit_message = kc_jpeg_emit_message;
    ctx->err.output_message = kc_jpeg_output_message;
    ctx->status = KC_ERR_FORMAT;
    if (setjmp(ctx->jump))
        return kc_fail(ctx->status, "%s: JPEG: %s", ctx->name, ctx->message);
    jpeg_create_decompress(ci);
    ctx->progress.progress_monitor = kc_jpeg_progress;
    ci->progress = &ctx->progress;
    jpeg_mem_src(ci, data, size);
    jpeg_read_header(ci, TRUE);
    KC_TRY(kc_img_check_size(ctx->name, "JPEG", ci->image_width, ci->image_height,
                             ctx->max_pixels));
    KC_TRY(kc_jpeg_choose_color(ctx));
    jpeg_start_decompress(ci);
    if (ci->output_width != ci->image_width || ci->output_height != ci->image_height)
        return kc_fail(KC_ERR_FORMAT, "%s: JPEG: output size differs from the header",
                       ctx->name);
    KC_TRY(kc_img_alloc(&ctx->img, (int)ci->output_width, (int)ci->output_height));
    return kc_jpeg_read_rows(ctx);
}

static kc_status kc_jpeg_decode(const unsigned char *data, size_t size, const char *name,
                                int64_t max_pixels, kc_img *out)
{
    if (size > ULONG_MAX)
        return kc_fail(KC_ERR_LIMIT, "%s: JPEG: file too large", name);
    kc_jpeg_ctx *ctx = kc_calloc(1, sizeof *ctx);
    if (!ctx)
        return KC_ERR_NOMEM;
    ctx->name = name;
    ctx->max_pixels = max_pixels;
    kc_status st = kc_jpeg_run(ctx, data, (unsigned long)size);
    /* Safe after a jump: destroy frees whatever libjpeg allocated and is a
     * no-op before jpeg_create_decompress ran. */
    jpeg_destroy_decompress(&ctx->cinfo);
    free(ctx->cmyk_row);
    if (st == KC_OK)
        *out = ctx->img;
    else
        kc_img_free(&ctx->img);
    free(ctx);
    return st;
}

/* ------------------------------------------------------------------ PNG */

typedef struct kc_png_ctx {
    png_structp png;
    png_infop info;
    const unsigned char *data;
    size_t size;
    size_t pos;
    char message[KC_IMG_MSG_CAP];
    const char *name;
    int64_t max_pixels;
    png_bytep *rows;
    kc_img img;
} kc_png_ctx;

static void kc_png_error(png_structp png, png_const_charp msg)
{
    kc_png_ctx *ctx = png_get_error_ptr(png);
    snprintf(ctx->message, sizeof ctx->message, "%s", msg ? msg : "error");
    png_longjmp(png, 1);
}

/* libpng warns about ancillary-chunk problems (bad CRC in tEXt, unknown
 * iCCP profile) and then ignores the chunk, as PIL does; never print. */
static void kc_png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void kc_png_read(png_structp png, png_bytep out, size_t n)
{
    kc_png_ctx *ctx = png_get_io_ptr(png);
    if (n > ctx->size - ctx->pos)
        png_error(png, "file is truncated");
    memcpy(out, ctx->data + ctx->pos, n);
    ctx->pos += n;
}

/* Transformations to 8-bit RGB as PIL's convert("RGB") gives: palettes
 * and gray expanded, 16-bit reduced to the high byte (PIL reads 16-bit RGB
 * as "RGB;16B", which keeps the high byte), alpha and tRNS dropped, not
 * composited. */
static void kc_png_set_transforms(png_structp png, png_infop info)
{
    int bit_depth = png_get_bit_depth(png, info);
    int color_type = png_get_color_type(png, info);
    if (bit_depth == 16)
        png_set_strip_16(png);
    if (color_type == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if ((color_type & PNG_COLOR_MASK_COLOR) == 0)
        png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
}

static kc_status kc_png_read_rows(kc_png_ctx *ctx)
{
    size_t stride = (size_t)ctx->img.width * 3;
    if (png_get_channels(ctx->png, ctx->info) != 3 || png_get_rowbytes(ctx->png, ctx->info) != stride)
        return kc_fail(KC_ERR_FORMAT, "%s: PNG: could not convert to 8-bit RGB", ctx->name);
    ctx->rows = kc_calloc((size_t)ctx->img.height, sizeof *ctx->rows);
    if (!ctx->rows)
        return KC_ERR_NOMEM;
    for (int y = 0; y < ctx->img.height; y++)
        ctx->rows[y] = ctx->img.pixels + (size_t)y * stride;
    png_read_image(ctx->png, ctx->rows);
    return KC_OK;
}

static kc_status kc_png_run(kc_png_ctx *ctx)
{
    if (setjmp(png_jmpbuf(ctx->png)))
        return kc_fail(KC_ERR_FORMAT, "%s: PNG: %s", ctx->name, ctx->message);
    png_set_read_fn(ctx->png, ctx, kc_png_read);
    /* libpng allocates nothing for the image before png_read_update_info,
     * so the size check below comes in time (libpng's own limit, 10^6 per
     * side, would report our LIMIT case as a format error). */
    png_read_info(ctx->png, ctx->info);
    png_uint_32 w = png_get_image_width(ctx->png, ctx->info);
    png_uint_32 h = png_get_image_height(ctx->png, ctx->info);
    KC_TRY(kc_img_check_size(ctx->name, "PNG", w, h, ctx->max_pixels));
    kc_png_set_transforms(ctx->png, ctx->info);
    KC_TRY(kc_img_alloc(&ctx->img, (int)w, (int)h));
    /* The rest of the file (text chunks after IDAT, IEND) is not read:
     * PIL does not need it either to load the pixels. */
    return kc_png_read_rows(ctx);
}

static kc_status kc_png_decode(const unsigned char *data, size_t size, const char *name,
                               int64_t max_pixels, kc_img *out)
{
    kc_png_ctx *ctx = kc_calloc(1, sizeof *ctx);
    if (!ctx)
        return KC_ERR_NOMEM;
    ctx->data = data;
    ctx->size = size;
    ctx->name = name;
    ctx->max_pixels = max_pixels;
    kc_status st;
    ctx->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, kc_png_error, kc_png_warning);
    ctx->info = ctx->png ? png_create_info_struct(ctx->png) : NULL;
    if (!ctx->png || !ctx->info)
        st = kc_fail(KC_ERR_NOMEM, "%s: PNG: out of memory creating the decoder", name);
    else
        st = kc_png_run(ctx);
    png_destroy_read_struct(&ctx->png, &ctx->info, NULL);
    free(ctx->rows);
    if (st == KC_OK)
        *out = ctx->img;
    else
        kc_img_free(&ctx->img);
    free(ctx);
    return st;
}

/* --------------------------------------------------------------- public */

/* Other image formats people pass by mistake, named in the error. */
static const char *kc_img_other_format(const unsigned char *p, size_t size)
{
    if (size >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0))
        return "GIF";
    if (size >= 2 && memcmp(p, "BM", 2) == 0)
        return "BMP";
    if (size >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
        return "WebP";
    if (size >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0))
        return "TIFF";
    return NULL;
}

kc_status kc_img_decode_memory(const void *data, size_t size, const char *name,
                               int64_t max_pixels, kc_img *out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "kc_img_decode_memory: no output");
    memset(out, 0, sizeof *out);
    if (!name)
        name = "<memory>";
    if (!data && size)
        return kc_fail(KC_ERR_ARG, "%s: no data", name);
    if (max_pixels <= 0 || max_pixels > KC_IMG_MAX_PIXELS)
        max_pixels = KC_IMG_MAX_PIXELS;
    kc_img_format format = kc_img_detect(data, size);
    if (format != KC_IMG_FORMAT_UNKNOWN) {
        kc_status st = format == KC_IMG_FORMAT_JPEG
                           ? kc_jpeg_decode(data, size, name, max_pixels, out)
                           : kc_png_decode(data, size, name, max_pixels, out);
        /* Allocation failures come from kc_calloc without the file name. */
        return st == KC_OK ? st : kc_fail_context(st, "%s", name);
    }
    const char *other = data ? kc_img_other_format(data, size) : NULL;
    if (other)
        return kc_fail(KC_ERR_UNSUPPORTED, "%s: %s image; kerasc reads JPEG and PNG only", name,
                       other);
    return kc_fail(KC_ERR_FORMAT, "%s: not a JPEG or PNG image", name);
}

kc_status kc_img_decode_file(const char *path, kc_img *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t len = 0;
    KC_TRY(kc_read_file(path, KC_IMG_MAX_FILE_BYTES, &data, &len));
    kc_status st = kc_img_decode_memory(data, len, path, 0, out);
    free(data);
    return st;
}
