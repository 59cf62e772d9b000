/* An inner convolution's output laid on the output grid by phase
 * (phase_grid.h). */
#include "kernels/phase_grid.h"

#include <string.h>

#include "base/threads.h"

typedef struct kc_phase_copy {
    const kc_phase_grid *grid;
    const float *q;
    float *out;
    int64_t q_h, q_w, out_h, out_w;
} kc_phase_copy;

/* Output rows [lo, hi) over (image, row): a pixel's filters one memcpy, a
 * one-filter layer's (a decoder's head) one float each. */
static void kc_phase_rows(void *arg, int64_t lo, int64_t hi)
{
    const kc_phase_copy *j = arg;
    const kc_phase_grid *g = j->grid;
    int64_t f = g->f, sh = g->s[0], sw = g->s[1], fs = sh * sw * f;
    for (int64_t r = lo; r < hi; r++) {
        int64_t n = r / j->out_h, y = r % j->out_h, a = y % sh;
        const float *q_row = j->q + (n * j->q_h + y / sh + g->off[0][a]) * j->q_w * fs + a * sw * f;
        float *o = j->out + r * j->out_w * f;
        if (f == 1)
            for (int64_t x = 0; x < j->out_w; x++)
                o[x] = q_row[(x / sw + g->off[1][x % sw]) * fs + x % sw];
        else
            for (int64_t x = 0; x < j->out_w; x++, o += f) {
                int64_t b = x % sw;
                memcpy(o, q_row + (x / sw + g->off[1][b]) * fs + b * f, (size_t)f * sizeof *o);
            }
    }
}

void kc_phase_grid_copy(const kc_phase_grid *grid, const float *q, const kc_shape *q_shape,
                        float *out, const kc_shape *out_shape)
{
    kc_phase_copy job = {grid, q, out, q_shape->dims[1], q_shape->dims[2], out_shape->dims[1],
                         out_shape->dims[2]};
    kc_parallel_for(out_shape->dims[0] * out_shape->dims[1],
                    kc_count(out_shape) * (int64_t)sizeof(float), 1, kc_phase_rows, &job);
}
