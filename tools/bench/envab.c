/* envab: two configurations of kerasc's environment switches timed in
 * one process, run for run in turns, so that both meet the same machine.
 *
 *   build/envab MODEL "ENV_A" "ENV_B" [--batch B] [--iters N] [--threads T] [--stats]
 *
 *   build/envab bench/models/resnet50.keras "" "KC_PW_PREFETCH=0" --iters 120 --stats
 *
 * ENV_A and ENV_B are space-separated NAME=VALUE switches (KC_*: see the
 * README's Performance section); "" is the plain environment. Why: on a
 * shared 2-core machine the clock and the memory system change speed by
 * 30% and more within seconds (a 2-vCPU Xeon of 12-07: the same binary
 * 23.7 and 33 ms a ResNet50 run minutes apart), and separate `kerasc
 * bench` processes taken in turns, seconds each, showed a configuration
 * against itself 9% apart. Here run i of A sits beside run i of B (ABBA:
 * each goes first every other time), and the ratio of each pair is
 * taken, so a slow second moves both sides of it.
 *
 * The switches are set before each session is made and again before
 * each of its runs (kerasc reads some when a plan is built, some as a
 * layer runs). The two sessions are made twice, A first then B first,
 * N runs each time: the session made first differed from the second in
 * some layers by up to 10% whatever the switches (where each one's
 * workspaces and packed weights landed), and the two orders cancel that.
 *
 * It runs under `kerasc bench`'s thread policy (envab_thread_policy).
 * Prints, for each order and for both: each side's median ms, the median
 * of the pairs' B/A ratios with its quartiles, how many pairs B won;
 * --stats adds each layer's mean ms on both sides over both orders (its
 * time per run, kc_session_stats), for `sort` or `awk` by layer name. */
#include <kerasc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ENVAB_MAX_SWITCHES 32

typedef struct envab_config {
    char *copy; /* the spec, cut into the names and values */
    char *names[ENVAB_MAX_SWITCHES];
    char *values[ENVAB_MAX_SWITCHES];
    int n;
} envab_config;

typedef struct envab_layer {
    char name[256];
    double ms[2]; /* A's and B's, summed over the orders */
} envab_layer;

typedef struct envab_opts {
    const char *model_path;
    const char *spec[2];
    int batch, iters, threads, stats;
} envab_opts;

static double envab_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* "A=1 B=2" into c (pointers into a copy of spec); 0 on a bad switch. */
static int envab_parse(const char *spec, envab_config *c)
{
    char *copy = strdup(spec);
    c->copy = copy;
    c->n = 0;
    if (!copy)
        return 0;
    for (char *save = NULL, *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (!eq || eq == t || c->n == ENVAB_MAX_SWITCHES) {
            fprintf(stderr, "envab: bad switch '%s' in \"%s\" (want NAME=VALUE)\n", t, spec);
            return 0;
        }
        *eq = '\0';
        c->names[c->n] = t;
        c->values[c->n++] = eq + 1;
    }
    return 1;
}

/* The environment of `on`: the other side's switches unset first. */
static void envab_apply(const envab_config *on, const envab_config *off)
{
    for (int i = 0; i < off->n; i++)
        unsetenv(off->names[i]);
    for (int i = 0; i < on->n; i++)
        setenv(on->names[i], on->values[i], 1);
}

static int envab_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Quantile q of n values sorted in increasing order. */
static double envab_quantile(const double *sorted, int n, double q)
{
    return sorted[(int)(q * (n - 1) + 0.5)];
}

/* Input 0 at the asked batch, seeded uniform [0, 1). */
static kc_tensor *envab_input(const kc_model *m, int batch)
{
    int64_t dims[KC_MAX_RANK];
    int rank = kc_model_input_shape(m, 0, dims);
    if (rank < 1)
        return NULL;
    dims[0] = batch;
    for (int i = 1; i < rank; i++)
        if (dims[i] < 1)
            return NULL;
    kc_tensor *t;
    if (kc_tensor_new(KC_F32, rank, dims, &t) != KC_OK)
        return NULL;
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    float *p = kc_tensor_data(t);
    unsigned s = 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = (float)((s >> 8) & 0xffff) / 65536.0f;
    }
    return t;
}

/* "name class ms ..." lines of a session's stats added into layers[side]
 * (new names appended); the number of layers after. */
static int envab_add_stats(const char *stats, int side, envab_layer *layers, int n, int most)
{
    char *copy = strdup(stats ? stats : "");
    if (!copy)
        return n;
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char name[256], cls[64];
        double ms;
        if (sscanf(line, " %255s %63s %lf", name, cls, &ms) != 3)
            continue; /* headers, totals, the per-class lines ("Conv2D 53 layer(s) ...") */
        int i = 0;
        while (i < n && strcmp(layers[i].name, name))
            i++;
        if (i == n) {
            if (n == most)
                continue;
            snprintf(layers[n].name, sizeof layers[n].name, "%s", name);
            layers[n].ms[0] = layers[n].ms[1] = 0;
            n++;
        }
        layers[i].ms[side] += ms;
    }
    free(copy);
    return n;
}

/* One order: sessions made `first` then the other, warmed up, then
 * o->iters pairs (ABBA). ratio[i] = B/A of pair i; times[side][i]. */
static int envab_order(const envab_opts *o, const kc_model *m, const kc_tensor *in,
                       const envab_config cfg[2], int first, double *times[2], double *ratio,
                       envab_layer *layers, int *n_layers, int most)
{
    kc_session *s[2] = {NULL, NULL};
    kc_tensor *out[2] = {NULL, NULL};
    int ok = 1;
    kc_session_options so;
    memset(&so, 0, sizeof so);
    so.threads = o->threads;
    so.profile = o->stats;
    for (int k = 0; k < 2 && ok; k++) {
        int c = k == 0 ? first : 1 - first;
        envab_apply(&cfg[c], &cfg[1 - c]);
        ok = kc_session_new(m, &so, &s[c]) == KC_OK;
    }
    /* warm-ups in turns, like the timed runs: each session's first runs
     * (its plan, its kernels' states) stay out of the pairs, and out of
     * its profile, which leaves out only each plan's first two runs */
    for (int w = 0; w < 4 && ok; w++)
        for (int k = 0; k < 2 && ok; k++) {
            int c = k == 0 ? first : 1 - first;
            envab_apply(&cfg[c], &cfg[1 - c]);
            kc_tensor_free(out[c]);
            out[c] = NULL;
            ok = kc_session_run(s[c], &in, 1, &out[c], 1) == KC_OK;
        }
    for (int i = 0; i < o->iters && ok; i++) {
        for (int k = 0; k < 2 && ok; k++) {
            int c = (i & 1) ? 1 - k : k;
            envab_apply(&cfg[c], &cfg[1 - c]);
            double t0 = envab_now_ms();
            ok = kc_session_run_into(s[c], &in, 1, &out[c], 1) == KC_OK;
            times[c][i] = envab_now_ms() - t0;
        }
        ratio[i] = times[1][i] / times[0][i];
    }
    if (!ok)
        fprintf(stderr, "envab: %s\n", kc_last_error());
    for (int c = 0; c < 2 && ok && o->stats; c++)
        *n_layers = envab_add_stats(kc_session_stats(s[c]), c, layers, *n_layers, most);
    for (int c = 0; c < 2; c++) {
        kc_tensor_free(out[c]);
        kc_session_free(s[c]);
    }
    return ok;
}

/* One line of medians and quartiles; sorts the three arrays in place. */
static void envab_report(const char *what, const envab_opts *o, double *times[2], double *ratio,
                         int n)
{
    int b_won = 0;
    for (int i = 0; i < n; i++)
        b_won += ratio[i] < 1;
    qsort(times[0], (size_t)n, sizeof *ratio, envab_cmp);
    qsort(times[1], (size_t)n, sizeof *ratio, envab_cmp);
    qsort(ratio, (size_t)n, sizeof *ratio, envab_cmp);
    double a = envab_quantile(times[0], n, 0.5), b = envab_quantile(times[1], n, 0.5);
    double q1 = envab_quantile(ratio, n, 0.25), med = envab_quantile(ratio, n, 0.5),
           q3 = envab_quantile(ratio, n, 0.75);
    printf("%-12s A [%s] %.3f ms  B [%s] %.3f ms  B/A pairs: median %.4f (quartiles %.4f %.4f), "
           "B faster in %d of %d\n",
           what, o->spec[0], a, o->spec[1], b, med, q1, q3, b_won, n);
}

static int envab_args(int argc, char **argv, envab_opts *o)
{
    *o = (envab_opts){NULL, {NULL, NULL}, 1, 100, 2, 0};
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--stats"))
            o->stats = 1;
        else if (more && !strcmp(a, "--batch"))
            o->batch = atoi(argv[++i]);
        else if (more && !strcmp(a, "--iters"))
            o->iters = atoi(argv[++i]);
        else if (more && !strcmp(a, "--threads"))
            o->threads = atoi(argv[++i]);
        else if (a[0] == '-' && a[1] == '-')
            return 0;
        else if (pos == 0)
            o->model_path = argv[i], pos++;
        else if (pos < 3)
            o->spec[pos++ - 1] = argv[i];
        else
            return 0;
    }
    return pos == 3 && o->batch >= 1 && o->iters >= 1 && o->threads >= 0;
}

/* The thread policy `kerasc bench` runs under (cli/main.c sets it and
 * starts itself again, since libgomp and OpenBLAS read it when loaded):
 * without it, a small model's runs here took 4 ms each where kerasc
 * bench's took 5 us (both pools' workers waiting on each other). */
static void envab_thread_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY"))
        return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("GOMP_SPINCOUNT", "30000", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the libraries' defaults */
}

/* Both orders on the loaded model, the reports printed; 1 on a failure. */
static int envab_measure(const envab_opts *o, const kc_model *m, const kc_tensor *in,
                         const envab_config cfg[2])
{
    int n = o->iters, most = 4096, n_layers = 0;
    size_t bytes = 2 * (size_t)n * sizeof(double);
    /* times A and B, the pairs' ratios, and sortable copies of an order's */
    double *times[2] = {malloc(bytes), malloc(bytes)}, *ratio = malloc(bytes);
    double *copy[2] = {malloc(bytes), malloc(bytes)}, *copy_ratio = malloc(bytes);
    envab_layer *layers = calloc((size_t)most, sizeof *layers);
    int ok = times[0] && times[1] && ratio && copy[0] && copy[1] && copy_ratio && layers;
    if (!ok)
        fprintf(stderr, "envab: no memory for %d runs' times\n", 2 * n);
    for (int first = 0; first < 2 && ok; first++) {
        double *t[2] = {times[0] + first * n, times[1] + first * n};
        ok = envab_order(o, m, in, cfg, first, t, ratio + first * n, layers, &n_layers, most);
        if (!ok)
            break;
        memcpy(copy[0], t[0], (size_t)n * sizeof(double));
        memcpy(copy[1], t[1], (size_t)n * sizeof(double));
        memcpy(copy_ratio, ratio + first * n, (size_t)n * sizeof(double));
        envab_report(first == 0 ? "A made first" : "B made first", o, copy, copy_ratio, n);
    }
    if (ok) {
        envab_report("both", o, times, ratio, 2 * n);
        for (int i = 0; i < n_layers; i++) {
            const double *ms = layers[i].ms; /* summed over the two orders */
            printf("layer %-40s %9.4f %9.4f %.3f\n", layers[i].name, ms[0] / 2, ms[1] / 2,
                   ms[0] > 0 ? ms[1] / ms[0] : 0);
        }
    }
    free(layers);
    free(copy_ratio);
    free(copy[0]);
    free(copy[1]);
    free(ratio);
    free(times[0]);
    free(times[1]);
    return ok ? 0 : 1;
}

/* The model loaded, its input made, both orders measured; 1 on a failure. */
static int envab_run(const envab_opts *o, const envab_config cfg[2])
{
    kc_model *m;
    if (kc_model_load(o->model_path, NULL, &m) != KC_OK) {
        fprintf(stderr, "envab: %s\n", kc_last_error());
        return 1;
    }
    kc_tensor *in = envab_input(m, o->batch);
    int rc = 1;
    if (!in)
        fprintf(stderr, "envab: %s: no float input of a known shape at batch %d\n",
                o->model_path, o->batch);
    else {
        printf("omp: OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s OPENBLAS_NUM_THREADS=%s\n",
               getenv("OMP_WAIT_POLICY"), getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "-",
               getenv("OPENBLAS_NUM_THREADS") ? getenv("OPENBLAS_NUM_THREADS") : "-");
        rc = envab_measure(o, m, in, cfg);
    }
    kc_tensor_free(in);
    kc_model_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    envab_thread_policy(argv);
    envab_opts o;
    if (!envab_args(argc, argv, &o)) {
        fprintf(stderr, "usage: envab MODEL \"ENV_A\" \"ENV_B\" [--batch B] [--iters N] "
                        "[--threads T] [--stats]\n");
        return 2;
    }
    envab_config cfg[2] = {{0}, {0}};
    int rc = 2;
    if (envab_parse(o.spec[0], &cfg[0]) && envab_parse(o.spec[1], &cfg[1]))
        rc = envab_run(&o, cfg);
    free(cfg[0].copy);
    free(cfg[1].copy);
    return rc;
}
