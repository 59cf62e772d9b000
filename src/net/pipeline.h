/* The client side of a split run: the model cut into stages, each stage on
 * a cluster task, micro-batches pipelined through them (stage k works on
 * micro-batch i while stage k+1 works on i-1), activations flowing worker
 * to worker, results back to the client; a stage placed on a local device
 * runs on the client itself. A worker without the model file gets it
 * streamed from the client. A task listing several addresses
 * is a set of replicas: when one fails, the pipeline is reloaded on the
 * next and the run repeated. */
#ifndef KC_PIPELINE_H
#define KC_PIPELINE_H

#include "device/devspec.h"
#include "kerasc.h"
#include "net/cluster.h"
#include "net/transport.h"

#define KC_PIPELINE_MAX_STAGES 16

typedef struct kc_pipeline_options {
    kc_cluster cluster;
    const char *model_path;        /* the file every worker must also hold */
    int n_stages;
    int last_node[KC_PIPELINE_MAX_STAGES];  /* each stage's last node */
    kc_devspec place[KC_PIPELINE_MAX_STAGES]; /* a task, or a local device: the
                                                 stage runs on this client */
    kc_net_security sec;
    int deadline_ms;               /* per request (0: 30000) */
    int64_t microbatch;            /* 0: the whole batch at once */
    int verbose;
    /* Filled by a run when non-NULL: the pipeline's measurements. */
    struct kc_pipeline_stats *stats;
} kc_pipeline_options;

typedef struct kc_pipeline_stats {
    int n_microbatches;
    double wall_s;                                  /* first send to last result */
    double first_s;                                 /* first send to first result */
    double compute_ms[KC_PIPELINE_MAX_STAGES];      /* summed over micro-batches */
    size_t in_bytes[KC_PIPELINE_MAX_STAGES];        /* per micro-batch, into stage k */
} kc_pipeline_stats;

/* 1 when stage k is placed on a device of this process (it runs here). */
int kc_pipeline_stage_is_local(const kc_pipeline_options *o, int k);

kc_status kc_pipeline_run(const kc_model *model, const kc_pipeline_options *o,
                          const kc_tensor *const *inputs, int n_inputs, kc_tensor **outputs,
                          int n_outputs);

/* Ask one address for its status (JSON into buf) within timeout_ms; also
 * times a `probe_bytes` round trip for a bandwidth estimate (0: none).
 * KC_ERR_DEVICE when it does not answer. */
kc_status kc_cluster_query(kc_net *net, const kc_cluster_addr *addr, int timeout_ms,
                           size_t probe_bytes, char *buf, size_t size, double *probe_seconds);

#endif
