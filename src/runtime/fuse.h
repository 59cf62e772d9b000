/* Session-level graph rewrites: BatchNormalization folded into the
 * preceding convolution/Dense, activations fused into it (see fuse.c). */
#ifndef KC_FUSE_H
#define KC_FUSE_H

#include "graph/graph.h"

typedef struct kc_fused {
    int *alias;          /* per value: the value it shares storage with, or -1 */
    unsigned char *skip; /* per node: absorbed into its producer */
    kc_layer **shadow;   /* per node: rewritten copy of its layer, or NULL */
    int n_fused;
    int n_released;      /* shadow kernels freed by kc_fused_release_kernel */
    int *taken;          /* kc_fuse's taken: arrays moved or freed, or NULL */
} kc_fused;

/* allowed = 0: no rewrites (disk-backed weights: a rewritten layer would
 * copy its weights into memory). taken = NULL: a rewritten layer copies
 * its layer's arrays. Else the graph's arrays are the caller's to give
 * (release_packed_weights): a rewritten layer takes them over and an
 * absorbed BatchNormalization's are freed, each leaving its slot NULL
 * and counted in *taken. */
kc_status kc_fuse(const kc_graph *graph, int allowed, int *taken, kc_fused *out);
void kc_fused_free(kc_fused *fused, int n_nodes);
/* Free node's rewritten kernel (weight 0) once its kernel keeps a packed
 * copy of its own (kc_kernel_state.weights_cached): two copies of every
 * folded convolution would otherwise stay resident. Until kc_fuse runs
 * again, the node's shadow has no kernel array: the session redoes the
 * rewrites before any kernel could rebuild (a new plan). */
void kc_fused_release_kernel(kc_fused *fused, int node);

#endif
