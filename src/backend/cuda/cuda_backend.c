/* The CUDA backend plugin (libkerasc_cuda.so): devices, memory, streams,
 * events and the pinned staging ring. The kernels and their dispatch are
 * in cuda_ops.c and cuda_kernels.cu.
 *
 * Each opened device has one compute stream (kernels, activation copies)
 * and one copy stream (weight uploads), both non-blocking with respect to
 * the legacy default stream. upload_async copies pageable host memory
 * through KC_CUDA_RING_SLOTS pinned chunks: the host memcpy into a chunk
 * waits on that chunk's event (its previous copy has completed), then the
 * chunk is copied on the copy stream and the event re-recorded. Ranges
 * the host pinned (host_pin: a session's streamed weights) skip the ring:
 * one direct DMA each, and the calling thread copies nothing. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

#define KC_CUDA_EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------- errors */

static kc_status kc_cuda_report(kc_backend *b, kc_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kc_status kc_cuda_report(kc_backend *b, kc_status status, const char *fmt, ...)
{
    if (!b || !b->host.fail || b->quiet)
        return status;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return b->host.fail(status, "%s", msg);
}

kc_status kc_cuda_fail_rt(kc_backend *b, cudaError_t err, const char *call)
{
    kc_status st = err == cudaErrorMemoryAllocation ? KC_ERR_NOMEM
                   : err == cudaErrorInvalidValue   ? KC_ERR_ARG
                   : err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver
                       ? KC_ERR_UNSUPPORTED
                       : KC_ERR_IO;
    return kc_cuda_report(b, st, "cuda: %s failed: %s (%s)", call, cudaGetErrorString(err),
                          cudaGetErrorName(err));
}

kc_status kc_cuda_fail_dnn(kc_backend *b, cudnnStatus_t s, const char *call)
{
    kc_status st = s == CUDNN_STATUS_ALLOC_FAILED       ? KC_ERR_NOMEM
                   : s == CUDNN_STATUS_NOT_SUPPORTED    ? KC_ERR_UNSUPPORTED
                   : s == CUDNN_STATUS_BAD_PARAM        ? KC_ERR_ARG
                                                        : KC_ERR_IO;
    return kc_cuda_report(b, st, "cuda: %s failed: %s", call, cudnnGetErrorString(s));
}

kc_status kc_cuda_fail_blas(kc_backend *b, cublasStatus_t s, const char *call)
{
    kc_status st = s == CUBLAS_STATUS_ALLOC_FAILED      ? KC_ERR_NOMEM
                   : s == CUBLAS_STATUS_NOT_SUPPORTED   ? KC_ERR_UNSUPPORTED
                   : s == CUBLAS_STATUS_INVALID_VALUE   ? KC_ERR_ARG
                                                        : KC_ERR_IO;
    return kc_cuda_report(b, st, "cuda: %s failed: %s", call, cublasGetStatusString(s));
}

/* --------------------------------------------------------------- devices */

static int kc_cuda_device_count(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky, but leave nothing behind */
        return 0;
    }
    return n > 0 ? n : 0;
}

static void kc_cuda_close(kc_backend *b)
{
    if (!b)
        return;
    (void)cudaSetDevice(b->device);
    if (b->compute)
        (void)cudaStreamSynchronize(b->compute);
    if (b->copy)
        (void)cudaStreamSynchronize(b->copy);
    if (b->verbose && b->dnn_calls)
        fprintf(stderr, "cuda: %ld cudnnConvolutionForward calls took %.1f us of host time "
                        "each\n", b->dnn_calls, b->dnn_host_s * 1e6 / (double)b->dnn_calls);
    kc_cuda_unpin_all(b); /* a host that forgot host_unpin */
    for (int i = 0; i < KC_CUDA_RING_SLOTS; i++) {
        if (b->ring_done[i]) {
            (void)cudaEventSynchronize(b->ring_done[i]);
            (void)cudaEventDestroy(b->ring_done[i]);
        }
        if (b->ring[i])
            (void)cudaFreeHost(b->ring[i]);
    }
    if (b->cublas)
        (void)cublasDestroy(b->cublas);
    if (b->cudnn)
        (void)cudnnDestroy(b->cudnn);
    if (b->blas_ws)
        (void)cudaFree(b->blas_ws);
    if (b->copy)
        (void)cudaStreamDestroy(b->copy);
    if (b->compute)
        (void)cudaStreamDestroy(b->compute);
    (void)cudaGetLastError();
    free(b);
}

static kc_status kc_cuda_open_device(kc_backend *b)
{
    KC_CU(b, cudaSetDevice(b->device));
    struct cudaDeviceProp prop;
    KC_CU(b, cudaGetDeviceProperties(&prop, b->device));
    size_t len = strnlen(prop.name, sizeof prop.name);
    if (len >= sizeof b->name)
        len = sizeof b->name - 1;
    memcpy(b->name, prop.name, len);
    b->name[len] = 0;
    size_t free0 = 0, free1 = 0, total = 0;
    KC_CU(b, cudaMemGetInfo(&free0, &total));
    KC_CU(b, cudaStreamCreateWithFlags(&b->compute, cudaStreamNonBlocking));
    KC_CU(b, cudaStreamCreateWithFlags(&b->copy, cudaStreamNonBlocking));
    KC_DNN(b, cudnnCreate(&b->cudnn));
    KC_DNN(b, cudnnSetStream(b->cudnn, b->compute));
    KC_BLAS(b, cublasCreate(&b->cublas));
    KC_BLAS(b, cublasSetStream(b->cublas, b->compute));
    /* Plain FP32 arithmetic (no TF32): results must match Keras to 1e-4. */
    KC_BLAS(b, cublasSetMathMode(b->cublas, CUBLAS_DEFAULT_MATH));
    /* A fixed workspace (after cublasSetStream, which resets it), so cuBLAS
     * allocates nothing later behind the budget's back. */
    KC_CU(b, cudaMalloc(&b->blas_ws, KC_CUDA_BLAS_WS));
    KC_BLAS(b, cublasSetWorkspace(b->cublas, b->blas_ws, KC_CUDA_BLAS_WS));
    for (int i = 0; i < KC_CUDA_RING_SLOTS; i++) {
        KC_CU(b, cudaHostAlloc(&b->ring[i], KC_CUDA_RING_CHUNK, cudaHostAllocDefault));
        KC_CU(b, cudaEventCreateWithFlags(&b->ring_done[i], cudaEventDisableTiming));
    }
    KC_CU(b, cudaMemGetInfo(&free1, &total));
    b->reserved = free0 > free1 ? free0 - free1 : 0;
    return KC_OK;
}

static kc_status kc_cuda_open(int index, const kc_backend_host *host, kc_backend **out)
{
    if (!out || !host)
        return host && host->fail ? host->fail(KC_ERR_ARG, "cuda: open without %s",
                                               out ? "host services" : "an output")
                                  : KC_ERR_ARG;
    *out = NULL;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return host->fail(KC_ERR_UNSUPPORTED, "cuda: no CUDA device %d: %s", index,
                          cudaGetErrorString(err));
    }
    if (index < 0 || index >= n)
        return host->fail(KC_ERR_UNSUPPORTED, "cuda: no CUDA device %d (%d found)", index, n);
    kc_backend *b = calloc(1, sizeof *b);
    if (!b)
        return host->fail(KC_ERR_NOMEM, "cuda: out of memory opening device %d", index);
    b->device = index;
    b->host = *host;
    const char *algo = getenv("KC_CUDA_CONV_ALGO");
    b->conv_find = algo && strcmp(algo, "find") == 0;
    const char *gemm = getenv("KC_CUDA_GEMM_1X1");
    b->gemm_1x1 = !(gemm && strcmp(gemm, "0") == 0);
    const char *nchw = getenv("KC_CUDA_NCHW");
    b->conv_nchw = !nchw || !*nchw ? -1 : strcmp(nchw, "0") != 0;
    const char *verbose = getenv("KC_CUDA_VERBOSE");
    b->verbose = verbose && strcmp(verbose, "1") == 0;
    kc_status st = kc_cuda_open_device(b);
    if (st != KC_OK) {
        kc_cuda_close(b);
        return st;
    }
    *out = b;
    return KC_OK;
}

static kc_status kc_cuda_info(kc_backend *b, kc_backend_info *out)
{
    memset(out, 0, sizeof *out);
    KC_CU(b, cudaSetDevice(b->device));
    memcpy(out->name, b->name, sizeof out->name);
    KC_CU(b, cudaMemGetInfo(&out->free_bytes, &out->total_bytes));
    out->reserved_bytes = b->reserved;
    return KC_OK;
}

/* ---------------------------------------------------------------- memory */

static kc_status kc_cuda_alloc(kc_backend *b, size_t bytes, void **ptr)
{
    *ptr = NULL;
    KC_CU(b, cudaSetDevice(b->device));
    KC_CU(b, cudaMalloc(ptr, bytes ? bytes : 1));
    return KC_OK;
}

static void kc_cuda_free(kc_backend *b, void *ptr)
{
    if (!ptr)
        return;
    (void)cudaSetDevice(b->device);
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess && b->host.warn)
        b->host.warn("cuda: cudaFree failed: %s", cudaGetErrorString(err));
}

/* The staging ring's next chunk, into *slot, once the copy that last
 * used it has finished with it (it is refilled or overwritten next). */
static kc_status kc_cuda_ring_take(kc_backend *b, int *slot)
{
    *slot = b->ring_next;
    b->ring_next = (*slot + 1) % KC_CUDA_RING_SLOTS;
    KC_CU(b, cudaEventSynchronize(b->ring_done[*slot]));
    return KC_OK;
}

/* Pageable host memory -> device through the pinned staging ring, on the
 * copy stream. */
static kc_status kc_cuda_staged(kc_backend *b, char *dst, const char *src, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += KC_CUDA_RING_CHUNK) {
        size_t n = bytes - off < KC_CUDA_RING_CHUNK ? bytes - off : KC_CUDA_RING_CHUNK;
        int slot;
        KC_TRY(kc_cuda_ring_take(b, &slot));
        memcpy(b->ring[slot], src + off, n);
        KC_CU(b, cudaMemcpyAsync(dst + off, b->ring[slot], n, cudaMemcpyHostToDevice, b->copy));
        KC_CU(b, cudaEventRecord(b->ring_done[slot], b->copy));
    }
    return KC_OK;
}

/* Device -> pageable host memory through a staging chunk, synchronous. */
static kc_status kc_cuda_bounce_down(kc_backend *b, char *dst, const char *src, size_t bytes,
                                     cudaStream_t stream)
{
    for (size_t off = 0; off < bytes; off += KC_CUDA_RING_CHUNK) {
        size_t n = bytes - off < KC_CUDA_RING_CHUNK ? bytes - off : KC_CUDA_RING_CHUNK;
        int slot;
        KC_TRY(kc_cuda_ring_take(b, &slot));
        KC_CU(b, cudaMemcpyAsync(b->ring[slot], src + off, n, cudaMemcpyDeviceToHost, stream));
        KC_CU(b, cudaStreamSynchronize(stream));
        memcpy(dst + off, b->ring[slot], n);
    }
    return KC_OK;
}

/* One piece of a copy lying inside a range another device or session
 * pinned: that range may be unpinned at any moment, so nothing is DMA'd
 * from or into it behind the host's back. It goes through this device's
 * own staging chunks: asynchronously on the copy stream (an upload_async),
 * or synchronously, in order after the work already on `stream`. */
static kc_status kc_cuda_copy_foreign(kc_backend *b, char *dev, char *host, size_t n,
                                      enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (kind == cudaMemcpyDeviceToHost)
        return kc_cuda_bounce_down(b, host, dev, n, stream);
    if (stream == b->copy)
        return kc_cuda_staged(b, dev, host, n);
    KC_CU(b, cudaStreamSynchronize(stream));
    KC_TRY(kc_cuda_staged(b, dev, host, n));
    KC_CU(b, cudaStreamSynchronize(b->copy));
    return KC_OK;
}

/* A copy between the device and host memory that may lie partly inside
 * page-locked ranges: CUDA refuses one copy across a registered range's
 * edge, so it goes in pieces. Pieces this device pinned are direct DMA on
 * `stream`; pageable ones go through the ring (`staged`: the uploads on
 * the copy stream) or as plain pageable copies on `stream`; pieces pinned
 * by another device or session as kc_cuda_copy_foreign says. */
static kc_status kc_cuda_copy_split(kc_backend *b, char *dev, char *host, size_t bytes,
                                    enum cudaMemcpyKind kind, cudaStream_t stream, int staged)
{
    size_t off = 0;
    while (off < bytes) {
        size_t n = 0;
        kc_cuda_pin_kind at = kc_cuda_pin_lookup(b, host + off, bytes - off, &n);
        if (at == KC_PIN_FOREIGN)
            KC_TRY(kc_cuda_copy_foreign(b, dev + off, host + off, n, kind, stream));
        else if (at == KC_PIN_NONE && staged)
            KC_TRY(kc_cuda_staged(b, dev + off, host + off, n));
        else
            KC_CU(b, kind == cudaMemcpyHostToDevice
                         ? cudaMemcpyAsync(dev + off, host + off, n, kind, stream)
                         : cudaMemcpyAsync(host + off, dev + off, n, kind, stream));
        off += n;
    }
    return KC_OK;
}

static kc_status kc_cuda_upload_async(kc_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return KC_OK;
    if (!dst || !src)
        return kc_cuda_report(b, KC_ERR_ARG, "cuda: upload_async of %zu bytes from/to NULL",
                              bytes);
    KC_CU(b, cudaSetDevice(b->device));
    return kc_cuda_copy_split(b, dst, (char *)src, bytes, cudaMemcpyHostToDevice, b->copy, 1);
}

static kc_status kc_cuda_upload(kc_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return KC_OK;
    KC_CU(b, cudaSetDevice(b->device));
    KC_TRY(kc_cuda_copy_split(b, dst, (char *)src, bytes, cudaMemcpyHostToDevice, b->compute,
                              0));
    KC_CU(b, cudaStreamSynchronize(b->compute));
    return KC_OK;
}

static kc_status kc_cuda_download(kc_backend *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return KC_OK;
    KC_CU(b, cudaSetDevice(b->device));
    KC_TRY(kc_cuda_copy_split(b, (char *)src, dst, bytes, cudaMemcpyDeviceToHost, b->compute,
                              0));
    KC_CU(b, cudaStreamSynchronize(b->compute));
    return KC_OK;
}

/* ---------------------------------------------------------------- events */

static cudaStream_t kc_cuda_stream(kc_backend *b, kc_stream_id id)
{
    return id == KC_STREAM_COPY ? b->copy : b->compute;
}

static kc_status kc_cuda_event_new(kc_backend *b, kc_backend_event **out)
{
    *out = NULL;
    kc_backend_event *e = calloc(1, sizeof *e);
    if (!e)
        return kc_cuda_report(b, KC_ERR_NOMEM, "cuda: out of memory for an event");
    cudaError_t err = cudaSetDevice(b->device);
    if (err == cudaSuccess)
        err = cudaEventCreate(&e->ev); /* with timing, for elapsed() */
    if (err != cudaSuccess) {
        free(e);
        return kc_cuda_fail_rt(b, err, "cudaEventCreate");
    }
    *out = e;
    return KC_OK;
}

static void kc_cuda_event_free(kc_backend *b, kc_backend_event *e)
{
    if (!e)
        return;
    (void)cudaSetDevice(b->device);
    (void)cudaEventDestroy(e->ev);
    free(e);
}

static kc_status kc_cuda_record(kc_backend *b, kc_stream_id stream, kc_backend_event *e)
{
    KC_CU(b, cudaSetDevice(b->device));
    /* Captured, an event becomes a node of the graph (External), so that
     * every replay records it and per-layer times stay measurable. */
    if (b->capturing && stream == KC_STREAM_COMPUTE)
        KC_CU(b, cudaEventRecordWithFlags(e->ev, b->compute, cudaEventRecordExternal));
    else
        KC_CU(b, cudaEventRecord(e->ev, kc_cuda_stream(b, stream)));
    return KC_OK;
}

static kc_status kc_cuda_wait(kc_backend *b, kc_stream_id stream, kc_backend_event *e)
{
    KC_CU(b, cudaSetDevice(b->device));
    KC_CU(b, cudaStreamWaitEvent(kc_cuda_stream(b, stream), e->ev, 0));
    return KC_OK;
}

static kc_status kc_cuda_event_sync(kc_backend *b, kc_backend_event *e)
{
    KC_CU(b, cudaSetDevice(b->device));
    KC_CU(b, cudaEventSynchronize(e->ev));
    return KC_OK;
}

static double kc_cuda_elapsed(kc_backend *b, kc_backend_event *from, kc_backend_event *to)
{
    float ms = 0;
    if (cudaSetDevice(b->device) != cudaSuccess ||
        cudaEventElapsedTime(&ms, from->ev, to->ev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1.0;
    }
    return ms / 1000.0;
}

static kc_status kc_cuda_synchronize(kc_backend *b)
{
    KC_CU(b, cudaSetDevice(b->device));
    KC_CU(b, cudaStreamSynchronize(b->copy));
    KC_CU(b, cudaStreamSynchronize(b->compute));
    return KC_OK;
}

/* ------------------------------------------------------------- interface */

static const kc_backend_iface kc_cuda_iface = {
    .abi = KC_BACKEND_ABI,
    .name = "cuda",
    .type = KC_DEVICE_GPU,
    .device_count = kc_cuda_device_count,
    .open = kc_cuda_open,
    .close = kc_cuda_close,
    .info = kc_cuda_info,
    .supports = kc_cuda_supports,
    .workspace_bytes = kc_cuda_workspace_bytes,
    .alloc = kc_cuda_alloc,
    .free = kc_cuda_free,
    .upload_async = kc_cuda_upload_async,
    .upload = kc_cuda_upload,
    .download = kc_cuda_download,
    .event_new = kc_cuda_event_new,
    .event_free = kc_cuda_event_free,
    .record = kc_cuda_record,
    .wait = kc_cuda_wait,
    .event_sync = kc_cuda_event_sync,
    .elapsed = kc_cuda_elapsed,
    .run = kc_cuda_run,
    .state_free = kc_cuda_state_free,
    .synchronize = kc_cuda_synchronize,
    .host_pin = kc_cuda_host_pin,
    .host_unpin = kc_cuda_host_unpin,
    .capture_begin = kc_cuda_capture_begin,
    .capture_end = kc_cuda_capture_end,
    .graph_launch = kc_cuda_graph_launch,
    .graph_free = kc_cuda_graph_free,
};

KC_CUDA_EXPORT const kc_backend_iface *kc_backend_cuda_iface(void);

const kc_backend_iface *kc_backend_cuda_iface(void) { return &kc_cuda_iface; }
