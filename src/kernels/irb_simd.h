/* What irb.c shares with its vector loops (irb_simd.inc, built for
 * AVX-512 and for AVX2): the block's geometry, its packed weights, one
 * 1x1 product's operands, and the loops' table. Internal to kernels/. */
#ifndef KC_IRB_SIMD_H
#define KC_IRB_SIMD_H

#include <stdint.h>

/* Expanded channels per part of a block cut by channels (irb.c): whole
 * panels of the packed kernels on either instruction set. */
#define KC_IRB_NR 48

typedef struct kc_irb_geom {
    int64_t n, h, w, cin, cm, cout; /* images, input rows and columns, channels */
    int64_t ho, wo, s, pt, pl;      /* output rows and columns, stride, padding before */
    int act_e, act_d, act_p;        /* 0 linear, 1 relu, 2 relu6 */
    int identity;                   /* no expansion: the depthwise layer reads the input
                                       (cm == cin), its node carries the block */
    int stem;                       /* the expansion is a stem (stem.h's loop), not a 1x1:
                                       h, w its output's, cin the image's channels */
} kc_irb_geom;

/* The block's weights, copied into the kernel's state from the fused
 * layers (session copies with any BatchNormalization folded in): the 1x1
 * kernels packed (irb.c's kc_irb_pack), the biases padded to whole
 * 16-float vectors (zeros for a layer without one), the depthwise kernel
 * as it is. */
typedef struct kc_irb_w {
    const float *we, *be, *wd, *bd, *wp, *bp;
} kc_irb_w;

/* What one 1x1 product reads and writes. The weights are packed: for
 * each panel of kc_irb_ops.panel output channels, its k rows one after
 * another, each padded to whole 16-float vectors, so a panel's weights
 * are one contiguous stream. Read in Keras's (in, out) layout instead, a block
 * walked k rows a whole row apart and the 7x7 blocks' 1x1 products ran
 * at half speed, waiting on memory. */
typedef struct kc_irb_mm {
    int64_t k;             /* the reduction: input channels */
    const float *a;        /* pixels x k, row stride lda */
    int64_t lda;
    const float *b;        /* packed k_all x n: rows k0 .. k0 + k - 1 are read */
    const float *bias;     /* n, padded to whole vectors with zeros; or NULL */
    float *c;              /* pixels x n, row stride ldc */
    int64_t ldc;
    const float *r;        /* a residual added before act (may be c), or NULL */
    int act;
    int64_t k_all, k0;     /* 0, 0: k and 0 */
} kc_irb_mm;

/* One partial-sum pass of a block cut by channels (irb.c's
 * kc_irb_sum_job): pixels [p0, p1) of out (cout channels a pixel) get
 * act(bias (+ out) + partial[0] + ... + partial[parts - 1]), partial t
 * at partial + t * stride. */
typedef struct kc_irb_sum {
    const float *bias, *partial;
    float *out;
    int64_t stride, cout, p0, p1;
    int parts, residual, act;
} kc_irb_sum;

typedef struct kc_irb_ops {
    int64_t panel;         /* output channels per panel of the packed kernels: 48 or 16 */
    /* c = act(a . b + bias (+ r)) over `pixels` rows and n columns */
    void (*gemm)(const kc_irb_mm *m, int64_t pixels, int64_t n);
    /* one output row of the depthwise layer, channels [c0, c0 + nc),
     * from the three expanded rows it reads (NULL: padding; a pixel
     * every ld floats, from channel c0) into out (the same strides) */
    void (*dw_cols)(const kc_irb_geom *g, const kc_irb_w *w, const float *const rows[3],
                    int64_t ld, int64_t c0, int64_t nc, float *out);
    void (*sum)(const kc_irb_sum *s);
} kc_irb_ops;

extern const kc_irb_ops kc_irb_ops_avx512;
extern const kc_irb_ops kc_irb_ops_avx512y; /* 256-bit vectors (kc_isa_vec_bits) */
extern const kc_irb_ops kc_irb_ops_avx2;

#endif
