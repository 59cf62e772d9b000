/* Building and unpacking wire messages from kerasc tensors. */
#ifndef KC_NET_MSG_H
#define KC_NET_MSG_H

#include "kerasc.h"
#include "net/transport.h"
#include "net/wire.h"

/* A message whose tensors are views of t[0..n) (which must outlive it). */
void kc_msg_tensors(kc_wire_msg *msg, kc_wire_type type, uint64_t id, uint32_t stage,
                    kc_tensor *const *t, int n);
/* A text message (ERROR: one line; JSON for the others). */
void kc_msg_text(kc_wire_msg *msg, kc_wire_type type, uint64_t id, uint32_t stage,
                 const char *text);
/* Copy the message's tensors into new float32 kc_tensors. */
kc_status kc_msg_to_tensors(const kc_wire_msg *msg, kc_tensor **out);

/* Send req on a DEALER and wait up to timeout_ms for one answer, decoded
 * into *reply (views into rx). An ERROR answer fails with its text (its
 * flags are kept in *flags when non-NULL); silence fails with
 * KC_ERR_DEVICE "... did not answer within N ms", naming `who`. */
kc_status kc_msg_roundtrip(void *socket, const kc_wire_msg *req, int timeout_ms,
                           size_t max_bytes, const char *who, kc_net_rx *rx,
                           kc_wire_msg *reply, uint32_t *flags);

#endif
