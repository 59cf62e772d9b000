/* Golden tests: every zoo model (tests/zoo/<name>/, each in .keras, .h5
 * and tfjs form) and every real model with reference outputs
 * (tests/real_refs/<file>/) runs through the public API and must match
 * the independent oracle's outputs within
 *   max|kerasc - ref| <= 1e-4 * max(1, max|ref|).
 * keras.applications architectures with random weights live in
 * tests/apps/<name>/ in the zoo layout. The references are written by
 * tools/zoo and tools/apps (TensorFlow.js or NumPy). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "kerasc.h"

#define KC_ZOO_DIR KC_TEST_DATA "/../zoo"
#define KC_REFS_DIR KC_TEST_DATA "/../real_refs"
#define KC_APPS_DIR KC_TEST_DATA "/../apps"
#define KC_MAX_IO 16

static int kc_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int kc_load_npys(const char *dir, const char *prefix, kc_tensor **out)
{
    int n = 0;
    for (; n < KC_MAX_IO; n++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s_%d.npy", dir, prefix, n);
        if (!kc_exists(path))
            break;
        if (kc_tensor_load_npy(path, &out[n]) != KC_OK) {
            print_error("%s: %s\n", path, kc_last_error());
            return -1;
        }
    }
    return n;
}

static double kc_max_abs(const kc_tensor *t)
{
    const float *p = kc_tensor_cdata(t);
    double m = 0;
    for (int64_t i = 0; i < kc_tensor_count(t); i++)
        m = fmax(m, fabs(p[i]));
    return m;
}

/* 1 on match; prints the worst difference otherwise. */
static int kc_compare(const char *what, int index, const kc_tensor *got, const kc_tensor *want)
{
    if (kc_tensor_count(got) != kc_tensor_count(want) ||
        kc_tensor_rank(got) != kc_tensor_rank(want) || kc_tensor_dtype(want) != KC_F32) {
        print_error("%s: output %d: shape or dtype differs from the reference\n", what, index);
        return 0;
    }
    const float *a = kc_tensor_cdata(got), *b = kc_tensor_cdata(want);
    double worst = 0;
    for (int64_t i = 0; i < kc_tensor_count(want); i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(a[i]) != isnan(b[i]))
            d = INFINITY;
        if (d > worst || isnan(d))
            worst = isnan(d) ? INFINITY : d;
    }
    double tol = 1e-4 * fmax(1.0, kc_max_abs(want));
    /* KC_ZOO_MARGIN=1: how much of the tolerance each output uses, to
     * judge a faster but less exact kernel before it lands. */
    if (getenv("KC_ZOO_MARGIN"))
        printf("margin %.3f  %s: output %d (max |diff| %.3g, tolerance %.3g)\n", worst / tol,
               what, index, worst, tol);
    if (worst > tol) {
        print_error("%s: output %d: max |diff| %.3g > %.3g\n", what, index, worst, tol);
        return 0;
    }
    return 1;
}

/* Placement for every session, from the environment: KC_ZOO_DEVICE
 * (e.g. /GPU:0, strict), KC_ZOO_VARIABLES (/CPU:0: streamed from host
 * memory), KC_ZOO_DEVICE_MEMORY (bytes). Unset: the plain host session.
 * With KC_FAKE_GPUS=1 this runs the whole zoo through the scheduler. */
static const kc_session_options *kc_zoo_options(void)
{
    static kc_session_options o;
    const char *device = getenv("KC_ZOO_DEVICE");
    if (!device || !*device)
        return NULL;
    o.device = device;
    o.strict_placement = 1;
    o.variables = getenv("KC_ZOO_VARIABLES");
    const char *budget = getenv("KC_ZOO_DEVICE_MEMORY");
    o.device_memory = budget ? (size_t)strtoull(budget, NULL, 10) : 0;
    return &o;
}

/* t repeated `copies` times along its first axis (t is freed), or NULL. */
static kc_tensor *kc_repeat_batch(kc_tensor *t, int copies)
{
    if (copies == 1 || !t)
        return t;
    int64_t dims[8];
    int rank = kc_tensor_rank(t);
    for (int d = 0; d < rank && d < 8; d++)
        dims[d] = kc_tensor_dim(t, d);
    dims[0] *= copies;
    kc_tensor *r = NULL;
    size_t bytes = (size_t)kc_tensor_count(t) * kc_dtype_size(kc_tensor_dtype(t));
    if (rank >= 1 && rank <= 8 && kc_tensor_new(kc_tensor_dtype(t), rank, dims, &r) == KC_OK)
        for (int c = 0; c < copies; c++)
            memcpy((char *)kc_tensor_data(r) + c * bytes, kc_tensor_cdata(t), bytes);
    kc_tensor_free(t);
    return r;
}

/* Run one model file on the inputs in dir, each repeated `copies` times
 * along the batch axis, and compare with expected_* repeated alike. */
static int kc_check_model(const char *model_path, const char *dir, int copies)
{
    kc_tensor *in[KC_MAX_IO] = {0}, *want[KC_MAX_IO] = {0}, *got[KC_MAX_IO] = {0};
    int ok = 0;
    int n_in = kc_load_npys(dir, "input", in);
    int n_out = kc_load_npys(dir, "expected", want);
    for (int i = 0; i < n_in; i++)
        in[i] = kc_repeat_batch(in[i], copies);
    for (int i = 0; i < n_out; i++)
        want[i] = kc_repeat_batch(want[i], copies);
    kc_model *m = NULL;
    kc_session *s = NULL;
    if (n_in <= 0 || n_out <= 0) {
        print_error("%s: no inputs/expected outputs\n", dir);
    } else if (kc_model_load(model_path, NULL, &m) != KC_OK ||
               kc_session_new(m, kc_zoo_options(), &s) != KC_OK ||
               kc_session_run(s, (const kc_tensor *const *)in, n_in, got, n_out) != KC_OK) {
        print_error("%s: %s\n", model_path, kc_last_error());
    } else {
        ok = 1;
        for (int i = 0; i < n_out; i++)
            ok &= kc_compare(model_path, i, got[i], want[i]);
    }
    for (int i = 0; i < KC_MAX_IO; i++) {
        kc_tensor_free(in[i]);
        kc_tensor_free(want[i]);
        kc_tensor_free(got[i]);
    }
    kc_session_free(s);
    kc_model_free(m);
    printf("%s %s%s\n", ok ? "ok  " : "FAIL", model_path, copies > 1 ? " (batch repeated)" : "");
    return ok;
}

static void kc_each_dir(const char *root, int (*visit)(const char *dir, const char *name),
                        int *passed, int *failed)
{
    DIR *d = opendir(root);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char dir[2048];
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        int r = visit(dir, e->d_name);
        *passed += r > 0 ? r : 0;
        *failed += r < 0 ? -r : 0;
    }
    closedir(d);
}

/* A zoo dir holds the same model as model.keras, model.h5 and tfjs/. */
static int kc_visit_zoo(const char *dir, const char *name)
{
    (void)name;
    static const char *const forms[] = {"model.keras", "model.h5", "tfjs/model.json",
                                        "model.json"};
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, forms[i]);
        if (!kc_exists(path))
            continue;
        if (kc_check_model(path, dir, 1))
            passed++;
        else
            failed++;
    }
    return failed ? -failed : passed;
}

static int kc_visit_real(const char *dir, const char *name)
{
    char path[2048];
    if (strncmp(name, "nsfwjs_", 7) == 0)
        snprintf(path, sizeof path, "%s/%s/model.min.js", KC_NSFWJS_DIR, name + 7);
    else
        snprintf(path, sizeof path, "%s/%s", KC_SHARED_MODELS, name);
    if (!kc_exists(path)) {
        printf("skip %s (model not installed)\n", path);
        return 0;
    }
    /* Real models run at their references' batch and at 3 times it: a
     * plan for several images takes other paths at full size (layers cut
     * by image, depthwise pairs fused), which the reduced zoo models do
     * not reach (oneDNN 2.6 picks some kernels by tensor size). */
    int ok = kc_check_model(path, dir, 1) && kc_check_model(path, dir, 3);
    return ok ? 1 : -1;
}

static void test_zoo_and_real_models(void **state)
{
    (void)state;
    int passed = 0, failed = 0;
    kc_each_dir(KC_ZOO_DIR, kc_visit_zoo, &passed, &failed);
    kc_each_dir(KC_APPS_DIR, kc_visit_zoo, &passed, &failed);
    kc_each_dir(KC_REFS_DIR, kc_visit_real, &passed, &failed);
    printf("golden: %d passed, %d failed\n", passed, failed);
    assert_int_equal(failed, 0);
    assert_true(passed > 0); /* an empty zoo is a broken checkout, not a pass */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_and_real_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
