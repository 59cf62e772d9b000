/* `kerasc run MODEL --input X.npy ... --output Y.npy ...` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/net_args.h"
#include "cli/placement_args.h"
#include "cli/split.h"
#include "net/calibrate.h"
#include "net/pipeline.h"
#include "kerasc.h"

#define KC_RUN_MAX_IO 64

typedef struct kc_run_args {
    const char *model;
    const char *weights;
    const char *inputs[KC_RUN_MAX_IO];
    int n_inputs;
    const char *outputs[KC_RUN_MAX_IO];
    int n_outputs;
    int threads;
    kc_cli_placement placement;
    kc_cli_net net;
    const char *split;
    int stages;
    int exact; /* --exact: direct convolutions only */
} kc_run_args;

static int kc_run_usage(const char *why)
{
    fprintf(stderr, "kerasc run: %s (usage: kerasc run MODEL --input X.npy [--input ...] "
                    "--output Y.npy [--output ...] [--weights FILE] [--threads N] [--exact] "
                    KC_CLI_PLACEMENT_USAGE ")\n", why);
    return 2;
}

static int kc_run_parse(int argc, char **argv, kc_run_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        int has_value = i + 1 < argc;
        int placed = kc_cli_placement_arg("run", argc, argv, &i, &a->placement);
        if (!placed)
            placed = kc_cli_net_arg("run", argc, argv, &i, &a->net);
        if (placed < 0)
            return 2;
        if (placed) {
            continue;
        } else if (strcmp(arg, "--split") == 0 && has_value) {
            a->split = argv[++i];
        } else if (strcmp(arg, "--stages") == 0 && has_value) {
            char *end;
            long k = strtol(argv[++i], &end, 10);
            if (*end || k < 1 || k > 16)
                return kc_run_usage("--stages takes 1 to 16");
            a->stages = (int)k;
        } else if (strcmp(arg, "--input") == 0 && has_value) {
            if (a->n_inputs == KC_RUN_MAX_IO)
                return kc_run_usage("too many --input");
            a->inputs[a->n_inputs++] = argv[++i];
        } else if (strcmp(arg, "--output") == 0 && has_value) {
            if (a->n_outputs == KC_RUN_MAX_IO)
                return kc_run_usage("too many --output");
            a->outputs[a->n_outputs++] = argv[++i];
        } else if (strcmp(arg, "--weights") == 0 && has_value) {
            a->weights = argv[++i];
        } else if (strcmp(arg, "--exact") == 0) {
            a->exact = 1;
        } else if (strcmp(arg, "--threads") == 0 && has_value) {
            char *end;
            long t = strtol(argv[++i], &end, 10);
            if (*end || t < 1 || t > 1024)
                return kc_run_usage("--threads takes a number from 1 to 1024");
            a->threads = (int)t;
        } else if (arg[0] == '-' && arg[1]) {
            fprintf(stderr, "kerasc run: unknown option '%s'\n", arg);
            return 2;
        } else if (!a->model) {
            a->model = arg;
        } else {
            return kc_run_usage("more than one model given");
        }
    }
    if (!a->model)
        return kc_run_usage("no model given");
    if (a->n_inputs == 0 || a->n_outputs == 0)
        return kc_run_usage("give every --input and every --output");
    return 0;
}

/* Place each --input: "NAME=FILE" by input name, else by position. */
static int kc_run_order_inputs(const kc_model *m, const kc_run_args *a, const char **files)
{
    int n = kc_model_num_inputs(m);
    if (a->n_inputs != n) {
        fprintf(stderr, "kerasc: error: the model takes %d input(s), %d given\n", n,
                a->n_inputs);
        return 1;
    }
    for (int i = 0; i < n; i++)
        files[i] = NULL;
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(a->inputs[i], '=');
        int slot = i;
        const char *file = a->inputs[i];
        if (eq) {
            slot = -1;
            for (int k = 0; k < n; k++)
                if (strlen(kc_model_input_name(m, k)) == (size_t)(eq - a->inputs[i]) &&
                    strncmp(kc_model_input_name(m, k), a->inputs[i], (size_t)(eq - a->inputs[i])) == 0)
                    slot = k;
            if (slot < 0) {
                fprintf(stderr, "kerasc: error: the model has no input named '%.*s'\n",
                        (int)(eq - a->inputs[i]), a->inputs[i]);
                return 1;
            }
            file = eq + 1;
        }
        if (files[slot]) {
            fprintf(stderr, "kerasc: error: input '%s' given twice\n", kc_model_input_name(m, slot));
            return 1;
        }
        files[slot] = file;
    }
    return 0;
}

static int kc_run_fail(const char *what)
{
    fprintf(stderr, "kerasc: error: %s%s%s\n", what ? what : "", what ? ": " : "",
            kc_last_error());
    return 1;
}

/* The pipeline's measured throughput against its bound: the slowest stage's
 * compute, or its incoming activations over the measured link. */
static void kc_run_pipeline_report(const kc_pipeline_options *o, const kc_pipeline_stats *st)
{
    kc_plan_worker w[KC_PIPELINE_MAX_STAGES];
    memset(w, 0, sizeof w);
    int have_links = kc_plan_calibrate(o, w) == KC_OK;
    int m = st->n_microbatches > 0 ? st->n_microbatches : 1;
    double bound = 0;
    printf("pipeline: %d stages, %d micro-batches, %.3f ms\n", o->n_stages, m, st->wall_s * 1e3);
    for (int k = 0; k < o->n_stages; k++) {
        double compute = st->compute_ms[k] / m;
        double link = have_links && w[k].bytes_per_s > 0
                          ? (double)st->in_bytes[k] / w[k].bytes_per_s * 1e3 : 0;
        printf("stage %d: compute %.3f ms per micro-batch; %zu bytes in at %.3f GB/s = %.3f ms\n",
               k, compute, st->in_bytes[k], w[k].bytes_per_s / 1e9, link);
        bound = compute > bound ? compute : bound;
        bound = link > bound ? link : bound;
    }
    double achieved = st->wall_s * 1e3 / m;
    printf("bound: %.3f ms per micro-batch; achieved %.3f ms per micro-batch = %.1f%% of the "
           "bound\n", bound, achieved, achieved > 0 ? 100.0 * bound / achieved : 0.0);
    if (m > 1)
        printf("pipeline fill: the first result after %.3f ms\n", st->first_s * 1e3);
}

static int kc_run_cluster(kc_model *m, const kc_run_args *a, kc_tensor **in, kc_tensor **out,
                          int n_out)
{
    kc_pipeline_options o;
    kc_pipeline_stats stats;
    kc_key_list auth = {0};
    int rc = 0;
    kc_cli_split sp = {.split = a->split, .stages = a->stages, .batch = in[0]->shape.dims[0]};
    if (kc_cli_split_options(m, a->model, &sp, &a->placement, &a->net, &o, &auth,
                             a->placement.stats ? stdout : NULL) != KC_OK)
        rc = kc_run_fail(a->model);
    o.stats = a->placement.stats ? &stats : NULL;
    if (!rc &&
        kc_pipeline_run(m, &o, (const kc_tensor *const *)in, a->n_inputs, out, n_out) != KC_OK)
        rc = kc_run_fail(a->model);
    if (!rc && o.stats)
        kc_run_pipeline_report(&o, &stats);
    kc_key_list_free(&auth);
    return rc;
}

int kc_cmd_run(int argc, char **argv)
{
    kc_run_args a;
    int rc = kc_run_parse(argc, argv, &a);
    if (rc)
        return rc;
    kc_load_options opts = {.weights_path = a.weights};
    kc_cli_placement_load(&a.placement, &opts);
    kc_model *m = NULL;
    if (kc_model_load(a.model, &opts, &m) != KC_OK)
        return kc_run_fail(NULL);
    const char *files[KC_RUN_MAX_IO];
    kc_tensor *in[KC_RUN_MAX_IO] = {0}, *out[KC_RUN_MAX_IO] = {0};
    kc_session *s = NULL;
    int n_out = kc_model_num_outputs(m);
    rc = kc_run_order_inputs(m, &a, files);
    if (!rc && a.n_outputs != n_out) {
        fprintf(stderr, "kerasc: error: the model has %d output(s), %d --output given\n", n_out,
                a.n_outputs);
        rc = 1;
    }
    for (int i = 0; !rc && i < a.n_inputs; i++)
        if (kc_tensor_load_npy(files[i], &in[i]) != KC_OK)
            rc = kc_run_fail(NULL);
    /* one session per model: its packed weights need no second copy */
    kc_session_options so = {.threads = a.threads, .exact = a.exact,
                             .release_packed_weights = 1};
    kc_cli_placement_apply(&a.placement, &so);
    if (!rc && a.net.cluster) {
        rc = kc_run_cluster(m, &a, in, out, n_out);
    } else {
        if (!rc && kc_session_new(m, &so, &s) != KC_OK)
            rc = kc_run_fail(NULL);
        if (!rc &&
            kc_session_run(s, (const kc_tensor *const *)in, a.n_inputs, out, n_out) != KC_OK)
            rc = kc_run_fail(a.model);
        if (!rc && a.placement.stats)
            fputs(kc_session_stats(s), stdout);
    }
    for (int i = 0; !rc && i < n_out; i++)
        if (kc_tensor_save_npy(out[i], a.outputs[i]) != KC_OK)
            rc = kc_run_fail(NULL);
    for (int i = 0; i < KC_RUN_MAX_IO; i++) {
        kc_tensor_free(in[i]);
        kc_tensor_free(out[i]);
    }
    kc_session_free(s);
    kc_model_free(m);
    return rc;
}
