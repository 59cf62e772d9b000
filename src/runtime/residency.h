/* Weight residency for one device: which layers' weights stay in device
 * memory across runs and which stream in through a ring of slots each run,
 * inside a hard byte budget that also holds the activations and the
 * kernels' workspace.
 *
 * The cost model: a streamed layer costs its bytes ÷ link bandwidth on the
 * copy stream, hidden behind compute when the ring is at least two deep.
 * Layers that do little work per weight byte (big Dense layers) are the
 * ones whose transfer cannot hide, so they are kept resident first;
 * convolutions reuse every weight many times and stream well. Every
 * feasible ring slot size is tried (layers bigger than the slot must be
 * resident), the predicted run time max(compute, streamed ÷ bandwidth)
 * (or their sum with a single slot, which cannot overlap) decides. */
#ifndef KC_RESIDENCY_H
#define KC_RESIDENCY_H

#include <stddef.h>

#include "base/error.h"

typedef enum kc_wmode { KC_WMODE_NONE, KC_WMODE_RESIDENT, KC_WMODE_STREAMED } kc_wmode;

/* One device node with weights, as the planner sees it. */
typedef struct kc_res_item {
    const char *name;   /* layer name, for messages */
    size_t bytes;       /* its weights in device memory (aligned) */
    double flops;       /* per run */
    kc_wmode mode;      /* out */
    size_t offset;      /* out: in the resident block */
    int seq;            /* out: order among the streamed items */
} kc_res_item;

typedef struct kc_res_request {
    const char *device;       /* "/GPU:0", for messages */
    size_t budget;            /* bytes; 0 = unlimited (all resident) */
    size_t fixed_bytes;       /* activations + workspace */
    size_t activation_bytes;  /* (part of fixed_bytes, for messages) */
    int variables_on_host;    /* 0: variables live on the device (all resident) */
    int max_depth;            /* ring depth cap (0 = 3) */
    double link_bytes_per_s;  /* measured upload bandwidth */
    double flops_per_s;       /* the device's nominal compute speed */
} kc_res_request;

typedef struct kc_res_plan {
    size_t resident_bytes;
    size_t slot_bytes;        /* one ring slot */
    int depth;                /* ring slots (0 when nothing streams) */
    size_t device_bytes;      /* fixed + resident + depth × slot */
    size_t streamed_bytes;    /* per run */
    int n_streamed;
    double predicted_s;
} kc_res_plan;

/* Decide every item's mode. Errors: budget below the minimum (the message
 * names the minimum and what it is made of). */
kc_status kc_residency_plan(const kc_res_request *req, kc_res_item *items, int n_items,
                            kc_res_plan *out);

#endif
