/* Help between batch lanes: a lane that has run all its nodes takes
 * pieces of the layer another lane is still running.
 *
 * Why: batch lanes (runtime/lanes.c) each run their images through the
 * whole model on one thread and meet once, at the end. On the shared
 * 2-vCPU machines one vCPU often runs slower than the other for minutes
 * (the host's other work): ResNet50 at batch 8, lanes of four images,
 * took 120 ms on one vCPU and 150-170 on the other for whole processes,
 * and the batch waited on the slower lane: 19-21 ms an image against
 * 15.5 with the two level. Here the lane done first takes what is left
 * of the slower lane's layers, piece by piece (base/claims.h), until
 * that lane is done too.
 *
 * How: the lanes of a run share a board (kc_help_board), a slot per
 * lane. A kernel that can cut its work (kernels/pw.c by pixels,
 * kernels/wino_fly.c) asks kc_help_parts() whether any lane is idle; if
 * so it cuts its units into that many more parts (claims: its own part
 * first, the helpers' taken from the back of the runs), posts a task on
 * its slot, runs its part and then closes the task, waiting for any
 * helper still inside. A helper that finds a task takes a part number
 * and runs the task's function for it. A piece is computed the same way
 * whichever thread takes it: the outputs keep their bits.
 *
 * Not with more lanes than the process's CPUs, and a helper that finds
 * nothing to run for a while yields its CPU at each look (other work may
 * want it). KC_HELP=0: no lane helps another (read when a board is made). */
#ifndef KC_BASE_HELP_H
#define KC_BASE_HELP_H

#include <stdatomic.h>

/* A lane's offer: fn(arg, part) runs part `part` (1 .. parts-1; the
 * owner runs part 0 itself) until the claims have nothing left, and
 * returns the units it ran. */
typedef struct kc_help_task {
    /* a line of its own: helpers take part numbers here, and the task
     * lives on the owner's stack beside its hot locals */
    _Alignas(64) long (*fn)(void *arg, int part);
    void *arg;
    int parts;
    _Atomic int next_part; /* the next helper's part */
} kc_help_task;

#define KC_HELP_MAX_LANES 16

/* One run's board, shared by its lanes (on the run's stack). */
typedef struct kc_help_board {
    int lanes;
    int enabled;           /* 0: KC_HELP=0, nothing is ever posted */
    /* Tests only (0 from kc_help_board_init): after posting, the owner
     * waits (up to 2 s, yielding its CPU) until a helper has taken a
     * part, so that a test sees help even when the helper's thread is
     * not scheduled while the owner runs (a loaded machine, ctest -j). */
    int wait_for_helper;
    _Atomic int started;   /* lanes begun (kc_help_enter) */
    _Atomic int running;   /* lanes still running their own nodes */
    _Atomic int idle;      /* lanes done with their own nodes, helping */
    _Atomic long helped;   /* units helpers ran, over the run */
    struct {
        _Alignas(64) _Atomic(kc_help_task *) task; /* NULL: nothing posted */
        _Atomic long posts; /* tasks posted so far: a helper serves each once */
        _Atomic int inside; /* helpers looking at or running the task */
    } slot[KC_HELP_MAX_LANES];
} kc_help_board;

/* A board for `lanes` lanes (at most KC_HELP_MAX_LANES). */
void kc_help_board_init(kc_help_board *b, int lanes);

/* The calling thread runs lane `lane` of board b (NULL: none, after). */
void kc_help_enter(kc_help_board *b, int lane);

/* The calling lane is done with its own nodes: help the others until
 * every lane is done, then leave the board. Only once every lane has
 * begun: a team smaller than the lanes runs some of them one after the
 * other on a thread, which must not wait for a lane it is still to run. */
void kc_help_finish(void);

/* Parts a kernel on the calling thread should cut its work into: 1
 * outside a lane or with no lane idle, else 1 + the idle lanes. */
int kc_help_parts(void);

/* Post t (fn, arg and parts set) on the calling lane's slot. */
void kc_help_open(kc_help_task *t);

/* Take it down and wait until no helper is inside: then every piece a
 * helper took is done and its writes are visible here. */
void kc_help_close(kc_help_task *t);

/* Units (a kernel's pieces of work) helpers ran over the board's run. */
long kc_help_helped(const kc_help_board *b);

#endif
