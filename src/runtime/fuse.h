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
} kc_fused;

/* allowed = 0: no rewrites (disk-backed weights: a rewritten layer would
 * copy its weights into memory). */
kc_status kc_fuse(const kc_graph *graph, int allowed, kc_fused *out);
void kc_fused_free(kc_fused *fused, int n_nodes);

#endif
