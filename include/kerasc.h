/*
 * kerasc — run pre-trained Keras models from C, with no Python at run time.
 *
 * This is the only public header. Every handle is opaque; every call that
 * can fail returns a kc_status, and on failure kc_last_error() returns a
 * one-line message naming the file, the layer and the reason, e.g.
 *   "model.keras: layer 'conv1' (Conv2D): kernel shape (3,3,3,8) != expected (3,3,1,8)"
 * The error string is per thread and valid until the next failing call on
 * that thread.
 */
#ifndef KERASC_H
#define KERASC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KC_VERSION_STRING "0.1.0"
#define KC_MAX_RANK 8

typedef enum kc_status {
    KC_OK = 0,
    KC_ERR_IO,          /* a file could not be opened or read */
    KC_ERR_FORMAT,      /* the bytes are not a valid model / tensor file */
    KC_ERR_UNSUPPORTED, /* valid, but kerasc does not implement it */
    KC_ERR_REFUSED,     /* holds code (Lambda, custom class, pickle): never executed */
    KC_ERR_SHAPE,       /* shapes or sizes do not agree */
    KC_ERR_LIMIT,       /* a size, depth or count exceeds kerasc's safety limits */
    KC_ERR_NOMEM,       /* out of memory */
    KC_ERR_ARG,         /* bad argument from the caller */
    KC_ERR_DEVICE       /* a device or its backend failed (CUDA error, lost worker) */
} kc_status;

typedef enum kc_dtype {
    KC_DTYPE_INVALID = 0,
    KC_F16, KC_BF16, KC_F32, KC_F64,
    KC_I8, KC_I16, KC_I32, KC_I64,
    KC_U8, KC_U16, KC_U32, KC_U64,
    KC_BOOL
} kc_dtype;

/* Name of a status code ("ok", "io", "format", ...). */
const char *kc_status_name(kc_status status);
/* Last error message of the calling thread ("" if none). */
const char *kc_last_error(void);
/* Name of a dtype as NumPy spells it ("float32"); "invalid" for bad values. */
const char *kc_dtype_name(kc_dtype dtype);
/* Size in bytes of one element; 0 for KC_DTYPE_INVALID. */
size_t kc_dtype_size(kc_dtype dtype);

/* ---------------------------------------------------------------- tensors */

typedef struct kc_tensor kc_tensor;

/* A new zero-filled tensor that owns its data. */
kc_status kc_tensor_new(kc_dtype dtype, int rank, const int64_t *dims, kc_tensor **out);
void kc_tensor_free(kc_tensor *tensor);
kc_dtype kc_tensor_dtype(const kc_tensor *tensor);
int kc_tensor_rank(const kc_tensor *tensor);
int64_t kc_tensor_dim(const kc_tensor *tensor, int axis);
int64_t kc_tensor_count(const kc_tensor *tensor);
void *kc_tensor_data(kc_tensor *tensor);
const void *kc_tensor_cdata(const kc_tensor *tensor);

/* NumPy .npy files, format 1.0/2.0/3.0, C order, little-endian;
 * float16/32/64, int8..64, uint8..64, bool. */
kc_status kc_tensor_load_npy(const char *path, kc_tensor **out);
kc_status kc_tensor_save_npy(const kc_tensor *tensor, const char *path);

/* ----------------------------------------------------------------- models */

typedef struct kc_model kc_model;

typedef struct kc_load_options {
    /* Weights file paired with a JSON architecture (Keras 3 .weights.h5 or
     * legacy weights-only .h5). NULL when the model file holds its weights. */
    const char *weights_path;
    /* The disk tier: keep the weights in a disk file, mapped read-only,
     * instead of in memory, so a model larger than RAM still loads; pages
     * are read when a layer runs and dropped after use. For HDF5-based
     * files (.keras, .h5, .weights.h5). The weights are converted once into
     * an unlinked file in `spill_dir` (NULL: $TMPDIR, else /var/tmp). */
    int disk_weights;
    const char *spill_dir;
} kc_load_options;

/* Load any supported Keras file; the format is detected from its bytes. */
kc_status kc_model_load(const char *path, const kc_load_options *options, kc_model **out);
void kc_model_free(kc_model *model);

/* "keras3-zip", "keras3-dir", "h5-legacy", "json+weights", "tfjs-layers" */
const char *kc_model_format(const kc_model *model);
/* Keras version recorded in the file ("unknown" if none). */
const char *kc_model_keras_version(const kc_model *model);
const char *kc_model_name(const kc_model *model);

int kc_model_num_inputs(const kc_model *model);
int kc_model_num_outputs(const kc_model *model);
const char *kc_model_input_name(const kc_model *model, int index);
const char *kc_model_output_name(const kc_model *model, int index);
/* Shape with -1 for the batch or any unknown dimension. Returns the rank,
 * writing at most KC_MAX_RANK dims; -1 for a bad index. */
int kc_model_input_shape(const kc_model *model, int index, int64_t dims[KC_MAX_RANK]);
int kc_model_output_shape(const kc_model *model, int index, int64_t dims[KC_MAX_RANK]);

typedef struct kc_param_counts {
    int64_t total;
    int64_t trainable;
    int64_t non_trainable;
    int64_t weight_bytes; /* bytes of the weights as stored in the file */
} kc_param_counts;

kc_param_counts kc_model_params(const kc_model *model);

/* Keras-style summary table (json = 0) or the same as JSON (json = 1). */
kc_status kc_model_summary(const kc_model *model, FILE *out, int json);

/* --------------------------------------------------------------- running */

typedef struct kc_session kc_session;

typedef struct kc_session_options {
    int threads; /* 0 = all cores */

    /* Placement, in TensorFlow device strings ("/CPU:0", "/GPU:0",
     * "/device:GPU:1"). All NULL/0: everything on the host CPU. */
    const char *device;          /* default compute device ("/CPU:0") */
    const char *const *place;    /* rules in graph order: "FIRST..LAST=/GPU:0",
                                    "FIRST..=DEV", "..LAST=DEV", "LAYER=DEV";
                                    later rules win */
    int n_place;
    const char *variables;       /* where every variable lives ("/CPU:0": host
                                    memory, streamed to the compute device);
                                    NULL: with the layer's compute device */
    int strict_placement;        /* a missing device is an error instead of a
                                    fallback to the CPU with one warning */
    /* Device memory budget per compute device, counting activations,
     * weights and workspace. On /CPU:0 a budget turns on the same
     * residency manager with host memory standing in for device memory. */
    size_t device_memory;        /* bytes; 0 = the GPU's free memory / none */
    int prefetch_depth;          /* ring slots for streamed weights, 0 = auto (<= 3) */
    const char *trace_path;      /* Chrome/Perfetto trace of each run, or NULL */
    /* Throughput mode: a larger batch runs as micro-batches of this many
     * samples through one plan sized for the micro-batch (the last one
     * zero-padded), so the activations of a batch of any size fit the
     * budget. 0 = the whole batch at once. */
    int64_t microbatch;
    /* Disk-backed weights (kc_load_options.disk_weights): at most this many
     * bytes of weights are paged in ahead of use; 0 = no bound. A layer
     * larger than it is an error that names the minimum. */
    size_t host_memory;
    /* 1: direct convolutions only. By default eligible 3x3 stride-1
     * convolutions use Winograd (about twice as fast; rounding differs
     * from direct convolution by ~1e-6 relative, inside kerasc's 1e-4
     * fidelity tolerance). KC_WINOGRAD=0 in the environment does the same. */
    int exact;
    /* Bytes Winograd convolutions may add to the session's memory over
     * direct ones: their transformed kernels beyond the Keras kernels
     * (1.8x to 4x the kernel) and the growth of the per-thread
     * scratchpads they need where the activation arena has no room for
     * them. Layers take Winograd in the order they first run while their
     * cost fits; the rest run direct. 0 = no bound. ResNet50 at batch 8:
     * 24 MiB keeps peak RSS within weights + activations + 64 MiB for
     * 2-10% more time than no bound. */
    size_t winograd_memory;
    /* 1: the session may free the model's arrays it does not read: those
     * of layers rewritten into copies of its own at creation (a
     * BatchNormalization folded into its convolution: the rewritten layer
     * takes the arrays over) and the kernels its oneDNN convolutions hold
     * packed, so the weights are resident once, not twice. The model can then
     * serve only this session: kc_session_new fails with KC_ERR_ARG when
     * the model already has a session, and any kc_session_new on the model
     * fails while this one lives. A later plan that needs a released array
     * (a new batch size or input shape) re-reads the model's weights from
     * its file (which must be unchanged since kc_model_load); a session
     * created after this one is freed gets them back the same way. Outputs
     * are bit-identical with and without it. No effect with disk-backed
     * weights or when a scheduler runs (placement, budgets, a trace).
     * Create and free the sessions of one model from one thread at a
     * time: the model counts them without a lock. */
    int release_packed_weights;
    /* 1: time every layer of every run on the host CPU loop;
     * kc_session_stats then reports each layer's mean time per run and
     * the totals per layer class. A scheduled session (placement, budgets,
     * a trace) reports its own per-layer stats of the last run; its device
     * layers are timed (GPU events around each) only with this or a
     * trace, since the events slow a GPU run (15% at batch 1). */
    int profile;
} kc_session_options;

/* A session executes a loaded model on the CPU. It borrows the model,
 * which must outlive it. */
kc_status kc_session_new(const kc_model *model, const kc_session_options *options,
                         kc_session **out);
void kc_session_free(kc_session *session);

/* Run the model. inputs are in the model's input order (any batch size;
 * the other dimensions must match the model; float or integer dtypes are
 * converted to float32, integer inputs of Embedding layers are indices).
 * They are only read, but a float32 input may be read while the run goes
 * on rather than copied at its start (KC_INPUT_DIRECT=0: always copied):
 * leave it unchanged until the call returns. outputs receives n_outputs
 * new float32 tensors in the model's output order, which the caller
 * frees with kc_tensor_free. */
kc_status kc_session_run(kc_session *session, const kc_tensor *const *inputs, int n_inputs,
                         kc_tensor **outputs, int n_outputs);
/* The same, writing into caller-owned float32 tensors of the outputs'
 * shapes (a shape mismatch is KC_ERR_SHAPE, after the run). Once a session
 * has run at these input shapes, kerasc itself allocates nothing per run;
 * oneDNN's primitive execution still makes a few small allocations (its
 * argument map, 7-8 per primitive) and none of 64 KiB or more (kerasc
 * bench reports both under its allocation-counting shim, tests/alloc/). */
kc_status kc_session_run_into(kc_session *session, const kc_tensor *const *inputs,
                              int n_inputs, kc_tensor *const *outputs, int n_outputs);

/* Bytes of the activation arena planned for the last run's input shapes
 * (values share space once their last reader has run). */
size_t kc_session_arena_bytes(const kc_session *session);
/* Batch lanes of the last run: 1, or T when its batch of B images ran as
 * T sub-batches of B/T side by side, one thread each, through the whole
 * model (T = the session's threads, 2 to 8, dividing B; host runs only,
 * not for a model with a TensorFlow-op, keras.ops, Masking or Embedding
 * layer; with options.profile too, whose times are then lane 0's, its
 * B/T images on one thread beside the others). Outputs are those of one batch:
 * the same kernels per image, within the fidelity tolerance. KC_LANES=0
 * in the environment when the session is created turns lanes off. */
int kc_session_lanes(const kc_session *session);
/* Pieces of layers (a kernel's units of work: chunks of pixels, output
 * vectors) that a batch lane done with its own images ran for a lane
 * still running, over the session's runs (0 without lanes). On a
 * shared machine one core is often slower than the other for minutes;
 * the lane done first then takes pieces of the slower lane's 1x1 and
 * Winograd 3x3 layers instead of waiting for it (not with more lanes
 * than the process's CPUs). The same outputs, bit for bit. KC_HELP=0 in
 * the environment turns it off. */
long kc_session_lanes_helped(const kc_session *session);
/* Branch regions of the last run's plan: 0, or how many blocks ran their
 * independent branches side by side, one thread each (InceptionV3's
 * towers): a run that is not split into batch lanes (batch 1) on 2 or
 * more threads, host runs only, not with options.profile, not for a
 * model with masks; a block's branches must share its work well enough
 * (no lane over 60% of it). Outputs within the fidelity tolerance of the
 * layer-by-layer run; the block's values take their own memory in the
 * arena. KC_BRANCHES=0 in the environment when the session is created
 * turns it off. */
int kc_session_branch_regions(const kc_session *session);
/* Of those, the regions whose branches were dealt to the two threads again
 * from their times measured over the first runs side by side (once per
 * plan, where that shortens the longer thread's share by 3% or more);
 * the same outputs, bit for bit. KC_BRANCH_REBALANCE=0 in the environment
 * when the session is created keeps the first deal (by multiply-adds). */
int kc_session_branch_moved(const kc_session *session);
/* Nodes absorbed into their producer at session creation (BatchNormalization
 * folded into a convolution/Dense, activations fused); KC_FUSE=0 in the
 * environment disables the rewrites. */
int kc_session_fused_nodes(const kc_session *session);

/* Per-layer compute and transfer times of the last run, achieved GB/s and
 * the run's lower bound max(compute, streamed bytes / bandwidth) when the
 * session has device placement; else, with options.profile, each layer's
 * mean time over the runs so far and the time per layer class; else "".
 * Valid until the next run or call. */
const char *kc_session_stats(const kc_session *session);
/* Most device bytes held at once under the budget (activations + resident
 * weights + streaming ring + workspace), over all managed devices; 0 when
 * the session has no device placement. */
size_t kc_session_device_peak_bytes(const kc_session *session);
/* Print each layer's compute device, where its variables live (host,
 * resident, streamed) and the bytes crossing each device boundary, for
 * input batch `batch`. Plans without running. */
kc_status kc_session_describe(kc_session *session, int64_t batch, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* KERASC_H */
