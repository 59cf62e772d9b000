#include "base/help.h"

#include <sched.h>
#include <stddef.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/threads.h"

/* Empty looks at the board a waiting helper spins through before it
 * yields its CPU at each look (a look and a pause: some 10 us). */
#define KC_HELP_SPINS 256

/* The board and lane of the calling thread (NULL, -1 outside a lane). */
static __thread kc_help_board *kc_help_now;
static __thread int kc_help_lane = -1;
/* Per slot, the post this thread last served (took a part of, or found
 * full): it does not come back to it. */
static __thread long kc_help_served[KC_HELP_MAX_LANES];

void kc_help_board_init(kc_help_board *b, int lanes)
{
    b->lanes = lanes < KC_HELP_MAX_LANES ? lanes : KC_HELP_MAX_LANES;
    /* Not with more lanes than CPUs: a helper descheduled inside a part
     * holds up the owner's close, and the waiting ones take the time of
     * the lanes still running (ResNet50 at batch 8 in 8 lanes on the
     * 2-vCPU machine: 1.1-1.2x the time with help) */
    b->enabled = b->lanes > 1 && b->lanes <= kc_threads_cpus() && !kc_env_off("KC_HELP");
    b->wait_for_helper = 0;
    atomic_init(&b->started, 0);
    atomic_init(&b->running, b->lanes);
    atomic_init(&b->idle, 0);
    atomic_init(&b->helped, 0);
    for (int k = 0; k < KC_HELP_MAX_LANES; k++) {
        atomic_init(&b->slot[k].task, NULL);
        atomic_init(&b->slot[k].posts, 0);
        atomic_init(&b->slot[k].inside, 0);
    }
}

void kc_help_enter(kc_help_board *b, int lane)
{
    kc_help_now = b && lane >= 0 && lane < b->lanes ? b : NULL;
    kc_help_lane = kc_help_now ? lane : -1;
    if (kc_help_now)
        atomic_fetch_add(&b->started, 1);
    for (int k = 0; k < KC_HELP_MAX_LANES; k++)
        kc_help_served[k] = 0;
}

int kc_help_parts(void)
{
    kc_help_board *b = kc_help_now;
    if (!b || !b->enabled)
        return 1;
    return 1 + atomic_load_explicit(&b->idle, memory_order_relaxed);
}

void kc_help_open(kc_help_task *t)
{
    atomic_init(&t->next_part, 1);
    kc_help_board *b = kc_help_now;
    atomic_fetch_add_explicit(&b->slot[kc_help_lane].posts, 1, memory_order_relaxed);
    /* release: the task's fields and everything written before (the
     * layer's input, the owner's transformed tiles) before the pointer */
    atomic_store_explicit(&b->slot[kc_help_lane].task, t, memory_order_release);
    if (b->wait_for_helper) {
        double start = kc_now();
        while (atomic_load(&t->next_part) < 2 && kc_now() - start < 2.0)
            sched_yield();
    }
}

void kc_help_close(kc_help_task *t)
{
    (void)t;
    kc_help_board *b = kc_help_now;
    /* Seq_cst store then load, against the helper's seq_cst increment
     * then load (kc_help_try): either this sees the helper inside and
     * waits, or the helper sees no task. */
    atomic_store(&b->slot[kc_help_lane].task, NULL);
    while (atomic_load(&b->slot[kc_help_lane].inside) > 0)
        __builtin_ia32_pause();
}

/* Lane l's task, if one is posted with a part left: run that part. 1
 * when a part ran. */
static int kc_help_try(kc_help_board *b, int l)
{
    /* the cheap look first, reads only: the line stays shared while idle */
    long post = atomic_load_explicit(&b->slot[l].posts, memory_order_relaxed);
    if (post == kc_help_served[l] || !atomic_load_explicit(&b->slot[l].task, memory_order_relaxed))
        return 0;
    atomic_fetch_add(&b->slot[l].inside, 1);
    kc_help_task *t = atomic_load(&b->slot[l].task);
    /* the count read after the task: this task's post or a later one */
    kc_help_served[l] = atomic_load_explicit(&b->slot[l].posts, memory_order_relaxed);
    int ran = 0;
    if (t) {
        int part = atomic_fetch_add_explicit(&t->next_part, 1, memory_order_acquire);
        if (part < t->parts) {
            atomic_fetch_add_explicit(&b->helped, t->fn(t->arg, part), memory_order_relaxed);
            ran = 1;
        }
    }
    /* release: the part's outputs before the owner's close sees it gone */
    atomic_fetch_sub_explicit(&b->slot[l].inside, 1, memory_order_release);
    return ran;
}

void kc_help_finish(void)
{
    kc_help_board *b = kc_help_now;
    if (!b)
        return;
    int me = kc_help_lane;
    /* no longer anyone's owner: kc_help_parts is 1 on this thread */
    kc_help_now = NULL;
    kc_help_lane = -1;
    atomic_fetch_sub(&b->running, 1);
    if (!b->enabled || atomic_load(&b->started) < b->lanes)
        return;
    atomic_fetch_add(&b->idle, 1);
    long empty = 0; /* looks in a row that found nothing to run */
    while (atomic_load_explicit(&b->running, memory_order_acquire) > 0) {
        int ran = 0;
        for (int l = 0; l < b->lanes; l++)
            if (l != me)
                ran |= kc_help_try(b, l);
        empty = ran ? 0 : empty + 1;
        /* with more lanes than CPUs (or other work on them), a waiting
         * helper gives its CPU up between looks: spinning on, it took
         * the time of the lanes still running (ResNet50 at batch 8 on 8
         * lanes of the 2-vCPU machine: 1.15-1.2x the time) */
        if (empty > KC_HELP_SPINS)
            sched_yield();
        else if (!ran)
            __builtin_ia32_pause();
    }
    atomic_fetch_sub(&b->idle, 1);
}

long kc_help_helped(const kc_help_board *b)
{
    return atomic_load_explicit(&b->helped, memory_order_relaxed);
}
