/* Bringing a layer's input into this core's caches in one pass in
 * address order before a kernel reads it in its own.
 *
 * Why: on two threads, the half of a layer's input that the other thread
 * wrote sits in the other core's cache, and a kernel that reads it in an
 * order of its own waits on those lines one after another when it reads
 * many streams at once, more than the hardware's fetch follows (a
 * Winograd input transform reads a tile's 36 cells side by side, 16
 * channels of each at a time). Read in address order first, the same
 * lines come at the rate of one stream: ~28 GB/s from the other core on
 * the Zen 5 of bench/results (100 KB in 3.6 us, against 1.2 us from the
 * core's own L2). ResNet50 at batch 1 on two threads, each thread
 * transforming all 16 tiles of a 14x14 layer of 256 channels
 * (wino_fly.c): 56 us a layer, 36 with this pass first (the pass
 * included), 28 on one thread. A 1x1 kernel's blocks (6 to 8 pixel rows
 * read side by side) gained nothing from it. */
#include "kernels/touch.h"

#include <stdatomic.h>

#include "base/env.h"

static _Atomic int64_t kc_touch_lines_read;

int kc_touch_wanted(void) { return !kc_env_off("KC_TOUCH"); }

int64_t kc_touch_lines(void) { return atomic_load_explicit(&kc_touch_lines_read, memory_order_relaxed); }

void kc_touch(const void *at, int64_t bytes)
{
    if (!at || bytes <= 0)
        return;
    /* four chains of loads, so that the core asks for many lines at
     * once; their sum goes to a volatile so that the loads stay */
    const volatile unsigned char *p = at;
    unsigned sum[4] = {0, 0, 0, 0};
    int64_t line = 0, lines = 0;
    for (; line + 4 * 64 <= bytes; line += 4 * 64, lines += 4)
        for (int j = 0; j < 4; j++)
            sum[j] += p[line + 64 * j];
    for (; line < bytes; line += 64, lines++)
        sum[0] += p[line];
    /* the last line, where `at` is not at a line's start */
    if (((uintptr_t)at & 63) != 0) {
        sum[1] += p[bytes - 1];
        lines++;
    }
    volatile unsigned sink = sum[0] + sum[1] + sum[2] + sum[3];
    (void)sink;
    atomic_fetch_add_explicit(&kc_touch_lines_read, lines, memory_order_relaxed);
}
