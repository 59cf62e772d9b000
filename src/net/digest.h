/* SHA-256 of a model file (libsodium), so a worker runs exactly the file the
 * client names. */
#ifndef KC_DIGEST_H
#define KC_DIGEST_H

#include "base/error.h"

#define KC_SHA256_HEX 65

kc_status kc_sha256_file(const char *path, char hex[KC_SHA256_HEX]);

#endif
