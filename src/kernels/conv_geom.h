/* The geometry of a convolution over three spatial axes (conv.c's
 * im2col path, transpose.c). */
#ifndef KC_KERNELS_CONV_GEOM_H
#define KC_KERNELS_CONV_GEOM_H

#include "kernels/kernel.h"
#include "ops/conv.h"

/* Geometry over three spatial axes (D, H, W); unused axes have size 1. */
typedef struct kc_geom {
    int64_t n, in[3], out[3], c, f;
    int64_t k[3], s[3], d[3], pad[3];
} kc_geom;

/* ctx's layer a: images, channels, filters and the spatial axes
 * right-aligned (a 2-D layer's in D is 1); pad is the forward
 * convolution's (TensorFlow's "same": the extra pixel after) plus a
 * folded ZeroPadding's. */
void kc_geom_init(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_geom *g);

/* A 2-D layer's window from value shape `in` to `out` (NHWC), for the
 * kernels that check its geometry themselves: the rows and columns of
 * the data it reads (`in` less a folded ZeroPadding) into data, and the
 * padding before each axis (TensorFlow's "same": the extra pixel after;
 * plus the folded ZeroPadding's) into pad. */
void kc_conv_window_2d(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                       int64_t data[2], int64_t pad[2]);

#endif
