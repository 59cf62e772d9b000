/* `kerasc summary` and `kerasc layers`. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "kerasc.h"
#include "ops/op.h"

int kc_cmd_summary(int argc, char **argv)
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

int kc_cmd_layers(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    for (int i = 0; i < kc_op_count(); i++) {
        const kc_op_def *d = kc_op_at(i);
        printf("%s%s%s\n", (d->flags & KC_OPF_OPS_NODE) ? "ops." : "", d->class_name,
               (d->flags & KC_OPF_IDENTITY) ? " (identity at inference)" : "");
    }
    return 0;
}

