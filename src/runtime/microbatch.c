/* Throughput mode: a batch larger than the session's micro-batch runs as
 * consecutive micro-batches through one plan (one arena, one residency
 * plan, resident weights uploaded once). The last micro-batch is padded
 * with zeros to the full micro-batch size rather than re-planned: Keras
 * inference layers compute every sample independently, so the padding
 * only costs time, and a smaller last run would re-plan the device. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "runtime/session_internal.h"

static void kc_free_all(kc_tensor **t, int n)
{
    for (int i = 0; i < n; i++) {
        kc_tensor_free(t[i]);
        t[i] = NULL;
    }
}

/* Rows [first, first + rows) of `src` into `dst` (micro-batch sized),
 * zeros after them. */
static void kc_fill_chunk(const kc_tensor *src, kc_tensor *dst, int64_t first, int64_t rows)
{
    size_t row = kc_dtype_size(src->dtype) * (size_t)(kc_shape_count(&src->shape) /
                                                      (src->shape.dims[0] ? src->shape.dims[0] : 1));
    size_t total = row * (size_t)dst->shape.dims[0];
    memcpy(dst->data, (const char *)src->data + row * (size_t)first, row * (size_t)rows);
    memset((char *)dst->data + row * (size_t)rows, 0, total - row * (size_t)rows);
}

/* The full-batch outputs, shaped like the first micro-batch's with the
 * batch dimension widened. */
static kc_status kc_alloc_outputs(kc_tensor **chunk_out, int n, int64_t batch, kc_tensor **out)
{
    for (int i = 0; i < n; i++) {
        kc_shape shape = chunk_out[i]->shape;
        if (shape.rank < 1)
            return kc_fail(KC_ERR_SHAPE, "output %d has no batch dimension to split", i);
        shape.dims[0] = batch;
        KC_TRY(kc_tensor_new(KC_F32, shape.rank, shape.dims, &out[i]));
    }
    return KC_OK;
}

kc_status kc_session_run_microbatched(kc_session *s, const kc_tensor *const *inputs,
                                      int n_inputs, kc_tensor **outputs, int n_outputs)
{
    if (n_inputs > KC_PLAN_MAX_INPUTS || n_outputs > KC_PLAN_MAX_INPUTS || !outputs)
        return kc_fail(KC_ERR_LIMIT, "micro-batching: too many inputs or outputs");
    int64_t batch = inputs[0]->shape.dims[0], m = s->microbatch;
    kc_tensor *chunk_in[KC_PLAN_MAX_INPUTS] = {0}, *chunk_out[KC_PLAN_MAX_INPUTS] = {0};
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = NULL;
    kc_status st = KC_OK;
    for (int i = 0; st == KC_OK && i < n_inputs; i++) {
        if (!inputs[i] || inputs[i]->shape.rank < 1 || inputs[i]->shape.dims[0] != batch)
            st = kc_fail(KC_ERR_SHAPE, "input %d: every input needs the same batch size", i);
        else {
            kc_shape shape = inputs[i]->shape;
            shape.dims[0] = m;
            st = kc_tensor_new(inputs[i]->dtype, shape.rank, shape.dims, &chunk_in[i]);
        }
    }
    for (int64_t first = 0; st == KC_OK && first < batch; first += m) {
        int64_t rows = batch - first < m ? batch - first : m;
        for (int i = 0; i < n_inputs; i++)
            kc_fill_chunk(inputs[i], chunk_in[i], first, rows);
        st = kc_session_run_whole(s, (const kc_tensor *const *)chunk_in, n_inputs, chunk_out,
                                  n_outputs);
        for (int i = 0; st == KC_OK && i < n_outputs; i++)
            if (chunk_out[i]->shape.rank < 1 || chunk_out[i]->shape.dims[0] != m)
                st = kc_fail(KC_ERR_SHAPE, "output %d does not keep the batch dimension: run "
                             "without micro-batches", i);
        if (st == KC_OK && !outputs[0] && n_outputs)
            st = kc_alloc_outputs(chunk_out, n_outputs, batch, outputs);
        for (int i = 0; st == KC_OK && i < n_outputs; i++) {
            size_t row = (size_t)(kc_shape_count(&chunk_out[i]->shape) / m) * sizeof(float);
            memcpy((char *)outputs[i]->data + row * (size_t)first, chunk_out[i]->data,
                   row * (size_t)rows);
        }
        kc_free_all(chunk_out, n_outputs);
    }
    kc_free_all(chunk_in, n_inputs);
    if (st != KC_OK)
        kc_free_all(outputs, n_outputs);
    return st;
}
