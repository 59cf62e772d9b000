/* The Keras 3 archive (keras-formats.md §1.1): a zip, or the same three
 * files in a directory. */
#ifndef KC_KERAS3_H
#define KC_KERAS3_H

#include <stddef.h>

#include "format/h5.h"
#include "kerasc.h"

typedef struct kc_keras3_archive {
    char *config_json;     /* config.json text (NUL-terminated) */
    size_t config_len;
    char *metadata_json;   /* metadata.json text, NULL if absent */
    size_t metadata_len;
    kc_h5 *weights;        /* open weights file */
} kc_keras3_archive;

/* Open a .keras zip (is_dir = 0) or an unzipped directory (is_dir = 1).
 * The NPZ weights variant (pickled dicts) is refused. */
kc_status kc_keras3_open(const char *path, int is_dir, kc_keras3_archive *out);
void kc_keras3_close(kc_keras3_archive *archive);

#endif
