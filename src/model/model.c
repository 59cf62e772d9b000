/* kc_model: load any supported file into one validated graph.
 *
 * Detection is by content. Each format yields the same three things: the
 * Keras model config (JSON), the Keras version that wrote it, and a source
 * of weights; the graph builder and the binders do the rest, identically
 * for every format. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/spill.h"
#include "format/bind.h"
#include "format/detect.h"
#include "format/fileio.h"
#include "format/keras3.h"
#include "model/model_internal.h"
#include "format/tfjs.h"
#include "graph/build.h"

#define KC_MAX_JSON_BYTES ((size_t)256 << 20)

static int kc_version_major(const char *version)
{
    if (!version)
        return 0;
    if (strncmp(version, "tfjs", 4) == 0)
        return 2;
    int major = atoi(version);
    return major >= 1 && major <= 9 ? major : 0;
}

/* Keras 3 configs carry "module" keys; Keras 1/2 configs do not. */
static int kc_guess_major(const cJSON *model_entry)
{
    return cJSON_GetObjectItemCaseSensitive(model_entry, "module") ? 3 : 2;
}

static kc_status kc_model_set_version(kc_model *m, const char *version)
{
    free(m->keras_version);
    m->keras_version = kc_strdup(version && version[0] ? version : "unknown");
    return m->keras_version ? KC_OK : KC_ERR_NOMEM;
}

static kc_status kc_parse_json(const char *label, const char *text, size_t len, cJSON **out)
{
    if (len > KC_MAX_JSON_BYTES)
        return kc_fail(KC_ERR_LIMIT, "%s: JSON of %zu bytes exceeds the limit", label, len);
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*out) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        return kc_fail(KC_ERR_FORMAT, "%s: invalid JSON near byte %zu", label, off);
    }
    return KC_OK;
}

static kc_status kc_model_build(kc_model *m, const cJSON *model_entry)
{
    if (!cJSON_IsObject(model_entry))
        return kc_fail(KC_ERR_FORMAT, "%s: model config is not an object", m->path);
    kc_parse_env env = {.keras_major = kc_version_major(m->keras_version)};
    if (!env.keras_major)
        env.keras_major = kc_guess_major(model_entry);
    m->keras_major = env.keras_major;
    kc_status st = kc_build_graph(model_entry, &env, &m->graph);
    if (st != KC_OK)
        return kc_fail_context(st, "%s", m->path);
    return KC_OK;
}

/* ------------------------------------------------------------ formats */

static kc_status kc_load_keras3(kc_model *m, int is_dir)
{
    kc_keras3_archive a;
    KC_TRY(kc_keras3_open(m->path, is_dir, &a));
    m->format = is_dir ? "keras3-dir" : "keras3-zip";
    kc_status st = kc_parse_json(m->path, a.config_json, a.config_len, &m->doc);
    cJSON *meta = NULL;
    if (st == KC_OK && a.metadata_json &&
        kc_parse_json(m->path, a.metadata_json, a.metadata_len, &meta) == KC_OK) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, "keras_version");
        st = kc_model_set_version(m, cJSON_IsString(v) ? v->valuestring : NULL);
    } else if (st == KC_OK) {
        st = kc_model_set_version(m, NULL);
    }
    cJSON_Delete(meta);
    if (st == KC_OK)
        st = kc_model_build(m, m->doc);
    if (st == KC_OK)
        st = kc_bind_keras3(m->graph, a.weights);
    kc_mem_trace("weights bound");
    kc_keras3_close(&a);
    return st;
}

static kc_status kc_h5_json_attr(kc_h5 *h5, const char *attr, const char *label, cJSON **out)
{
    char *text = NULL;
    KC_TRY(kc_h5_attr_string(h5, "/", attr, &text));
    if (!text)
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5 file has no %s attribute", label, attr);
    kc_status st = kc_parse_json(label, text, strlen(text), out);
    free(text);
    return st;
}

static kc_status kc_load_h5_model(kc_model *m)
{
    kc_h5 *h5 = NULL;
    KC_TRY(kc_h5_open_file(m->path, &h5));
    m->format = "h5-legacy";
    kc_status st = KC_OK;
    if (!kc_h5_has_attr(h5, "/", "model_config")) {
        if (kc_h5_has_attr(h5, "/", "layer_names") || kc_h5_kind(h5, "/layers") == KC_H5_GROUP)
            st = kc_fail(KC_ERR_ARG, "%s: a weights-only file; give the architecture JSON and "
                         "pass this file with --weights", m->path);
        else
            st = kc_fail(KC_ERR_FORMAT, "%s: HDF5 file is not a Keras model (no model_config "
                         "attribute)", m->path);
    }
    if (st == KC_OK)
        st = kc_h5_json_attr(h5, "model_config", m->path, &m->doc);
    char *version = NULL;
    if (st == KC_OK)
        st = kc_h5_attr_string(h5, "/", "keras_version", &version);
    if (st == KC_OK)
        st = kc_model_set_version(m, version ? version : "1");
    free(version);
    if (st == KC_OK)
        st = kc_model_build(m, m->doc);
    if (st == KC_OK) {
        const char *group = kc_h5_kind(h5, "/model_weights") == KC_H5_GROUP ? "/model_weights"
                                                                             : "/";
        st = kc_bind_legacy(m->graph, h5, group);
    }
    kc_h5_close(h5);
    return st;
}

static kc_status kc_load_tfjs(kc_model *m)
{
    const cJSON *model_config = NULL;
    char *version = NULL;
    kc_array_list arrays = {0};
    m->format = "tfjs-layers";
    KC_TRY(kc_tfjs_load(m->path, &m->doc, &model_config, &version, &arrays));
    kc_status st = kc_model_set_version(m, version);
    free(version);
    if (st == KC_OK)
        st = kc_model_build(m, model_config);
    if (st == KC_OK)
        st = kc_bind_named(m->graph, &arrays);
    for (int i = 0; i < arrays.n; i++)
        m->stored_bytes += arrays.items[i].stored_bytes;
    kc_array_list_free(&arrays);
    if (st != KC_OK)
        return kc_fail_context(st, "%s", m->path);
    return st;
}

/* A JSON architecture (model.to_json()) with an optional weights file. */
static kc_status kc_load_json_arch(kc_model *m, const cJSON *doc, const char *weights_path)
{
    m->format = "json+weights";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, "keras_version");
    KC_TRY(kc_model_set_version(m, cJSON_IsString(v) ? v->valuestring : NULL));
    KC_TRY(kc_model_build(m, doc));
    if (!weights_path)
        return KC_OK;
    kc_h5 *h5 = NULL;
    KC_TRY(kc_h5_open_file(weights_path, &h5));
    kc_status st;
    if (kc_h5_kind(h5, "/layers") == KC_H5_GROUP ||
        kc_h5_kind(h5, "/_layer_checkpoint_dependencies") == KC_H5_GROUP)
        st = kc_bind_keras3(m->graph, h5);
    else if (kc_h5_kind(h5, "/model_weights") == KC_H5_GROUP)
        st = kc_bind_legacy(m->graph, h5, "/model_weights");
    else if (kc_h5_has_attr(h5, "/", "layer_names"))
        st = kc_bind_legacy(m->graph, h5, "/");
    else
        st = kc_fail(KC_ERR_FORMAT, "%s: not a Keras weights file (no /layers group or "
                     "layer_names attribute)", weights_path);
    kc_h5_close(h5);
    return st;
}

static kc_status kc_load_json(kc_model *m, const char *weights_path)
{
    char *text = NULL;
    size_t len = 0;
    KC_TRY(kc_read_model_file(m->path, KC_MAX_JSON_BYTES, &text, &len));
    cJSON *doc = NULL;
    kc_status st = kc_parse_json(m->path, text, len, &doc);
    free(text);
    if (st != KC_OK)
        return st;
    int tfjs = cJSON_GetObjectItemCaseSensitive(doc, "weightsManifest") ||
               cJSON_GetObjectItemCaseSensitive(doc, "modelTopology") ||
               cJSON_GetObjectItemCaseSensitive(doc, "format");
    if (tfjs) {
        cJSON_Delete(doc);
        if (weights_path)
            return kc_fail(KC_ERR_ARG, "%s: a TensorFlow.js model takes its weights from its "
                           "manifest, not --weights", m->path);
        return kc_load_tfjs(m);
    }
    if (!cJSON_GetObjectItemCaseSensitive(doc, "class_name")) {
        cJSON_Delete(doc);
        return kc_fail(KC_ERR_FORMAT, "%s: JSON is neither a Keras architecture nor a "
                       "TensorFlow.js model", m->path);
    }
    m->doc = doc;
    return kc_load_json_arch(m, doc, weights_path);
}

/* A directory: an unzipped .keras (config.json) or a tfjs model.json. */
static kc_status kc_load_directory(kc_model *m)
{
    char probe[4096];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/config.json", m->path);
    if (stat(probe, &st) == 0)
        return kc_load_keras3(m, 1);
    snprintf(probe, sizeof probe, "%s/model.json", m->path);
    if (stat(probe, &st) == 0) {
        char *dir = m->path;
        m->path = kc_strdup(probe);
        free(dir);
        return m->path ? kc_load_tfjs(m) : KC_ERR_NOMEM;
    }
    return kc_fail(KC_ERR_FORMAT, "%s: directory holds neither config.json (Keras 3) nor "
                   "model.json (TensorFlow.js)", m->path);
}

static kc_status kc_model_load_any(kc_model *m, const kc_load_options *options)
{
    const char *weights = options ? options->weights_path : NULL;
    kc_file_kind kind;
    KC_TRY(kc_detect_file(m->path, &kind));
    if (weights && kind != KC_FILE_JSON)
        return kc_fail(KC_ERR_ARG, "%s: --weights only applies to a JSON architecture file",
                       m->path);
    switch (kind) {
    case KC_FILE_ZIP: return kc_load_keras3(m, 0);
    case KC_FILE_HDF5: return kc_load_h5_model(m);
    case KC_FILE_JSON: return kc_load_json(m, weights);
    case KC_FILE_JSWRAP: return kc_load_tfjs(m);
    case KC_FILE_DIRECTORY: return kc_load_directory(m);
    default: break;
    }
    return kc_fail(KC_ERR_FORMAT, "%s: unrecognised file format", m->path);
}

/* Size and modification time of the model's files: a released array is
 * re-read from them, so a file rewritten since the load must be noticed
 * (its arrays could differ from the ones still held). */
static void kc_model_stamp(const kc_model *m, int64_t stamp[2][2])
{
    const char *paths[2] = {m->path, m->weights_path};
    for (int i = 0; i < 2; i++) {
        struct stat sb;
        stamp[i][0] = stamp[i][1] = -1;
        if (paths[i] && stat(paths[i], &sb) == 0) {
            stamp[i][0] = (int64_t)sb.st_size;
            stamp[i][1] = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        }
    }
}

static void kc_model_compute_params(kc_model *m)
{
    kc_graph_count_params(m->graph, m->graph->root, &m->params.total, &m->params.trainable);
    m->params.non_trainable = m->params.total - m->params.trainable;
    int64_t bytes = 0;
    for (int i = 0; i < m->graph->n_layers; i++) {
        const kc_layer *l = m->graph->layers[i];
        for (int w = 0; w < l->n_weights; w++)
            if (l->weights[w].data)
                bytes += kc_shape_count(&l->weights[w].shape) *
                         (int64_t)kc_dtype_size(l->weights[w].stored_dtype);
    }
    /* tfjs stores quantized bytes; report what the file holds. */
    m->params.weight_bytes = m->stored_bytes ? m->stored_bytes : bytes;
}

kc_status kc_model_load(const char *path, const kc_load_options *options, kc_model **out)
{
    *out = NULL;
    kc_error_clear();
    if (!path)
        return kc_fail(KC_ERR_ARG, "no model path");
    kc_mem_trace("load started");
    kc_model *m = kc_calloc(1, sizeof *m);
    if (!m)
        return KC_ERR_NOMEM;
    m->path = kc_strdup(path);
    if (!m->path) {
        free(m);
        return KC_ERR_NOMEM;
    }
    if (options && options->weights_path && !(m->weights_path = kc_strdup(options->weights_path))) {
        kc_model_free(m);
        return KC_ERR_NOMEM;
    }
    kc_model_stamp(m, m->src_stamp);
    const char *spill = NULL;
    if (options && options->disk_weights) {
        spill = options->spill_dir ? options->spill_dir : getenv("TMPDIR");
        if (!spill || !*spill)
            spill = "/var/tmp";
        m->disk_weights = 1;
    }
    kc_spill_begin(spill);
    kc_status st = kc_model_load_any(m, options);
    kc_spill_end(&m->spill_maps, &m->spill_lens, &m->n_spill_maps);
    if (st == KC_OK && m->disk_weights && strcmp(m->format, "keras3-zip") &&
        strcmp(m->format, "keras3-dir") && strcmp(m->format, "h5-legacy") &&
        strcmp(m->format, "json+weights"))
        st = kc_fail(KC_ERR_UNSUPPORTED, "disk-backed weights need an HDF5-based file (.keras, "
                     ".h5, .weights.h5), not %s", m->format);
    if (st == KC_OK && options && options->weights_path)
        st = kc_bind_check_complete(m->graph);
    else if (st == KC_OK && strcmp(m->format, "json+weights") != 0)
        st = kc_bind_check_complete(m->graph);
    if (st != KC_OK) {
        kc_fail_context(st, "%s", path);
        kc_model_free(m);
        return st;
    }
    kc_model_compute_params(m);
    kc_mem_trace("model loaded");
    *out = m;
    return KC_OK;
}

void kc_model_free(kc_model *m)
{
    if (!m)
        return;
    kc_graph_free(m->graph);
    for (int i = 0; i < m->n_spill_maps; i++) /* after the graph: weights point here */
        kc_spill_unmap(m->spill_maps[i], m->spill_lens[i]);
    free(m->spill_maps);
    free(m->spill_lens);
    cJSON_Delete(m->doc);
    free(m->keras_version);
    free(m->weights_path);
    free(m->path);
    free(m);
}

const char *kc_model_format(const kc_model *m) { return m->format; }
const char *kc_model_keras_version(const kc_model *m) { return m->keras_version; }
const char *kc_model_name(const kc_model *m) { return m->graph->root->name; }
int kc_model_num_inputs(const kc_model *m) { return m->graph->n_inputs; }
int kc_model_num_outputs(const kc_model *m) { return m->graph->n_outputs; }

const char *kc_model_input_name(const kc_model *m, int i)
{
    return i >= 0 && i < m->graph->n_inputs ? m->graph->input_names[i] : NULL;
}

const char *kc_model_output_name(const kc_model *m, int i)
{
    return i >= 0 && i < m->graph->n_outputs ? m->graph->output_names[i] : NULL;
}

static int kc_copy_shape(const kc_shape *s, int64_t dims[KC_MAX_RANK])
{
    for (int i = 0; i < s->rank; i++)
        dims[i] = s->dims[i];
    return s->rank;
}

int kc_model_input_shape(const kc_model *m, int i, int64_t dims[KC_MAX_RANK])
{
    if (i < 0 || i >= m->graph->n_inputs)
        return -1;
    return kc_copy_shape(&m->graph->values[m->graph->inputs[i]].shape, dims);
}

int kc_model_output_shape(const kc_model *m, int i, int64_t dims[KC_MAX_RANK])
{
    if (i < 0 || i >= m->graph->n_outputs)
        return -1;
    return kc_copy_shape(&m->graph->values[m->graph->outputs[i]].shape, dims);
}

kc_param_counts kc_model_params(const kc_model *m) { return m->params; }

/* ------------------------------------------------------ released arrays */

void kc_model_release_weight(kc_model *m, kc_layer *layer, int w)
{
    if (w >= layer->n_weights || !layer->weights[w].data)
        return;
    kc_wfree_pages(layer->weights[w].data,
                   (size_t)kc_shape_count(&layer->weights[w].shape) * sizeof(float));
    layer->weights[w].data = NULL;
    m->n_released++;
}

/* Move fresh's arrays into m's empty slots: the same file builds the same
 * layer list, which is checked name by name and shape by shape. */
static kc_status kc_model_adopt(kc_model *m, kc_model *fresh)
{
    const kc_graph *g = m->graph, *f = fresh->graph;
    if (g->n_layers != f->n_layers)
        return kc_fail(KC_ERR_FORMAT, "%s: re-read %d layers, the model has %d", m->path,
                       f->n_layers, g->n_layers);
    for (int i = 0; i < g->n_layers; i++) {
        kc_layer *l = g->layers[i], *fl = f->layers[i];
        if (strcmp(l->name, fl->name) || l->n_weights != fl->n_weights)
            return kc_fail(KC_ERR_FORMAT, "%s: re-read layer '%s' differs from '%s'", m->path,
                           fl->name, l->name);
        for (int w = 0; w < l->n_weights; w++) {
            if (l->weights[w].data)
                continue;
            if (!kc_shape_equal(&l->weights[w].shape, &fl->weights[w].shape))
                return kc_fail(KC_ERR_SHAPE, "%s: re-read weight %s of layer '%s' has another "
                               "shape", m->path, l->weights[w].name, l->name);
            l->weights[w].data = fl->weights[w].data;
            fl->weights[w].data = NULL;
            m->n_released--;
        }
    }
    return KC_OK;
}

kc_status kc_model_restore_weights(kc_model *m)
{
    if (!m->n_released)
        return KC_OK;
    int64_t now[2][2];
    kc_model_stamp(m, now);
    if (memcmp(now, m->src_stamp, sizeof now) != 0)
        return kc_fail(KC_ERR_IO, "%s: the model's files changed since it was loaded; weights "
                       "released by its session (release_packed_weights) cannot be re-read",
                       m->path);
    /* The whole set is read again and only the missing arrays kept: every
     * format's binder stays the single way weights reach a layer. */
    kc_load_options o = {.weights_path = m->weights_path};
    kc_model *fresh = NULL;
    kc_status st = kc_model_load(m->path, &o, &fresh);
    if (st == KC_OK)
        st = kc_model_adopt(m, fresh);
    kc_model_free(fresh);
    if (st != KC_OK)
        return kc_fail_context(st, "re-reading released weights");
    kc_mem_trace("released weights re-read");
    return KC_OK;
}
