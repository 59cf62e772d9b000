/* Streaming a model file to a worker (see upload.h). */
#include "net/upload.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/tensor.h"
#include "net/msg.h"

static kc_status kc_upload_piece(void *socket, const char *name, const char *sha,
                                 uint64_t offset, uint64_t total, kc_tensor *piece,
                                 int timeout_ms, const char *who, uint64_t *next_id,
                                 kc_net_rx *rx)
{
    char chunk_sha[KC_SHA256_HEX], header[512];
    size_t bytes = (size_t)piece->shape.dims[0];
    kc_sha256_mem(piece->data, bytes, chunk_sha);
    snprintf(header, sizeof header,
             "{\"sha256\":\"%s\",\"name\":\"%s\",\"offset\":%llu,\"total\":%llu,"
             "\"chunk_sha256\":\"%s\"}",
             sha, name, (unsigned long long)offset, (unsigned long long)total, chunk_sha);
    kc_wire_msg msg, reply;
    kc_msg_tensors(&msg, KC_WIRE_PUT_MODEL, ++*next_id, 0, &piece, 1);
    msg.text = header;
    msg.text_len = strlen(header);
    KC_TRY(kc_msg_roundtrip(socket, &msg, timeout_ms, 1 << 20, who, rx, &reply, NULL));
    cJSON *j = cJSON_ParseWithLength(reply.text, reply.text_len);
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "offset");
    int ok = reply.type == KC_WIRE_PUT_REPLY && cJSON_IsNumber(at) &&
             (uint64_t)at->valuedouble == offset + bytes;
    cJSON_Delete(j);
    return ok ? KC_OK : kc_fail(KC_ERR_FORMAT, "%s: unexpected answer to a model piece", who);
}

kc_status kc_upload_model(void *socket, const char *path, const char *sha, int timeout_ms,
                          const char *who, uint64_t *next_id, kc_net_rx *rx)
{
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    FILE *f = fopen(path, "rb");
    if (!f)
        return kc_fail(KC_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    int64_t dims[1] = {(int64_t)KC_UPLOAD_PIECE};
    kc_tensor *piece = NULL;
    kc_status s = fstat(fileno(f), &st) == 0 && st.st_size > 0
                      ? kc_tensor_new(KC_U8, 1, dims, &piece)
                      : kc_fail(KC_ERR_IO, "%s: empty or unreadable", path);
    uint64_t total = s == KC_OK ? (uint64_t)st.st_size : 0;
    for (uint64_t offset = 0; s == KC_OK && offset < total;) {
        size_t want = total - offset < KC_UPLOAD_PIECE ? (size_t)(total - offset) : KC_UPLOAD_PIECE;
        if (fread(piece->data, 1, want, f) != want) {
            s = kc_fail(KC_ERR_IO, "%s: read error (changed while being sent?)", path);
            break;
        }
        piece->shape.dims[0] = (int64_t)want;
        s = kc_upload_piece(socket, name, sha, offset, total, piece, timeout_ms, who, next_id, rx);
        offset += want;
    }
    kc_tensor_free(piece);
    fclose(f);
    return s;
}
