/* kerasc command-line tool: one function per subcommand. */
#include <stdio.h>
#include <string.h>

#include "kerasc.h"
#include "ops/op.h"

static void kc_usage(FILE *out)
{
    fprintf(out,
            "usage: kerasc <command> [options]\n"
            "\n"
            "commands:\n"
            "  summary MODEL [--weights FILE] [--json]\n"
            "      load a Keras model (.keras zip or directory, legacy .h5, JSON\n"
            "      architecture + --weights, TensorFlow.js model.json) and print its\n"
            "      layers, shapes and parameter counts\n"
            "  layers            list the Keras classes kerasc understands\n"
            "  version           print the version\n"
            "  help              this text\n");
}

static int kc_cmd_summary(int argc, char **argv)
{
    const char *path = NULL;
    kc_load_options options = {0};
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc) {
            options.weights_path = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "kerasc summary: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "kerasc summary: more than one model given\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "kerasc summary: no model given (usage: kerasc summary MODEL "
                        "[--weights FILE] [--json])\n");
        return 2;
    }
    kc_model *model = NULL;
    kc_status st = kc_model_load(path, &options, &model);
    if (st != KC_OK) {
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
        return 1;
    }
    st = kc_model_summary(model, stdout, json);
    kc_model_free(model);
    if (st != KC_OK || fflush(stdout) != 0) {
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
        return 1;
    }
    return 0;
}

static int kc_cmd_layers(void)
{
    for (int i = 0; i < kc_op_count(); i++) {
        const kc_op_def *d = kc_op_at(i);
        printf("%s%s%s\n", (d->flags & KC_OPF_OPS_NODE) ? "ops." : "", d->class_name,
               (d->flags & KC_OPF_IDENTITY) ? " (identity at inference)" : "");
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        kc_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "summary") == 0)
        return kc_cmd_summary(argc - 2, argv + 2);
    if (strcmp(cmd, "layers") == 0)
        return kc_cmd_layers();
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("kerasc %s\n", KC_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        kc_usage(stdout);
        return 0;
    }
    fprintf(stderr, "kerasc: unknown command '%s'\n", cmd);
    kc_usage(stderr);
    return 2;
}
