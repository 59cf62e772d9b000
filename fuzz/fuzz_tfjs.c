/* libFuzzer target: the JS-wrapper adapter and the tfjs manifest parser.
 *
 * Input layout: TEXT [ '\0' SHARDS ]
 *   TEXT   a model.json, or a JS-wrapped file (object literal or base64
 *          shard); it goes through kc_jswrap_detect/unwrap, then the JSON
 *          (unwrapped or not) through kc_tfjs_load_json.
 *   SHARDS records <len byte><len bytes>, one per manifest path in order
 *          (len 255 = "the rest"), so the fuzzer controls where the byte
 *          stream is cut and weights can straddle shards.
 * No file is touched: shards come from memory through the reader hook.
 *
 * Oracles besides the sanitizers: a successful object-literal unwrap must
 * be JSON that cJSON accepts, without embedded NULs; a successful load
 * must give arrays whose element counts match their shapes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "format/arrays.h"
#include "format/fileio.h"
#include "format/tfjs.h"

typedef struct fuzz_shards {
    const uint8_t *data;
    size_t len;
    size_t pos;
} fuzz_shards;

static kc_status fuzz_reader(void *ctx, const char *rel_path, size_t max_bytes, char **data,
                             size_t *len)
{
    fuzz_shards *s = ctx;
    (void)rel_path;
    size_t n = 0;
    if (s->pos < s->len) {
        n = s->data[s->pos++];
        size_t left = s->len - s->pos;
        if (n == 255 || n > left)
            n = left;
    }
    if (n > max_bytes)
        return kc_fail(KC_ERR_LIMIT, "%s: too big", rel_path);
    *data = malloc(n + 1);
    if (!*data)
        return KC_ERR_NOMEM;
    memcpy(*data, s->data + s->pos, n);
    s->pos += n;
    *len = n;
    return KC_OK;
}

static void fuzz_check_arrays(const kc_array_list *arrays)
{
    volatile float sink = 0;
    for (int i = 0; i < arrays->n; i++) {
        const kc_named_array *a = &arrays->items[i];
        int64_t count = kc_shape_count(&a->shape);
        if (count < 0 || !a->name || !a->data || a->stored_bytes < 0)
            abort();
        /* Reads every value: ASan flags a short buffer. */
        for (int64_t k = 0; k < count; k++)
            sink += a->data[k];
    }
    (void)sink;
}

static void fuzz_load(const char *json, size_t len, const uint8_t *shards, size_t shards_len)
{
    fuzz_shards s = {shards, shards_len, 0};
    cJSON *doc = NULL;
    const cJSON *config = NULL;
    char *version = NULL;
    kc_array_list arrays = {0};
    kc_status status = kc_tfjs_load_json("fuzz.json", json, len, fuzz_reader, &s, &doc, &config,
                                         &version, &arrays);
    if (status == KC_OK) {
        if (!doc || !config || !version)
            abort();
        fuzz_check_arrays(&arrays);
    } else if (doc || version || arrays.n || kc_last_error()[0] == '\0') {
        abort(); /* failures must leave nothing behind and say why */
    }
    cJSON_Delete(doc);
    free(version);
    kc_array_list_free(&arrays);
}

/* The unwrap oracle: object literals must come out as JSON cJSON reads. */
static void fuzz_check_json(const char *payload, size_t len)
{
    if (strlen(payload) != len)
        abort();
    cJSON *doc = cJSON_ParseWithLength(payload, len);
    if (!doc)
        abort();
    cJSON_Delete(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t text_len = nul ? (size_t)(nul - data) : size;
    const uint8_t *shards = nul ? nul + 1 : data + size;
    size_t shards_len = size - text_len - (nul ? 1 : 0);
    const char *text = (const char *)data;

    (void)kc_jswrap_detect(text, text_len);
    char *payload = NULL;
    size_t payload_len = 0;
    int is_json = 0;
    if (kc_jswrap_unwrap_kind(text, text_len, &payload, &payload_len, &is_json) == KC_OK) {
        if (is_json)
            fuzz_check_json(payload, payload_len);
        fuzz_load(payload, payload_len, shards, shards_len);
        free(payload);
    } else if (payload || payload_len) {
        abort();
    }
    fuzz_load(text, text_len, shards, shards_len);
    return 0;
}
