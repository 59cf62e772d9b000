/* `kerasc plan MODEL --stages K [--batch B] [--cluster SPEC ...]`: the cuts
 * the planner would make, the bytes crossing each and the predicted
 * per-stage times. With --cluster the workers are measured; without, the
 * local machine's speed and a 10 Gb/s link stand in for them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/split.h"
#include "net/planner.h"

static int kc_plan_usage(const char *why)
{
    fprintf(stderr, "kerasc plan: %s (usage: kerasc plan MODEL --stages K [--batch B] "
                    "[--cluster SPEC [--place K=/job:NAME/task:N ...] [--key FILE --worker-key "
                    "PUB | --insecure]])\n", why);
    return 2;
}

int kc_cmd_plan(int argc, char **argv)
{
    const char *path = NULL;
    kc_cli_split sp = {.batch = 1};
    kc_cli_placement pl = {0};
    kc_cli_net net = {0};
    for (int i = 0; i < argc; i++) {
        int r = kc_cli_placement_arg("plan", argc, argv, &i, &pl);
        if (!r)
            r = kc_cli_net_arg("plan", argc, argv, &i, &net);
        if (r < 0)
            return 2;
        if (r)
            continue;
        char *end = NULL;
        if (!strcmp(argv[i], "--stages") && i + 1 < argc) {
            sp.stages = (int)strtol(argv[++i], &end, 10);
            if (*end || sp.stages < 1 || sp.stages > 16)
                return kc_plan_usage("--stages takes 1 to 16");
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            sp.batch = strtol(argv[++i], &end, 10);
            if (*end || sp.batch < 1 || sp.batch > 65536)
                return kc_plan_usage("--batch takes 1 to 65536");
        } else if (argv[i][0] == '-' || path) {
            return kc_plan_usage("unexpected argument");
        } else {
            path = argv[i];
        }
    }
    if (!path || !sp.stages)
        return kc_plan_usage("give a model and --stages K");
    kc_model *m = NULL;
    kc_status st = kc_model_load(path, NULL, &m);
    if (st == KC_OK && net.cluster) {
        kc_pipeline_options o;
        kc_key_list auth = {0};
        st = kc_cli_split_options(m, path, &sp, &pl, &net, &o, &auth, stdout);
        kc_key_list_free(&auth);
    } else if (st == KC_OK) {
        kc_plan_worker w[KC_PIPELINE_MAX_STAGES];
        double gflops = kc_plan_gemm_gflops();
        if (gflops <= 0)
            gflops = 10;
        for (int k = 0; k < sp.stages; k++)
            w[k] = (kc_plan_worker){gflops * 1e9, 1.25e9, 0};
        printf("no --cluster: every stage as fast as this machine (%.1f GFLOP/s GEMM), links "
               "10 Gb/s\n", gflops);
        kc_split_plan plan;
        st = kc_plan_split(m, sp.batch, sp.stages, w, &plan);
        if (st == KC_OK)
            kc_split_plan_print(m, &plan, stdout);
    }
    if (st != KC_OK)
        fprintf(stderr, "kerasc: error: %s: %s\n", path, kc_last_error());
    kc_model_free(m);
    return st == KC_OK ? 0 : 1;
}
