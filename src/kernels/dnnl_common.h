/* What every oneDNN kernel shares: the CPU engine and stream, and a
 * primitive bundled with its argument memories, created once per node and
 * shape so that a run only binds pointers (no allocation per run). */
#ifndef KC_DNNL_COMMON_H
#define KC_DNNL_COMMON_H

#include <oneapi/dnnl/dnnl.h>

#include "kernels/kernel.h"

#define KC_DNNL_MAX_ARGS 8
/* Batch lanes (runtime/lanes.c) a primitive can run in side by side. */
#define KC_DNNL_MAX_BATCH_LANES 8

typedef struct kc_dnnl_prim {
    dnnl_primitive_t prim;
    int n;                                /* arguments bound by the caller */
    int arg[KC_DNNL_MAX_ARGS];
    dnnl_memory_t mem[KC_DNNL_MAX_ARGS];
    dnnl_memory_t scratch;                /* NULL when none is needed */
    size_t scratch_bytes;
    int solo;                             /* runs on the calling thread alone */
    /* run by several threads at once, each passing its own lane (the row
     * parts of dnnl_conv.c's own_dw pairs): lanes 1.. bind lane memories
     * as batch lanes do */
    int shared;
    /* Batch lanes 1.. (or a shared primitive's lanes): the same memories
     * again (then the scratchpad's), made on a lane's first run: binding
     * a pointer changes a memory, and lanes bind theirs at the same time. */
    dnnl_memory_t lane_mem[KC_DNNL_MAX_BATCH_LANES - 1][KC_DNNL_MAX_ARGS + 1];
} kc_dnnl_prim;

/* Work below this many multiply-accumulates (or element visits) runs on
 * the calling thread alone: waking the OpenMP team and meeting at its
 * barrier costs tens of microseconds, more than a second thread saves on
 * a small layer (MobileNetV2's 7x7 blocks). */
#define KC_DNNL_SOLO_WORK ((int64_t)4 << 20)

/* ...unless it streams at least this many weight bytes, more than one
 * core's L2 holds: then it is bound by memory bandwidth, which one core
 * cannot fill. ResNet50's and InceptionV3's 2048 -> 1000 classifiers at
 * batch 1 (2M MACs, 8 MB of weights): 0.30-0.38 ms alone, 0.20-0.25 ms
 * on two threads. */
#define KC_DNNL_TEAM_WEIGHT_BYTES ((int64_t)2 << 20)

/* 1 when a primitive of `work` multiply-accumulates (or element visits)
 * reading `weight_bytes` of weights should run on the calling thread
 * alone (the two rules above). */
int kc_dnnl_small(int64_t work, int64_t weight_bytes);

/* Around a small primitive's creation and every execution: one OpenMP
 * thread (oneDNN sizes its partitioning when the primitive is created).
 * enter returns what leave restores; both do nothing unless solo. */
int kc_dnnl_solo_enter(int solo);
void kc_dnnl_solo_leave(int solo, int prev);

/* A layer cut into parts, one per thread of the pool, each its own
 * primitive run alone on that thread (kc_parallel). Cut the same way in
 * consecutive layers, the data a thread reads is mostly what it wrote
 * itself, still in its core's cache: oneDNN's own threading partitions
 * each layer its own way, and on 2 cores MobileNetV2's depthwise layers
 * ran slower on 2 threads than on 1 for reading the other core's output.
 * A part covers images [lo, hi), or, for one image, output rows [lo, hi)
 * of the first spatial axis. */
#define KC_DNNL_MAX_CUTS 64
/* Below this many bytes of activations a layer runs whole: waking a
 * sleeping OpenMP worker costs ~20 us here (passive waiting, as `serve`
 * uses), more than such a layer takes (a 6x6x4 convolution: 6 us whole,
 * 24 us cut). MobileNetV2's smallest layer has 220 KB. */
#define KC_DNNL_CUT_MIN_BYTES ((int64_t)64 << 10)
typedef struct kc_dnnl_cut {
    int by_rows;
    int64_t lo, hi;
} kc_dnnl_cut;

/* The parts for a layer of `batch` images and `out_rows` output rows on
 * its first spatial axis (1 when it has none), reading and writing
 * act_bytes of activations and reading weight_bytes of weights: fills
 * cuts and returns how many; 1 means run whole. Every part reads all the
 * weights, so a layer whose weights outweigh its activations (ResNet's
 * 7x7 blocks: 9.4 MB of 3x3 kernels, 0.1 MB of data) runs whole, its
 * weights shared out by oneDNN's own partition; so does a layer of under
 * KC_DNNL_CUT_MIN_BYTES. KC_CUT=0: never cut. */
int kc_dnnl_plan_cuts(int64_t batch, int64_t out_rows, int64_t act_bytes, int64_t weight_bytes,
                      kc_dnnl_cut *cuts);

/* The geometry of a windowed layer (convolution, pooling) as oneDNN
 * takes it: logical dims (N, C, spatial...), strides, dilations (0 =
 * none), the padding on each side, and the window's reach along the
 * first spatial axis ((kernel - 1) * dilation + 1). */
typedef struct kc_dnnl_window {
    int sp;
    dnnl_dims_t src, dst;
    dnnl_dims_t strides, dilates, pad_l, pad_r;
    int64_t extent0;
} kc_dnnl_window;

/* The part of `whole` that cut covers, and where it starts (floats) in
 * the whole NHWC input and output. A row cut takes output rows [lo, hi)
 * of the first spatial axis and the input rows they read, padding only
 * where the whole layer pads. */
void kc_dnnl_window_cut(const kc_dnnl_window *whole, const kc_dnnl_cut *cut,
                        kc_dnnl_window *part, size_t *src_off, size_t *dst_off);

/* Build the n parts of `cuts` (n == 1: the whole layer) by calling
 * build(arg, k, part window, its input and output offsets, solo) for
 * each, with OpenMP sized for the threads that will run them: a part of
 * a cut layer runs alone on one pool thread; a whole layer uses the pool
 * unless it is `small` (kc_dnnl_small), and then the part's primitives
 * must be marked solo (the last argument). Stops at the first failure;
 * gives the lanes a stream each. */
typedef kc_status (*kc_dnnl_part_build_fn)(void *arg, int k, const kc_dnnl_window *part,
                                           size_t src_off, size_t dst_off, int solo);
kc_status kc_dnnl_build_cut(const kc_dnnl_window *whole, const kc_dnnl_cut *cuts, int n,
                            int small, kc_dnnl_part_build_fn build, void *arg);

/* Make sure lanes 0..n-1 have a stream each (call before kc_parallel). */
kc_status kc_dnnl_lanes(int n);

/* Per-thread buffers every primitive on the thread shares, each grown to
 * the largest request and then kept: the scratchpad, and the blocked
 * copies of a Winograd convolution's source and destination. */
enum { KC_DNNL_SLOT_SCRATCHPAD, KC_DNNL_SLOT_SRC, KC_DNNL_SLOT_DST, KC_DNNL_SLOTS };
void *kc_dnnl_workspace(int slot, size_t bytes);

/* 1 when oneDNN may be used (KC_DNNL is not 0 and the engine exists). */
int kc_dnnl_ready(void);

/* Whether oneDNN runs its AVX-512 kernels on this CPU (brgconv, Winograd,
 * blocked matmul); below, its AVX2 ones, with other strengths. */
int kc_dnnl_avx512(void);
dnnl_engine_t kc_dnnl_engine(void);
/* A new attr with the scratchpad managed by kerasc (see dnnl_common.c). */
dnnl_primitive_attr_t kc_dnnl_attr_new(void);
/* Create p's primitive from pd and one memory per argument (args[i] with
 * descriptor mds[i]); kc_dnnl_run then binds the pointers. p->solo is set
 * by the caller after init (and the pd created inside solo_enter/leave). */
kc_status kc_dnnl_prim_init(kc_dnnl_prim *p, const_dnnl_primitive_desc_t pd, int n,
                            const int *args, const dnnl_memory_desc_t *const *mds);
/* Reorder weights w (layout w_md) into a new buffer of layout to_md, once
 * (at build): *packed, freed by the caller. The reorder's scratchpad goes
 * in the free range of spare_bytes at spare (the activation arena's, or
 * NULL) when it fits: a Winograd kernel's reorder books the whole
 * transformed kernel twice over (16.8 MB for 512 x 512 x 3 x 3), which
 * set ResNet50's peak RSS at batch 8. */
kc_status kc_dnnl_pack(const dnnl_memory_desc_t *w_md, const dnnl_memory_desc_t *to_md,
                       const float *w, void *spare, size_t spare_bytes, float **packed);
/* Execute with ptrs[i] as argument i and wait. */
kc_status kc_dnnl_run(kc_dnnl_prim *p, void *const *ptrs);
/* The same on lane `lane`'s stream: parts run concurrently on their own. */
kc_status kc_dnnl_run_lane(kc_dnnl_prim *p, void *const *ptrs, int lane);
/* The same with the caller's scratchpad of p->scratch_bytes (64-byte
 * aligned), or NULL: the lane's workspace. */
kc_status kc_dnnl_run_in(kc_dnnl_prim *p, void *const *ptrs, int lane, void *scratch);

static inline size_t kc_dnnl_align64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }
/* Lane `lane`'s `need` bytes (64-byte aligned) in a free range of `bytes`
 * at `spare`, lanes side by side from its first aligned byte; NULL when
 * they do not fit. */
char *kc_dnnl_lane_spare(void *spare, size_t bytes, int lane, size_t need);
/* The size of a primitive descriptor's memory `what` (a dnnl_query_*_md),
 * 0 when it has none. */
size_t kc_dnnl_pd_bytes(const_dnnl_primitive_desc_t pd, dnnl_query_t what);
void kc_dnnl_prim_destroy(kc_dnnl_prim *p);

#endif
