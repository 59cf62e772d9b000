/* One thread policy for the two thread pools kerasc links: oneDNN's
 * (OpenMP, libgomp) and OpenBLAS's (pthreads). See threads.c. */
#ifndef KC_THREADS_H
#define KC_THREADS_H

/* Size the pools for a session about to run on the calling thread:
 * `threads` > 0 is the session's option, 0 means every core. With oneDNN
 * enabled, every GEMM goes through oneDNN too, so OpenBLAS is kept at one
 * thread and never spins against the OpenMP workers. Cheap: call it at
 * the start of every run (OpenMP's thread count is per calling thread). */
void kc_threads_enter(int threads);

/* 1 when oneDNN runs the convolutions and GEMMs (KC_DNNL unset or not 0). */
int kc_dnnl_enabled(void);

#endif
