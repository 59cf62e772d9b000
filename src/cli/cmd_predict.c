/* `kerasc predict MODEL IMAGE...`: classify JPEG/PNG images with an image
 * classifier and print each image's top-K classes.
 *
 * A model file does not say how its images were preprocessed: the
 * keras.applications family decides (tf, caffe, torch, or inside the model),
 * and a fine-tuned model keeps its base's. So the default is "tf" (the most
 * common family: MobileNet*, Inception*, Xception, NASNet, ResNet*V2), and a
 * note on stderr says so and names the other modes. One model is recognised
 * for certain: nsfwjs's (a tfjs-layers model with 5 classes), whose own
 * JavaScript divides by 255 and resizes with align_corners; that is its
 * default.
 *
 * Images are decoded, resized, preprocessed and run in batches of
 * KC_PREDICT_BATCH: one run for the usual handful of images, and bounded
 * memory (decoded photos and activations) for a whole directory. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "image/image.h"
#include "kerasc.h"

#define KC_PREDICT_BATCH 32
#define KC_PREDICT_DEFAULT_TOP 5
#define KC_PREDICT_MAX_TOP 1000000

typedef struct kc_predict_args {
    const char *model_path;
    const char *weights_path;
    char **images;
    int n_images;
    const char *prep_name;   /* NULL: default */
    const char *interp_name; /* NULL: default */
    const char *labels_spec; /* NULL: default */
    int size_h, size_w;      /* 0: the model's */
    int top;
} kc_predict_args;

/* Everything decided before running. */
typedef struct kc_predict_plan {
    int h, w;
    int classes; /* -1 until known (an output shape can be (None, None)) */
    kc_img_prep prep;
    kc_img_interp interp;
    int nsfwjs;  /* the model is nsfwjs's: its label set and preprocessing */
    kc_img_labels labels;
    int labels_loaded;
} kc_predict_plan;

static void kc_predict_usage(FILE *out)
{
    fprintf(out,
            "usage: kerasc predict MODEL IMAGE... [--preprocess MODE] [--size HxW] [--top K]\n"
            "                      [--labels imagenet|nsfwjs|FILE] [--interpolation MODE]\n"
            "                      [--weights FILE]\n"
            "\n"
            "Classify JPEG/PNG images (detected from their bytes) with a model whose\n"
            "input is (None, H, W, 3) and whose first output is (None, classes).\n"
            "\n"
            "  --preprocess MODE   keras.applications preprocess_input mode:\n"
            "                        tf     x/127.5 - 1 (MobileNet, MobileNetV2, Inception,\n"
            "                               Xception, NASNet, ResNet*V2) [default]\n"
            "                        caffe  RGB->BGR minus ImageNet means (VGG, ResNet)\n"
            "                        torch  x/255, ImageNet mean/std (DenseNet)\n"
            "                        none   raw 0..255 (EfficientNet*, ConvNeXt,\n"
            "                               MobileNetV3: they rescale inside)\n"
            "                        unit   x/255 (nsfwjs; models trained on\n"
            "                               Rescaling(1/255) inputs)\n"
            "  --size HxW          resize to H x W (default: the model's input size)\n"
            "  --interpolation M   bilinear (tf.image.resize) [default], nearest\n"
            "                      (PIL, as keras.utils.load_img(target_size=...)),\n"
            "                      bilinear-align-corners (tfjs, as nsfwjs)\n"
            "  --top K             classes to print per image (default 5)\n"
            "  --labels SET        imagenet, nsfwjs or a file with one label per line\n"
            "                      (default: imagenet for 1000 classes, nsfwjs for\n"
            "                      nsfwjs's model, else class indices)\n"
            "  --weights FILE      weights for a JSON architecture (as in summary)\n"
            "\n"
            "nsfwjs's model (tfjs-layers, 5 classes) defaults to --preprocess unit\n"
            "--interpolation bilinear-align-corners, as nsfwjs's own JavaScript does.\n"
            "The imagenet labels are read from $KERASC_DATA/labels/imagenet.txt, else\n"
            "<executable dir>/../data or <executable dir>/data.\n");
}

/* ------------------------------------------------------------ arguments */

static int kc_predict_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "kerasc predict: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see kerasc predict --help)\n");
    return 2;
}

/* A decimal integer in [min, max] at the start of s; *end is set past it. */
static int kc_predict_parse_prefix(const char *s, long min, long max, int *out, char **end)
{
    if (!s || *s < '0' || *s > '9')
        return 0;
    errno = 0;
    long v = strtol(s, end, 10);
    if (errno || *end == s || v < min || v > max)
        return 0;
    *out = (int)v;
    return 1;
}

/* A decimal integer in [min, max], the whole string. */
static int kc_predict_parse_int(const char *s, long min, long max, int *out)
{
    char *end;
    return kc_predict_parse_prefix(s, min, max, out, &end) && *end == '\0';
}

/* "HxW" or "N" (square). */
static int kc_predict_parse_size(const char *s, int *h, int *w)
{
    char *end;
    if (!kc_predict_parse_prefix(s, 1, KC_IMG_MAX_SIDE, h, &end))
        return 0;
    if (*end == '\0') {
        *w = *h;
        return 1;
    }
    return (*end == 'x' || *end == 'X') && kc_predict_parse_int(end + 1, 1, KC_IMG_MAX_SIDE, w);
}

/* The value of an option: "--opt=VALUE" or "--opt VALUE". */
static const char *kc_predict_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0' || *i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

static int kc_predict_is_option(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

static int kc_predict_option(int argc, char **argv, int *i, kc_predict_args *a)
{
    const char *arg = argv[*i];
    static const char *const names[] = {"--preprocess", "--size", "--top", "--labels",
                                        "--interpolation", "--weights"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (!kc_predict_is_option(arg, names[k]))
            continue;
        const char *v = kc_predict_value(argc, argv, i, names[k]);
        if (!v || !*v)
            return kc_predict_usage_error("%s needs a value", names[k]);
        kc_img_prep prep;
        kc_img_interp interp;
        switch (k) {
        case 0:
            if (kc_img_prep_parse(v, &prep) != KC_OK)
                return kc_predict_usage_error("unknown --preprocess '%s' (tf, caffe, torch, "
                                              "none, unit)", v);
            a->prep_name = v;
            return 0;
        case 1:
            if (!kc_predict_parse_size(v, &a->size_h, &a->size_w))
                return kc_predict_usage_error("bad --size '%s' (HxW, e.g. 224x224)", v);
            return 0;
        case 2:
            if (!kc_predict_parse_int(v, 1, KC_PREDICT_MAX_TOP, &a->top))
                return kc_predict_usage_error("bad --top '%s' (a positive count)", v);
            return 0;
        case 3:
            a->labels_spec = v;
            return 0;
        case 4:
            if (kc_img_interp_parse(v, &interp) != KC_OK)
                return kc_predict_usage_error("unknown --interpolation '%s' (bilinear, "
                                              "nearest, bilinear-align-corners)", v);
            a->interp_name = v;
            return 0;
        default:
            a->weights_path = v;
            return 0;
        }
    }
    return kc_predict_usage_error("unknown option '%s'", arg);
}

/* 0: parsed; 2: usage error (printed); 1: --help printed (exit 0). */
static int kc_predict_parse(int argc, char **argv, kc_predict_args *a)
{
    memset(a, 0, sizeof *a);
    a->top = KC_PREDICT_DEFAULT_TOP;
    a->images = calloc((size_t)argc + 1, sizeof *a->images);
    if (!a->images) {
        fprintf(stderr, "kerasc: error: out of memory\n");
        return 2;
    }
    int options_done = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)) {
            kc_predict_usage(stdout);
            return 1;
        }
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = 1;
        } else if (!options_done && arg[0] == '-' && arg[1]) {
            if (kc_predict_option(argc, argv, &i, a) != 0)
                return 2;
        } else if (!a->model_path) {
            a->model_path = arg;
        } else {
            a->images[a->n_images++] = argv[i];
        }
    }
    if (!a->model_path)
        return kc_predict_usage_error("no model given%s", "");
    if (a->n_images == 0)
        return kc_predict_usage_error("no image given%s", "");
    return 0;
}

/* ------------------------------------------------------------- planning */

static void kc_predict_shape_text(const int64_t *dims, int rank, char *buf, size_t cap)
{
    size_t used = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < rank && used < cap; i++) {
        if (dims[i] < 0)
            used += (size_t)snprintf(buf + used, cap - used, "%sNone", i ? ", " : "");
        else
            used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                                     (long long)dims[i]);
    }
    if (used < cap)
        snprintf(buf + used, cap - used, "%s)", rank == 1 ? "," : "");
}

static kc_status kc_predict_fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "kerasc: error: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return KC_ERR_SHAPE;
}

/* Input must be (None, H, W, 3); the size comes from it or from --size. */
static kc_status kc_predict_input(const kc_model *model, const kc_predict_args *a,
                                  kc_predict_plan *p)
{
    int64_t dims[KC_MAX_RANK];
    char shape[160];
    if (kc_model_num_inputs(model) != 1)
        return kc_predict_fail("%s: predict needs a model with one image input; this one has "
                               "%s (use kerasc run)", a->model_path,
                               kc_model_num_inputs(model) == 0 ? "none" : "several");
    int rank = kc_model_input_shape(model, 0, dims);
    kc_predict_shape_text(dims, rank < 0 ? 0 : rank, shape, sizeof shape);
    if (rank != 4 || dims[3] != 3)
        return kc_predict_fail("%s: model input is %s, not RGB images (None, H, W, 3) "
                               "(use kerasc run)", a->model_path, shape);
    p->h = a->size_h ? a->size_h : (int)dims[1];
    p->w = a->size_w ? a->size_w : (int)dims[2];
    if (p->h <= 0 || p->w <= 0)
        return kc_predict_fail("%s: model input is %s: give the image size with --size HxW",
                               a->model_path, shape);
    if ((dims[1] > 0 && dims[1] != p->h) || (dims[2] > 0 && dims[2] != p->w)) {
        char size[64];
        snprintf(size, sizeof size, "--size %dx%d", p->h, p->w);
        return kc_predict_fail("%s does not match the model's input %s", size, shape);
    }
    if (dims[1] > KC_IMG_MAX_SIDE || dims[2] > KC_IMG_MAX_SIDE)
        return kc_predict_fail("%s: model input %s is larger than kerasc resizes to",
                               a->model_path, shape);
    return KC_OK;
}

/* Output 0 must be (None, classes). */
static kc_status kc_predict_output(const kc_model *model, const kc_predict_args *a,
                                   kc_predict_plan *p)
{
    int64_t dims[KC_MAX_RANK];
    char shape[160];
    int rank = kc_model_num_outputs(model) > 0 ? kc_model_output_shape(model, 0, dims) : -1;
    kc_predict_shape_text(dims, rank < 0 ? 0 : rank, shape, sizeof shape);
    if (rank != 2)
        return kc_predict_fail("%s: model output is %s, not class scores (None, classes)",
                               a->model_path, rank < 0 ? "missing" : shape);
    p->classes = dims[1] > 0 && dims[1] <= INT_MAX ? (int)dims[1] : -1;
    return KC_OK;
}

static int kc_predict_is_nsfwjs(const kc_model *model, int classes)
{
    return classes == 5 && strcmp(kc_model_format(model), "tfjs-layers") == 0;
}

static kc_status kc_predict_modes(const kc_model *model, const kc_predict_args *a,
                                  kc_predict_plan *p)
{
    p->nsfwjs = kc_predict_is_nsfwjs(model, p->classes);
    p->prep = p->nsfwjs ? KC_IMG_PREP_UNIT : KC_IMG_PREP_TF;
    p->interp = p->nsfwjs ? KC_IMG_BILINEAR_ALIGN_CORNERS : KC_IMG_BILINEAR;
    if (a->prep_name && kc_img_prep_parse(a->prep_name, &p->prep) != KC_OK)
        return KC_ERR_ARG;
    if (a->interp_name && kc_img_interp_parse(a->interp_name, &p->interp) != KC_OK)
        return KC_ERR_ARG;
    return KC_OK;
}

/* Labels given with --labels load before any work, so a typo fails fast. */
static kc_status kc_predict_explicit_labels(const kc_predict_args *a, kc_predict_plan *p)
{
    if (!a->labels_spec)
        return KC_OK;
    if (kc_img_labels_open(a->labels_spec, &p->labels) != KC_OK) {
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
        return KC_ERR_IO;
    }
    p->labels_loaded = 1;
    return KC_OK;
}

/* Default labels once the class count is known; the imagenet file missing
 * is a note, not an error: indices are still an answer. */
static void kc_predict_default_labels(kc_predict_plan *p)
{
    if (p->labels_loaded)
        return;
    p->labels_loaded = 1;
    const char *set = p->nsfwjs ? "nsfwjs" : p->classes == 1000 ? "imagenet" : NULL;
    if (set && kc_img_labels_open(set, &p->labels) != KC_OK)
        fprintf(stderr, "kerasc predict: note: %s; printing class indices\n", kc_last_error());
}

static kc_status kc_predict_check_labels(const kc_predict_args *a, const kc_predict_plan *p)
{
    if (p->labels.count == 0 || p->labels.count == p->classes)
        return KC_OK;
    char have[32], want[32];
    snprintf(have, sizeof have, "%d", p->labels.count);
    snprintf(want, sizeof want, "%d", p->classes);
    fprintf(stderr, "kerasc: error: labels '%s' have %s names but the model has %s classes\n",
            a->labels_spec ? a->labels_spec : "default", have, want);
    return KC_ERR_SHAPE;
}

static void kc_predict_note(const kc_predict_args *a, const kc_predict_plan *p)
{
    if (a->prep_name)
        return;
    if (p->nsfwjs)
        fprintf(stderr, "kerasc predict: note: nsfwjs model: using --preprocess unit "
                        "--interpolation %s, as nsfwjs's JavaScript does\n",
                kc_img_interp_name(p->interp));
    else
        fprintf(stderr,
                "kerasc predict: note: no --preprocess given, using tf (x/127.5 - 1: "
                "MobileNet, Inception, Xception, ResNetV2); VGG/ResNet need caffe, "
                "DenseNet torch, EfficientNet/ConvNeXt/MobileNetV3 none\n");
}

/* ------------------------------------------------------------- running */

static void kc_predict_print(const char *image, const float *scores, const kc_predict_plan *p,
                             int top, const int *idx)
{
    printf("%s:\n", image);
    for (int r = 0; r < top; r++) {
        int c = idx[r];
        if (p->labels.count)
            printf("  %d. %s (%d) %.4f\n", r + 1, p->labels.names[c], c, (double)scores[c]);
        else
            printf("  %d. class %d (%d) %.4f\n", r + 1, c, c, (double)scores[c]);
    }
}

static kc_status kc_predict_print_batch(const kc_predict_args *a, kc_predict_plan *p,
                                        char **images, int n, const kc_tensor *scores)
{
    if (kc_tensor_rank(scores) != 2 || kc_tensor_dim(scores, 0) != n ||
        kc_tensor_dim(scores, 1) <= 0 || kc_tensor_dim(scores, 1) > INT_MAX ||
        (p->classes > 0 && kc_tensor_dim(scores, 1) != p->classes)) {
        fprintf(stderr, "kerasc: error: %s: model output has an unexpected shape\n",
                a->model_path);
        return KC_ERR_SHAPE;
    }
    p->classes = (int)kc_tensor_dim(scores, 1);
    kc_predict_default_labels(p);
    if (kc_predict_check_labels(a, p) != KC_OK)
        return KC_ERR_SHAPE;
    int top = a->top < p->classes ? a->top : p->classes;
    int *idx = calloc((size_t)top, sizeof *idx);
    if (!idx)
        return KC_ERR_NOMEM;
    const float *all = kc_tensor_cdata(scores);
    kc_status st = KC_OK;
    for (int i = 0; i < n && st == KC_OK; i++) {
        const float *row = all + (size_t)i * (size_t)p->classes;
        st = kc_img_topk(row, p->classes, top, idx);
        if (st == KC_OK)
            kc_predict_print(images[i], row, p, top, idx);
    }
    free(idx);
    if (st != KC_OK)
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
    return st;
}

/* Decode n images into a (n, h, w, 3) batch. */
static kc_status kc_predict_load_batch(char **images, int n, const kc_predict_plan *p,
                                       kc_tensor **batch)
{
    kc_img *decoded = calloc((size_t)n, sizeof *decoded);
    if (!decoded)
        return KC_ERR_NOMEM;
    kc_status st = KC_OK;
    for (int i = 0; i < n && st == KC_OK; i++)
        st = kc_img_decode_file(images[i], &decoded[i]);
    if (st == KC_OK)
        st = kc_img_to_tensor(decoded, n, p->h, p->w, p->interp, p->prep, batch);
    for (int i = 0; i < n; i++)
        kc_img_free(&decoded[i]);
    free(decoded);
    return st;
}

static kc_status kc_predict_run_batch(const kc_model *model, kc_session *session,
                                      const kc_predict_args *a, kc_predict_plan *p,
                                      char **images, int n, int first)
{
    kc_tensor *batch = NULL;
    int n_out = kc_model_num_outputs(model);
    kc_tensor **outputs = calloc((size_t)n_out, sizeof *outputs);
    kc_status st = outputs ? kc_predict_load_batch(images, n, p, &batch) : KC_ERR_NOMEM;
    if (st == KC_OK) {
        const kc_tensor *inputs[1] = {batch};
        st = kc_session_run(session, inputs, 1, outputs, n_out);
    }
    if (st != KC_OK)
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
    else {
        if (first)
            kc_predict_note(a, p);
        st = kc_predict_print_batch(a, p, images, n, outputs[0]);
    }
    for (int i = 0; outputs && i < n_out; i++)
        kc_tensor_free(outputs[i]);
    free(outputs);
    kc_tensor_free(batch);
    return st;
}

static kc_status kc_predict_with_model(const kc_model *model, const kc_predict_args *a,
                                       kc_predict_plan *p)
{
    if (kc_predict_input(model, a, p) != KC_OK || kc_predict_output(model, a, p) != KC_OK)
        return KC_ERR_SHAPE;
    kc_predict_modes(model, a, p);
    if (kc_predict_explicit_labels(a, p) != KC_OK)
        return KC_ERR_IO;
    if (p->classes > 0 && p->labels_loaded && kc_predict_check_labels(a, p) != KC_OK)
        return KC_ERR_SHAPE;
    /* one session per model: its packed weights need no second copy (the
     * smaller last batch re-reads them from the file) */
    kc_session_options options = {.release_packed_weights = 1};
    kc_session *session = NULL;
    if (kc_session_new(model, &options, &session) != KC_OK) {
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
        return KC_ERR_UNSUPPORTED;
    }
    kc_status st = KC_OK;
    for (int i = 0; i < a->n_images && st == KC_OK; i += KC_PREDICT_BATCH) {
        int n = a->n_images - i < KC_PREDICT_BATCH ? a->n_images - i : KC_PREDICT_BATCH;
        st = kc_predict_run_batch(model, session, a, p, a->images + i, n, i == 0);
    }
    kc_session_free(session);
    return st;
}

int kc_cmd_predict(int argc, char **argv)
{
    kc_predict_args args;
    int rc = kc_predict_parse(argc, argv, &args);
    if (rc != 0) {
        free(args.images);
        return rc == 1 ? 0 : 2;
    }
    kc_load_options options = {.weights_path = args.weights_path};
    kc_model *model = NULL;
    kc_predict_plan plan;
    memset(&plan, 0, sizeof plan);
    kc_status st = kc_model_load(args.model_path, &options, &model);
    if (st != KC_OK)
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
    else
        st = kc_predict_with_model(model, &args, &plan);
    kc_img_labels_free(&plan.labels);
    kc_model_free(model);
    free(args.images);
    if (st == KC_OK && fflush(stdout) != 0) {
        fprintf(stderr, "kerasc: error: writing the results failed\n");
        st = KC_ERR_IO;
    }
    return st == KC_OK ? 0 : 1;
}
