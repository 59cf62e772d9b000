/* 2-D max pooling over NHWC floats, written for AVX-512 (see
 * maxpool_nhwc.c): what a oneDNN pooling part runs instead of oneDNN's
 * own kernel when the CPU has AVX-512. */
#ifndef KC_MAXPOOL_NHWC_H
#define KC_MAXPOOL_NHWC_H

#include <stdint.h>

/* One part's geometry: its input rows and columns (padding excluded),
 * output rows and columns, the window, the strides, and the padding
 * before the first input row and column (cells past the input are
 * ignored, as Keras's max pooling does). */
typedef struct kc_maxpool_geom {
    int64_t n, ih, iw, c, oh, ow;
    int64_t kh, kw, sh, sw, pad_top, pad_left;
} kc_maxpool_geom;

/* 1 when kc_maxpool_nhwc can run on this CPU (AVX-512F). */
int kc_maxpool_nhwc_available(void);

/* dst = the max of each window of src (both NHWC, dense). Every window
 * must hold at least one input cell. */
void kc_maxpool_nhwc(const float *src, float *dst, const kc_maxpool_geom *g);

#endif
