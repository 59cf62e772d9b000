/* A worker's store of model files streamed to it by clients (PUT_MODEL):
 * a private directory (mode 0700) of files named "<sha256>-<name>". A file
 * arrives in order, piece by piece, each piece checked against its own
 * SHA-256; it is written as "<sha256>.part" and renamed into place only
 * when the whole file's SHA-256 is the one the client promised, so a file
 * under its final name is always complete and verified. */
#ifndef KC_RECEIVE_H
#define KC_RECEIVE_H

#include <stddef.h>
#include <stdint.h>

#include "net/digest.h"
#include "net/wire.h"

#define KC_RECEIVE_MAX_PIECE ((size_t)16 << 20)

typedef struct kc_receiver {
    char dir[3072];
    uint64_t max_bytes;       /* 0: receiving is off */
    uint64_t keep_bytes;      /* the store's size cap: older files go first */
    /* The file now arriving (one at a time). */
    int fd;                   /* -1 when none */
    char sha[KC_SHA256_HEX];
    char name[256];
    uint64_t offset, total;
    kc_sha256 hash;
} kc_receiver;

/* dir NULL or "": receiving off. Creates dir (0700) when missing and
 * removes pieces a crash left behind. The store keeps at most
 * KC_RECEIVE_KEEP_FILES × max_bytes: before a new file arrives, the least
 * recently used ones are removed to make room, so an authorized client
 * cannot fill the disk. */
#define KC_RECEIVE_KEEP_FILES 4
kc_status kc_receiver_init(kc_receiver *r, const char *dir, uint64_t max_bytes);
void kc_receiver_free(kc_receiver *r);

/* The stored file for (sha, name) if one was received: KC_OK and its path;
 * KC_ERR_IO when there is none. */
kc_status kc_receiver_find(const kc_receiver *r, const char *sha, const char *name, char *path,
                           size_t size);

/* Complete files in the store (0 when receiving is off). */
int kc_receiver_count(const kc_receiver *r);

/* One PUT_MODEL message. *offset: the bytes now held (the next piece's
 * offset); *complete: the file is whole, verified and stored. */
kc_status kc_receiver_put(kc_receiver *r, const kc_wire_msg *m, uint64_t *offset, int *complete);

/* 1 when name is a plain file name (no '/', not "." or "..", printable). */
int kc_receive_name_valid(const char *name);

#endif
