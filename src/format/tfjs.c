/* TensorFlow.js layers models (keras-formats.md §4): model.json, whose
 * weightsManifest lists groups of weights stored back to back in one byte
 * stream that is cut into shard files. */
#include "format/tfjs.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "format/fileio.h"

/* model.json holds only the architecture: real ones are well under 1 MiB. */
#define KC_TFJS_MAX_JSON_BYTES ((size_t)256 << 20)
/* One group's shards together; real models are far below this. */
#define KC_TFJS_MAX_GROUP_BYTES (UINT64_C(4) << 30)
/* Decoded float32 values over all weights (4 GiB of floats): a uint8
 * manifest decodes to 4x its bytes, so bound the sum, not just each group. */
#define KC_TFJS_MAX_TOTAL_VALUES (INT64_C(1) << 30)

/* One manifest entry, checked, before its bytes are read. */
typedef struct kc_tfjs_spec {
    const char *name; /* borrowed from the cJSON document */
    kc_shape shape;
    int64_t count;
    kc_dtype decoded; /* KC_F32, KC_I32 or KC_BOOL: the manifest's dtype */
    kc_dtype stored;  /* the same, or KC_U8 / KC_U16 / KC_F16 if quantized */
    double min, scale;
    uint64_t offset, bytes;
} kc_tfjs_spec;

/* ------------------------------------------------------------ manifest */

static kc_status kc_tfjs_parse_shape(const cJSON *shape, kc_tfjs_spec *spec)
{
    if (!cJSON_IsArray(shape))
        return kc_fail(KC_ERR_FORMAT, "'shape' is not an array");
    int rank = cJSON_GetArraySize(shape);
    if (rank > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "rank %d above %d", rank, KC_MAX_RANK);
    spec->shape.rank = rank;
    int i = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape) {
        double d = cJSON_IsNumber(dim) ? dim->valuedouble : -1.0;
        /* -1 (unknown) has no place in a stored weight. */
        if (!(d >= 0.0 && d <= (double)KC_MAX_ELEMENTS && d == floor(d)))
            return kc_fail(KC_ERR_FORMAT, "shape dimension %d is not a non-negative integer", i);
        spec->shape.dims[i++] = (int64_t)d;
    }
    spec->count = kc_shape_count(&spec->shape);
    return spec->count < 0 ? KC_ERR_LIMIT : KC_OK;
}

static kc_status kc_tfjs_parse_dtype(const cJSON *dtype, kc_dtype *out)
{
    const char *s = cJSON_GetStringValue(dtype);
    if (!s)
        return kc_fail(KC_ERR_FORMAT, "'dtype' is not a string");
    if (strcmp(s, "float32") == 0)
        *out = KC_F32;
    else if (strcmp(s, "int32") == 0)
        *out = KC_I32;
    else if (strcmp(s, "bool") == 0)
        *out = KC_BOOL;
    else if (strcmp(s, "string") == 0 || strcmp(s, "complex64") == 0)
        /* string sizes are only known by scanning, so every later offset
         * would depend on them: refuse the model, not just the weight. */
        return kc_fail(KC_ERR_UNSUPPORTED, "dtype '%s' weights are not supported", s);
    else
        return kc_fail(KC_ERR_FORMAT, "unknown dtype '%s'", s);
    return KC_OK;
}

static kc_status kc_tfjs_quant_number(const cJSON *quant, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(quant, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return kc_fail(KC_ERR_FORMAT, "quantization '%s' is missing or not a finite number", key);
    *out = v->valuedouble;
    return KC_OK;
}

static kc_status kc_tfjs_parse_quant(const cJSON *quant, kc_tfjs_spec *spec)
{
    if (!cJSON_IsObject(quant))
        return kc_fail(KC_ERR_FORMAT, "'quantization' is not an object");
    const char *q = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(quant, "dtype"));
    if (!q)
        return kc_fail(KC_ERR_FORMAT, "quantization has no dtype");
    if (strcmp(q, "float16") == 0) {
        /* tfjs decodes float16 only into float32 (io_utils.ts). */
        if (spec->decoded != KC_F32)
            return kc_fail(KC_ERR_FORMAT, "float16 quantization of a %s weight",
                           kc_dtype_name(spec->decoded));
        spec->stored = KC_F16;
        return KC_OK;
    }
    if (strcmp(q, "uint8") == 0)
        spec->stored = KC_U8;
    else if (strcmp(q, "uint16") == 0)
        spec->stored = KC_U16;
    else
        return kc_fail(KC_ERR_FORMAT, "unknown quantization dtype '%s'", q);
    if (spec->decoded == KC_BOOL)
        return kc_fail(KC_ERR_FORMAT, "quantization of a bool weight");
    KC_TRY(kc_tfjs_quant_number(quant, "min", &spec->min));
    return kc_tfjs_quant_number(quant, "scale", &spec->scale);
}

static kc_status kc_tfjs_parse_entry(const cJSON *entry, kc_tfjs_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    if (!cJSON_IsObject(entry))
        return kc_fail(KC_ERR_FORMAT, "not an object");
    spec->name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "name"));
    if (!spec->name)
        return kc_fail(KC_ERR_FORMAT, "no 'name' string");
    KC_TRY(kc_tfjs_parse_shape(cJSON_GetObjectItemCaseSensitive(entry, "shape"), spec));
    KC_TRY(kc_tfjs_parse_dtype(cJSON_GetObjectItemCaseSensitive(entry, "dtype"), &spec->decoded));
    spec->stored = spec->decoded;
    const cJSON *quant = cJSON_GetObjectItemCaseSensitive(entry, "quantization");
    if (quant && !cJSON_IsNull(quant))
        KC_TRY(kc_tfjs_parse_quant(quant, spec));
    /* count <= 2^40 and element size <= 4: no overflow. */
    spec->bytes = (uint64_t)spec->count * kc_dtype_size(spec->stored);
    return KC_OK;
}

/* Checks every entry of a group and lays them out back to back. */
static kc_status kc_tfjs_parse_weights(const cJSON *weights, kc_tfjs_spec **specs, int *n,
                                       uint64_t *need)
{
    *specs = NULL;
    *n = 0;
    *need = 0;
    if (!cJSON_IsArray(weights))
        return kc_fail(KC_ERR_FORMAT, "'weights' is not an array");
    int count = cJSON_GetArraySize(weights);
    kc_tfjs_spec *out = kc_calloc((size_t)count, sizeof *out);
    if (!out)
        return KC_ERR_NOMEM;
    int i = 0;
    const cJSON *entry;
    cJSON_ArrayForEach(entry, weights) {
        kc_tfjs_spec *spec = &out[i];
        kc_status status = kc_tfjs_parse_entry(entry, spec);
        if (status == KC_OK && spec->bytes > KC_TFJS_MAX_GROUP_BYTES - *need)
            status = kc_fail(KC_ERR_LIMIT, "group holds more than %llu bytes",
                             (unsigned long long)KC_TFJS_MAX_GROUP_BYTES);
        if (status != KC_OK) {
            /* name points into the cJSON document, not into out. */
            const char *name = spec->name;
            free(out);
            if (name)
                return kc_fail_context(status, "weight '%s'", name);
            return kc_fail_context(status, "weight %d", i);
        }
        spec->offset = *need;
        *need += spec->bytes;
        i++;
    }
    *specs = out;
    *n = count;
    return KC_OK;
}

/* ------------------------------------------------------------- shards */

/* Manifest paths must stay inside the model's directory: a model file must
 * not make kerasc read /etc/passwd or ../../secret as "weights". */
static kc_status kc_tfjs_check_path(const char *rel)
{
    if (!*rel)
        return kc_fail(KC_ERR_FORMAT, "empty weight file path");
    if (rel[0] == '/')
        return kc_fail(KC_ERR_FORMAT, "weight file path '%s' is absolute", rel);
    for (const char *p = rel; *p;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return kc_fail(KC_ERR_FORMAT, "weight file path '%s' leaves the model directory", rel);
        p += n;
        if (*p == '/')
            p++;
    }
    return KC_OK;
}

/* Appends one shard to the group's bytes. */
static kc_status kc_tfjs_append(unsigned char **bytes, size_t *have, char *shard, size_t len)
{
    if (!*bytes) {
        *bytes = (unsigned char *)shard;
        *have = len;
        return KC_OK;
    }
    unsigned char *grown = kc_realloc_array(*bytes, *have + len, 1);
    if (!grown) {
        free(shard);
        return KC_ERR_NOMEM;
    }
    memcpy(grown + *have, shard, len);
    free(shard);
    *bytes = grown;
    *have += len;
    return KC_OK;
}

/* Reads a group's files in order into one buffer. The byte stream may be
 * cut anywhere (a weight can straddle two files), so the simplest correct
 * reading is to join them before slicing. */
static kc_status kc_tfjs_read_group(const cJSON *paths, kc_tfjs_shard_reader reader, void *ctx,
                                    unsigned char **bytes, size_t *have)
{
    *bytes = NULL;
    *have = 0;
    if (!cJSON_IsArray(paths))
        return kc_fail(KC_ERR_FORMAT, "'paths' is not an array");
    const cJSON *item;
    cJSON_ArrayForEach(item, paths) {
        const char *rel = cJSON_GetStringValue(item);
        kc_status status = rel ? kc_tfjs_check_path(rel)
                               : kc_fail(KC_ERR_FORMAT, "a weight file path is not a string");
        char *shard = NULL;
        size_t len = 0;
        size_t room = (size_t)(KC_TFJS_MAX_GROUP_BYTES - *have);
        if (status == KC_OK)
            status = reader(ctx, rel, room, &shard, &len);
        if (status == KC_OK && len > room) { /* a reader that ignored its cap */
            free(shard);
            status = kc_fail(KC_ERR_LIMIT, "%s: more than %zu bytes", rel, room);
        }
        if (status == KC_OK)
            status = kc_tfjs_append(bytes, have, shard, len);
        if (status != KC_OK) {
            free(*bytes);
            *bytes = NULL;
            return status;
        }
    }
    return KC_OK;
}

/* ------------------------------------------------------------- decode */

static uint32_t kc_tfjs_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t kc_tfjs_le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* What JS does when it stores Math.round(x) into an Int32Array: round half
 * up, then wrap modulo 2^32. */
static double kc_tfjs_js_int32(double x)
{
    if (!isfinite(x)) /* ToInt32(+-Infinity) is 0 */
        return 0.0;
    double t = fmod(floor(x + 0.5), 4294967296.0);
    if (t < 0)
        t += 4294967296.0;
    return t >= 2147483648.0 ? t - 4294967296.0 : t;
}

/* q * scale + min as tfjs computes it: in double, then rounded to float32
 * once. Two statements so no compiler fuses them into an FMA, which would
 * round differently from JS. */
static float kc_tfjs_affine(double q, const kc_tfjs_spec *spec)
{
    double x = q * spec->scale;
    x = x + spec->min;
    if (spec->decoded == KC_I32)
        x = kc_tfjs_js_int32(x);
    return (float)x;
}

static void kc_tfjs_decode_values(const kc_tfjs_spec *spec, const unsigned char *src, float *dst)
{
    for (int64_t i = 0; i < spec->count; i++) {
        switch (spec->stored) {
        case KC_F32: {
            uint32_t u = kc_tfjs_le32(src + 4 * i);
            memcpy(&dst[i], &u, sizeof u);
            break;
        }
        case KC_I32: {
            uint32_t u = kc_tfjs_le32(src + 4 * i);
            int32_t v;
            memcpy(&v, &u, sizeof v); /* two's complement, without impl-defined casts */
            dst[i] = (float)v;
            break;
        }
        case KC_BOOL: dst[i] = src[i] ? 1.0f : 0.0f; break;
        case KC_U8: dst[i] = kc_tfjs_affine(src[i], spec); break;
        case KC_U16: dst[i] = kc_tfjs_affine(kc_tfjs_le16(src + 2 * i), spec); break;
        case KC_F16: dst[i] = kc_half_to_float(kc_tfjs_le16(src + 2 * i)); break;
        default: dst[i] = 0.0f; break; /* parse_entry admits no other dtype */
        }
    }
}

static kc_status kc_tfjs_decode(const kc_tfjs_spec *spec, const unsigned char *group_bytes,
                                kc_named_array *out)
{
    memset(out, 0, sizeof *out);
    out->name = kc_strdup(spec->name);
    out->data = kc_calloc((size_t)spec->count, sizeof(float));
    if (!out->name || !out->data) {
        free(out->name);
        free(out->data);
        return KC_ERR_NOMEM;
    }
    out->shape = spec->shape;
    out->stored_dtype = spec->stored;
    out->stored_bytes = (int64_t)spec->bytes;
    kc_tfjs_decode_values(spec, group_bytes + spec->offset, out->data);
    return KC_OK;
}

/* -------------------------------------------------------------- groups */

static kc_status kc_tfjs_decode_group(const kc_tfjs_spec *specs, int n, const unsigned char *bytes,
                                      int64_t *total_values, kc_array_list *arrays)
{
    for (int i = 0; i < n; i++) {
        if (specs[i].count > KC_TFJS_MAX_TOTAL_VALUES - *total_values)
            return kc_fail(KC_ERR_LIMIT, "weights hold more than %lld values in all",
                           (long long)KC_TFJS_MAX_TOTAL_VALUES);
        *total_values += specs[i].count;
        if (arrays->n == INT_MAX)
            return kc_fail(KC_ERR_LIMIT, "more than %d weights", INT_MAX);
        KC_TRY(kc_grow((void **)&arrays->items, &arrays->cap, (size_t)arrays->n + 1,
                       sizeof *arrays->items));
        KC_TRY(kc_tfjs_decode(&specs[i], bytes, &arrays->items[arrays->n]));
        arrays->n++;
    }
    return KC_OK;
}

static kc_status kc_tfjs_load_group(const cJSON *group, kc_tfjs_shard_reader reader, void *ctx,
                                    int64_t *total_values, kc_array_list *arrays)
{
    if (!cJSON_IsObject(group))
        return kc_fail(KC_ERR_FORMAT, "not an object");
    kc_tfjs_spec *specs;
    int n;
    uint64_t need;
    KC_TRY(kc_tfjs_parse_weights(cJSON_GetObjectItemCaseSensitive(group, "weights"), &specs, &n,
                                 &need));
    unsigned char *bytes;
    size_t have;
    kc_status status = kc_tfjs_read_group(cJSON_GetObjectItemCaseSensitive(group, "paths"), reader,
                                          ctx, &bytes, &have);
    if (status == KC_OK && have != need)
        status = kc_fail(KC_ERR_FORMAT, "weights manifest needs %llu bytes, shards hold %zu",
                         (unsigned long long)need, have);
    if (status == KC_OK)
        status = kc_tfjs_decode_group(specs, n, bytes, total_values, arrays);
    free(bytes);
    free(specs);
    return status;
}

static int kc_tfjs_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The binder matches weights by name, so two with one name would make the
 * result depend on which it finds first: refuse. Sorting keeps this
 * O(n log n) for hostile manifests with many entries. */
static kc_status kc_tfjs_check_unique(const kc_array_list *arrays)
{
    if (arrays->n < 2)
        return KC_OK;
    const char **names = kc_calloc((size_t)arrays->n, sizeof *names);
    if (!names)
        return KC_ERR_NOMEM;
    for (int i = 0; i < arrays->n; i++)
        names[i] = arrays->items[i].name;
    qsort(names, (size_t)arrays->n, sizeof *names, kc_tfjs_name_cmp);
    kc_status status = KC_OK;
    for (int i = 1; i < arrays->n && status == KC_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            status = kc_fail(KC_ERR_FORMAT, "weight '%s' appears twice in the manifest", names[i]);
    free(names);
    return status;
}

static kc_status kc_tfjs_load_manifest(const cJSON *manifest, kc_tfjs_shard_reader reader,
                                       void *ctx, kc_array_list *arrays)
{
    if (!manifest || cJSON_IsNull(manifest))
        return KC_OK; /* a weightless model */
    if (!cJSON_IsArray(manifest))
        return kc_fail(KC_ERR_FORMAT, "'weightsManifest' is not an array");
    int64_t total_values = 0;
    int g = 0;
    const cJSON *group;
    cJSON_ArrayForEach(group, manifest) {
        kc_status status = kc_tfjs_load_group(group, reader, ctx, &total_values, arrays);
        if (status != KC_OK)
            return kc_fail_context(status, "weightsManifest group %d", g);
        g++;
    }
    return kc_tfjs_check_unique(arrays);
}

/* ------------------------------------------------------------ topology */

static kc_status kc_tfjs_graph_model(void)
{
    return kc_fail(KC_ERR_UNSUPPORTED, "a TensorFlow graph model, not a Keras layers model");
}

/* modelTopology.model_config if present, else modelTopology itself (the
 * rule of tfjs-layers models.ts). */
static kc_status kc_tfjs_model_config(const cJSON *root, const cJSON **config_out)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (cJSON_IsString(format) && strcmp(format->valuestring, "graph-model") == 0)
        return kc_tfjs_graph_model();
    if (format && !cJSON_IsNull(format) &&
        !(cJSON_IsString(format) && strcmp(format->valuestring, "layers-model") == 0))
        return kc_fail(KC_ERR_UNSUPPORTED, "format is not \"layers-model\"");
    const cJSON *topology = cJSON_GetObjectItemCaseSensitive(root, "modelTopology");
    if (!cJSON_IsObject(topology))
        return kc_fail(KC_ERR_FORMAT, "no 'modelTopology' object");
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(topology, "model_config");
    if (!config || cJSON_IsNull(config)) {
        /* Old converters wrote graph models without "format": a GraphDef
         * has "node" where a Keras config has "class_name". */
        if (cJSON_GetObjectItemCaseSensitive(topology, "node") &&
            !cJSON_GetObjectItemCaseSensitive(topology, "class_name"))
            return kc_tfjs_graph_model();
        config = topology;
    }
    if (!cJSON_IsObject(config) ||
        !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(config, "class_name")))
        return kc_fail(KC_ERR_FORMAT, "the model config has no 'class_name'");
    *config_out = config;
    return KC_OK;
}

static char *kc_tfjs_keras_version(const cJSON *root)
{
    const cJSON *topology = cJSON_GetObjectItemCaseSensitive(root, "modelTopology");
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(topology, "keras_version"));
    if (v)
        return kc_strdup(v);
    v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "generatedBy"));
    if (v) /* the converter writes "keras v2.x.y" */
        return kc_strdup(strncmp(v, "keras v", 7) == 0 ? v + 7 : v);
    return kc_strdup("unknown");
}

/* -------------------------------------------------------------- entry */

static kc_status kc_tfjs_parse_root(const char *json, size_t len, cJSON **doc)
{
    const char *end = NULL;
    *doc = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!*doc) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return kc_fail(KC_ERR_FORMAT, "not valid JSON (near offset %zu)", at);
    }
    if (!cJSON_IsObject(*doc)) {
        cJSON_Delete(*doc);
        *doc = NULL;
        return kc_fail(KC_ERR_FORMAT, "model.json is not a JSON object");
    }
    return KC_OK;
}

kc_status kc_tfjs_load_json(const char *name, const char *json, size_t len,
                            kc_tfjs_shard_reader reader, void *ctx, cJSON **doc,
                            const cJSON **model_config, char **keras_version,
                            kc_array_list *arrays)
{
    *doc = NULL;
    *model_config = NULL;
    *keras_version = NULL;
    kc_array_list local = {0};
    cJSON *root = NULL;
    const cJSON *config = NULL;
    kc_status status = kc_tfjs_parse_root(json, len, &root);
    if (status == KC_OK)
        status = kc_tfjs_model_config(root, &config);
    if (status == KC_OK)
        status = kc_tfjs_load_manifest(cJSON_GetObjectItemCaseSensitive(root, "weightsManifest"),
                                       reader, ctx, &local);
    char *version = status == KC_OK ? kc_tfjs_keras_version(root) : NULL;
    if (status == KC_OK && !version)
        status = KC_ERR_NOMEM;
    /* Hand the arrays over only on success, appending to what the caller
     * already holds. */
    if (status == KC_OK && arrays->n > 0) {
        status = kc_grow((void **)&arrays->items, &arrays->cap, (size_t)arrays->n + (size_t)local.n,
                         sizeof *arrays->items);
        if (status == KC_OK) {
            memcpy(arrays->items + arrays->n, local.items, (size_t)local.n * sizeof *local.items);
            arrays->n += local.n;
            free(local.items);
            local = (kc_array_list){0};
        }
    } else if (status == KC_OK) {
        free(arrays->items);
        *arrays = local;
        local = (kc_array_list){0};
    }
    if (status != KC_OK) {
        kc_array_list_free(&local);
        free(version);
        cJSON_Delete(root);
        return kc_fail_context(status, "%s", name);
    }
    *doc = root;
    *model_config = config;
    *keras_version = version;
    return KC_OK;
}

/* The file reader: manifest paths are relative to model.json's folder. */
static kc_status kc_tfjs_file_reader(void *ctx, const char *rel_path, size_t max_bytes,
                                     char **data, size_t *len)
{
    const char *dir = ctx;
    size_t dn = strlen(dir), rn = strlen(rel_path);
    char *full = kc_calloc(dn + rn + 1, 1);
    if (!full)
        return KC_ERR_NOMEM;
    memcpy(full, dir, dn);
    memcpy(full + dn, rel_path, rn);
    kc_status status = kc_read_model_file(full, max_bytes, data, len);
    free(full);
    return status;
}

kc_status kc_tfjs_load(const char *path, cJSON **doc, const cJSON **model_config,
                       char **keras_version, kc_array_list *arrays)
{
    *doc = NULL;
    *model_config = NULL;
    *keras_version = NULL;
    char *json = NULL;
    size_t len = 0;
    KC_TRY(kc_read_model_file(path, KC_TFJS_MAX_JSON_BYTES, &json, &len));
    /* "dir/model.json" -> "dir/"; a bare name -> "" (current folder). */
    const char *slash = strrchr(path, '/');
    char *dir = kc_strndup(path, slash ? (size_t)(slash - path) + 1 : 0);
    kc_status status = dir ? kc_tfjs_load_json(path, json, len, kc_tfjs_file_reader, dir, doc,
                                               model_config, keras_version, arrays)
                           : KC_ERR_NOMEM;
    free(dir);
    free(json);
    return status;
}
