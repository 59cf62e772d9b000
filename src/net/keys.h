/* CURVE keys (ZeroMQ's CurveZMQ, libsodium): key pairs on disk and the
 * authorized-keys list a worker accepts.
 *
 * Files written by `kerasc keygen NAME`:
 *   NAME.key  mode 0600: "public = <40 Z85 chars>\nsecret = <40 Z85 chars>\n"
 *   NAME.pub  mode 0644: "<40 Z85 chars>\n"
 * authorized_keys: one Z85 public key per line (first 40 characters; the
 * rest of the line is a free-form comment); blank lines and lines starting
 * with '#' are ignored. */
#ifndef KC_KEYS_H
#define KC_KEYS_H

#include <stddef.h>

#include "base/error.h"

#define KC_KEY_Z85_LEN 40
#define KC_KEYS_MAX 1024

typedef struct kc_keypair {
    char public_z85[KC_KEY_Z85_LEN + 1];
    char secret_z85[KC_KEY_Z85_LEN + 1];
} kc_keypair;

typedef struct kc_key_list {
    char (*keys)[KC_KEY_Z85_LEN + 1];
    int n;
} kc_key_list;

/* New pair (zmq_curve_keypair). */
kc_status kc_keypair_generate(kc_keypair *out);
/* Write NAME.key (0600, atomically, refuses to overwrite unless force) and
 * NAME.pub. */
kc_status kc_keypair_save(const kc_keypair *kp, const char *name, int force);
/* Read NAME.key (or a path ending in .key); refuses a secret file readable
 * by group/others. */
kc_status kc_keypair_load(const char *path, kc_keypair *out);
/* Read a .pub file or one Z85 key given inline. */
kc_status kc_public_key_load(const char *path_or_key, char out[KC_KEY_Z85_LEN + 1]);
/* Parse an authorized_keys file; every key is validated (Z85 decodes to 32
 * bytes). */
kc_status kc_key_list_load(const char *path, kc_key_list *out);
int kc_key_list_contains(const kc_key_list *list, const char *public_z85);
void kc_key_list_free(kc_key_list *list);
/* Is this a valid Z85-encoded 32-byte key? */
int kc_key_valid(const char *z85);

#endif
