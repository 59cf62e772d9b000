/* Whole runs as CUDA graphs. At batch 1 a ResNet50-sized model is bound by
 * the host: cuDNN's and cuBLAS's launch paths took 30-45 us a layer on the
 * H200 (gpu-check, 12-04) against about 40 us of GPU work. The scheduler
 * captures one run's compute stream into a graph and replays it with a
 * single launch, so every later run costs the host one call.
 *
 * Capture is ThreadLocal: a call from this thread that cannot be captured
 * (a synchronous copy, an allocation) fails and invalidates the capture
 * instead of running, and the scheduler then keeps running layer by layer. */
#include "backend/cuda/cuda_internal.h"

kc_status kc_cuda_capture_begin(kc_backend *b)
{
    KC_CU(b, cudaSetDevice(b->device));
    KC_CU(b, cudaStreamBeginCapture(b->compute, cudaStreamCaptureModeThreadLocal));
    b->capturing = 1;
    return KC_OK;
}

kc_status kc_cuda_capture_end(kc_backend *b, void **graph)
{
    *graph = NULL;
    b->capturing = 0;
    KC_CU(b, cudaSetDevice(b->device));
    cudaGraph_t captured = NULL;
    cudaError_t err = cudaStreamEndCapture(b->compute, &captured);
    if (err != cudaSuccess) {
        if (captured)
            (void)cudaGraphDestroy(captured);
        return kc_cuda_fail_rt(b, err, "cudaStreamEndCapture");
    }
    cudaGraphExec_t exec = NULL;
    err = cudaGraphInstantiate(&exec, captured, 0);
    (void)cudaGraphDestroy(captured);
    if (err != cudaSuccess)
        return kc_cuda_fail_rt(b, err, "cudaGraphInstantiate");
    /* The first launch would otherwise pay for moving the graph to the GPU. */
    err = cudaGraphUpload(exec, b->compute);
    if (err != cudaSuccess) {
        (void)cudaGraphExecDestroy(exec);
        return kc_cuda_fail_rt(b, err, "cudaGraphUpload");
    }
    *graph = exec;
    return KC_OK;
}

kc_status kc_cuda_graph_launch(kc_backend *b, void *graph)
{
    KC_CU(b, cudaSetDevice(b->device));
    KC_CU(b, cudaGraphLaunch((cudaGraphExec_t)graph, b->compute));
    return KC_OK;
}

void kc_cuda_graph_free(kc_backend *b, void *graph)
{
    if (!graph)
        return;
    (void)cudaSetDevice(b->device);
    (void)cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
