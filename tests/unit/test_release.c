/* kc_session_options.release_packed_weights: the session frees the
 * model's arrays it no longer reads (folded into its own copies, packed by
 * oneDNN), re-reads them from the file before a new plan, and every
 * output stays bit-identical to a plain session's on a separately loaded
 * model. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "format/bind.h"
#include "kerasc.h"
#include "kernels/dnnl_common.h"
#include "model/model_internal.h"
#include "runtime/session_internal.h"

#define KC_MAX_IO 8

static const int64_t kc_batches[] = {1, 3, 1};

/* Input k of the test model in dir at batch `batch`: sample 0 of its
 * input_k.npy repeated; NULL when the file is missing. */
static kc_tensor *kc_input(const char *dir, int k, int64_t batch)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/input_%d.npy", dir, k);
    kc_tensor *one = NULL, *t = NULL;
    if (kc_tensor_load_npy(path, &one) != KC_OK)
        return NULL;
    int64_t dims[KC_MAX_RANK];
    int rank = kc_tensor_rank(one);
    for (int d = 0; d < rank; d++)
        dims[d] = kc_tensor_dim(one, d);
    size_t sample = (size_t)(kc_tensor_count(one) / dims[0]) * kc_dtype_size(kc_tensor_dtype(one));
    dims[0] = batch;
    assert_int_equal(kc_tensor_new(kc_tensor_dtype(one), rank, dims, &t), KC_OK);
    for (int64_t b = 0; b < batch; b++)
        memcpy((char *)kc_tensor_data(t) + (size_t)b * sample, kc_tensor_cdata(one), sample);
    kc_tensor_free(one);
    return t;
}

static void kc_free_all(kc_tensor **t, int n)
{
    for (int i = 0; i < n; i++) {
        kc_tensor_free(t[i]);
        t[i] = NULL;
    }
}

/* Run s and ref on the same inputs: both fail, or both give the same bits. */
static void kc_expect_same(const char *dir, kc_session *s, kc_session *ref, const kc_model *m,
                           int64_t batch)
{
    int n_in = kc_model_num_inputs(m), n_out = kc_model_num_outputs(m);
    assert_true(n_in <= KC_MAX_IO && n_out <= KC_MAX_IO);
    kc_tensor *in[KC_MAX_IO] = {0}, *got[KC_MAX_IO] = {0}, *want[KC_MAX_IO] = {0};
    for (int k = 0; k < n_in; k++)
        if (!(in[k] = kc_input(dir, k, batch))) {
            kc_free_all(in, k);
            return; /* no stored input: nothing to compare */
        }
    kc_status want_st = kc_session_run(ref, (const kc_tensor *const *)in, n_in, want, n_out);
    kc_status got_st = kc_session_run(s, (const kc_tensor *const *)in, n_in, got, n_out);
    if (got_st != want_st)
        fail_msg("%s batch %lld: status %d, a plain session's %d (%s)", dir, (long long)batch,
                 got_st, want_st, kc_last_error());
    for (int o = 0; want_st == KC_OK && o < n_out; o++) {
        assert_int_equal(kc_tensor_count(got[o]), kc_tensor_count(want[o]));
        if (memcmp(kc_tensor_cdata(got[o]), kc_tensor_cdata(want[o]),
                   (size_t)kc_tensor_count(want[o]) * sizeof(float)) != 0)
            fail_msg("%s batch %lld: output %d differs from a plain session's", dir,
                     (long long)batch, o);
    }
    kc_free_all(in, n_in);
    kc_free_all(got, n_out);
    kc_free_all(want, n_out);
}

/* Every array the session reads through its own copy is gone from the
 * model: folded/fused layers, absorbed ones, packed kernels. Returns the
 * number of packed kernels. */
static int kc_check_released(const kc_session *s)
{
    int packed = 0;
    for (int n = 0; n < s->graph->n_nodes; n++) {
        const kc_layer *l = s->graph->nodes[n].layer;
        if (!l->n_weights || l->n_calls != 1)
            continue;
        if (s->fused.shadow[n] || s->fused.skip[n])
            for (int w = 0; w < l->n_weights; w++)
                assert_null(l->weights[w].data);
        if (s->state[n] && s->state[n]->weights_cached) {
            assert_null(l->weights[0].data);
            packed++;
        }
    }
    return packed;
}

/* The model at path loaded twice: s releases what it packed, ref is a
 * plain session on the other copy (both with `exact`). */
typedef struct kc_pair {
    kc_model *m, *ref_m;
    kc_session *s, *ref;
} kc_pair;

static void kc_pair_open(const char *path, int exact, kc_pair *p)
{
    memset(p, 0, sizeof *p);
    assert_int_equal(kc_model_load(path, NULL, &p->m), KC_OK);
    assert_int_equal(kc_model_load(path, NULL, &p->ref_m), KC_OK);
    kc_session_options on = {.release_packed_weights = 1, .exact = exact};
    kc_session_options off = {.exact = exact};
    assert_int_equal(kc_session_new(p->m, &on, &p->s), KC_OK);
    assert_int_equal(kc_session_new(p->ref_m, &off, &p->ref), KC_OK);
}

static void kc_pair_close(kc_pair *p)
{
    kc_session_free(p->s);
    kc_session_free(p->ref);
    kc_model_free(p->m);
    kc_model_free(p->ref_m);
}

/* The reduced ResNet50, direct and Winograd convolutions: arrays released
 * at creation and after packing, re-read for batch 3 and batch 1 again,
 * outputs equal to a plain session's; the model serves no other session
 * meanwhile, and a later one gets every array back. */
static void test_release_resnet50(void **state)
{
    (void)state;
    const char *dir = KC_TEST_DATA "/../apps/resnet50";
    for (int exact = 0; exact < 2; exact++) {
        kc_pair p;
        kc_pair_open(KC_TEST_DATA "/../apps/resnet50/model.keras", exact, &p);
        kc_model *m = p.m;
        kc_session *s = p.s, *ref = p.ref, *other = NULL;
        kc_session_options on = {.release_packed_weights = 1, .exact = exact};
        kc_session_options off = {.exact = exact};
        assert_true(m->n_released > 0); /* folded BatchNormalizations and their hosts */
        kc_check_released(s);
        assert_int_equal(kc_session_new(m, NULL, &other), KC_ERR_ARG);
        assert_null(other);
        for (int i = 0; i < 3; i++) {
            kc_expect_same(dir, s, ref, m, kc_batches[i]);
            int packed = kc_check_released(s);
            if (kc_dnnl_ready())
                assert_true(packed >= 53); /* every convolution */
        }
        kc_session_free(s);
        p.s = NULL;
        kc_session *plain = NULL;
        assert_int_equal(kc_session_new(m, &off, &plain), KC_OK);
        assert_int_equal(m->n_released, 0);
        assert_int_equal(kc_bind_check_complete(m->graph), KC_OK);
        assert_int_equal(kc_session_new(m, &on, &other), KC_ERR_ARG);
        kc_expect_same(dir, plain, ref, m, 1);
        kc_session_free(plain);
        kc_pair_close(&p);
    }
}

/* Batch 1, 3, 1 on every test model with the option on equals a plain
 * session's (shared layers, nested models, recurrent and masked layers). */
static void kc_compare_dir(const char *root)
{
    DIR *d = opendir(root);
    assert_non_null(d);
    struct dirent *e;
    int compared = 0;
    while ((e = readdir(d))) {
        char dir[1024], path[1100];
        struct stat sb;
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        snprintf(path, sizeof path, "%s/model.keras", dir);
        if (e->d_name[0] == '.' || stat(path, &sb) != 0)
            continue;
        kc_pair p;
        kc_pair_open(path, 0, &p);
        for (int i = 0; i < 3; i++) {
            kc_expect_same(dir, p.s, p.ref, p.m, kc_batches[i]);
            kc_check_released(p.s);
        }
        kc_pair_close(&p);
        compared++;
    }
    closedir(d);
    assert_true(compared > 0);
}

static void test_release_every_test_model(void **state)
{
    (void)state;
    kc_compare_dir(KC_TEST_DATA "/../zoo");
    kc_compare_dir(KC_TEST_DATA "/../apps");
}

/* A tfjs model whose one Conv2D is called on two inputs, summed. */
static const char *kc_shared_conv_json =
    "{\"format\": \"layers-model\", \"modelTopology\": {\"class_name\": \"Model\", "
    "\"config\": {\"name\": \"shared_conv\", \"layers\": ["
    "{\"name\": \"a\", \"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "
    "[null, 8, 8, 3], \"dtype\": \"float32\", \"name\": \"a\"}, \"inbound_nodes\": []},"
    "{\"name\": \"b\", \"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": "
    "[null, 8, 8, 3], \"dtype\": \"float32\", \"name\": \"b\"}, \"inbound_nodes\": []},"
    "{\"name\": \"conv\", \"class_name\": \"Conv2D\", \"config\": {\"filters\": 16, "
    "\"kernel_size\": [3, 3], \"strides\": [1, 1], \"padding\": \"same\", \"data_format\": "
    "\"channels_last\", \"dilation_rate\": [1, 1], \"activation\": \"linear\", \"use_bias\": "
    "true, \"name\": \"conv\", \"trainable\": true}, \"inbound_nodes\": [[[\"a\", 0, 0, {}]], "
    "[[\"b\", 0, 0, {}]]]},"
    "{\"name\": \"add\", \"class_name\": \"Add\", \"config\": {\"name\": \"add\"}, "
    "\"inbound_nodes\": [[[\"conv\", 0, 0, {}], [\"conv\", 1, 0, {}]]]}], "
    "\"input_layers\": [[\"a\", 0, 0], [\"b\", 0, 0]], \"output_layers\": [[\"add\", 0, 0]]}, "
    "\"keras_version\": \"tfjs-layers 4.22.0\"}, \"weightsManifest\": [{\"paths\": "
    "[\"weights.bin\"], \"weights\": [{\"name\": \"conv/kernel\", \"shape\": [3, 3, 3, 16], "
    "\"dtype\": \"float32\"}, {\"name\": \"conv/bias\", \"shape\": [16], \"dtype\": "
    "\"float32\"}]}]}";

static void kc_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* A layer called at two nodes keeps its kernel until both have packed
 * their own copy (the second node builds after the first released
 * nothing it needs), through re-reads from a TensorFlow.js model. */
static void test_release_shared_layer(void **state)
{
    (void)state;
    const char *dir = KC_TEST_TMP "/release_shared_conv";
    mkdir(dir, 0755);
    char path[512];
    float w[3 * 3 * 3 * 16 + 16];
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        w[i] = (float)((int)(i * 37 % 23) - 11) / 16.0f;
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    kc_write_file(path, w, sizeof w);
    for (int k = 0; k < 2; k++) {
        int64_t dims[4] = {1, 8, 8, 3};
        kc_tensor *t = NULL;
        assert_int_equal(kc_tensor_new(KC_F32, 4, dims, &t), KC_OK);
        float *p = kc_tensor_data(t);
        for (int64_t i = 0; i < kc_tensor_count(t); i++)
            p[i] = (float)((i * (k + 3)) % 17) / 8.0f - 1.0f;
        snprintf(path, sizeof path, "%s/input_%d.npy", dir, k);
        assert_int_equal(kc_tensor_save_npy(t, path), KC_OK);
        kc_tensor_free(t);
    }
    snprintf(path, sizeof path, "%s/model.json", dir);
    kc_write_file(path, kc_shared_conv_json, strlen(kc_shared_conv_json));
    kc_pair p;
    kc_pair_open(path, 0, &p);
    kc_session *s = p.s;
    const kc_layer *conv = NULL;
    for (int n = 0; n < s->graph->n_nodes; n++)
        if (!strcmp(s->graph->nodes[n].layer->class_name, "Conv2D"))
            conv = s->graph->nodes[n].layer;
    assert_non_null(conv);
    assert_int_equal(conv->n_calls, 2);
    for (int i = 0; i < 3; i++) {
        kc_expect_same(dir, s, p.ref, p.m, kc_batches[i]);
        if (kc_dnnl_ready())
            assert_null(conv->weights[0].data); /* both calls packed */
        assert_non_null(conv->weights[1].data); /* the bias is read each run */
    }
    kc_pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_resnet50),
        cmocka_unit_test(test_release_every_test_model),
        cmocka_unit_test(test_release_shared_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
