/* Streaming a model file to a worker that has no copy of it (PUT_MODEL):
 * pieces of 4 MiB in order, each with its own SHA-256 and the whole file's,
 * each acknowledged before the next, so a slow worker or link paces the
 * client and a lost piece is an error, never a silently short file. */
#ifndef KC_UPLOAD_H
#define KC_UPLOAD_H

#include <stdint.h>

#include "net/digest.h"
#include "net/transport.h"

#define KC_UPLOAD_PIECE ((size_t)4 << 20)

/* *next_id: the sender's request ids (strictly increasing per socket). */
kc_status kc_upload_model(void *socket, const char *path, const char *sha, int timeout_ms,
                          const char *who, uint64_t *next_id, kc_net_rx *rx);

#endif
