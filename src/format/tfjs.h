/* TensorFlow.js layers models: model.json + binary weight shards
 * (keras-formats.md §4). */
#ifndef KC_TFJS_H
#define KC_TFJS_H

#include <cjson/cJSON.h>

#include "format/arrays.h"
#include "kerasc.h"

/* Load a layers model from the model.json at path (the name may be
 * anything, e.g. model.min.js: files are read through kc_fileio, which
 * unwraps JS-wrapped payloads). On success:
 *   *model_config  = the Keras model config ({"class_name", "config"}),
 *                    owned by *doc (free *doc with cJSON_Delete);
 *   *keras_version = from modelTopology.keras_version or generatedBy
 *                    (malloc'd, "unknown" if absent);
 *   arrays         = every weight of every manifest group, dequantized
 *                    (uint8/uint16 affine, float16) to float32.
 * A "graph-model" (TensorFlow graph, not Keras) is refused with
 * KC_ERR_UNSUPPORTED and a message saying so. */
kc_status kc_tfjs_load(const char *path, cJSON **doc, const cJSON **model_config,
                       char **keras_version, kc_array_list *arrays);

/* Supplies the bytes of one weight file named in the manifest. rel_path has
 * already been checked (relative, no '..' component); the reader returns a
 * malloc'd buffer of at most max_bytes bytes. */
typedef kc_status (*kc_tfjs_shard_reader)(void *ctx, const char *rel_path, size_t max_bytes,
                                          char **data, size_t *len);

/* kc_tfjs_load on a model.json already in memory (strict JSON; unwrap JS
 * first), with weight files from reader: lets the fuzzer and tests run the
 * manifest parser without files. name prefixes error messages. */
kc_status kc_tfjs_load_json(const char *name, const char *json, size_t len,
                            kc_tfjs_shard_reader reader, void *ctx, cJSON **doc,
                            const cJSON **model_config, char **keras_version,
                            kc_array_list *arrays);

#endif
