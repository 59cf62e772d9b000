/* Running one node with the CPU kernels: the part of a run that is the
 * same for the plain session loop and for the CPU backend under the
 * residency manager. */
#ifndef KC_CPU_EXEC_H
#define KC_CPU_EXEC_H

#include "backend/backend.h"
#include "kernels/kernel.h"

/* Run `fn` for the call (channels_first layers between two transposes).
 * state: the node's kernel-state slot. whole: no per-thread cuts (see
 * kc_exec_ctx.whole; the residency manager's runs). Errors are not yet
 * tagged with the layer (the caller does that). */
kc_status kc_cpu_exec(kc_kernel_fn fn, const kc_backend_call *call, kc_kernel_state **state,
                      int whole);

#endif
