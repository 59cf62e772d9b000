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
    /* kc_session_options.release_packed_weights: released arrays are
     * re-read from the source files, which must not have changed. */
    char *weights_path;      /* kc_load_options.weights_path, or NULL */
    int64_t src_stamp[2][2]; /* size and mtime (ns) of path, weights_path */
    int n_sessions;          /* sessions borrowing the model */
    int exclusive;           /* one of them may release arrays */
    int n_released;          /* arrays freed (NULL) until re-read */
};

/* Free layer's weight w: a session holding its own packed copy is the
 * model's only user (release_packed_weights). */
void kc_model_release_weight(kc_model *model, kc_layer *layer, int w);
/* Re-read every released array from the model's files (a no-op when none
 * is released), so the model is whole again. */
kc_status kc_model_restore_weights(kc_model *model);

#endif
