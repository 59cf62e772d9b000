/* kerasc command-line tool: dispatch to one function per subcommand. */
#include <dirent.h>
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/procfs.h"
#include "base/threads.h"
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
 * 230 ms; even a short spin (GOMP_SPINCOUNT=30000, ~0.3 ms) made a
 * contended MobileNetV2 7x slower. On an idle machine the same short spin
 * is 12-30% faster than none (the next layer's fork comes within
 * microseconds). So: a short spin when nothing else is runnable as the
 * command starts, none otherwise (and always none for `serve`, which runs
 * for long next to whatever else). libgomp reads these variables only when
 * it is loaded, so the commands that run models re-execute themselves once
 * with them set, unless the user chose a policy. */
#define KC_IDLE_SPINCOUNT "30000"

/* Threads of this process now runnable (OpenBLAS starts its pool, which
 * spins a while, when it is loaded). */
static long kc_own_running(void)
{
    DIR *d = opendir("/proc/self/task");
    long running = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], stat[512];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
        if (f)
            fclose(f);
        stat[n] = '\0';
        const char *after_name = strrchr(stat, ')'); /* "pid (comm) S ..." */
        running += after_name && after_name[1] == ' ' && after_name[2] == 'R';
    }
    if (d)
        closedir(d);
    return running;
}

/* 1 when no task of another process is runnable (/proc/stat procs_running
 * less this process's own) in at least 3 of 5 looks 2 ms apart: a busy
 * competitor shows in every look, a passing kernel thread or shell in one
 * now and then. */
static int kc_machine_idle(void)
{
    int idle_looks = 0;
    for (int look = 0; look < 5; look++) {
        long running = kc_proc_value("/proc/stat", "procs_running %ld");
        idle_looks += running >= 0 && running - kc_own_running() <= 0;
        usleep(2000);
    }
    return idle_looks >= 3;
}

/* OpenBLAS starts a pool of one thread per core when it is loaded, and
 * each of those busy-yields for about a tenth of a second before it
 * sleeps. With oneDNN doing every GEMM, kerasc keeps OpenBLAS at one
 * thread, but the pool is there all the same: measured here, every layer
 * cut across the OpenMP threads waited ~1 ms for a core during the first
 * ~100 runs of a small model (1.2 ms a run instead of 0.011). One thread
 * from the start means no pool at all. Like libgomp's, OpenBLAS's
 * variable is read only at load. */
static int kc_blas_policy(void)
{
    if (getenv("OPENBLAS_NUM_THREADS") || !kc_dnnl_enabled())
        return 0;
    return setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0;
}

/* With OMP_PROC_BIND or OMP_PLACES set, libgomp binds the initial thread
 * to its first place as it loads, and a process keeps its threads'
 * affinity across exec: the re-executed process then saw that one place
 * as the whole machine (OMP_PROC_BIND=spread OMP_PLACES={0},{1}: both
 * threads on CPU 0, MobileNetV2 2.0x the time). Before the exec, every
 * CPU goes back in; the kernel keeps those the process's cpuset allows.
 * (A narrower `taskset` given together with a binding is widened too:
 * the mask from before libgomp's binding is gone by now.) */
static void kc_unbind_for_exec(void)
{
    const char *bind = getenv("OMP_PROC_BIND");
    if (!(bind && strcmp(bind, "false") && strcmp(bind, "FALSE")) && !getenv("OMP_PLACES") &&
        !getenv("GOMP_CPU_AFFINITY"))
        return;
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        CPU_SET(cpu, &all);
    (void)sched_setaffinity(0, sizeof all, &all); /* on failure: as before */
}

static void kc_omp_policy(char **argv, int long_running)
{
    int changed = kc_blas_policy();
    if (!getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
        changed = 1;
        if (!long_running && !getenv("GOMP_SPINCOUNT") && kc_machine_idle())
            setenv("GOMP_SPINCOUNT", KC_IDLE_SPINCOUNT, 1);
    }
    if (changed) {
        kc_unbind_for_exec();
        execv("/proc/self/exe", argv);
    }
    /* exec failed: carry on with the libraries' default policies */
}

/* Split runs and workers allocate message-sized buffers (slices of the
 * batch, received tensors, results) for every micro-batch. glibc serves
 * such sizes with fresh mmaps, returned at free, so each one faults in
 * page by page again: measured here at ~28 us a page, 2.7 ms for one
 * 393 KB slice. Up to 32 MiB (glibc's cap) they now come from the heap,
 * which keeps freed memory for the next micro-batch. */
static void kc_keep_buffers(void)
{
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "run") || !strcmp(argv[1], "predict") ||
                      !strcmp(argv[1], "bench") || !strcmp(argv[1], "serve")))
        kc_omp_policy(argv, !strcmp(argv[1], "serve"));
    if (argc >= 2 && (!strcmp(argv[1], "run") || !strcmp(argv[1], "serve")))
        kc_keep_buffers();
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
