/* File digests (see digest.h). */
#include "net/digest.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kc_status kc_sha256_file(const char *path, char hex[KC_SHA256_HEX])
{
    if (sodium_init() < 0)
        return kc_fail(KC_ERR_IO, "libsodium cannot start");
    FILE *f = fopen(path, "rb");
    if (!f)
        return kc_fail(KC_ERR_IO, "%s: %s", path, strerror(errno));
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    unsigned char *buf = malloc(1 << 20);
    if (!buf) {
        fclose(f);
        return KC_ERR_NOMEM;
    }
    size_t n;
    while ((n = fread(buf, 1, 1 << 20, f)) > 0)
        crypto_hash_sha256_update(&st, buf, n);
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad)
        return kc_fail(KC_ERR_IO, "%s: read error", path);
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&st, digest);
    sodium_bin2hex(hex, KC_SHA256_HEX, digest, sizeof digest);
    return KC_OK;
}
