/* A classifier run inside the 1x1 convolution before it (pw_head.c):
 * 1x1 convolution -> GlobalAveragePooling2D -> Dense, MobileNetV2's
 * last layers, as one kernel. */
#ifndef KC_KERNELS_PW_HEAD_H
#define KC_KERNELS_PW_HEAD_H

#include <stdint.h>

#include "base/error.h"
#include "graph/graph.h"

/* What the head keeps: the Dense's kernel packed by blocks of 16 inputs,
 * the convolution's output, the pooled values and each block's sums. */
typedef struct kc_pw_head {
    int64_t k;          /* the Dense's inputs: the convolution's output channels */
    int64_t cells;      /* the pixels the pooling averages (one image) */
    int64_t units, uvecs; /* the Dense's outputs, their vectors of 16 */
    int64_t blocks;     /* of 16 inputs: (k + 15) / 16 */
    float *w;           /* block b: w + b * uvecs * 256, [uvec][16 inputs][16 units] */
    float *bias;        /* uvecs * 16 floats, zeros past units; NULL without */
    float *conv;        /* cells x k: the convolution's output */
    float *pooled;      /* k: the pooling's output */
    float *partial;     /* block b's sums at partial + b * uvecs * 16 */
    const char *activation; /* the Dense's */
} kc_pw_head;

/* Whether GAP layer `gap` then Dense layer `dense` can run inside a 1x1
 * convolution of `channels` output channels (their attributes only). */
int kc_pw_head_layers_ok(const kc_layer *gap, const kc_layer *dense, int64_t channels);

/* The head for Dense layer `dense` after a convolution of k output
 * channels over `cells` pixels: its kernel packed (the layer's array is
 * read here only). */
kc_status kc_pw_head_new(const kc_layer *dense, int64_t k, int64_t cells, kc_pw_head **out);
void kc_pw_head_free(kc_pw_head *h);

/* After the convolution's output vectors [v0, v0 + nv) (channels 16 v0
 * on) are in h->conv: their pooled values and their blocks' sums. Any
 * thread, for its own vectors. */
void kc_pw_head_vectors(const kc_pw_head *h, int64_t v0, int64_t nv);

/* The Dense rows vectors [v0, v0 + nv)'s sums read: where they start
 * and their bytes, for the convolution to fetch into L2 beforehand. */
const char *kc_pw_head_rows(const kc_pw_head *h, int64_t v0, int64_t nv, int64_t *bytes);

/* Once every vector's sums are in: part `part` of `parts` of y's units
 * vectors = the blocks' sums added in order, then the bias (the threads
 * a share each: the sums of the other thread's blocks come from its
 * L2). */
void kc_pw_head_total(const kc_pw_head *h, float *y, int part, int parts);

/* Then y (units floats) through the Dense's activation. */
kc_status kc_pw_head_activate(const kc_pw_head *h, float *y, int keras_major);

#endif
