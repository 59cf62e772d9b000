/* Image-major head of a laned run (see head.h).
 *
 * Why: a lane takes its images through each layer together, so that they
 * share each read of the layer's weights. Early in a CNN that sharing is
 * worth little (the weights are small) while the batch's activations are
 * large: in ResNet50's 56x56 stage a tensor is 3.2 MB per image, 12.8 MB
 * for a lane of 4 images, and with two lanes a layer's input, output and
 * residual no longer fit the shared last-level cache. On the 2-core AMD
 * EPYC of bench/results, one thread, ResNet50's 56x56 and 28x28 stages
 * took 5.6 and 7.2 ms per image run one image at a time against 6.1 and
 * 7.9 at 4 images (two such processes side by side, as two lanes run),
 * while its 14x14 and 7x7 stages were 0.7 and 1.2 ms faster at 4 images;
 * MobileNetV2's first three layers 0.44 against 0.61 ms per image.
 *
 * So each lane runs the first nodes -- up to the first whose weights
 * outweigh one image's activations -- one image at a time on a small
 * arena planned for one image, copies the values that cross into the
 * tail (those read later, and model outputs) into its lane arena at the
 * image's rows, and then runs the tail on the whole lane batch. The
 * kernels of head nodes are built for one image, the tail's for the lane
 * batch: each node keeps one state, as in any other plan. */
#include "runtime/head.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "model/model_internal.h"
#include "runtime/lanes.h"
#include "runtime/profile.h"

/* A head only where a lane's activations are this large somewhere in it:
 * below, they stay in cache anyway and the head would only add copies. */
#define KC_HEAD_MIN_LANE_BYTES ((int64_t)4 << 20)

static int64_t kc_head_weight_bytes(const kc_session *s, int i)
{
    const kc_layer *l = s->fused.shadow[i] ? s->fused.shadow[i] : s->graph->nodes[i].layer;
    int64_t n = 0;
    for (int w = 0; w < l->n_weights; w++)
        n += kc_shape_count(&l->weights[w].shape);
    return n * (int64_t)sizeof(float);
}

/* Node i's inputs and outputs, bytes, in the lane plan. */
static int64_t kc_head_act_bytes(const kc_session *s, int i)
{
    const kc_node *node = &s->graph->nodes[i];
    int64_t n = 0;
    for (int j = 0; j < node->n_inputs; j++)
        n += kc_shape_count(&s->plan.shape[node->inputs[j]]);
    for (int j = 0; j < node->n_outputs; j++)
        n += kc_shape_count(&s->plan.shape[node->outputs[j]]);
    return n * (int64_t)sizeof(float);
}

/* The head: the nodes before the first whose weights outweigh one
 * image's activations (absorbed nodes run nothing and do not count);
 * none when the lane batch is one image or the lane's activations stay
 * small. Rechecked on the Zen 5 of bench/results on 12-06, ResNet50 at
 * batch 8, five alternating runs, against this choice: no head (KC_HEAD=0)
 * 1.048 of its time, heads of 40, 110 and 140 nodes 1.006, 1.012 and
 * 1.030. */
static int kc_head_choose(const kc_session *s, int64_t lane_batch)
{
    const kc_graph *g = s->graph;
    const char *env = getenv("KC_HEAD");
    if (env && *env) {
        char *end = NULL;
        long forced = strtol(env, &end, 10);
        if (*end == '\0' && forced >= 0)
            return forced > g->n_nodes ? g->n_nodes : (int)forced;
    }
    if (lane_batch < 2)
        return 0;
    int64_t widest = 0;
    int k = 0;
    for (; k < g->n_nodes; k++) {
        if (s->fused.skip[k])
            continue;
        int64_t act = kc_head_act_bytes(s, k);
        if (kc_head_weight_bytes(s, k) > act / lane_batch)
            break;
        if (act > widest)
            widest = act;
    }
    return widest >= KC_HEAD_MIN_LANE_BYTES ? k : 0;
}

/* Which model inputs the tail reads too (the others never go to the lane
 * arenas), and the values the head makes (writes first: a fused block's
 * output slot) that the tail reads or the caller gets, with their floats
 * per image. A slot is
 * copied once, by its root value (an alias shares its root's slot in both
 * plans), and what it holds per image is the smallest of its values:
 * the others are views that fusion never stores -- a ZeroPadding's padded
 * shape (its reader pads instead), a fused depthwise pair's 1x1 output
 * (the pair writes its depthwise output into that slot). */
static kc_status kc_head_lists(kc_session *s)
{
    const kc_graph *g = s->graph;
    unsigned char *later = kc_calloc((size_t)g->n_values + 1, 1);
    int64_t *smallest = kc_calloc((size_t)g->n_values + 1, sizeof *smallest);
    int *made = kc_calloc((size_t)g->n_values + 1, sizeof *made);
    s->head_input_later = kc_calloc((size_t)g->n_inputs + 1, 1);
    s->head_out = kc_calloc((size_t)g->n_values + 1, sizeof *s->head_out);
    s->head_size = kc_calloc((size_t)g->n_values + 1, sizeof *s->head_size);
    if (!later || !smallest || !made || !s->head_input_later || !s->head_out || !s->head_size) {
        free(later);
        free(smallest);
        free(made);
        return KC_ERR_NOMEM;
    }
    for (int i = s->head_nodes; i < g->n_nodes; i++)
        for (int j = 0; !s->fused.skip[i] && j < g->nodes[i].n_inputs; j++)
            later[kc_plan_root(s->fused.alias, g->nodes[i].inputs[j])] = 1;
    for (int i = 0; i < g->n_outputs; i++)
        later[kc_plan_root(s->fused.alias, g->outputs[i])] = 1;
    for (int i = 0; i < g->n_inputs; i++)
        s->head_input_later[i] = later[kc_plan_root(s->fused.alias, g->inputs[i])];
    for (int v = 0; v < g->n_values; v++)
        smallest[v] = INT64_MAX;
    for (int v = 0; v < g->n_values; v++) { /* each slot's smallest view */
        int r = kc_plan_root(s->fused.alias, v);
        int64_t floats = kc_shape_count(&s->plan.shape[v]);
        if (floats < smallest[r])
            smallest[r] = floats;
    }
    kc_plan_first_writers(g, s->fused.alias, made);
    for (int v = 0; v < g->n_values; v++) {
        if (made[v] < 0 || made[v] >= s->head_nodes || kc_plan_root(s->fused.alias, v) != v ||
            !later[v])
            continue;
        s->head_size[s->n_head_out] = smallest[v] / s->plan.shape[v].dims[0];
        s->head_out[s->n_head_out++] = v;
    }
    free(later);
    free(smallest);
    free(made);
    return KC_OK;
}

void kc_head_free(kc_session *s)
{
    kc_plan_free(&s->head_plan);
    free(s->head_input_later);
    free(s->head_out);
    free(s->head_size);
    s->head_input_later = NULL;
    s->head_out = NULL;
    s->head_size = NULL;
    s->n_head_out = 0;
    s->head_nodes = 0;
    s->head_floats = 0;
}

kc_status kc_head_plan(kc_session *s, const kc_shape *lane_shapes, int n)
{
    kc_head_free(s);
    if (s->lanes < 2 || n < 1 || n > KC_PLAN_MAX_INPUTS)
        return KC_OK;
    int head = kc_head_choose(s, lane_shapes[0].dims[0]);
    if (head < 1)
        return KC_OK;
    kc_shape one[KC_PLAN_MAX_INPUTS];
    for (int i = 0; i < n; i++) {
        one[i] = lane_shapes[i];
        one[i].dims[0] = 1;
    }
    /* s->plan stays the whole plan until the head is complete */
    s->head_nodes = head;
    kc_plan tail = {0};
    kc_status st = kc_head_lists(s);
    if (st == KC_OK)
        st = kc_plan_build_split(s->model, s->fused.alias, one, n, head, KC_PLAN_HEAD,
                                 &s->head_plan);
    if (st == KC_OK)
        st = kc_plan_build_split(s->model, s->fused.alias, lane_shapes, n, head, KC_PLAN_TAIL,
                                 &tail);
    if (st != KC_OK) { /* a speed choice only: the whole plan still runs */
        kc_head_free(s);
        kc_plan_free(&tail);
        kc_error_clear();
        return KC_OK;
    }
    kc_plan_free(&s->plan);
    s->plan = tail;
    s->head_floats = (s->head_plan.arena_floats + 15) & ~(size_t)15;
    return KC_OK;
}

int kc_head_input_to_lane(const kc_session *s, int i)
{
    return !s->head_nodes || s->head_input_later[i];
}

float *kc_head_arena(const kc_session *s, int k)
{
    return s->arena + (size_t)s->lanes * s->lane_floats + (size_t)k * s->head_floats;
}

kc_status kc_head_run(kc_session *s, int k, const kc_tensor *const *inputs, int first)
{
    const kc_graph *g = s->graph;
    float *lane = kc_lanes_arena(s, k), *head = kc_head_arena(s, k);
    int64_t images = s->plan.shape[g->inputs[0]].dims[0];
    kc_profile *profile = kc_lanes_profile(s, k);
    for (int64_t img = 0; img < images; img++) {
        for (int i = 0; i < g->n_inputs; i++) {
            int v = g->inputs[i];
            int64_t n = kc_shape_count(&s->head_plan.shape[v]);
            kc_session_input_slice(inputs[i], (k * images + img) * n, n,
                                   head + s->head_plan.offset[v]);
        }
        for (int i = 0; i < s->head_nodes; i++) {
            if (s->fused.skip[i])
                continue;
            double start = kc_profile_clock(profile);
            KC_TRY(first && img == 0 ? kc_session_first_on(s, i, &s->head_plan, head)
                                     : kc_session_node_on(s, i, &s->head_plan, head));
            kc_profile_since(profile, i, start); /* the lane's images summed */
        }
        for (int j = 0; j < s->n_head_out; j++) {
            int v = s->head_out[j];
            size_t n = (size_t)s->head_size[j];
            memcpy(lane + s->plan.offset[v] + (size_t)img * n, head + s->head_plan.offset[v],
                   n * sizeof(float));
        }
    }
    return KC_OK;
}
