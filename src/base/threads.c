/* Thread policy.
 *
 * oneDNN (Debian's build) threads with OpenMP; OpenBLAS with its own
 * pthreads. Both pools busy-wait between parallel regions, so on a small
 * machine one pool's spinning workers steal the cores the other pool's
 * work needs (measured on 2 cores: ResNet50 at 2 threads slower than at 1).
 * The session therefore uses one pool: oneDNN for convolutions and GEMMs
 * (kc_gemm calls dnnl_sgemm), OpenMP sized to the session's thread
 * option, OpenBLAS at one thread. With KC_DNNL=0 the plain paths use
 * OpenBLAS at the session's thread count instead.
 *
 * libgomp reads OMP_WAIT_POLICY once, when it is loaded; the CLI sets it
 * (see cli/main.c). Library users who share the cores with other work
 * should export OMP_WAIT_POLICY=passive themselves. */
#include "base/threads.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* libgomp's API, declared here so that the library needs no -fopenmp
 * (the fuzz build uses clang, whose OpenMP runtime differs). */
void omp_set_num_threads(int n);
int omp_get_num_procs(void);

int kc_dnnl_enabled(void)
{
    const char *env = getenv("KC_DNNL");
    return !(env && !strcmp(env, "0"));
}

void kc_threads_enter(int threads)
{
    /* per calling thread, like OpenMP's own thread count */
    static __thread int applied = -1;
    int want = threads > 0 ? threads : omp_get_num_procs();
    if (want < 1)
        want = 1;
    int key = want * 2 + kc_dnnl_enabled();
    if (applied == key)
        return;
    applied = key;
    omp_set_num_threads(want);
    openblas_set_num_threads(kc_dnnl_enabled() ? 1 : want);
}
