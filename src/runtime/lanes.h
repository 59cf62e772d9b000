/* Batch lanes: a batch of B images on T threads runs as T sub-batches of
 * B/T images side by side, each lane one thread taking its images through
 * the whole model, with nothing to wait for between layers (see lanes.c).
 * The plan is made for one lane's sub-batch; each lane has an arena of
 * that plan's size; the kernel states are built once, single-threaded,
 * and shared by the lanes. */
#ifndef KC_LANES_H
#define KC_LANES_H

#include "runtime/session_internal.h"

/* 1 when every layer of g works image by image (checked once, when a
 * session is created: else the session's lanes_refused is set). */
int kc_lanes_model_ok(const kc_graph *g);

/* How many lanes a host run of the model on these input shapes takes: 1
 * (none) when lanes are refused (KC_LANES=0 at the session's creation, a
 * layer that is not image by image, a value that is not one row per
 * image) or the session is scheduled or a stage; else T when it runs on
 * 2 <= T <= KC_LANES_MAX threads and T divides the batch. A profiled
 * session takes lanes too, so that its profile is of the schedule an
 * unprofiled run takes (kc_lanes_profile). */
#define KC_LANES_MAX 8
int kc_lanes_for(const kc_session *s, const kc_shape *shapes, int n);

/* 1 when every value of the session's plan leads with the lane's batch
 * (else lanes would split something that is not images). */
int kc_lanes_plan_ok(const kc_session *s, int64_t lane_batch);

/* Lane k's arena. */
float *kc_lanes_arena(const kc_session *s, int k);

/* The profile lane k times its nodes into (kc_profile_since), or NULL:
 * lane 0's alone, so that one thread adds to it, and its times are a
 * lane's (its images on one thread, the other lanes running beside it);
 * the layers of an image-major head summed over the lane's images. */
struct kc_profile *kc_lanes_profile(const kc_session *s, int k);

/* One run: each lane takes its slice of the inputs into its arena (or,
 * with an image-major head, image by image into the head's) and runs
 * every node, lanes side by side (the first run of a plan: lane 0 first,
 * alone, building the kernel states single-threaded). */
kc_status kc_lanes_run(kc_session *s, const kc_tensor *const *inputs, int n_inputs);

/* Value v over all lanes: its shape, and its floats gathered into dst. */
kc_shape kc_lanes_shape(const kc_session *s, int v);
void kc_lanes_gather(const kc_session *s, int v, float *dst);

#endif
