/* The model handle behind the public kc_model. */
#ifndef KC_MODEL_INTERNAL_H
#define KC_MODEL_INTERNAL_H

#include <cjson/cJSON.h>

#include "graph/graph.h"
#include "kerasc.h"

struct kc_model {
    char *path;
    const char *format;    /* static string */
    char *keras_version;
    int keras_major;
    cJSON *doc;            /* parsed config; layers borrow from it */
    kc_graph *graph;
    kc_param_counts params;
    int64_t stored_bytes;  /* weight bytes as stored (tfjs quantized) */
    /* The disk tier: file-backed mappings holding the weights (spill.h). */
    void **spill_maps;
    size_t *spill_lens;
    int n_spill_maps;
    int disk_weights;
};

#endif
