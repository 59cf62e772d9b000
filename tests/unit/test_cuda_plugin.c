/* The CUDA backend plugin (libkerasc_cuda.so), loaded with dlopen as the
 * host does. Without the plugin (no nvcc at build time) every test skips;
 * without a GPU only the interface, device_count, open's error and the
 * shape-free `supports` answers are checked; with a GPU each op is run
 * (upload_async + events + run + download) against plain-loop references.
 *
 * The plugin is $KC_CUDA_PLUGIN, else libkerasc_cuda.so in the build
 * directory root (KC_TEST_TMP is <build>/tmp). */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/core.h"
#include "ops/merge.h"
#include "ops/norm.h"
#include "ops/op.h"
#include "ops/pool.h"
#include "ops/preprocess.h"
#include "ops/reshape.h"

/* ----------------------------------------------------------- the plugin */

static void *g_dl;
static const kc_backend_iface *g_if;
static char g_msg[1024];

static kc_status test_fail(kc_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return status;
}

static void test_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static const kc_backend_host g_host = {test_fail, test_warn};

static const char *plugin_path(char *buf, size_t cap)
{
    const char *env = getenv("KC_CUDA_PLUGIN");
    if (env && *env)
        return env;
    /* KC_TEST_TMP's parent, textually: a build copied without its tmp/
     * (a GPU machine given prebuilt binaries) still finds the plugin. */
    snprintf(buf, cap, "%s", KC_TEST_TMP);
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "/%s", KC_BACKEND_CUDA_LIBRARY);
    return buf;
}

static int setup(void **state)
{
    (void)state;
    char buf[4096];
    const char *path = plugin_path(buf, sizeof buf);
    if (access(path, F_OK) != 0)
        return 0; /* not built: tests skip */
    /* Kept loaded to the end (as the host does): the CUDA runtime it pulls
     * in has exit-time handlers. */
    g_dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!g_dl) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    kc_backend_entry_fn entry = (kc_backend_entry_fn)dlsym(g_dl, KC_BACKEND_CUDA_ENTRY);
    if (!entry) {
        fprintf(stderr, "dlsym %s: %s\n", KC_BACKEND_CUDA_ENTRY, dlerror());
        return -1;
    }
    g_if = entry();
    return g_if ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    g_dl = NULL; /* RTLD_NODELETE: never unloaded */
    g_if = NULL;
    return 0;
}

#define NEED_PLUGIN()                                                           \
    do {                                                                        \
        if (!g_if) {                                                            \
            print_message("libkerasc_cuda.so not built (no nvcc): skipped\n"); \
            skip();                                                             \
        }                                                                       \
    } while (0)

static void test_interface(void **state)
{
    (void)state;
    NEED_PLUGIN();
    assert_int_equal(g_if->abi, KC_BACKEND_ABI);
    assert_string_equal(g_if->name, "cuda");
    assert_int_equal(g_if->type, KC_DEVICE_GPU);
    void (*const fns[])(void) = {
        (void (*)(void))g_if->device_count, (void (*)(void))g_if->open,
        (void (*)(void))g_if->close,        (void (*)(void))g_if->info,
        (void (*)(void))g_if->supports,     (void (*)(void))g_if->workspace_bytes,
        (void (*)(void))g_if->alloc,        (void (*)(void))g_if->free,
        (void (*)(void))g_if->upload_async, (void (*)(void))g_if->upload,
        (void (*)(void))g_if->download,     (void (*)(void))g_if->event_new,
        (void (*)(void))g_if->event_free,   (void (*)(void))g_if->record,
        (void (*)(void))g_if->wait,         (void (*)(void))g_if->event_sync,
        (void (*)(void))g_if->elapsed,      (void (*)(void))g_if->run,
        (void (*)(void))g_if->state_free,   (void (*)(void))g_if->synchronize,
        (void (*)(void))g_if->host_pin,     (void (*)(void))g_if->host_unpin,
        (void (*)(void))g_if->capture_begin, (void (*)(void))g_if->capture_end,
        (void (*)(void))g_if->graph_launch,  (void (*)(void))g_if->graph_free,
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        assert_non_null(fns[i]);
    /* Twice: the answer is stable and nothing crashes without a GPU. */
    int n = g_if->device_count();
    assert_true(n >= 0);
    assert_int_equal(g_if->device_count(), n);
}

static void test_open_errors(void **state)
{
    (void)state;
    NEED_PLUGIN();
    int n = g_if->device_count();
    kc_backend *b = (kc_backend *)&g_msg; /* must be reset to NULL */
    g_msg[0] = 0;
    assert_int_not_equal(g_if->open(n, &g_host, &b), KC_OK);
    assert_null(b);
    assert_true(strlen(g_msg) > 0);
    assert_null(strchr(g_msg, '\n'));
    assert_non_null(strstr(g_msg, "cuda"));
    g_msg[0] = 0;
    assert_int_not_equal(g_if->open(-1, &g_host, &b), KC_OK);
    assert_true(strlen(g_msg) > 0);
    if (n == 0) {
        g_msg[0] = 0;
        assert_int_not_equal(g_if->open(0, &g_host, &b), KC_OK);
        assert_null(b);
        assert_true(strlen(g_msg) > 0);
        print_message("no GPU: open(0) -> %s\n", g_msg);
    }
}

/* ------------------------------------------------------ layers by hand */

static kc_layer make_layer(const char *cls, void *attrs, int n_weights)
{
    kc_layer l;
    memset(&l, 0, sizeof l);
    l.name = (char *)cls;
    l.class_name = (char *)cls;
    l.def = kc_op_lookup(NULL, cls);
    l.attrs = attrs;
    l.n_weights = n_weights;
    return l;
}

static kc_conv_attrs conv_attrs(kc_conv_kind kind, int spatial, int64_t filters, int64_t k0,
                                int64_t k1, int64_t s, int64_t d, int padding, int64_t groups,
                                int64_t dm, int use_bias, const char *act)
{
    kc_conv_attrs a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.spatial = spatial;
    a.filters = filters;
    a.kernel[0] = k0;
    a.kernel[1] = k1;
    a.strides[0] = a.strides[1] = s;
    a.dilation[0] = a.dilation[1] = d;
    a.output_padding[0] = a.output_padding[1] = a.output_padding[2] = -1;
    a.padding = padding;
    a.groups = groups;
    a.depth_multiplier = dm;
    a.use_bias = use_bias;
    a.activation = act;
    return a;
}

static void test_supports(void **state)
{
    (void)state;
    NEED_PLUGIN();
    kc_conv_attrs c2 = conv_attrs(KC_CONV_PLAIN, 2, 8, 3, 3, 2, 1, 1, 1, 1, 1, "relu");
    kc_layer l = make_layer("Conv2D", &c2, 2);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
    l.channels_first = 1;
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    /* the host's rewrites (runtime/fuse.c), which these kernels do not run */
    l.channels_first = 0;
    c2.accumulate = 1;
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    c2.accumulate = 0;
    c2.pad_after[1] = 1;
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    c2.pad_after[1] = 0;
    c2.post_dw = &l;
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    c2.post_dw = NULL;
    c2.pre_pool = &l;
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    c2.pre_pool = NULL;
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
    kc_pool_attrs mp = {.kind = KC_POOL_MAX, .spatial = 2, .pool = {3, 3, 1},
                        .strides = {2, 2, 1}};
    l = make_layer("MaxPooling2D", &mp, 0);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
    mp.pad_before[0] = mp.pad_before[1] = 1;
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    kc_conv_attrs c3 = conv_attrs(KC_CONV_PLAIN, 3, 8, 3, 3, 1, 1, 0, 1, 1, 1, "relu");
    l = make_layer("Conv3D", &c3, 2);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    kc_conv_attrs dw = conv_attrs(KC_CONV_DEPTHWISE, 2, 0, 3, 3, 1, 1, 1, 1, 2, 1, "hard_sigmoid");
    l = make_layer("DepthwiseConv2D", &dw, 2);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
    kc_dense_attrs da = {10, 1, "softmax"};
    l = make_layer("Dense", &da, 2);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
    da.activation = "no_such_activation";
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    kc_act_layer_attrs prelu;
    memset(&prelu, 0, sizeof prelu);
    prelu.kind = KC_ACT_PRELU;
    l = make_layer("PReLU", &prelu, 1);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    l = make_layer("Flatten", NULL, 0);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
    l = make_layer("Dropout", NULL, 0);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
    l = make_layer("LSTM", NULL, 3);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    kc_merge_attrs dot = {KC_MERGE_DOT, -1, {1, 1}, 0};
    l = make_layer("Dot", &dot, 0);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 0);
    kc_merge_attrs cat = {KC_MERGE_CONCAT, -1, {0, 0}, 0};
    l = make_layer("Concatenate", &cat, 0);
    assert_int_equal(g_if->supports(NULL, &l, NULL), 1);
}

/* ------------------------------------------------ GPU runs vs references */

static uint32_t g_rng = 12345;
static float frand(void)
{
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static float *rand_buf(int64_t n)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static int64_t shape_count(const kc_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

static kc_shape shp(int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    kc_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank;
    int64_t d[4] = {d0, d1, d2, d3};
    for (int i = 0; i < rank; i++)
        s.dims[i] = d[i];
    return s;
}

#define MAX_IO 4
/* One run on the device: inputs and weights uploaded with upload_async
 * on the copy stream, ordered before the compute stream by an event. */
static void gpu_run(kc_backend *b, const kc_layer *layer, const float *const *in,
                    const kc_shape *in_shape, int n_in, const float *const *w,
                    const int64_t *w_count, int n_w, const kc_shape *out_shape, float *out)
{
    void *din[MAX_IO] = {0}, *dw[MAX_IO] = {0}, *dout = NULL, *ws = NULL;
    for (int i = 0; i < n_in; i++) {
        size_t bytes = (size_t)shape_count(&in_shape[i]) * sizeof(float);
        assert_int_equal(g_if->alloc(b, bytes, &din[i]), KC_OK);
        assert_int_equal(g_if->upload_async(b, din[i], in[i], bytes), KC_OK);
    }
    for (int i = 0; i < n_w; i++) {
        size_t bytes = (size_t)w_count[i] * sizeof(float);
        assert_int_equal(g_if->alloc(b, bytes, &dw[i]), KC_OK);
        assert_int_equal(g_if->upload_async(b, dw[i], w[i], bytes), KC_OK);
    }
    size_t out_bytes = (size_t)shape_count(out_shape) * sizeof(float);
    assert_int_equal(g_if->alloc(b, out_bytes, &dout), KC_OK);
    kc_backend_event *copied, *t0, *t1;
    assert_int_equal(g_if->event_new(b, &copied), KC_OK);
    assert_int_equal(g_if->event_new(b, &t0), KC_OK);
    assert_int_equal(g_if->event_new(b, &t1), KC_OK);
    assert_int_equal(g_if->record(b, KC_STREAM_COPY, copied), KC_OK);
    assert_int_equal(g_if->wait(b, KC_STREAM_COMPUTE, copied), KC_OK);

    kc_node node;
    memset(&node, 0, sizeof node);
    node.layer = (kc_layer *)layer;
    node.n_inputs = n_in;
    node.n_outputs = 1;
    void *slot = NULL;
    kc_backend_call call;
    memset(&call, 0, sizeof call);
    call.node = &node;
    call.layer = layer;
    call.keras_major = 3;
    call.in = (const float *const *)din;
    call.in_shape = in_shape;
    call.n_in = n_in;
    float *outs[1] = {dout};
    call.out = outs;
    call.out_shape = out_shape;
    call.n_out = 1;
    call.w = n_w ? (const float *const *)dw : NULL;
    call.n_w = n_w;
    call.state = &slot;
    assert_int_equal(g_if->supports(b, layer, &node), 1);
    size_t ws_bytes = g_if->workspace_bytes(b, &call);
    if (ws_bytes)
        assert_int_equal(g_if->alloc(b, ws_bytes, &ws), KC_OK);
    call.workspace = ws;
    call.workspace_size = ws_bytes;
    assert_int_equal(g_if->record(b, KC_STREAM_COMPUTE, t0), KC_OK);
    g_msg[0] = 0;
    kc_status st = g_if->run(b, &call);
    if (st != KC_OK)
        fail_msg("run %s: %s", layer->class_name, g_msg);
    /* Twice: the cached plan is reused with fresh weights. */
    assert_int_equal(g_if->run(b, &call), KC_OK);
    assert_int_equal(g_if->record(b, KC_STREAM_COMPUTE, t1), KC_OK);
    assert_int_equal(g_if->download(b, out, dout, out_bytes), KC_OK);
    assert_int_equal(g_if->event_sync(b, t1), KC_OK);
    assert_true(g_if->elapsed(b, t0, t1) >= 0);
    assert_int_equal(g_if->synchronize(b), KC_OK);
    if (slot)
        g_if->state_free(b, slot);
    g_if->event_free(b, copied);
    g_if->event_free(b, t0);
    g_if->event_free(b, t1);
    for (int i = 0; i < n_in; i++)
        g_if->free(b, din[i]);
    for (int i = 0; i < n_w; i++)
        g_if->free(b, dw[i]);
    g_if->free(b, dout);
    g_if->free(b, ws);
}

static void expect_close(const char *what, const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float tol = 1e-4f * (fabsf(want[i]) > 1 ? fabsf(want[i]) : 1);
        if (!(fabsf(got[i] - want[i]) <= tol))
            fail_msg("%s: element %lld is %.7g, expected %.7g", what, (long long)i,
                     (double)got[i], (double)want[i]);
    }
}

/* TF padding before the first element. */
static int64_t pad_before(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d, int mode)
{
    int64_t keff = (k - 1) * d + 1;
    if (mode == 2)
        return keff - 1;
    if (mode == 0)
        return 0;
    int64_t total = (out - 1) * s + keff - in;
    return total > 0 ? total / 2 : 0;
}

static int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t d, int mode)
{
    int64_t keff = (k - 1) * d + 1;
    return mode ? (in + s - 1) / s : (in - keff) / s + 1;
}

/* Reference NHWC convolution; 1-D as h = 1. w is (kh, kw, c/groups, f). */
static void ref_conv(const float *x, int64_t n, int64_t h, int64_t wd, int64_t c, const float *w,
                     const float *bias, int64_t f, int64_t kh, int64_t kw, int64_t s, int64_t d,
                     int mode, int64_t groups, int64_t oh, int64_t ow, float *y)
{
    int64_t ph = h == 1 && kh == 1 ? 0 : pad_before(h, oh, kh, s, d, mode);
    int64_t pw = pad_before(wd, ow, kw, s, d, mode);
    int64_t sh = h == 1 && kh == 1 ? 1 : s, dh = h == 1 && kh == 1 ? 1 : d;
    int64_t cg = c / groups, fg = f / groups;
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++)
                for (int64_t o = 0; o < f; o++) {
                    int64_t g = o / fg;
                    double acc = bias ? bias[o] : 0;
                    for (int64_t ky = 0; ky < kh; ky++)
                        for (int64_t kx = 0; kx < kw; kx++) {
                            int64_t iy = oy * sh + ky * dh - ph, ix = ox * s + kx * d - pw;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                                continue;
                            for (int64_t ci = 0; ci < cg; ci++)
                                acc += x[((b * h + iy) * wd + ix) * c + g * cg + ci] *
                                       w[((ky * kw + kx) * cg + ci) * f + o];
                        }
                    y[((b * oh + oy) * ow + ox) * f + o] = (float)acc;
                }
}

static void relu(float *y, int64_t n, float hi)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = y[i] < 0 ? 0 : hi > 0 && y[i] > hi ? hi : y[i];
}

static kc_backend *g_b;

static int gpu_setup(void **state)
{
    (void)state;
    if (!g_if || g_if->device_count() < 1)
        return 0;
    g_msg[0] = 0;
    if (g_if->open(0, &g_host, &g_b) != KC_OK) {
        fprintf(stderr, "open: %s\n", g_msg);
        return -1;
    }
    kc_backend_info info;
    if (g_if->info(g_b, &info) != KC_OK)
        return -1;
    fprintf(stderr, "cuda device: %s, %zu MiB total, %zu MiB free, %zu MiB reserved\n",
            info.name, info.total_bytes >> 20, info.free_bytes >> 20,
            info.reserved_bytes >> 20);
    return 0;
}

static int gpu_teardown(void **state)
{
    (void)state;
    if (g_b)
        g_if->close(g_b);
    g_b = NULL;
    return 0;
}

#define NEED_GPU()                                                 \
    do {                                                           \
        NEED_PLUGIN();                                             \
        if (!g_b) {                                                \
            print_message("no CUDA device: GPU checks skipped\n"); \
            skip();                                                \
        }                                                          \
    } while (0)

static void check_conv(const char *cls, int spatial, int64_t n, int64_t h, int64_t wd, int64_t c,
                       int64_t f, int64_t k, int64_t s, int64_t d, int mode, int64_t groups,
                       int use_bias, const char *act)
{
    int64_t kh = spatial == 1 ? 1 : k;
    int64_t oh = spatial == 1 ? 1 : out_len(h, k, s, d, mode), ow = out_len(wd, k, s, d, mode);
    kc_conv_attrs a = conv_attrs(KC_CONV_PLAIN, spatial, f, k, k, s, d, mode, groups, 1, use_bias,
                                 act);
    kc_layer l = make_layer(cls, &a, use_bias ? 2 : 1);
    int64_t wn = kh * k * (c / groups) * f;
    float *x = rand_buf(n * h * wd * c), *w = rand_buf(wn), *bias = rand_buf(f);
    kc_shape is = spatial == 1 ? shp(3, n, wd, c, 0) : shp(4, n, h, wd, c);
    kc_shape os = spatial == 1 ? shp(3, n, ow, f, 0) : shp(4, n, oh, ow, f);
    int64_t on = shape_count(&os);
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    ref_conv(x, n, spatial == 1 ? 1 : h, wd, c, w, use_bias ? bias : NULL, f, kh, k, s, d, mode,
             groups, oh, ow, want);
    if (act && !strcmp(act, "relu"))
        relu(want, on, 0);
    else if (act && !strcmp(act, "tanh"))
        for (int64_t i = 0; i < on; i++)
            want[i] = tanhf(want[i]);
    else if (act)
        fail_msg("check_conv: no reference for activation '%s'", act);
    const float *ins[] = {x}, *ws[] = {w, bias};
    int64_t wc[] = {wn, f};
    gpu_run(g_b, &l, ins, &is, 1, ws, wc, use_bias ? 2 : 1, &os, got);
    expect_close(cls, got, want, on);
    free(x);
    free(w);
    free(bias);
    free(want);
    free(got);
}

static void test_gpu_conv2d(void **state)
{
    (void)state;
    NEED_GPU();
    /* same, stride 2, relu: H pads 0 before / 1 after (explicit padding),
     * W symmetric. */
    check_conv("Conv2D", 2, 2, 8, 9, 3, 4, 3, 2, 1, 1, 1, 1, "relu");
    /* valid, dilated, grouped, no bias. */
    check_conv("Conv2D", 2, 1, 9, 10, 4, 6, 3, 1, 2, 0, 2, 0, NULL);
    /* Conv1D causal, dilation 2, groups 2. */
    check_conv("Conv1D", 1, 2, 1, 10, 4, 6, 3, 1, 2, 2, 2, 1, NULL);
    /* 1x1 stride 1: a matrix product on cuBLAS (KC_CUDA_GEMM_1X1), "same"
     * and causal alike; grouped 1x1 stay on cuDNN. */
    check_conv("Conv2D", 2, 3, 7, 5, 16, 24, 1, 1, 1, 1, 1, 1, "relu");
    check_conv("Conv1D", 1, 2, 1, 9, 5, 7, 1, 1, 1, 2, 1, 0, "tanh");
    check_conv("Conv2D", 2, 2, 8, 8, 8, 12, 1, 2, 1, 0, 1, 1, NULL);
    check_conv("Conv2D", 2, 2, 4, 4, 8, 12, 1, 1, 1, 0, 2, 1, NULL);
    /* Strided 1x1 ("valid" above, "same" on odd sizes here, 1-D): the
     * product over the input subsampled (kcu_subsample), float4s and not. */
    check_conv("Conv2D", 2, 2, 7, 9, 5, 6, 1, 3, 1, 1, 1, 1, "relu");
    check_conv("Conv1D", 1, 2, 1, 9, 4, 6, 1, 2, 1, 0, 1, 1, NULL);
    /* 3x3 stride 1 on 256+ input channels or 8+ images: on NCHW tensors
     * (kc_cuda_use_nchw), the non-fused Winograd up to 14x14 outputs, the
     * FFT on tiles above; "same" and "valid". */
    check_conv("Conv2D", 2, 1, 5, 6, 256, 8, 3, 1, 1, 1, 1, 1, "relu");
    check_conv("Conv2D", 2, 8, 15, 16, 4, 8, 3, 1, 1, 1, 1, 1, "relu");
    check_conv("Conv2D", 2, 8, 9, 9, 5, 3, 3, 1, 1, 0, 1, 0, NULL);
}

static void test_gpu_depthwise(void **state)
{
    (void)state;
    NEED_GPU();
    int64_t n = 2, h = 6, wd = 7, c = 3, dm = 2, k = 3, s = 2;
    int64_t oh = out_len(h, k, s, 1, 1), ow = out_len(wd, k, s, 1, 1), f = c * dm;
    kc_conv_attrs a = conv_attrs(KC_CONV_DEPTHWISE, 2, 0, k, k, s, 1, 1, 1, dm, 1, "relu6");
    kc_layer l = make_layer("DepthwiseConv2D", &a, 2);
    float *x = rand_buf(n * h * wd * c), *w = rand_buf(k * k * c * dm), *bias = rand_buf(f);
    for (int64_t i = 0; i < n * h * wd * c; i++)
        x[i] *= 8; /* reach the relu6 cap */
    int64_t on = n * oh * ow * f;
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    int64_t ph = pad_before(h, oh, k, s, 1, 1), pw = pad_before(wd, ow, k, s, 1, 1);
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++)
                for (int64_t ch = 0; ch < c; ch++)
                    for (int64_t m = 0; m < dm; m++) {
                        double acc = bias[ch * dm + m];
                        for (int64_t ky = 0; ky < k; ky++)
                            for (int64_t kx = 0; kx < k; kx++) {
                                int64_t iy = oy * s + ky - ph, ix = ox * s + kx - pw;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                                    continue;
                                acc += x[((b * h + iy) * wd + ix) * c + ch] *
                                       w[((ky * k + kx) * c + ch) * dm + m];
                            }
                        want[((b * oh + oy) * ow + ox) * f + ch * dm + m] = (float)acc;
                    }
    relu(want, on, 6);
    kc_shape is = shp(4, n, h, wd, c), os = shp(4, n, oh, ow, f);
    const float *ins[] = {x}, *ws[] = {w, bias};
    int64_t wc[] = {k * k * c * dm, f};
    gpu_run(g_b, &l, ins, &is, 1, ws, wc, 2, &os, got);
    expect_close("DepthwiseConv2D", got, want, on);
    free(x);
    free(w);
    free(bias);
    free(want);
    free(got);
}

static void test_gpu_dense_softmax(void **state)
{
    (void)state;
    NEED_GPU();
    int64_t m = 3, k = 5, u = 7;
    kc_dense_attrs a = {u, 1, "softmax"};
    kc_layer l = make_layer("Dense", &a, 2);
    float *x = rand_buf(m * k), *w = rand_buf(k * u), *bias = rand_buf(u);
    float want[3 * 7], got[3 * 7];
    for (int64_t r = 0; r < m; r++) {
        double mx = -1e30, sum = 0, z[7];
        for (int64_t j = 0; j < u; j++) {
            z[j] = bias[j];
            for (int64_t i = 0; i < k; i++)
                z[j] += x[r * k + i] * w[i * u + j];
            mx = z[j] > mx ? z[j] : mx;
        }
        for (int64_t j = 0; j < u; j++)
            sum += exp(z[j] - mx);
        for (int64_t j = 0; j < u; j++)
            want[r * u + j] = (float)(exp(z[j] - mx) / sum);
    }
    kc_shape is = shp(2, m, k, 0, 0), os = shp(2, m, u, 0, 0);
    const float *ins[] = {x}, *ws[] = {w, bias};
    int64_t wc[] = {k * u, u};
    gpu_run(g_b, &l, ins, &is, 1, ws, wc, 2, &os, got);
    expect_close("Dense+softmax", got, want, m * u);
    free(x);
    free(w);
    free(bias);
}

/* c = 3: the plugin's one-float kernel; c = 8: its float4 one. */
static void check_pool(const char *cls, kc_pool_kind kind, int padding, int64_t c)
{
    int64_t n = 2, h = 5, wd = 6, p = 2, s = 2;
    int64_t oh = out_len(h, p, s, 1, padding), ow = out_len(wd, p, s, 1, padding);
    kc_pool_attrs a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.spatial = 2;
    a.pool[0] = a.pool[1] = p;
    a.strides[0] = a.strides[1] = s;
    a.padding = padding;
    kc_layer l = make_layer(cls, &a, 0);
    float *x = rand_buf(n * h * wd * c);
    int64_t on = n * oh * ow * c;
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    int64_t ph = padding ? pad_before(h, oh, p, s, 1, 1) : 0;
    int64_t pw = padding ? pad_before(wd, ow, p, s, 1, 1) : 0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++)
                for (int64_t ch = 0; ch < c; ch++) {
                    double acc = kind == KC_POOL_MAX ? -1e30 : 0;
                    int cells = 0;
                    for (int64_t ky = 0; ky < p; ky++)
                        for (int64_t kx = 0; kx < p; kx++) {
                            int64_t iy = oy * s + ky - ph, ix = ox * s + kx - pw;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                                continue;
                            float v = x[((b * h + iy) * wd + ix) * c + ch];
                            acc = kind == KC_POOL_MAX ? (v > acc ? v : acc) : acc + v;
                            cells++;
                        }
                    want[((b * oh + oy) * ow + ox) * c + ch] =
                        (float)(kind == KC_POOL_MAX ? acc : acc / cells);
                }
    kc_shape is = shp(4, n, h, wd, c), os = shp(4, n, oh, ow, c);
    const float *ins[] = {x};
    gpu_run(g_b, &l, ins, &is, 1, NULL, NULL, 0, &os, got);
    expect_close(cls, got, want, on);
    free(x);
    free(want);
    free(got);
}

static void test_gpu_pool(void **state)
{
    (void)state;
    NEED_GPU();
    for (int64_t c = 3; c <= 8; c += 5) {
        check_pool("MaxPooling2D", KC_POOL_MAX, 1, c);
        check_pool("MaxPooling2D", KC_POOL_MAX, 0, c);
        check_pool("AveragePooling2D", KC_POOL_AVG, 1, c); /* excludes the padding */
    }

    /* GlobalAveragePooling2D. */
    kc_pool_attrs g;
    memset(&g, 0, sizeof g);
    g.kind = KC_POOL_AVG;
    g.spatial = 2;
    g.global = 1;
    kc_layer l = make_layer("GlobalAveragePooling2D", &g, 0);
    float *x = rand_buf(2 * 3 * 4 * 5), want[2 * 5], got[2 * 5];
    for (int b = 0; b < 2; b++)
        for (int ch = 0; ch < 5; ch++) {
            double acc = 0;
            for (int i = 0; i < 12; i++)
                acc += x[(b * 12 + i) * 5 + ch];
            want[b * 5 + ch] = (float)(acc / 12);
        }
    kc_shape is = shp(4, 2, 3, 4, 5), os = shp(2, 2, 5, 0, 0);
    const float *ins[] = {x};
    gpu_run(g_b, &l, ins, &is, 1, NULL, NULL, 0, &os, got);
    expect_close("GlobalAveragePooling2D", got, want, 10);
    free(x);
}

static void test_gpu_concat(void **state)
{
    (void)state;
    NEED_GPU();
    for (int axis = 1; axis <= 3; axis += 2) {
        kc_merge_attrs a = {KC_MERGE_CONCAT, axis == 3 ? -1 : 1, {0, 0}, 0};
        kc_layer l = make_layer("Concatenate", &a, 0);
        kc_shape is[2] = {shp(4, 2, 3, 4, 2), shp(4, 2, 3, 4, 5)};
        if (axis == 1) {
            is[0] = shp(4, 2, 3, 4, 2);
            is[1] = shp(4, 2, 1, 4, 2);
        }
        kc_shape os = is[0];
        os.dims[axis] += is[1].dims[axis];
        float *x0 = rand_buf(shape_count(&is[0])), *x1 = rand_buf(shape_count(&is[1]));
        int64_t on = shape_count(&os);
        float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
        int64_t outer = 1;
        for (int i = 0; i < axis; i++)
            outer *= os.dims[i];
        int64_t b0 = shape_count(&is[0]) / outer, b1 = shape_count(&is[1]) / outer;
        for (int64_t o = 0; o < outer; o++) {
            memcpy(want + o * (b0 + b1), x0 + o * b0, (size_t)b0 * sizeof(float));
            memcpy(want + o * (b0 + b1) + b0, x1 + o * b1, (size_t)b1 * sizeof(float));
        }
        const float *ins[] = {x0, x1};
        gpu_run(g_b, &l, ins, is, 2, NULL, NULL, 0, &os, got);
        expect_close("Concatenate", got, want, on);
        free(x0);
        free(x1);
        free(want);
        free(got);
    }
}

static void test_gpu_add(void **state)
{
    (void)state;
    NEED_GPU();
    kc_merge_attrs a = {KC_MERGE_ADD, -1, {0, 0}, 0};
    kc_layer l = make_layer("Add", &a, 0);
    kc_shape is[3] = {shp(3, 2, 3, 4, 0), shp(3, 2, 3, 4, 0), shp(1, 4, 0, 0, 0)};
    float *x0 = rand_buf(24), *x1 = rand_buf(24), *x2 = rand_buf(4), want[24], got[24];
    for (int i = 0; i < 24; i++)
        want[i] = x0[i] + x1[i] + x2[i % 4];
    const float *ins[] = {x0, x1, x2};
    gpu_run(g_b, &l, ins, is, 3, NULL, NULL, 0, &is[0], got);
    expect_close("Add", got, want, 24);
    free(x0);
    free(x1);
    free(x2);
    /* Same shapes (a residual Add): 3 x 5 x 8 in float4s, 3 x 5 x 7 one
     * float at a time; three inputs. */
    for (int64_t c = 8; c >= 7; c--) {
        kc_shape ss[3] = {shp(3, 3, 5, c, 0), shp(3, 3, 5, c, 0), shp(3, 3, 5, c, 0)};
        int64_t n = shape_count(&ss[0]);
        float *a = rand_buf(n), *b2 = rand_buf(n), *c2 = rand_buf(n), sw[120], sg[120];
        for (int64_t i = 0; i < n; i++)
            sw[i] = a[i] + b2[i] + c2[i];
        const float *sins[] = {a, b2, c2};
        gpu_run(g_b, &l, sins, ss, 3, NULL, NULL, 0, &ss[0], sg);
        expect_close("Add (same shapes)", sg, sw, n);
        gpu_run(g_b, &l, sins, ss, 2, NULL, NULL, 0, &ss[0], sg);
        for (int64_t i = 0; i < n; i++)
            sw[i] = a[i] + b2[i];
        expect_close("Add (two, same shapes)", sg, sw, n);
        free(a);
        free(b2);
        free(c2);
    }
}

static void test_gpu_batchnorm(void **state)
{
    (void)state;
    NEED_GPU();
    kc_norm_attrs a;
    memset(&a, 0, sizeof a);
    a.axes[0] = -1;
    a.n_axes = 1;
    a.epsilon = 1e-3;
    a.center = a.scale = 1;
    kc_layer l = make_layer("BatchNormalization", &a, 4);
    int64_t n = 2 * 3 * 4, c = 5;
    float *x = rand_buf(n * c), *gamma = rand_buf(c), *beta = rand_buf(c), *mean = rand_buf(c);
    float *var = rand_buf(c), want[2 * 3 * 4 * 5], got[2 * 3 * 4 * 5];
    for (int64_t i = 0; i < c; i++)
        var[i] = var[i] * var[i] + 0.1f;
    for (int64_t i = 0; i < n * c; i++) {
        int64_t ch = i % c;
        want[i] = (float)((x[i] - mean[ch]) / sqrt((double)var[ch] + 1e-3) * gamma[ch] + beta[ch]);
    }
    kc_shape is = shp(4, 2, 3, 4, 5);
    const float *ins[] = {x}, *ws[] = {gamma, beta, mean, var};
    int64_t wc[] = {c, c, c, c};
    gpu_run(g_b, &l, ins, &is, 1, ws, wc, 4, &is, got);
    expect_close("BatchNormalization", got, want, n * c);
    free(x);
    free(gamma);
    free(beta);
    free(mean);
    free(var);
}


/* Depthwise reference: y[.., c*dm + m] = sum x[.., c] * w[k, c, m]. */
static void ref_depthwise(const float *x, int64_t n, int64_t h, int64_t wd, int64_t c,
                          const float *w, int64_t dm, int64_t k, int64_t s, int mode,
                          int64_t oh, int64_t ow, float *y)
{
    int64_t ph = pad_before(h, oh, k, s, 1, mode), pw = pad_before(wd, ow, k, s, 1, mode);
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++)
                for (int64_t ch = 0; ch < c; ch++)
                    for (int64_t m = 0; m < dm; m++) {
                        double acc = 0;
                        for (int64_t ky = 0; ky < k; ky++)
                            for (int64_t kx = 0; kx < k; kx++) {
                                int64_t iy = oy * s + ky - ph, ix = ox * s + kx - pw;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd)
                                    continue;
                                acc += x[((b * h + iy) * wd + ix) * c + ch] *
                                       w[((ky * k + kx) * c + ch) * dm + m];
                            }
                        y[((b * oh + oy) * ow + ox) * c * dm + ch * dm + m] = (float)acc;
                    }
}

static void test_gpu_separable(void **state)
{
    (void)state;
    NEED_GPU();
    int64_t n = 2, h = 7, wd = 6, c = 3, dm = 2, k = 3, s = 1, f = 5;
    int64_t oh = out_len(h, k, s, 1, 1), ow = out_len(wd, k, s, 1, 1), mc = c * dm;
    kc_conv_attrs a = conv_attrs(KC_CONV_SEPARABLE, 2, f, k, k, s, 1, 1, 1, dm, 1, "relu");
    kc_layer l = make_layer("SeparableConv2D", &a, 3);
    float *x = rand_buf(n * h * wd * c), *dw = rand_buf(k * k * c * dm), *pw = rand_buf(mc * f);
    float *bias = rand_buf(f);
    int64_t rows = n * oh * ow, on = rows * f;
    float *mid = malloc((size_t)(rows * mc) * sizeof *mid);
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    ref_depthwise(x, n, h, wd, c, dw, dm, k, s, 1, oh, ow, mid);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < f; j++) {
            double acc = bias[j];
            for (int64_t i = 0; i < mc; i++)
                acc += mid[r * mc + i] * pw[i * f + j];
            want[r * f + j] = (float)acc;
        }
    relu(want, on, 0);
    kc_shape is = shp(4, n, h, wd, c), os = shp(4, n, oh, ow, f);
    const float *ins[] = {x}, *ws[] = {dw, pw, bias};
    int64_t wc[] = {k * k * c * dm, mc * f, f};
    gpu_run(g_b, &l, ins, &is, 1, ws, wc, 3, &os, got);
    expect_close("SeparableConv2D", got, want, on);
    free(x);
    free(dw);
    free(pw);
    free(bias);
    free(mid);
    free(want);
    free(got);
}

static void check_transpose(int padding)
{
    int64_t n = 2, h = 3, wd = 4, c = 3, f = 2, k = 3, s = 2;
    int64_t keff = k;
    int64_t oh = padding ? h * s : h * s + (keff - s > 0 ? keff - s : 0);
    int64_t ow = padding ? wd * s : wd * s + (keff - s > 0 ? keff - s : 0);
    kc_conv_attrs a = conv_attrs(KC_CONV_TRANSPOSE, 2, f, k, k, s, 1, padding, 1, 1, 1, NULL);
    kc_layer l = make_layer("Conv2DTranspose", &a, 2);
    float *x = rand_buf(n * h * wd * c), *w = rand_buf(k * k * f * c), *bias = rand_buf(f);
    int64_t on = n * oh * ow * f;
    double *acc = calloc((size_t)on, sizeof *acc);
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    int64_t th = (h - 1) * s + keff - oh, tw = (wd - 1) * s + keff - ow;
    int64_t ph = padding && th > 0 ? th / 2 : 0, pw = padding && tw > 0 ? tw / 2 : 0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t iy = 0; iy < h; iy++)
            for (int64_t ix = 0; ix < wd; ix++)
                for (int64_t ky = 0; ky < k; ky++)
                    for (int64_t kx = 0; kx < k; kx++) {
                        int64_t oy = iy * s + ky - ph, ox = ix * s + kx - pw;
                        if (oy < 0 || oy >= oh || ox < 0 || ox >= ow)
                            continue;
                        for (int64_t o = 0; o < f; o++)
                            for (int64_t ch = 0; ch < c; ch++)
                                acc[((b * oh + oy) * ow + ox) * f + o] +=
                                    x[((b * h + iy) * wd + ix) * c + ch] *
                                    w[((ky * k + kx) * f + o) * c + ch];
                    }
    for (int64_t i = 0; i < on; i++)
        want[i] = (float)(acc[i] + bias[i % f]);
    kc_shape is = shp(4, n, h, wd, c), os = shp(4, n, oh, ow, f);
    const float *ins[] = {x}, *ws[] = {w, bias};
    int64_t wc[] = {k * k * f * c, f};
    gpu_run(g_b, &l, ins, &is, 1, ws, wc, 2, &os, got);
    expect_close("Conv2DTranspose", got, want, on);
    free(x);
    free(w);
    free(bias);
    free(acc);
    free(want);
    free(got);
}

static void test_gpu_conv_transpose(void **state)
{
    (void)state;
    NEED_GPU();
    check_transpose(1);
    check_transpose(0);
}

/* One single-input layer against a precomputed answer. */
static void check_unary(const char *what, const kc_layer *l, const kc_shape *is, const float *x,
                        const kc_shape *os, const float *want)
{
    int64_t on = shape_count(os);
    float *got = malloc((size_t)on * sizeof *got);
    const float *ins[] = {x};
    gpu_run(g_b, l, ins, is, 1, NULL, NULL, 0, os, got);
    expect_close(what, got, want, on);
    free(got);
}

/* c = 2: the plugin's one-float kernel; c = 4: its float4 one. */
static void check_pad_crop(int64_t c)
{
    kc_pad_attrs a;
    memset(&a, 0, sizeof a);
    a.spatial = 2;
    a.before[0] = 1;
    a.after[0] = 2;
    a.before[1] = 0;
    a.after[1] = 1;
    kc_layer l = make_layer("ZeroPadding2D", &a, 0);
    kc_shape is = shp(4, 2, 3, 4, c), os = shp(4, 2, 6, 5, c);
    float *x = rand_buf(shape_count(&is)), *want = malloc(sizeof(float) * 2 * 6 * 5 * c),
          *back = malloc(sizeof(float) * 2 * 3 * 4 * c);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t y = 0; y < 6; y++)
            for (int64_t xx = 0; xx < 5; xx++)
                for (int64_t ch = 0; ch < c; ch++) {
                    int64_t iy = y - 1, ix = xx;
                    want[((b * 6 + y) * 5 + xx) * c + ch] =
                        iy >= 0 && iy < 3 && ix < 4 ? x[((b * 3 + iy) * 4 + ix) * c + ch] : 0;
                }
    check_unary("ZeroPadding2D", &l, &is, x, &os, want);
    /* Cropping2D undoes it. */
    l = make_layer("Cropping2D", &a, 0);
    memcpy(back, x, sizeof(float) * 2 * 3 * 4 * c);
    check_unary("Cropping2D", &l, &os, want, &is, back);
    free(x);
    free(want);
    free(back);
}

static void test_gpu_pad_crop(void **state)
{
    (void)state;
    NEED_GPU();
    check_pad_crop(2);
    check_pad_crop(4);
}

static void test_gpu_activations(void **state)
{
    (void)state;
    NEED_GPU();
    kc_shape s = shp(3, 2, 3, 4, 0);
    int64_t n = 24;
    float *x = rand_buf(n), want[24];
    for (int64_t i = 0; i < n; i++)
        x[i] *= 4;
    /* ReLU(max_value=2, negative_slope=0.1, threshold=0.5). */
    kc_act_layer_attrs r;
    memset(&r, 0, sizeof r);
    r.kind = KC_ACT_RELU;
    r.max_value = 2;
    r.negative_slope = 0.1;
    r.threshold = 0.5;
    kc_layer l = make_layer("ReLU", &r, 0);
    for (int64_t i = 0; i < n; i++)
        want[i] = x[i] >= 2 ? 2 : x[i] >= 0.5f ? x[i] : 0.1f * (x[i] - 0.5f);
    check_unary("ReLU", &l, &s, x, &s, want);
    /* 23 elements: not whole float4s. */
    kc_shape odd = shp(2, 1, 23, 0, 0);
    check_unary("ReLU (23 elements)", &l, &odd, x, &odd, want);
    /* Softmax over axis 1 (strided). */
    r.kind = KC_ACT_SOFTMAX;
    r.n_axes = 1;
    r.axes[0] = 1;
    l = make_layer("Softmax", &r, 0);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t j = 0; j < 4; j++) {
            double mx = -1e30, sum = 0;
            for (int64_t t = 0; t < 3; t++)
                mx = x[(b * 3 + t) * 4 + j] > mx ? x[(b * 3 + t) * 4 + j] : mx;
            for (int64_t t = 0; t < 3; t++)
                sum += exp(x[(b * 3 + t) * 4 + j] - mx);
            for (int64_t t = 0; t < 3; t++)
                want[(b * 3 + t) * 4 + j] = (float)(exp(x[(b * 3 + t) * 4 + j] - mx) / sum);
        }
    check_unary("Softmax(axis=1)", &l, &s, x, &s, want);
    /* Activation("gelu"), exact erf form. */
    kc_activation_attrs g = {"gelu"};
    l = make_layer("Activation", &g, 0);
    for (int64_t i = 0; i < n; i++)
        want[i] = (float)(0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0))));
    check_unary("gelu", &l, &s, x, &s, want);
    /* Activation("hard_sigmoid") with Keras 3 semantics (x/6 + 0.5). */
    g.activation = "hard_sigmoid";
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] / 6.0f + 0.5f;
        want[i] = v < 0 ? 0 : v > 1 ? 1 : v;
    }
    check_unary("hard_sigmoid", &l, &s, x, &s, want);
    /* Flatten: a copy. */
    kc_shape fs = shp(2, 2, 12, 0, 0);
    l = make_layer("Flatten", NULL, 0);
    check_unary("Flatten", &l, &s, x, &fs, x);
    free(x);
}

static void test_gpu_rescaling(void **state)
{
    (void)state;
    NEED_GPU();
    float scale[3] = {0.5f, 2.0f, -1.0f}, offset[1] = {0.25f};
    kc_rescaling_attrs a;
    memset(&a, 0, sizeof a);
    a.n_scale = 3;
    a.n_offset = 1;
    a.scale = scale;
    a.offset = offset;
    kc_layer l = make_layer("Rescaling", &a, 0);
    kc_shape s = shp(4, 2, 2, 2, 3);
    float *x = rand_buf(24), want[24];
    for (int i = 0; i < 24; i++)
        want[i] = x[i] * scale[i % 3] + 0.25f;
    check_unary("Rescaling", &l, &s, x, &s, want);
    free(x);
}

static void test_gpu_merges(void **state)
{
    (void)state;
    NEED_GPU();
    kc_shape is[2] = {shp(3, 2, 3, 4, 0), shp(3, 2, 3, 4, 0)};
    float *x0 = rand_buf(24), *x1 = rand_buf(24), want[24], got[24];
    const float *ins[] = {x0, x1};
    const struct {
        const char *cls;
        kc_merge_kind kind;
    } cases[] = {{"Subtract", KC_MERGE_SUBTRACT}, {"Multiply", KC_MERGE_MULTIPLY},
                 {"Average", KC_MERGE_AVERAGE},   {"Maximum", KC_MERGE_MAXIMUM},
                 {"Minimum", KC_MERGE_MINIMUM}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kc_merge_attrs a = {cases[c].kind, -1, {0, 0}, 0};
        kc_layer l = make_layer(cases[c].cls, &a, 0);
        for (int i = 0; i < 24; i++) {
            float p = x0[i], q = x1[i];
            want[i] = cases[c].kind == KC_MERGE_SUBTRACT   ? p - q
                      : cases[c].kind == KC_MERGE_MULTIPLY ? p * q
                      : cases[c].kind == KC_MERGE_AVERAGE  ? (p + q) / 2
                      : cases[c].kind == KC_MERGE_MAXIMUM  ? (p > q ? p : q)
                                                           : (p < q ? p : q);
        }
        gpu_run(g_b, &l, ins, is, 2, NULL, NULL, 0, &is[0], got);
        expect_close(cases[c].cls, got, want, 24);
    }
    free(x0);
    free(x1);
}

static void test_gpu_pool1d(void **state)
{
    (void)state;
    NEED_GPU();
    /* AveragePooling1D(pool 3, stride 2, same) and GlobalMaxPooling1D. */
    kc_pool_attrs a;
    memset(&a, 0, sizeof a);
    a.kind = KC_POOL_AVG;
    a.spatial = 1;
    a.pool[0] = 3;
    a.strides[0] = 2;
    a.padding = 1;
    kc_layer l = make_layer("AveragePooling1D", &a, 0);
    int64_t n = 2, t = 6, c = 3, ot = 3;
    float *x = rand_buf(n * t * c), want[2 * 3 * 3];
    int64_t pb = pad_before(t, ot, 3, 2, 1, 1);
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < ot; o++)
            for (int64_t ch = 0; ch < c; ch++) {
                double acc = 0;
                int cells = 0;
                for (int64_t k = 0; k < 3; k++) {
                    int64_t i = o * 2 + k - pb;
                    if (i < 0 || i >= t)
                        continue;
                    acc += x[(b * t + i) * c + ch];
                    cells++;
                }
                want[(b * ot + o) * c + ch] = (float)(acc / cells);
            }
    kc_shape is = shp(3, n, t, c, 0), os = shp(3, n, ot, c, 0);
    check_unary("AveragePooling1D", &l, &is, x, &os, want);
    memset(&a, 0, sizeof a);
    a.kind = KC_POOL_MAX;
    a.spatial = 1;
    a.global = 1;
    a.keepdims = 1;
    l = make_layer("GlobalMaxPooling1D", &a, 0);
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++) {
            float m = -1e30f;
            for (int64_t i = 0; i < t; i++)
                m = x[(b * t + i) * c + ch] > m ? x[(b * t + i) * c + ch] : m;
            want[b * c + ch] = m;
        }
    kc_shape gs = shp(3, n, 1, c, 0);
    check_unary("GlobalMaxPooling1D(keepdims)", &l, &is, x, &gs, want);
    free(x);
}

/* A large upload_async goes through the pinned ring in several chunks. */
static void test_gpu_upload_ring(void **state)
{
    (void)state;
    NEED_GPU();
    size_t n = (size_t)9 << 20; /* 36 MiB: more chunks than ring slots */
    float *src = malloc(n * sizeof *src), *back = malloc(n * sizeof *back);
    assert_non_null(src);
    assert_non_null(back);
    for (size_t i = 0; i < n; i++)
        src[i] = (float)i;
    void *d = NULL;
    assert_int_equal(g_if->alloc(g_b, n * sizeof *src, &d), KC_OK);
    assert_int_equal(g_if->upload_async(g_b, d, src, n * sizeof *src), KC_OK);
    kc_backend_event *e;
    assert_int_equal(g_if->event_new(g_b, &e), KC_OK);
    assert_int_equal(g_if->record(g_b, KC_STREAM_COPY, e), KC_OK);
    assert_int_equal(g_if->wait(g_b, KC_STREAM_COMPUTE, e), KC_OK);
    assert_int_equal(g_if->download(g_b, back, d, n * sizeof *src), KC_OK);
    assert_memory_equal(src, back, n * sizeof *src);
    g_if->event_free(g_b, e);
    g_if->free(g_b, d);
    free(src);
    free(back);
}

/* owner pins `bytes` at a and at b. */
static void pin_two(kc_backend *owner, char *a, char *b, size_t bytes)
{
    assert_int_equal(g_if->host_pin(owner, a, bytes), KC_OK);
    assert_int_equal(g_if->host_pin(owner, b, bytes), KC_OK);
}

/* A device buffer of `bytes` on b and an event. */
static void device_buffer(kc_backend *b, size_t bytes, void **d, kc_backend_event **e)
{
    assert_int_equal(g_if->alloc(b, bytes, d), KC_OK);
    assert_int_equal(g_if->event_new(b, e), KC_OK);
}

/* upload_async of src into d on b's copy stream, the compute stream made
 * to wait for it, then download into back: back must equal src. */
static void upload_download(kc_backend *b, kc_backend_event *e, void *d, const void *src,
                            void *back, size_t bytes)
{
    assert_int_equal(g_if->upload_async(b, d, src, bytes), KC_OK);
    assert_int_equal(g_if->record(b, KC_STREAM_COPY, e), KC_OK);
    assert_int_equal(g_if->wait(b, KC_STREAM_COMPUTE, e), KC_OK);
    memset(back, 0, bytes);
    assert_int_equal(g_if->download(b, back, d, bytes), KC_OK);
    assert_memory_equal(src, back, bytes);
}

/* host_pin: copies from or into host memory that is partly pinned
 * arrive whole: CUDA refuses one copy across a pinned range's edge, so
 * the plugin splits them (seen on an H200 before the split: resident
 * weights sharing a page with pinned ones failed with cudaErrorInvalidValue).
 * Pinning pages that overlap a pinned range is refused without a CUDA
 * error (compute-sanitizer stays quiet), and unpinned pages lock again. */
static void test_gpu_host_pin(void **state)
{
    (void)state;
    NEED_GPU();
    assert_non_null(g_if->host_pin);
    assert_non_null(g_if->host_unpin);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t n = (size_t)5 << 20; /* 20 MiB: more than a staging chunk */
    const size_t bytes = n * sizeof(float);
    float *src = NULL, *back = NULL;
    assert_int_equal(posix_memalign((void **)&src, page, bytes), 0);
    assert_int_equal(posix_memalign((void **)&back, page, bytes), 0);
    for (size_t i = 0; i < n; i++)
        src[i] = (float)i * 0.5f;
    /* pageable, then pinned, then pageable again */
    char *mid = (char *)src + page, *back_mid = (char *)back + 3 * page;
    size_t mid_bytes = (bytes / 2) & ~(page - 1);
    pin_two(g_b, mid, back_mid, mid_bytes);
    assert_int_not_equal(g_if->host_pin(g_b, src, 2 * page), KC_OK); /* overlaps */
    void *d = NULL;
    kc_backend_event *e;
    device_buffer(g_b, bytes, &d, &e);
    /* the copy stream: direct DMA for the pinned piece, staged around it;
     * the download lands in partly pinned memory */
    upload_download(g_b, e, d, src, back, bytes);
    /* a piece wholly inside the pinned range, at an offset */
    assert_int_equal(g_if->upload_async(g_b, (char *)d + 2 * page, mid + page, page + 12),
                     KC_OK);
    assert_int_equal(g_if->record(g_b, KC_STREAM_COPY, e), KC_OK);
    assert_int_equal(g_if->event_sync(g_b, e), KC_OK);
    /* the compute stream's synchronous upload across both edges */
    void *d2 = NULL;
    assert_int_equal(g_if->alloc(g_b, bytes, &d2), KC_OK);
    assert_int_equal(g_if->upload(g_b, d2, src, bytes), KC_OK);
    memset(back, 0, bytes);
    assert_int_equal(g_if->download(g_b, back, d2, bytes), KC_OK);
    assert_memory_equal(src, back, bytes);
    g_if->host_unpin(g_b, mid);
    g_if->host_unpin(g_b, back_mid);
    /* unpinned, the same pages lock again */
    assert_int_equal(g_if->host_pin(g_b, src, bytes), KC_OK);
    g_if->host_unpin(g_b, src);
    g_if->event_free(g_b, e);
    g_if->free(g_b, d);
    g_if->free(g_b, d2);
    free(src);
    free(back);
}

/* Another session's pinned range (a second handle on the same GPU, as a
 * second session opens): copies across it arrive whole, are never DMA'd
 * from it (its owner may unpin it mid-copy), it cannot be pinned twice,
 * and its owner's unpinning leaves the other device's copies working. */
static void test_gpu_host_pin_foreign(void **state)
{
    (void)state;
    NEED_GPU();
    kc_backend *other = NULL;
    assert_int_equal(g_if->open(0, &g_host, &other), KC_OK);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t n = (size_t)3 << 20; /* 12 MiB: over a staging chunk */
    const size_t bytes = n * sizeof(float);
    float *src = NULL, *back = NULL;
    assert_int_equal(posix_memalign((void **)&src, page, bytes), 0);
    assert_int_equal(posix_memalign((void **)&back, page, bytes), 0);
    for (size_t i = 0; i < n; i++)
        src[i] = (float)(i % 1000) - 3.25f;
    char *mid = (char *)src + 2 * page, *back_mid = (char *)back + page;
    size_t mid_bytes = (bytes - 4 * page) & ~(page - 1);
    pin_two(g_b, mid, back_mid, mid_bytes);
    assert_int_not_equal(g_if->host_pin(other, mid, page), KC_OK);
    void *d = NULL;
    kc_backend_event *e;
    device_buffer(other, bytes, &d, &e);
    upload_download(other, e, d, src, back, bytes);
    assert_int_equal(g_if->upload(other, d, src, bytes), KC_OK);
    g_if->host_unpin(g_b, mid); /* the owner lets go */
    g_if->host_unpin(g_b, back_mid);
    memset(back, 0, bytes);
    assert_int_equal(g_if->download(other, back, d, bytes), KC_OK);
    assert_memory_equal(src, back, bytes);
    assert_int_equal(g_if->host_pin(other, mid, page), KC_OK); /* free to pin now */
    g_if->host_unpin(other, mid);
    g_if->event_free(other, e);
    g_if->free(other, d);
    g_if->close(other);
    free(src);
    free(back);
}

int main(void)
{
    const struct CMUnitTest plugin[] = {
        cmocka_unit_test(test_interface),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_supports),
    };
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_gpu_conv2d),      cmocka_unit_test(test_gpu_depthwise),
        cmocka_unit_test(test_gpu_dense_softmax), cmocka_unit_test(test_gpu_pool),
        cmocka_unit_test(test_gpu_concat),      cmocka_unit_test(test_gpu_add),
        cmocka_unit_test(test_gpu_batchnorm),   cmocka_unit_test(test_gpu_separable),
        cmocka_unit_test(test_gpu_conv_transpose), cmocka_unit_test(test_gpu_pad_crop),
        cmocka_unit_test(test_gpu_activations), cmocka_unit_test(test_gpu_rescaling),
        cmocka_unit_test(test_gpu_merges),      cmocka_unit_test(test_gpu_pool1d),
        cmocka_unit_test(test_gpu_upload_ring), cmocka_unit_test(test_gpu_host_pin),
        cmocka_unit_test(test_gpu_host_pin_foreign),
    };
    int failed = 0;
    if (setup(NULL) != 0)
        return 1;
    failed += cmocka_run_group_tests_name("cuda_plugin", plugin, NULL, NULL);
    failed += cmocka_run_group_tests_name("cuda_plugin_gpu", gpu, gpu_setup, gpu_teardown);
    teardown(NULL);
    return failed;
}
