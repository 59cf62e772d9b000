/* Per-layer timing of the session's plain CPU loop
 * (kc_session_options.profile, `kerasc bench --stats`): where a model's
 * time goes, layer by layer and per layer class. */
#ifndef KC_PROFILE_H
#define KC_PROFILE_H

#include <stdint.h>

#include "graph/graph.h"

typedef struct kc_profile kc_profile;

kc_profile *kc_profile_new(int n_nodes);
void kc_profile_free(kc_profile *p);
/* The run is over: its times count, unless it was one of the first two
 * on a new plan (kernels built, weights packed, oneDNN's one-time costs:
 * warm-ups, not the steady state), whose times are reported only until
 * a later run replaces them. */
void kc_profile_run_done(kc_profile *p);
/* The session planned for new input shapes: forget the times so far and
 * skip the next run. The plan runs in `lanes` batch lanes of
 * `lane_images` images each, its times lane 0's (runtime/lanes.h,
 * kc_lanes_profile), and the report says so; lanes 1: one batch, layer
 * by layer. */
void kc_profile_new_plan(kc_profile *p, int lanes, int64_t lane_images);
/* A node's start time for kc_profile_since: the clock's now, or 0 when
 * p is NULL (a run or lane not profiled). Also notes the calling
 * thread's idle time at joins so far (kc_parallel_idle_watch), which
 * the calling thread's teams measure from then on. */
double kc_profile_clock(kc_profile *p);
/* Node `node`, started at `start` (kc_profile_clock) on this thread, has
 * run: its time added, and the thread time its teams spent idle at their
 * joins since kc_profile_clock; nothing when p is NULL. */
void kc_profile_since(kc_profile *p, int node, double start);
/* The mean time per run of each node that ran, in graph order, then the
 * totals per layer class, largest first; valid until the next call. */
const char *kc_profile_report(kc_profile *p, const kc_graph *g);

#endif
