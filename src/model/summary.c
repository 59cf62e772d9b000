/* `kerasc summary`: the Keras model.summary() table, and the same as JSON.
 * Rows are the model's top-level layers; a nested model is one row with
 * the parameters of everything inside it, as Keras prints it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model_internal.h"
#include "ops/op.h"

#define KC_SUMMARY_WIDTH 110

static void kc_group_digits(int64_t v, char *out, size_t cap)
{
    char raw[32];
    snprintf(raw, sizeof raw, "%" PRId64, v < 0 ? -v : v);
    size_t len = strlen(raw), o = 0;
    if (v < 0 && o + 1 < cap)
        out[o++] = '-';
    for (size_t i = 0; i < len && o + 2 < cap; i++) {
        if (i && (len - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = raw[i];
    }
    out[o] = '\0';
}

static void kc_human_bytes(double bytes, char *out, size_t cap)
{
    const char *units[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(out, cap, "%.2f %s", bytes, units[u]);
}

static int kc_summary_row_visible(const kc_model *m, const kc_layer *layer)
{
    /* Keras's Sequential summary has no InputLayer row. */
    if (strcmp(m->graph->root->class_name, "Sequential") == 0 && layer->def &&
        (layer->def->flags & KC_OPF_INPUT))
        return 0;
    return 1;
}

static void kc_rule(FILE *out, char c)
{
    for (int i = 0; i < KC_SUMMARY_WIDTH; i++)
        fputc(c, out);
    fputc('\n', out);
}

static void kc_print_row(FILE *out, const char *a, const char *b, const char *c, const char *d)
{
    fprintf(out, " %-38s %-26s %13s   %s\n", a, b, c, d);
}

static void kc_layer_shape_text(const kc_model *m, const kc_layer *layer, char *buf,
                                size_t cap)
{
    if (layer->def && (layer->def->flags & KC_OPF_INPUT)) {
        for (int i = 0; i < m->graph->n_inputs; i++)
            if (strcmp(m->graph->input_names[i], layer->name) == 0) {
                kc_shape_format(&m->graph->values[m->graph->inputs[i]].shape, buf, cap);
                return;
            }
    }
    if (layer->n_calls == 0) {
        snprintf(buf, cap, "?");
        return;
    }
    kc_shape_format(&layer->out_shape, buf, cap);
    if (layer->n_out_shapes > 1) {
        size_t used = strlen(buf);
        snprintf(buf + used, cap - used, " +%d more", layer->n_out_shapes - 1);
    }
}

static void kc_summary_text(const kc_model *m, FILE *out)
{
    const kc_layer *root = m->graph->root;
    int functional = strcmp(root->class_name, "Sequential") != 0;
    fprintf(out, "Model: \"%s\"\n", root->name);
    kc_rule(out, '_');
    kc_print_row(out, "Layer (type)", "Output Shape", "Param #", functional ? "Connected to" : "");
    kc_rule(out, '=');
    for (int i = 0; i < root->n_children; i++) {
        const kc_layer *l = root->children[i];
        if (!kc_summary_row_visible(m, l))
            continue;
        char name[512], shape[256], params[32];
        snprintf(name, sizeof name, "%s (%s)", l->name, l->class_name);
        kc_layer_shape_text(m, l, shape, sizeof shape);
        int64_t total, trainable;
        kc_graph_count_params(m->graph, l, &total, &trainable);
        kc_group_digits(total, params, sizeof params);
        kc_print_row(out, name, shape, params,
                     functional ? (l->connected_to ? l->connected_to : "[]") : "");
    }
    kc_rule(out, '=');
    char num[32], human[32];
    const kc_param_counts *p = &m->params;
    kc_group_digits(p->total, num, sizeof num);
    kc_human_bytes((double)p->total * 4, human, sizeof human);
    fprintf(out, "Total params: %s (%s)\n", num, human);
    kc_group_digits(p->trainable, num, sizeof num);
    kc_human_bytes((double)p->trainable * 4, human, sizeof human);
    fprintf(out, "Trainable params: %s (%s)\n", num, human);
    kc_group_digits(p->non_trainable, num, sizeof num);
    kc_human_bytes((double)p->non_trainable * 4, human, sizeof human);
    fprintf(out, "Non-trainable params: %s (%s)\n", num, human);
    kc_group_digits(p->weight_bytes, num, sizeof num);
    kc_human_bytes((double)p->weight_bytes, human, sizeof human);
    fprintf(out, "Weight bytes in file: %s (%s)\n", num, human);
    kc_rule(out, '_');
    fprintf(out, "Format: %s, written by Keras %s\n", m->format, m->keras_version);
    for (int i = 0; i < m->graph->n_inputs; i++) {
        char shape[256];
        kc_shape_format(&m->graph->values[m->graph->inputs[i]].shape, shape, sizeof shape);
        fprintf(out, "Input %d: %s %s %s\n", i, m->graph->input_names[i], shape,
                kc_dtype_name(m->graph->values[m->graph->inputs[i]].dtype));
    }
    for (int i = 0; i < m->graph->n_outputs; i++) {
        char shape[256];
        kc_shape_format(&m->graph->values[m->graph->outputs[i]].shape, shape, sizeof shape);
        fprintf(out, "Output %d: %s %s\n", i, m->graph->output_names[i], shape);
    }
}

static cJSON *kc_shape_json(const kc_shape *s)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < s->rank; i++)
        cJSON_AddItemToArray(arr, s->dims[i] < 0 ? cJSON_CreateNull()
                                                 : cJSON_CreateNumber((double)s->dims[i]));
    return arr;
}

static cJSON *kc_summary_layer_json(const kc_model *m, const kc_layer *l)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "name", l->name);
    cJSON_AddStringToObject(o, "class_name", l->class_name);
    if (l->n_calls > 0)
        cJSON_AddItemToObject(o, "output_shape", kc_shape_json(&l->out_shape));
    else if (l->def && (l->def->flags & KC_OPF_INPUT))
        for (int i = 0; i < m->graph->n_inputs; i++)
            if (strcmp(m->graph->input_names[i], l->name) == 0)
                cJSON_AddItemToObject(o, "output_shape",
                                      kc_shape_json(&m->graph->values[m->graph->inputs[i]].shape));
    int64_t total, trainable;
    kc_graph_count_params(m->graph, l, &total, &trainable);
    cJSON_AddNumberToObject(o, "params", (double)total);
    cJSON_AddNumberToObject(o, "trainable_params", (double)trainable);
    cJSON_AddStringToObject(o, "connected_to", l->connected_to ? l->connected_to : "");
    return o;
}

static void kc_add_io(cJSON *doc, const char *key, const kc_model *m, int n, char **names,
                      const int *values)
{
    cJSON *arr = cJSON_AddArrayToObject(doc, key);
    for (int i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", names[i]);
        cJSON_AddItemToObject(o, "shape", kc_shape_json(&m->graph->values[values[i]].shape));
        cJSON_AddStringToObject(o, "dtype", kc_dtype_name(m->graph->values[values[i]].dtype));
        cJSON_AddItemToArray(arr, o);
    }
}

static kc_status kc_summary_json(const kc_model *m, FILE *out)
{
    cJSON *doc = cJSON_CreateObject();
    if (!doc)
        return kc_fail(KC_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(doc, "name", m->graph->root->name);
    cJSON_AddStringToObject(doc, "class_name", m->graph->root->class_name);
    cJSON_AddStringToObject(doc, "format", m->format);
    cJSON_AddStringToObject(doc, "keras_version", m->keras_version);
    cJSON *layers = cJSON_AddArrayToObject(doc, "layers");
    for (int i = 0; layers && i < m->graph->root->n_children; i++)
        if (kc_summary_row_visible(m, m->graph->root->children[i]))
            cJSON_AddItemToArray(layers, kc_summary_layer_json(m, m->graph->root->children[i]));
    kc_add_io(doc, "inputs", m, m->graph->n_inputs, m->graph->input_names, m->graph->inputs);
    kc_add_io(doc, "outputs", m, m->graph->n_outputs, m->graph->output_names, m->graph->outputs);
    cJSON_AddNumberToObject(doc, "total_params", (double)m->params.total);
    cJSON_AddNumberToObject(doc, "trainable_params", (double)m->params.trainable);
    cJSON_AddNumberToObject(doc, "non_trainable_params", (double)m->params.non_trainable);
    cJSON_AddNumberToObject(doc, "weight_bytes", (double)m->params.weight_bytes);
    char *text = cJSON_Print(doc);
    cJSON_Delete(doc);
    if (!text)
        return kc_fail(KC_ERR_NOMEM, "out of memory printing JSON");
    fprintf(out, "%s\n", text);
    free(text);
    return KC_OK;
}

kc_status kc_model_summary(const kc_model *m, FILE *out, int json)
{
    if (!m || !out)
        return kc_fail(KC_ERR_ARG, "kc_model_summary: null argument");
    if (json)
        return kc_summary_json(m, out);
    kc_summary_text(m, out);
    return ferror(out) ? kc_fail(KC_ERR_IO, "error writing the summary") : KC_OK;
}
