/* Image-major head of a laned run (see head.c): each lane runs the
 * model's first layers one image at a time, then the rest on its batch. */
#ifndef KC_HEAD_H
#define KC_HEAD_H

#include "runtime/session_internal.h"

/* For a laned plan just made (s->plan, for one lane's shapes): choose the
 * head, and if there is one, lay it out for one image (s->head_plan) and
 * lay s->plan out again as the tail. KC_HEAD=0: never; KC_HEAD=N: the
 * first N nodes. Should that fail, the whole plan stays and runs without
 * a head. */
kc_status kc_head_plan(kc_session *s, const kc_shape *lane_shapes, int n);

/* Drop the head's plan and lists (a new plan is being made). */
void kc_head_free(kc_session *s);

/* Lane k's head arena (head_floats floats past all lanes' arenas). */
float *kc_head_arena(const kc_session *s, int k);

/* Lane k's head, image by image: its images of the model inputs (the
 * caller's tensors) into the head's arena, nodes [0, head_nodes), then
 * the values that cross into the lane's arena. first: the plan's first
 * run (kernel states built, weights released: kc_session_first_on). */
kc_status kc_head_run(kc_session *s, int k, const kc_tensor *const *inputs, int first);

/* Whether lane k's arena needs model input i (the tail reads it). */
int kc_head_input_to_lane(const kc_session *s, int i);

#endif
