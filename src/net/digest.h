/* SHA-256 (libsodium) of model files and of the pieces a client streams to
 * a worker, so a worker runs exactly the file the client names. */
#ifndef KC_DIGEST_H
#define KC_DIGEST_H

#include <sodium.h>
#include <stddef.h>

#include "base/error.h"

#define KC_SHA256_HEX 65

kc_status kc_sha256_file(const char *path, char hex[KC_SHA256_HEX]);
/* The same, remembered per (device, inode, size, mtime): a warm worker
 * asked to load the same file again does not re-read gigabytes. */
kc_status kc_sha256_file_cached(const char *path, char hex[KC_SHA256_HEX]);
void kc_sha256_mem(const void *data, size_t len, char hex[KC_SHA256_HEX]);

/* Incremental hashing, for a file that arrives in pieces. */
typedef struct kc_sha256 {
    crypto_hash_sha256_state state;
} kc_sha256;
void kc_sha256_begin(kc_sha256 *h);
void kc_sha256_add(kc_sha256 *h, const void *data, size_t len);
void kc_sha256_end(kc_sha256 *h, char hex[KC_SHA256_HEX]);

/* 1 when text is exactly 64 lowercase hex digits. */
int kc_sha256_hex_valid(const char *text);

#endif
