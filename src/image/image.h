/* Images for `kerasc predict`: decode JPEG/PNG to 8-bit RGB, resize,
 * apply a keras.applications preprocessing mode, batch into a float32
 * (N, H, W, 3) tensor, and turn class scores into labelled top-k lists.
 *
 * What Keras users feed a model is keras.utils.load_img(path) (PIL,
 * convert("RGB")) → img_to_array → preprocess_input, so decoding follows
 * PIL: alpha is dropped (not composited), palettes and gray are expanded,
 * EXIF orientation is NOT applied (load_img does not apply it either). */
#ifndef KC_IMAGE_H
#define KC_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kerasc.h"

/* Decoding caps: a 16-byte header can declare a 65535 x 65535 image, so
 * the declared size is checked before any pixel buffer is allocated. */
#define KC_IMG_MAX_SIDE 32768
#define KC_IMG_MAX_PIXELS ((int64_t)1 << 28)
/* Largest image file read from disk. */
#define KC_IMG_MAX_FILE_BYTES ((size_t)1 << 30)
/* Progressive JPEGs with thousands of tiny scans decode for minutes from
 * a few KB; libjpeg-turbo's own tools stop at 500 scans. */
#define KC_IMG_MAX_JPEG_SCANS 500

/* An 8-bit RGB image, rows top to bottom, pixels interleaved R, G, B. */
typedef struct kc_img {
    int width;
    int height;
    uint8_t *pixels; /* height * width * 3 bytes, owned */
} kc_img;

typedef enum kc_img_format {
    KC_IMG_FORMAT_UNKNOWN = 0,
    KC_IMG_FORMAT_JPEG,
    KC_IMG_FORMAT_PNG
} kc_img_format;

/* Format from the first bytes (never the extension). */
kc_img_format kc_img_detect(const void *data, size_t size);

/* Decode a JPEG or PNG held in memory. name is used in error messages
 * ("name: JPEG: Premature end of JPEG file"). max_pixels caps width*height
 * (0 = KC_IMG_MAX_PIXELS; the fuzzer passes less). On failure *out is
 * zeroed and the one-line error names the file. */
kc_status kc_img_decode_memory(const void *data, size_t size, const char *name,
                               int64_t max_pixels, kc_img *out);
/* Read and decode a file. */
kc_status kc_img_decode_file(const char *path, kc_img *out);
void kc_img_free(kc_img *img);

/* ------------------------------------------------------------- resizing */

typedef enum kc_img_interp {
    /* tf.image.resize(method="bilinear", antialias=False): half-pixel
     * centers, src = (dst + 0.5) * in/out - 0.5, edges clamped. */
    KC_IMG_BILINEAR = 0,
    /* PIL Image.resize(NEAREST), what keras.utils.load_img(target_size=...)
     * does by default: src = floor((dst + 0.5) * in/out). */
    KC_IMG_NEAREST,
    /* tf.image.resize_bilinear(align_corners=True) / tfjs
     * resizeBilinear(alignCorners=true), what nsfwjs's JS uses:
     * src = dst * (in-1)/(out-1). */
    KC_IMG_BILINEAR_ALIGN_CORNERS
} kc_img_interp;

/* "bilinear", "nearest", "bilinear-align-corners"; KC_ERR_ARG otherwise. */
kc_status kc_img_interp_parse(const char *name, kc_img_interp *out);
const char *kc_img_interp_name(kc_img_interp interp);

/* Resize src to out_h x out_w into dst (out_h * out_w * 3 floats, values
 * still in 0..255, not rounded: TF's resize returns float32 too). */
kc_status kc_img_resize(const kc_img *src, int out_h, int out_w, kc_img_interp interp,
                        float *dst);

/* -------------------------------------------------------- preprocessing */

typedef enum kc_img_prep {
    KC_IMG_PREP_TF = 0, /* x / 127.5 - 1 */
    KC_IMG_PREP_CAFFE,  /* RGB -> BGR, minus [103.939, 116.779, 123.68] */
    KC_IMG_PREP_TORCH,  /* x / 255, minus [0.485, 0.456, 0.406], / [0.229, 0.224, 0.225] */
    KC_IMG_PREP_NONE,   /* raw 0..255 (models that rescale inside) */
    KC_IMG_PREP_UNIT    /* x / 255 (nsfwjs, Rescaling(1/255)-trained models) */
} kc_img_prep;

/* "tf", "caffe", "torch", "none", "unit"; KC_ERR_ARG otherwise. */
kc_status kc_img_prep_parse(const char *name, kc_img_prep *out);
const char *kc_img_prep_name(kc_img_prep prep);

/* Apply a mode in place to npixels interleaved RGB float pixels, with
 * Keras's float32 operation order (imagenet_utils._preprocess_numpy_input),
 * so results are bit-identical to preprocess_input on the same floats. */
void kc_img_preprocess(float *rgb, size_t npixels, kc_img_prep prep);

/* Resize + preprocess n images into a new float32 (n, h, w, 3) tensor. */
kc_status kc_img_to_tensor(const kc_img *images, int n, int h, int w, kc_img_interp interp,
                           kc_img_prep prep, kc_tensor **out);

/* --------------------------------------------------------------- labels */

typedef struct kc_img_labels {
    int count;
    char **names;
} kc_img_labels;

/* Largest labels file and label count accepted. */
#define KC_IMG_LABELS_MAX_BYTES ((size_t)64 << 20)
#define KC_IMG_LABELS_MAX_COUNT 1000000

/* Read a labels file: one label per line, in class-index order; a final
 * newline is optional, "\r\n" endings are accepted, a NUL byte or an empty
 * file is an error. */
kc_status kc_img_labels_load(const char *path, kc_img_labels *out);
/* Parse labels from memory (name is for error messages). */
kc_status kc_img_labels_parse(const char *text, size_t len, const char *name,
                              kc_img_labels *out);
/* A named set or a file: "nsfwjs" is built in (nsfwjs's NSFW_CLASSES
 * order); "imagenet" is <data dir>/labels/imagenet.txt (see
 * kc_img_data_path); anything else is a file path (write ./imagenet for a
 * file of that name). */
kc_status kc_img_labels_open(const char *spec, kc_img_labels *out);
void kc_img_labels_free(kc_img_labels *labels);

/* Find <data dir>/<relative> for kerasc's shipped data (data/ in the
 * source tree), trying in order: $KERASC_DATA, <dir of the running
 * executable>/../data (build/kerasc in a checkout), <exe dir>/data.
 * There is no compiled-in path: a relocated binary needs KERASC_DATA. */
kc_status kc_img_data_path(const char *relative, char *path, size_t cap);

/* The k highest scores' indices into idx (k <= n), highest first; equal
 * scores by lower index; NaN ranks below every number. */
kc_status kc_img_topk(const float *scores, int n, int k, int *idx);

#endif
