/* `kerasc summary` and `kerasc layers`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/placement_args.h"
#include "kerasc.h"
#include "ops/op.h"

int kc_cmd_summary(int argc, char **argv)
{
    const char *path = NULL;
    kc_load_options options = {0};
    int json = 0, placement = 0;
    long batch = 1;
    kc_cli_placement pl = {0};
    for (int i = 0; i < argc; i++) {
        int placed = kc_cli_placement_arg("summary", argc, argv, &i, &pl);
        if (placed < 0)
            return 2;
        if (placed) {
            continue;
        } else if (strcmp(argv[i], "--placement") == 0) {
            placement = 1;
        } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            char *end;
            batch = strtol(argv[++i], &end, 10);
            if (*end || batch < 1 || batch > 1000000) {
                fprintf(stderr, "kerasc summary: --batch takes a number from 1 to 1000000\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--json") == 0) {
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
                        "[--weights FILE] [--json] [--placement [--batch N] " KC_CLI_PLACEMENT_USAGE "])\n");
        return 2;
    }
    kc_cli_placement_load(&pl, &options);
    kc_model *model = NULL;
    kc_status st = kc_model_load(path, &options, &model);
    if (st != KC_OK) {
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
        return 1;
    }
    if (placement) {
        kc_session_options so = {0};
        kc_cli_placement_apply(&pl, &so);
        kc_session *session = NULL;
        st = kc_session_new(model, &so, &session);
        if (st == KC_OK)
            st = kc_session_describe(session, batch, stdout);
        kc_session_free(session);
    } else {
        st = kc_model_summary(model, stdout, json);
    }
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

