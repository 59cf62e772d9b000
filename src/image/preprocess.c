/* keras.applications preprocessing modes (imagenet_utils.preprocess_input,
 * shared/docs/keras-formats.md §6) and batching into one input tensor.
 *
 * Keras applies the modes to a float32 NumPy array with in-place
 * operations against Python floats, which NumPy rounds to float32 first;
 * the same float32 constants and operation order are used here, so each
 * value is bit-identical to Keras's for the same resized pixels. */
#include "image/image.h"

#include <string.h>

#include "base/error.h"
#include "base/tensor.h"

static const struct {
    const char *name;
    kc_img_prep prep;
} kc_img_prep_names[] = {
    {"tf", KC_IMG_PREP_TF},     {"caffe", KC_IMG_PREP_CAFFE}, {"torch", KC_IMG_PREP_TORCH},
    {"none", KC_IMG_PREP_NONE}, {"unit", KC_IMG_PREP_UNIT},
};

#define KC_IMG_PREP_COUNT (sizeof kc_img_prep_names / sizeof kc_img_prep_names[0])

kc_status kc_img_prep_parse(const char *name, kc_img_prep *out)
{
    for (size_t i = 0; name && i < KC_IMG_PREP_COUNT; i++)
        if (strcmp(name, kc_img_prep_names[i].name) == 0) {
            *out = kc_img_prep_names[i].prep;
            return KC_OK;
        }
    return kc_fail(KC_ERR_ARG, "unknown preprocessing mode '%s' (tf, caffe, torch, none, unit)",
                   name ? name : "");
}

const char *kc_img_prep_name(kc_img_prep prep)
{
    for (size_t i = 0; i < KC_IMG_PREP_COUNT; i++)
        if (kc_img_prep_names[i].prep == prep)
            return kc_img_prep_names[i].name;
    return "invalid";
}

/* x /= 127.5; x -= 1.0 */
static void kc_img_prep_tf(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = p[i] / 127.5f - 1.0f;
}

/* x = x[..., ::-1]; x[..., c] -= mean[c] with the BGR means. */
static void kc_img_prep_caffe(float *p, size_t npixels)
{
    static const float mean_bgr[3] = {103.939f, 116.779f, 123.68f};
    for (size_t i = 0; i < npixels; i++, p += 3) {
        float r = p[0], b = p[2];
        p[0] = b - mean_bgr[0];
        p[1] = p[1] - mean_bgr[1];
        p[2] = r - mean_bgr[2];
    }
}

/* x /= 255; x[..., c] -= mean[c]; x[..., c] /= std[c] */
static void kc_img_prep_torch(float *p, size_t npixels)
{
    static const float mean[3] = {0.485f, 0.456f, 0.406f};
    static const float std[3] = {0.229f, 0.224f, 0.225f};
    for (size_t i = 0; i < npixels; i++, p += 3)
        for (int c = 0; c < 3; c++)
            p[c] = (p[c] / 255.0f - mean[c]) / std[c];
}

/* nsfwjs: img.toFloat().div(255) */
static void kc_img_prep_unit(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = p[i] / 255.0f;
}

void kc_img_preprocess(float *rgb, size_t npixels, kc_img_prep prep)
{
    switch (prep) {
    case KC_IMG_PREP_TF:
        kc_img_prep_tf(rgb, npixels * 3);
        return;
    case KC_IMG_PREP_CAFFE:
        kc_img_prep_caffe(rgb, npixels);
        return;
    case KC_IMG_PREP_TORCH:
        kc_img_prep_torch(rgb, npixels);
        return;
    case KC_IMG_PREP_UNIT:
        kc_img_prep_unit(rgb, npixels * 3);
        return;
    case KC_IMG_PREP_NONE:
        return;
    }
}

kc_status kc_img_to_tensor(const kc_img *images, int n, int h, int w, kc_img_interp interp,
                           kc_img_prep prep, kc_tensor **out)
{
    *out = NULL;
    if (!images || n <= 0)
        return kc_fail(KC_ERR_ARG, "kc_img_to_tensor: no images");
    if (h <= 0 || w <= 0 || h > KC_IMG_MAX_SIDE || w > KC_IMG_MAX_SIDE)
        return kc_fail(KC_ERR_ARG, "image size %d x %d outside 1..%d per side", h, w,
                       KC_IMG_MAX_SIDE);
    int64_t dims[4] = {n, h, w, 3};
    kc_tensor *t = NULL;
    KC_TRY(kc_tensor_new(KC_F32, 4, dims, &t));
    float *data = kc_tensor_data(t);
    size_t per_image = (size_t)h * (size_t)w;
    for (int i = 0; i < n; i++) {
        float *slice = data + (size_t)i * per_image * 3;
        kc_status st = kc_img_resize(&images[i], h, w, interp, slice);
        if (st != KC_OK) {
            kc_tensor_free(t);
            return st;
        }
        kc_img_preprocess(slice, per_image, prep);
    }
    *out = t;
    return KC_OK;
}
