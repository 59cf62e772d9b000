/* libFuzzer target for the image decoders (kc_img_decode_memory: JPEG via
 * libjpeg-turbo, PNG via libpng, both with longjmp error handlers).
 *
 * Beyond "no crash, no leak, no exit()", it checks the decoder's contract:
 * a failure leaves the image zeroed with a nonempty one-line message that
 * names the input; a success gives a positive size within the cap and a
 * buffer that resizing (every interpolation) and preprocessing read whole
 * (ASan catches a short buffer). The pixel cap is lowered to 2^22 so that a
 * 30-byte header declaring a huge image cannot make each run take seconds;
 * the full cap is the same code with a larger number. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "kerasc.h"

#define KC_FUZZ_MAX_PIXELS ((int64_t)1 << 22)

static void kc_img_fuzz_check_error(const kc_img *img)
{
    const char *err = kc_last_error();
    if (img->pixels != NULL || img->width != 0 || img->height != 0)
        abort();
    if (err[0] == '\0' || strchr(err, '\n') != NULL || strncmp(err, "fuzz: ", 6) != 0)
        abort();
}

static void kc_img_fuzz_use(const kc_img *img)
{
    if (img->width <= 0 || img->height <= 0 || !img->pixels ||
        (int64_t)img->width * img->height > KC_FUZZ_MAX_PIXELS)
        abort();
    /* A small odd target size: exercises up- and downscaling on every axis. */
    enum { H = 5, W = 7 };
    float out[H * W * 3];
    const kc_img_interp modes[] = {KC_IMG_BILINEAR, KC_IMG_NEAREST,
                                   KC_IMG_BILINEAR_ALIGN_CORNERS};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        if (kc_img_resize(img, H, W, modes[m], out) != KC_OK)
            abort();
        for (int i = 0; i < H * W * 3; i++)
            if (!(out[i] >= 0.0f && out[i] <= 255.0f))
                abort();
    }
    kc_img_preprocess(out, H * W, KC_IMG_PREP_CAFFE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kc_img img;
    if (kc_img_decode_memory(data, size, "fuzz", KC_FUZZ_MAX_PIXELS, &img) != KC_OK) {
        kc_img_fuzz_check_error(&img);
        return 0;
    }
    kc_img_fuzz_use(&img);
    kc_img_free(&img);
    return 0;
}
