/* `kerasc serve`: one task of a cluster. It runs nothing but the pipeline
 * stages a client loaded into it, from its own copy of the model (found in
 * --model-dir) or one the client streamed to it (kept in --cache-dir),
 * either verified by SHA-256; it forwards each stage's outputs to
 * the next stage's worker directly and relays the final result back. */
#ifndef KC_WORKER_H
#define KC_WORKER_H

#include <stdint.h>

#include "net/cluster.h"
#include "net/transport.h"

typedef struct kc_worker_options {
    kc_cluster cluster;
    const char *job;
    int task;
    int replica;              /* which of the task's addresses is this process */
    const char *model_dir;    /* its own copies of model files (may be NULL) */
    const char *cache_dir;    /* where streamed models are kept (NULL: none) */
    uint64_t max_model_bytes; /* largest streamed model (0: refuse streaming) */
    int max_clients;          /* peers active at once (0: 64); quiet ones make room */
    int deadline_ms;          /* for answers from the next stage */
    int threads;              /* kernels' threads (0: all cores) */
    kc_net_security sec;
} kc_worker_options;

/* Serve until SIGINT/SIGTERM (then drain in-flight requests and return 0);
 * 1 on a start-up error (printed). */
int kc_worker_serve(const kc_worker_options *options);

#endif
