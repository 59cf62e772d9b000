/* Wire messages <-> kerasc tensors (see msg.h). */
#include "net/msg.h"

#include <string.h>

#include "base/clock.h"
#include "base/tensor.h"

void kc_msg_tensors(kc_wire_msg *msg, kc_wire_type type, uint64_t id, uint32_t stage,
                    kc_tensor *const *t, int n)
{
    memset(msg, 0, sizeof *msg);
    msg->type = type;
    msg->request_id = id;
    msg->stage = stage;
    msg->n_tensors = n;
    for (int i = 0; i < n; i++) {
        msg->tensors[i].dtype = t[i]->dtype;
        msg->tensors[i].shape = t[i]->shape;
        msg->tensors[i].data = t[i]->data;
        msg->tensors[i].bytes = (size_t)kc_shape_count(&t[i]->shape) * kc_dtype_size(t[i]->dtype);
    }
}

void kc_msg_text(kc_wire_msg *msg, kc_wire_type type, uint64_t id, uint32_t stage,
                 const char *text)
{
    memset(msg, 0, sizeof *msg);
    msg->type = type;
    msg->request_id = id;
    msg->stage = stage;
    msg->text = text;
    msg->text_len = text ? strlen(text) : 0;
}

kc_status kc_msg_to_tensors(const kc_wire_msg *msg, kc_tensor **out)
{
    for (int i = 0; i < msg->n_tensors; i++)
        out[i] = NULL;
    for (int i = 0; i < msg->n_tensors; i++) {
        const kc_wire_tensor *w = &msg->tensors[i];
        if (w->dtype != KC_F32 ||
            kc_tensor_new(KC_F32, w->shape.rank, w->shape.dims, &out[i]) != KC_OK) {
            for (int k = 0; k < i; k++) {
                kc_tensor_free(out[k]);
                out[k] = NULL;
            }
            return kc_fail(KC_ERR_FORMAT, "tensor %d: float32 expected", i);
        }
        memcpy(out[i]->data, w->data, w->bytes);
    }
    return KC_OK;
}

kc_status kc_msg_roundtrip(void *socket, const kc_wire_msg *req, int timeout_ms,
                           size_t max_bytes, const char *who, kc_net_rx *rx,
                           kc_wire_msg *reply, uint32_t *flags)
{
    if (flags)
        *flags = 0;
    KC_TRY(kc_net_send(socket, NULL, 0, req));
    double until = kc_now() + timeout_ms / 1000.0;
    for (;;) {
        int left = (int)((until - kc_now()) * 1000);
        if (left <= 0)
            return kc_fail(KC_ERR_DEVICE, "%s did not answer within %d ms", who, timeout_ms);
        int got = 0;
        KC_TRY(kc_net_recv(socket, 0, left, max_bytes, rx, &got));
        if (!got)
            continue;
        if (kc_wire_decode(rx->buf, rx->len, max_bytes, reply) != KC_OK)
            return kc_fail_context(KC_ERR_FORMAT, "%s sent a malformed message", who);
        if (reply->request_id != req->request_id)
            continue; /* a late answer to an earlier, abandoned request */
        if (reply->type == KC_WIRE_ERROR) {
            if (flags)
                *flags = reply->flags;
            return kc_fail(KC_ERR_DEVICE, "%.*s", (int)reply->text_len, reply->text);
        }
        return KC_OK;
    }
}
