/* Reading whole files with a size cap, and the JS-wrapper adapter.
 *
 * Some real models ship their tfjs files wrapped in JavaScript so that a
 * bundler can require() them (npm nsfwjs: model.min.js holds the model.json
 * as a JS object literal, group1-shard1of1.min.js holds the shard as a
 * base64 string). The adapter turns such a file back into the bytes the
 * tfjs loader expects, without executing anything: it finds the
 * `exports=` payload and converts a JS object literal to strict JSON, or
 * decodes a base64 string literal. */
#ifndef KC_FILEIO_H
#define KC_FILEIO_H

#include <stddef.h>

#include "kerasc.h"

/* Read a whole file (at most max_bytes) into a malloc'd buffer with a
 * trailing NUL (not counted in *len). */
kc_status kc_read_file(const char *path, size_t max_bytes, char **data, size_t *len);

/* 1 if the bytes look like a JS-wrapped module (start with "!function" or
 * contain "module.exports" near the start), else 0. */
int kc_jswrap_detect(const char *data, size_t len);
/* Extract the payload of a JS-wrapped module: a JSON text (from an object
 * literal) or raw bytes (from a base64 string literal). */
kc_status kc_jswrap_unwrap(const char *data, size_t len, char **payload, size_t *payload_len);
/* kc_jswrap_unwrap, also saying what it found: *is_json = 1 for JSON text
 * converted from an object literal, 0 for bytes decoded from base64. */
kc_status kc_jswrap_unwrap_kind(const char *data, size_t len, char **payload, size_t *payload_len,
                                int *is_json);

/* Read path; if it does not exist try path + ".min.js" and path + ".js";
 * if what was read is JS-wrapped, unwrap it. The tfjs loader reads every
 * file through this, so wrapped models need no special case there. */
kc_status kc_read_model_file(const char *path, size_t max_bytes, char **data, size_t *len);

#endif
