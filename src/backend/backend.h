/* Backends: one interface for every device kerasc computes on, modelled on
 * ggml-backend (device, buffer, copy, stream/event, "supports this op",
 * run). The CPU backend is built into libkerasc; the CUDA backend is a
 * plugin shared library (libkerasc_cuda.so) opened with dlopen, so kerasc
 * runs on machines without CUDA.
 *
 * Memory model. A backend owns device memory handed out by `alloc`. The
 * scheduler (src/runtime/residency.c) allocates a few large blocks inside
 * the user's device budget and sub-allocates activations, resident
 * weights, the streaming ring and kernel workspace from them, so the
 * backend never allocates device memory behind the budget's back
 * (except fixed per-device handles such as the cuDNN/cuBLAS contexts,
 * which `info` reports as reserved).
 *
 * Streams. Each backend has two ordered queues: KC_STREAM_COMPUTE (kernels,
 * activation copies) and KC_STREAM_COPY (weight uploads). `upload_async`
 * accepts ordinary pageable host memory; a GPU backend stages it through a
 * small ring of pinned buffers of its own (never the whole model pinned).
 * Events order the two queues: record on one, wait on the other.
 *
 * The plugin ABI is plain C: the plugin includes kerasc's internal headers
 * for the layer/node/attribute structs (built in the same tree, so the
 * layouts match) but calls no libkerasc function; the few host services it
 * needs come in kc_backend_host. */
#ifndef KC_BACKEND_H
#define KC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/tensor.h"
#include "graph/graph.h"

#define KC_BACKEND_ABI 3

typedef struct kc_backend kc_backend;             /* one opened device */
typedef struct kc_backend_event kc_backend_event; /* a point in a stream */

typedef enum kc_device_type { KC_DEVICE_CPU = 0, KC_DEVICE_GPU = 1 } kc_device_type;

typedef enum kc_stream_id { KC_STREAM_COMPUTE = 0, KC_STREAM_COPY = 1 } kc_stream_id;

/* Services the host lends a plugin (which does not link libkerasc). */
typedef struct kc_backend_host {
    /* Record an error message (printf-style) and return `status`. */
    kc_status (*fail)(kc_status status, const char *fmt, ...);
    /* One warning line on stderr. */
    void (*warn)(const char *fmt, ...);
} kc_backend_host;

typedef struct kc_backend_info {
    char name[128];          /* "NVIDIA H200", "host CPU" */
    size_t total_bytes;      /* device memory, 0 for the host */
    size_t free_bytes;
    size_t reserved_bytes;   /* held by the backend itself (library handles) */
} kc_backend_info;

/* One node to run. Every pointer is in the backend's memory. Weights are
 * the effective layer's weights (BatchNormalization already folded, see
 * runtime/fuse.c), in spec order and Keras layout; their shapes are
 * layer->weights[i].shape. */
typedef struct kc_backend_call {
    const kc_node *node;
    const kc_layer *layer;            /* attrs parsed (layer->attrs) */
    int keras_major;                  /* activation semantics */
    const float *const *in;
    const kc_shape *in_shape;         /* fully resolved (batch known) */
    int n_in;
    float *const *out;
    const kc_shape *out_shape;
    int n_out;
    const float *const *w;            /* n_w weights, or NULL: layer->weights */
    int n_w;
    const unsigned char *in_mask;     /* host memory; only the CPU backend
                                         accepts calls with a mask */
    void *workspace;                  /* `workspace_bytes` of device memory */
    size_t workspace_size;
    void **state;                     /* this node's slot for backend state */
    int exact;                        /* direct algorithms only (no Winograd) */
    struct kc_wino_budget *wino_budget; /* the session's Winograd allowance
                                         (kernels/kernel.h), or NULL */
    void *spare;                      /* host arena free during the call */
    size_t spare_bytes;
} kc_backend_call;

typedef struct kc_backend_iface {
    int abi;                          /* KC_BACKEND_ABI */
    const char *name;                 /* "cpu", "cuda" */
    kc_device_type type;

    int (*device_count)(void);
    kc_status (*open)(int index, const kc_backend_host *host, kc_backend **out);
    void (*close)(kc_backend *b);
    kc_status (*info)(kc_backend *b, kc_backend_info *out);

    /* 1 if `run` computes this node (shapes in the graph; batch symbolic),
     * 0 if the scheduler must place it on another backend. */
    int (*supports)(kc_backend *b, const kc_layer *layer, const kc_node *node);
    /* Device workspace the call needs (0 if none); asked once per plan.
     * call->workspace_size, when not 0, is the most the host would have it
     * need: a backend with a choice of algorithms plans within it where it
     * can (the scheduler asks again so when weights must be streamed). */
    size_t (*workspace_bytes)(kc_backend *b, const kc_backend_call *call);

    /* Device memory. */
    kc_status (*alloc)(kc_backend *b, size_t bytes, void **ptr);
    void (*free)(kc_backend *b, void *ptr);

    /* Host -> device on the copy stream, asynchronous; src must stay valid
     * and unchanged until an event recorded after it has completed. */
    kc_status (*upload_async)(kc_backend *b, void *dst, const void *src, size_t bytes);
    /* Host <-> device on the compute stream, synchronous for the caller
     * (activations at backend boundaries, model inputs and outputs). */
    kc_status (*upload)(kc_backend *b, void *dst, const void *src, size_t bytes);
    kc_status (*download)(kc_backend *b, void *dst, const void *src, size_t bytes);

    kc_status (*event_new)(kc_backend *b, kc_backend_event **out);
    void (*event_free)(kc_backend *b, kc_backend_event *e);
    kc_status (*record)(kc_backend *b, kc_stream_id stream, kc_backend_event *e);
    /* The stream waits (device side) until the event has completed. */
    kc_status (*wait)(kc_backend *b, kc_stream_id stream, kc_backend_event *e);
    /* The host blocks until the event has completed. */
    kc_status (*event_sync)(kc_backend *b, kc_backend_event *e);
    /* Seconds between two completed events (for traces), or < 0. */
    double (*elapsed)(kc_backend *b, kc_backend_event *from, kc_backend_event *to);

    /* Enqueue one node on the compute stream. */
    kc_status (*run)(kc_backend *b, const kc_backend_call *call);
    void (*state_free)(kc_backend *b, void *state);
    /* Both streams drained. */
    kc_status (*synchronize)(kc_backend *b);
    /* Optional (NULL: not offered). Page-lock the host range [ptr, ptr +
     * bytes), page-aligned, so that upload_async from inside it is one
     * direct DMA on the copy stream instead of a staged copy made by the
     * calling thread. KC_OK when pinned; any other status (reported
     * through no error message) leaves it pageable, and uploads from it
     * stay correct, only staged. */
    kc_status (*host_pin)(kc_backend *b, void *ptr, size_t bytes);
    /* Undo one successful host_pin of exactly that ptr. */
    void (*host_unpin)(kc_backend *b, void *ptr);

    /* Optional (NULL: not offered), all four or none. Capture the compute
     * stream: the calls between capture_begin and capture_end (run,
     * record, wait on the compute stream) are recorded, not executed, into
     * a graph that graph_launch then replays with one call; the pointers
     * and shapes they name are fixed in it. capture_end always ends the
     * capture; it fails when a captured call could not be captured, and
     * then nothing of them ran. */
    kc_status (*capture_begin)(kc_backend *b);
    kc_status (*capture_end)(kc_backend *b, void **graph);
    kc_status (*graph_launch)(kc_backend *b, void *graph);
    void (*graph_free)(kc_backend *b, void *graph);
} kc_backend_iface;

/* The CUDA plugin's one exported symbol (dlsym'd by name). */
typedef const kc_backend_iface *(*kc_backend_entry_fn)(void);
#define KC_BACKEND_CUDA_ENTRY "kc_backend_cuda_iface"
#define KC_BACKEND_CUDA_LIBRARY "libkerasc_cuda.so"

#endif
