// The CUDA plugin's own kernels: element-wise activations, softmax,
// padding, depthwise and transposed convolution, pooling, merges,
// BatchNormalization, Rescaling and the weight layout change for cuDNN.
// Semantics follow the CPU kernels in src/kernels/*.c exactly (same
// padding rules, same formulas); all tensors are dense float32 NHWC.
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "cuda_kernels.h"

namespace {

constexpr int kThreads = 256;

unsigned kcu_blocks(int64_t n)
{
    int64_t b = (n + kThreads - 1) / kThreads;
    if (b > (int64_t)1 << 20)
        b = (int64_t)1 << 20;  // grid-stride loops cover the rest
    return (unsigned)(b < 1 ? 1 : b);
}

#define KCU_LOOP(i, n)                                                                     \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

__device__ float kcu_clamp(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }
__device__ float kcu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ float kcu_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ float kcu_act_apply(int act, float v, float p0, float p1, float p2)
{
    switch (act) {
    case KCU_ACT_RELU: return v > 0 ? v : 0.0f;
    case KCU_ACT_RELU6: return kcu_clamp(v, 0, 6);
    case KCU_ACT_LEAKY_RELU: return v >= 0 ? v : 0.2f * v;
    case KCU_ACT_ELU: return v > 0 ? v : expm1f(v);
    case KCU_ACT_SELU: return 1.0507009873554805f * (v > 0 ? v : 1.6732632423543772f * expm1f(v));
    case KCU_ACT_SIGMOID: return kcu_sigmoid(v);
    case KCU_ACT_HARD_SIGMOID2: return kcu_clamp(0.2f * v + 0.5f, 0, 1);
    case KCU_ACT_HARD_SIGMOID3: return kcu_clamp(v / 6.0f + 0.5f, 0, 1);
    case KCU_ACT_SILU: return v * kcu_sigmoid(v);
    case KCU_ACT_HARD_SILU: return v * kcu_clamp(v + 3.0f, 0, 6) / 6.0f;
    case KCU_ACT_GELU: return 0.5f * v * (1.0f + erff(v / sqrtf(2.0f)));
    case KCU_ACT_TANH: return tanhf(v);
    case KCU_ACT_SOFTPLUS: return kcu_softplus(v);
    case KCU_ACT_SOFTSIGN: return v / (1.0f + fabsf(v));
    case KCU_ACT_EXPONENTIAL: return expf(v);
    case KCU_ACT_MISH: return v * tanhf(kcu_softplus(v));
    case KCU_ACT_CELU: return v > 0 ? v : expm1f(v);
    case KCU_ACT_HARD_TANH: return kcu_clamp(v, -1, 1);
    case KCU_ACT_HARD_SHRINK: return fabsf(v) > 0.5f ? v : 0.0f;
    case KCU_ACT_SOFT_SHRINK: return v > 0.5f ? v - 0.5f : v < -0.5f ? v + 0.5f : 0.0f;
    case KCU_ACT_TANH_SHRINK: return v - tanhf(v);
    case KCU_ACT_SPARSE_PLUS: return v <= -1 ? 0.0f : v >= 1 ? v : (v + 1) * (v + 1) / 4;
    case KCU_ACT_SQUAREPLUS: return (v + sqrtf(v * v + 4.0f)) / 2.0f;
    case KCU_ACT_LOG_SIGMOID: return -kcu_softplus(-v);
    case KCU_ACT_RELU_EX:
        if (p0 >= 0 && v >= p0)
            return p0;
        if (v >= p2)
            return v;
        return p1 * (v - p2);
    case KCU_ACT_LEAKY: return v >= 0 ? v : p0 * v;
    case KCU_ACT_ELU_ALPHA: return v > 0 ? v : p0 * expm1f(v);
    case KCU_ACT_THRESHOLDED: return v > p0 ? v : 0.0f;
    case KCU_ACT_DIV: return v / p0;
    default: return v;
    }
}

// One block per row of a contiguous softmax (inner == 1).
__global__ void kcu_softmax_rows_k(float *y, int64_t rows, int64_t len, int log_softmax)
{
    __shared__ float s_max[kThreads];
    __shared__ double s_sum[kThreads];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float *p = y + r * len;
        float mx = -INFINITY;
        for (int64_t a = threadIdx.x; a < len; a += blockDim.x)
            mx = fmaxf(mx, p[a]);
        s_max[threadIdx.x] = mx;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w)
                s_max[threadIdx.x] = fmaxf(s_max[threadIdx.x], s_max[threadIdx.x + w]);
            __syncthreads();
        }
        mx = s_max[0];
        double sum = 0;
        for (int64_t a = threadIdx.x; a < len; a += blockDim.x) {
            float e = expf(p[a] - mx);
            p[a] = e;
            sum += e;
        }
        s_sum[threadIdx.x] = sum;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w)
                s_sum[threadIdx.x] += s_sum[threadIdx.x + w];
            __syncthreads();
        }
        sum = s_sum[0];
        for (int64_t a = threadIdx.x; a < len; a += blockDim.x) {
            float v = (float)(p[a] / sum);
            p[a] = log_softmax ? logf(v) : v;
        }
        __syncthreads();  // s_max / s_sum reused by the next row
    }
}

// One thread per (outer, inner) pair (softmax over a non-last axis).
__global__ void kcu_softmax_strided_k(float *y, int64_t outer, int64_t len, int64_t inner,
                                      int log_softmax)
{
    KCU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t % inner;
        float *p = y + o * len * inner + i;
        float mx = -INFINITY;
        for (int64_t a = 0; a < len; a++)
            mx = fmaxf(mx, p[a * inner]);
        double sum = 0;
        for (int64_t a = 0; a < len; a++) {
            p[a * inner] = expf(p[a * inner] - mx);
            sum += p[a * inner];
        }
        for (int64_t a = 0; a < len; a++) {
            float v = (float)(p[a * inner] / sum);
            p[a * inner] = log_softmax ? logf(v) : v;
        }
    }
}

// Output element i -> (b, oz, oy, ox, ch) for channel count ch_n.
struct kcu_pos {
    int64_t b, z, y, x, ch;
};

__device__ kcu_pos kcu_unravel(int64_t i, const int64_t *out, int64_t ch_n)
{
    kcu_pos p;
    p.ch = i % ch_n;
    int64_t t = i / ch_n;
    p.x = t % out[2];
    t /= out[2];
    p.y = t % out[1];
    t /= out[1];
    p.z = t % out[0];
    p.b = t / out[0];
    return p;
}

__global__ void kcu_pad_k(const float *x, float *y, kcu_geom g, int64_t n)
{
    KCU_LOOP(i, n) {
        kcu_pos p = kcu_unravel(i, g.out, g.c);
        int64_t iz = p.z - g.pad[0], iy = p.y - g.pad[1], ix = p.x - g.pad[2];
        float v = 0.0f;
        if (iz >= 0 && iz < g.in[0] && iy >= 0 && iy < g.in[1] && ix >= 0 && ix < g.in[2])
            v = x[(((p.b * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix) * g.c + p.ch];
        y[i] = v;
    }
}

__global__ void kcu_depthwise_k(const float *x, const float *w, const float *bias, float *y,
                                kcu_geom g, int64_t n)
{
    int64_t cout = g.c * g.dm;
    KCU_LOOP(i, n) {
        kcu_pos p = kcu_unravel(i, g.out, cout);
        int64_t ch = p.ch / g.dm;
        float acc = bias ? bias[p.ch] : 0.0f;
        for (int64_t kz = 0; kz < g.k[0]; kz++) {
            int64_t iz = p.z * g.s[0] + kz * g.d[0] - g.pad[0];
            if (iz < 0 || iz >= g.in[0])
                continue;
            for (int64_t ky = 0; ky < g.k[1]; ky++) {
                int64_t iy = p.y * g.s[1] + ky * g.d[1] - g.pad[1];
                if (iy < 0 || iy >= g.in[1])
                    continue;
                for (int64_t kx = 0; kx < g.k[2]; kx++) {
                    int64_t ix = p.x * g.s[2] + kx * g.d[2] - g.pad[2];
                    if (ix < 0 || ix >= g.in[2])
                        continue;
                    int64_t kidx = (kz * g.k[1] + ky) * g.k[2] + kx;
                    acc += x[(((p.b * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix) * g.c + ch] *
                           w[kidx * cout + p.ch];
                }
            }
        }
        y[i] = acc;
    }
}

__global__ void kcu_conv_direct_k(const float *x, const float *w, const float *bias, float *y,
                                  kcu_geom g, int64_t groups, int64_t n)
{
    int64_t cg = g.c / groups, fg = g.f / groups;
    KCU_LOOP(i, n) {
        kcu_pos p = kcu_unravel(i, g.out, g.f);
        int64_t c0 = (p.ch / fg) * cg;
        float acc = 0.0f;
        for (int64_t kz = 0; kz < g.k[0]; kz++) {
            int64_t iz = p.z * g.s[0] + kz * g.d[0] - g.pad[0];
            if (iz < 0 || iz >= g.in[0])
                continue;
            for (int64_t ky = 0; ky < g.k[1]; ky++) {
                int64_t iy = p.y * g.s[1] + ky * g.d[1] - g.pad[1];
                if (iy < 0 || iy >= g.in[1])
                    continue;
                for (int64_t kx = 0; kx < g.k[2]; kx++) {
                    int64_t ix = p.x * g.s[2] + kx * g.d[2] - g.pad[2];
                    if (ix < 0 || ix >= g.in[2])
                        continue;
                    int64_t kidx = (kz * g.k[1] + ky) * g.k[2] + kx;
                    const float *px =
                        x + (((p.b * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix) * g.c + c0;
                    const float *pw = w + kidx * cg * g.f + p.ch;
                    for (int64_t c = 0; c < cg; c++)
                        acc += px[c] * pw[c * g.f];
                }
            }
        }
        y[i] = bias ? acc + bias[p.ch] : acc;
    }
}

// out[o] gathers in[i] where o = i*s + k*d - pad, i.e. i = (o + pad - k*d) / s.
__global__ void kcu_conv_transpose_k(const float *x, const float *w, const float *bias, float *y,
                                     kcu_geom g, int64_t n)
{
    KCU_LOOP(i, n) {
        kcu_pos p = kcu_unravel(i, g.out, g.f);
        float acc = 0.0f;
        for (int64_t kz = 0; kz < g.k[0]; kz++) {
            int64_t tz = p.z + g.pad[0] - kz * g.d[0];
            if (tz < 0 || tz % g.s[0] || tz / g.s[0] >= g.in[0])
                continue;
            for (int64_t ky = 0; ky < g.k[1]; ky++) {
                int64_t ty = p.y + g.pad[1] - ky * g.d[1];
                if (ty < 0 || ty % g.s[1] || ty / g.s[1] >= g.in[1])
                    continue;
                for (int64_t kx = 0; kx < g.k[2]; kx++) {
                    int64_t tx = p.x + g.pad[2] - kx * g.d[2];
                    if (tx < 0 || tx % g.s[2] || tx / g.s[2] >= g.in[2])
                        continue;
                    int64_t kidx = (kz * g.k[1] + ky) * g.k[2] + kx;
                    const float *px =
                        x + (((p.b * g.in[0] + tz / g.s[0]) * g.in[1] + ty / g.s[1]) * g.in[2] +
                             tx / g.s[2]) * g.c;
                    const float *pw = w + (kidx * g.f + p.ch) * g.c;
                    for (int64_t c = 0; c < g.c; c++)
                        acc += px[c] * pw[c];
                }
            }
        }
        y[i] = bias ? acc + bias[p.ch] : acc;
    }
}

__global__ void kcu_pool_k(const float *x, float *y, kcu_geom g, int is_max, int64_t n)
{
    KCU_LOOP(i, n) {
        kcu_pos p = kcu_unravel(i, g.out, g.c);
        float acc = is_max ? -FLT_MAX : 0.0f;
        int64_t cells = 0;
        for (int64_t kz = 0; kz < g.k[0]; kz++) {
            int64_t iz = p.z * g.s[0] + kz - g.pad[0];
            if (iz < 0 || iz >= g.in[0])
                continue;
            for (int64_t ky = 0; ky < g.k[1]; ky++) {
                int64_t iy = p.y * g.s[1] + ky - g.pad[1];
                if (iy < 0 || iy >= g.in[1])
                    continue;
                for (int64_t kx = 0; kx < g.k[2]; kx++) {
                    int64_t ix = p.x * g.s[2] + kx - g.pad[2];
                    if (ix < 0 || ix >= g.in[2])
                        continue;
                    float v = x[(((p.b * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix) * g.c + p.ch];
                    cells++;
                    acc = is_max ? (v > acc ? v : acc) : acc + v;
                }
            }
        }
        if (!is_max && cells)
            acc /= (float)cells;
        y[i] = acc;
    }
}

__global__ void kcu_global_pool_k(const float *x, float *y, int64_t n, int64_t cells, int64_t c,
                                  int is_max)
{
    KCU_LOOP(t, n * c) {
        int64_t b = t / c, ch = t % c;
        const float *p = x + b * cells * c + ch;
        float acc = is_max ? -FLT_MAX : 0.0f;
        for (int64_t i = 0; i < cells; i++) {
            float v = p[i * c];
            acc = is_max ? (v > acc ? v : acc) : acc + v;
        }
        if (!is_max && cells)
            acc /= (float)cells;
        y[t] = acc;
    }
}

__device__ __forceinline__ float kcu_merge_op(int op, float a, float xv)
{
    switch (op) {
    case KCU_MERGE_COPY: return xv;
    case KCU_MERGE_ADD: return a + xv;
    case KCU_MERGE_SUB: return a - xv;
    case KCU_MERGE_MUL: return a * xv;
    case KCU_MERGE_MAX: return xv > a ? xv : a;
    case KCU_MERGE_MIN: return xv < a ? xv : a;
    default: return a;
    }
}

__global__ void kcu_merge_k(float *acc, const float *x, int64_t n, kcu_bcast v, int op)
{
    KCU_LOOP(o, n) {
        int64_t src = 0, t = o;
        for (int d = v.rank - 1; d >= 0; d--) {
            src += (t % v.dims[d]) * v.strides[d];
            t /= v.dims[d];
        }
        acc[o] = kcu_merge_op(op, acc[o], x[src]);
    }
}

__global__ void kcu_batchnorm_k(const float *x, float *y, const float *gamma, const float *beta,
                                const float *mean, const float *var, int64_t n, int64_t len,
                                int64_t inner, double eps)
{
    KCU_LOOP(i, n) {
        int64_t c = (i / inner) % len;
        double scale = (gamma ? (double)gamma[c] : 1.0) / sqrt((double)var[c] + eps);
        double shift = (beta ? (double)beta[c] : 0.0) - (double)mean[c] * scale;
        y[i] = (float)(x[i] * scale + shift);
    }
}

__global__ void kcu_rescaling_k(const float *x, float *y, int64_t n, int64_t c, kcu_rescale r)
{
    KCU_LOOP(i, n) {
        float sc = r.n_scale == 1 ? r.scale[0] : r.scale[i % c];
        float of = r.n_offset == 1 ? r.offset[0] : r.offset[i % c];
        y[i] = x[i] * sc + of;
    }
}

__global__ void kcu_hwio_to_krsc_k(const float *src, float *dst, int64_t rs, int64_t c, int64_t k,
                                   int64_t n)
{
    KCU_LOOP(i, n) {
        int64_t cc = i % c, t = i / c;
        int64_t r = t % rs, kk = t / rs;
        dst[i] = src[(r * c + cc) * k + kk];
    }
}

// ------------------------------------------------------------ fast paths
// The kernels above index with 64-bit divisions for every element, which
// costs the GPU more than the memory traffic: at batch 32 ResNet50's
// residual Add (a copy, then an add through the broadcast view) took
// 0.41 ms for 103 MB, its max pooling's padding 0.24 ms, where HBM moves
// those bytes in 0.03-0.08 ms (H200, 12-04). These variants take float4
// vectors along the channels where the sizes and addresses allow, index
// in 32 bits where every offset fits (I = int), and fix the common
// activations at compile time. Same formulas, same results.

// 32-bit indices when every offset of the grid-stride loop stays below
// 2^31: n + the largest grid's stride (2^20 blocks x 256 threads).
bool kcu_small(int64_t n) { return n < ((int64_t)1 << 30); }
bool kcu_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

#define KCU_LOOP_T(I, i, n)                                                                \
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < (n);                    \
         i += (I)gridDim.x * (I)blockDim.x)

// V floats as one value: float (V = 1) or float4 (V = 4), with the
// component-wise operations the kernels below need.
template <int V> struct kcu_vec;
template <> struct kcu_vec<1> {
    typedef float T;
    static __device__ T load(const float *p) { return *p; }
    static __device__ void store(float *p, T v) { *p = v; }
    static __device__ T fill(float f) { return f; }
    template <typename F> static __device__ T map(T a, F f) { return f(a); }
    template <typename F> static __device__ T zip(T a, T b, F f) { return f(a, b); }
};
template <> struct kcu_vec<4> {
    typedef float4 T;
    static __device__ T load(const float *p) { return *reinterpret_cast<const float4 *>(p); }
    static __device__ void store(float *p, T v) { *reinterpret_cast<float4 *>(p) = v; }
    static __device__ T fill(float f) { return make_float4(f, f, f, f); }
    template <typename F> static __device__ T map(T a, F f)
    {
        return make_float4(f(a.x), f(a.y), f(a.z), f(a.w));
    }
    template <typename F> static __device__ T zip(T a, T b, F f)
    {
        return make_float4(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z), f(a.w, b.w));
    }
};

// ACT < 0: the activation code `act` read at run time.
template <int ACT>
__device__ __forceinline__ float kcu_act_t(int act, float v, float p0, float p1, float p2)
{
    if (ACT == KCU_ACT_LINEAR)
        return v;
    if (ACT == KCU_ACT_RELU)
        return v > 0 ? v : 0.0f;
    return kcu_act_apply(act, v, p0, p1, p2);
}

// y = act(x + bias[channel]) over n / V vectors; cv = channels / V (bias
// NULL: cv unused).
template <int ACT, int V, typename I>
__global__ void kcu_bias_act_v_k(const float *x, float *y, const float *bias, I nv, I cv, int act,
                                 float p0, float p1, float p2)
{
    typedef kcu_vec<V> vec;
    KCU_LOOP_T(I, i, nv) {
        typename vec::T v = vec::load(x + i * V);
        if (bias)
            v = vec::zip(v, vec::load(bias + (i % cv) * V), [](float a, float b) { return a + b; });
        v = vec::map(v, [=](float a) { return kcu_act_t<ACT>(act, a, p0, p1, p2); });
        vec::store(y + i * V, v);
    }
}

template <int ACT, int V>
void kcu_bias_act_launch(const float *x, float *y, const float *bias, int64_t n, int64_t c,
                         int act, float p0, float p1, float p2, cudaStream_t stream)
{
    int64_t nv = n / V, cv = bias ? c / V : 1;
    if (kcu_small(n))
        kcu_bias_act_v_k<ACT, V, int><<<kcu_blocks(nv), kThreads, 0, stream>>>(
            x, y, bias, (int)nv, (int)cv, act, p0, p1, p2);
    else
        kcu_bias_act_v_k<ACT, V, int64_t><<<kcu_blocks(nv), kThreads, 0, stream>>>(
            x, y, bias, nv, cv, act, p0, p1, p2);
}

template <int V>
void kcu_bias_act_act(const float *x, float *y, const float *bias, int64_t n, int64_t c, int act,
                      float p0, float p1, float p2, cudaStream_t stream)
{
    if (act == KCU_ACT_LINEAR)
        kcu_bias_act_launch<KCU_ACT_LINEAR, V>(x, y, bias, n, c, act, p0, p1, p2, stream);
    else if (act == KCU_ACT_RELU)
        kcu_bias_act_launch<KCU_ACT_RELU, V>(x, y, bias, n, c, act, p0, p1, p2, stream);
    else
        kcu_bias_act_launch<-1, V>(x, y, bias, n, c, act, p0, p1, p2, stream);
}

// y = a op b, element by element, same shapes (y may be a or b).
template <int V, typename I>
__global__ void kcu_merge2_v_k(float *y, const float *a, const float *b, I nv, int op)
{
    typedef kcu_vec<V> vec;
    KCU_LOOP_T(I, i, nv) {
        vec::store(y + i * V, vec::zip(vec::load(a + i * V), vec::load(b + i * V),
                                       [=](float p, float q) { return kcu_merge_op(op, p, q); }));
    }
}

template <int V>
void kcu_merge2_launch(float *y, const float *a, const float *b, int64_t n, int op,
                       cudaStream_t stream)
{
    int64_t nv = n / V;
    if (kcu_small(n))
        kcu_merge2_v_k<V, int><<<kcu_blocks(nv), kThreads, 0, stream>>>(y, a, b, (int)nv, op);
    else
        kcu_merge2_v_k<V, int64_t><<<kcu_blocks(nv), kThreads, 0, stream>>>(y, a, b, nv, op);
}

// Output vector i of a (n, out0, out1, out2, c) tensor -> its coordinates.
template <typename I> struct kcu_vpos {
    I b, z, y, x, ch;
};
template <typename I>
__device__ __forceinline__ kcu_vpos<I> kcu_vunravel(I i, I cv, I o0, I o1, I o2)
{
    kcu_vpos<I> p;
    p.ch = i % cv;
    I t = i / cv;
    p.x = t % o2;
    t /= o2;
    p.y = t % o1;
    t /= o1;
    p.z = t % o0;
    p.b = t / o0;
    return p;
}

template <int V, typename I>
__global__ void kcu_pad_v_k(const float *x, float *y, kcu_geom g, I nv)
{
    typedef kcu_vec<V> vec;
    const I cv = (I)(g.c / V), o0 = (I)g.out[0], o1 = (I)g.out[1], o2 = (I)g.out[2];
    const I i0 = (I)g.in[0], i1 = (I)g.in[1], i2 = (I)g.in[2];
    KCU_LOOP_T(I, i, nv) {
        kcu_vpos<I> p = kcu_vunravel<I>(i, cv, o0, o1, o2);
        I iz = p.z - (I)g.pad[0], iy = p.y - (I)g.pad[1], ix = p.x - (I)g.pad[2];
        typename vec::T v = vec::fill(0.0f);
        if (iz >= 0 && iz < i0 && iy >= 0 && iy < i1 && ix >= 0 && ix < i2)
            v = vec::load(x + ((((p.b * i0 + iz) * i1 + iy) * i2 + ix) * cv + p.ch) * V);
        vec::store(y + i * V, v);
    }
}

template <int V, typename I>
__global__ void kcu_pool_v_k(const float *x, float *y, kcu_geom g, int is_max, I nv)
{
    typedef kcu_vec<V> vec;
    const I cv = (I)(g.c / V), o0 = (I)g.out[0], o1 = (I)g.out[1], o2 = (I)g.out[2];
    const I i0 = (I)g.in[0], i1 = (I)g.in[1], i2 = (I)g.in[2];
    KCU_LOOP_T(I, i, nv) {
        kcu_vpos<I> p = kcu_vunravel<I>(i, cv, o0, o1, o2);
        typename vec::T acc = vec::fill(is_max ? -FLT_MAX : 0.0f);
        int cells = 0;
        for (I kz = 0; kz < (I)g.k[0]; kz++) {
            I iz = p.z * (I)g.s[0] + kz - (I)g.pad[0];
            if (iz < 0 || iz >= i0)
                continue;
            for (I ky = 0; ky < (I)g.k[1]; ky++) {
                I iy = p.y * (I)g.s[1] + ky - (I)g.pad[1];
                if (iy < 0 || iy >= i1)
                    continue;
                for (I kx = 0; kx < (I)g.k[2]; kx++) {
                    I ix = p.x * (I)g.s[2] + kx - (I)g.pad[2];
                    if (ix < 0 || ix >= i2)
                        continue;
                    typename vec::T v =
                        vec::load(x + ((((p.b * i0 + iz) * i1 + iy) * i2 + ix) * cv + p.ch) * V);
                    cells++;
                    acc = is_max ? vec::zip(acc, v, [](float a, float b) { return b > a ? b : a; })
                                 : vec::zip(acc, v, [](float a, float b) { return a + b; });
                }
            }
        }
        if (!is_max && cells)
            acc = vec::map(acc, [=](float a) { return a / (float)cells; });
        vec::store(y + i * V, acc);
    }
}

// y[b, o..., c] = x[b, o * s..., c]: a strided 1x1 convolution's input
// subsampled for its matrix product.
template <int V, typename I>
__global__ void kcu_subsample_v_k(const float *x, float *y, kcu_geom g, I nv)
{
    typedef kcu_vec<V> vec;
    const I cv = (I)(g.c / V), o0 = (I)g.out[0], o1 = (I)g.out[1], o2 = (I)g.out[2];
    const I i0 = (I)g.in[0], i1 = (I)g.in[1], i2 = (I)g.in[2];
    KCU_LOOP_T(I, i, nv) {
        kcu_vpos<I> p = kcu_vunravel<I>(i, cv, o0, o1, o2);
        I iz = p.z * (I)g.s[0], iy = p.y * (I)g.s[1], ix = p.x * (I)g.s[2];
        vec::store(y + i * V, vec::load(x + ((((p.b * i0 + iz) * i1 + iy) * i2 + ix) * cv + p.ch) * V));
    }
}

template <int V, typename I>
void kcu_subsample_launch(const float *x, float *y, kcu_geom g, int64_t n, cudaStream_t stream)
{
    kcu_subsample_v_k<V, I><<<kcu_blocks(n / V), kThreads, 0, stream>>>(x, y, g, (I)(n / V));
}

// V for a channel-vector kernel over these pointers and channel count.
int kcu_width(int64_t c, const void *x, const void *y)
{
    return c % 4 == 0 && kcu_aligned(x) && kcu_aligned(y) ? 4 : 1;
}

__global__ void kcu_hwio_to_kcrs_k(const float *src, float *dst, int64_t rs, int64_t c, int64_t k,
                                   int64_t n)
{
    KCU_LOOP(i, n) {
        int64_t r = i % rs, t = i / rs;
        int64_t cc = t % c, kk = t / c;
        dst[i] = src[(r * c + cc) * k + kk];
    }
}

}  // namespace

extern "C" {

cudaError_t kcu_bias_act(const float *x, float *y, const float *bias, int64_t n, int64_t c,
                         int act, float p0, float p1, float p2, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (c < 1)
        c = 1;
    if (n % 4 == 0 && kcu_aligned(x) && kcu_aligned(y) &&
        (!bias || (c % 4 == 0 && kcu_aligned(bias))))
        kcu_bias_act_act<4>(x, y, bias, n, c, act, p0, p1, p2, stream);
    else
        kcu_bias_act_act<1>(x, y, bias, n, c, act, p0, p1, p2, stream);
    return cudaGetLastError();
}

cudaError_t kcu_softmax(float *y, int64_t outer, int64_t len, int64_t inner, int log_softmax,
                        cudaStream_t stream)
{
    if (outer <= 0 || len <= 0 || inner <= 0)
        return cudaSuccess;
    if (inner == 1) {
        int64_t blocks = outer < 65535 ? outer : 65535;
        kcu_softmax_rows_k<<<(unsigned)blocks, kThreads, 0, stream>>>(y, outer, len, log_softmax);
    } else {
        kcu_softmax_strided_k<<<kcu_blocks(outer * inner), kThreads, 0, stream>>>(
            y, outer, len, inner, log_softmax);
    }
    return cudaGetLastError();
}

cudaError_t kcu_pad(const float *x, float *y, kcu_geom g, cudaStream_t stream)
{
    int64_t n = g.n * g.out[0] * g.out[1] * g.out[2] * g.c;
    if (n <= 0)
        return cudaSuccess;
    int64_t in_n = g.n * g.in[0] * g.in[1] * g.in[2] * g.c;
    int v = kcu_width(g.c, x, y);
    if (kcu_small(n) && kcu_small(in_n) && v == 4)
        kcu_pad_v_k<4, int><<<kcu_blocks(n / 4), kThreads, 0, stream>>>(x, y, g, (int)(n / 4));
    else if (kcu_small(n) && kcu_small(in_n))
        kcu_pad_v_k<1, int><<<kcu_blocks(n), kThreads, 0, stream>>>(x, y, g, (int)n);
    else
        kcu_pad_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, y, g, n);
    return cudaGetLastError();
}

cudaError_t kcu_depthwise(const float *x, const float *w, const float *bias, float *y,
                          kcu_geom g, cudaStream_t stream)
{
    int64_t n = g.n * g.out[0] * g.out[1] * g.out[2] * g.c * g.dm;
    if (n <= 0)
        return cudaSuccess;
    kcu_depthwise_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, w, bias, y, g, n);
    return cudaGetLastError();
}

cudaError_t kcu_conv_direct(const float *x, const float *w, const float *bias, float *y,
                            kcu_geom g, int64_t groups, cudaStream_t stream)
{
    int64_t n = g.n * g.out[0] * g.out[1] * g.out[2] * g.f;
    if (n <= 0)
        return cudaSuccess;
    kcu_conv_direct_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, w, bias, y, g, groups < 1 ? 1 : groups, n);
    return cudaGetLastError();
}

cudaError_t kcu_conv_transpose(const float *x, const float *w, const float *bias, float *y,
                               kcu_geom g, cudaStream_t stream)
{
    int64_t n = g.n * g.out[0] * g.out[1] * g.out[2] * g.f;
    if (n <= 0)
        return cudaSuccess;
    kcu_conv_transpose_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, w, bias, y, g, n);
    return cudaGetLastError();
}

cudaError_t kcu_pool(const float *x, float *y, kcu_geom g, int is_max, cudaStream_t stream)
{
    int64_t n = g.n * g.out[0] * g.out[1] * g.out[2] * g.c;
    if (n <= 0)
        return cudaSuccess;
    int64_t in_n = g.n * g.in[0] * g.in[1] * g.in[2] * g.c;
    int v = kcu_width(g.c, x, y);
    if (kcu_small(n) && kcu_small(in_n) && v == 4)
        kcu_pool_v_k<4, int><<<kcu_blocks(n / 4), kThreads, 0, stream>>>(x, y, g, is_max,
                                                                         (int)(n / 4));
    else if (kcu_small(n) && kcu_small(in_n))
        kcu_pool_v_k<1, int><<<kcu_blocks(n), kThreads, 0, stream>>>(x, y, g, is_max, (int)n);
    else
        kcu_pool_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, y, g, is_max, n);
    return cudaGetLastError();
}

cudaError_t kcu_global_pool(const float *x, float *y, int64_t n, int64_t cells, int64_t c,
                            int is_max, cudaStream_t stream)
{
    if (n * c <= 0)
        return cudaSuccess;
    kcu_global_pool_k<<<kcu_blocks(n * c), kThreads, 0, stream>>>(x, y, n, cells, c, is_max);
    return cudaGetLastError();
}

cudaError_t kcu_merge(float *acc, const float *x, int64_t n, kcu_bcast v, int op,
                      cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    kcu_merge_k<<<kcu_blocks(n), kThreads, 0, stream>>>(acc, x, n, v, op);
    return cudaGetLastError();
}

cudaError_t kcu_subsample(const float *x, float *y, kcu_geom g, cudaStream_t stream)
{
    int64_t n = g.n * g.out[0] * g.out[1] * g.out[2] * g.c;
    int64_t in_n = g.n * g.in[0] * g.in[1] * g.in[2] * g.c;
    if (n <= 0)
        return cudaSuccess;
    int v = kcu_width(g.c, x, y);
    int small = kcu_small(n) && kcu_small(in_n);
    if (v == 4 && small)
        kcu_subsample_launch<4, int>(x, y, g, n, stream);
    else if (v == 4)
        kcu_subsample_launch<4, int64_t>(x, y, g, n, stream);
    else if (small)
        kcu_subsample_launch<1, int>(x, y, g, n, stream);
    else
        kcu_subsample_launch<1, int64_t>(x, y, g, n, stream);
    return cudaGetLastError();
}

cudaError_t kcu_merge2(float *y, const float *a, const float *b, int64_t n, int op,
                       cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (n % 4 == 0 && kcu_aligned(y) && kcu_aligned(a) && kcu_aligned(b))
        kcu_merge2_launch<4>(y, a, b, n, op, stream);
    else
        kcu_merge2_launch<1>(y, a, b, n, op, stream);
    return cudaGetLastError();
}

cudaError_t kcu_batchnorm(const float *x, float *y, const float *gamma, const float *beta,
                          const float *mean, const float *var, int64_t outer, int64_t len,
                          int64_t inner, double eps, cudaStream_t stream)
{
    int64_t n = outer * len * inner;
    if (n <= 0)
        return cudaSuccess;
    kcu_batchnorm_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, y, gamma, beta, mean, var, n, len,
                                                            inner, eps);
    return cudaGetLastError();
}

cudaError_t kcu_rescaling(const float *x, float *y, int64_t n, int64_t c, kcu_rescale r,
                          cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    kcu_rescaling_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, y, n, c < 1 ? 1 : c, r);
    return cudaGetLastError();
}

cudaError_t kcu_hwio_to_krsc(const float *src, float *dst, int64_t rs, int64_t c, int64_t k,
                             cudaStream_t stream)
{
    int64_t n = rs * c * k;
    if (n <= 0)
        return cudaSuccess;
    kcu_hwio_to_krsc_k<<<kcu_blocks(n), kThreads, 0, stream>>>(src, dst, rs, c, k, n);
    return cudaGetLastError();
}

cudaError_t kcu_hwio_to_kcrs(const float *src, float *dst, int64_t rs, int64_t c, int64_t k,
                             cudaStream_t stream)
{
    int64_t n = rs * c * k;
    if (n <= 0)
        return cudaSuccess;
    kcu_hwio_to_kcrs_k<<<kcu_blocks(n), kThreads, 0, stream>>>(src, dst, rs, c, k, n);
    return cudaGetLastError();
}

}  // extern "C"
