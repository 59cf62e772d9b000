/* `kerasc serve --cluster SPEC --job NAME --task N --model-dir DIR ...` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/net_args.h"
#include "net/worker.h"

static int kc_serve_usage(const char *why)
{
    fprintf(stderr, "kerasc serve: %s (usage: kerasc serve --cluster SPEC --job NAME --task N "
                    "[--replica R] [--model-dir DIR] [--cache-dir DIR] [--max-model-mb N] "
                    "[--key FILE --authorized-keys FILE | --insecure] [--max-clients N] "
                    "[--deadline-ms N] [--threads N])\n", why);
    return 2;
}

int kc_cmd_serve(int argc, char **argv)
{
    kc_cli_net net = {0};
    kc_worker_options o = {0};
    o.task = -1;
    o.max_model_bytes = (uint64_t)4096 << 20;
    for (int i = 0; i < argc; i++) {
        int r = kc_cli_net_arg("serve", argc, argv, &i, &net);
        if (r < 0)
            return 2;
        if (r)
            continue;
        int has = i + 1 < argc;
        char *end = NULL;
        if (!strcmp(argv[i], "--job") && has)
            o.job = argv[++i];
        else if (!strcmp(argv[i], "--task") && has) {
            o.task = (int)strtol(argv[++i], &end, 10);
            if (*end || o.task < 0)
                return kc_serve_usage("--task takes a task index");
        } else if (!strcmp(argv[i], "--replica") && has) {
            o.replica = (int)strtol(argv[++i], &end, 10);
            if (*end || o.replica < 0)
                return kc_serve_usage("--replica takes an index into the task's addresses");
        } else if (!strcmp(argv[i], "--model-dir") && has)
            o.model_dir = argv[++i];
        else if (!strcmp(argv[i], "--cache-dir") && has)
            o.cache_dir = argv[++i];
        else if (!strcmp(argv[i], "--max-model-mb") && has) {
            long mb = strtol(argv[++i], &end, 10);
            if (*end || mb < 0 || mb > (1L << 24))
                return kc_serve_usage("--max-model-mb takes 0 (refuse streamed models) to 16777216");
            o.max_model_bytes = (uint64_t)mb << 20;
        } else if (!strcmp(argv[i], "--max-clients") && has) {
            o.max_clients = (int)strtol(argv[++i], &end, 10);
            if (*end || o.max_clients < 1 || o.max_clients > 4096)
                return kc_serve_usage("--max-clients takes 1 to 4096");
        } else if (!strcmp(argv[i], "--threads") && has) {
            o.threads = (int)strtol(argv[++i], &end, 10);
            if (*end || o.threads < 1 || o.threads > 1024)
                return kc_serve_usage("--threads takes 1 to 1024");
        } else {
            fprintf(stderr, "kerasc serve: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!o.job || o.task < 0)
        return kc_serve_usage("--job and --task are required");
    /* Streamed models go to a private directory of this user's. */
    char cache[512];
    if (!o.cache_dir && o.max_model_bytes) {
        const char *tmp = getenv("TMPDIR");
        snprintf(cache, sizeof cache, "%s/kerasc-models-%u", tmp && tmp[0] ? tmp : "/tmp",
                 (unsigned)geteuid());
        o.cache_dir = cache;
    }
    kc_key_list auth = {0};
    if (kc_cli_net_setup(&net, 1, &o.cluster, &o.sec, &auth) != KC_OK ||
        !kc_cluster_find(&o.cluster, o.job, o.task)) {
        fprintf(stderr, "kerasc: error: serve: %s\n", kc_last_error());
        kc_key_list_free(&auth);
        return 1;
    }
    o.deadline_ms = net.deadline_ms;
    int rc = kc_worker_serve(&o);
    kc_key_list_free(&auth);
    return rc;
}
