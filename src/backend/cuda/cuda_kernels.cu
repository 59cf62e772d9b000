// The CUDA plugin's own kernels: element-wise activations, softmax,
// padding, depthwise and transposed convolution, pooling, merges,
// BatchNormalization, Rescaling and the weight layout change for cuDNN.
// Semantics follow the CPU kernels in src/kernels/*.c exactly (same
// padding rules, same formulas); all tensors are dense float32 NHWC.
#include <cfloat>
#include <cmath>

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

__global__ void kcu_bias_act_k(const float *x, float *y, const float *bias, int64_t n, int64_t c,
                               int act, float p0, float p1, float p2)
{
    KCU_LOOP(i, n) {
        float v = x[i];
        if (bias)
            v += bias[i % c];
        y[i] = kcu_act_apply(act, v, p0, p1, p2);
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

__global__ void kcu_merge_k(float *acc, const float *x, int64_t n, kcu_bcast v, int op)
{
    KCU_LOOP(o, n) {
        int64_t src = 0, t = o;
        for (int d = v.rank - 1; d >= 0; d--) {
            src += (t % v.dims[d]) * v.strides[d];
            t /= v.dims[d];
        }
        float xv = x[src], a = acc[o];
        switch (op) {
        case KCU_MERGE_COPY: a = xv; break;
        case KCU_MERGE_ADD: a += xv; break;
        case KCU_MERGE_SUB: a -= xv; break;
        case KCU_MERGE_MUL: a *= xv; break;
        case KCU_MERGE_MAX: a = xv > a ? xv : a; break;
        case KCU_MERGE_MIN: a = xv < a ? xv : a; break;
        default: break;
        }
        acc[o] = a;
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

}  // namespace

extern "C" {

cudaError_t kcu_bias_act(const float *x, float *y, const float *bias, int64_t n, int64_t c,
                         int act, float p0, float p1, float p2, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    kcu_bias_act_k<<<kcu_blocks(n), kThreads, 0, stream>>>(x, y, bias, n, c < 1 ? 1 : c, act, p0,
                                                           p1, p2);
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

}  // extern "C"
