/* Graph construction from a Keras model config.
 *
 * Mirrors what Keras's functional_from_config does (keras-formats.md §1.4,
 * §2.4): create every layer of a model, then process inbound nodes in a
 * queue until no more can be resolved, because a layer shared at several
 * depths is listed once and may be called before its listed position.
 * Nested models are expanded in place: calling a nested model builds its
 * inner nodes on the caller's values, reusing the same kc_layer objects on
 * a second call (shared nested model). */
#include "graph/build.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"

#define KC_MAX_LAYERS_PER_MODEL 100000
#define KC_MAX_MODEL_DEPTH 32
#define KC_MAX_NODE_INPUTS 1024
#define KC_MAX_CALLS 4096

typedef struct kc_builder {
    kc_graph *graph;
    const kc_parse_env *env;
    int depth;
} kc_builder;

/* One tensor reference inside an inbound node. */
typedef struct kc_ref {
    const char *layer;
    int64_t node;
    int64_t tensor;
    const char *role; /* NULL positional, else the keyword */
} kc_ref;

typedef struct kc_call_spec {
    kc_ref refs[KC_MAX_NODE_INPUTS];
    int n_refs;
    const cJSON *consts[16]; /* constant positional args (by position) */
    int const_pos[16];
    int n_consts;
    const cJSON *kwargs;
    const cJSON *args;
    int keras2_form;
} kc_call_spec;

/* Per-child state while a Functional model instance is being built. */
typedef struct kc_child_state {
    kc_layer *layer;
    const cJSON *entry;
    const cJSON *nodes; /* inbound_nodes array */
    int n_nodes;
    unsigned char *done;
    int **outs;   /* per call: value ids */
    int *n_outs;
} kc_child_state;

static kc_status kc_build_model(kc_builder *b, kc_layer *model, const int *in_vals, int n_in,
                                int **out_vals, int *n_out);

/* ----------------------------------------------------------- layers */

static int kc_is_model_class(const char *cls)
{
    return strcmp(cls, "Functional") == 0 || strcmp(cls, "Model") == 0 ||
           strcmp(cls, "Sequential") == 0;
}

static const char *kc_json_str(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

static kc_status kc_layer_context(kc_status st, const kc_layer *layer)
{
    return kc_fail_context(st, "layer '%s' (%s)", layer->name, layer->class_name);
}

/* A dtype policy object that kerasc cannot honour (quantized weights). */
static kc_status kc_check_dtype_policy(const cJSON *cfg)
{
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(cfg, "dtype");
    if (!cJSON_IsObject(dtype))
        return KC_OK;
    const char *cls = kc_json_str(dtype, "class_name");
    if (cls && strstr(cls, "Quantized"))
        return kc_fail(KC_ERR_UNSUPPORTED, "quantized dtype policy %s is not supported", cls);
    if (cls && (strstr(cls, "GPTQ") || strstr(cls, "AWQ") || strstr(cls, "Int4") ||
                strstr(cls, "Ternary") || strstr(cls, "DTypePolicyMap")))
        return kc_fail(KC_ERR_UNSUPPORTED, "dtype policy %s is not supported", cls);
    return KC_OK;
}

static kc_status kc_resolve_def(kc_layer *layer, const cJSON *entry)
{
    const char *cls = layer->class_name;
    if (strcmp(cls, "Lambda") == 0)
        return kc_fail(KC_ERR_REFUSED, "Lambda layer holds Python code (marshalled bytecode); "
                       "kerasc never executes code from a model file");
    if (kc_is_model_class(cls))
        return KC_OK;
    layer->def = kc_op_lookup(layer->module, cls);
    if (layer->def)
        return KC_OK;
    const char *registered = kc_json_str(entry, "registered_name");
    if ((registered && strchr(registered, '>')) ||
        (layer->module && strncmp(layer->module, "keras", 5) != 0 &&
         strncmp(layer->module, "tf_keras", 8) != 0) ||
        strcmp(cls, "TFOpLambda") == 0)
        return kc_fail(KC_ERR_REFUSED, "custom class '%s'%s%s is Python code; kerasc only "
                       "loads Keras's own layers", registered ? registered : cls,
                       layer->module ? " from module " : "", layer->module ? layer->module : "");
    return kc_fail(KC_ERR_UNSUPPORTED, "layer class '%s'%s%s is not supported", cls,
                   layer->module ? " from module " : "", layer->module ? layer->module : "");
}

/* Create a layer from its config entry: {class_name, config, [name],
 * [module], [inbound_nodes]}. */
static kc_status kc_make_layer(kc_builder *b, kc_layer *parent, const cJSON *entry, int index,
                               kc_layer **out)
{
    if (!cJSON_IsObject(entry))
        return kc_fail(KC_ERR_FORMAT, "layer entry %d is not an object", index);
    const char *cls = kc_json_str(entry, "class_name");
    if (!cls)
        return kc_fail(KC_ERR_FORMAT, "layer entry %d has no class_name", index);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(entry, "config");
    const char *name = kc_json_str(entry, "name");
    if (!name && cJSON_IsObject(cfg))
        name = kc_json_str(cfg, "name");
    char fallback[32];
    if (!name && !parent) {
        /* An unnamed top-level model: Keras's default names. */
        name = strcmp(cls, "Sequential") == 0 ? "sequential" : "model";
    } else if (!name) {
        snprintf(fallback, sizeof fallback, "layer_%d", index);
        name = fallback;
    }
    kc_layer *layer = kc_graph_add_layer(b->graph, parent, name, cls, kc_json_str(entry, "module"));
    if (!layer)
        return KC_ERR_NOMEM;
    layer->entry = entry;
    layer->config = cfg;
    *out = layer;
    kc_status st = kc_resolve_def(layer, entry);
    if (st != KC_OK)
        return kc_layer_context(st, layer);
    /* Keras 2/3 configs are objects; a bare list is an old Sequential. */
    if (!cJSON_IsObject(cfg) && !(cJSON_IsArray(cfg) && strcmp(cls, "Sequential") == 0))
        return kc_layer_context(kc_fail(KC_ERR_FORMAT, "config is not an object"), layer);
    if (cJSON_IsObject(cfg)) {
        st = kc_cfg_bool(cfg, "trainable", 1, &layer->trainable);
        if (st == KC_OK)
            st = kc_check_dtype_policy(cfg);
        if (st != KC_OK)
            return kc_layer_context(st, layer);
    }
    if (layer->def && layer->def->parse) {
        st = layer->def->parse(layer, b->env);
        if (st != KC_OK)
            return kc_layer_context(st, layer);
    }
    layer->channels_first = layer->def && cJSON_IsObject(cfg) && kc_cfg_is_channels_first(cfg);
    return KC_OK;
}

/* ------------------------------------------------------------ calls */

/* Run shape inference for one call of a leaf layer and append the node. */
static kc_status kc_call_leaf(kc_builder *b, kc_layer *layer, const int *in_vals,
                              const char *const *roles, int n_in, const kc_call_spec *spec,
                              int **out_vals, int *n_out)
{
    kc_graph *g = b->graph;
    if (layer->n_calls >= KC_MAX_CALLS)
        return kc_layer_context(kc_fail(KC_ERR_LIMIT, "called more than %d times", KC_MAX_CALLS),
                                layer);
    kc_shape *shapes = kc_calloc((size_t)(n_in ? n_in : 1), sizeof *shapes);
    kc_dtype *dtypes = kc_calloc((size_t)(n_in ? n_in : 1), sizeof *dtypes);
    kc_const_arg *consts = NULL;
    int n_consts = spec ? spec->n_consts : 0;
    if (n_consts)
        consts = kc_calloc((size_t)n_consts, sizeof *consts);
    kc_status st = (!shapes || !dtypes || (n_consts && !consts)) ? KC_ERR_NOMEM : KC_OK;
    for (int i = 0; st == KC_OK && i < n_in; i++) {
        shapes[i] = g->values[in_vals[i]].shape;
        dtypes[i] = g->values[in_vals[i]].dtype;
    }
    for (int i = 0; st == KC_OK && i < n_consts; i++) {
        consts[i].position = spec->const_pos[i];
        st = kc_const_from_json(spec->consts[i], &consts[i]);
    }
    kc_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.layer = layer;
    ctx.env = b->env;
    ctx.in = shapes;
    ctx.in_dtype = dtypes;
    ctx.in_roles = (char *const *)roles;
    ctx.n_in = n_in;
    ctx.consts = consts;
    ctx.n_consts = n_consts;
    ctx.call_kwargs = spec ? spec->kwargs : NULL;
    ctx.call_args = spec ? spec->args : NULL;
    ctx.first_call = !layer->specs_ready;
    if (layer->channels_first && n_in > 0)
        kc_shape_to_channels_last(&shapes[0]);
    if (st == KC_OK)
        st = layer->def->infer(&ctx);
    for (int i = 0; st == KC_OK && layer->channels_first && i < ctx.n_out; i++)
        kc_shape_to_channels_first(&ctx.out[i]);
    if (st == KC_OK && (ctx.n_out < 1 || ctx.n_out > KC_MAX_OUTPUTS))
        st = kc_fail(KC_ERR_FORMAT, "produced %d outputs", ctx.n_out);
    for (int i = 0; st == KC_OK && i < ctx.n_out; i++)
        if (kc_shape_count(&ctx.out[i]) < -1)
            st = KC_ERR_LIMIT;
    int node_index = -1;
    if (st == KC_OK) {
        layer->specs_ready = 1;
        node_index = kc_graph_add_node(g, layer, in_vals, roles, n_in);
        if (node_index < 0)
            st = KC_ERR_NOMEM;
    }
    if (st == KC_OK) {
        kc_node *node = &g->nodes[node_index];
        node->consts = consts;
        node->n_consts = n_consts;
        consts = NULL;
        node->call_kwargs = ctx.call_kwargs;
        node->call_args = ctx.call_args;
        node->outputs = kc_calloc((size_t)ctx.n_out, sizeof *node->outputs);
        *out_vals = kc_calloc((size_t)ctx.n_out, sizeof **out_vals);
        if (!node->outputs || !*out_vals)
            st = KC_ERR_NOMEM;
        for (int i = 0; st == KC_OK && i < ctx.n_out; i++) {
            int v = kc_graph_add_value(g, &ctx.out[i], ctx.out_dtype[i], node_index, i);
            if (v < 0) {
                st = KC_ERR_NOMEM;
                break;
            }
            g->nodes[node_index].outputs[i] = v;
            (*out_vals)[i] = v;
        }
        if (st == KC_OK) {
            g->nodes[node_index].n_outputs = ctx.n_out;
            *n_out = ctx.n_out;
            if (layer->n_calls == 0) {
                layer->out_shape = ctx.out[0];
                layer->n_out_shapes = ctx.n_out;
            }
            layer->n_calls++;
        }
    }
    if (consts)
        for (int i = 0; i < n_consts; i++)
            free(consts[i].data);
    free(consts);
    if (st != KC_OK && out_vals) {
        free(*out_vals);
        *out_vals = NULL;
    }
    free(shapes);
    free(dtypes);
    return st == KC_OK ? KC_OK : kc_layer_context(st, layer);
}

static kc_status kc_call_layer(kc_builder *b, kc_layer *layer, const int *in_vals,
                               const char *const *roles, int n_in, const kc_call_spec *spec,
                               int **out_vals, int *n_out)
{
    if (kc_is_model_class(layer->class_name)) {
        kc_status st = kc_build_model(b, layer, in_vals, n_in, out_vals, n_out);
        if (st == KC_OK && layer->n_calls++ == 0 && *n_out > 0) {
            layer->out_shape = b->graph->values[(*out_vals)[0]].shape;
            layer->n_out_shapes = *n_out;
        }
        return st;
    }
    return kc_call_leaf(b, layer, in_vals, roles, n_in, spec, out_vals, n_out);
}

/* A model input value from an InputLayer's declared shape. */
static kc_status kc_make_input(kc_builder *b, kc_layer *input_layer, int *value)
{
    int *outs = NULL, n = 0;
    KC_TRY(kc_call_leaf(b, input_layer, NULL, NULL, 0, NULL, &outs, &n));
    /* The InputLayer's "node" is a placeholder: drop it so that model
     * inputs have producer -1 and the executor sees no op for them. */
    kc_graph *g = b->graph;
    kc_node *node = &g->nodes[g->n_nodes - 1];
    free(node->inputs);
    free(node->input_roles);
    free(node->outputs);
    g->n_nodes--;
    *value = outs[0];
    g->values[*value].producer = -1;
    free(outs);
    return KC_OK;
}

static kc_status kc_add_model_input(kc_builder *b, kc_layer *input_layer, int value)
{
    kc_graph *g = b->graph;
    int *inputs = kc_realloc_array(g->inputs, (size_t)g->n_inputs + 1, sizeof *inputs);
    if (!inputs)
        return KC_ERR_NOMEM;
    g->inputs = inputs;
    char **names = kc_realloc_array(g->input_names, (size_t)g->n_inputs + 1, sizeof *names);
    if (!names)
        return KC_ERR_NOMEM;
    g->input_names = names;
    if (!(names[g->n_inputs] = kc_strdup(input_layer->name)))
        return KC_ERR_NOMEM;
    inputs[g->n_inputs++] = value;
    return KC_OK;
}

/* ------------------------------------------------ constants of calls */

static kc_status kc_const_count(const cJSON *v, int depth, kc_shape *shape, int axis)
{
    if (depth > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "constant argument nested too deeply");
    if (cJSON_IsNumber(v) || cJSON_IsBool(v))
        return KC_OK;
    if (!cJSON_IsArray(v))
        return kc_fail(KC_ERR_FORMAT, "constant argument is not numeric");
    int n = cJSON_GetArraySize(v);
    if (axis >= shape->rank) {
        shape->rank = axis + 1;
        shape->dims[axis] = n;
    } else if (shape->dims[axis] != n) {
        return kc_fail(KC_ERR_FORMAT, "constant argument is ragged");
    }
    for (const cJSON *e = v->child; e; e = e->next)
        KC_TRY(kc_const_count(e, depth + 1, shape, axis + 1));
    return KC_OK;
}

static void kc_const_fill(const cJSON *v, float *data, int64_t *pos)
{
    if (cJSON_IsNumber(v))
        data[(*pos)++] = (float)v->valuedouble;
    else if (cJSON_IsBool(v))
        data[(*pos)++] = cJSON_IsTrue(v) ? 1.0f : 0.0f;
    else
        for (const cJSON *e = v->child; e; e = e->next)
            kc_const_fill(e, data, pos);
}

/* A numeric JSON value (scalar or nested lists; Keras 3 __tensor__ /
 * __numpy__ objects carry it in config.value) as a float tensor. */
kc_status kc_const_from_json(const cJSON *v, kc_const_arg *out)
{
    if (cJSON_IsObject(v)) {
        const char *cls = kc_json_str(v, "class_name");
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(v, "config");
        if (!cls || (strcmp(cls, "__tensor__") != 0 && strcmp(cls, "__numpy__") != 0))
            return kc_fail(KC_ERR_UNSUPPORTED, "constant argument of class %s",
                           cls ? cls : "?");
        v = cJSON_GetObjectItemCaseSensitive(cfg, "value");
    }
    memset(&out->shape, 0, sizeof out->shape);
    KC_TRY(kc_const_count(v, 0, &out->shape, 0));
    int64_t count = kc_shape_count(&out->shape);
    if (count < 0 || count > (1 << 24))
        return kc_fail(KC_ERR_LIMIT, "constant argument too large");
    out->data = kc_calloc((size_t)(count ? count : 1), sizeof(float));
    if (!out->data)
        return KC_ERR_NOMEM;
    int64_t pos = 0;
    kc_const_fill(v, out->data, &pos);
    return KC_OK;
}

/* ------------------------------------------------------ inbound nodes */

static int kc_is_keras2_ref(const cJSON *v)
{
    int n = cJSON_GetArraySize(v);
    return cJSON_IsArray(v) && (n == 3 || n == 4) && cJSON_IsString(v->child) &&
           cJSON_IsNumber(v->child->next) && cJSON_IsNumber(v->child->next->next) &&
           strcmp(v->child->valuestring, "_CONSTANT_VALUE") != 0;
}

static kc_status kc_add_ref(kc_call_spec *spec, const char *layer, const cJSON *node,
                            const cJSON *tensor, const char *role)
{
    if (spec->n_refs >= KC_MAX_NODE_INPUTS)
        return kc_fail(KC_ERR_LIMIT, "a call has more than %d tensor inputs", KC_MAX_NODE_INPUTS);
    if (!cJSON_IsNumber(node) || !cJSON_IsNumber(tensor) || node->valuedouble < 0 ||
        tensor->valuedouble < 0 || node->valuedouble > 1e6 || tensor->valuedouble > 1e6)
        return kc_fail(KC_ERR_FORMAT, "bad node/tensor index in a reference to '%s'", layer);
    kc_ref *r = &spec->refs[spec->n_refs++];
    r->layer = layer;
    r->node = (int64_t)node->valuedouble;
    r->tensor = (int64_t)tensor->valuedouble;
    r->role = role;
    return KC_OK;
}

static int kc_is_keras_tensor(const cJSON *v)
{
    const char *cls = cJSON_IsObject(v) ? kc_json_str(v, "class_name") : NULL;
    return cls && strcmp(cls, "__keras_tensor__") == 0;
}

/* Keras 3: collect __keras_tensor__ references anywhere inside v. */
static kc_status kc_collect_k3(kc_call_spec *spec, const cJSON *v, const char *role, int depth)
{
    if (depth > 64)
        return kc_fail(KC_ERR_LIMIT, "call arguments nested too deeply");
    if (kc_is_keras_tensor(v)) {
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(v, "config");
        const cJSON *hist = cJSON_GetObjectItemCaseSensitive(cfg, "keras_history");
        if (cJSON_GetArraySize(hist) != 3 || !cJSON_IsString(hist->child))
            return kc_fail(KC_ERR_FORMAT, "bad keras_history");
        return kc_add_ref(spec, hist->child->valuestring, hist->child->next,
                          hist->child->next->next, role);
    }
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        for (const cJSON *e = v->child; e; e = e->next)
            KC_TRY(kc_collect_k3(spec, e, role, depth + 1));
    return KC_OK;
}

static int kc_has_tensor(const cJSON *v, int depth)
{
    if (depth > 64)
        return 0;
    if (kc_is_keras_tensor(v))
        return 1;
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        for (const cJSON *e = v->child; e; e = e->next)
            if (kc_has_tensor(e, depth + 1))
                return 1;
    return 0;
}

/* Numbers, numeric lists and __tensor__/__numpy__ objects are constant
 * operands; anything else (slices, ellipsis, dtype names) stays in
 * call_args for the op to interpret. */
static int kc_is_numeric_arg(const cJSON *v, int depth)
{
    if (depth > KC_MAX_RANK)
        return 0;
    if (cJSON_IsNumber(v) || cJSON_IsBool(v))
        return 1;
    if (cJSON_IsArray(v)) {
        for (const cJSON *e = v->child; e; e = e->next)
            if (!kc_is_numeric_arg(e, depth + 1))
                return 0;
        return v->child != NULL;
    }
    const char *cls = cJSON_IsObject(v) ? kc_json_str(v, "class_name") : NULL;
    return cls && (strcmp(cls, "__tensor__") == 0 || strcmp(cls, "__numpy__") == 0);
}

static kc_status kc_parse_node_k3(const cJSON *node, kc_call_spec *spec)
{
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(node, "args");
    const cJSON *kwargs = cJSON_GetObjectItemCaseSensitive(node, "kwargs");
    if ((args && !cJSON_IsArray(args)) || (kwargs && !cJSON_IsObject(kwargs)))
        return kc_fail(KC_ERR_FORMAT, "inbound node args/kwargs malformed");
    spec->args = args;
    spec->kwargs = kwargs;
    int pos = 0;
    for (const cJSON *a = args ? args->child : NULL; a; a = a->next, pos++) {
        if (kc_has_tensor(a, 0)) {
            KC_TRY(kc_collect_k3(spec, a, NULL, 0));
        } else if (kc_is_numeric_arg(a, 0) && spec->n_consts < 16) {
            spec->consts[spec->n_consts] = a;
            spec->const_pos[spec->n_consts++] = pos;
        }
    }
    for (const cJSON *k = kwargs ? kwargs->child : NULL; k; k = k->next)
        KC_TRY(kc_collect_k3(spec, k, k->string, 0));
    return KC_OK;
}

/* Keras 2: [[layer, node, tensor, {kwargs}], ...] with _CONSTANT_VALUE
 * entries and tensor references inside kwargs. */
static kc_status kc_parse_node_k2(const cJSON *node, kc_call_spec *spec)
{
    spec->keras2_form = 1;
    int pos = 0;
    for (const cJSON *e = node->child; e; e = e->next, pos++) {
        int n = cJSON_GetArraySize(e);
        if (!cJSON_IsArray(e) || n < 3 || n > 4 || !cJSON_IsString(e->child))
            return kc_fail(KC_ERR_FORMAT, "inbound node entry is not [layer, node, tensor, "
                           "kwargs]");
        const cJSON *kw = n == 4 ? cJSON_GetArrayItem(e, 3) : NULL;
        if (kw && !cJSON_IsObject(kw))
            return kc_fail(KC_ERR_FORMAT, "inbound node kwargs is not an object");
        if (kw && !spec->kwargs)
            spec->kwargs = kw;
        if (strcmp(e->child->valuestring, "_CONSTANT_VALUE") == 0) {
            if (spec->n_consts < 16) {
                spec->consts[spec->n_consts] = cJSON_GetArrayItem(e, 2);
                spec->const_pos[spec->n_consts++] = pos;
            }
            continue;
        }
        KC_TRY(kc_add_ref(spec, e->child->valuestring, e->child->next, e->child->next->next,
                          NULL));
    }
    for (const cJSON *k = spec->kwargs ? spec->kwargs->child : NULL; k; k = k->next) {
        if (kc_is_keras2_ref(k)) {
            KC_TRY(kc_add_ref(spec, k->child->valuestring, k->child->next,
                              k->child->next->next, k->string));
        } else if (cJSON_IsArray(k)) {
            for (const cJSON *e = k->child; e; e = e->next)
                if (kc_is_keras2_ref(e))
                    KC_TRY(kc_add_ref(spec, e->child->valuestring, e->child->next,
                                      e->child->next->next, k->string));
        }
    }
    return KC_OK;
}

static kc_status kc_parse_node(const cJSON *node, kc_call_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    if (cJSON_IsObject(node))
        return kc_parse_node_k3(node, spec);
    if (cJSON_IsArray(node))
        return kc_parse_node_k2(node, spec);
    return kc_fail(KC_ERR_FORMAT, "inbound node is neither a list nor an object");
}

/* ------------------------------------------------- Functional models */

typedef struct kc_fn_state {
    kc_builder *b;
    kc_layer *model;
    kc_child_state *children;
    int n;
    int keras2;     /* inbound nodes in list form (offset rule for nested models) */
} kc_fn_state;

static kc_child_state *kc_fn_find(kc_fn_state *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->children[i].layer->name, name) == 0)
            return &s->children[i];
    return NULL;
}

/* Which call of the producer a reference means (keras-formats.md §1.4.4,
 * §2.4): one serialized call -> that call; nested models in Keras 2 (and in
 * Keras 3 input/output lists) count from 1. */
static int64_t kc_fn_call_index(const kc_fn_state *s, const kc_child_state *c, int64_t node,
                                int io_list)
{
    if ((c->layer->def && (c->layer->def->flags & KC_OPF_INPUT)) || c->n_nodes <= 1)
        return 0;
    if (!kc_is_model_class(c->layer->class_name))
        return node;
    int functional = strcmp(c->layer->class_name, "Sequential") != 0;
    return (s->keras2 || (io_list && functional)) ? node - 1 : node;
}

/* 1 resolved, 0 not yet available, error status (negative path) via st. */
static int kc_fn_resolve(kc_fn_state *s, const kc_ref *r, int io_list, int *value,
                         kc_status *st)
{
    kc_child_state *c = kc_fn_find(s, r->layer);
    if (!c) {
        *st = kc_fail(KC_ERR_FORMAT, "reference to unknown layer '%s'", r->layer);
        return -1;
    }
    int64_t call = kc_fn_call_index(s, c, r->node, io_list);
    int is_input = c->layer->def && (c->layer->def->flags & KC_OPF_INPUT);
    int n_calls = is_input ? 1 : c->n_nodes;
    if (call < 0 || call >= n_calls) {
        *st = kc_fail(KC_ERR_FORMAT, "reference to call %lld of layer '%s', which has %d",
                      (long long)r->node, r->layer, n_calls);
        return -1;
    }
    if (!c->done[call])
        return 0;
    if (r->tensor >= c->n_outs[call]) {
        *st = kc_fail(KC_ERR_FORMAT, "reference to output %lld of layer '%s', which has %d",
                      (long long)r->tensor, r->layer, c->n_outs[call]);
        return -1;
    }
    *value = c->outs[call][r->tensor];
    return 1;
}

static kc_status kc_fn_record(kc_child_state *c, int call, int *outs, int n_out)
{
    c->outs[call] = outs;
    c->n_outs[call] = n_out;
    c->done[call] = 1;
    return KC_OK;
}

static void kc_fn_connected_to(kc_layer *layer, const kc_call_spec *spec)
{
    if (layer->connected_to || spec->n_refs == 0)
        return;
    size_t cap = 1;
    for (int i = 0; i < spec->n_refs; i++)
        cap += strlen(spec->refs[i].layer) + 48;
    layer->connected_to = kc_calloc(cap, 1);
    if (!layer->connected_to)
        return;
    size_t used = 0;
    for (int i = 0; i < spec->n_refs && used < cap; i++)
        used += (size_t)snprintf(layer->connected_to + used, cap - used, "%s%s[%lld][%lld]",
                                 i ? ", " : "", spec->refs[i].layer,
                                 (long long)spec->refs[i].node, (long long)spec->refs[i].tensor);
}

/* Try to perform call k of child c; returns 1 done, 0 not ready. */
static int kc_fn_try_call(kc_fn_state *s, kc_child_state *c, int k, kc_status *st)
{
    kc_call_spec *spec = kc_calloc(1, sizeof *spec);
    int vals[KC_MAX_NODE_INPUTS];
    const char *roles[KC_MAX_NODE_INPUTS];
    if (!spec) {
        *st = KC_ERR_NOMEM;
        return -1;
    }
    *st = kc_parse_node(cJSON_GetArrayItem(c->nodes, k), spec);
    int ready = *st == KC_OK ? 1 : -1;
    if (spec->keras2_form)
        s->keras2 = 1;
    for (int i = 0; ready == 1 && i < spec->n_refs; i++) {
        ready = kc_fn_resolve(s, &spec->refs[i], 0, &vals[i], st);
        roles[i] = spec->refs[i].role;
    }
    if (ready == 1) {
        int *outs = NULL, n_out = 0;
        *st = kc_call_layer(s->b, c->layer, vals, roles, spec->n_refs, spec, &outs, &n_out);
        if (*st == KC_OK) {
            if (c->layer->parent == s->b->graph->root)
                kc_fn_connected_to(c->layer, spec);
            kc_fn_record(c, k, outs, n_out);
        } else {
            free(outs);
            ready = -1;
        }
    }
    free(spec);
    if (*st != KC_OK)
        return -1;
    return ready;
}

static kc_status kc_fn_process(kc_fn_state *s)
{
    int progress = 1, pending = 1;
    while (progress && pending) {
        progress = pending = 0;
        for (int i = 0; i < s->n; i++) {
            kc_child_state *c = &s->children[i];
            if (c->layer->def && (c->layer->def->flags & KC_OPF_INPUT))
                continue;
            for (int k = 0; k < c->n_nodes; k++) {
                if (c->done[k])
                    continue;
                kc_status st = KC_OK;
                int r = kc_fn_try_call(s, c, k, &st);
                if (r < 0)
                    return st;
                if (r == 1)
                    progress = 1;
                else
                    pending = 1;
            }
        }
    }
    if (!pending)
        return KC_OK;
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->children[i].n_nodes; k++)
            if (!s->children[i].done[k])
                return kc_fail(KC_ERR_FORMAT, "layer '%s': call %d depends on a layer that is "
                               "never computed (missing layer or cycle)",
                               s->children[i].layer->name, k);
    return KC_OK;
}

/* input_layers/output_layers: a bare triple, a list of triples or a dict. */
static kc_status kc_io_refs(const cJSON *io, kc_call_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    if (!io)
        return kc_fail(KC_ERR_FORMAT, "model has no input_layers/output_layers");
    if (cJSON_IsArray(io) && cJSON_GetArraySize(io) == 3 && cJSON_IsString(io->child))
        return kc_add_ref(spec, io->child->valuestring, io->child->next, io->child->next->next,
                          NULL);
    if (!cJSON_IsArray(io) && !cJSON_IsObject(io))
        return kc_fail(KC_ERR_FORMAT, "input_layers/output_layers malformed");
    for (const cJSON *e = io->child; e; e = e->next) {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 3 || !cJSON_IsString(e->child))
            return kc_fail(KC_ERR_FORMAT, "input_layers/output_layers entry malformed");
        KC_TRY(kc_add_ref(spec, e->child->valuestring, e->child->next, e->child->next->next,
                          NULL));
    }
    return KC_OK;
}

static void kc_fn_free(kc_fn_state *s)
{
    for (int i = 0; i < s->n; i++) {
        kc_child_state *c = &s->children[i];
        for (int k = 0; k < c->n_nodes; k++)
            free(c->outs ? c->outs[k] : NULL);
        free(c->outs);
        free(c->n_outs);
        free(c->done);
    }
    free(s->children);
}

static kc_status kc_fn_children(kc_fn_state *s, const cJSON *layers)
{
    kc_builder *b = s->b;
    int create = s->model->n_children == 0;
    if (!create && s->model->n_children != s->n)
        return kc_fail(KC_ERR_FORMAT, "nested model changed between calls");
    int i = 0;
    for (const cJSON *e = layers->child; e; e = e->next, i++) {
        kc_child_state *c = &s->children[i];
        if (create)
            KC_TRY(kc_make_layer(b, s->model, e, i, &c->layer));
        else
            c->layer = s->model->children[i];
        c->entry = e;
        c->nodes = cJSON_GetObjectItemCaseSensitive(e, "inbound_nodes");
        if (c->nodes && !cJSON_IsArray(c->nodes))
            return kc_fail(KC_ERR_FORMAT, "layer '%s': inbound_nodes is not a list",
                           c->layer->name);
        c->n_nodes = c->nodes ? cJSON_GetArraySize(c->nodes) : 0;
        if (c->n_nodes > KC_MAX_CALLS)
            return kc_fail(KC_ERR_LIMIT, "layer '%s' has too many calls", c->layer->name);
        int slots = c->n_nodes > 0 ? c->n_nodes : 1;
        c->done = kc_calloc((size_t)slots, 1);
        c->outs = kc_calloc((size_t)slots, sizeof *c->outs);
        c->n_outs = kc_calloc((size_t)slots, sizeof *c->n_outs);
        if (!c->done || !c->outs || !c->n_outs)
            return KC_ERR_NOMEM;
        if (c->layer->def && (c->layer->def->flags & KC_OPF_INPUT))
            c->n_nodes = 1; /* the InputLayer's own tensor is call 0 */
    }
    for (int a = 0; a < s->n; a++)
        for (int c2 = a + 1; c2 < s->n; c2++)
            if (strcmp(s->children[a].layer->name, s->children[c2].layer->name) == 0)
                return kc_fail(KC_ERR_FORMAT, "two layers are named '%s'",
                               s->children[a].layer->name);
    return KC_OK;
}

static kc_status kc_fn_bind_inputs(kc_fn_state *s, const cJSON *cfg, const int *in_vals,
                                   int n_in)
{
    kc_call_spec *spec = kc_calloc(1, sizeof *spec);
    if (!spec)
        return KC_ERR_NOMEM;
    kc_status st = kc_io_refs(cJSON_GetObjectItemCaseSensitive(cfg, "input_layers"), spec);
    if (st == KC_OK && in_vals && n_in != spec->n_refs)
        st = kc_fail(KC_ERR_FORMAT, "nested model '%s' takes %d inputs, called with %d",
                     s->model->name, spec->n_refs, n_in);
    for (int i = 0; st == KC_OK && i < spec->n_refs; i++) {
        kc_child_state *c = kc_fn_find(s, spec->refs[i].layer);
        if (!c || !c->layer->def || !(c->layer->def->flags & KC_OPF_INPUT)) {
            st = kc_fail(KC_ERR_FORMAT, "input '%s' is not an InputLayer of the model",
                         spec->refs[i].layer);
            break;
        }
        int value;
        if (in_vals) {
            value = in_vals[i];
        } else {
            st = kc_make_input(s->b, c->layer, &value);
            if (st == KC_OK)
                st = kc_add_model_input(s->b, c->layer, value);
        }
        int *outs = st == KC_OK ? kc_calloc(1, sizeof *outs) : NULL;
        if (st == KC_OK && !outs)
            st = KC_ERR_NOMEM;
        if (st == KC_OK) {
            outs[0] = value;
            free(c->outs[0]);
            kc_fn_record(c, 0, outs, 1);
        }
    }
    free(spec);
    return st;
}

static kc_status kc_fn_outputs(kc_fn_state *s, const cJSON *cfg, int **out_vals, int *n_out)
{
    kc_call_spec *spec = kc_calloc(1, sizeof *spec);
    if (!spec)
        return KC_ERR_NOMEM;
    kc_status st = kc_io_refs(cJSON_GetObjectItemCaseSensitive(cfg, "output_layers"), spec);
    int *vals = st == KC_OK ? kc_calloc((size_t)(spec->n_refs + 1), sizeof *vals) : NULL;
    if (st == KC_OK && !vals)
        st = KC_ERR_NOMEM;
    for (int i = 0; st == KC_OK && i < spec->n_refs; i++) {
        int r = kc_fn_resolve(s, &spec->refs[i], 1, &vals[i], &st);
        if (r == 0)
            st = kc_fail(KC_ERR_FORMAT, "output '%s' is never computed", spec->refs[i].layer);
    }
    if (st == KC_OK) {
        *out_vals = vals;
        *n_out = spec->n_refs;
    } else {
        free(vals);
    }
    free(spec);
    return st;
}

static kc_status kc_build_functional(kc_builder *b, kc_layer *model, const int *in_vals,
                                     int n_in, int **out_vals, int *n_out)
{
    const cJSON *cfg = model->config;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(cfg, "layers");
    if (!cJSON_IsArray(layers))
        return kc_fail(KC_ERR_FORMAT, "model '%s' has no layers list", model->name);
    kc_fn_state s = {.b = b, .model = model, .n = cJSON_GetArraySize(layers)};
    if (s.n > KC_MAX_LAYERS_PER_MODEL)
        return kc_fail(KC_ERR_LIMIT, "model '%s' has %d layers (max %d)", model->name, s.n,
                       KC_MAX_LAYERS_PER_MODEL);
    s.children = kc_calloc((size_t)(s.n ? s.n : 1), sizeof *s.children);
    if (!s.children)
        return KC_ERR_NOMEM;
    kc_status st = kc_fn_children(&s, layers);
    if (st == KC_OK)
        st = kc_fn_bind_inputs(&s, cfg, in_vals, n_in);
    if (st == KC_OK)
        st = kc_fn_process(&s);
    if (st == KC_OK)
        st = kc_fn_outputs(&s, cfg, out_vals, n_out);
    kc_fn_free(&s);
    return st;
}

/* ------------------------------------------------- Sequential models */

/* Keras 1/2 Sequentials without an InputLayer carry the input shape on the
 * first layer: batch_input_shape, input_shape, or Keras 1 input_dim
 * (+ input_length for sequences). */
static kc_status kc_seq_first_shape(const kc_layer *first, kc_shape *shape, kc_dtype *dtype)
{
    const cJSON *cfg = first->config;
    int64_t dims[KC_MAX_RANK];
    int n;
    KC_TRY(kc_cfg_shape(cfg, "batch_input_shape", KC_MAX_RANK, dims, &n));
    if (n < 0)
        KC_TRY(kc_cfg_shape(cfg, "batch_shape", KC_MAX_RANK, dims, &n));
    if (n < 0) {
        int64_t inner[KC_MAX_RANK];
        KC_TRY(kc_cfg_shape(cfg, "input_shape", KC_MAX_RANK - 1, inner, &n));
        if (n < 0) {
            int64_t dim, length;
            KC_TRY(kc_cfg_int(cfg, "input_dim", -1, &dim));
            KC_TRY(kc_cfg_int(cfg, "input_length", -1, &length));
            if (dim < 0)
                return kc_fail(KC_ERR_FORMAT, "Sequential model has no input shape (no "
                               "InputLayer and no batch_input_shape on '%s')", first->name);
            n = 0;
            if (strcmp(first->class_name, "Embedding") == 0)
                inner[n++] = length;
            else if (length >= 0)
                inner[n++] = length, inner[n++] = dim;
            else
                inner[n++] = dim;
        }
        dims[0] = -1;
        memcpy(dims + 1, inner, (size_t)n * sizeof *dims);
        n++;
    }
    if (n < 1)
        return kc_fail(KC_ERR_FORMAT, "input shape of '%s' is empty", first->name);
    *shape = kc_shape_make(n, dims);
    *dtype = strcmp(first->class_name, "Embedding") == 0 ? KC_I32 : KC_F32;
    const char *dt;
    KC_TRY(kc_cfg_str(cfg, "dtype", NULL, &dt));
    if (dt && strstr(dt, "int"))
        *dtype = KC_I32;
    return KC_OK;
}

/* The input shape a model declares when it is the first layer of a
 * Sequential: a nested model passes the question to its own first layer. */
static kc_status kc_declared_input(const kc_layer *first, int depth, kc_shape *shape,
                                   kc_dtype *dtype)
{
    if (depth > KC_MAX_MODEL_DEPTH)
        return kc_fail(KC_ERR_LIMIT, "models nested deeper than %d", KC_MAX_MODEL_DEPTH);
    if (first->def && (first->def->flags & KC_OPF_INPUT)) {
        kc_op_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.layer = (kc_layer *)first;
        KC_TRY(first->def->infer(&ctx));
        *shape = ctx.out[0];
        *dtype = ctx.out_dtype[0] ? ctx.out_dtype[0] : KC_F32;
        return KC_OK;
    }
    if (kc_is_model_class(first->class_name) && cJSON_IsObject(first->config)) {
        int64_t dims[KC_MAX_RANK];
        int n;
        KC_TRY(kc_cfg_shape(first->config, "build_input_shape", KC_MAX_RANK, dims, &n));
        if (n > 0) {
            *shape = kc_shape_make(n, dims);
            *dtype = KC_F32;
            return KC_OK;
        }
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(first->config, "layers");
        const cJSON *entry = cJSON_IsArray(layers) ? layers->child : NULL;
        if (!entry)
            return kc_fail(KC_ERR_FORMAT, "nested model '%s' has no layers", first->name);
        /* Look at the config of the nested model's first layer without
         * building it (it is built when the nested model is called). */
        kc_layer probe;
        memset(&probe, 0, sizeof probe);
        const char *cls = kc_json_str(entry, "class_name");
        probe.class_name = (char *)(cls ? cls : "");
        probe.name = (char *)first->name;
        probe.config = cJSON_GetObjectItemCaseSensitive(entry, "config");
        probe.def = kc_op_lookup(kc_json_str(entry, "module"), probe.class_name);
        return kc_declared_input(&probe, depth + 1, shape, dtype);
    }
    return kc_seq_first_shape(first, shape, dtype);
}

static kc_status kc_seq_input(kc_builder *b, kc_layer *model, int *value)
{
    kc_layer *first = model->children[0];
    if (first->def && (first->def->flags & KC_OPF_INPUT)) {
        KC_TRY(kc_make_input(b, first, value));
        return kc_add_model_input(b, first, *value);
    }
    kc_shape shape;
    kc_dtype dtype = KC_F32;
    kc_status st = kc_declared_input(first, b->depth, &shape, &dtype);
    if (st != KC_OK)
        return kc_layer_context(st, model);
    *value = kc_graph_add_value(b->graph, &shape, dtype, -1, 0);
    if (*value < 0)
        return KC_ERR_NOMEM;
    /* Keras names the implicit input "<first layer>_input". */
    kc_graph *g = b->graph;
    char name[512];
    snprintf(name, sizeof name, "%s_input", first->name);
    int *inputs = kc_realloc_array(g->inputs, (size_t)g->n_inputs + 1, sizeof *inputs);
    if (!inputs)
        return KC_ERR_NOMEM;
    g->inputs = inputs;
    char **names = kc_realloc_array(g->input_names, (size_t)g->n_inputs + 1, sizeof *names);
    if (!names)
        return KC_ERR_NOMEM;
    g->input_names = names;
    if (!(names[g->n_inputs] = kc_strdup(name)))
        return KC_ERR_NOMEM;
    inputs[g->n_inputs++] = *value;
    return KC_OK;
}

static kc_status kc_build_sequential(kc_builder *b, kc_layer *model, const int *in_vals,
                                     int n_in, int **out_vals, int *n_out)
{
    const cJSON *cfg = model->config;
    const cJSON *layers = cJSON_IsArray(cfg) ? cfg : cJSON_GetObjectItemCaseSensitive(cfg, "layers");
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1)
        return kc_fail(KC_ERR_FORMAT, "Sequential '%s' has no layers", model->name);
    int n = cJSON_GetArraySize(layers);
    if (n > KC_MAX_LAYERS_PER_MODEL)
        return kc_fail(KC_ERR_LIMIT, "Sequential '%s' has too many layers", model->name);
    if (model->n_children == 0) {
        int i = 0;
        for (const cJSON *e = layers->child; e; e = e->next, i++) {
            kc_layer *child;
            KC_TRY(kc_make_layer(b, model, e, i, &child));
        }
    } else if (model->n_children != n) {
        return kc_fail(KC_ERR_FORMAT, "nested Sequential changed between calls");
    }
    int x;
    if (in_vals) {
        if (n_in != 1)
            return kc_fail(KC_ERR_FORMAT, "Sequential '%s' called with %d inputs", model->name,
                           n_in);
        x = in_vals[0];
    } else {
        KC_TRY(kc_seq_input(b, model, &x));
    }
    int *outs = NULL, count = 1;
    for (int i = 0; i < model->n_children; i++) {
        kc_layer *child = model->children[i];
        if (child->def && (child->def->flags & KC_OPF_INPUT))
            continue;
        int *next = NULL, n_next = 0;
        kc_status st = kc_call_layer(b, child, &x, NULL, 1, NULL, &next, &n_next);
        if (st != KC_OK) {
            free(outs);
            free(next);
            return st;
        }
        x = next[0];
        free(outs);
        outs = next;
        count = n_next;
        if (child->parent == b->graph->root && !child->connected_to)
            child->connected_to = kc_strdup("");
    }
    if (!outs) {
        outs = kc_calloc(1, sizeof *outs);
        if (!outs)
            return KC_ERR_NOMEM;
        outs[0] = x;
        count = 1;
    }
    *out_vals = outs;
    *n_out = count;
    return KC_OK;
}

static kc_status kc_build_model(kc_builder *b, kc_layer *model, const int *in_vals, int n_in,
                                int **out_vals, int *n_out)
{
    if (b->depth >= KC_MAX_MODEL_DEPTH)
        return kc_fail(KC_ERR_LIMIT, "models nested deeper than %d", KC_MAX_MODEL_DEPTH);
    b->depth++;
    kc_status st = strcmp(model->class_name, "Sequential") == 0
                       ? kc_build_sequential(b, model, in_vals, n_in, out_vals, n_out)
                       : kc_build_functional(b, model, in_vals, n_in, out_vals, n_out);
    b->depth--;
    return st;
}

static kc_status kc_set_model_outputs(kc_builder *b, kc_layer *root, const int *outs, int n)
{
    kc_graph *g = b->graph;
    g->outputs = kc_calloc((size_t)(n ? n : 1), sizeof *g->outputs);
    g->output_names = kc_calloc((size_t)(n ? n : 1), sizeof *g->output_names);
    if (!g->outputs || !g->output_names)
        return KC_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        g->outputs[i] = outs[i];
        const kc_value *v = &g->values[outs[i]];
        const char *name = v->producer >= 0 ? g->nodes[v->producer].layer->name : root->name;
        char buf[600];
        if (v->producer >= 0 && g->nodes[v->producer].n_outputs > 1)
            snprintf(buf, sizeof buf, "%s:%d", name, v->slot);
        else
            snprintf(buf, sizeof buf, "%s", name);
        if (!(g->output_names[i] = kc_strdup(buf)))
            return KC_ERR_NOMEM;
        g->n_outputs = i + 1;
    }
    return KC_OK;
}

kc_status kc_build_graph(const cJSON *model_entry, const kc_parse_env *env, kc_graph **out)
{
    *out = NULL;
    kc_builder b = {.graph = kc_graph_new(), .env = env};
    if (!b.graph)
        return KC_ERR_NOMEM;
    kc_layer *root = NULL;
    kc_status st = kc_make_layer(&b, NULL, model_entry, 0, &root);
    if (st == KC_OK && !kc_is_model_class(root->class_name))
        st = kc_fail(KC_ERR_FORMAT, "top-level class '%s' is not a model", root->class_name);
    int *outs = NULL, n_out = 0;
    if (st == KC_OK) {
        b.graph->root = root;
        st = kc_build_model(&b, root, NULL, 0, &outs, &n_out);
    }
    if (st == KC_OK)
        st = kc_set_model_outputs(&b, root, outs, n_out);
    free(outs);
    if (st != KC_OK) {
        kc_graph_free(b.graph);
        return st;
    }
    *out = b.graph;
    return KC_OK;
}
