/* Format detection from content (magic bytes), never from the extension:
 * real files named .keras are sometimes HDF5 and the reverse. */
#ifndef KC_DETECT_H
#define KC_DETECT_H

#include "kerasc.h"

typedef enum kc_file_kind {
    KC_FILE_UNKNOWN = 0,
    KC_FILE_ZIP,        /* PK\x03\x04: Keras 3 .keras archive */
    KC_FILE_HDF5,       /* \x89HDF\r\n\x1a\n at 0 or a power-of-two user block */
    KC_FILE_JSON,       /* '{' after whitespace: tfjs model.json or an architecture */
    KC_FILE_JSWRAP,     /* a JS-wrapped tfjs model (npm bundles) */
    KC_FILE_DIRECTORY,  /* unzipped Keras 3 archive or a tfjs model directory */
    KC_FILE_NPZ_PICKLE  /* never loaded */
} kc_file_kind;

/* Detect the kind of path; errors (missing file) set the message. */
kc_status kc_detect_file(const char *path, kc_file_kind *kind);
const char *kc_file_kind_name(kc_file_kind kind);

#endif
