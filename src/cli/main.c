/* kerasc command-line tool: dispatch to one function per subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "kerasc.h"

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
            "  run MODEL --input X.npy [--input ...] --output Y.npy [--output ...] [--exact]\n"
            "      run the model on NumPy inputs (in the model's input order, or\n"
            "      NAME=FILE) and write its outputs in the model's output order;\n"
            "      placement: --device, --place, --variables, --device-memory, --trace, ...\n"
            "      split across a cluster: --cluster SPEC --split LAYER[,LAYER...]\n"
            "      --place K=/job:worker/task:N[/GPU:0] --key FILE --worker-key PUB\n"
            "  predict MODEL IMAGE... [--preprocess caffe|tf|torch|unit|none] [--size HxW]\n"
            "          [--top K] [--labels imagenet|nsfwjs|FILE]\n"
            "          [--interpolation bilinear|nearest|bilinear-align-corners]\n"
            "      classify JPEG/PNG images and print the top-K classes\n"
            "  bench MODEL [--batch B] [--iters N] [--warmup W] [--threads T] [--exact]\n"
            "      time inference on random input: median ms per image, load time,\n"
            "      peak RSS\n"
            "  keygen NAME [--force]\n"
            "      make a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub;\n"
            "      prints the public key\n"
            "  serve --cluster SPEC --job NAME --task N --model-dir DIR\n"
            "        [--key FILE --authorized-keys FILE | --insecure]\n"
            "      run one task of a cluster: serves the pipeline stages clients load\n"
            "  status --cluster SPEC [--key FILE --worker-key PUB | --insecure]\n"
            "      every task: reachable, devices, memory, stages, requests, errors\n"
            "  plan MODEL --stages K [--batch B] [--cluster SPEC ...]\n"
            "      where --stages K would cut the model, bytes crossing, predicted times\n"
            "  layers            list the Keras classes kerasc understands\n"
            "  version           print the version\n"
            "  help              this text\n");
}

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} kc_commands[] = {
    {"summary", kc_cmd_summary},
    {"run", kc_cmd_run},
    {"predict", kc_cmd_predict},
    {"bench", kc_cmd_bench},
    {"keygen", kc_cmd_keygen},
    {"serve", kc_cmd_serve},
    {"status", kc_cmd_status},
    {"plan", kc_cmd_plan},
    {"layers", kc_cmd_layers},
};

/* oneDNN's OpenMP workers spin between layers by default. On a machine
 * whose cores other processes share, a spinning worker holds a core the
 * descheduled one needs, and every layer waits at its barrier for a time
 * slice: measured here with 2 threads under load, ResNet50 batch 1 went
 * from 45 ms (passive) to 90-900 ms (spinning), MobileNetV2 from 6 to
 * 230 ms; on an idle machine passive costs ~0-30%. libgomp reads
 * OMP_WAIT_POLICY only when it is loaded, so the commands that run models
 * re-execute themselves once with it set, unless the user chose a policy. */
static void kc_omp_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY"))
        return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with libgomp's default policy */
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "run") || !strcmp(argv[1], "predict") ||
                      !strcmp(argv[1], "bench") || !strcmp(argv[1], "serve")))
        kc_omp_policy(argv);
    if (argc < 2) {
        kc_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof kc_commands / sizeof kc_commands[0]; i++)
        if (strcmp(cmd, kc_commands[i].name) == 0)
            return kc_commands[i].run(argc - 2, argv + 2);
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
