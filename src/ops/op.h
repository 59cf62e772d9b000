/* What an op is: the registry entry for one Keras class. Each op parses its
 * attributes from the layer config, infers output shapes from input shapes
 * and declares the weights it expects (names, Keras 3 groups, shapes), so a
 * file whose weights disagree with its config is rejected at load. Kernels
 * live in backends, not here. */
#ifndef KC_OP_H
#define KC_OP_H

#include <cjson/cJSON.h>

#include "base/error.h"
#include "base/tensor.h"
#include "graph/graph.h"

#define KC_MAX_OUTPUTS 16

enum {
    KC_OPF_LAYER = 1u << 0,     /* a keras.layers class */
    KC_OPF_OPS_NODE = 1u << 1,  /* a keras.src.ops.* operation entry */
    KC_OPF_MODEL = 1u << 2,     /* Functional / Sequential / Model */
    KC_OPF_INPUT = 1u << 3,     /* InputLayer */
    KC_OPF_IDENTITY = 1u << 4,  /* identity at inference (Dropout, noise, Random*) */
};

/* Format facts an op may need to interpret its config. */
typedef struct kc_parse_env {
    int keras_major;            /* 1, 2 or 3 (from the file's keras_version) */
} kc_parse_env;

typedef struct kc_op_ctx {
    kc_layer *layer;
    const kc_parse_env *env;
    const kc_shape *in;         /* input shapes */
    const kc_dtype *in_dtype;
    char *const *in_roles;      /* NULL or keyword per input (see kc_node) */
    int n_in;
    const kc_const_arg *consts; /* constant arguments of an ops node */
    int n_consts;
    const cJSON *call_kwargs;   /* kwargs of this call, may be NULL */
    const cJSON *call_args;     /* positional args of this call as written
                                   (Keras 3 form), may be NULL */
    kc_shape out[KC_MAX_OUTPUTS];
    kc_dtype out_dtype[KC_MAX_OUTPUTS]; /* KC_DTYPE_INVALID = float32 */
    int n_out;
    int first_call;             /* fill layer->specs on the first call */
} kc_op_ctx;

typedef struct kc_op_def {
    const char *class_name;
    unsigned flags;
    /* Parse layer->config into layer->attrs (malloc'd; freed with free()).
     * May be NULL for ops without attributes. */
    kc_status (*parse)(kc_layer *layer, const kc_parse_env *env);
    /* Output shapes of one call; on ctx->first_call also the weight specs. */
    kc_status (*infer)(kc_op_ctx *ctx);
    /* Frees layer->attrs when it owns more than one block (wrappers);
     * NULL means free(). */
    void (*free_attrs)(void *attrs);
} kc_op_def;

/* Registry lookup on (module, class_name). module may be NULL (Keras 2
 * configs). Returns NULL when the class is unknown. */
const kc_op_def *kc_op_lookup(const char *module, const char *class_name);
/* All registered defs (for the README table and tests). */
int kc_op_count(void);
const kc_op_def *kc_op_at(int index);

/* Each op family exports a NULL-terminated table of defs. */
extern const kc_op_def *const kc_ops_core[];
extern const kc_op_def *const kc_ops_conv[];
extern const kc_op_def *const kc_ops_pool[];
extern const kc_op_def *const kc_ops_norm[];
extern const kc_op_def *const kc_ops_activation[];
extern const kc_op_def *const kc_ops_reshape[];
extern const kc_op_def *const kc_ops_merge[];
extern const kc_op_def *const kc_ops_rnn[];
extern const kc_op_def *const kc_ops_attention[];
extern const kc_op_def *const kc_ops_preprocess[];
extern const kc_op_def *const kc_ops_numpy[];
extern const kc_op_def *const kc_ops_tfop[];

/* ------------------------------------------------------ helpers for ops */

/* Add a weight spec to ctx->layer (only on the first call). */
void kc_op_spec(kc_op_ctx *ctx, const char *group, const char *name, int trainable, int rank,
                ...);
/* Require n_in inputs; error names the layer. */
kc_status kc_op_expect_inputs(const kc_op_ctx *ctx, int min, int max);
/* Require the input rank. */
kc_status kc_op_expect_rank(const kc_op_ctx *ctx, int input, int min_rank, int max_rank);
/* Normalise a possibly negative axis against rank; error if out of range. */
kc_status kc_op_axis(const kc_op_ctx *ctx, int axis, int rank, int *out);
/* Index of the input passed as keyword role, or -1. */
int kc_op_input_by_role(const kc_op_ctx *ctx, const char *role);
/* Set output 0 to the input 0 shape (identity-shaped ops). */
kc_status kc_op_same_shape(kc_op_ctx *ctx);
/* TF conv arithmetic: output length for padding "valid"/"same"/"causal";
 * unknown (-1) stays unknown. */
int64_t kc_conv_out_len(int64_t in, int64_t k, int64_t stride, int64_t dilation, int same);
/* TF conv and pooling arithmetic: the padding before `in` values along an
 * axis read into `out` by taps `extent` wide (dilation included) every
 * `stride` values. mode 1 "same": half of what the output needs, the odd
 * value after; 2 "causal": extent - 1, all before; 0 "valid": none. A
 * folded ZeroPadding is the caller's to add. */
int64_t kc_conv_pad_before(int64_t in, int64_t out, int64_t extent, int64_t stride, int mode);
/* Broadcast two shapes (NumPy rules). */
kc_status kc_broadcast(const kc_op_ctx *ctx, const kc_shape *a, const kc_shape *b, kc_shape *out);

/* Attribute helpers over a cJSON config object. Each returns KC_OK or a
 * KC_ERR_FORMAT naming the key; missing keys take the default. */
kc_status kc_cfg_int(const cJSON *cfg, const char *key, int64_t dflt, int64_t *out);
kc_status kc_cfg_float(const cJSON *cfg, const char *key, double dflt, double *out);
kc_status kc_cfg_bool(const cJSON *cfg, const char *key, int dflt, int *out);
/* String value (borrowed) or dflt; dict values with a "class_name" (Keras
 * serialized objects) give their class_name only when allow_object. */
kc_status kc_cfg_str(const cJSON *cfg, const char *key, const char *dflt, const char **out);
/* An int or a list of n ints (kernel_size: 3 or [3, 3]). */
kc_status kc_cfg_ints(const cJSON *cfg, const char *key, int n, int64_t dflt, int64_t *out);
/* A list of up to max ints (shapes; null entries become -1). Returns count
 * in *n; missing key gives *n = -1. */
kc_status kc_cfg_shape(const cJSON *cfg, const char *key, int max, int64_t *out, int *n);
/* The name of an activation (string, or {"class_name": ..} object, or a
 * Keras 3 "function" object). Unknown names are an error. Keras 2 and 3
 * differ for hard_sigmoid: the name is returned as stored, the caller's env
 * decides the formula. */
kc_status kc_cfg_activation(const cJSON *cfg, const char *key, const char **out);
/* padding "valid"/"same"/"causal" -> 0/1/2; "full" etc are errors. */
kc_status kc_cfg_padding(const cJSON *cfg, int allow_causal, int *out);
/* data_format is channels_last or channels_first (the latter handled by a
 * layout transpose around the op); Keras 1 dim_ordering 'th' is refused. */
kc_status kc_cfg_channels_last(const cJSON *cfg);
int kc_cfg_is_channels_first(const cJSON *cfg);
/* Move the channel axis: NC... -> N...C and back (rank >= 3). */
void kc_shape_to_channels_last(kc_shape *s);
void kc_shape_to_channels_first(kc_shape *s);

#endif
