/* kerasc's wire format between client and workers (carried in one ZeroMQ
 * frame). Only plain data crosses the network: a header, tensor
 * descriptors and raw little-endian tensor bytes. No pointers, no graphs,
 * no code. Every field is validated before any byte is used.
 *
 * Layout (little-endian):
 *   header, 40 bytes:
 *     u32 magic "KCW1" (bytes 'K','C','W','1')
 *     u16 version (1)   u16 type (kc_wire_type)
 *     u64 request_id    (nonzero; strictly increasing per sender: replays
 *                        are rejected by the receiver, see kc_wire_replay)
 *     u32 stage         u32 n_tensors (<= KC_WIRE_MAX_TENSORS)
 *     u64 body_bytes    (bytes after the descriptors, must equal the rest)
 *     u32 flags         u32 text_bytes (UTF-8 text after the descriptors,
 *                        before tensor data: error message or JSON)
 *   n_tensors descriptors, 8 + 8*rank bytes each:
 *     u8 dtype (kc_dtype numbering of kerasc.h)  u8 rank (<= KC_MAX_RANK)
 *     u16 zero  u32 zero  i64 dims[rank] (each >= 0)
 *   text_bytes of text (not NUL-terminated on the wire)
 *   tensor data, each tensor's count * dtype size bytes, concatenated
 * body_bytes = text_bytes + sum of tensor data bytes. */
#ifndef KC_WIRE_H
#define KC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/tensor.h"

#define KC_WIRE_MAGIC 0x3157434bu /* "KCW1" read as little-endian u32 */
#define KC_WIRE_VERSION 1
#define KC_WIRE_HEADER_BYTES 40
#define KC_WIRE_MAX_TENSORS 64
#define KC_WIRE_MAX_TEXT ((size_t)1 << 20)

typedef enum kc_wire_type {
    KC_WIRE_STATUS = 1,      /* client -> worker: report yourself (text: none) */
    KC_WIRE_STATUS_REPLY,    /* text: JSON status */
    KC_WIRE_LOAD_STAGE,      /* text: JSON stage spec */
    KC_WIRE_LOAD_REPLY,      /* text: JSON (ok) */
    KC_WIRE_RUN,             /* tensors: the stage's inputs */
    KC_WIRE_RESULT,          /* tensors: the stage's (or the pipeline's) outputs */
    KC_WIRE_ERROR,           /* text: one-line message */
    KC_WIRE_PING,
    KC_WIRE_PONG,
    KC_WIRE_PUT_MODEL,       /* text: JSON {sha256,name,offset,total,chunk_sha256};
                                tensor: the piece of the model file, u8 [n] */
    KC_WIRE_PUT_REPLY,       /* text: JSON {ok,offset} */
    KC_WIRE_TYPE_END
} kc_wire_type;

/* flags: an ERROR answering LOAD_STAGE that means "this worker has no copy
 * of that model file: stream it (PUT_MODEL) and ask again". */
#define KC_WIRE_FLAG_NEED_MODEL 1u

typedef struct kc_wire_tensor {
    kc_dtype dtype;
    kc_shape shape;
    const void *data;        /* view into the decoded buffer */
    size_t bytes;
} kc_wire_tensor;

typedef struct kc_wire_msg {
    kc_wire_type type;
    uint64_t request_id;
    uint32_t stage;
    uint32_t flags;
    const char *text;        /* view, text_len bytes, not NUL-terminated */
    size_t text_len;
    kc_wire_tensor tensors[KC_WIRE_MAX_TENSORS];
    int n_tensors;
} kc_wire_msg;

/* Decode buf (views into it, no copies). max_bytes caps the whole message
 * (the caller's limit for this stage). One-line errors. */
kc_status kc_wire_decode(const void *buf, size_t len, size_t max_bytes, kc_wire_msg *out);

/* Bytes kc_wire_encode needs for this message. */
size_t kc_wire_size(const kc_wire_msg *msg);
/* Encode into buf (size >= kc_wire_size(msg)); returns bytes written or 0
 * on an invalid message (bad dtype/rank/dims, too many tensors). */
size_t kc_wire_encode(const kc_wire_msg *msg, void *buf, size_t size);

/* A tensor's expected dtype and shape (dims < 0: any size, e.g. batch). */
typedef struct kc_wire_expect {
    kc_dtype dtype;
    kc_shape shape;
} kc_wire_expect;
/* Check a decoded message's tensors against what a stage expects; the
 * error names the tensor index and what differs. max_batch caps dims[0]
 * (<= 0: no cap). Inputs whose expected dims[0] is free must agree on it. */
kc_status kc_wire_check(const kc_wire_msg *msg, const kc_wire_expect *expect, int n_expect,
                        int64_t max_batch);

/* Replay protection per sender: accepts request_id only if it is greater
 * than every id accepted before from this sender (window of one). */
typedef struct kc_wire_replay {
    uint64_t last_id;
} kc_wire_replay;
int kc_wire_replay_accept(kc_wire_replay *r, uint64_t request_id);

#endif
