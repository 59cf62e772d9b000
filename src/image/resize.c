/* Resizing an RGB image to the model's input size.
 *
 * Three samplings, because the tools people trained with disagree:
 *  - bilinear: tf.image.resize (TF 2 default, antialias=False), half-pixel
 *    centers; the formula of TF's resize_bilinear kernel, in float32.
 *  - nearest: PIL Image.resize(NEAREST), which keras.utils.load_img uses
 *    by default; PIL walks the source coordinate by repeated double
 *    addition, reproduced here so the picked pixels match exactly.
 *  - bilinear-align-corners: tf.compat.v1 resize_bilinear(align_corners=
 *    True) / tfjs resizeBilinear(.., alignCorners=true), what nsfwjs's JS
 *    does before running its models; coordinates in double as tfjs does.
 * Each axis gets a table (lower, upper, weight of upper); one loop then
 * blends the four neighbours as TF does: top and bottom along x, then y. */
#include "image/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

typedef struct kc_img_tap {
    int lower;
    int upper;
    float lerp;
} kc_img_tap;

static const struct {
    const char *name;
    kc_img_interp interp;
} kc_img_interp_names[] = {
    {"bilinear", KC_IMG_BILINEAR},
    {"nearest", KC_IMG_NEAREST},
    {"bilinear-align-corners", KC_IMG_BILINEAR_ALIGN_CORNERS},
};

kc_status kc_img_interp_parse(const char *name, kc_img_interp *out)
{
    for (size_t i = 0; name && i < sizeof kc_img_interp_names / sizeof kc_img_interp_names[0]; i++)
        if (strcmp(name, kc_img_interp_names[i].name) == 0) {
            *out = kc_img_interp_names[i].interp;
            return KC_OK;
        }
    return kc_fail(KC_ERR_ARG, "unknown interpolation '%s' (bilinear, nearest, "
                               "bilinear-align-corners)", name ? name : "");
}

const char *kc_img_interp_name(kc_img_interp interp)
{
    for (size_t i = 0; i < sizeof kc_img_interp_names / sizeof kc_img_interp_names[0]; i++)
        if (kc_img_interp_names[i].interp == interp)
            return kc_img_interp_names[i].name;
    return "invalid";
}

/* TF: in = (out + 0.5) * scale - 0.5 in float; lower clamped at 0, upper
 * at in_size - 1, weight from the unclamped floor. */
static void kc_img_taps_half_pixel(kc_img_tap *taps, int in_size, int out_size)
{
    float scale = (float)in_size / (float)out_size;
    for (int i = 0; i < out_size; i++) {
        float in = ((float)i + 0.5f) * scale - 0.5f;
        float in_f = floorf(in);
        int lower = (int)in_f;
        int upper = (int)ceilf(in);
        taps[i].lower = lower < 0 ? 0 : lower > in_size - 1 ? in_size - 1 : lower;
        taps[i].upper = upper > in_size - 1 ? in_size - 1 : upper;
        taps[i].lerp = in - in_f;
    }
}

/* tfjs: ratio = (in-1)/(out-1) (in/out when out is 1), src = ratio * i. */
static void kc_img_taps_align_corners(kc_img_tap *taps, int in_size, int out_size)
{
    double ratio = out_size > 1 ? (double)(in_size - 1) / (double)(out_size - 1)
                                : (double)in_size / (double)out_size;
    for (int i = 0; i < out_size; i++) {
        double src = ratio * (double)i;
        double src_f = floor(src);
        int lower = (int)src_f;
        int upper = (int)ceil(src);
        taps[i].lower = lower > in_size - 1 ? in_size - 1 : lower;
        taps[i].upper = upper > in_size - 1 ? in_size - 1 : upper;
        taps[i].lerp = (float)(src - src_f);
    }
}

/* PIL ImagingScaleAffine: pos starts at scale/2 and grows by scale; the
 * pixel is (int)pos. */
static void kc_img_taps_nearest(kc_img_tap *taps, int in_size, int out_size)
{
    double scale = (double)in_size / (double)out_size;
    double pos = scale * 0.5;
    for (int i = 0; i < out_size; i++) {
        int src = pos < 0.0 ? 0 : (int)pos;
        if (src > in_size - 1)
            src = in_size - 1;
        taps[i].lower = taps[i].upper = src;
        taps[i].lerp = 0.0f;
        pos += scale;
    }
}

static void kc_img_taps(kc_img_tap *taps, int in_size, int out_size, kc_img_interp interp)
{
    switch (interp) {
    case KC_IMG_NEAREST:
        kc_img_taps_nearest(taps, in_size, out_size);
        return;
    case KC_IMG_BILINEAR_ALIGN_CORNERS:
        kc_img_taps_align_corners(taps, in_size, out_size);
        return;
    case KC_IMG_BILINEAR:
        break;
    }
    kc_img_taps_half_pixel(taps, in_size, out_size);
}

static void kc_img_resize_row(const kc_img *src, const kc_img_tap *ty, const kc_img_tap *xs,
                              int out_w, float *dst)
{
    size_t stride = (size_t)src->width * 3;
    const uint8_t *top = src->pixels + (size_t)ty->lower * stride;
    const uint8_t *bot = src->pixels + (size_t)ty->upper * stride;
    for (int x = 0; x < out_w; x++) {
        size_t l = (size_t)xs[x].lower * 3, r = (size_t)xs[x].upper * 3;
        for (int c = 0; c < 3; c++) {
            float tl = top[l + c], tr = top[r + c], bl = bot[l + c], br = bot[r + c];
            float t = tl + (tr - tl) * xs[x].lerp;
            float b = bl + (br - bl) * xs[x].lerp;
            dst[(size_t)x * 3 + c] = t + (b - t) * ty->lerp;
        }
    }
}

kc_status kc_img_resize(const kc_img *src, int out_h, int out_w, kc_img_interp interp,
                        float *dst)
{
    if (!src || !src->pixels || src->width <= 0 || src->height <= 0 || !dst)
        return kc_fail(KC_ERR_ARG, "kc_img_resize: no image");
    if (out_h <= 0 || out_w <= 0 || out_h > KC_IMG_MAX_SIDE || out_w > KC_IMG_MAX_SIDE ||
        (int64_t)out_h * out_w > KC_IMG_MAX_PIXELS)
        return kc_fail(KC_ERR_LIMIT, "resize to %d x %d: size outside 1..%d per side", out_h,
                       out_w, KC_IMG_MAX_SIDE);
    kc_img_tap *ys = kc_calloc((size_t)out_h, sizeof *ys);
    kc_img_tap *xs = kc_calloc((size_t)out_w, sizeof *xs);
    if (!ys || !xs) {
        free(ys);
        free(xs);
        return KC_ERR_NOMEM;
    }
    kc_img_taps(ys, src->height, out_h, interp);
    kc_img_taps(xs, src->width, out_w, interp);
    for (int y = 0; y < out_h; y++)
        kc_img_resize_row(src, &ys[y], xs, out_w, dst + (size_t)y * out_w * 3);
    free(ys);
    free(xs);
    return KC_OK;
}
