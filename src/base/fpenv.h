/* The floating-point environment kerasc computes in: TensorFlow's.
 *
 * TensorFlow runs every op kernel with denormal numbers flushed to zero
 * (its executor's and its thread pools' port::ScopedFlushDenormal: MXCSR's
 * FTZ and DAZ bits on x86), so a Keras model's outputs are those of a
 * computation where no value is denormal. kerasc does the same for the
 * length of a run: on the calling thread, saved and restored around it,
 * and on each worker for the length of its part (the caller's state
 * handed over, base/pool.c and base/threads.c), never left set on a
 * thread it does not own.
 *
 * It bounds the cost of underflow too: on the 2-vCPU Xeon of
 * bench/results a loop of AVX-512 multiply-adds whose accumulators stay
 * denormal ran 40x slower without the flags (6.4 GFLOP/s against 248,
 * microcode assists). Denormal weights alone cost nothing there: the two
 * real models that have them (mnist_cnn_bn_dropout_k3132, 3.6% of its
 * weights; denoise_ae_upsample_k380) and the bench models ran level with
 * and without the flags (build/envab), their sums being normal.
 *
 * KC_FLUSH_DENORMALS=0: IEEE denormals kept (the flags left as the caller
 * has them). */
#ifndef KC_BASE_FPENV_H
#define KC_BASE_FPENV_H

/* Flush on the calling thread (unless KC_FLUSH_DENORMALS=0); returns the
 * state to give kc_fpenv_leave. */
unsigned kc_fpenv_enter(void);
/* The calling thread's state back as kc_fpenv_enter found it. */
void kc_fpenv_leave(unsigned saved);
/* The calling thread's state (its control bits: rounding, exception masks,
 * flushing), to hand to workers. */
unsigned kc_fpenv_get(void);
/* The calling thread set to `state` (where it differs); returns its state
 * before, for the same call to restore. */
unsigned kc_fpenv_adopt(unsigned state);

#endif
