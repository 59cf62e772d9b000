/* The machine's measured single-precision GEMM rate, the roofline that the
 * benchmark's GFLOP/s column is read against (see bench/README.md).
 *
 *   cc -O2 -o bench/sgemm_peak tools/bench/sgemm_peak.c -lopenblas
 *   bench/sgemm_peak [--threads T] [--n N] [--iters K]
 *
 * Times K calls of cblas_sgemm(C = A * B), N x N x N row-major (default
 * N = 2048, 2*N^3 = 17.2 GFLOP a call) after one warm-up call, with OpenBLAS
 * limited to T threads (openblas_set_num_threads; default: OpenBLAS's own
 * choice), and prints the best and median rates as `key: value` lines:
 * sgemm_gflops (best of K: the peak the hardware reached while the machine
 * let it), sgemm_gflops_median, plus the OpenBLAS core type it ran
 * (openblas_get_corename: honours OPENBLAS_CORETYPE, which this machine's
 * environment may set). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

/* OpenBLAS extensions (declared in its cblas.h, repeated for other headers). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
int openblas_get_num_threads(void);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = 0, n = 2048, iters = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: sgemm_peak [--threads T] [--n N] [--iters K]\n");
            return 2;
        }
    }
    if (n < 16 || n > 16384 || iters < 1 || iters > 1000 || threads < 0) {
        fprintf(stderr, "sgemm_peak: bad arguments\n");
        return 2;
    }
    if (threads)
        openblas_set_num_threads(threads);
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
    double *t = malloc((size_t)iters * sizeof *t);
    if (!a || !b || !c || !t) {
        fprintf(stderr, "sgemm_peak: out of memory\n");
        return 1;
    }
    unsigned x = 12345u;
    for (size_t i = 0; i < nn; i++) {
        x = x * 1664525u + 1013904223u;
        a[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        x = x * 1664525u + 1013904223u;
        b[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        c[i] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int k = 0; k < iters; k++) {
        double s = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[k] = now_s() - s;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp);
    double flop = 2.0 * (double)n * (double)n * (double)n;
    double med = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
    printf("sgemm_n: %d\nthreads: %d\nopenblas_core: %s\nsgemm_gflops: %.1f\nsgemm_gflops_median: %.1f\n"
           "check: %.6f\n",
           n, openblas_get_num_threads(), openblas_get_corename(), flop / t[0] / 1e9, flop / med / 1e9,
           (double)c[nn / 2 + 7]);
    free(a);
    free(b);
    free(c);
    free(t);
    return 0;
}
