/* The layer registry: (module, class_name) -> op definition.
 *
 * class_name alone is ambiguous ("Add" is both keras.layers.Add and the op
 * keras.src.ops.numpy.Add), so entries are split by namespace: ops nodes
 * (module keras.src.ops.*) look only at KC_OPF_OPS_NODE defs, everything
 * else only at layer defs. A module outside Keras's own packages is a
 * user's custom class and is never matched. */
#include <string.h>

#include "ops/op.h"

static const kc_op_def *const *const kc_op_families[] = {
    kc_ops_core,   kc_ops_conv,      kc_ops_pool,      kc_ops_norm,
    kc_ops_activation, kc_ops_reshape, kc_ops_merge,   kc_ops_rnn,
    kc_ops_attention,  kc_ops_preprocess, kc_ops_numpy, kc_ops_tfop,
};

#define KC_N_FAMILIES (sizeof kc_op_families / sizeof kc_op_families[0])

static int kc_module_is_ops(const char *module)
{
    return module && strncmp(module, "keras.src.ops.", 14) == 0;
}

/* Keras's own packages across versions: keras, keras.layers, keras.src.*,
 * tf_keras.*, keras.engine.* (tf.keras 2.13-2.15 .keras files). */
static int kc_module_is_keras(const char *module)
{
    if (!module)
        return 1;
    return strcmp(module, "keras") == 0 || strncmp(module, "keras.", 6) == 0 ||
           strcmp(module, "tf_keras") == 0 || strncmp(module, "tf_keras.", 9) == 0 ||
           strncmp(module, "tensorflow.python.keras", 23) == 0;
}

const kc_op_def *kc_op_lookup(const char *module, const char *class_name)
{
    if (!class_name || !kc_module_is_keras(module))
        return NULL;
    unsigned want = kc_module_is_ops(module) ? KC_OPF_OPS_NODE : 0;
    for (size_t f = 0; f < KC_N_FAMILIES; f++)
        for (const kc_op_def *const *d = kc_op_families[f]; *d; d++) {
            if (((*d)->flags & KC_OPF_OPS_NODE) != want)
                continue;
            if (strcmp((*d)->class_name, class_name) == 0)
                return *d;
        }
    return NULL;
}

int kc_op_count(void)
{
    int n = 0;
    for (size_t f = 0; f < KC_N_FAMILIES; f++)
        for (const kc_op_def *const *d = kc_op_families[f]; *d; d++)
            n++;
    return n;
}

const kc_op_def *kc_op_at(int index)
{
    for (size_t f = 0; f < KC_N_FAMILIES; f++)
        for (const kc_op_def *const *d = kc_op_families[f]; *d; d++)
            if (index-- == 0)
                return *d;
    return NULL;
}
