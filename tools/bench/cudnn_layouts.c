/* cudnn_layouts: ResNet50's convolution shapes on one GPU, FP32 with FMA
 * math (no TF32, as kerasc runs them), timed in the layouts and ways a
 * runtime can choose between:
 *   nhwc   cuDNN on NHWC tensors (kerasc's layout), best deterministic
 *          algorithm by timing (cudnnFindConvolutionForwardAlgorithmEx)
 *   nchw   the same on NCHW tensors (PyTorch's default)
 *   tx     cudnnTransformTensor NHWC -> NCHW of the input plus NCHW -> NHWC
 *          of the output: what running an NHWC model's layer in NCHW adds
 *   gemm   cuBLAS sgemm for 1x1 stride-1 layers (kerasc's path for them)
 * Times are medians of 25 launches after 5 warm-ups (cudaEvent).
 *
 *   cudnn_layouts [BATCH ...]        (default 32)
 *   LAYOUTS_ALL=1: also every algorithm's time, layer by layer
 *
 * Built with the CUDA plugin (cmake/cuda.cmake: build/cudnn_layouts), or:
 *   cc -O2 tools/bench/cudnn_layouts.c -I/usr/local/cuda/include \
 *      -L/usr/local/cuda/lib -L/usr/local/cuda/lib64 -lcudnn -lcublas -lcudart \
 *      -o cudnn_layouts
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                     \
    do {                                                                                          \
        int rc_ = (int)(x);                                                                       \
        if (rc_) {                                                                                \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, rc_);             \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

typedef struct {
    const char *name;
    int c, h, w, f, k, s, pad;
} shape;

/* Keras ResNet50 at 224x224 (the stem's input is ZeroPadding2D(3)'s 230). */
static const shape SHAPES[] = {
    {"conv1 7x7/2 3->64", 3, 230, 230, 64, 7, 2, 0},
    {"c2 1x1 64->64 @56", 64, 56, 56, 64, 1, 1, 0},
    {"c2 3x3 64->64 @56", 64, 56, 56, 64, 3, 1, 1},
    {"c2 1x1 64->256 @56", 64, 56, 56, 256, 1, 1, 0},
    {"c2 1x1 256->64 @56", 256, 56, 56, 64, 1, 1, 0},
    {"c3 1x1/2 256->128", 256, 56, 56, 128, 1, 2, 0},
    {"c3 1x1/2 256->512", 256, 56, 56, 512, 1, 2, 0},
    {"c3 3x3 128->128 @28", 128, 28, 28, 128, 3, 1, 1},
    {"c3 1x1 128->512 @28", 128, 28, 28, 512, 1, 1, 0},
    {"c3 1x1 512->128 @28", 512, 28, 28, 128, 1, 1, 0},
    {"c4 1x1/2 512->256", 512, 28, 28, 256, 1, 2, 0},
    {"c4 1x1/2 512->1024", 512, 28, 28, 1024, 1, 2, 0},
    {"c4 3x3 256->256 @14", 256, 14, 14, 256, 3, 1, 1},
    {"c4 1x1 256->1024 @14", 256, 14, 14, 1024, 1, 1, 0},
    {"c4 1x1 1024->256 @14", 1024, 14, 14, 256, 1, 1, 0},
    {"c5 1x1/2 1024->512", 1024, 14, 14, 512, 1, 2, 0},
    {"c5 1x1/2 1024->2048", 1024, 14, 14, 2048, 1, 2, 0},
    {"c5 3x3 512->512 @7", 512, 7, 7, 512, 3, 1, 1},
    {"c5 1x1 512->2048 @7", 512, 7, 7, 2048, 1, 1, 0},
    {"c5 1x1 2048->512 @7", 2048, 7, 7, 512, 1, 1, 0},
};

static cudaEvent_t ev0, ev1;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median ms of `reps` runs of fn(arg). */
static float time_ms(void (*fn)(void *), void *arg)
{
    float t[25];
    for (int i = 0; i < 5; i++)
        fn(arg);
    for (int i = 0; i < 25; i++) {
        CK(cudaEventRecord(ev0, 0));
        fn(arg);
        CK(cudaEventRecord(ev1, 0));
        CK(cudaEventSynchronize(ev1));
        CK(cudaEventElapsedTime(&t[i], ev0, ev1));
    }
    qsort(t, 25, sizeof t[0], cmp_float);
    return t[12];
}

typedef struct {
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    cudnnTensorDescriptor_t xd, yd, xd2, yd2;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    void *x, *y, *w, *ws, *x2, *y2;
    size_t ws_bytes;
    int m, n, k;
} ctx;

static void run_conv(void *p)
{
    ctx *c = p;
    float one = 1, zero = 0;
    CK(cudnnConvolutionForward(c->dnn, &one, c->xd, c->x, c->wd, c->w, c->cd, c->algo, c->ws,
                               c->ws_bytes, &zero, c->yd, c->y));
}

static void run_tx(void *p)
{
    ctx *c = p;
    float one = 1, zero = 0;
    CK(cudnnTransformTensor(c->dnn, &one, c->xd, c->x, &zero, c->xd2, c->x2));
    CK(cudnnTransformTensor(c->dnn, &one, c->yd2, c->y2, &zero, c->yd, c->y));
}

static void run_gemm(void *p)
{
    ctx *c = p;
    float one = 1, zero = 0;
    /* Row-major Y(m x n) = X(m x k) W(k x n), as column-major Y^T = W^T X^T. */
    CK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, c->n, c->m, c->k, &one, c->w, c->n, c->x,
                   c->k, &zero, c->y, c->n));
}

/* Best deterministic FMA algorithm's median time in this layout; -1 if none. */
static float best_conv(ctx *c, cudnnTensorFormat_t fmt, const shape *s, int batch, int *algo_out)
{
    int oh = (s->h + 2 * s->pad - s->k) / s->s + 1, ow = (s->w + 2 * s->pad - s->k) / s->s + 1;
    CK(cudnnSetTensor4dDescriptor(c->xd, fmt, CUDNN_DATA_FLOAT, batch, s->c, s->h, s->w));
    CK(cudnnSetFilter4dDescriptor(c->wd, CUDNN_DATA_FLOAT, fmt, s->f, s->c, s->k, s->k));
    CK(cudnnSetConvolution2dDescriptor(c->cd, s->pad, s->pad, s->s, s->s, 1, 1,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionMathType(c->cd, CUDNN_FMA_MATH));
    CK(cudnnSetTensor4dDescriptor(c->yd, fmt, CUDNN_DATA_FLOAT, batch, s->f, oh, ow));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    size_t ws_cap = (size_t)1 << 30;
    CK(cudnnFindConvolutionForwardAlgorithmEx(c->dnn, c->xd, c->x, c->wd, c->w, c->cd, c->yd,
                                              c->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned,
                                              perf, c->ws, ws_cap));
    float best = -1;
    for (int i = 0; i < returned; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
            perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || perf[i].memory > ws_cap)
            continue;
        c->algo = perf[i].algo;
        c->ws_bytes = perf[i].memory;
        float t = time_ms(run_conv, c);
        if (getenv("LAYOUTS_ALL"))
            printf("    %s %s: algorithm %d %.4f ms, workspace %zu bytes\n", s->name,
                   fmt == CUDNN_TENSOR_NCHW ? "nchw" : "nhwc", (int)perf[i].algo, t,
                   perf[i].memory);
        if (best < 0 || t < best) {
            best = t;
            *algo_out = (int)perf[i].algo;
        }
    }
    return best;
}

int main(int argc, char **argv)
{
    int batches[8] = {32}, nb = 1;
    if (argc > 1) {
        nb = 0;
        for (int i = 1; i < argc && nb < 8; i++)
            batches[nb++] = atoi(argv[i]);
    }
    ctx c;
    memset(&c, 0, sizeof c);
    CK(cudnnCreate(&c.dnn));
    CK(cublasCreate(&c.blas));
    CK(cublasSetMathMode(c.blas, CUBLAS_DEFAULT_MATH));
    CK(cudnnCreateTensorDescriptor(&c.xd));
    CK(cudnnCreateTensorDescriptor(&c.yd));
    CK(cudnnCreateTensorDescriptor(&c.xd2));
    CK(cudnnCreateTensorDescriptor(&c.yd2));
    CK(cudnnCreateFilterDescriptor(&c.wd));
    CK(cudnnCreateConvolutionDescriptor(&c.cd));
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    size_t big = (size_t)256 << 20;
    CK(cudaMalloc(&c.x, big));
    CK(cudaMalloc(&c.y, big));
    CK(cudaMalloc(&c.x2, big));
    CK(cudaMalloc(&c.y2, big));
    CK(cudaMalloc(&c.w, 64 << 20));
    CK(cudaMalloc(&c.ws, (size_t)1 << 30));
    CK(cudaMemset(c.x, 0, big));
    CK(cudaMemset(c.w, 0, 64 << 20));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s; cuDNN %zu; FP32, FMA math, deterministic algorithms\n", prop.name,
           cudnnGetVersion());
    for (int bi = 0; bi < nb; bi++) {
        int batch = batches[bi];
        double sum_nhwc = 0, sum_best = 0, sum_kerasc = 0;
        printf("\nbatch %d (ms per layer call)\n", batch);
        printf("%-24s %8s %4s %8s %4s %8s %8s %8s\n", "layer", "nhwc", "alg", "nchw", "alg",
               "tx", "gemm", "best");
        for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
            const shape *s = &SHAPES[i];
            int a1 = -1, a2 = -1;
            float t_nhwc = best_conv(&c, CUDNN_TENSOR_NHWC, s, batch, &a1);
            float t_nchw = best_conv(&c, CUDNN_TENSOR_NCHW, s, batch, &a2);
            int oh = (s->h + 2 * s->pad - s->k) / s->s + 1;
            int ow = (s->w + 2 * s->pad - s->k) / s->s + 1;
            CK(cudnnSetTensor4dDescriptor(c.xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, batch, s->c,
                                          s->h, s->w));
            CK(cudnnSetTensor4dDescriptor(c.xd2, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, s->c,
                                          s->h, s->w));
            CK(cudnnSetTensor4dDescriptor(c.yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, batch, s->f,
                                          oh, ow));
            CK(cudnnSetTensor4dDescriptor(c.yd2, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, s->f,
                                          oh, ow));
            float t_tx = time_ms(run_tx, &c);
            float t_gemm = -1;
            if (s->k == 1 && s->s == 1) {
                c.m = batch * s->h * s->w;
                c.n = s->f;
                c.k = s->c;
                t_gemm = time_ms(run_gemm, &c);
            }
            float kerasc = t_gemm > 0 ? t_gemm : t_nhwc;
            float best = kerasc;
            if (t_nchw > 0 && t_nchw + t_tx < best)
                best = t_nchw + t_tx;
            sum_nhwc += t_nhwc;
            sum_kerasc += kerasc;
            sum_best += best;
            printf("%-24s %8.4f %4d %8.4f %4d %8.4f %8.4f %8.4f%s\n", s->name, t_nhwc, a1,
                   t_nchw, a2, t_tx, t_gemm, best, best < kerasc ? "  <- nchw+tx" : "");
        }
        printf("one of each: nhwc %.3f ms, kerasc's choice (gemm for 1x1) %.3f, best %.3f\n",
               sum_nhwc, sum_kerasc, sum_best);
    }
    return 0;
}
