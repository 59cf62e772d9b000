/* Internals shared by the CUDA plugin's C files (never by libkerasc). */
#ifndef KC_CUDA_INTERNAL_H
#define KC_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/backend.h"

/* Pinned staging ring for upload_async: KC_CUDA_RING_SLOTS buffers of
 * KC_CUDA_RING_CHUNK bytes, each reused only after its copy completed. */
#define KC_CUDA_RING_SLOTS 4
#define KC_CUDA_RING_CHUNK ((size_t)8 << 20)

/* cuBLAS workspace (NVIDIA's recommendation for Hopper). */
#define KC_CUDA_BLAS_WS ((size_t)32 << 20)

/* Largest cuDNN algorithm workspace a convolution asks for. */
#define KC_CUDA_CONV_WS_CAP ((size_t)256 << 20)

struct kc_backend {
    int device;
    kc_backend_host host;
    cudaStream_t compute, copy;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    void *ring[KC_CUDA_RING_SLOTS];
    cudaEvent_t ring_done[KC_CUDA_RING_SLOTS];
    int ring_next;
    void *blas_ws;          /* cuBLAS's workspace, fixed at open */
    int quiet;              /* probing: report no error through the host */
    int conv_find;          /* KC_CUDA_CONV_ALGO=find: time the algorithms */
    int gemm_1x1;           /* 1x1 stride-1 convolutions on cuBLAS (default;
                               KC_CUDA_GEMM_1X1=0: on cuDNN) */
    int conv_nchw;          /* KC_CUDA_NCHW: -1 auto (default), 0 never, 1 every
                               eligible convolution (cuda_ops.c) */
    int capturing;          /* the compute stream is being captured into a
                               graph (cuda_graph.c) */
    int verbose;            /* KC_CUDA_VERBOSE=1: each plan's algorithm, and
                               at close the host time cuDNN's calls took */
    double dnn_host_s;      /* host seconds inside cudnnConvolutionForward */
    long dnn_calls;
    size_t reserved;
    char name[128];
};

struct kc_backend_event {
    cudaEvent_t ev;
};

/* Error reporting through the host (the plugin never links libkerasc). */
kc_status kc_cuda_fail_rt(kc_backend *b, cudaError_t err, const char *call);
kc_status kc_cuda_fail_dnn(kc_backend *b, cudnnStatus_t st, const char *call);
kc_status kc_cuda_fail_blas(kc_backend *b, cublasStatus_t st, const char *call);

#define KC_CU(b, call)                                      \
    do {                                                    \
        cudaError_t kc_cu_err_ = (call);                    \
        if (kc_cu_err_ != cudaSuccess)                      \
            return kc_cuda_fail_rt((b), kc_cu_err_, #call); \
    } while (0)
#define KC_DNN(b, call)                                      \
    do {                                                     \
        cudnnStatus_t kc_dnn_st_ = (call);                   \
        if (kc_dnn_st_ != CUDNN_STATUS_SUCCESS)              \
            return kc_cuda_fail_dnn((b), kc_dnn_st_, #call); \
    } while (0)
#define KC_BLAS(b, call)                                       \
    do {                                                       \
        cublasStatus_t kc_blas_st_ = (call);                   \
        if (kc_blas_st_ != CUBLAS_STATUS_SUCCESS)              \
            return kc_cuda_fail_blas((b), kc_blas_st_, #call); \
    } while (0)

/* cuda_pin.c: host ranges page-locked by host_pin, process-wide. */
kc_status kc_cuda_host_pin(kc_backend *b, void *ptr, size_t bytes);
void kc_cuda_host_unpin(kc_backend *b, void *ptr);
void kc_cuda_unpin_all(kc_backend *b);
typedef enum kc_cuda_pin_kind {
    KC_PIN_NONE,    /* pageable */
    KC_PIN_OWN,     /* pinned by this device (b): direct DMA */
    KC_PIN_FOREIGN  /* pinned by another device or session: may go any time */
} kc_cuda_pin_kind;
/* What lies at p for a copy of `bytes` from there, and in *run how many
 * bytes from p (at most `bytes`, at least 1) are alike. */
kc_cuda_pin_kind kc_cuda_pin_lookup(const kc_backend *b, const void *p, size_t bytes,
                                    size_t *run);

/* cuda_graph.c: the compute stream captured into a graph, and replayed. */
kc_status kc_cuda_capture_begin(kc_backend *b);
kc_status kc_cuda_capture_end(kc_backend *b, void **graph);
kc_status kc_cuda_graph_launch(kc_backend *b, void *graph);
void kc_cuda_graph_free(kc_backend *b, void *graph);

/* cuda_ops.c */
int kc_cuda_supports(kc_backend *b, const kc_layer *layer, const kc_node *node);
size_t kc_cuda_workspace_bytes(kc_backend *b, const kc_backend_call *call);
kc_status kc_cuda_run(kc_backend *b, const kc_backend_call *call);
void kc_cuda_state_free(kc_backend *b, void *state);

#endif
