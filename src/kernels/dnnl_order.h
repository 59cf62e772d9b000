/* How oneDNN's direct convolution orders a layer's sums (see dnnl_order.c). */
#ifndef KC_DNNL_ORDER_H
#define KC_DNNL_ORDER_H

#include <stdint.h>

#include "kernels/kernel.h"

struct kc_conv_attrs;

/* For 2-D convolution a of several taps (input shape in, output out):
 * the input channels each of oneDNN's chains sums for one image, found
 * by running its primitive once on random data (answers kept for the
 * process). Each output is then the sum, in order, of chains over runs of
 * that many channels, each chain over (kernel row, kernel column,
 * channel) from zero; the channels' count itself for one chain. 0 when
 * no such run gives oneDNN's bits, oneDNN has no brgconv kernel for it,
 * or it adds a residual. */
int64_t kc_dnnl_taps_run(const struct kc_conv_attrs *a, const kc_shape *in, const kc_shape *out);

#endif
