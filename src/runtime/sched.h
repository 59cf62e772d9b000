/* The scheduler: runs a session's nodes across backends by placement, with
 * weights resident or streamed under each device's budget (residency.h),
 * copies inserted where a value crosses devices, and a trace of compute
 * and copy lanes. Used when a session asks for placement or a budget. */
#ifndef KC_SCHED_H
#define KC_SCHED_H

#include <stdio.h>

#include "kerasc.h"
#include "runtime/session_internal.h"

typedef struct kc_sched kc_sched;

kc_status kc_sched_new(kc_session *s, const kc_session_options *options, kc_sched **out);
void kc_sched_free(kc_sched *sched);
/* After the session (re)planned its shapes: size device buffers, decide
 * residency, upload resident weights. */
kc_status kc_sched_prepare(kc_sched *sched);
/* Unlock the host weights the last prepare page-locked for streaming
 * (before anything frees or rewrites them; the next prepare locks again). */
void kc_sched_unpin(kc_sched *sched);
/* Run every node; the inputs are in the host arena, the outputs end there. */
kc_status kc_sched_run(kc_sched *sched);
const char *kc_sched_stats(const kc_sched *sched);
size_t kc_sched_peak_bytes(const kc_sched *sched);
void kc_sched_describe(const kc_sched *sched, FILE *out);

/* Floating-point operations of one node at the planned shapes. */
double kc_node_flops(const kc_node *node, const kc_layer *layer, const kc_plan *plan);

#endif
