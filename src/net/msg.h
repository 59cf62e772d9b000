/* Building and unpacking wire messages from kerasc tensors. */
#ifndef KC_NET_MSG_H
#define KC_NET_MSG_H

#include "kerasc.h"
#include "net/wire.h"

/* A message whose tensors are views of t[0..n) (which must outlive it). */
void kc_msg_tensors(kc_wire_msg *msg, kc_wire_type type, uint64_t id, uint32_t stage,
                    kc_tensor *const *t, int n);
/* A text message (ERROR: one line; JSON for the others). */
void kc_msg_text(kc_wire_msg *msg, kc_wire_type type, uint64_t id, uint32_t stage,
                 const char *text);
/* Copy the message's tensors into new float32 kc_tensors. */
kc_status kc_msg_to_tensors(const kc_wire_msg *msg, kc_tensor **out);

#endif
