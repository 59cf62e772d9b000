/* Keras masks at run time: which timesteps of a (batch, time, ...) value
 * are real. Masking and Embedding(mask_zero=True) create a mask; layers
 * that support masking pass it on; recurrent layers consume it. */
#ifndef KC_MASK_H
#define KC_MASK_H

#include "base/tensor.h"
#include "graph/graph.h"

/* After a node ran: the mask of its output 0, or NULL. in_mask is the
 * mask of its input 0. The returned mask is either in_mask itself
 * (propagated) or newly allocated (*owned = 1). */
unsigned char *kc_mask_after(const kc_node *node, const float *in0, const kc_shape *in0_shape,
                             const kc_shape *out0_shape, unsigned char *in_mask, int *owned);

#endif
