/* `kerasc run MODEL --input X.npy ... --output Y.npy ...` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
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
    int exact; /* --exact: direct convolutions only */
} kc_run_args;

static int kc_run_usage(const char *why)
{
    fprintf(stderr, "kerasc run: %s (usage: kerasc run MODEL --input X.npy [--input ...] "
                    "--output Y.npy [--output ...] [--weights FILE] [--threads N] [--exact])\n", why);
    return 2;
}

static int kc_run_parse(int argc, char **argv, kc_run_args *a)
{
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(arg, "--input") == 0 && has_value) {
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

int kc_cmd_run(int argc, char **argv)
{
    kc_run_args a;
    int rc = kc_run_parse(argc, argv, &a);
    if (rc)
        return rc;
    kc_load_options opts = {.weights_path = a.weights};
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
    kc_session_options so = {.threads = a.threads, .exact = a.exact};
    if (!rc && kc_session_new(m, &so, &s) != KC_OK)
        rc = kc_run_fail(NULL);
    if (!rc && kc_session_run(s, (const kc_tensor *const *)in, a.n_inputs, out, n_out) != KC_OK)
        rc = kc_run_fail(a.model);
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
