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
 * Why it matters for speed as well: on the 2-vCPU Xeon of bench/results
 * an AVX-512 multiply-add whose operands or result are denormal takes a
 * microcode assist, 40x slower (a loop of them: 6.4 GFLOP/s against 248
 * with normal values or with the flags set), and a model whose weights
 * decayed towards zero in training meets them in every layer.
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
