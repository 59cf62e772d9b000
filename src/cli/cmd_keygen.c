/* `kerasc keygen NAME [--force]`: a CURVE key pair for a worker or client.
 * Prints only the public key on stdout so scripts can capture it. */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "cli/commands.h"
#include "kerasc.h"
#include "net/keys.h"

#define KC_KEYGEN_USAGE "usage: kerasc keygen NAME [--force]"

int kc_cmd_keygen(int argc, char **argv)
{
    const char *name = NULL;
    int force = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "kerasc keygen: unknown option '%s' (" KC_KEYGEN_USAGE ")\n", argv[i]);
            return 2;
        } else if (!name) {
            name = argv[i];
        } else {
            fprintf(stderr, "kerasc keygen: more than one name given (" KC_KEYGEN_USAGE ")\n");
            return 2;
        }
    }
    if (!name || !*name) {
        fprintf(stderr, "kerasc keygen: no name given (" KC_KEYGEN_USAGE ")\n");
        return 2;
    }
    kc_keypair kp;
    kc_status st = kc_keypair_generate(&kp);
    if (st == KC_OK)
        st = kc_keypair_save(&kp, name, force);
    if (st != KC_OK) {
        sodium_memzero(&kp, sizeof kp);
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
        return 1;
    }
    printf("%s\n", kp.public_z85);
    sodium_memzero(&kp, sizeof kp);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "kerasc: error: cannot write the public key to stdout\n");
        return 1;
    }
    fprintf(stderr, "kerasc keygen: wrote %s.key (secret, mode 0600) and %s.pub\n", name, name);
    return 0;
}
